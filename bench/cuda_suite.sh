#!/usr/bin/env bash
# The CUDA checks and benchmarks, in one go, for a machine with a GPU:
#   bench/cuda_suite.sh test    build, run the CUDA test cases
#   bench/cuda_suite.sh bench   build, run the kernel and collective benches
#   bench/cuda_suite.sh all     both
#   bench/cuda_suite.sh torch   build, then PyTorch DDP and dist.all_reduce
#                               with backend hoop against gloo on CUDA
#                               tensors (bench/torch_vs_gloo.py; minutes,
#                               so a call of its own)
# TESTS and SKIP_TESTS narrow the ctest run (regexes).
# BUILD_DIR (default build-gpu) is the build; logs go to BUILD_DIR/out, and
# when OUT is set (the device tool's result folder, which returns at most 8
# files) into one archive there, OUT/cuda-suite.tgz.  A machine without
# Debian's libgtest-dev can take GoogleTest unpacked from that package into
# .deps (git-ignored):
#   apt-get download libgtest-dev && dpkg -x libgtest-dev_*.deb .deps
# The bench also trains hoop-train on 2 ranks, on the GPU and on the CPU,
# when Fashion-MNIST is there: in /usr/share/datasets/fashion-mnist, or
# copied to .deps/fashion-mnist (30 MB) for a machine without the package.
set -uo pipefail
mode=${1:-all}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
out=$build/out
rm -rf "$out"
mkdir -p "$out"
# Whatever happens, the logs so far travel back in one file.
[ -n "${OUT:-}" ] && trap 'tar czf "$OUT/cuda-suite.tgz" -C "$out" .' EXIT
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHOOP_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" \
  -DCMAKE_PREFIX_PATH="$root/.deps/usr" >"$out/configure.log" 2>&1 ||
  { tail -30 "$out/configure.log"; exit 1; }
grep -E "CUDA|tests|hoop-train" "$out/configure.log"
cmake --build "$build" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }

run=$build/tools/hoop-run
bench=$build/bench/hoop-bench
status=0
if [ "$mode" = test ] || [ "$mode" = all ]; then
  (cd "$build" && ctest -R "${TESTS:-Cuda|cuda|Bench.CudaMemory}" -E "${SKIP_TESTS:-^$}" \
     -j "${JOBS:-4}" --timeout "${TEST_TIMEOUT:-600}" --output-on-failure) \
    >"$out/ctest-cuda.log" 2>&1 || status=1
  grep -E "tests passed|Failed|\*\*\*|Skipped" "$out/ctest-cuda.log" | tail -25
fi
if [ "$mode" = bench ] || [ "$mode" = all ]; then
  "$build/bench/hoop-cuda-kernels" -b 1048576 -e 1073741824 -n 20 \
    | tee "$out/kernels.txt" | grep -E "^#|float|bfloat16" | grep -vE " max "
  # Every rank on this one GPU: CUDA IPC, unless HOOP_TRANSPORT stages.
  for n in 2 4 8; do
    "$run" --no-prefix -n $n "$bench" -m cuda -b 1M -e 1G -f 4 -n "${ITERS:-10}" -w 2 \
      -J "$out/allreduce-cuda-${n}ranks.jsonl" >"$out/allreduce-cuda-${n}ranks.txt" 2>&1 || status=1
    tail -7 "$out/allreduce-cuda-${n}ranks.txt"
  done
  # Bigger chunks: fewer waits for the peers, four times the window memory.
  for n in 2 8; do
    HOOP_CUDA_IPC_CHUNK_BYTES=256M "$run" --no-prefix -n $n "$bench" -m cuda -b 1M -e 1G -f 4 \
      -n "${ITERS:-10}" -w 2 -J "$out/allreduce-cuda-${n}ranks-chunk256M.jsonl" \
      >"$out/allreduce-cuda-${n}ranks-chunk256M.txt" 2>&1 || status=1
  done
  python3 "$root/bench/cuda_ipc_bound.py" "$out/kernels.txt" \
    "$out"/allreduce-cuda-{2,4,8}ranks.jsonl | tee "$out/ipc-bound.txt"
  python3 "$root/bench/cuda_ipc_bound.py" "$out/kernels.txt" \
    "$out"/allreduce-cuda-{2,8}ranks-chunk256M.jsonl | tee "$out/ipc-bound-chunk256M.txt"
  data=/usr/share/datasets/fashion-mnist
  [ -d "$data" ] || data=$root/.deps/fashion-mnist
  if [ -d "$data" ]; then
    for device in cuda cpu; do
      "$run" --no-prefix -n 2 "$build/src/train/hoop-train" --quiet --data "$data" \
        --device $device --epochs 5 --optim sgd --lr 0.1 --momentum 0.9 \
        >"$out/train-2ranks-$device.txt" 2>&1 || status=1
      echo "== hoop-train, 2 ranks, --device $device"; tail -3 "$out/train-2ranks-$device.txt"
    done
  fi
  # PyTorch's own NCCL backend on hoop's libnccl.so.2 (2 and 4 processes
  # on the one GPU), NVIDIA's NCCL beside it for 1 and 2 processes, and the
  # NCCL layer's own cost on device buffers.
  if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    LD_PRELOAD=$build/lib/hoop/libnccl.so.2 python3 "$root/bench/nccl_torch.py" \
      --nprocs 2 4 --hoop-bench "$bench" --hoop-run "$run" \
      >"$out/nccl-torch-hoop.jsonl" 2>"$out/nccl-torch-hoop.err" || status=1
    python3 "$root/bench/nccl_torch.py" --nprocs 1 2 \
      >"$out/nccl-torch-nvidia.jsonl" 2>"$out/nccl-torch-nvidia.err" || true
    grep -hE '"result": "(library|collectives|init)"' "$out"/nccl-torch-*.jsonl | cut -c1-300
  fi
  for m in host cuda; do
    "$run" --no-prefix -n 2 "$build/bench/nccl-layer" -m $m \
      >"$out/nccl-layer-2ranks-$m.txt" 2>&1 || status=1
    tail -3 "$out/nccl-layer-2ranks-$m.txt"
  done
  for transport in shm tcp; do
    for m in host cuda; do
      HOOP_TRANSPORT=$transport "$run" --no-prefix -n 2 "$bench" -m $m \
        -b 1M -e 1G -f 4 -n "${ITERS:-10}" -w 2 >"$out/allreduce-2ranks-$transport-$m.txt" 2>&1 || status=1
      echo "== 2 ranks, $transport, $m buffers"; tail -6 "$out/allreduce-2ranks-$transport-$m.txt"
    done
  done
fi
if [ "$mode" = torch ]; then
  data=/usr/share/datasets/fashion-mnist
  [ -d "$data" ] || data=$root/.deps/fashion-mnist
  python3 "$root/bench/torch_vs_gloo.py" --build "$build" --device cuda \
    --data "$data" --repeats "${REPEATS:-3}" --out "$out/torch-vs-gloo-cuda.md" \
    >"$out/torch-vs-gloo-cuda.log" 2>&1 || status=1
  tail -30 "$out/torch-vs-gloo-cuda.log"
fi
exit $status
