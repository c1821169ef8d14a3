#!/usr/bin/env bash
# Local base images for `docker build` where no registry is reachable: mmdebstrap builds Debian
# 12 root filesystems from Debian's packages, `docker import` (or `podman import`) turns them into
# images. The build base already holds the build dependencies (scripts/install-deps.sh --build
# then installs nothing, so the image build needs no network); the runtime base holds only the
# runtime libraries (the MPI variant adds OpenMPI's runtime with apt).
#   packaging/base-images.sh [docker|podman]    -> g4tp-base:build, g4tp-base:runtime
set -eu
ENGINE=${1:-docker}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
tmp=$(mktemp -d /tmp/g4tp-base.XXXXXX); trap 'rm -rf "$tmp"' EXIT
have() { $ENGINE image inspect "$1" >/dev/null 2>&1; }
build_pkgs=build-essential,libjansson-dev,libxxhash-dev,libmicrohttpd-dev,libpng-dev,libjpeg-dev,libwebp-dev,openmpi-bin,libopenmpi-dev,ca-certificates
run_pkgs=libjansson4,libxxhash0,libmicrohttpd12,libpng16-16,libjpeg62-turbo,libwebp7,libwebpdemux2
if ! have g4tp-base:build; then
  mmdebstrap --quiet --variant=apt --include=$build_pkgs $SUITE $tmp/build.tar $MIRROR
  $ENGINE import --change 'CMD ["/bin/bash"]' $tmp/build.tar g4tp-base:build >/dev/null
fi
if ! have g4tp-base:runtime; then
  mmdebstrap --quiet --variant=minbase --include=$run_pkgs \
    --customize-hook='rm -rf "$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/usr/share/locale/* "$1"/var/lib/apt/lists/*' \
    $SUITE $tmp/runtime.tar $MIRROR
  $ENGINE import --change 'CMD ["/bin/bash"]' $tmp/runtime.tar g4tp-base:runtime >/dev/null
fi
$ENGINE image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' 2>/dev/null | grep '^g4tp-base' || $ENGINE images | grep g4tp-base
