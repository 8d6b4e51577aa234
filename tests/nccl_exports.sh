#!/usr/bin/env bash
# hoop's libnccl.so.2 exports exactly the functions NVIDIA's libnccl.so.2
# does (each ncclX and its pncclX twin: nccl.h's API and the host half of
# nccl_device.h's), weak ncclX and strong pncclX as NCCL ships them, and
# nothing else; its SONAME is libnccl.so.2.  A program built against NCCL
# that references a function hoop lacks stops before main, whether or not
# it calls it.  Every function nccl.h declares must be among them.
set -euo pipefail
lib=$1 nvidia=$2 header=$3
functions() {
  nm -D --defined-only "$1" | awk '$2 == "T" || $2 == "W" { print $3 }' |
    sed 's/@.*//' | grep -E '^p?nccl' | sort -u
}
# NCCL's own internal entry point, declared by no header.
expected=$(functions "$nvidia" | grep -vx 'ncclResetDebugInitInternal')
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u)
if [ "$expected" != "$exported" ]; then
  echo "exports differ from $nvidia's (< NVIDIA's, > hoop's):"
  diff <(echo "$expected") <(echo "$exported") || true
  exit 1
fi
# Declarations: a return type, then the name and its parenthesis.
declared=$(grep -oE '^[[:space:]]*(ncclResult_t|const char[[:space:]]*\*|void)[[:space:]]*p?nccl[A-Za-z0-9_]+[[:space:]]*\(' "$header" |
           sed -E 's/.*[[:space:]*](p?nccl[A-Za-z0-9_]+)[[:space:]]*\(/\1/' | sort -u)
undefined=$(comm -23 <(echo "$declared") <(echo "$exported"))
if [ -n "$undefined" ]; then
  echo "$header declares functions the library lacks:"
  echo "$undefined"
  exit 1
fi
bad=$(nm -D --defined-only "$lib" |
      awk '($3 ~ /^nccl/ && $2 != "W") || ($3 ~ /^pnccl/ && $2 != "T")')
if [ -n "$bad" ]; then
  echo "ncclX must be weak (W) and pncclX strong (T):"
  echo "$bad"
  exit 1
fi
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = libnccl.so.2 ] || { echo "SONAME is '$soname'"; exit 1; }
echo "$(echo "$exported" | wc -l) functions exported as NVIDIA's libnccl.so.2 exports them"
