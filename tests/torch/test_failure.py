#!/usr/bin/python3
"""A killed process makes the others raise, naming its rank, within the
group's timeout; nobody hangs.

    PYTHONPATH=<build>/python /usr/bin/python3 tests/torch/test_failure.py

Three runs: 3 processes all-reducing in a loop until rank 1 kills itself
(SIGKILL, mid-loop); the same with rank 0, which also holds the store
torch.distributed rendezvoused through; 2 processes where rank 1 sends to
rank 0 in a loop until it is killed, so that rank 0's recv fails. Each
survivor must see a RuntimeError that names the killed rank, sooner than
the group's timeout, and each run must end within the harness's deadline.
"""
import datetime
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

TIMEOUT = datetime.timedelta(seconds=30)
ROUNDS_BEFORE_KILL = 20


def survive(rank, victim, step):
    """Runs step(i) until it raises; True if the error is the expected
    one, in time."""
    last = time.monotonic()
    for i in range(1_000_000):
        if rank == victim and i == ROUNDS_BEFORE_KILL:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            step(i)
        except RuntimeError as e:
            waited = time.monotonic() - last
            # hoop describes a peer as "rank N (address, host, pid)".
            named = f"rank {victim} (" in str(e)
            print(f"rank {rank}: raised after {waited:.2f} s, "
                  f"{'naming' if named else 'NOT naming'} rank {victim}: "
                  f"{str(e).splitlines()[0]}", flush=True)
            return named and waited < TIMEOUT.total_seconds()
        last = time.monotonic()
    print(f"rank {rank}: never raised", flush=True)
    return False


def all_reducing(rank, n, gloo, victim):
    t = torch.ones(1 << 16)
    return survive(rank, victim, lambda i: dist.all_reduce(t))


def receiving(rank, n, gloo, victim):
    t = torch.ones(1 << 16)

    def step(i):
        if rank == victim:
            dist.send(t, 0)
        else:
            dist.recv(t, victim)
    return survive(rank, victim, step)


def main():
    failed = False
    for fn, nprocs, victim in ((all_reducing, 3, 1), (all_reducing, 3, 0),
                               (receiving, 2, 1)):
        codes = harness.run(fn, nprocs, victim, timeout=TIMEOUT,
                            deadline_s=90)
        want = [0 if r != victim else -signal.SIGKILL for r in range(nprocs)]
        print(f"{fn.__name__}, {nprocs} ranks, rank {victim} killed: exit "
              f"codes {codes} (want {want})", flush=True)
        failed |= codes != want
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
