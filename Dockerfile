# syntax=docker/dockerfile:1
# The cairn server image: a static binary on Alpine. Alpine rather than distroless
# because exec steps run programs of the bundle, often POSIX shell scripts (see
# examples/), and because the HEALTHCHECK needs an HTTP client (busybox wget).
# Base images are pinned; bump them deliberately (pin digests for releases).

FROM golang:1.26.5-alpine3.24 AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
	go build -trimpath -ldflags="-s -w" -o /out/cairn ./cmd/cairn

FROM alpine:3.24.1
# util-linux brings prlimit, which enforces exec steps' resources with rlimits where
# the container's cgroup v2 is not delegated (docs/functions.md). python3 and nodejs
# run exec handlers written on the Python and TypeScript SDKs (examples/hello,
# examples/fanout).
RUN apk add --no-cache ca-certificates tzdata bubblewrap util-linux python3 nodejs \
	&& addgroup -S -g 10001 cairn \
	&& adduser -S -D -H -u 10001 -G cairn -s /sbin/nologin cairn
COPY --from=build /out/cairn /usr/local/bin/cairn
# Exec handlers run in a bubblewrap sandbox inside a user namespace (docs/security.md):
# Docker's default seccomp profile refuses those, so run the container with a profile
# that allows them, or set CAIRN_EXEC_ISOLATION=none knowingly.
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
