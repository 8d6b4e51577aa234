#!/usr/bin/python3
"""What one small dist.all_reduce costs through PyTorch itself, per backend.

One rank (world size 1), so the backend's collective has nothing to move:
what is left is PyTorch's Python (`dist.all_reduce`), the pybind call, the
backend's Work and its wait (`pg.allreduce([t]).wait()`), and an async
call whose Work is dropped (`pg.allreduce([t])`). Each repeat runs hoop and
gloo in a fresh process each, in a rotating order; a process reports the
best of 5 rounds of --calls calls per measure, and the table gives the
median and range over repeats, and gloo / hoop.

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_call_cost.py --repeats 5
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

BACKENDS = ("hoop", "gloo")
MEASURES = ("dist.all_reduce", "pg.allreduce().wait()", "pg.allreduce()")


def child(backend, calls, port):
    import torch
    import torch.distributed as dist
    if backend == "hoop":
        import hoop_torch  # noqa: F401  (a build tree's is not autoloaded)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, rank=0, world_size=1)
    t = torch.zeros(1024)
    pg = dist.distributed_c10d._get_default_group()
    calls_of = {
        "dist.all_reduce": lambda: dist.all_reduce(t),
        "pg.allreduce().wait()": lambda: pg.allreduce([t]).wait(),
        "pg.allreduce()": lambda: pg.allreduce([t]),
    }
    result = {}
    for name in MEASURES:
        call = calls_of[name]
        for _ in range(calls // 20):
            call()
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(calls):
                call()
            best = min(best, (time.perf_counter() - t0) / calls * 1e6)
        result[name] = best
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps(result))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--port", type=int, default=29650)
    p.add_argument("--child", choices=BACKENDS, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child, a.calls, a.port)
        return
    runs = {b: [] for b in BACKENDS}
    for r in range(a.repeats):
        order = BACKENDS[r % 2:] + BACKENDS[:r % 2]
        for i, b in enumerate(order):
            out = subprocess.run(
                [sys.executable, __file__, "--child", b, "--calls",
                 str(a.calls), "--port", str(a.port + 2 * r + i)],
                check=True, capture_output=True, text=True).stdout
            runs[b].append(json.loads(out.strip().splitlines()[-1]))
            print(f"# repeat {r + 1} {b}: {runs[b][-1]}", flush=True)
    print("| per call, us, 1 rank | hoop | gloo | gloo / hoop |")
    print("| --- | ---: | ---: | ---: |")
    for m in MEASURES:
        cells = []
        for b in BACKENDS:
            v = [run[m] for run in runs[b]]
            cells.append(f"{statistics.median(v):.2f} "
                         f"({min(v):.2f}-{max(v):.2f})")
        ratio = (statistics.median(run[m] for run in runs["gloo"]) /
                 statistics.median(run[m] for run in runs["hoop"]))
        print(f"| `{m}` | {cells[0]} | {cells[1]} | {ratio:.1f} |")


if __name__ == "__main__":
    main()
