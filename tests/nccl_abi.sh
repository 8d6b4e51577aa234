#!/usr/bin/env bash
# Runs the same dump compiled against hoop's nccl.h and NVIDIA's and shows
# every line where they differ.
set -euo pipefail
if ! diff -u <("$2") <("$1"); then
  echo "include/nccl.h differs from NVIDIA's (- NVIDIA, + hoop)"
  exit 1
fi
echo "$("$1" | wc -l) values, sizes and offsets equal NVIDIA's"
