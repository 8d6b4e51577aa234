#!/usr/bin/python3
"""hoop-bench's size sweep for every collective and each of its algorithms.

For each rank count, collective and algorithm hoop-bench offers it (-a), one
hoop-bench run over the sizes, checked (-c 1), with the traffic columns
(-B 1) and its rows as JSON lines (-J) in --json-dir for
bench/plot_results.py. The report holds the exact commands, every run's raw
output, and per collective the out-of-place busbw of each algorithm with
the busiest rank's measured bytes beside the model's at the largest size.
Timing follows ../shared/bench-method.md through hoop-bench.

    /usr/bin/python3 bench/coll_sweep.py --build build --ranks 2,4,8 \\
        --json-dir bench/results/sweep --out FILE.md

Standard library only.
"""
import argparse
import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_allreduce import (  # noqa: E402  (shares the report helpers)
    execute, fenced, human, machine_info_basic, parse_ranks, parse_size)

# hoop-bench's -a choices per collective (its bench_coll.algos).
ALGOS = {
    "allreduce": ("ring", "tree", "ps", "auto"),
    "reducescatter": ("auto",),
    "allgather": ("auto",),
    "broadcast": ("ring", "tree", "auto"),
    "reduce": ("ring", "tree", "auto"),
    "alltoall": ("auto",),
}


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--build", type=Path, default=Path("build"))
    p.add_argument("--ranks", type=parse_ranks, default="2,4,8")
    p.add_argument("--colls", default=",".join(ALGOS))
    p.add_argument("--begin", type=parse_size, default="1K")
    p.add_argument("--end", type=parse_size, default="16M")
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--json-dir", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    a.colls = a.colls.split(",")
    bad = [c for c in a.colls if c not in ALGOS]
    if bad:
        p.error(f"unknown collective(s) {bad}")
    return a


def bench_argv(a, ranks, coll, algo, json_path):
    return [str(a.build / "tools" / "hoop-run"), "--no-prefix", "-n",
            str(ranks), str(a.build / "bench" / "hoop-bench"), "-C", coll,
            "-a", algo, "-b", str(a.begin), "-e", str(a.end), "-f",
            str(a.factor), "-n", str(a.iters), "-w", str(a.warmup), "-c",
            "1", "-B", "1", "-J", str(json_path)]


def load_rows(path):
    try:
        return [json.loads(line) for line in path.read_text().splitlines()]
    except (OSError, ValueError):
        return []


def table(coll, ranks, results):
    """Out-of-place busbw per size for each algorithm of one collective."""
    algos = [al for al in ALGOS[coll] if results.get(al)]
    if not algos:
        return [f"#### {coll}, {ranks} ranks: no results", ""]
    lines = [f"#### {coll}, {ranks} ranks", "",
             "| size | " + " | ".join(f"{al} busbw GB/s (algo used)"
                                      for al in algos) + " |",
             "|---:|" + "---:|" * len(algos)]
    sizes = sorted({r["bytes"] for al in algos for r in results[al]})
    for size in sizes:
        cells = []
        for al in algos:
            row = next((r for r in results[al] if r["bytes"] == size
                        and r["in_place"] == 0), None)
            cells.append("-" if row is None else
                         f"{row['busbw_GBps']:.3f} ({row['algo']})")
        lines.append(f"| {human(size)} | " + " | ".join(cells) + " |")
    largest = max(sizes)
    lines += ["", f"Bytes at {human(largest)}: the busiest rank's most sent "
              "or received (measured) vs the model's busiest link:"]
    for al in algos:
        row = next((r for r in results[al] if r["bytes"] == largest), None)
        if row:
            most = max(row["max_sent_B"], row["max_recv_B"])
            lines.append(f"- {al} ({row['algo']}): measured {most}, model "
                         f"{row['model_link_B']}")
    return lines + [""]


def main():
    a = parse_args(sys.argv[1:])
    a.json_dir.mkdir(parents=True, exist_ok=True)
    raw, summary, problems = [], [], []
    for ranks in a.ranks:
        for coll in a.colls:
            results = {}
            for algo in ALGOS[coll]:
                path = a.json_dir / f"{coll}-{algo}-{ranks}ranks.jsonl"
                argv = bench_argv(a, ranks, coll, algo, path)
                rc, out, err, secs = execute(argv, a.timeout)
                raw += [f"### {coll}, {algo}, {ranks} ranks", "",
                        f"`{shlex.join(argv)}`: exit {rc}, {secs:.1f} s", "",
                        fenced(out + err), ""]
                results[algo] = load_rows(path)
                if rc != 0 or not results[algo]:
                    problems.append(f"{coll} {algo} {ranks} ranks: exit {rc}")
                bad = [r["bytes"] for r in results[algo] if r["wrong"]]
                if bad:
                    problems.append(f"{coll} {algo} {ranks} ranks: #wrong "
                                    f"at {bad}")
                print(f"[{ranks} ranks] {coll} {algo}: {secs:.1f} s, exit "
                      f"{rc}", file=sys.stderr, flush=True)
            summary += table(coll, ranks, results)
    report = ["# Every collective's size sweep on local ranks", "",
              *machine_info_basic(),
              f"- Command: `{shlex.join([sys.executable] + sys.argv)}`",
              "- Each run: " + shlex.join(bench_argv(
                  a, "N", "COLL", "ALGO", a.json_dir / "COLL-ALGO-Nranks.jsonl")),
              "", "## Summary (out of place)", "", *summary]
    if problems:
        report += ["## Problems", "", *(f"- {p}" for p in problems), ""]
    report += ["## Raw output", "", *raw]
    a.out.write_text("\n".join(report) + "\n")
    print("\n".join(summary))
    print(f"wrote {a.out}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
