#!/usr/bin/env bash
# hoop's libnccl.so.2 exports exactly the functions NVIDIA's nccl.h declares
# (each ncclX and its pncclX twin), weak ncclX and strong pncclX as NCCL
# ships them, and nothing else; its SONAME is libnccl.so.2.
set -euo pipefail
lib=$1 header=$2
# Declarations: a return type, then the name and its parenthesis.
declared=$(grep -oE '^[[:space:]]*(ncclResult_t|const char[[:space:]]*\*|void)[[:space:]]*p?nccl[A-Za-z0-9_]+[[:space:]]*\(' "$header" |
           sed -E 's/.*[[:space:]*](p?nccl[A-Za-z0-9_]+)[[:space:]]*\(/\1/' | sort -u)
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u)
if [ "$declared" != "$exported" ]; then
  echo "exports differ from $header's declarations (< declared, > exported):"
  diff <(echo "$declared") <(echo "$exported") || true
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
echo "$(echo "$declared" | wc -l) functions exported as NVIDIA's nccl.h declares them"
