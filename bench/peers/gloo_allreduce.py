#!/usr/bin/python3
"""gloo all-reduce (torch.distributed, CPU float32 SUM), measured the way hoop
measures itself (shared/bench-method.md), for bench/compare_allreduce.py.

It prints the same rows as hoop-bench (size count type redop root, then time
algbw busbw #wrong out-of-place and in-place) so one parser reads both. The
script starts its own N processes, each joining through env:// on 127.0.0.1:

    /usr/bin/python3 gloo_allreduce.py --nprocs 2 -b 4K -e 64M -f 2 -n 20 -w 5 -c 1

torch's all_reduce works in place only: the out-of-place columns time what a
user writes to keep the input, a copy into the output tensor then all_reduce.
"""

import argparse
import datetime
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SUFFIXES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text):
    """'4096', '4K', '64M', '1G' (powers of 1024) -> bytes."""
    mult = SUFFIXES.get(text[-1:].upper(), 1)
    digits = text[:-1] if mult != 1 else text
    if not digits.isdigit():
        raise argparse.ArgumentTypeError(f"bad size {text!r}")
    return int(digits) * mult


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nprocs", type=int, default=2, help="ranks to start")
    p.add_argument("-b", type=parse_size, default=4096, dest="min_bytes")
    p.add_argument("-e", type=parse_size, default=64 << 20, dest="max_bytes")
    p.add_argument("-f", type=int, default=2, dest="factor")
    p.add_argument("-n", type=int, default=20, dest="iters")
    p.add_argument("-w", type=int, default=5, dest="warmup")
    p.add_argument("-c", type=int, default=1, choices=(0, 1), dest="check")
    a = p.parse_args(argv)
    if a.nprocs < 1 or a.factor < 2 or a.iters < 1 or a.warmup < 0:
        p.error("need --nprocs >= 1, -f >= 2, -n >= 1, -w >= 0")
    if not 4 <= a.min_bytes <= a.max_bytes:
        p.error("need 4 <= -b <= -e")
    return a


def sizes(a):
    """The sweep in whole floats, as peer-mpi-allreduce walks it."""
    b = a.min_bytes
    while b <= a.max_bytes:
        yield b // 4 * 4
        b *= a.factor


def check(buf, count, in_place, rank, nranks):
    """Rank r gives r+1, so every element must be N(N+1)/2; the output is
    poisoned first so that a call which writes nothing cannot pass. Returns
    the wrong elements summed over ranks."""
    out = buf["out"][:count]
    out.fill_(-1.0)
    src = out if in_place else buf["in"][:count]
    src.fill_(float(rank + 1))
    if not in_place:
        out.copy_(src)
    dist.all_reduce(out)
    wrong = torch.tensor([int((out != nranks * (nranks + 1) / 2).sum())])
    dist.all_reduce(wrong)
    return int(wrong)


def time_calls(call, a):
    """Warm-up, then barrier + one timed call per iteration. The iteration
    lasts until its slowest rank is done: per-rank times are combined with
    MAX after the loop, so the exchange never lands in a timed region.
    Returns (median, min, max) in microseconds."""
    for _ in range(a.warmup):
        call()
    times = torch.zeros(a.iters, dtype=torch.float64)
    for i in range(a.iters):
        dist.barrier()
        t0 = time.perf_counter()  # CLOCK_MONOTONIC on Linux
        call()
        times[i] = (time.perf_counter() - t0) * 1e6
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    t = sorted(times.tolist())
    return statistics.median(t), t[0], t[-1]


def measure(buf, count, in_place, a, rank, nranks):
    wrong = check(buf, count, in_place, rank, nranks) if a.check else None
    inp, out = buf["in"][:count], buf["out"][:count]
    if in_place:
        out.zero_()  # each call feeds the next: zeros keep the sums finite

        def call():
            dist.all_reduce(out)
    else:
        inp.fill_(float(rank + 1))

        def call():
            out.copy_(inp)
            dist.all_reduce(out)
    return time_calls(call, a), wrong


def group(nbytes, timing, wrong, nranks):
    median_us = timing[0]
    algbw = nbytes / (median_us * 1e3)  # GB/s, GB = 1e9 B
    busbw = algbw * 2 * (nranks - 1) / nranks
    return f" {median_us:10.2f} {algbw:7.2f} {busbw:7.2f} " + (
        f"{'N/A':>6}" if wrong is None else f"{wrong:6d}")


def print_header(a, nranks):
    print(f"# gloo_allreduce: torch {torch.__version__} gloo all_reduce "
          f"float32 sum, {nranks} ranks, CPU tensors, 1 torch thread")
    print(f"# sizes {a.min_bytes}..{a.max_bytes} x{a.factor}, warm-up "
          f"{a.warmup}, iterations {a.iters}, check {'on' if a.check else 'off'}")
    print("# time: median over iterations of the max over ranks; "
          "busbw = algbw * 2(N-1)/N; GB = 1e9 B")
    print("# out-of-place = copy into the output tensor + all_reduce "
          "(torch has no out-of-place all_reduce)")
    cols = ("size", "count", "type", "redop", "root", "time(us)", "algbw",
            "busbw", "#wrong", "time(us)", "algbw", "busbw", "#wrong")
    print("#%81s%34s" % ("out-of-place", "in-place"))
    print("# %10s %12s %8s %6s %6s %10s %7s %7s %6s %10s %7s %7s %6s" % cols)
    sys.stdout.flush()


def rank_main(rank, a, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      RANK=str(rank), WORLD_SIZE=str(a.nprocs))
    # Keep gloo on loopback, as Open MPI is kept with btl_tcp_if_include lo.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://",
                            timeout=datetime.timedelta(minutes=5))
    nranks = dist.get_world_size()
    buf = {k: torch.empty(a.max_bytes // 4, dtype=torch.float32)
           for k in ("in", "out")}
    if rank == 0:
        print_header(a, nranks)
    for nbytes in sizes(a):
        count = nbytes // 4
        oop, oop_wrong = measure(buf, count, False, a, rank, nranks)
        ip, ip_wrong = measure(buf, count, True, a, rank, nranks)
        if rank == 0:
            print(f"{nbytes:12d} {count:12d} {'float':>8} {'sum':>6} {-1:6d}"
                  + group(nbytes, oop, oop_wrong, nranks)
                  + group(nbytes, ip, ip_wrong, nranks))
            # Raw spread on a comment line: data rows carry nothing extra.
            print(f"# range {nbytes} oop_min_us={oop[1]:.2f} "
                  f"oop_max_us={oop[2]:.2f} ip_min_us={ip[1]:.2f} "
                  f"ip_max_us={ip[2]:.2f}", flush=True)
    dist.destroy_process_group()


def free_port():
    """A port the kernel just handed out; another process could take it
    before rank 0 binds it, a small risk accepted for a local benchmark."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    a = parse_args(sys.argv[1:])
    mp.spawn(rank_main, args=(a, free_port()), nprocs=a.nprocs, join=True)


if __name__ == "__main__":
    main()
