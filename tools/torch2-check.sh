#!/usr/bin/env bash
# The torch.distributed backend on PyTorch 2, as Debian 13 ships it
# (python3-torch 2.6, CPU): installs what building hoop_torch and its tests
# needs, builds the module (and hoop-run, which torch.elastic launches
# the example with) with warnings as errors, and runs the torch.* tests
# (every call against gloo on 1-4 ranks, DDP, killed ranks, survivors
# shrinking the group, the pip install, FSDP against gloo). Debian 12's PyTorch 1.13 is
# tools/quickstart.sh test's. CI runs it in a fresh Debian 13 root:
#   tools/fresh-check.sh --suite trixie tools/torch2-check.sh
# As root where packages are missing. BUILD_DIR (default build-torch2)
# chooses the build directory.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-torch2}

# tests/CMakeLists.txt, where the torch tests are registered, needs
# GoogleTest to configure, though none of its suites is built here.
# pip_install.sh builds with the system's setuptools (Python 3.13's venv
# brings pip alone) and trains the example on Fashion-MNIST.
packages=(build-essential cmake ninja-build pkg-config libgtest-dev
          python3-torch libtorch-dev pybind11-dev python3-venv
          python3-setuptools dataset-fashion-mnist)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
    missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "torch2-check: ${missing[*]} must be installed; run this as root" >&2
    exit 1
  fi
  echo "torch2-check: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
fi

version=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')
if [ "${version%%.*}" -lt 2 ]; then
  echo "torch2-check: /usr/bin/python3 has torch $version; this is for PyTorch 2 (Debian 13)" >&2
  exit 1
fi
echo "torch2-check: torch $version"

# Debian's PyTorch has no CUDA, so hoop's CUDA build would be compiled for
# nothing.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHOOP_WERROR=ON -DHOOP_ENABLE_TORCH=ON -DHOOP_ENABLE_CUDA=OFF \
  -DHOOP_FUZZ_SECONDS=0
cmake --build "$build" --target hoop_torch_ext hoop-run
# Debian's PyTorch 2.6 is built without libuv, which its TCPStore (env://
# and torchrun's rendezvous) uses by default from 2.4. Where FSDP cannot
# train on CPU, torch.fsdp would skip; here it must run.
cd "$build"
USE_LIBUV=0 HOOP_TORCH_FSDP_REQUIRED=1 \
  ctest --output-on-failure --timeout 300 --no-tests=error -R '^torch\.'
