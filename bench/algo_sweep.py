#!/usr/bin/env python3
"""Ring vs tree vs the automatic choice for all-reduce, measured side by side.

For each rank count, runs hoop-bench with -a ring, -a tree and -a auto,
interleaved (ring, tree, auto, ring, ...) so that drift on a shared machine
hits all three, keeps each size's median over repeats, and prints which
algorithm won, auto's time relative to the better of ring and tree, and the
cost model's predicted ring/tree crossover (from hoop-info) beside the
measured one.  Timing follows ../shared/bench-method.md through hoop-bench.

  /usr/bin/python3 bench/algo_sweep.py --build build --ranks 4,8 --out FILE
"""
import argparse
import datetime
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_allreduce import (  # noqa: E402  (shares the launch helpers)
    Run, execute, machine_info_basic, parse_rows, parse_ranks, parse_size)

ALGOS = ("ring", "tree", "auto")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", type=Path, default=Path("build"))
    p.add_argument("--ranks", type=parse_ranks, default=[4, 8])
    p.add_argument("--begin", type=parse_size, default=1 << 10)
    p.add_argument("--end", type=parse_size, default=16 << 20)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--out", type=Path, required=True)
    return p.parse_args(argv)


def bench_argv(a, ranks, algo):
    return [str(a.build / "tools" / "hoop-run"), "--no-prefix", "-n",
            str(ranks), str(a.build / "bench" / "hoop-bench"), "-a", algo,
            "-b", str(a.begin), "-e", str(a.end), "-f", "4", "-n",
            str(a.iters), "-w", str(a.warmup), "-c", "1"]


def predicted_crossover(a, ranks):
    argv = [str(a.build / "tools" / "hoop-run"), "--no-prefix", "-n",
            str(ranks), str(a.build / "tools" / "hoop-info")]
    rc, out, err, _ = execute(argv, 120)
    for line in out.splitlines():
        if "tree -> ring" in line:
            return line.strip("# ").strip(), out
    return "unavailable", out + err


def table(a, runs, ranks, cores):
    sizes = sorted({s for r in runs for s in r.times})
    lines = [f"### {ranks} ranks" + (f" (more than the {cores} cores: small "
                                      "sizes measure scheduling too)"
                                      if ranks > cores else ""),
             "", "| bytes | ring us | tree us | auto us | faster | "
             "auto / best |", "|---:|---:|---:|---:|---|---:|"]
    measured_cross = None
    for size in sizes:
        med = {al: statistics.median(r.times[size] for r in runs
                                     if r.peer == al and size in r.times)
               for al in ALGOS}
        best = min(med["ring"], med["tree"])
        faster = "ring" if med["ring"] <= med["tree"] else "tree"
        if faster == "ring" and measured_cross is None:
            measured_cross = size
        lines.append(f"| {size} | {med['ring']:.1f} | {med['tree']:.1f} | "
                     f"{med['auto']:.1f} | {faster} | "
                     f"{med['auto'] / best:.2f} |")
    return lines, measured_cross


def main():
    a = parse_args(sys.argv[1:])
    cores = os.cpu_count() or 1
    report = ["# All-reduce algorithms: ring vs tree vs auto", "",
              *machine_info_basic(),
              f"- Command: {' '.join(sys.argv)}", ""]
    raw = []
    failed = False
    for ranks in a.ranks:
        runs = []
        for rep in range(a.repeats):
            for algo in ALGOS:
                argv = bench_argv(a, ranks, algo)
                run = Run(peer=algo, ranks=ranks, repeat=rep, argv=argv)
                run.rc, run.stdout, run.stderr, run.seconds = execute(
                    argv, a.timeout)
                parse_rows(run, in_place=False)
                if run.rc != 0:
                    run.problems.append(f"exit status {run.rc}")
                failed |= bool(run.problems)
                print(f"[{ranks} ranks, repeat {rep + 1}/{a.repeats}] {algo}"
                      f" {run.seconds:.1f} s {run.problems or 'ok'}",
                      flush=True)
                runs.append(run)
                raw.append(f"#### {ranks} ranks, {algo}, repeat {rep + 1}\n"
                           f"```\n{' '.join(argv)}\n{run.stdout}{run.stderr}"
                           "```")
        lines, measured = table(a, runs, ranks, cores)
        predicted, info = predicted_crossover(a, ranks)
        lines += ["", f"Model: {predicted}. Measured: ring is faster from "
                  f"{measured if measured else 'no size in the sweep'}"
                  f"{' bytes' if measured else ''} on.", "",
                  f"```\n{info}```", ""]
        report += lines
        print("\n".join(lines), flush=True)
    report += ["## Raw output", "", *raw]
    a.out.write_text("\n".join(report) + "\n")
    print(f"wrote {a.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
