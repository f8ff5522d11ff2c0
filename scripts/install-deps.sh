#!/usr/bin/env bash
# Installs every Debian package the build and the tests need. Idempotent: packages already at
# the pinned version are left alone. Versions are those of Debian 12 (bookworm); where the archive
# has moved past a pin (a point release), the archive's version is installed and a warning printed.
#   scripts/install-deps.sh                      the build's and the tests' packages (below)
#   scripts/install-deps.sh NAME=VERSION ...     these instead (scripts/prepare_demo_data.sh)
set -euo pipefail

# name=version, one place.
PACKAGES=(
  cmake=3.25.1-1
  ninja-build=1.11.1-2~deb12u1
  g++=4:12.2.0-3
  libgtest-dev=1.12.1-0.2
  clang-format=1:14.0-55.7~deb12u1
  nlohmann-json3-dev=3.11.2-2
)
if [ $# -gt 0 ]; then PACKAGES=("$@"); fi

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

missing=()
for spec in "${PACKAGES[@]}"; do
  name=${spec%%=*}
  want=${spec#*=}
  have=$(dpkg-query -W -f='${Version}' "$name" 2>/dev/null || true)
  status=$(dpkg-query -W -f='${Status}' "$name" 2>/dev/null || true)
  if [ "$have" != "$want" ] || [[ "$status" != *"install ok installed"* ]]; then missing+=("$spec"); fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: every package is installed at its pinned version"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
if ! $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"; then
  echo "install-deps: warning: a pinned version is not in the archive; installing the archive's versions" >&2
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]%%=*}"
fi
