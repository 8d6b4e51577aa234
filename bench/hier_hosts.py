#!/usr/bin/env python3
"""Hierarchical against flat ring all-reduce on emulated hosts, both placements.

For each shape M hosts x L ranks, tools/netsim.sh builds M network
namespaces behind one bridge, every host link capped at --rate each way
(tbf), and hoop-bench runs under `hoop-run --netns hoopsim
--ranks-per-host L` with the ranks placed contiguously (0,1 | 2,3) and
cyclically (0,2 | 1,3, as srun's cyclic distribution), -a ring and -a hier
interleaved so that drift hits both. Each time is set beside the
hierarchical bound at the link's payload rate B = rate x 1448/1514 (tbf
counts whole frames; a 1500-byte MTU frame carries 1448 bytes of TCP
payload with timestamps):

  hierarchical bound: 2(M-1)K/(M B), what each host's link must carry
  flat ring (by host): 2(N-1)K/(N B)

and the bytes all ranks sent between hosts (hoop-bench -B 1) beside
2(M-1)K and 2M(N-1)K/N. Timing follows ../shared/bench-method.md through
hoop-bench. Needs root; always tears the namespaces down.

  /usr/bin/python3 bench/hier_hosts.py --build build --shapes 2x2,2x3,3x2 \
      --out FILE.md
"""
import signal
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare_allreduce import (  # noqa: E402  (shares the report helpers)
    execute, machine_info_basic, parse_size, parser_with_build)
from ps_vs_ring import (  # noqa: E402  (the same emulated hosts)
    PAYLOAD_PER_FRAME, Stop, netsim, on_signal, parse_rate, parse_row)

ALGOS = ("ring", "hier")
PLACEMENTS = ("contiguous", "cyclic")


def parse_shapes(text):
    """'2x2,3x2' -> [(2, 2), (3, 2)]: hosts x ranks per host."""
    shapes = []
    for part in text.split(","):
        m, _, l = part.partition("x")
        if not (m.isdigit() and l.isdigit()) or int(m) < 2 or int(l) < 1:
            raise SystemExit(f"bad shape {part!r}: want MxL, M >= 2")
        shapes.append((int(m), int(l)))
    return shapes


def parse_args(argv):
    p = parser_with_build(__doc__)
    p.add_argument("--shapes", type=parse_shapes, default="2x2",
                   help="hosts x ranks per host, comma-separated")
    p.add_argument("--rate", default="1gbit",
                   help="tc rate of every host link, each direction")
    p.add_argument("--size", type=parse_size, default="64M",
                   help="all-reduce buffer K")
    p.add_argument("--iters", type=int, default=3,
                   help="timed iterations per hoop-bench run")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3,
                   help="hoop-bench runs per algorithm and placement")
    p.add_argument("--timeout", type=int, default=600,
                   help="seconds one hoop-bench run may take")
    p.add_argument("--out", type=Path, required=True,
                   help="markdown report to write")
    a = p.parse_args(argv)
    a.rate_bps = parse_rate(a.rate)
    return a


def bench_argv(a, hosts, per_host, placement, algo):
    return [str(a.build / "tools" / "hoop-run"), "--no-prefix",
            "--netns", "hoopsim", "--ranks-per-host", str(per_host),
            *(["--cyclic"] if placement == "cyclic" else []),
            "-n", str(hosts * per_host),
            str(a.build / "bench" / "hoop-bench"), "-a", algo,
            "-b", str(a.size), "-e", str(a.size), "-n", str(a.iters),
            "-w", str(a.warmup), "-c", "1", "-B", "1"]


def run_shape(a, hosts, per_host, raw):
    """-> {(placement, algo): [rows]}, problems."""
    got = {(p, algo): [] for p in PLACEMENTS for algo in ALGOS}
    problems = []
    netsim(a, "up", str(hosts), a.rate)
    try:
        for rep in range(a.repeats):
            for placement in PLACEMENTS:
                for algo in ALGOS:
                    argv = bench_argv(a, hosts, per_host, placement, algo)
                    rc, out, err, secs = execute(argv, a.timeout)
                    what = f"{hosts}x{per_host} {placement} {algo}"
                    raw.append(f"#### {what}, repeat {rep + 1}\n```\n"
                               f"{' '.join(argv)}\n{out}{err}```")
                    status = "ok"
                    try:
                        if rc != 0:
                            raise ValueError(f"exit status {rc}: "
                                             f"{err.strip()}")
                        got[(placement, algo)].append(
                            parse_row(out, a.size))
                    except ValueError as e:
                        status = str(e)
                        problems.append(f"{what}, repeat {rep + 1}: {e}")
                    print(f"[{what}, repeat {rep + 1}/{a.repeats}] "
                          f"{secs:.1f} s {status}", flush=True)
    finally:
        netsim(a, "down")
    return got, problems


def table(a, results, payload_Bps):
    lines = ["| hosts x ranks | placement | algo | time ms (median) | "
             "min-max ms | hier bound ms | bound / time | ring / hier | "
             "off-host bytes | expected |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    k = a.size
    for (hosts, per_host), got in results.items():
        n = hosts * per_host
        bound = 2 * (hosts - 1) * k / hosts / payload_Bps * 1e3
        for placement in PLACEMENTS:
            med = {}
            for algo in ALGOS:
                times = [t / 1e3 for r in got[(placement, algo)]
                         for t in r["times_us"]]
                med[algo] = statistics.median(times) if times else None
            for algo in ALGOS:
                rows = got[(placement, algo)]
                if not rows:
                    lines.append(f"| {hosts}x{per_host} | {placement} | "
                                 f"{algo} | failed | | | | | | |")
                    continue
                times = [t / 1e3 for r in rows for t in r["times_us"]]
                want = (2 * (hosts - 1) * k if algo == "hier"
                        else round(2 * hosts * (n - 1) * k / n))
                speedup = (f"{med['ring'] / med['hier']:.2f}"
                           if algo == "hier" and med["ring"] and med["hier"]
                           else "")
                lines.append(
                    f"| {hosts}x{per_host} | {placement} | {algo} | "
                    f"{med[algo]:.1f} | {min(times):.1f}-{max(times):.1f} | "
                    f"{bound:.1f} | {bound / med[algo]:.3f} | {speedup} | "
                    f"{rows[0]['offhost']} | {want} |")
    return lines


def main():
    a = parse_args(sys.argv[1:])
    if subprocess.run(["id", "-u"], capture_output=True,
                      text=True).stdout.strip() != "0":
        print("hier_hosts: needs root (network namespaces, tc)",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    payload_Bps = a.rate_bps / 8 * PAYLOAD_PER_FRAME
    report = [f"- Command: {' '.join(sys.argv)}",
              f"- Links: every host link capped at {a.rate} each way by tbf "
              "(tools/netsim.sh); payload rate B = "
              f"{payload_Bps / 1e6:.2f} MB/s (x 1448/1514)",
              f"- K = {a.size} bytes float32 sum; per run {a.warmup} warm-up "
              f"and {a.iters} timed iterations, out of place and in place; "
              f"{a.repeats} runs per algorithm and placement, interleaved. "
              "Time is the median over all those iterations (each the "
              "slowest rank's).", ""]
    results, problems, raw = {}, [], []
    try:
        for hosts, per_host in a.shapes:
            results[(hosts, per_host)], p = run_shape(a, hosts, per_host,
                                                      raw)
            problems += p
            print("\n".join(table(a, {(hosts, per_host):
                                      results[(hosts, per_host)]},
                                  payload_Bps)), flush=True)
    except (Stop, KeyboardInterrupt, RuntimeError) as e:
        problems.append(f"stopped early: {e}")
        print(f"hier_hosts: stopped early: {e}", file=sys.stderr)
    finally:
        subprocess.run([str(HERE.parent / "tools" / "netsim.sh"), "down"],
                       capture_output=True)
    report = ["# Hierarchical against flat ring all-reduce on emulated hosts",
              "", *machine_info_basic(), *report,
              "## Results", "", *table(a, results, payload_Bps), ""]
    if problems:
        report += ["## Problems", "", *(f"- {p}" for p in problems), ""]
    report += ["## Raw output", "", *raw]
    a.out.write_text("\n".join(report) + "\n")
    print(f"wrote {a.out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
