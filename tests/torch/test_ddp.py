#!/usr/bin/python3
"""DistributedDataParallel over hoop against the same training over gloo.

    PYTHONPATH=<build>/python /usr/bin/python3 tests/torch/test_ddp.py NPROCS

On each rank, the models of docs/examples/ddp_mnist.py (the MLP and the
CNN) and one whose embedding has sparse gradients, each with one
parameter that forward never uses, are trained for a few SGD
steps twice from the same start and on the same batches: once with DDP on
the hoop group, once on a gloo group. DDP runs with find_unused_parameters
and 50 KB gradient buckets (several all-reduces per step, overlapping the
backward pass). The two runs must end with the same parameters to float
tolerance, hoop's counters must show the all-reduces, and the parameters
must have moved, agreeing across ranks.
"""
import importlib.util
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import harness  # noqa: E402

EXAMPLE = HERE.parent.parent / "docs" / "examples" / "ddp_mnist.py"
STEPS = 4


def example():
    spec = importlib.util.spec_from_file_location("ddp_mnist", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class WithUnused(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body
        self.unused = nn.Linear(4, 4)

    def forward(self, x):
        return self.body(x)


class SparseEmbedding(nn.Module):
    """A model with sparse gradients: an image's first pixels pick rows of
    an nn.Embedding(sparse=True), whose gradient DDP all-reduces as a
    sparse tensor."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(64, 16, sparse=True)
        self.out = nn.Linear(16, 10)

    def forward(self, x):
        ids = (x.flatten(1)[:, :12].abs() * 20).long().clamp(max=63)
        return self.out(self.embed(ids).mean(1))


def train(model_class, group, rank):
    """Parameters after STEPS steps of DDP over `group` (None: hoop's)."""
    torch.manual_seed(1 + rank)  # DDP starts every rank from rank 0's
    model = DDP(WithUnused(model_class()), process_group=group,
                find_unused_parameters=True, bucket_cap_mb=0.05)
    # SGD's momentum takes no sparse gradients.
    momentum = 0.0 if model_class is SparseEmbedding else 0.9
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=momentum)
    data = torch.Generator().manual_seed(100 + rank)
    torch.manual_seed(7 + rank)  # the same dropout masks in both runs
    for _ in range(STEPS):
        x = torch.randn(16, 1, 28, 28, generator=data)
        y = torch.randint(0, 10, (16,), generator=data)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.module.parameters()]


def rank_main(rank, n, gloo):
    import hoop_torch
    # Debian 13's PyTorch 2.6 now and then computes NaN gradients in the
    # CNN's convolutions through oneDNN under DDP, over gloo alone as over
    # hoop, and never with oneDNN off: bench/results/
    # 2026-11-28-torch26-onednn-nan.md.  The comparison is of the all-reduce.
    torch.backends.mkldnn.enabled = False
    ok = True
    models = dict(example().MODELS, sparse=SparseEmbedding)
    for name, model_class in sorted(models.items()):
        before = harness.calls_of(hoop_torch, "allreduce")
        hoop = train(model_class, None, rank)
        after = harness.calls_of(hoop_torch, "allreduce")
        reference = train(model_class, gloo, rank)
        torch.manual_seed(1)
        start = list(WithUnused(model_class()).parameters())
        for i, (h, g) in enumerate(zip(hoop, reference)):
            if not torch.allclose(h, g, rtol=1e-4, atol=1e-5):
                print(f"rank {rank}: {name} parameter {i}: hoop and gloo "
                      f"differ by {(h - g).abs().max().item():.3g} (finite: "
                      f"hoop {h.isfinite().all().item()}, "
                      f"gloo {g.isfinite().all().item()})", flush=True)
                ok = False
        moved = sum(not torch.equal(h, s) for h, s in zip(hoop, start))
        calls = after - before
        # Every rank's parameters, summed, through gloo: equal everywhere.
        total = torch.stack([h.double().sum() for h in hoop])
        totals = [torch.zeros_like(total) for _ in range(n)]
        dist.all_gather(totals, total, group=gloo)
        agree = all(torch.equal(t, totals[0]) for t in totals)
        if n > 1 and calls < STEPS:
            print(f"rank {rank}: {name}: only {calls} hoop all-reduces in "
                  f"{STEPS} steps", flush=True)
            ok = False
        if moved < len(hoop) - 2 or not agree:
            print(f"rank {rank}: {name}: {moved} of {len(hoop)} parameters "
                  f"moved, ranks agree: {agree}", flush=True)
            ok = False
        if rank == 0:
            print(f"{name}: {len(hoop)} parameters equal to gloo's after "
                  f"{STEPS} steps, {calls} hoop all-reduces", flush=True)
    return ok


if __name__ == "__main__":
    harness.main(rank_main, int(sys.argv[1]))
