#!/usr/bin/env bash
# What hoop's shared libraries ask the dynamic loader for: every NEEDED
# entry of each library must match a pattern of the allowlist (the C
# runtime), so that libhoop.so.0 and the NCCL drop-in load on any host:
# libibverbs is loaded at first use, the CUDA runtime is linked in (and
# it loads the driver, libcuda.so.1, itself).  Nor may a library export
# the CUDA runtime it carries.
#
#   needed_libs.sh 'libc.so.6 libm.so.6 ld-linux*' lib1.so lib2.so ...
set -euo pipefail
# The allowlist holds glob patterns, matched with [[ ]], never file names.
set -f
allowed=$1
shift
status=0
for lib in "$@"; do
  needed=$(readelf -d "$lib" |
           sed -n 's/.*(NEEDED).*Shared library: \[\(.*\)\]/\1/p')
  if [ -z "$needed" ]; then
    echo "$lib: readelf -d lists no NEEDED entry"
    status=1
  fi
  for name in $needed; do
    ok=0
    for pattern in $allowed; do
      # shellcheck disable=SC2053 # the pattern is a glob on purpose
      if [[ $name == $pattern ]]; then
        ok=1
        break
      fi
    done
    if [ $ok = 1 ]; then
      echo "$lib: NEEDED $name"
    else
      echo "$lib: NEEDED $name, which is not in the allowlist ($allowed)"
      status=1
    fi
  done
  leaked=$(nm -D --defined-only "$lib" | awk '$3 ~ /^_*cuda/ {print $3}')
  if [ -n "$leaked" ]; then
    echo "$lib exports the CUDA runtime's symbols:" $leaked
    status=1
  fi
done
exit $status
