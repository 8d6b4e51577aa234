#!/usr/bin/python3
"""The same all-reduce from two builds of hoop, before and after a change.

A refactor must leave speed alone; this shows it. For each transport and
repeat the two builds' hoop-bench run back to back, which goes first
alternating (A B B A, shared/bench-method.md), each run's median time per size is kept, and per size the
report gives each build's median over repeats and the after/before ratio
(median and spread over repeats; below 1 is faster after), for the
out-of-place and the in-place call of the same runs, and each build's
out-of-place time over its in-place one. `--before-env`/`--after-env`
add settings to one side's runs, so one build can be set against itself
(`--after-env HOOP_YIELD_US=0`); `--load N` keeps N busy processes running
throughout (bench/cpu_load.py), for how the builds wait on a shared
machine. Exits non-zero if a run fails or reports #wrong > 0.

    /usr/bin/python3 bench/compare_builds.py --before /tmp/bold \\
        --after build --sizes 4K,64M --transports shm,tcp --repeats 5

Standard library only.
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_allreduce import (  # noqa: E402
    execute, parse_rows, parse_size, rotate, Run)
from cpu_load import busy  # noqa: E402


def bench_argv(build, ranks, nbytes, iters, warmup):
    build = Path(build)
    return [str(build / "tools/hoop-run"), "--no-prefix", "-n", str(ranks),
            str(build / "bench/hoop-bench"), "-b", str(nbytes), "-e",
            str(nbytes), "-n", str(iters), "-w", str(warmup)]


def setting(text):
    name, eq, _ = text.partition("=")
    if not eq or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r} is not VAR=VALUE")
    return text


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
    for side in ("before", "after"):
        p.add_argument(f"--{side}-env", nargs="*", default=[], type=setting,
                       metavar="VAR=VALUE")
    p.add_argument("--load", type=int, default=0,
                   help="busy processes beside the runs")
    a = p.parse_args()
    with busy(a.load):
        return compare(a)


def compare(a):
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    failed = False
    settings = {"before": a.before_env, "after": a.after_env}
    print(f"# compare_builds: before {a.before} {' '.join(a.before_env)}, "
          f"after {a.after} {' '.join(a.after_env)}, "
          f"{a.ranks} ranks, {a.repeats} repeats of A B or B A, "
          f"{a.iters} timed iterations per size, {a.load} busy "
          f"processes beside them")
    print("# oop/ip: each build's out-of-place time over its in-place time "
          "in the same run, median over repeats")
    print("| transport | size (B) | placement | before (us) | after (us) "
          "| after/before median | min-max over repeats "
          "| oop/ip before | oop/ip after |")
    print("| --- | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: |")
    for transport in a.transports.split(","):
        for nbytes in sizes:
            times = {(label, ip): [] for label in ("before", "after")
                     for ip in (False, True)}
            for rep in range(a.repeats):
                for label, build in rotate([("before", a.before),
                                            ("after", a.after)], rep):
                    argv = ["env", f"HOOP_TRANSPORT={transport}"] + \
                        settings[label] + \
                        bench_argv(build, a.ranks, nbytes, a.iters, a.warmup)
                    rc, out, err, seconds = execute(argv, timeout=600)
                    got = {}
                    for ip in (False, True):
                        run = Run(peer=label, ranks=a.ranks, repeat=rep,
                                  argv=argv, rc=rc, seconds=seconds,
                                  stdout=out, stderr=err)
                        parse_rows(run, in_place=ip)
                        got[ip] = run.times.get(nbytes)
                        if run.rc != 0 or got[ip] is None or run.problems:
                            failed = True
                            print(f"# {label} {transport} {nbytes}: rc "
                                  f"{run.rc} {run.problems} "
                                  f"{run.stderr[-300:]}")
                    if None not in got.values():
                        for ip in (False, True):
                            times[(label, ip)].append(got[ip])
            for ip in (False, True):
                pairs = list(zip(times[("before", ip)], times[("after", ip)]))
                if not pairs:
                    continue
                ratios = [after / before for before, after in pairs]
                oop_ip = {label: statistics.median(
                    o / i for o, i in zip(times[(label, False)],
                                          times[(label, True)]))
                    for label in ("before", "after")}
                print(f"| {transport} | {nbytes} | "
                      f"{'in-place' if ip else 'out-of-place'} | "
                      f"{statistics.median(times[('before', ip)]):.1f} | "
                      f"{statistics.median(times[('after', ip)]):.1f} | "
                      f"{statistics.median(ratios):.3f} | "
                      f"{min(ratios):.3f}-{max(ratios):.3f} | "
                      f"{oop_ip['before']:.3f} | {oop_ip['after']:.3f} |")
            for label in ("before", "after"):
                for ip in (False, True):
                    print(f"# raw {label} {'ip ' if ip else 'oop'} " +
                          " ".join(f"{t:.1f}" for t in times[(label, ip)]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
