#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/fuzz_*.c) with clang, ASan and
# UBSan in a tree of their own, then runs each for a while, starting from
# a copy of its committed seeds (tests/fuzz/corpus/<target>) so that what
# it learns stays out of the source tree.
#
#   tests/fuzz/run.sh [--seconds N] [--build-dir DIR] [--build-only] [target...]
#
# N defaults to 60 (per target), DIR to build-fuzz, the targets to all.
# Exit status: 0 when no target crashed; 1 when one did, its input kept in
# DIR/crashes/<target>/ (replay it: DIR/tests/fuzz/<target> <file>); 77
# (skipped) when clang or libFuzzer is missing.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=60
dir=$root/build-fuzz
build_only=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
  --seconds) seconds=$2; shift 2 ;;
  --build-dir) dir=$2; shift 2 ;;
  --build-only) build_only=1; shift ;;
  -*) echo "usage: $0 [--seconds N] [--build-dir DIR] [--build-only] [target...]" >&2; exit 2 ;;
  *) targets+=("$1"); shift ;;
  esac
done
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$root"/tests/fuzz/fuzz_*.c; do
    targets+=("$(basename "$f" .c)")
  done
fi

skip() {
  echo "fuzz: skipped: $* (Debian: apt-get install clang libclang-rt-dev)"
  exit 77
}

cc=$(command -v clang || command -v clang-14 || true)
cxx=$(command -v clang++ || command -v clang++-14 || true)
[ -n "$cc" ] && [ -n "$cxx" ] || skip "no clang"
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' \
  >"$probe/p.c"
"$cc" -fsanitize=fuzzer,address "$probe/p.c" -o "$probe/p" 2>/dev/null ||
  skip "$cc cannot link libFuzzer"

# One build at a time: the tests that run the targets share the tree.
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
if [ ! -f "$dir/CMakeCache.txt" ]; then
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S "$root" -B "$dir" "${generator[@]}" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DHOOP_FUZZ=ON -DHOOP_WERROR=ON -DHOOP_BUILD_TESTS=OFF \
    -DHOOP_BUILD_BENCH=OFF -DHOOP_ENABLE_CUDA=OFF -DHOOP_ENABLE_VERBS=OFF \
    >"$dir/configure.log" || { cat "$dir/configure.log"; exit 1; }
fi
cmake --build "$dir" --target "${targets[@]}" >"$dir/build.log" 2>&1 ||
  { cat "$dir/build.log"; exit 1; }
flock -u 9
[ "$build_only" = 1 ] && exit 0

status=0
for t in "${targets[@]}"; do
  work=$dir/corpus/$t
  crashes=$dir/crashes/$t
  mkdir -p "$work" "$crashes"
  cp -n "$root/tests/fuzz/corpus/$t"/* "$work/" 2>/dev/null || true
  log=$dir/$t.log
  found=$(ls -A "$crashes" | wc -l)
  if "$dir/tests/fuzz/$t" -max_total_time="$seconds" -timeout=10 \
       -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$crashes/" "$work" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    echo "fuzz: $t: ${seconds} s, ${runs:-?} runs, ${cov:-cov: ?}," \
         "$(ls "$work" | wc -l) inputs in its corpus, no crash"
  elif [ "$(ls -A "$crashes" | wc -l)" -gt "$found" ]; then
    echo "fuzz: $t: CRASHED; input kept in $crashes; log $log"
    tail -40 "$log"
    status=1
  else
    echo "fuzz: $t: stopped before its time, without a crash; log $log"
    tail -5 "$log"
    status=1
  fi
done
exit $status
