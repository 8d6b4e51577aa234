#!/usr/bin/env bash
# One-command set-up on a bare Debian 12 machine, as root or, for a normal
# user, through sudo:
#   tools/quickstart.sh demo   install what is missing, build, run the
#                              all-reduce bench on 4 local ranks
#   tools/quickstart.sh test   install what is missing, build with warnings
#                              as errors, run the whole test suite (the
#                              fuzz targets for 60 s each among it), then
#                              a subset again under ASan and UBSan
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
# pybind11; python3-venv for the test of its pip install), fuzz the
# parsers with clang's libFuzzer, and build the RDMA code against the real
# libibverbs (no device is needed: the tests that need one skip).
[ "$mode" = test ] && packages+=(openmpi-bin libopenmpi-dev python3-torch
                                 libtorch-dev pybind11-dev python3-venv
                                 iproute2 iputils-ping procps clang
                                 libclang-rt-dev libibverbs-dev)

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

# The suites that reach every transport (shm, tcp again under the "tcp."
# prefix, ib over the fake verbs), the set-up and its attacks, the error
# paths and going on after them (shrink, grow and join, which read what
# other processes send), with a few collectives of every kind, built again
# with AddressSanitizer and UBSan, where any report fails the test.
sanitized_suites=(test_security test_wire test_errors test_bootstrap test_shm
                  test_p2p test_collectives test_ib_fake test_elastic)
sanitized_cases='^(tcp\.)?(Auth|Malformed|Flood|Seals|Transports|Wire|Errors'
sanitized_cases+='|Shrink|Grow\.|Form\.'
sanitized_cases+='|P2PErrors|Bootstrap|SocketIfname|Shm|Slots|Topology'
sanitized_cases+='|Ranks/AllToAll|Ranks/Groups|Ranks/Blocking'
sanitized_cases+='|FakeVerbs|Fake/IbCollectives|IbCollectives|IbTeardown'
sanitized_cases+='|IbFailures|IbArm'
sanitized_cases+='|Ranks/Collectives\.EveryDtypeOpSizeAndPlacementMatchesReference'
sanitized_cases+='/(3ranks_smallslices_3socks|4ranks_default))'

test_sanitized() {
  local asan=$build-asan
  cmake -S "$root" -B "$asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DHOOP_WERROR=ON -DHOOP_SANITIZE=ON -DHOOP_ENABLE_CUDA=OFF \
    -DHOOP_FUZZ_SECONDS=0
  cmake --build "$asan" --target "${sanitized_suites[@]}"
  (cd "$asan" && UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure --timeout 300 -j 2 -R "$sanitized_cases")
}

install_missing
case "$mode" in
demo)
  configure_and_build
  "$build/tools/hoop-run" -n 4 "$build/bench/hoop-bench" -b 4K -e 64M -f 4 \
    -n 20 -w 5
  ;;
test)
  # Each libFuzzer target for 20 s rather than 60: CI's clean-root run came
  # to 45 of its 45 minutes on 2 cores (2026-11-28), and the eight fuzzers
  # run at the end, nearly alone.  Longer runs: ctest in a build configured
  # with a larger HOOP_FUZZ_SECONDS.
  configure_and_build -DHOOP_WERROR=ON -DHOOP_FUZZ_SECONDS=20
  (cd "$build" && ctest --output-on-failure --timeout 900 -j 2)
  test_sanitized
  ;;
esac
