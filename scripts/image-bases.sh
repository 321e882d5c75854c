#!/usr/bin/env bash
# Builds the two base images the Dockerfile names, where no image registry can be
# reached, from Debian's packages, under the same name and tag (internal/imagetest):
#   debian:<tag>   mmdebstrap --variant=minbase of Debian 12 (bookworm), as
#                  Debian's own slim image is built;
#   golang:<tag>   that image with ca-certificates and git (what the official
#                  golang:*-bookworm image adds), this machine's own certificate
#                  authorities, and its Go toolchain in /usr/local/go, which must
#                  be the version the tag names.
# Idempotent: an image that exists is kept (podman keeps them in its storage,
# /var/lib/containers). Costs on a fresh machine: mmdebstrap ≈ 1–5 min (it downloads
# ≈ 40 MB of packages), the golang image ≈ 1 min.
set -euo pipefail
cd "$(dirname "$0")/.."
podman=(podman --runtime runc)
# nofile and nproc within this machine's hard limits: runc refuses the defaults here.
ulimits=(--ulimit nofile=1024:1024 --ulimit nproc=4096:4096)
debian=$(awk '$1 == "FROM" && $2 ~ /^debian:/ {print $2; exit}' Dockerfile)
golang=$(awk '$1 == "FROM" && $2 ~ /^golang:/ {print $2; exit}' Dockerfile)
[[ -n $debian && -n $golang ]] || { echo "image-bases: the Dockerfile names no debian: or golang: base" >&2; exit 1; }

if ! "${podman[@]}" image exists "$debian"; then
	echo "image-bases: building $debian with mmdebstrap" >&2
	mmdebstrap --variant=minbase --quiet bookworm - |
		"${podman[@]}" import --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$debian" >/dev/null
	# Debian's mirror serves the newest point release of bookworm: say so when
	# it is not the one the tag names (the packages differ by updates only).
	point=$("${podman[@]}" run --rm --network host "${ulimits[@]}" "$debian" cat /etc/debian_version)
	want=${debian#debian:}
	want=${want%%-*}
	[[ $point == "$want" ]] || echo "image-bases: $debian holds Debian $point (the mirror's newest point release): bump the Dockerfile's tag to debian:$point-slim" >&2
fi

if ! "${podman[@]}" image exists "$golang"; then
	want=${golang#golang:}
	want=go${want%%-*}
	have=$(go env GOVERSION)
	if [[ $have != "$want" ]]; then
		echo "image-bases: $golang needs Go $want; this machine has $have: bump the Dockerfile's tag to it" >&2
		exit 1
	fi
	echo "image-bases: building $golang from $debian and $(go env GOROOT)" >&2
	dir=$(mktemp -d)
	trap 'rm -rf "$dir"' EXIT
	# The build context: the toolchain, and this machine's own certificate
	# authorities (/usr/local/share/ca-certificates: a TLS-inspecting proxy's, on
	# machines whose way to the Go module proxy goes through one), which the
	# image trusts as this machine does.
	cp -a "$(go env GOROOT)" "$dir/go"
	mkdir -p "$dir/ca"
	cp /usr/local/share/ca-certificates/*.crt "$dir/ca/" 2>/dev/null || true
	cat >"$dir/Containerfile" <<CONTAINERFILE
FROM $debian
COPY ca/ /usr/local/share/ca-certificates/
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates git && rm -rf /var/lib/apt/lists/* \\
	&& update-ca-certificates
COPY go /usr/local/go
ENV GOLANG_VERSION=${want#go} GOTOOLCHAIN=local GOPATH=/go PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /go
CONTAINERFILE
	"${podman[@]}" build --quiet --network host "${ulimits[@]}" -f "$dir/Containerfile" -t "$golang" "$dir" >/dev/null
fi
