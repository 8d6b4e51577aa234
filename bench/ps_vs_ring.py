#!/usr/bin/env python3
"""Parameter server vs ring vs tree all-reduce across emulated, rate-capped hosts.

For each rank count N, tools/netsim.sh builds N network namespaces behind
one bridge, every host link capped at --rate each way (tbf), and hoop-bench
runs under `hoop-run --netns hoopsim` with -a ps, ring and tree,
interleaved (ps, ring, tree, ps, ...) so that drift hits all three. Each
run prints its time and, with -B 1, the payload bytes through the busiest
link. The script sets both beside the cost model's time at the link's
payload rate B = rate x 1448/1514 (tbf counts whole frames; a 1500-byte
MTU frame carries 1448 bytes of TCP payload with timestamps):

  issue model (both directions of the busiest link added up):
    ps 2(N-1)K/B, ring 2(N-1)K/(N B), tree 2K/B
  duplex model (each direction of a full-duplex link on its own):
    ps (N-1)K/B, ring and tree as above

They differ only for ps, whose root receives (N-1)K and sends (N-1)K back;
when the two overlap (hoop's ps sends each reduced slice back at once) the
duplex model holds. Timing follows ../shared/bench-method.md through
hoop-bench. Needs root; always tears the namespaces down. --json also
writes each N and algorithm's times and models for bench/plot_results.py.

  sudo /usr/bin/python3 bench/ps_vs_ring.py --build build --out FILE.md \
      --json FILE.json
"""
import argparse
import json
import signal
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare_allreduce import (  # noqa: E402  (shares the report helpers)
    execute, machine_info_basic, parse_size, parser_with_build)

ALGOS = ("ps", "ring", "tree")
PREFIX = "hoopsim"
PAYLOAD_PER_FRAME = 1448 / 1514
RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
# 13 nccl-tests columns + sent recvd maxsent maxrecvd model algo offhost
COLUMNS = 20


def parse_rate(text):
    """'1gbit', '100mbit' -> bits per second (the subset netsim.sh takes)."""
    digits = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(digits):] or "bit"
    if not digits.isdigit() or unit not in RATE_UNITS or int(digits) == 0:
        raise argparse.ArgumentTypeError(
            f"bad rate {text!r}: want e.g. 1gbit, 100mbit")
    return int(digits) * RATE_UNITS[unit]


def parse_rank_range(text):
    """'2-8' or '2,4,8' -> [2, ...]."""
    try:
        if "-" in text:
            lo, hi = (int(x) for x in text.split("-"))
            ranks = list(range(lo, hi + 1))
        else:
            ranks = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad rank list {text!r}") from None
    if not ranks or min(ranks) < 2 or max(ranks) > 253:
        raise argparse.ArgumentTypeError("rank counts must be 2 to 253")
    return ranks


def netsim_parser(doc, size, iters, repeats_help):
    """The options of every benchmark on emulated hosts: link rate, size,
    iterations, repeats, timeout and the report."""
    p = parser_with_build(doc)
    p.add_argument("--rate", default="1gbit",
                   help="tc rate of every host link, each direction")
    p.add_argument("--size", type=parse_size, default=size,
                   help="all-reduce buffer K per rank")
    p.add_argument("--iters", type=int, default=iters,
                   help="timed iterations per hoop-bench run")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3, help=repeats_help)
    p.add_argument("--timeout", type=int, default=600,
                   help="seconds one hoop-bench run may take")
    p.add_argument("--out", type=Path, required=True,
                   help="markdown report to write")
    return p


def parse_args(argv):
    p = netsim_parser(__doc__, "8M", 5,
                      "hoop-bench runs per algorithm and N, interleaved")
    p.add_argument("--ranks", type=parse_rank_range, default="2-8",
                   help="rank counts: a range 2-8 or a list 2,4,8")
    p.add_argument("--json", type=Path,
                   help="machine-readable results to write")
    a = p.parse_args(argv)
    a.rate_bps = parse_rate(a.rate)
    return a


class Stop(Exception):
    """SIGTERM/SIGHUP, turned into an exception so that teardown runs."""


def on_signal(sig, _frame):
    raise Stop(f"received signal {sig}")


def netsim(a, *args):
    """Runs tools/netsim.sh; raises with its message on failure."""
    argv = [str(HERE.parent / "tools" / "netsim.sh"), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: "
                           f"{(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


def bench_argv(a, ranks, algo):
    return [str(a.build / "tools" / "hoop-run"), "--no-prefix",
            "--netns", PREFIX, "-n", str(ranks),
            str(a.build / "bench" / "hoop-bench"), "-a", algo,
            "-b", str(a.size), "-e", str(a.size), "-n", str(a.iters),
            "-w", str(a.warmup), "-c", "1", "-B", "1"]


def parse_row(text, size):
    """-> dict of the one data row for `size`, or raises ValueError."""
    for line in text.splitlines():
        f = line.split()
        if not f or not f[0].isdigit() or int(f[0]) != size:
            continue
        if len(f) != COLUMNS:
            raise ValueError(f"expected {COLUMNS} columns: {line!r}")
        if f[8] != "0" or f[12] != "0":
            raise ValueError(f"#wrong {f[8]} / {f[12]}: {line!r}")
        return {"times_us": [float(f[5]), float(f[9])],
                "max_sent": int(f[15]), "max_recvd": int(f[16]),
                "model_link": float(f[17]), "algo": f[18],
                "offhost": int(f[19])}
    raise ValueError(f"no row for {size} bytes")


def models(algo, n, k, payload_Bps):
    """-> (issue model s, duplex model s) for one all-reduce of k bytes."""
    duplex = {"ps": (n - 1) * k, "ring": 2 * (n - 1) * k / n,
              "tree": 2 * k}[algo] / payload_Bps
    issue = 2 * duplex if algo == "ps" else duplex
    return issue, duplex


def bench_once(a, argv, what, rep, raw, problems):
    """Runs one hoop-bench launch, keeps its output for the report, and
    returns its row for a.size, or None with the reason in `problems`."""
    rc, out, err, secs = execute(argv, a.timeout)
    raw.append(f"#### {what}, repeat {rep + 1}\n```\n"
               f"{' '.join(argv)}\n{out}{err}```")
    row, status = None, "ok"
    try:
        if rc != 0:
            raise ValueError(f"exit status {rc}: {err.strip()}")
        row = parse_row(out, a.size)
    except ValueError as e:
        status = str(e)
        problems.append(f"{what}, repeat {rep + 1}: {e}")
    print(f"[{what}, repeat {rep + 1}/{a.repeats}] {secs:.1f} s {status}",
          flush=True)
    return row


def run_n(a, n, raw):
    """All repeats of all algorithms on n emulated hosts -> {algo: rows}."""
    got = {algo: [] for algo in ALGOS}
    problems = []
    netsim(a, "up", str(n), a.rate)
    try:
        raw.append(f"#### {n} hosts: tc on one link\n```\n"
                   + subprocess.run(["tc", "-n", f"{PREFIX}-sw", "qdisc",
                                     "show", "dev", "h0"],
                                    capture_output=True, text=True).stdout
                   + "```")
        for rep in range(a.repeats):
            for algo in ALGOS:
                row = bench_once(a, bench_argv(a, n, algo),
                                 f"{n} hosts, {algo}", rep, raw, problems)
                if row is not None:
                    got[algo].append(row)
    finally:
        netsim(a, "down")
    return got, problems


def table(a, results, payload_Bps):
    lines = ["| N | algo | time ms (median) | min-max ms | busiest link "
             "bytes each way (measured) | measured bytes / B ms | model bytes "
             "each way | duplex model ms | measured / duplex | issue model ms | measured / "
             "issue |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n in sorted(results):
        for algo in ALGOS:
            rows = results[n][algo]
            if not rows:
                lines.append(f"| {n} | {algo} | failed | | | | | | | | |")
                continue
            times = [t / 1e3 for r in rows for t in r["times_us"]]
            med = statistics.median(times)
            busiest = max(max(r["max_sent"], r["max_recvd"]) for r in rows)
            issue, duplex = models(algo, n, a.size, payload_Bps)
            lines.append(
                f"| {n} | {algo} | {med:.1f} | {min(times):.1f}-"
                f"{max(times):.1f} | {busiest} | {busiest / payload_Bps * 1e3:.1f} "
                f"| {rows[0]['model_link']:.0f} "
                f"| {duplex * 1e3:.1f} | {med / (duplex * 1e3):.3f} | "
                f"{issue * 1e3:.1f} | {med / (issue * 1e3):.3f} |")
    return lines


def json_rows(a, results, payload_Bps):
    """One object per N and algorithm: every iteration's time beside the
    models, as the markdown table has them."""
    rows = []
    for n in sorted(results):
        for algo in ALGOS:
            got = results[n][algo]
            issue, duplex = models(algo, n, a.size, payload_Bps)
            rows.append({
                "ranks": n, "algo": algo, "bytes": a.size,
                "rate": a.rate, "payload_Bps": payload_Bps,
                "times_ms": [t / 1e3 for r in got for t in r["times_us"]],
                "busiest_link_B": max((max(r["max_sent"], r["max_recvd"])
                                       for r in got), default=None),
                "duplex_model_ms": duplex * 1e3,
                "issue_model_ms": issue * 1e3})
    return rows


def netsim_main(name, title, a, runs_what, steps, measure, table):
    """The frame of a benchmark on emulated hosts: it needs root; for each
    step `measure(a, step, raw)` gives (result, problems) and the table so
    far is printed; the namespaces come down however it ends; the report
    (machine, settings, table, problems, raw output) goes to a.out.
    Returns (exit status, results, payload rate)."""
    if subprocess.run(["id", "-u"], capture_output=True,
                      text=True).stdout.strip() != "0":
        print(f"{name}: needs root (network namespaces, tc)",
              file=sys.stderr)
        return 2, {}, 0
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    payload_Bps = a.rate_bps / 8 * PAYLOAD_PER_FRAME
    head = [f"- Command: {' '.join(sys.argv)}",
            f"- Links: every host link capped at {a.rate} each way by tbf "
            "(tools/netsim.sh); payload rate B = "
            f"{payload_Bps / 1e6:.2f} MB/s (x 1448/1514)",
            f"- K = {a.size} bytes float32 sum; per run {a.warmup} warm-up "
            f"and {a.iters} timed iterations, out of place and in place; "
            f"{a.repeats} runs per {runs_what}, interleaved. Time is the "
            "median over all those iterations (each the slowest rank's).",
            ""]
    results, problems, raw = {}, [], []
    try:
        for step in steps:
            results[step], p = measure(a, step, raw)
            problems += p
            print("\n".join(table(a, {step: results[step]}, payload_Bps)),
                  flush=True)
    except (Stop, KeyboardInterrupt, RuntimeError) as e:
        problems.append(f"stopped early: {e}")
        print(f"{name}: stopped early: {e}", file=sys.stderr)
    finally:
        # A netsim failure inside a step may have left namespaces behind.
        subprocess.run([str(HERE.parent / "tools" / "netsim.sh"), "down"],
                       capture_output=True)
    # After the runs, so that the load average is the one they ran under.
    report = [f"# {title}", "", *machine_info_basic(), *head,
              "## Results", "", *table(a, results, payload_Bps), ""]
    if problems:
        report += ["## Problems", "", *(f"- {p}" for p in problems), ""]
    report += ["## Raw output", "", *raw]
    a.out.write_text("\n".join(report) + "\n")
    print(f"wrote {a.out}")
    return (1 if problems else 0), results, payload_Bps


def main():
    a = parse_args(sys.argv[1:])
    rc, results, payload_Bps = netsim_main(
        "ps_vs_ring", "Parameter server vs ring vs tree on emulated hosts", a,
        "algorithm", a.ranks, run_n, table)
    if rc != 2 and a.json:
        a.json.write_text(json.dumps(json_rows(a, results, payload_Bps),
                                     indent=1) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
