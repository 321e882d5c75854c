#!/usr/bin/env bash
# Installs what the container image's test (internal/imagetest) needs, from Debian's
# packages: podman with runc (crun, podman's default, refuses the cgroup setup of
# some VMs), podman-compose, and mmdebstrap, which builds the base images the
# Dockerfile names where no image registry is reachable. Idempotent: it installs
# only what is missing. On Debian as root only; elsewhere it says what to install
# and exits 0 (the image test then fails under CI=true and skips otherwise).
set -euo pipefail
missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || missing+=(runc)
command -v podman-compose >/dev/null 2>&1 || missing+=(podman-compose)
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
if [[ ${#missing[@]} -eq 0 ]]; then
	exit 0
fi
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
	echo "installing ${missing[*]} (the container image's test)" >&2
	export DEBIAN_FRONTEND=noninteractive
	start=$(date +%s)
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
	echo "install-podman: installed in $(($(date +%s) - start)) s" >&2
	exit 0
fi
echo "install-podman: ${missing[*]} missing: install them (Debian: apt-get install ${missing[*]}) for the container image's test" >&2
