#!/usr/bin/python3
"""hoop vs gloo as torch.distributed backends, in one run on one machine.

1. DDP training: docs/examples/ddp_mnist.py under torchrun, 2 ranks, one
   torch thread each, the MLP and the CNN of PyTorch's MNIST example, the
   same script, data and seed with --backend hoop and --backend gloo,
   interleaved (the order alternating per repeat). A run's rate is the
   median over its epochs after the first (warm-up); per model the table
   gives each backend's median over repeats, the spread, and hoop / gloo.
2. dist.all_reduce through PyTorch (bench/peers/gloo_bench.py --backend
   hoop|gloo; float32 sum, in place, as torch calls it), beside hoop-bench's
   own in-place figure for the same bytes (hoop-run -n 2), per repeat in a
   rotating order; busbw per size and the ratios torch-hoop / hoop-bench
   and torch-hoop / torch-gloo, median and range over repeats.

    /usr/bin/python3 bench/torch_vs_gloo.py --build build --repeats 3 --out FILE.md

--load N keeps N busy processes running beside every run (bench/cpu_load.py):
a machine shared with other jobs.

--device cuda runs both on each rank's GPU (hoop-bench -m cuda); written
for a GPU machine and not yet run on one.
"""
import argparse
import json
import os
import shlex
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_allreduce import (  # noqa: E402  (shares run and report helpers)
    Run, execute, fenced, machine_info_basic, parse_rows, parse_size, rotate)
from cpu_load import busy  # noqa: E402

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "docs" / "examples" / "ddp_mnist.py"
PEER = HERE / "peers" / "gloo_bench.py"
BACKENDS = ("hoop", "gloo")
RANKS = 2


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", type=Path, default=Path("build"))
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--cnn-limit", type=int, default=20000,
                   help="training samples per CNN epoch (slower model)")
    p.add_argument("--begin", type=parse_size, default=4 << 10)
    p.add_argument("--end", type=parse_size, default=64 << 20)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--load", type=int, default=0,
                   help="busy processes beside every run")
    p.add_argument("--out", type=Path, required=True)
    return p.parse_args(argv)


def env(a):
    return dict(os.environ, PYTHONPATH=str((a.build / "python").resolve()),
                OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")


def training(a, backend, model):
    """One DDP run of the example; returns (Run, samples/s or None)."""
    # torchrun as Debian's 1.13 needs it (tests/test_programs.cc says why).
    argv = ["/usr/bin/python3", "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", str(RANKS), "--redirects", "2", "--tee", "2",
            str(EXAMPLE), "--backend", backend, "--model", model,
            "--device", a.device, "--data", a.data,
            "--epochs", str(a.epochs), "--json"]
    if model == "cnn":
        argv += ["--limit", str(a.cnn_limit)]
    run = Run(f"{model} {backend}", RANKS, 0, argv)
    run.load = os.getloadavg()[0]
    run.rc, run.stdout, run.stderr, run.seconds = execute(argv, a.timeout,
                                                          env(a))
    epochs = [json.loads(line) for line in run.stdout.splitlines()
              if line.startswith("{")]
    if run.rc != 0 or len(epochs) != a.epochs:
        run.problems.append(f"exit {run.rc}, {len(epochs)} epochs reported")
        return run, None
    steady = epochs[1:] or epochs
    return run, statistics.median(e["samples_per_s"] for e in steady)


def sweep_args(a):
    return ["-b", str(a.begin), "-e", str(a.end), "-f", "4",
            "-n", str(a.iters), "-w", str(a.warmup), "-c", "1"]


def allreduce_commands(a):
    bench = [str(a.build / "tools" / "hoop-run"), "--no-prefix", "-n",
             str(RANKS), str(a.build / "bench" / "hoop-bench")]
    if a.device == "cuda":
        bench += ["-m", "cuda"]
    torch = ["/usr/bin/python3", str(PEER), "--nprocs", str(RANKS),
             "--device", a.device]
    return {"hoop-bench": bench + sweep_args(a),
            "torch hoop": torch + ["--backend", "hoop"] + sweep_args(a),
            "torch gloo": torch + ["--backend", "gloo"] + sweep_args(a)}


def spread(values, fmt):
    return f"{fmt(min(values))}-{fmt(max(values))}"


def training_table(rates):
    lines = ["| model | hoop samples/s | gloo samples/s | hoop / gloo |",
             "|---|---:|---:|---:|"]
    for model in ("mlp", "cnn"):
        hoop, gloo = rates[model]["hoop"], rates[model]["gloo"]
        if not hoop or not gloo or len(hoop) != len(gloo):
            lines.append(f"| {model} | failed | | |")
            continue
        ratios = [h / g for h, g in zip(hoop, gloo)]
        lines.append(
            f"| {model} | {statistics.median(hoop):.0f} "
            f"({spread(hoop, lambda v: f'{v:.0f}')}) | "
            f"{statistics.median(gloo):.0f} "
            f"({spread(gloo, lambda v: f'{v:.0f}')}) | "
            f"{statistics.median(ratios):.2f} "
            f"({spread(ratios, lambda v: f'{v:.2f}')}) |")
    return "\n".join(lines)


def busbw(nbytes, us):
    return nbytes / (us * 1e3) * 2 * (RANKS - 1) / RANKS


def allreduce_table(times):
    """times[peer] = list (per repeat) of {size: median us}."""
    sizes = sorted(set.intersection(*(set(t) for runs in times.values()
                                       for t in runs)))
    lines = ["| bytes | hoop-bench busbw | torch hoop busbw | torch gloo "
             "busbw | torch hoop / hoop-bench | torch hoop / torch gloo |",
             "|---:|---:|---:|---:|---:|---:|"]
    for size in sizes:
        cells = [str(size)]
        bw = {}
        for peer in ("hoop-bench", "torch hoop", "torch gloo"):
            bw[peer] = [busbw(size, t[size]) for t in times[peer]]
            cells.append(f"{statistics.median(bw[peer]):.2f}")
        for base in ("hoop-bench", "torch gloo"):
            ratios = [h / b for h, b in zip(bw["torch hoop"], bw[base])]
            cells.append(f"{statistics.median(ratios):.2f} "
                         f"({spread(ratios, lambda v: f'{v:.2f}')})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    a = parse_args(sys.argv[1:])
    with busy(a.load):
        return measure(a)


def measure(a):
    cmdline = shlex.join([sys.executable] + sys.argv)
    runs, failures = [], []
    rates = {m: {b: [] for b in BACKENDS} for m in ("mlp", "cnn")}
    times = {peer: [] for peer in allreduce_commands(a)}
    for repeat in range(a.repeats):
        for model in ("mlp", "cnn"):
            for backend in rotate(list(BACKENDS), repeat):
                run, rate = training(a, backend, model)
                run.repeat = repeat
                runs.append(run)
                if rate is None:
                    failures.append(f"{run.peer}, repeat {repeat}: "
                                    + "; ".join(run.problems))
                else:
                    rates[model][backend].append(rate)
                print(f"repeat {repeat} {run.peer}: {rate} (load "
                      f"{run.load:.2f})", flush=True)
        for peer, argv in rotate(list(allreduce_commands(a).items()),
                                 repeat):
            run = Run(peer, RANKS, repeat, argv)
            run.load = os.getloadavg()[0]
            run.rc, run.stdout, run.stderr, run.seconds = execute(
                argv, a.timeout, env(a))
            parse_rows(run, in_place=True)
            if run.rc != 0 or run.problems:
                failures.append(f"{peer}, repeat {repeat}: exit {run.rc}; "
                                + "; ".join(run.problems))
            else:
                times[peer].append(run.times)
            runs.append(run)
            print(f"repeat {repeat} {peer}: {len(run.times)} sizes",
                  flush=True)
    parts = ["# hoop vs gloo as torch.distributed backends", ""]
    parts += machine_info_basic()
    parts += [f"- Command: `{cmdline}`",
              f"- Device: {a.device}; {RANKS} ranks, one torch thread each; "
              f"{a.repeats} repeats, hoop and gloo interleaved; {a.load} "
              "busy processes beside every run",
              f"- Training: {EXAMPLE.relative_to(HERE.parent)}, "
              f"{a.epochs} epochs (the first dropped), batch 64 per rank, "
              f"CNN on the first {a.cnn_limit} samples",
              "- All-reduce: float32 sum in place, barrier + one call timed "
              "on every rank, max over ranks, median over "
              f"{a.iters} iterations (shared/bench-method.md)", "",
              "## DDP training, samples/s (median over repeats, range)", "",
              training_table(rates), "",
              "## dist.all_reduce busbw, GB/s (median over repeats; ratios "
              "with their range)", ""]
    if all(times.values()):
        parts.append(allreduce_table(times))
    parts.append("")
    if failures:
        parts += ["## Failures", ""] + [f"- {f}" for f in failures] + [""]
    parts += ["## Raw output of every run", ""]
    for r in runs:
        parts += [f"### {r.peer}, repeat {r.repeat}", "",
                  f"`{shlex.join(r.argv)}`: exit {r.rc}, {r.seconds:.1f} s, "
                  f"1-minute load average before it {r.load:.2f}",
                  "", fenced(r.stdout), ""]
        if r.rc != 0 and r.stderr.strip():
            parts += ["stderr:", "", fenced(r.stderr[-4000:]), ""]
    a.out.write_text("\n".join(parts))
    print(training_table(rates))
    if all(times.values()):
        print(allreduce_table(times))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
