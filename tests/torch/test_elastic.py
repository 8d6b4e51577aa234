#!/usr/bin/python3
"""hoop_torch.elastic: after a rank is killed, the survivors shrink the
default process group, share rank 0's state, and go on: their new group
sums as a job of them alone would, and a DDP model trains on it.

    PYTHONPATH=<build>/python /usr/bin/python3 tests/torch/test_elastic.py \
        [<build>/tools/hoop-run]

Two runs of 4 processes: rank 2 killed mid-loop, then rank 0, which also
held the store the group first met on. Then 3 processes that a fourth
joins (elastic.join, elastic.grow): it must take up rank 0's parameters
and optimiser state (which it has none of) and sum with them. Given
hoop-run (and with Fashion-MNIST installed), also
docs/examples/ddp_mnist.py --elastic under hoop-run --elastic, one of 3
ranks killed after the first epoch: the others must finish every epoch;
and again with --respawn 1: the replacement must join and the last epoch
run on 3 ranks.
"""
import datetime
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

TIMEOUT = datetime.timedelta(seconds=30)


def value(old_rank):
    """What each process contributes, known to all: the reference."""
    return torch.arange(1001, dtype=torch.float64) + 1000 * (old_rank + 1)


def step_keeps_replicas_equal(ddp, model, optimizer, me):
    """One DDP step on each rank's own input; True when every replica's
    parameters then agree, as they do only if their state did before."""
    ddp(torch.full((16, 8), float(me))).sum().backward()
    optimizer.step()
    checksum = torch.tensor([sum(p.sum().item() for p in model.parameters())],
                            dtype=torch.float64)
    low, high = checksum.clone(), checksum.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    return low.item() == high.item()


def survive(rank, nprocs, gloo, victim):
    from hoop_torch import elastic
    torch.manual_seed(1)
    model = nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ddp = DDP(model)
    t = torch.ones(1 << 16)
    for i in range(100_000):
        if rank == victim and i == 20:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            dist.all_reduce(t)
        except RuntimeError:
            break
    else:
        print(f"rank {rank}: never raised", flush=True)
        return False
    old = elastic.shrink(TIMEOUT)
    kept = [r for r in range(nprocs) if r != victim]
    me, world = dist.get_rank(), dist.get_world_size()
    ok = old == kept and world == len(kept) and old[me] == rank
    mine = value(rank)
    dist.all_reduce(mine)
    ok &= torch.equal(mine, sum(value(r) for r in kept))
    # Replicas drift apart on purpose; rank 0's state makes them one again.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(me)
    ddp = DDP(model)
    place = torch.tensor([me + 7])
    elastic.share_state(model, optimizer, place)
    ok &= place.item() == 7
    ok &= step_keeps_replicas_equal(ddp, model, optimizer, me)
    print(f"rank {rank} -> {me} of {world}: old ranks {old}, "
          f"{'ok' if ok else 'WRONG'}", flush=True)
    return ok


def grow(rank, nprocs, gloo):
    """Members (rank < nprocs) step, then look for newcomers until one
    joined; the newcomer, its model made from another seed, joins."""
    from hoop_torch import elastic
    member = rank < nprocs
    torch.manual_seed(1 if member else 2)
    model = nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if member:
        ddp = DDP(model)
        ddp(torch.full((16, 8), float(rank))).sum().backward()
        optimizer.step()
        t = torch.ones(1 << 10)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            dist.all_reduce(t)
            if elastic.grow(TIMEOUT):
                break
            time.sleep(0.02)
        else:
            print(f"rank {rank}: nobody joined", flush=True)
            return False
    else:
        elastic.join(TIMEOUT)
    me, world = dist.get_rank(), dist.get_world_size()
    ok = world == nprocs + 1 and me == rank
    ddp = DDP(model)
    place = torch.tensor([me + 7])
    elastic.share_state(model, optimizer, place)
    ok &= place.item() == 7
    mine = value(me)
    dist.all_reduce(mine)
    ok &= torch.equal(mine, sum(value(r) for r in range(world)))
    # The newcomer's momentum is rank 0's: one more step keeps the replicas
    # equal only if it is.
    momentum = [optimizer.state[p].get("momentum_buffer")
                for p in model.parameters()]
    ok &= all(m is not None for m in momentum)
    ok &= step_keeps_replicas_equal(ddp, model, optimizer, me)
    print(f"{'member' if member else 'newcomer'} {rank} -> {me} of {world}: "
          f"{'ok' if ok else 'WRONG'}", flush=True)
    return ok


EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "ddp_mnist.py"
FASHION = Path("/usr/share/datasets/fashion-mnist")


def example_goes_on(hoop_run, respawn):
    """The example under hoop-run --elastic, rank 1 killed once epoch 1 is
    out; True when the others finish (and with `respawn`, when its
    replacement joined and the last epoch ran on 3 ranks)."""
    # The replacement starts Python and torch and loads the data (seconds
    # on a loaded machine) while the others train on: enough epochs left.
    epochs = 6 if respawn else 2
    cmd = [hoop_run, "--elastic", "--respawn", str(int(respawn)), "-n", "3",
           sys.executable, str(EXAMPLE), "--elastic", "--epochs",
           str(epochs), "--limit", "6000"]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    out, killed = [], False
    deadline = time.monotonic() + 150
    for line in job.stdout:
        out.append(line)
        if not killed and "epoch 1:" in line:
            ranks = subprocess.run(["pgrep", "-P", str(job.pid)],
                                   capture_output=True, text=True).stdout
            os.kill(int(sorted(ranks.split(), key=int)[1]), signal.SIGKILL)
            killed = True
        if time.monotonic() > deadline:
            job.kill()
    code = job.wait()
    text = "".join(out)
    ok = (code == 0 and killed and f"epoch {epochs}:" in text and
          re.search(r"rank\(s\) \d left; 2 ranks go on", text) is not None)
    if respawn:
        ok &= ("1 rank(s) joined; 3 ranks go on" in text and
               re.search(rf"epoch {epochs}: .*\(hoop, 3 ranks", text)
               is not None)
    print(f"ddp_mnist.py --elastic under hoop-run --respawn {int(respawn)}, "
          f"a rank killed: exit {code}, {'ok' if ok else 'WRONG'}\n{text}",
          flush=True)
    return ok


def main():
    failed = False
    for victim in (2, 0):
        codes = harness.run(survive, 4, victim, timeout=TIMEOUT,
                            deadline_s=120)
        want = [0 if r != victim else -signal.SIGKILL for r in range(4)]
        print(f"rank {victim} killed: exit codes {codes} (want {want})",
              flush=True)
        failed |= codes != want
    job = {"HOOP_ROOT_ADDR": f"127.0.0.1:{harness.free_port()}",
           "HOOP_AUTH_TOKEN": os.urandom(16).hex()}
    codes = harness.run(grow, 3, timeout=TIMEOUT, deadline_s=120, extra=1,
                        env=job)
    print(f"a newcomer joined 3 ranks: exit codes {codes}", flush=True)
    failed |= codes != [0] * 4
    if len(sys.argv) > 1 and FASHION.is_dir():
        for respawn in (False, True):
            failed |= not example_goes_on(sys.argv[1], respawn)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
