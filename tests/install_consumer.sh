#!/usr/bin/env bash
# hoop as installed, used the ways a user uses it: the CMake package
# (hoop::hoop and hoop::hoop_static), pkg-config (shared and --static) and
# the installed programs.  The tree is installed into one directory and
# then moved, so nothing installed may name where it was put; and nothing
# may come from the build tree: no LD_LIBRARY_PATH, no CMAKE_PREFIX_PATH
# but the prefix, pkg-config only from the prefix.
#
#   install_consumer.sh BUILD_DIR CONFIG CONSUMER_DIR VERSION CMAKE GENERATOR CC
#                       BENCH
#
# BENCH is 1 when the build has hoop-bench (HOOP_BUILD_BENCH), which must
# then be installed and work; 0 when it has none, and none may be.
set -euo pipefail

build=$1 config=$2 src=$3 version=$4 cmake=$5 generator=$6 cc=$7 bench=$8

fail() {
  echo "install_consumer: $*" >&2
  exit 1
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tmp=$(cd "$tmp" && pwd -P)
unset LD_LIBRARY_PATH CMAKE_PREFIX_PATH PKG_CONFIG_PATH CPATH C_INCLUDE_PATH \
  LIBRARY_PATH hoop_DIR

"$cmake" --install "$build" --config "$config" --prefix "$tmp/installed" \
  >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log" >&2; fail "cmake --install $build failed"; }
mkdir "$tmp/moved"
mv "$tmp/installed" "$tmp/moved/prefix"
prefix=$tmp/moved/prefix

lib=$(find "$prefix" -name libhoop.so -print -quit)
[ -n "$lib" ] || fail "no libhoop.so under $prefix"
libdir=$(dirname "$lib")
header=$(find "$prefix" -name hoop.h -print -quit)
[ -n "$header" ] || fail "no hoop.h under $prefix"
run=$(find "$prefix" -name hoop-run -type f -print -quit)
[ -n "$run" ] || fail "no hoop-run under $prefix"
bindir=$(dirname "$run")

# Two ranks under the installed hoop-run.  ctest's TIMEOUT kills only this
# script, which would leave hoop-run and its ranks behind; hoop-run's own
# limit stops them all.
run2() {
  "$run" --timeout 30 -n 2 "$@"
}

# libhoop.so exports exactly the functions hoop.h declares with HOOP_API.
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
declared=$(sed -n 's/^HOOP_API [^(]*[ *]\(hoop_[a-z0-9_]*\)(.*/\1/p' "$header" |
  sort)
[ -n "$declared" ] || fail "found no HOOP_API function in $header"
internal=$(grep '^hoop__' <<<"$exported" || true)
[ -z "$internal" ] ||
  fail "libhoop.so exports internal symbols:" "$(tr '\n' ' ' <<<"$internal")"
[ "$exported" = "$declared" ] || {
  diff <(echo "$declared") <(echo "$exported") >&2 || true
  fail "libhoop.so's exports (>) differ from hoop.h's HOOP_API functions (<)"
}

# Every installed binary finds its libraries through its own RPATH.
for f in "$lib" "$bindir"/*; do
  readelf -h "$f" >/dev/null 2>&1 || continue
  if ldd "$f" | grep -q "not found"; then
    ldd "$f" >&2
    fail "$f: libraries not found without LD_LIBRARY_PATH"
  fi
done

# Runs consumer `exe` on 2 ranks under the installed hoop-run; each rank
# must report a correct all-reduce from this version.
run_consumer() {
  local name=$1 exe=$2 out
  out=$(run2 "$exe" 2>&1) ||
    { echo "$out" >&2; fail "$name: hoop-run -n 2 $exe failed"; }
  for r in 0 1; do
    grep -qxF "[$r] consumer: rank $r of 2, hoop $version: all-reduce correct" \
      <<<"$out" ||
      { echo "$out" >&2; fail "$name: rank $r reported no correct all-reduce"; }
  done
}

# A shared consumer loads libhoop.so.0 from the prefix; a static one does
# not load it at all.
check_linkage() {
  local name=$1 exe=$2 kind=$3 loaded
  loaded=$(ldd "$exe" | awk '$1 == "libhoop.so.0" {print $3}')
  if [ "$kind" = shared ]; then
    if [ -z "$loaded" ] ||
      [ "$(realpath "$(dirname "$loaded")")" != "$libdir" ]; then
      ldd "$exe" >&2
      fail "$name: does not load libhoop.so.0 from $libdir"
    fi
  else
    [ -z "$loaded" ] ||
      fail "$name: loads $loaded though it was linked with libhoop.a"
  fi
}

for target in hoop::hoop hoop::hoop_static; do
  name=cmake-${target#hoop::}
  dir=$tmp/$name
  { "$cmake" -S "$src" -B "$dir" -G "$generator" -DCMAKE_C_COMPILER="$cc" \
      -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
      -DHOOP_TARGET="$target" -DHOOP_VERSION="$version" &&
    "$cmake" --build "$dir" --config "$config"; } >"$dir.log" 2>&1 ||
    { cat "$dir.log" >&2; fail "$name: configuring or building failed"; }
  grep -qxF "hoop_DIR:PATH=$libdir/cmake/hoop" "$dir/CMakeCache.txt" ||
    fail "$name: found hoop elsewhere than $prefix:" \
      "$(grep '^hoop_DIR' "$dir/CMakeCache.txt")"
  exe=$(find "$dir" -name consumer -type f -print -quit)
  [ -n "$exe" ] || fail "$name: built no consumer in $dir"
  [ "$target" = hoop::hoop ] && kind=shared || kind=static
  check_linkage "$name" "$exe" "$kind"
  run_consumer "$name" "$exe"
done

export PKG_CONFIG_PATH=$libdir/pkgconfig
[ "$(pkg-config --variable=pcfiledir hoop)" = "$PKG_CONFIG_PATH" ] ||
  fail "pkg-config found hoop.pc elsewhere than $PKG_CONFIG_PATH"
read -ra cflags <<<"$(pkg-config --cflags hoop)"
read -ra libs <<<"$(pkg-config --libs hoop)"
warn=(-std=c11 -Wall -Wextra -Werror)

"$cc" "${warn[@]}" "$src/consumer.c" "${cflags[@]}" "${libs[@]}" \
  -Wl,-rpath,"$(pkg-config --variable=libdir hoop)" -o "$tmp/pc-shared" ||
  fail "pc-shared: building with pkg-config --libs hoop failed"
check_linkage pc-shared "$tmp/pc-shared" shared
run_consumer pc-shared "$tmp/pc-shared"

# -l:libhoop.a makes ld take the archive where -lhoop would take the .so.
read -ra libs <<<"$(pkg-config --static --libs hoop)"
found=0
for i in "${!libs[@]}"; do
  if [ "${libs[$i]}" = -lhoop ]; then
    libs[i]=-l:libhoop.a
    found=1
  fi
done
[ "$found" = 1 ] || fail "pkg-config --static --libs hoop has no -lhoop:" \
  "${libs[*]}"
"$cc" "${warn[@]}" "$src/consumer.c" "${cflags[@]}" "${libs[@]}" \
  -o "$tmp/pc-static" ||
  fail "pc-static: building with pkg-config --static --libs hoop failed"
check_linkage pc-static "$tmp/pc-static" static
run_consumer pc-static "$tmp/pc-static"

# An NCCL program against the installed NCCL API: nccl.h in include/hoop,
# libnccl.so.2 in lib/hoop, nowhere a real NCCL's would be.
ncclh=$(find "$prefix" -name nccl.h -print -quit)
nccllib=$(find "$prefix" -name libnccl.so.2 -print -quit)
[ "$(basename "$(dirname "$ncclh")")" = hoop ] ||
  fail "nccl.h is not installed in include/hoop: '$ncclh'"
[ "$(basename "$(dirname "$nccllib")")" = hoop ] ||
  fail "libnccl.so.2 is not installed in lib/hoop: '$nccllib'"
"$cc" "${warn[@]}" "$src/nccl_consumer.c" -I"$(dirname "$ncclh")" \
  -L"$(dirname "$nccllib")" -lnccl -Wl,-rpath,"$(dirname "$nccllib")" \
  -o "$tmp/nccl-consumer" || fail "nccl-consumer: building failed"
out=$("$tmp/nccl-consumer" 2>&1) ||
  { echo "$out" >&2; fail "nccl-consumer failed"; }
grep -q "sums right" <<<"$out" || fail "nccl-consumer: $out"

# The installed programs: hoop-info's model rows, hoop-bench's checked rows.
out=$(run2 "$bindir/hoop-info" 2>&1) ||
  { echo "$out" >&2; fail "hoop-run -n 2 hoop-info failed"; }
if ! grep -qF "[0] # hoop $version, 2 ranks" <<<"$out" ||
  ! grep -qE '^\[0\] +[0-9]+( +[0-9.]+){4} +(ring|tree|ps|hier) *$' <<<"$out"; then
  echo "$out" >&2
  fail "hoop-info printed no header or no predicted times"
fi

if [ "$bench" = 0 ]; then
  [ ! -e "$bindir/hoop-bench" ] ||
    fail "hoop-bench is installed from a build without the benchmarks"
  echo "install_consumer: no hoop-bench to run (HOOP_BUILD_BENCH=OFF)"
else
  out=$(run2 "$bindir/hoop-bench" -b 1K -e 64K -f 8 -n 3 -w 1 -c 1 2>&1) ||
    { echo "$out" >&2; fail "hoop-run -n 2 hoop-bench failed"; }
  # Rank 0's rows: [0], size, count, type, op, root, then time, algbw,
  # busbw and #wrong out of place and in place.
  rows=$(awk '$1 == "[0]" && $2 ~ /^[0-9]+$/ && NF == 14' <<<"$out")
  [ "$(grep -c . <<<"$rows")" = 3 ] ||
    { echo "$out" >&2; fail "hoop-bench printed no rows for 1K, 8K and 64K"; }
  bad=$(awk '$10 != "0" || $14 != "0"' <<<"$rows")
  [ -z "$bad" ] || { echo "$out" >&2; fail "hoop-bench found wrong elements"; }
fi

if [ -x "$bindir/hoop-train" ]; then
  out=$("$bindir/hoop-train" --help) ||
    fail "installed hoop-train --help failed"
  grep -q "^usage: hoop-train" <<<"$out" ||
    fail "installed hoop-train --help printed no usage"
fi
echo "install_consumer: $prefix works from CMake, pkg-config and its programs"
