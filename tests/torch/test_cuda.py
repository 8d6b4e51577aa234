#!/usr/bin/python3
"""The hoop backend on CUDA tensors, every process on one GPU.

    PYTHONPATH=<build>/python /usr/bin/python3 tests/torch/test_cuda.py NPROCS

NCCL refuses two ranks on one device; hoop takes them, so every process
uses GPU (rank % devices). Each call is made on CUDA tensors through hoop
and on CPU copies of the same inputs through gloo, and the results are
compared as tests/torch/test_ops.py does (exactly for integers, data
movement and MIN/MAX, to a tolerance for float sums). The inputs are made
by a kernel on the caller's current stream just before each call, so a
backend that did not queue the call after them reads stale memory; one
case runs on a side stream, one waits on async Works and polls
is_completed, and a few DDP steps on the GPU must end where the same
steps over gloo on the CPU end. Exits 77 (skipped) without a GPU or with
a hoop_torch built without CUDA, saying which.
"""
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
from test_ops import Check, R, hoop_calls, make  # noqa: E402

all_gather_into_tensor = (getattr(dist, "all_gather_into_tensor", None)
                          or dist._all_gather_base)
reduce_scatter_tensor = (getattr(dist, "reduce_scatter_tensor", None)
                         or dist._reduce_scatter_base)
# 1, not divisible by the rank counts, and past the staging chunks.
COUNTS = (1, 1001, 300_001)


def device(rank):
    return torch.device("cuda", rank % torch.cuda.device_count())


def on_gpu(x, dev):
    """x on the GPU, written by a kernel on the current stream."""
    return (x.to(dev, non_blocking=True) * 1).to(x.dtype)


def case_allreduce(c, dev):
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32,
                  torch.int64):
        ops = [("sum", R.SUM), ("max", R.MAX), ("min", R.MIN)]
        if dtype.is_floating_point:
            ops.append(("avg", R.AVG))
        for opname, op in ops:
            for count in COUNTS:
                x = make((count,), dtype, c.rank, "cuda-allreduce", opname)
                t = on_gpu(x, dev)
                dist.all_reduce(t, op=op)
                c.same(f"all_reduce cuda {dtype} {opname} {count}", t.cpu(),
                       c.gloo_reduce(x, op),
                       exact=opname in ("min", "max"))


def case_side_stream(c, dev):
    """The call goes on the current stream, whichever it is."""
    x = make((100_003,), torch.float32, c.rank, "cuda-stream")
    side = torch.cuda.Stream(device=dev)
    with torch.cuda.stream(side):
        t = on_gpu(x, dev)
        dist.all_reduce(t)
        got = t.cpu()  # synchronises with `side`, not the default stream
    c.same("all_reduce cuda on a side stream", got, c.gloo_reduce(x, R.SUM))


def case_wait_on_another_stream(c, dev):
    """wait() orders the stream current then after the call's, as NCCL's
    Work does: the result is read on a stream the call was not made on."""
    x = make((300_007,), torch.float32, c.rank, "cuda-wait-stream")
    t = on_gpu(x, dev)
    work = dist.all_reduce(t, async_op=True)
    side = torch.cuda.Stream(device=dev)
    with torch.cuda.stream(side):
        work.wait()
        got = (t * 1).cpu()
    c.same("all_reduce cuda, waited on a side stream", got,
           c.gloo_reduce(x, R.SUM))


def case_async(c, dev):
    xs = [make((50_000 + i,), torch.float32, c.rank, "cuda-async", i)
          for i in range(3)]
    ts = [on_gpu(x, dev) for x in xs]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    deadline = time.monotonic() + 60
    while not all(w.is_completed() for w in works):
        if time.monotonic() > deadline:
            c.failures.append("async all_reduce on CUDA: is_completed() "
                              "still false after 60 s")
            return
        time.sleep(0.001)
    for w in works:
        w.wait()
    for i, (t, x) in enumerate(zip(ts, xs)):
        c.same(f"async all_reduce cuda [{i}]", t.cpu(),
               c.gloo_reduce(x, R.SUM))


def case_movement(c, dev):
    n, r = c.n, c.rank
    for count in COUNTS:
        for root in range(n):
            x = make((count,), torch.float32, r, "cuda-bcast", root)
            t = on_gpu(x, dev)
            dist.broadcast(t, src=root)
            c.moved(f"broadcast cuda {count} root {root}", t.cpu(),
                    make((count,), torch.float32, root, "cuda-bcast", root))
        x = make((count,), torch.bfloat16, r, "cuda-gather")
        out = torch.empty(n * count, dtype=torch.bfloat16, device=dev)
        all_gather_into_tensor(out, on_gpu(x, dev))
        want = torch.cat([make((count,), torch.bfloat16, q, "cuda-gather")
                          for q in range(n)])
        c.moved(f"all_gather_into_tensor cuda {count}", out.cpu(), want)
        x = make((n * count,), torch.float32, r, "cuda-rs")
        out = torch.empty(count, dtype=torch.float32, device=dev)
        reduce_scatter_tensor(out, on_gpu(x, dev))
        c.same(f"reduce_scatter_tensor cuda {count}", out.cpu(),
               c.gloo_reduce(x, R.SUM)[r * count:(r + 1) * count])
        x = make((n * count,), torch.int32, r, "cuda-a2a")
        out = torch.empty(n * count, dtype=torch.int32, device=dev)
        dist.all_to_all_single(out, on_gpu(x, dev))
        want = torch.cat([make((n * count,), torch.int32, q, "cuda-a2a")
                          [r * count:(r + 1) * count] for q in range(n)])
        c.moved(f"all_to_all_single cuda {count}", out.cpu(), want)
    if n > 1 and r < 2:
        y = make((1001,), torch.float64, 0, "cuda-pair")
        if r == 0:
            dist.send(on_gpu(y, dev), 1)
        else:
            z = torch.zeros(1001, dtype=torch.float64, device=dev)
            dist.recv(z, 0)
            c.moved("send/recv cuda", z.cpu(), y)
    if n > 1:
        # From PyTorch 2.1 these go through the backend's start/end
        # coalescing, whose one Work stands for all four.
        nxt, prv = (r + 1) % n, (r - 1) % n
        x = on_gpu(make((4099,), torch.float32, r, "cuda-batch"), dev)
        got_prev = torch.zeros(4099, dtype=torch.float32, device=dev)
        got_next = torch.zeros(4099, dtype=torch.float32, device=dev)
        ops = [dist.P2POp(dist.isend, x, nxt), dist.P2POp(dist.isend, x, prv),
               dist.P2POp(dist.irecv, got_prev, prv),
               dist.P2POp(dist.irecv, got_next, nxt)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        c.moved("batch_isend_irecv cuda from previous", got_prev.cpu(),
                make((4099,), torch.float32, prv, "cuda-batch"))
        c.moved("batch_isend_irecv cuda from next", got_next.cpu(),
                make((4099,), torch.float32, nxt, "cuda-batch"))


def ddp_params(group, dev, rank):
    """Parameters after a few DDP steps on `dev` over `group`."""
    torch.manual_seed(11)
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(),
                          nn.Linear(32, 4)).double().to(dev)
    ids = [dev.index] if dev.type == "cuda" else None
    ddp = DDP(model, device_ids=ids, process_group=group, bucket_cap_mb=0.001)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    data = torch.Generator().manual_seed(200 + rank)
    for _ in range(4):
        x = torch.randn(8, 20, generator=data, dtype=torch.float64).to(dev)
        y = torch.randn(8, 4, generator=data, dtype=torch.float64).to(dev)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


def case_ddp(c, dev):
    got = ddp_params(None, dev, c.rank)
    want = ddp_params(c.gloo, torch.device("cpu"), c.rank)
    for i, (g, w) in enumerate(zip(got, want)):
        c.same(f"DDP on cuda, parameter {i}", g, w)


CASES = [case_allreduce, case_side_stream, case_wait_on_another_stream,
         case_async, case_movement, case_ddp]


def rank_main(rank, n, gloo):
    dev = device(rank)
    torch.cuda.set_device(dev)
    c = Check(rank, n, gloo)
    for case in CASES:
        before = hoop_calls()
        case(c, dev)
        c.through_hoop(case.__name__, before)
    return c.report(f" on {torch.cuda.get_device_name(dev)}")


def skip_reason():
    if not torch.cuda.is_available():
        return "no CUDA device visible to PyTorch"
    import hoop_torch
    if not hoop_torch.cuda:
        return "hoop_torch was built without CUDA"
    return None


if __name__ == "__main__":
    why = skip_reason()
    if why is not None:
        print(f"skipped: {why}", flush=True)
        sys.exit(77)
    harness.main(rank_main, int(sys.argv[1]))
