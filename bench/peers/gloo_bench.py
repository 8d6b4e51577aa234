#!/usr/bin/python3
"""gloo collectives (torch.distributed, CPU float32, SUM where they reduce),
measured the way hoop measures itself (shared/bench-method.md), for
bench/compare_allreduce.py and bench/compare_peers.py. --backend hoop
times the same calls through hoop's torch.distributed backend (hoop_torch,
found on PYTHONPATH), for bench/torch_vs_gloo.py; --device cuda puts the
tensors on each rank's GPU and waits for the GPU after each call.

-C picks the collective as hoop-bench's -C does: allreduce (default),
reducescatter, allgather, broadcast, reduce (root 0), alltoall. Sizes,
counts and busbw follow nccl-tests, as in hoop-bench, and the rows are
hoop-bench's (size count type redop root, then time algbw busbw #wrong
out-of-place and in-place) so one parser reads both. The script starts its
own N processes, each joining through env:// on 127.0.0.1:

    /usr/bin/python3 gloo_bench.py -C allgather --nprocs 2 -b 4K -e 64M -f 2 -n 20 -w 5 -c 1

torch's all_reduce, broadcast and reduce work on one tensor: their
out-of-place columns time what a user writes to keep the input, a copy into
the output tensor then the call (for broadcast, on the root only). torch
1.13's gloo has no reduce_scatter (nor _reduce_scatter_base) and no list
all_to_all; all-to-all runs as all_to_all_single, all-gather as the list
all_gather into views of one tensor. A collective this torch's gloo refuses
ends the run with exit status 3 and torch's own message, so the answer comes
from the installed torch, not from this comment. All-to-all's in-place
columns read N/A, as hoop-bench's do.
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
COLLS = ("allreduce", "reducescatter", "allgather", "broadcast", "reduce",
         "alltoall")
BLOCKED = ("reducescatter", "allgather", "alltoall")  # count is per rank
REDUCES = ("allreduce", "reducescatter", "reduce")
UNSUPPORTED = 3  # exit status: this torch's gloo lacks the collective


def parse_coll(text):
    """'all_gather' and 'allgather' both name allgather, as in hoop-bench."""
    name = text.replace("_", "").replace("-", "").lower()
    if name not in COLLS:
        raise argparse.ArgumentTypeError(f"unknown collective {text!r}")
    return name


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
    p.add_argument("-C", type=parse_coll, default="allreduce", dest="coll")
    p.add_argument("-b", type=parse_size, default=4096, dest="min_bytes")
    p.add_argument("-e", type=parse_size, default=64 << 20, dest="max_bytes")
    p.add_argument("-f", type=int, default=2, dest="factor")
    p.add_argument("-n", type=int, default=20, dest="iters")
    p.add_argument("-w", type=int, default=5, dest="warmup")
    p.add_argument("-c", type=int, default=1, choices=(0, 1), dest="check")
    p.add_argument("--backend", choices=("gloo", "hoop"), default="gloo")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    a = p.parse_args(argv)
    if a.nprocs < 1 or a.factor < 2 or a.iters < 1 or a.warmup < 0:
        p.error("need --nprocs >= 1, -f >= 2, -n >= 1, -w >= 0")
    if not 4 <= a.min_bytes <= a.max_bytes:
        p.error("need 4 <= -b <= -e")
    return a


def sizes(a):
    """The sweep in whole floats, as peer-mpi-bench walks it."""
    b = a.min_bytes
    while b <= a.max_bytes:
        yield b // 4
        b *= a.factor


def factor(coll, nranks):
    """nccl-tests' bus-bandwidth factor (its doc/PERFORMANCE.md)."""
    if coll == "allreduce":
        return 2 * (nranks - 1) / nranks
    return 1.0 if coll in ("broadcast", "reduce") else (nranks - 1) / nranks


class Call:
    """One collective call on views of the two flat buffers, with where its
    input goes and where its result lands, as hoop-bench's layouts."""

    def __init__(self, coll, elems, in_place, buf, rank, nranks):
        self.coll, self.in_place = coll, in_place
        self.rank, self.nranks = rank, nranks
        n = nranks
        per = elems // n if coll in BLOCKED else elems
        self.count = per
        whole = per * n if coll in BLOCKED else per
        self.nbytes = whole * 4
        inp, out = buf["in"], buf["out"][:whole]
        self.out = out
        blocks = [out[i * per:(i + 1) * per] for i in range(n)]
        if coll == "allgather":
            self.input = blocks[rank] if in_place else inp[:per]
            self.result = out
            self.call = lambda: dist.all_gather(blocks, self.input)
        elif coll == "reducescatter":
            self.input = out if in_place else inp[:whole]
            chunks = [self.input[i * per:(i + 1) * per] for i in range(n)]
            self.result = blocks[rank] if in_place else out[:per]
            self.call = lambda: dist.reduce_scatter(self.result, chunks)
        elif coll == "alltoall":
            self.input = inp[:whole]
            self.result = out
            self.call = lambda: dist.all_to_all_single(out, self.input)
        else:
            self.input = out if in_place else inp[:whole]
            self.result = out
            one = {"allreduce": lambda: dist.all_reduce(out),
                   "broadcast": lambda: dist.broadcast(out, 0),
                   "reduce": lambda: dist.reduce(out, 0)}[coll]
            copies = not in_place and (coll != "broadcast" or rank == 0)

            def call():
                if copies:
                    out.copy_(self.input)
                one()
            self.call = call

    def fill_input(self):
        """Rank r gives r+1 (all-to-all: r*N+p+1 in block p), so every
        result has a closed form."""
        if self.coll != "alltoall":
            self.input.fill_(float(self.rank + 1))
            return
        for p in range(self.nranks):
            self.input[p * self.count:(p + 1) * self.count].fill_(
                float(self.rank * self.nranks + p + 1))

    def expected(self):
        """The result this rank must hold, or None where it gets none."""
        n, per = self.nranks, self.count
        total = n * (n + 1) / 2
        if self.coll == "reduce" and self.rank != 0:
            return None
        if self.coll in REDUCES:
            return torch.full_like(self.result, total)
        if self.coll == "broadcast":
            return torch.full_like(self.result, 1.0)
        block = torch.arange(n, dtype=torch.float32,
                             device=self.result.device).repeat_interleave(per)
        if self.coll == "allgather":
            return block + 1
        return block * n + self.rank + 1  # alltoall


def check(c):
    """Runs the call once on known inputs over a poisoned output, so that a
    call which writes nothing cannot pass. Returns the wrong elements
    summed over ranks."""
    c.out.fill_(-1.0)
    c.fill_input()
    c.call()
    want = c.expected()
    bad = 0 if want is None else int((c.result != want).sum())
    wrong = torch.tensor([bad])
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
        a.sync()
        times[i] = (time.perf_counter() - t0) * 1e6
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    t = sorted(times.tolist())
    return statistics.median(t), t[0], t[-1]


def measure(c, a):
    wrong = check(c) if a.check else None
    if c.in_place and c.coll in REDUCES:
        c.out.zero_()  # each call feeds the next: zeros keep the sums finite
    else:
        c.fill_input()
    return time_calls(c.call, a), wrong


def group(c, timing, wrong):
    if timing is None:
        return f" {'N/A':>10} {'N/A':>7} {'N/A':>7} {'N/A':>6}"
    median_us = timing[0]
    algbw = c.nbytes / (median_us * 1e3)  # GB/s, GB = 1e9 B
    busbw = algbw * factor(c.coll, c.nranks)
    return f" {median_us:10.2f} {algbw:7.2f} {busbw:7.2f} " + (
        f"{'N/A':>6}" if wrong is None else f"{wrong:6d}")


def print_header(a, nranks):
    reduces = " sum" if a.coll in REDUCES else ""
    print(f"# gloo_bench: torch {torch.__version__} {a.backend} {a.coll} "
          f"float32{reduces}, {nranks} ranks, {a.device.upper()} tensors, "
          "1 torch thread")
    print(f"# sizes {a.min_bytes}..{a.max_bytes} x{a.factor}, warm-up "
          f"{a.warmup}, iterations {a.iters}, check {'on' if a.check else 'off'}")
    print("# time: median over iterations of the max over ranks; "
          f"busbw = algbw * {factor(a.coll, nranks):.4f} (nccl-tests); "
          "GB = 1e9 B")
    if a.coll in ("allreduce", "broadcast", "reduce"):
        print(f"# out-of-place = copy into the output tensor + {a.coll} "
              "(torch's takes one tensor)")
    cols = ("size", "count", "type", "redop", "root", "time(us)", "algbw",
            "busbw", "#wrong", "time(us)", "algbw", "busbw", "#wrong")
    print("#%81s%34s" % ("out-of-place", "in-place"))
    print("# %10s %12s %8s %6s %6s %10s %7s %7s %6s %10s %7s %7s %6s" % cols)
    sys.stdout.flush()


def sweep(a, buf, rank, nranks):
    """Every size, out of place then in place, rank 0 printing rows."""
    for elems in sizes(a):
        oc = Call(a.coll, elems, False, buf, rank, nranks)
        oop, oop_wrong = measure(oc, a)
        ip, ip_wrong = None, None
        if a.coll != "alltoall":
            ip, ip_wrong = measure(
                Call(a.coll, elems, True, buf, rank, nranks), a)
        if rank == 0:
            redop = "sum" if a.coll in REDUCES else "none"
            root = 0 if a.coll in ("broadcast", "reduce") else -1
            print(f"{oc.nbytes:12d} {oc.count:12d} {'float':>8} {redop:>6} "
                  f"{root:6d}" + group(oc, oop, oop_wrong)
                  + group(oc, ip, ip_wrong))
            # Raw spread on a comment line: data rows carry nothing extra.
            ipr = f"ip_min_us={ip[1]:.2f} ip_max_us={ip[2]:.2f}" if ip else ""
            print(f"# range {oc.nbytes} oop_min_us={oop[1]:.2f} "
                  f"oop_max_us={oop[2]:.2f} {ipr}", flush=True)


def rank_main(rank, a, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      RANK=str(rank), WORLD_SIZE=str(a.nprocs))
    # Keep gloo on loopback, as Open MPI is kept with btl_tcp_if_include lo.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    if a.backend == "hoop":
        import hoop_torch  # noqa: F401  (registers the backend)
    device = torch.device("cpu")
    a.sync = lambda: None
    if a.device == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        a.sync = torch.cuda.synchronize
    dist.init_process_group(a.backend, init_method="env://",
                            timeout=datetime.timedelta(minutes=5))
    nranks = dist.get_world_size()
    buf = {k: torch.empty(a.max_bytes // 4, dtype=torch.float32,
                          device=device)
           for k in ("in", "out")}
    if rank == 0:
        print_header(a, nranks)
    try:
        sweep(a, buf, rank, nranks)
    except RuntimeError as e:
        if "does not support" not in str(e):
            raise
        if rank == 0:
            print(f"gloo_bench: {a.coll}: not supported by torch "
                  f"{torch.__version__}'s {a.backend}: {e}", file=sys.stderr,
                  flush=True)
        sys.exit(UNSUPPORTED)
    dist.destroy_process_group()


def free_port():
    """A port the kernel just handed out; another process could take it
    before rank 0 binds it, a small risk accepted for a local benchmark."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    a = parse_args(sys.argv[1:])
    try:
        mp.spawn(rank_main, args=(a, free_port()), nprocs=a.nprocs,
                 join=True)
    except mp.ProcessExitedException as e:
        # Rank 0 said why; keep "unsupported" apart from a failure.
        sys.exit(UNSUPPORTED if e.exit_code == UNSUPPORTED else 1)


if __name__ == "__main__":
    main()
