"""Runs a test function as N processes joined by torch.distributed with
backend "hoop" (through env://, as torchrun does), each with a gloo group
over the same ranks for references, and reports which ranks failed.
"""
import datetime
import os
import socket
import sys
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# The timeout every group is made with; hoop's too.
TIMEOUT = datetime.timedelta(seconds=60)


def calls_of(hoop_torch, coll):
    """Calls of `coll` ("allreduce", "allgather", ...) hoop ran, under
    whichever algorithm it chose (a small model's gradients on 2 ranks go
    one shot, a larger one's by ring)."""
    return sum(c["calls"] for (name, _), c in
               hoop_torch.stats()["calls"].items() if name == coll)


def free_port():
    """A port the kernel just handed out (a small race, as in the C++ tests)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, nprocs, port, fn, args, timeout, env):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      RANK=str(rank), WORLD_SIZE=str(nprocs),
                      GLOO_SOCKET_IFNAME="lo", **env)
    torch.set_num_threads(1)
    import hoop_torch  # noqa: F401  (registers the backend)
    try:
        if rank < nprocs:
            dist.init_process_group("hoop", init_method="env://",
                                    timeout=timeout)
            gloo = dist.new_group(backend="gloo", timeout=timeout)
            ok = fn(rank, nprocs, gloo, *args)
        else:
            ok = fn(rank, nprocs, None, *args)
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0 if ok else 1)


def run(fn, nprocs, *args, timeout=TIMEOUT, deadline_s=150, extra=0,
        env=None):
    """Runs fn(rank, nprocs, gloo_group, *args) in nprocs processes; fn
    returns whether its rank passed.  `extra` more processes (ranks nprocs
    on) run fn with no process group made and gloo_group None, to join the
    job themselves; `env` goes into every process's environment.  Returns
    the exit codes (None: the process outlived deadline_s and was
    killed)."""
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=_rank_main,
                         args=(r, nprocs, port, fn, args, timeout, env or {}))
             for r in range(nprocs + extra)]
    for p in procs:
        p.start()
    codes = []
    for p in procs:
        p.join(deadline_s)
        if p.is_alive():
            p.kill()
            p.join()
            codes.append(None)
        else:
            codes.append(p.exitcode)
    return codes


def main(fn, nprocs, *args, **kwargs):
    """run(), then exits 0 only if every rank passed."""
    codes = run(fn, nprocs, *args, **kwargs)
    if any(c != 0 for c in codes):
        print(f"FAILED: exit codes by rank {codes}", flush=True)
        sys.exit(1)
    print(f"passed on {nprocs} processes", flush=True)
