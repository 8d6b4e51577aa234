#!/usr/bin/env bash
# One-command set-up on a bare Debian 12 machine, as root or, for a normal
# user, through sudo:
#   tools/quickstart.sh demo   install what is missing, build, run the
#                              all-reduce bench on 4 local ranks
#   tools/quickstart.sh test   install what is missing, build with warnings
#                              as errors, run the whole test suite
# BUILD_DIR (default build) chooses the build directory.
set -euo pipefail

mode=${1:-demo}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}

case "$mode" in
demo | test) ;;
*)
  echo "usage: $0 demo|test" >&2
  exit 2
  ;;
esac

# OpenBLAS, zlib and Fashion-MNIST are hoop-train's; matplotlib draws its
# curves and the bench plots.
packages=(build-essential cmake ninja-build pkg-config libgtest-dev
          libopenblas-dev zlib1g-dev dataset-fashion-mnist python3-matplotlib)
# The tests also check that hoop programs run unchanged under Open MPI's
# mpirun (which needs its headers for the MPI peer bench) and PyTorch's
# torchrun, build emulated hosts with network namespaces (ip, tc, ping),
# and build and test the torch.distributed backend (PyTorch's C++ headers,
# pybind11; python3-venv for the test of its pip install).
[ "$mode" = test ] && packages+=(openmpi-bin libopenmpi-dev python3-torch
                                 libtorch-dev pybind11-dev python3-venv
                                 iproute2 iputils-ping procps)

install_missing() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
      missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "quickstart: ${missing[*]} must be installed; run this as root" \
           "(there is no sudo here)" >&2
      exit 1
    fi
    sudo=(sudo)
  fi
  echo "quickstart: installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "${missing[@]}"
}

configure_and_build() {
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
  cmake --build "$build"
}

install_missing
case "$mode" in
demo)
  configure_and_build
  "$build/tools/hoop-run" -n 4 "$build/bench/hoop-bench" -b 4K -e 64M -f 4 \
    -n 20 -w 5
  ;;
test)
  configure_and_build -DHOOP_WERROR=ON
  cd "$build"
  ctest --output-on-failure --timeout 900 -j 2
  ;;
esac
