#!/usr/bin/env bash
# Installs what g4tp needs to build and test, only where it is missing (Debian 12, as root).
#   scripts/install-deps.sh          build + test dependencies
#   scripts/install-deps.sh --build  only what building needs
# Why each package is there: see README.md, "Dependencies".
set -eu
cd "$(dirname "$0")/.."
mode=${1:-}
need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in build-essential libjansson-dev libxxhash-dev libmicrohttpd-dev libpng-dev libjpeg-dev libwebp-dev libcurl4-openssl-dev; do have_pkg "$p" || need+=("$p"); done
if [ "$mode" != "--build" ]; then
  for p in libcmocka-dev openmpi-bin libopenmpi-dev python3 python3-numpy python3-jinja2 python3-pil curl time pkg-config clang libclang-rt-14-dev chromium prometheus; do
    have_pkg "$p" || need+=("$p")
  done
  # node and npm may come from outside Debian's packages (they are preinstalled here)
  command -v node >/dev/null || have_pkg nodejs || need+=(nodejs)
  command -v npm >/dev/null || have_pkg npm || need+=(npm)
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then echo "missing packages: ${need[*]} (run as root or install them)" >&2; exit 1; fi
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Node packages used by the tests (reference tokenizer data, the SDK clients, playwright-core),
# again when the lock file changed since the last install.
if [ "$mode" != "--build" ] && [ -f tests/node/package.json ] &&
   { [ ! -f tests/node/node_modules/.package-lock.json ] || [ tests/node/package-lock.json -nt tests/node/node_modules/.package-lock.json ]; }; then
  (cd tests/node && npm ci --no-audit --no-fund --silent)
fi
