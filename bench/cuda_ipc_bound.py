#!/usr/bin/env python3
"""All-reduce over CUDA IPC against what the GPU's memory allows, from one run.

Ranks sharing one GPU move every byte through its memory.  Per all-reduce of
K bytes on N ranks the CUDA IPC schedule reads and writes 5NK bytes there:
each rank stages K into its window (2NK), the reductions read every window's
slices and write each result twice (NK + 2K), and each rank copies the N-1
slices it did not reduce (2(N-1)K).  At the device's measured copy rate M
(bytes read + written per second, from hoop-cuda-kernels at its largest size)
that bounds busbw = 2(N-1)/N * K / t at 2(N-1)/N * M / (5N).

usage: cuda_ipc_bound.py KERNELS.txt ALLREDUCE.jsonl...
"""
import json
import sys


def copy_rate(path):
    """The D2D copy rate (GB/s) at the largest buffer hoop-cuda-kernels ran."""
    best = None
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            cols = line.split()
            size, rate = int(cols[0]), float(cols[4])
            if best is None or size > best[0]:
                best = (size, rate)
    if best is None:
        sys.exit(f"{path}: no kernel rows")
    return best


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    size, m = copy_rate(sys.argv[1])
    print(f"# device copy rate M = {m:.0f} GB/s (read + written, {size} B copy)")
    print(f"# {'ranks':>5} {'bytes':>11} {'place':>6} {'busbw':>8} "
          f"{'ceiling':>8} {'ratio':>6}")
    for path in sys.argv[2:]:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("collective") != "allreduce":
                    continue
                n = r["ranks"]
                ceiling = 2 * (n - 1) / n * m / (5 * n)
                place = "in" if r["in_place"] else "out"
                print(f"  {n:>5} {r['bytes']:>11} {place:>6} "
                      f"{r['busbw_GBps']:>8.2f} {ceiling:>8.1f} "
                      f"{r['busbw_GBps'] / ceiling:>6.3f}")


if __name__ == "__main__":
    main()
