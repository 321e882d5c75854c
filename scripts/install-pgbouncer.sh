#!/usr/bin/env bash
# Installs PgBouncer, which the PgBouncer leg of `make test` and the failover
# test put between the servers and PostgreSQL (internal/testenv.PgBouncer). On
# Debian as root it installs Debian's package (its service is not started: the
# tests start their own); elsewhere it says what to install and exits 0, so that
# `make tools` goes on (the tests that need it then fail under CI=true and skip
# otherwise).
set -euo pipefail
if command -v pgbouncer >/dev/null 2>&1 || [[ -x /usr/sbin/pgbouncer ]]; then
	exit 0
fi
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
	echo "installing pgbouncer (the PgBouncer and failover tests)" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq pgbouncer >/dev/null 2>&1 ||
		{ apt-get update -qq && apt-get install -y -qq pgbouncer >/dev/null; }
	exit 0
fi
echo "install-pgbouncer: pgbouncer missing: install it (Debian: apt-get install pgbouncer) for the PgBouncer and failover tests" >&2
