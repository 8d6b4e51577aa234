#!/usr/bin/env bash
# One-command set-up on a fresh Debian machine (run as root or with sudo):
#   tools/quickstart.sh demo   install what is missing, build, run the
#                              all-reduce bench on 4 local ranks
#   tools/quickstart.sh test   install what is missing, build with warnings
#                              as errors, run the whole test suite
# BUILD_DIR (default build) chooses the build directory.
set -euo pipefail

mode=${1:-demo}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}

# OpenBLAS, zlib and Fashion-MNIST are hoop-train's; matplotlib draws its
# curves and the bench plots.
packages=(build-essential cmake ninja-build pkg-config libgtest-dev
          libopenblas-dev zlib1g-dev dataset-fashion-mnist python3-matplotlib)
# mpirun lets the tests check that hoop programs run unchanged under it;
# iproute2 lets them build emulated hosts (network namespaces).
[ "$mode" = test ] && packages+=(openmpi-bin iproute2)

install_missing() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
      missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  echo "quickstart: installing ${missing[*]}"
  local sudo=
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
    --no-install-recommends "${missing[@]}"
}

configure_and_build() {
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
  cmake --build "$build"
}

case "$mode" in
demo)
  install_missing
  configure_and_build
  "$build/tools/hoop-run" -n 4 "$build/bench/hoop-bench" -b 4K -e 64M -f 4 \
    -n 20 -w 5
  ;;
test)
  install_missing
  configure_and_build -DHOOP_WERROR=ON
  cd "$build"
  ctest --output-on-failure --timeout 900 -j 2
  ;;
*)
  echo "usage: $0 demo|test" >&2
  exit 2
  ;;
esac
