#!/usr/bin/python3
"""The same all-reduce from two builds of hoop, before and after a change.

A refactor must leave speed alone; this shows it. For each transport and
repeat the two builds' hoop-bench run back to back (A B A B, shared/
bench-method.md), each run's median time per size is kept, and per size the
report gives each build's median over repeats and the after/before ratio
(median and spread over repeats; below 1 is faster after). Exits non-zero
if a run fails or reports #wrong > 0.

    /usr/bin/python3 bench/compare_builds.py --before /tmp/bold \\
        --after build --sizes 4K,64M --transports shm,tcp --repeats 5

Standard library only.
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_allreduce import execute, parse_rows, parse_size, Run  # noqa: E402


def bench_argv(build, ranks, nbytes, iters, warmup):
    build = Path(build)
    return [str(build / "tools/hoop-run"), "--no-prefix", "-n", str(ranks),
            str(build / "bench/hoop-bench"), "-b", str(nbytes), "-e",
            str(nbytes), "-n", str(iters), "-w", str(warmup)]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", required=True, help="build directory")
    p.add_argument("--after", required=True, help="build directory")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--sizes", default="4K,64M")
    p.add_argument("--transports", default="shm,tcp")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args()
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    failed = False
    print(f"# compare_builds: before {a.before}, after {a.after}, "
          f"{a.ranks} ranks, {a.repeats} repeats of A B, "
          f"{a.iters} timed iterations per size")
    print("| transport | size (B) | before (us) | after (us) "
          "| after/before median | min-max over repeats |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for transport in a.transports.split(","):
        for nbytes in sizes:
            times = {"before": [], "after": []}
            for rep in range(a.repeats):
                for label, build in (("before", a.before),
                                     ("after", a.after)):
                    argv = ["env", f"HOOP_TRANSPORT={transport}"] + \
                        bench_argv(build, a.ranks, nbytes, a.iters, a.warmup)
                    run = Run(peer=label, ranks=a.ranks, repeat=rep, argv=argv)
                    execute_into(run, argv)
                    parse_rows(run, in_place=False)
                    t = run.times.get(nbytes)
                    if run.rc != 0 or t is None or run.problems:
                        failed = True
                        print(f"# {label} {transport} {nbytes}: rc {run.rc} "
                              f"{run.problems} {run.stderr[-300:]}")
                        continue
                    times[label].append(t)
            pairs = list(zip(times["before"], times["after"]))
            if not pairs:
                continue
            ratios = [after / before for before, after in pairs]
            print(f"| {transport} | {nbytes} | "
                  f"{statistics.median(times['before']):.1f} | "
                  f"{statistics.median(times['after']):.1f} | "
                  f"{statistics.median(ratios):.3f} | "
                  f"{min(ratios):.3f}-{max(ratios):.3f} |")
            print("# raw before " + " ".join(f"{t:.1f}" for t in times["before"]))
            print("# raw after  " + " ".join(f"{t:.1f}" for t in times["after"]))
    return 1 if failed else 0


def execute_into(run, argv):
    rc, out, err, seconds = execute(argv, timeout=600)
    run.rc, run.seconds, run.stdout, run.stderr = rc, seconds, out, err


if __name__ == "__main__":
    sys.exit(main())
