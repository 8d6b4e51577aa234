#!/usr/bin/env bash
# Every GPU check in one short device call.  A session lent a GPU gets 15
# minutes of device time, the machine's start included, and that machine
# has no package registry: so everything is built here, and there only
# hoop_torch is compiled, against that machine's PyTorch.
#
#   bench/gpu_kit.sh pack   here: builds what the checks need (Release,
#                           CUDA sm_90), stripped, with every library a
#                           bare image lacks and Fashion-MNIST, into one
#                           xz archive in .kit/ (git-ignored, at most
#                           48 MiB: OpenBLAS alone is 36 MiB unpacked),
#                           and prints the device call
#   bench/gpu_kit.sh run    on the GPU machine: builds hoop_torch in the
#                           background and runs the checks in order, each
#                           under its own time limit, 8 minutes in all
#
# run writes two files into $OUT (the device tool's result folder; .kit-out
# when unset), named with the device and the HEAD that was packed: a
# summary (a table of the steps, then each step's last lines) and an
# archive of every log.  They are written whatever fails.  Without a GPU
# each step says "no GPU" and only checks that its programs load.
# KIT_DIR (default .kit) and BUILD_DIR (default build-kit) move the kit and
# its build; KIT_BUDGET (seconds, default 480) bounds run, which unpacks
# the kit into /tmp/hoop-kit.
set -uo pipefail

mode=${1:-}
root=$(cd "$(dirname "$0")/.." && pwd)
kit=${KIT_DIR:-$root/.kit}

# What the checks run, relative to the build tree.  The kit keeps the
# build tree's layout, so compiled-in paths (tests start hoop-run by its
# build path) and RUNPATHs hold once run links the old path to the kit.
programs=(src/libhoop.so.0 lib/hoop/libnccl.so.2 tools/hoop-run
          bench/hoop-bench bench/hoop-cuda-kernels bench/nccl-layer
          src/train/hoop-train tests/test_cuda tests/test_ib_cuda)
targets=(hoop hoop_nccl hoop-run hoop-bench hoop-cuda-kernels nccl-layer
         hoop-train test_cuda test_ib_cuda)
# Libraries every image has, or the GPU machine's CUDA provides; the rest
# of what the programs need travels in the kit.
provided='^(linux-vdso|ld-linux|libc\.|libm\.|libstdc\+\+|libgcc_s|libpthread|libdl\.|librt\.|libcuda\.|libcublas|libcudart|libnvidia)'
max_mib=48

die() {
  echo "gpu_kit: $*" >&2
  exit 1
}

pack() {
  local build=${BUILD_DIR:-$root/build-kit}
  mkdir -p "$build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DHOOP_FUZZ_SECONDS=0 \
    -DHOOP_ENABLE_TORCH=OFF >"$build/kit-configure.log" 2>&1 ||
    { tail -30 "$build/kit-configure.log"; die "configure failed"; }
  grep -q 'CUDA *: [0-9]' "$build/kit-configure.log" ||
    die "CUDA was not found: the kit is for a GPU machine"
  cmake --build "$build" --target "${targets[@]}" ||
    die "build failed"
  local stage=$build/kit-stage
  rm -rf "$stage" "$kit"
  mkdir -p "$stage/build" "$stage/lib" "$stage/data" "$kit"
  local p deps
  for p in "${programs[@]}"; do
    mkdir -p "$stage/build/$(dirname "$p")"
    cp -L "$build/$p" "$stage/build/$p"
    strip --strip-unneeded "$stage/build/$p"
  done
  # hoop-train's --plot helper, and the shared library under its link name.
  cp "$build/src/train/hoop-plot-metrics" "$stage/build/src/train/"
  deps=$(for p in "${programs[@]}"; do ldd "$build/$p"; done |
         awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u)
  while read -r name path; do
    [ -n "$name" ] || continue
    [[ "$name" =~ $provided ]] && continue
    [ -e "$stage/build/src/$name" ] || [ -e "$stage/build/lib/hoop/$name" ] && continue
    cp -L "$path" "$stage/lib/$name"
    strip --strip-unneeded "$stage/lib/$name" 2>/dev/null || true
  done <<<"$deps"
  local mnist=/usr/share/datasets/fashion-mnist
  [ -f "$mnist/train-images-idx3-ubyte.gz" ] && cp "$mnist"/*-ubyte.gz "$stage/data/"
  local head
  head=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  git -C "$root" diff --quiet HEAD 2>/dev/null || head="$head-dirty"
  echo "$head" >"$stage/HEAD"
  echo "$build" >"$stage/BUILD_DIR"
  echo "$head" >"$kit/HEAD"
  echo "gpu_kit: packing (HEAD $head):"
  (cd "$stage" && find . -type f -printf '  %P %s\n' | sort)
  tar -C "$stage" -cJf "$kit/kit.tar.xz" . || die "tar failed"
  local mib
  mib=$(du -sm "$kit" | cut -f1)
  echo "gpu_kit: $kit holds ${mib} MiB"
  [ "$mib" -le "$max_mib" ] || die "the kit is ${mib} MiB, over ${max_mib}"
  cat <<EOF

Device call (device tool, 'run'):
  command:   bash bench/gpu_kit.sh run
  carry:     [".kit"]
  timeout_s: 560
EOF
}

# ---- run ------------------------------------------------------------------

summary_rows=()
failed=0
prefix=""
head=""
device=""
t_start=0
budget=${KIT_BUDGET:-480}
logs=""
have_gpu=0

# step NAME LIMIT_S COMMAND [PROGRAM...]: runs COMMAND under its limit (cut
# to what is left of the budget), its output in a log of its own.  Without
# a GPU it only checks that the PROGRAMs' libraries all resolve, and the
# step says "no GPU"; a step that names no program needs no GPU and runs.
step() {
  local name=$1 limit=$2 cmd=$3
  shift 3
  local n=$((${#summary_rows[@]} + 1))
  local log="$logs/$(printf %02d "$n")-$name.log"
  local left=$((budget - ($(date +%s) - t_start)))
  [ "$limit" -gt "$left" ] && limit=$left
  local status t0 rc p
  t0=$(date +%s)
  if [ "$limit" -le 0 ]; then
    status="not run: the ${budget} s budget is spent"
    echo "$status" >"$log"
  elif [ "$have_gpu" = 0 ] && [ $# -gt 0 ]; then
    status="no GPU; its programs load"
    for p in "$@"; do
      if ! LD_LIBRARY_PATH="$kit/lib" ldd "$p" >>"$log" 2>&1 ||
         grep -q 'not found' "$log"; then
        status="no GPU; a program does not load (see the log)"
      fi
    done
  else
    timeout -k 5 "$limit" bash -c "$cmd" >"$log" 2>&1
    rc=$?
    case $rc in
    0) status=ok ;;
    124 | 137) status="timed out after ${limit} s" failed=1 ;;
    *) status="failed (rc $rc)" failed=1 ;;
    esac
  fi
  local secs=$(($(date +%s) - t0))
  summary_rows+=("| $n | $name | $status | $secs |")
  echo "gpu_kit: step $n $name: $status (${secs} s)"
}

write_results() {
  local out=${OUT:-$root/.kit-out} prefix=$1
  mkdir -p "$out"
  {
    echo "# GPU kit: $prefix"
    echo
    echo "device: $device; HEAD packed: $head; run: $(date -u +%FT%TZ);" \
         "budget ${budget} s, used $(($(date +%s) - t_start)) s"
    echo
    echo "| step | name | status | seconds |"
    echo "| ---: | --- | --- | ---: |"
    printf '%s\n' "${summary_rows[@]}"
    local f
    for f in "$logs"/*.log; do
      [ -f "$f" ] || continue
      echo
      echo "## $(basename "$f") (last 25 lines)"
      echo '```'
      tail -25 "$f"
      echo '```'
    done
  } >"$out/$prefix-summary.md"
  tar czf "$out/$prefix-logs.tgz" -C "$logs" .
  echo "gpu_kit: wrote $out/$prefix-summary.md and $out/$prefix-logs.tgz"
}

run() {
  [ -f "$kit/kit.tar.xz" ] || die "no kit at $kit: run 'bench/gpu_kit.sh pack' here first and carry .kit"
  t_start=$(date +%s)
  logs=$(mktemp -d /tmp/gpu-kit.XXXXXX)
  head=$(cat "$kit/HEAD")
  device=no-GPU
  if nvidia-smi -L >"$logs/00-nvidia-smi.log" 2>&1 &&
     grep -q '^GPU ' "$logs/00-nvidia-smi.log"; then
    have_gpu=1
    device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  fi
  nvidia-smi >>"$logs/00-nvidia-smi.log" 2>&1
  local tag
  tag=$(echo "$device" | tr -c 'A-Za-z0-9\n' '-' | sed 's/-\+/-/g; s/-$//')
  prefix="gpu-kit-$tag-$head"
  trap 'write_results "$prefix"' EXIT

  # tar needs xz for this; Python's tarfile does not.
  local packed=$kit/kit.tar.xz
  kit=/tmp/hoop-kit
  rm -rf "$kit"
  mkdir -p "$kit"
  tar -C "$kit" -xJf "$packed" 2>"$logs/00-unpack.log" ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$packed" "$kit" 2>>"$logs/00-unpack.log" || die "cannot unpack $packed"

  # The programs look for each other by their build path.
  local orig B
  orig=$(cat "$kit/BUILD_DIR")
  if [ ! -e "$orig" ]; then
    mkdir -p "$(dirname "$orig")"
    ln -s "$kit/build" "$orig"
  fi
  B=$orig
  # The Python that has PyTorch: the first python3 there, Debian's here.
  local py p
  py=python3
  for p in "$(command -v python3)" /usr/bin/python3; do
    if [ -x "$p" ] && "$p" -c 'import torch' 2>/dev/null; then
      py=$p
      break
    fi
  done

  # The kit's programs find its libraries, and cuBLAS in the toolkit; the
  # Python steps keep PyTorch's own.
  local L="LD_LIBRARY_PATH=$kit/lib:/usr/local/cuda/lib64"
  export PYTHONUNBUFFERED=1 HOOP_TIMEOUT_MS=60000
  # hoop_torch against this machine's PyTorch, while the first steps run.
  local tb=/tmp/gpu-kit-torch
  (cmake -S "$root" -B "$tb" -G Ninja -DCMAKE_BUILD_TYPE=Release \
     -DHOOP_BUILD_TESTS=OFF -DHOOP_BUILD_BENCH=OFF -DHOOP_ENABLE_TORCH=ON \
     -DHOOP_PYTHON3="$py" -DCMAKE_CUDA_ARCHITECTURES=90 &&
   cmake --build "$tb" --target hoop_torch_ext) >"$logs/00-torch-build.log" 2>&1 &
  local torch_build=$!

  # The CUDA cases in four shards at once: one after another they took
  # 76-264 s on the H100 in November (ctest -j4).
  step cuda-tests 140 \
    "rc=0
     for i in 0 1 2 3; do
       GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=\$i $L $B/tests/test_cuda --gtest_brief=1 \
         >$logs/test_cuda.shard\$i.txt 2>&1 &
     done
     for i in 0 1 2 3; do wait -n || rc=1; done
     cat $logs/test_cuda.shard*.txt
     $L $B/tests/test_ib_cuda --gtest_brief=1 || rc=1
     exit \$rc" \
    "$B/tests/test_cuda" "$B/tests/test_ib_cuda"
  step nccl 110 \
    "$L $B/tools/hoop-run --no-prefix -n 2 $B/bench/nccl-layer -m cuda -b 4096 -b 67108864 &&
     $py $root/bench/nccl_needs.py \
       \$($py -c 'import os, torch; print(os.path.dirname(torch.__file__))')/lib/libtorch_cuda.so \
       $B/lib/hoop/libnccl.so.2 &&
     LD_PRELOAD=$B/lib/hoop/libnccl.so.2 $py $root/bench/nccl_torch.py \
       --nprocs 2 4 --steps 10 --repeats 3 --hoop-bench $B/bench/hoop-bench" \
    "$B/bench/nccl-layer" "$B/lib/hoop/libnccl.so.2"
  # Leaves the later steps their 195 s whatever the build takes.
  local left=$((budget - ($(date +%s) - t_start) - 195))
  step torch-build $((left > 10 ? left : 10)) \
    "while kill -0 $torch_build 2>/dev/null; do sleep 1; done
     tail -3 $logs/00-torch-build.log; ls $tb/python/hoop_torch/_C*"
  step torch-cuda 70 \
    "PYTHONPATH=$tb/python $py $root/tests/torch/test_cuda.py 2 &&
     PYTHONPATH=$tb/python $py $root/tests/torch/test_cuda.py 3" \
    $tb/python/hoop_torch/_C*
  step hoop-train 40 \
    "$L $B/tools/hoop-run --no-prefix -n 2 $B/src/train/hoop-train --device cuda \
       --epochs 1 --data $kit/data" \
    "$B/src/train/hoop-train"
  step benches 80 \
    "$L $B/bench/hoop-cuda-kernels -b 1048576 -e 1073741824 -n 10 | tee $logs/kernels.txt &&
     for n in 2 4; do $L $B/tools/hoop-run --no-prefix -n \$n $B/bench/hoop-bench -m cuda \
       -b 1M -e 256M -f 4 -n 10 -w 2 -J $logs/allreduce-cuda-\${n}ranks.jsonl || exit 1; done &&
     $py $root/bench/cuda_ipc_bound.py $logs/kernels.txt $logs/allreduce-cuda-*ranks.jsonl" \
    "$B/bench/hoop-cuda-kernels" "$B/bench/hoop-bench"
  step rdma 5 \
    "ls -l /sys/class/infiniband /dev/infiniband 2>&1; grep -E 'rdma|^ib_' /proc/modules;
     modinfo rdma_rxe 2>&1 | head -3; true"
  kill "$torch_build" 2>/dev/null || true
  return "$failed"
}

case "$mode" in
pack) pack ;;
run) run ;;
*) die "usage: $0 pack|run" ;;
esac
