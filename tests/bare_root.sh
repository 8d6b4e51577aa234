#!/usr/bin/env bash
# hoop's libraries on a host that has nothing but the C runtime (issue 37):
# a root holding only the test programs, hoop's libraries and what the
# dynamic loader says they need, with no libibverbs, no libcrypto or
# libssl and no CUDA runtime or driver in it.  There, on host buffers and
# 2 ranks, a hoop.h program under hoop-run and a program built against
# NVIDIA's nccl.h and libnccl.so.2, run with hoop's libnccl.so.2 preloaded,
# must give correct results.
#
#   bare_root.sh HOOP_RUN EXAMPLE LIBNCCL [NCCL_PROGRAM]
#
# Needs root, for the private mount namespace and chroot; exits 77
# (skipped) without them.  NCCL_PROGRAM is left out where NVIDIA's library
# was not found at configure time.
set -euo pipefail

[ $# -ge 3 ] || { echo "usage: $0 HOOP_RUN EXAMPLE LIBNCCL [NCCL_PROGRAM]" >&2; exit 2; }
hoop_run=$1 example=$2 libnccl=$3 nccl_program=${4:-}
if [ "$(id -u)" -ne 0 ] || ! unshare -m true 2>/dev/null; then
  echo "bare_root: skipped: needs root and unshare -m to build and enter a root"
  exit 77
fi

root=$(mktemp -d /tmp/hoop-bare.XXXXXX)
trap 'rm -rf "$root"' EXIT

# A file at its own path inside the root, so that run paths and the paths
# compiled into the tests hold there too; a link stays a link, to its
# target put beside it (a test compares the library it runs with that).
put() {
  mkdir -p "$root$(dirname "$1")"
  if [ -L "$1" ]; then
    local target
    target=$(readlink "$1")
    ln -sfn "$target" "$root$1"
    case $target in
    /*) put "$target" ;;
    *) put "$(dirname "$1")/$target" ;;
    esac
  else
    cp "$1" "$root$1"
  fi
}

# A program and every library the loader resolves for it, hoop's included.
put_closure() {
  put "$1"
  local lib
  for lib in $(ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
    [ -e "$root$lib" ] || put "$lib"
  done
}

programs=("$hoop_run" "$example")
[ -n "$nccl_program" ] && programs+=("$nccl_program")
for p in "${programs[@]}"; do
  put_closure "$p"
done
# The NCCL program's own NEEDED libnccl.so.2 is NVIDIA's: the preloaded
# one, which has that soname, answers it, so NVIDIA's must stay out.
find "$root" -name 'libnccl.so*' -delete
put_closure "$libnccl"
mkdir -p "$root/proc" "$root/dev/shm" "$root/tmp"
touch "$root/dev/null"

echo "bare_root: the root holds:"
(cd "$root" && find . -type f | sort | sed 's/^/  /')
forbidden=$(cd "$root" && find . -type f \( -name 'libibverbs*' -o -name 'libcrypto*' \
  -o -name 'libssl*' -o -name 'libcudart*' -o -name 'libcuda.so*' \) | sort)
if [ -n "$forbidden" ]; then
  echo "bare_root: FAIL: the programs need what a bare host lacks:" $forbidden
  exit 1
fi

# Inside a private mount namespace: the root's /proc, /dev/null and its
# own /dev/shm, then each program chrooted there.
export HOOP_TIMEOUT_MS=60000
unshare -m --propagation private bash -euo pipefail -c '
  root=$1 hoop_run=$2 example=$3 libnccl=$4 nccl_program=$5
  mount -t proc proc "$root/proc"
  mount -t tmpfs tmpfs "$root/dev/shm"
  mount --bind /dev/null "$root/dev/null"
  for transport in shm tcp; do
    echo "bare_root: hoop.h program, 2 ranks over $transport"
    HOOP_TRANSPORT=$transport chroot "$root" "$hoop_run" -n 2 "$example"
  done
  if [ -n "$nccl_program" ]; then
    echo "bare_root: NCCL program with LD_PRELOAD=$libnccl, 2 ranks"
    LD_PRELOAD=$libnccl chroot "$root" "$nccl_program" \
      --gtest_filter="Ranks/NcclCollectives.EveryCollectiveTypeAndOperatorMatchesTheReference/1:NcclLibrary.*"
  fi
' bare_root "$root" "$hoop_run" "$example" "$libnccl" "$nccl_program"
echo "bare_root: every run gave correct results"
