#!/usr/bin/python3
"""Bytes one all-reduce moves through memory per byte of input, per rank.

A call on a buffer larger than the last-level cache is bound by memory
traffic, not instructions, and this 2-core virtual machine exposes no
hardware counters to perf. So each rank runs under callgrind's cache
model (valgrind --tool=callgrind --cache-sim=yes --simulate-wb=yes, with
the machine's 32 MiB last-level cache), which is exact and repeatable: it
counts, inside hoop_allreduce only, the lines read from memory (read
misses, plus the line a plain store to an uncached line reads in first)
and the dirty lines written back. The calls measured are hoop-bench's
timed ones (-w 1 -n 1), each the fourth call on the same buffers after
both placements' warm-ups, so the lines those left dirty are written back
during it, as in the benchmark's loop, where the two placements take
turns.

The model has two blind spots, both named in the output. It treats a
non-temporal store like a plain one, as a write miss that reads the line
in; such stores (SSE2's _mm_stream, which valgrind attributes to
emmintrin.h) read nothing, so their misses are not counted as reads. And
it models each process's caches alone: lines the peer wrote into a shared
FIFO stay valid in the reader's model, as they would in a shared L3, but
the transfer between the cores is not counted. Over TCP the kernel's
copies are not seen at all (callgrind sees user space only).

The ideal for all-reduce is 2 bytes per byte of input: the input read
once and the result written once. A ring on 2 ranks that reads each byte
of its result back from memory before sending it, or reads each line of
an out-of-place result in before writing it, shows 2.5.

    /usr/bin/python3 bench/memory_traffic.py --build build --ranks 2 \\
        --size 64M --transport shm

Standard library only.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_allreduce import parse_size  # noqa: E402

LINE = 64
LL = "33554432,16,64"
# hoop-bench -c 0 -w 1 -n 1 calls hoop_allreduce as: a counted call, its
# counters' gather, the out-of-place and in-place warm-ups, the
# out-of-place and in-place timed calls, the times' gather.
TIMED_DUMP = {"out-of-place": 5, "in-place": 6}


def run_ranks(a, outdir):
    build = Path(a.build)
    argv = [str(build / "tools/hoop-run"), "--no-prefix", "-n",
            str(a.ranks), "valgrind", "--tool=callgrind", "--cache-sim=yes",
            "--simulate-wb=yes", f"--LL={LL}",
            "--toggle-collect=hoop_allreduce",
            "--dump-after=hoop_allreduce",
            f"--callgrind-out-file={outdir}/cg.%q{{HOOP_RANK}}",
            str(build / "bench/hoop-bench"), "-b", str(a.size), "-e",
            str(a.size), "-w", "1", "-n", "1", "-c", "0"]
    if a.algo:
        argv += ["-a", a.algo]
    env = dict(os.environ, HOOP_TRANSPORT=a.transport)
    p = subprocess.run(argv, env=env, capture_output=True, text=True,
                       timeout=a.timeout)
    if p.returncode != 0:
        sys.exit(f"memory_traffic: {' '.join(argv)} exited {p.returncode}:"
                 f"\n{p.stderr[-2000:]}")
    return argv, p.stdout


def functions(path):
    """Per-function event counts of one callgrind dump: (events, rows)."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=no",
                          "--threshold=100", str(path)],
                         capture_output=True, text=True, check=True).stdout
    events = None
    rows = []
    for line in out.splitlines():
        if line.startswith("Events shown:"):
            events = line.split(":", 1)[1].split()
            continue
        m = re.match(r"^\s*([\d,. ]+?)\s+(\S+:\S+)(\s+\[.*\])?\s*$",
                     re.sub(r"\([ \d.%]+\)", "", line))
        if events is None or m is None or "PROGRAM TOTALS" in line:
            continue
        cells = m.group(1).split()
        if len(cells) != len(events):
            continue
        vals = [0 if c == "." else int(c.replace(",", "")) for c in cells]
        rows.append((m.group(2), dict(zip(events, vals))))
    return events, rows


def summary(path):
    """The dump's own totals (callgrind_annotate also lists callers)."""
    events = totals = None
    for line in Path(path).read_text().splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("summary:"):
            totals = [int(v) for v in line.split()[1:]]
    totals += [0] * (len(events) - len(totals))
    return dict(zip(events, totals))


def traffic(path):
    _, rows = functions(path)
    total = summary(path)
    nt_writes = sum(r["DLmw"] for name, r in rows
                    if name.split(":")[0].endswith("emmintrin.h"))
    read = LINE * (total["DLmr"] + total["DLmw"] - nt_writes)
    written = LINE * (total["DLdmr"] + total["DLdmw"])
    return {"ir": total["Ir"], "read": read, "written": written,
            "nt": LINE * nt_writes, "rows": rows,
            "blind": any(name.startswith("???:hoop") for name, _ in rows)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", required=True, help="build directory")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--size", type=parse_size, default=parse_size("64M"))
    p.add_argument("--transport", default="shm", choices=["shm", "tcp"])
    p.add_argument("--algo", help="hoop-bench -a (default: the library's)")
    p.add_argument("--timeout", type=int, default=1800)
    p.add_argument("--top", type=int, default=6,
                   help="functions to list per call, by memory lines")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="hoop-traffic-") as d:
        outdir = Path(d)
        argv, stdout = run_ranks(a, outdir)
        print(f"# memory_traffic: {a.ranks} ranks, {a.transport}, "
              f"{a.size} bytes float32 sum, algorithm "
              f"{a.algo or 'the library choice'}")
        print(f"# command: HOOP_TRANSPORT={a.transport} {' '.join(argv)}")
        print(f"# cache model: last level {LL} (bytes, ways, line); "
              "non-temporal stores (emmintrin.h) counted as writes only; "
              "user space only")
        print("# ideal: 2.00 bytes per input byte (input read once, "
              "result written once)")
        print("| rank | placement | read / input | written / input "
              "| total / input | of which non-temporal | Ir / input |")
        print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
        details = []
        for rank in range(a.ranks):
            for place, n in TIMED_DUMP.items():
                t = traffic(outdir / f"cg.{rank}.{n}")
                k = a.size
                print(f"| {rank} | {place} | {t['read'] / k:.2f} | "
                      f"{t['written'] / k:.2f} | "
                      f"{(t['read'] + t['written']) / k:.2f} | "
                      f"{t['nt'] / k:.2f} | {t['ir'] / k:.2f} |")
                details.append((rank, place, t))
        for rank, place, t in details:
            print(f"\n# rank {rank}, {place}: functions by lines missed "
                  "(DLmr, DLmw, dirty evictions DLdmr+DLdmw), Ir")
            rows = sorted((r for r in t["rows"] if r[1]["Ir"] < t["ir"]),
                          key=lambda r: -(r[1]["DLmr"] + r[1]["DLmw"]))
            for name, r in rows[:a.top]:
                print(f"#   {name}: DLmr {r['DLmr']} DLmw {r['DLmw']} "
                      f"dirty {r['DLdmr'] + r['DLdmw']} Ir {r['Ir']}")
        if any(t["blind"] for _, _, t in details):
            print("\n# WARNING: hoop's functions have no source lines (a "
                  "build without -g; configure with -DCMAKE_BUILD_TYPE="
                  "RelWithDebInfo), so non-temporal stores cannot be told "
                  "from plain ones and count as reads too")
        print("\n# hoop-bench output (rank 0):")
        for line in stdout.splitlines():
            print("#   " + line)


if __name__ == "__main__":
    main()
