#!/usr/bin/python3
"""hoop vs Open MPI vs gloo for every collective, in the same run.

compare_allreduce.py's method and launchers with hoop-bench's, the MPI
peer's and the gloo peer's -C: per collective and rank count, each repeat
runs hoop, mpi and gloo back to back, so drift hits all three; the table
gives each one's median time and busbw (nccl-tests' factor for that
collective) and hoop's ratio to each peer with its spread over repeats. A
peer that lacks a collective (gloo's exit status 3, with torch's message)
is listed as such, not as a failure. Exits non-zero if any run fails,
misses a size or reports #wrong > 0.

    /usr/bin/python3 bench/compare_peers.py --build build --ranks 2,4 \\
        --colls allgather,broadcast --begin 4K --end 16M --iters 20 \\
        --repeats 3 --out FILE.md --json FILE.json

--json writes every summary cell (collective, ranks, size, peer, median
time, busbw, hoop's ratio) for bench/plot_results.py. Standard library only.
"""

import argparse
import json
import os
import shlex
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_allreduce import (  # noqa: E402  (shares launch and report)
    FACTOR, PEERS, Run, add_transport_arg, binaries, cell_ratio, commands,
    execute, failures_of, finish, human, missing_tools, parse_ranks, report,
    parse_rows, parse_size, per_repeat_times, rotate, run_ceilings,
    transport_note)

COLLS = ("allreduce", "reducescatter", "allgather", "broadcast", "reduce",
         "alltoall")
BLOCKED = ("reducescatter", "allgather", "alltoall")  # size = N x count
UNSUPPORTED = 3  # a peer's exit status for "this collective is missing"


def parse_colls(text):
    colls = text.split(",")
    bad = [c for c in colls if c not in COLLS]
    if bad or not colls:
        raise argparse.ArgumentTypeError(
            f"unknown collective(s) {bad}; choose from {', '.join(COLLS)}")
    return colls


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--build", type=Path, default=Path("build"))
    p.add_argument("--colls", type=parse_colls, default=",".join(COLLS))
    p.add_argument("--ranks", type=parse_ranks, default="2,4")
    p.add_argument("--begin", type=parse_size, default="4K")
    p.add_argument("--end", type=parse_size, default="16M",
                   help="largest size; sizes double from --begin")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--in-place", action="store_true",
                   help="compare in-place columns (all-to-all has none)")
    p.add_argument("--timeout", type=int, default=900)
    add_transport_arg(p)
    p.add_argument("--out", type=Path, help="markdown results file")
    p.add_argument("--json", type=Path, help="summary cells as JSON")
    a = p.parse_args(argv)
    if a.begin > a.end or a.iters < 1 or a.warmup < 0 or a.repeats < 1:
        p.error("need --begin <= --end, --iters >= 1, --warmup >= 0, "
                "--repeats >= 1")
    return a


def bus_factor(coll, n):
    """nccl-tests' doc/PERFORMANCE.md."""
    if coll == "allreduce":
        return 2 * (n - 1) / n
    return 1.0 if coll in ("broadcast", "reduce") else (n - 1) / n


def expected_sizes(a, coll, n):
    """The size column every binary prints: whole floats, and for the
    block collectives whole multiples of N of them (nccl-tests)."""
    sizes, b = [], a.begin
    while b <= a.end:
        elems = b // 4
        sizes.append((elems // n * n if coll in BLOCKED else elems) * 4)
        b *= FACTOR
    return sizes


def run_all(a, bins):
    """-> (runs, {(coll, ranks, peer): why it is missing})."""
    runs, missing = [], {}
    for coll in a.colls:
        for ranks in a.ranks:
            argvs = commands(a, bins, ranks)
            for rep in range(1, a.repeats + 1):
                for peer in rotate(list(PEERS), rep - 1):
                    if (coll, ranks, peer) in missing:
                        continue
                    run = Run(peer, ranks, rep, argvs[peer] + ["-C", coll])
                    run.coll = coll
                    run.rc, run.stdout, run.stderr, run.seconds = execute(
                        run.argv, a.timeout)
                    if peer != "hoop" and run.rc == UNSUPPORTED:
                        missing[(coll, ranks, peer)] = (
                            run.stderr.strip().splitlines() or ["?"])[-1]
                        status = "not supported"
                    else:
                        if run.rc != 0:
                            run.problems.append(f"exit status {run.rc}")
                        parse_rows(run, a.in_place)
                        lost = [human(s) for s in
                                expected_sizes(a, coll, ranks)
                                if s not in run.times]
                        if lost:
                            run.problems.append("no row for " +
                                                ", ".join(lost))
                        status = "; ".join(run.problems) or "ok"
                    print(f"[{coll}, {ranks} ranks, repeat {rep}/"
                          f"{a.repeats}] {peer:4s} {run.seconds:6.1f} s  "
                          f"{status}", file=sys.stderr)
                    runs.append(run)
    return runs, missing


def summary(a, runs, missing, cores):
    """-> (markdown lines, JSON cells)."""
    placement = "in-place" if a.in_place else "out-of-place"
    lines = [f"float32, sum for the reductions, root 0, {placement}; time = median over {a.repeats} repeats of each "
             "run's median (us); busbw GB/s with nccl-tests' factor; ratio "
             "= hoop busbw / peer busbw, median and min-max over repeats. "
             + transport_note(a) + " n/s: the peer does not have the "
             "collective."]
    cells = []
    for coll in a.colls:
        lines += ["", f"### {coll}", "",
                  "| ranks | size | hoop us | hoop busbw | mpi us "
                  "| mpi busbw | gloo us | gloo busbw | hoop/mpi | spread "
                  "| hoop/gloo | spread |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:"
                  "|---:|"]
        mine = [r for r in runs if r.coll == coll]
        for ranks in a.ranks:
            mark = "*" if ranks > cores else ""
            for nbytes in expected_sizes(a, coll, ranks):
                t = {p: per_repeat_times(mine, p, ranks, nbytes, a.repeats)
                     for p in PEERS}
                row = [f"{ranks}{mark}", human(nbytes)]
                for p in PEERS:
                    got = [x for x in t[p] if x]
                    if (coll, ranks, p) in missing:
                        row += ["n/s", "n/s"]
                        continue
                    if not got:
                        row += ["-", "-"]
                        continue
                    med = statistics.median(got)
                    bw = nbytes / (med * 1e3) * bus_factor(coll, ranks)
                    row += [f"{med:.1f}", f"{bw:.3f}"]
                    cells.append({"collective": coll, "ranks": ranks,
                                  "bytes": nbytes, "peer": p,
                                  "time_us": med, "busbw_GBps": bw})
                for p in ("mpi", "gloo"):
                    row += (["n/s", ""] if (coll, ranks, p) in missing
                            else cell_ratio(t["hoop"], t[p]))
                lines.append("| " + " | ".join(row) + " |")
    if any(r > cores for r in a.ranks):
        lines += ["", f"\\* more ranks than the {cores} cores of this "
                  "machine: small sizes measure scheduling as much as the "
                  "library."]
    if missing:
        lines += ["", "Not supported:"] + sorted(
            {f"- {p} {c}: {why}" for (c, _, p), why in missing.items()})
    return lines, cells


def run_label(r):
    return f"{r.coll}, {r.ranks} ranks, repeat {r.repeat}, {r.peer}"


def main():
    a = parse_args(sys.argv[1:])
    cmdline = shlex.join([sys.executable] + sys.argv)
    bins = binaries(a)
    lacking = missing_tools(bins)
    if lacking:
        print("compare_peers: cannot run:\n  " + "\n  ".join(lacking),
              file=sys.stderr)
        return 2
    ceil_raw, _, ceil_problem = run_ceilings(bins, a.timeout)
    print(ceil_raw.rstrip("\n"))
    runs, missing = run_all(a, bins)
    table, cells = summary(a, runs, missing, os.cpu_count() or 1)
    print("\n" + "\n".join(table))
    failures = failures_of(ceil_problem, runs, run_label)
    if a.json:
        a.json.write_text(json.dumps(cells, indent=1) + "\n")
    return finish(a.out, lambda: report(
        a, bins, cmdline, ceil_raw, runs, "\n".join(table), failures,
        what="Collectives", label=run_label), failures)


if __name__ == "__main__":
    sys.exit(main())
