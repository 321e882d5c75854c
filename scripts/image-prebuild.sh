#!/usr/bin/env bash
# Builds the stand-in base images and the Dockerfile as cairn:imagetest, as
# internal/imagetest does (its build is then a cache hit). `make test` runs it in the
# background beside the Go tests: most of a first build is waiting for Debian's
# mirror and the Go proxy, which the tests' processor time can overlap.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v podman >/dev/null 2>&1 || exit 0
scripts/image-bases.sh
nofile=$(ulimit -Hn)
# At most 4096 processes, as internal/imagetest's limits: runc refuses to set
# this VM's hard limit (96367) in the container ("error setting rlimit type 6:
# operation not permitted"), and then the prebuild built nothing.
nproc=$(ulimit -Hu)
if [ "$nproc" = unlimited ] || [ "$nproc" -gt 4096 ]; then
	nproc=4096
fi
podman --runtime runc build --network host --tag cairn:imagetest --file Dockerfile \
	--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc" .
