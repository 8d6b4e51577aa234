#!/usr/bin/env python3
"""Hierarchical against flat ring all-reduce (or reduce-scatter, all-gather)
on emulated hosts, both placements.

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
2(M-1)K and 2M(N-1)K/N. --coll reducescatter or allgather runs those
instead, with K the whole buffer (N blocks): each is one half of the
all-reduce, bounds and bytes half as large. Timing follows
../shared/bench-method.md through hoop-bench. Needs root; always tears the
namespaces down.

  /usr/bin/python3 bench/hier_hosts.py --build build --shapes 2x2,2x3,3x2 \
      --out FILE.md
  /usr/bin/python3 bench/hier_hosts.py --build build --coll reducescatter \
      --out FILE.md
"""
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from ps_vs_ring import (  # noqa: E402  (the same emulated hosts)
    bench_once, netsim, netsim_main, netsim_parser, parse_rate)

ALGOS = ("ring", "hier")
PLACEMENTS = ("contiguous", "cyclic")
COLLS = ("allreduce", "reducescatter", "allgather")


def halves(a):
    """The all-reduce is two halves; reduce-scatter and all-gather one."""
    return 2 if a.coll == "allreduce" else 1


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
    p = netsim_parser(__doc__, "64M", 3,
                      "hoop-bench runs per algorithm and placement")
    p.add_argument("--shapes", type=parse_shapes, default="2x2",
                   help="hosts x ranks per host, comma-separated")
    p.add_argument("--coll", choices=COLLS, default="allreduce",
                   help="the collective (hoop-bench -C)")
    a = p.parse_args(argv)
    a.rate_bps = parse_rate(a.rate)
    return a


def bench_argv(a, hosts, per_host, placement, algo):
    return [str(a.build / "tools" / "hoop-run"), "--no-prefix",
            "--netns", "hoopsim", "--ranks-per-host", str(per_host),
            *(["--cyclic"] if placement == "cyclic" else []),
            "-n", str(hosts * per_host),
            str(a.build / "bench" / "hoop-bench"), "-C", a.coll, "-a", algo,
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
                    row = bench_once(
                        a, bench_argv(a, hosts, per_host, placement, algo),
                        f"{hosts}x{per_host} {placement} {algo}", rep, raw,
                        problems)
                    if row is not None:
                        got[(placement, algo)].append(row)
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
        bound = halves(a) * (hosts - 1) * k / hosts / payload_Bps * 1e3
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
                want = (halves(a) * (hosts - 1) * k if algo == "hier"
                        else round(halves(a) * hosts * (n - 1) * k / n))
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
    rc, _, _ = netsim_main(
        "hier_hosts",
        f"Hierarchical against flat ring {a.coll} on emulated hosts", a,
        "algorithm and placement", a.shapes,
        lambda a, shape, raw: run_shape(a, *shape, raw), table)
    return rc


if __name__ == "__main__":
    sys.exit(main())
