// Package imagetest builds the container image from the repository's Dockerfile
// and runs it for real, with podman and runc (Debian's packages, installed by
// scripts/install-podman.sh), driven through podman's Docker-compatible API
// (`podman system service`) by dockertest, as a user of Docker would run it. No
// image registry is reachable from the machines it runs on, so the two base images
// the Dockerfile names are stood in for by images built here from Debian's
// packages under the same name and tag (scripts/image-bases.sh); the Dockerfile
// built is the one that ships.
//
// It is slow (an image build) and needs root, so `make test` runs it in a stage of
// its own (`make test-image`), not among the other packages.
//
// The package holds tests only; it is no library.
package imagetest
