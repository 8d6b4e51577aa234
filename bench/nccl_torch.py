#!/usr/bin/env python3
"""PyTorch's own NCCL backend running on hoop's libnccl.so.2 (GPU machine).

Run with hoop's library preloaded (PyTorch finds NCCL through its RPATH, so
LD_LIBRARY_PATH is not enough):

  LD_PRELOAD=build/lib/hoop/libnccl.so.2 python3 bench/nccl_torch.py \
      --nprocs 2 --hoop-bench build/bench/hoop-bench

and once without LD_PRELOAD for NVIDIA's NCCL (--nprocs 1 works; 2 on one GPU
is refused, and the script records the error).  With N processes sharing
GPU 0, backend "nccl":

1. checks which libnccl the process has mapped and what version PyTorch sees;
2. runs every collective on CUDA tensors and compares it with a CPU
   reference (all_reduce with every op, PREMUL_SUM where this PyTorch has
   it, broadcast, reduce, all_gather(_into_tensor), reduce_scatter
   (_tensor), all_to_all_single, send/recv, batch_isend_irecv, barrier);
3. trains the MNIST-format MLP (784-128-10, SGD) with DDP for a few steps and
   compares every loss with one process running an N-times batch;
4. times dist.all_reduce on 4 KiB .. 64 MiB float32 (median of interleaved
   repeats) and, with --hoop-bench, hoop-bench's figure for the same bytes.

Prints one JSON line per result; the lead writes them to bench/results/.
Untested until a GPU session runs it: written from PyTorch's documented API.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def emit(**kw):
    print(json.dumps(kw), flush=True)


def mapped_ncclsos():
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if "libnccl" in line})


def reference_reduce(tensors, op):
    out = tensors[0].clone()
    for t in tensors[1:]:
        if op == "sum" or op == "avg" or op == "premul_sum":
            out = out + t
        elif op == "product":
            out = out * t
        elif op == "min":
            out = torch.minimum(out, t)
        elif op == "max":
            out = torch.maximum(out, t)
    if op == "avg":
        out = out / len(tensors)
    return out


def inputs(rank, n, count, dtype, seed=0):
    g = torch.Generator().manual_seed(1000 * seed + rank)
    if dtype.is_floating_point:
        return torch.randint(-4, 5, (count,), generator=g).to(dtype)
    return torch.randint(-4, 5, (count,), generator=g).to(dtype)


def check_collectives(rank, n, dev):
    failures = []

    def expect(name, got, want):
        if not torch.equal(got.cpu(), want.cpu()):
            bad = (got.cpu() != want.cpu()).nonzero()
            failures.append(f"{name}: {len(bad)} wrong, first at {bad[0].tolist()}")

    ops = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT,
           "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}
    if hasattr(dist.ReduceOp, "AVG"):
        ops["avg"] = dist.ReduceOp.AVG
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32,
                  torch.int64, torch.uint8, torch.float64):
        for count in (0, 1, 1000003):
            all_in = [inputs(r, n, count, dtype, 1) for r in range(n)]
            for name, op in ops.items():
                if name == "avg" and not dtype.is_floating_point:
                    continue
                if name == "product" and count > 1000:
                    continue
                t = all_in[rank].to(dev)
                dist.all_reduce(t, op=op)
                want = reference_reduce([x.double() for x in all_in], name)
                expect(f"all_reduce {name} {dtype} {count}", t,
                       want.to(dtype))
    if hasattr(dist, "_make_nccl_premul_sum"):
        t = torch.ones(10, device=dev)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))
        expect("premul_sum", t, torch.full((10,), 2.0 * n))
    count = 4099
    all_in = [inputs(r, n, count, torch.float32, 2) for r in range(n)]
    root = n - 1
    t = all_in[rank].to(dev)
    dist.broadcast(t, src=root)
    expect("broadcast", t, all_in[root])
    t = all_in[rank].to(dev)
    dist.reduce(t, dst=root)
    if rank == root:
        expect("reduce", t, reference_reduce(all_in, "sum"))
    outs = [torch.empty(count, device=dev) for _ in range(n)]
    dist.all_gather(outs, all_in[rank].to(dev))
    for r in range(n):
        expect(f"all_gather block {r}", outs[r], all_in[r])
    if hasattr(dist, "all_gather_into_tensor"):
        big = torch.empty(n * count, device=dev)
        dist.all_gather_into_tensor(big, all_in[rank].to(dev))
        expect("all_gather_into_tensor", big, torch.cat(all_in))
    blocks = [inputs(rank * n + p, n, count, torch.float32, 3) for p in range(n)]
    mine = torch.empty(count, device=dev)
    dist.reduce_scatter(mine, [b.to(dev) for b in blocks])
    want = sum(inputs(r * n + rank, n, count, torch.float32, 3) for r in range(n))
    expect("reduce_scatter", mine, want)
    if hasattr(dist, "reduce_scatter_tensor"):
        mine = torch.empty(count, device=dev)
        dist.reduce_scatter_tensor(mine, torch.cat(blocks).to(dev))
        expect("reduce_scatter_tensor", mine, want)
    send = torch.cat(blocks).to(dev)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)
    expect("all_to_all_single", recv,
           torch.cat([inputs(r * n + rank, n, count, torch.float32, 3)
                      for r in range(n)]))
    if n > 1:
        right, left = (rank + 1) % n, (rank - 1) % n
        out = torch.full((77,), float(rank), device=dev)
        got = torch.empty(77, device=dev)
        ops_ = [dist.P2POp(dist.isend, out, right),
                dist.P2POp(dist.irecv, got, left)]
        for req in dist.batch_isend_irecv(ops_):
            req.wait()
        expect("batch_isend_irecv", got, torch.full((77,), float(left)))
        if rank % 2 == 0:
            dist.send(out, right)
            dist.recv(got, left)
        else:
            dist.recv(got, left)
            dist.send(out, right)
        expect("send/recv", got, torch.full((77,), float(left)))
    dist.barrier()
    return failures


def mlp():
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128),
                               torch.nn.ReLU(), torch.nn.Linear(128, 10))


def batches(steps, batch, seed=7):
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(batch, 1, 28, 28, generator=g),
             torch.randint(0, 10, (batch,), generator=g))
            for _ in range(steps)]


def train(model, data, dev, ddp_rank=None, n=1):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, times = [], []
    for x, y in data:
        if ddp_rank is not None:
            per = len(x) // n
            x, y = x[ddp_rank * per:(ddp_rank + 1) * per], y[ddp_rank * per:(ddp_rank + 1) * per]
        x, y = x.to(dev), y.to(dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if ddp_rank is not None:
            loss = loss.detach().clone()
            dist.all_reduce(loss)
            loss /= n
        losses.append(loss.item())
    return losses, times


def busbw(rank, n, dev, sizes, repeats):
    rows = []
    for size in sizes:
        t = torch.ones(size // 4, device=dev)
        for _ in range(5):
            dist.all_reduce(t)
        meds = []
        for _ in range(repeats):
            times = []
            for _ in range(20):
                dist.barrier()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                dist.all_reduce(t)
                torch.cuda.synchronize()
                el = torch.tensor([time.perf_counter() - t0], device=dev)
                dist.all_reduce(el, op=dist.ReduceOp.MAX)
                times.append(el.item())
            meds.append(statistics.median(times))
        sec = statistics.median(meds)
        rows.append({"bytes": size, "time_us": sec * 1e6,
                     "busbw_GBps": size / sec / 1e9 * 2 * (n - 1) / max(n, 1),
                     "spread_us": [min(meds) * 1e6, max(meds) * 1e6]})
    return rows


def worker(rank, n, port, args):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      RANK=str(rank), WORLD_SIZE=str(n))
    torch.cuda.set_device(0)  # every rank on the one GPU
    dev = torch.device("cuda", 0)
    try:
        dist.init_process_group("nccl", rank=rank, world_size=n)
        x = torch.ones(4, device=dev)
        dist.all_reduce(x)
        torch.cuda.synchronize()
    except Exception as e:  # NVIDIA's NCCL refuses two ranks on one GPU
        if rank == 0:
            emit(result="init", nprocs=n, ok=False, error=str(e)[:2000])
        return
    if rank == 0:
        emit(result="library", nprocs=n, mapped=mapped_ncclsos(),
             torch=torch.__version__,
             nccl_version=list(torch.cuda.nccl.version()))
    failures = check_collectives(rank, n, dev)
    emit(result="collectives", rank=rank, nprocs=n, failures=failures[:20],
         ok=not failures)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(mlp().to(dev))
    losses, times = train(model, batches(args.steps, 64 * n), dev, rank, n)
    if rank == 0:
        emit(result="ddp", nprocs=n, losses=losses,
             step_ms_median=statistics.median(times) * 1e3)
        emit(result="allreduce", nprocs=n,
             rows=busbw(rank, n, dev, args.sizes, args.repeats))
    else:
        busbw(rank, n, dev, args.sizes, args.repeats)
    dist.destroy_process_group()


def single_process_losses(args, n):
    torch.manual_seed(0)
    model = mlp().to("cuda")
    losses, _ = train(model, batches(args.steps, 64 * n), "cuda")
    return losses


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nprocs", type=int, nargs="+", default=[2, 4])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--sizes", type=int, nargs="+",
                   default=[4096, 65536, 1 << 20, 16 << 20, 64 << 20])
    p.add_argument("--hoop-bench", help="hoop-bench, for the same bytes")
    p.add_argument("--hoop-run", help="hoop-run (default: beside hoop-bench)")
    args = p.parse_args()
    emit(result="setup", preload=os.environ.get("LD_PRELOAD", ""),
         device=torch.cuda.get_device_name(0))
    for n in args.nprocs:
        mp.spawn(worker, args=(n, 29500 + n, args), nprocs=n, join=True)
        emit(result="reference", nprocs=n,
             losses=single_process_losses(args, n))
        if args.hoop_bench:
            run = args.hoop_run or os.path.join(
                os.path.dirname(args.hoop_bench), "..", "tools", "hoop-run")
            env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
            out = subprocess.run(
                [run, "-n", str(n), args.hoop_bench, "-m", "device",
                 "-b", str(min(args.sizes)), "-e", str(max(args.sizes)),
                 "-f", "4", "-n", "20", "-w", "5"],
                capture_output=True, text=True, env=env)
            emit(result="hoop-bench", nprocs=n, rc=out.returncode,
                 stdout=out.stdout[-4000:], stderr=out.stderr[-2000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
