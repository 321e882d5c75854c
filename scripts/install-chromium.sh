#!/usr/bin/env bash
# Installs what the web UI's browser tests (cmd/cairn/ui_browser_test.go) drive:
# Debian's chromium, headless. On Debian as root it installs it from Debian's
# packages; elsewhere it says what to install and exits 0, so that `make tools`
# goes on (the browser tests then fail under CI=true and skip otherwise).
set -euo pipefail
for name in chromium chromium-browser google-chrome; do
	command -v "$name" >/dev/null 2>&1 && exit 0
done
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
	echo "installing chromium (the web UI's browser tests)" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 ||
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
	exit 0
fi
echo "install-chromium: chromium missing: install it (Debian: apt-get install chromium) for the web UI's browser tests" >&2
