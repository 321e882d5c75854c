# syntax=docker/dockerfile:1
# The cairn server image: a static binary on Debian 12 (slim). Debian, not
# distroless: exec steps run programs of the bundle, often POSIX shell scripts (see
# examples/), in a bubblewrap sandbox whose tools (bwrap, pasta, nsenter, ip) come
# from Debian's packages, the ones the tests run the sandbox with; and the
# HEALTHCHECK needs an HTTP client (wget).
# Base images are pinned; bump them deliberately (pin digests for releases).
# internal/imagetest builds and runs this file (with stand-ins for the two base
# images, built from Debian's packages by scripts/image-bases.sh, where no registry
# is reachable).

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
	go build -trimpath -ldflags="-s -w" -o /out/cairn ./cmd/cairn

FROM debian:12.15-slim
# bubblewrap, util-linux (setpriv, nsenter, and prlimit, which enforces exec steps'
# resources with rlimits where the container's cgroup v2 is not delegated), passt
# (pasta: the handlers' network) and iproute2: the exec sandbox (docs/security.md).
RUN apt-get update \
	&& apt-get install -y --no-install-recommends ca-certificates tzdata bubblewrap util-linux passt iproute2 wget python3 nodejs \
	&& rm -rf /var/lib/apt/lists/* \
	&& groupadd --system --gid 10001 cairn \
	&& useradd --system --uid 10001 --gid cairn --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin cairn
COPY --from=build /out/cairn /usr/local/bin/cairn
# Exec handlers run in a bubblewrap sandbox inside a user namespace (docs/security.md
# "Containers"): the runtime's default seccomp profile and its masked /proc refuse
# it, so run the container with a seccomp profile that allows user namespaces and
# /proc unmasked (Docker and podman: --security-opt seccomp=unconfined
# --security-opt systempaths=unconfined), and --device /dev/net/tun for handlers
# with a network; or set CAIRN_EXEC_ISOLATION=none knowingly.
USER 10001:10001
# Extracted bundles and downloaded inputs (CAIRN_CACHE_DIR default: $TMPDIR/cairn-cache).
WORKDIR /tmp
ENV CAIRN_LISTEN=0.0.0.0:8080
EXPOSE 8080
# Ready = database, blob store and schema all answer (/readyz). The port is the one
# of CAIRN_LISTEN above: change both together.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
	CMD wget -q -O /dev/null http://127.0.0.1:8080/readyz || exit 1
ENTRYPOINT ["/usr/local/bin/cairn"]
CMD ["serve"]
