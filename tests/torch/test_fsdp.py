#!/usr/bin/python3
"""FullyShardedDataParallel over hoop against the same training over gloo.

    PYTHONPATH=<build>/python /usr/bin/python3 tests/torch/test_fsdp.py

On 2 ranks, a small MLP whose layers are FSDP units of their own (sizes
odd, so that FSDP pads the shards) is trained on CPU for a few SGD steps
twice from the same start and on the same batches: once sharded over the
hoop group, once over a gloo group. FSDP all-gathers each unit's
parameters for forward and backward and reduce-scatters its gradients, so
the two runs must end with the same full parameters, hoop's counters must
show the all-gathers and reduce-scatters, and the parameters must have
moved, agreeing across ranks.

Skipped (exit 77), saying why, where FSDP cannot train on CPU. PyTorch
1.13 (Debian 12) is such a place twice over: under Python 3.11 its
torch.distributed.fsdp does not import (a dataclass with a mutable
default), and its FSDP raises "FSDP does not support CPU only execution"
at the first forward. HOOP_TORCH_FSDP_REQUIRED=1 makes that a failure
(tools/torch2-check.sh sets it: PyTorch 2.6 trains FSDP on CPU).
"""
import functools
import os
import sys
import tempfile
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

try:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy
    IMPORT_ERROR = None
except Exception as e:  # 1.13 under Python 3.11: a ValueError of dataclasses
    IMPORT_ERROR = e

NPROCS = 2
STEPS = 4
UNITS = 3  # the Linears; the root unit around them is left no parameters
CPU = torch.device("cpu")
# With 2 ranks every reduced element is one sum of two float32 values, the
# same whichever rank's comes first, and FSDP scales it the same way over
# either backend; so the runs should agree to the bit. A few float32 ulps
# (1.2e-7 each) of room, and nothing absolute, so that any difference in
# what was reduced shows.
RTOL, ATOL = 5e-7, 0.0


def model():
    torch.manual_seed(1)  # FSDP shards without a broadcast: same start everywhere
    return nn.Sequential(nn.Linear(37, 53), nn.ReLU(), nn.Linear(53, 29),
                         nn.ReLU(), nn.Linear(29, 5))


def fsdp(group):
    # Every Linear of the MLP above becomes a unit of its own.
    wrap = functools.partial(size_based_auto_wrap_policy, min_num_params=100)
    return FSDP(model(), process_group=group, auto_wrap_policy=wrap,
                device_id=CPU)


def cpu_fsdp_unavailable():
    """Why FSDP cannot train on CPU with this PyTorch (None: it can),
    asked of a 1-rank gloo group, so that hoop has no part in it."""
    if IMPORT_ERROR is not None:
        return f"torch.distributed.fsdp does not import: {IMPORT_ERROR}"
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # That FSDP will not shard over one rank, which is not the question.
        warnings.simplefilter("ignore")
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store",
                                rank=0, world_size=1)
        try:
            fsdp(None)(torch.zeros(1, 37)).sum().backward()
        except Exception as e:
            return f"{type(e).__name__}: {str(e).splitlines()[0]}"
        finally:
            dist.destroy_process_group()
    return None


def train(group, rank):
    """Full parameters after STEPS steps of FSDP over `group` (None:
    hoop's)."""
    net = fsdp(group)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    data = torch.Generator().manual_seed(100 + rank)
    for _ in range(STEPS):
        x = torch.randn(24, 37, generator=data)
        y = torch.randint(0, 5, (24,), generator=data)
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
    with FSDP.summon_full_params(net):
        return [p.detach().clone() for p in net.parameters()]


def rank_main(rank, n, gloo):
    import hoop_torch
    ok = True
    before = {c: harness.calls_of(hoop_torch, c)
              for c in ("allgather", "reduce_scatter")}
    hoop = train(None, rank)
    ran = {c: harness.calls_of(hoop_torch, c) - before[c] for c in before}
    reference = train(gloo, rank)
    start = [p.detach() for p in model().parameters()]
    worst = 0.0
    for i, (h, g) in enumerate(zip(hoop, reference)):
        worst = max(worst, (h - g).abs().max().item())
        if not torch.allclose(h, g, rtol=RTOL, atol=ATOL):
            print(f"rank {rank}: parameter {i} {tuple(h.shape)}: hoop and "
                  f"gloo differ by {(h - g).abs().max().item():.3g}",
                  flush=True)
            ok = False
    moved = sum(not torch.equal(h, s) for h, s in zip(hoop, start))
    # Every rank's parameters, summed, through gloo: equal everywhere.
    total = torch.stack([h.double().sum() for h in hoop])
    totals = [torch.zeros_like(total) for _ in range(n)]
    dist.all_gather(totals, total, group=gloo)
    agree = all(torch.equal(t, totals[0]) for t in totals)
    # Each step all-gathers every unit for forward and again for backward
    # (FULL_SHARD frees it in between), and reduce-scatters its gradient.
    if (ran["allgather"] < 2 * UNITS * STEPS
            or ran["reduce_scatter"] < UNITS * STEPS):
        print(f"rank {rank}: hoop ran only {ran} in {STEPS} steps of "
              f"{UNITS} units", flush=True)
        ok = False
    if moved != len(hoop) or not agree:
        print(f"rank {rank}: {moved} of {len(hoop)} parameters moved, "
              f"ranks agree: {agree}", flush=True)
        ok = False
    if rank == 0:
        size = sum(h.numel() for h in hoop)
        print(f"torch {torch.__version__}: {len(hoop)} parameters ({size} "
              f"values) after {STEPS} FSDP steps on {n} ranks; hoop against "
              f"gloo: largest difference {worst:.3g} (rtol {RTOL}, atol "
              f"{ATOL}); hoop ran {ran['allgather']} all-gathers and "
              f"{ran['reduce_scatter']} reduce-scatters", flush=True)
    return ok


if __name__ == "__main__":
    why = cpu_fsdp_unavailable()
    if why:
        print(f"FSDP cannot train on CPU with torch {torch.__version__} "
              f"({why})", flush=True)
        sys.exit(1 if os.environ.get("HOOP_TORCH_FSDP_REQUIRED") == "1"
                 else 77)
    harness.main(rank_main, NPROCS)
