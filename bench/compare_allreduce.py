#!/usr/bin/python3
"""Side-by-side all-reduce: hoop vs Open MPI over TCP vs gloo.

Follows shared/bench-method.md: the machine's ceilings first, then for each
rank count and repeat the three peers run back to back (hoop, mpi, gloo,
hoop, mpi, gloo, ...) so that drift on a shared machine hits all of them.
Every binary prints hoop-bench rows; this script keeps each run's median
times, and reports per size the median over repeats and hoop's ratio to
each peer with its spread over repeats. Exits non-zero if any run fails,
misses a size, or reports #wrong > 0.

    /usr/bin/python3 bench/compare_allreduce.py --build build --ranks 2,4 \\
        --begin 4K --end 64M --iters 50 --warmup 5 --repeats 3 --out FILE.md

Standard library only.
"""

import argparse
import datetime
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS = ("hoop", "mpi", "gloo")
FACTOR = 2
SUFFIXES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


@dataclass
class Run:
    """One launch of one peer, with what it printed and what went wrong."""
    peer: str
    ranks: int
    repeat: int
    argv: list
    rc: int = 0
    seconds: float = 0.0
    stdout: str = ""
    stderr: str = ""
    times: dict = field(default_factory=dict)  # size -> median time (us)
    problems: list = field(default_factory=list)
    rtt_ns: float = None  # a cache line's round trip just after (shm)


def parse_size(text):
    """'4096', '4K', '64M', '1G' (powers of 1024) -> bytes."""
    mult = SUFFIXES.get(text[-1:].upper(), 1)
    digits = text[:-1] if mult != 1 else text
    if not digits.isdigit() or int(digits) == 0:
        raise argparse.ArgumentTypeError(f"bad size {text!r}")
    return int(digits) * mult


def parse_ranks(text, least=2):
    try:
        ranks = [int(r) for r in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad rank list {text!r}") from None
    if not ranks or min(ranks) < least:
        raise argparse.ArgumentTypeError(f"rank counts must be >= {least}")
    return ranks


def transport_note(a):
    """How each peer moved its bytes, for the reports."""
    if a.transport == "tcp":
        return ("hoop: HOOP_TRANSPORT=tcp over loopback; mpi = Open MPI, "
                "ob1 + tcp BTL on lo; gloo: TCP.")
    return ("hoop: its shared-memory transport; mpi = Open MPI as mpirun "
            "comes (its default shared-memory path); gloo: TCP (it has no "
            "other).")


def add_transport_arg(p):
    p.add_argument("--transport", choices=("tcp", "shm"), default="tcp",
                   help="tcp: hoop and Open MPI over loopback TCP; shm: "
                   "hoop's and Open MPI's default shared-memory paths")


def parser_with_build(doc):
    """The parser the scripts that launch hoop's programs start from: the
    first line of their docstring, defaults shown, and --build."""
    p = argparse.ArgumentParser(
        description=doc.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--build", type=Path, default=Path("build"),
                   help="hoop build directory")
    return p


def parse_args(argv):
    p = parser_with_build(__doc__)
    p.add_argument("--ranks", type=parse_ranks, default="2,4",
                   help="comma-separated rank counts")
    p.add_argument("--begin", type=parse_size, default="4K",
                   help="smallest size in bytes, K/M/G = powers of 1024")
    p.add_argument("--end", type=parse_size, default="64M",
                   help="largest size; sizes double from --begin")
    p.add_argument("--iters", type=int, default=50,
                   help="timed iterations per size (gloo's small sizes "
                   "need many: a few iterations take ms-long stalls)")
    p.add_argument("--warmup", type=int, default=5,
                   help="untimed calls per size")
    p.add_argument("--repeats", type=int, default=3,
                   help="interleaved runs of each peer")
    p.add_argument("--in-place", action="store_true",
                   help="compare the in-place columns instead of "
                   "out-of-place (gloo's out-of-place includes a copy)")
    p.add_argument("--timeout", type=int, default=900,
                   help="seconds before a run counts as hung")
    add_transport_arg(p)
    p.add_argument("--hoop-algo", default="auto",
                   choices=("auto", "ring", "tree", "ps"),
                   help="hoop's all-reduce algorithm (hoop-bench -a)")
    p.add_argument("--out", type=Path, help="markdown results file")
    a = p.parse_args(argv)
    if a.begin > a.end or a.iters < 1 or a.warmup < 0 or a.repeats < 1:
        p.error("need --begin <= --end, --iters >= 1, --warmup >= 0, "
                "--repeats >= 1")
    return a


def human(nbytes):
    for unit, mult in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes % mult == 0:
            return f"{nbytes // mult}{unit}"
    return str(nbytes)


def expected_sizes(a):
    """The sweep every binary walks with -b/-e/-f: whole floats only."""
    sizes, b = [], a.begin
    while b <= a.end:
        sizes.append(b // 4 * 4)
        b *= FACTOR
    return sizes


def binaries(a):
    build = a.build
    return {
        "hoop-run": build / "tools" / "hoop-run",
        "hoop-bench": build / "bench" / "hoop-bench",
        "hoop-ceilings": build / "bench" / "hoop-ceilings",
        "peer-mpi-bench": build / "bench" / "peer-mpi-bench",
        "mpirun": Path(shutil.which("mpirun") or "mpirun"),
        "python3": Path("/usr/bin/python3"),
        "gloo_bench.py": HERE / "peers" / "gloo_bench.py",
    }


def missing_tools(bins):
    return [f"{name}: {path} not found or not executable"
            for name, path in bins.items()
            if not (path.is_file() and (path.suffix == ".py"
                                        or os.access(path, os.X_OK)))]


def commands(a, bins, ranks, hoop_algo="auto"):
    """argv per peer, each on the transport that a.transport names. tcp:
    hoop with HOOP_TRANSPORT=tcp and Open MPI pinned to ob1 + the tcp BTL
    on lo (with only --mca btl, the ucx PML installed here would bypass
    the BTLs). shm: both as they come, hoop picking shared memory and Open
    MPI its default path. gloo only has TCP. hoop runs `hoop_algo`."""
    sweep = ["-b", str(a.begin), "-e", str(a.end), "-f", str(FACTOR),
             "-n", str(a.iters), "-w", str(a.warmup), "-c", "1"]
    n = str(ranks)
    tcp = a.transport == "tcp"
    mpi_tcp = ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
               "--mca", "btl_tcp_if_include", "lo"] if tcp else []
    return {
        # Only rank 0 prints rows; unprefixed they parse like the peers'.
        "hoop": (["env", "HOOP_TRANSPORT=tcp"] if tcp else []) +
                [str(bins["hoop-run"]), "--no-prefix", "-n", n,
                 str(bins["hoop-bench"]), "-a", hoop_algo] + sweep,
        "mpi": [str(bins["mpirun"]), "--oversubscribe", "--allow-run-as-root",
                "--bind-to", "none", "-np", n] + mpi_tcp +
               [str(bins["peer-mpi-bench"])] + sweep,
        "gloo": [str(bins["python3"]), str(bins["gloo_bench.py"]),
                 "--nprocs", n] + sweep,
    }


def execute(argv, timeout, env=None):
    """Runs argv (in `env`, else this environment) in its own session so
    that a hung launcher and all the ranks it started can be killed
    together, on timeout and also when this script is stopped (no rank may
    outlive, say, emulated hosts' namespaces). Returns (rc, out, err,
    seconds)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\n[killed after {timeout} s]\n"
        return 124, out, err, time.monotonic() - t0
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return proc.returncode, out, err, time.monotonic() - t0


def parse_rows(run, in_place):
    """Fills run.times from the data rows (first field all digits) and
    records malformed rows, unchecked results and #wrong > 0. In-place
    columns of N/A (all-to-all has no in-place form) count only when they
    are the ones asked for."""
    for line in run.stdout.splitlines():
        f = line.split()
        if not f or not f[0].isdigit():
            continue
        if len(f) != 13 and (len(f) != 9 or in_place):
            run.problems.append(f"malformed data row: {line!r}")
            continue
        try:
            group = f[9:13] if in_place else f[5:9]
            if group[0] == "N/A":
                run.problems.append(f"size {f[0]}: no in-place form")
                continue
            run.times[int(f[0])] = float(group[0])
            wrongs = [f[8]] + (f[12:13] if f[9:10] != ["N/A"] else [])
            if "N/A" in wrongs:
                run.problems.append(f"size {f[0]}: result not checked")
            elif any(int(w) > 0 for w in wrongs):
                run.problems.append(f"size {f[0]}: #wrong {' '.join(wrongs)}")
        except ValueError:
            run.problems.append(f"malformed data row: {line!r}")


def judge(run, a):
    if run.rc != 0:
        run.problems.append(f"exit status {run.rc}")
    parse_rows(run, a.in_place)
    missing = [human(s) for s in expected_sizes(a) if s not in run.times]
    if missing:
        run.problems.append("no row for " + ", ".join(missing))


def run_ceilings(bins, timeout):
    """-> (raw text, {'memcpy_GBps': x, ...}, problem or None)."""
    argv = [str(bins["hoop-ceilings"])]
    rc, out, err, _ = execute(argv, timeout)
    values = {}
    for line in out.splitlines():
        if line.startswith("ceiling "):
            for kv in line.split()[1:]:
                key, _, val = kv.partition("=")
                values[key] = float(val)
    ok = rc == 0 and {"memcpy_GBps", "tcp_loopback_GBps"} <= values.keys()
    return out + err, values, None if ok else f"hoop-ceilings failed (rc {rc})"


def round_trip_ns(bins, timeout):
    """A cache line's round trip between two cores now, or None. On a VM
    it tells where the host runs the CPUs: this project's measured 50-60
    ns and 310-360 ns minutes apart, and shm all-reduce at 64 MiB took 3.5
    times as long with the second."""
    rc, out, _, _ = execute([str(bins["hoop-ceilings"]), "--rtt"], timeout)
    for line in out.splitlines():
        if rc == 0 and line.startswith("ceiling core_rtt_ns="):
            return float(line.partition("=")[2])
    return None


def rotate(items, k):
    """items from the k-th on, then the rest: each repeat of an interleaved
    schedule starts with another peer, so that none always runs first or
    after the same one (which can favour one: hoop-bench's first placement
    timed ran slower)."""
    k %= len(items)
    return items[k:] + items[:k]


def run_all(a, bins):
    """The interleaved schedule: every repeat runs each peer once."""
    runs = []
    for ranks in a.ranks:
        argvs = commands(a, bins, ranks, a.hoop_algo)
        for rep in range(1, a.repeats + 1):
            for peer in rotate(list(PEERS), rep - 1):
                run = Run(peer, ranks, rep, argvs[peer])
                run.rc, run.stdout, run.stderr, run.seconds = execute(
                    run.argv, a.timeout)
                judge(run, a)
                if a.transport == "shm":
                    run.rtt_ns = round_trip_ns(bins, a.timeout)
                status = "ok" if not run.problems else "; ".join(run.problems)
                rtt = "" if run.rtt_ns is None else f"  rtt {run.rtt_ns:.0f} ns"
                print(f"[{ranks} ranks, repeat {rep}/{a.repeats}] {peer:4s} "
                      f"{run.seconds:6.1f} s  {status}{rtt}", file=sys.stderr)
                runs.append(run)
    return runs


def busbw(nbytes, time_us, ranks):
    """GB/s; from the time, since rows print busbw with 2 decimals only."""
    return nbytes / (time_us * 1e3) * 2 * (ranks - 1) / ranks


def cell_time_bw(times, nbytes, ranks):
    if not times:
        return ["-", "-"]
    med = statistics.median(times)
    bws = [busbw(nbytes, t, ranks) for t in times]
    return [f"{med:.1f}", f"{statistics.median(bws):.3f}"]


def cell_ratio(hoop, peer):
    """hoop busbw / peer busbw = peer time / hoop time, paired by repeat:
    the two ran next to each other, which is the point of interleaving."""
    ratios = [p / h for h, p in zip(hoop, peer) if h and p]
    if not ratios:
        return ["-", "-"]
    return [f"{statistics.median(ratios):.2f}",
            f"{min(ratios):.2f}-{max(ratios):.2f}"]


def per_repeat_times(runs, peer, ranks, nbytes, repeats):
    """Times indexed by repeat; None where that run gave no row."""
    by_rep = {r.repeat: r.times.get(nbytes) for r in runs
              if r.peer == peer and r.ranks == ranks}
    return [by_rep.get(rep) for rep in range(1, repeats + 1)]


def summary(a, runs, ceilings, cores):
    placement = "in-place" if a.in_place else "out-of-place"
    lines = [
        f"Ceilings: single-thread memcpy {ceilings.get('memcpy_GBps', '?')} "
        f"GB/s, memcpy on every core at once "
        f"{ceilings.get('memcpy_all_GBps', '?')} GB/s per core, one "
        f"loopback TCP stream {ceilings.get('tcp_loopback_GBps', '?')} GB/s; "
        f"a cache line's round trip between two cores "
        f"{ceilings.get('core_rtt_ns', '?')} ns.",
        "",
        f"All-reduce float32 sum, {placement}; time = median over "
        f"{a.repeats} repeats of each run's median (us); busbw GB/s "
        "(GB = 1e9 B); ratio = hoop busbw / peer busbw, median and min-max "
        "over repeats. " + transport_note(a),
    ]
    if not a.in_place:
        lines.append("gloo's out-of-place time includes a copy into the "
                     "output tensor (torch has no out-of-place all_reduce).")
    lines += ["",
              "| ranks | size | hoop us | hoop busbw | mpi us | mpi busbw "
              "| gloo us | gloo busbw | hoop/mpi | spread | hoop/gloo "
              "| spread |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for ranks in a.ranks:
        mark = "*" if ranks > cores else ""
        for nbytes in expected_sizes(a):
            t = {p: per_repeat_times(runs, p, ranks, nbytes, a.repeats)
                 for p in PEERS}
            cells = [f"{ranks}{mark}", human(nbytes)]
            for p in PEERS:
                cells += cell_time_bw([x for x in t[p] if x], nbytes, ranks)
            cells += cell_ratio(t["hoop"], t["mpi"])
            cells += cell_ratio(t["hoop"], t["gloo"])
            lines.append("| " + " | ".join(cells) + " |")
    memcpy = ceilings.get("memcpy_GBps")
    memcpy_all = ceilings.get("memcpy_all_GBps")
    if a.transport == "shm" and memcpy:
        top = expected_sizes(a)[-1]
        lines += ["", f"hoop's busbw at {human(top)} as a fraction of the "
                  f"single-thread memcpy ceiling ({memcpy} GB/s) and of "
                  f"memcpy on every core at once ({memcpy_all} GB/s per "
                  "core; with a rank per core, every rank reads its input "
                  "and writes its result while the others do):"]
        for ranks in a.ranks:
            t = [x for x in per_repeat_times(runs, "hoop", ranks, top,
                                             a.repeats) if x]
            if t:
                bw = busbw(top, statistics.median(t), ranks)
                line = (f"- {ranks} ranks: {bw:.2f} GB/s = "
                        f"{bw / float(memcpy):.2f} of memcpy")
                if memcpy_all:
                    line += f", {bw / float(memcpy_all):.2f} of all cores'"
                lines.append(line)
    if a.transport == "shm":
        lines += ["", "A cache line's round trip between two cores just "
                  "after each run, ns, by repeat (on a VM, where the host "
                  "runs the CPUs; a shm run is only as fast as its "
                  "hand-overs):"]
        for ranks in a.ranks:
            for p in PEERS:
                trips = [r.rtt_ns for r in sorted(runs, key=lambda r: r.repeat)
                         if r.peer == p and r.ranks == ranks]
                lines.append(f"- {ranks} ranks, {p}: " + ", ".join(
                    "?" if t is None else f"{t:.0f}" for t in trips))
    if any(r > cores for r in a.ranks):
        lines += ["", f"\\* more ranks than the {cores} cores of this "
                  "machine: small sizes measure scheduling as much as the "
                  "library."]
    return "\n".join(lines)


def read_first(path, key):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def tool_line(argv):
    """First output line of a version query, or why there is none."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True,
                             timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unavailable ({e})"
    return out.splitlines()[0] if out else "unavailable"


def machine_info_basic():
    """Date, machine, kernel, load and hoop's revision, for any report."""
    gpu = (tool_line(["nvidia-smi", "-L"]) if shutil.which("nvidia-smi")
           else "none")
    hoop_env = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                        if k.startswith("HOOP_")) or "(none set)"
    return [
        f"- Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC",
        f"- Machine: {os.cpu_count()} cores (nproc), CPU "
        f"{read_first('/proc/cpuinfo', 'model name')}, "
        f"memory {read_first('/proc/meminfo', 'MemTotal')}, GPU {gpu}",
        f"- Kernel: {platform.system()} {platform.release()}",
        # The machine is shared: a high load explains a wide spread.
        "- Load average (1, 5, 15 min) at the end: "
        + " ".join(str(round(x, 2)) for x in os.getloadavg()),
        f"- hoop tree HEAD: {tool_line(['git', '-C', str(HERE), 'rev-parse', 'HEAD'])}",
        f"- HOOP_* environment: {hoop_env}",
    ]


def machine_info(bins):
    return machine_info_basic() + [
        f"- Open MPI: {tool_line([str(bins['mpirun']), '--version'])}"]


def fenced(text):
    return "```\n" + (text.rstrip("\n") or "(no output)") + "\n```"


def run_label(r):
    return f"{r.ranks} ranks, repeat {r.repeat}, {r.peer}"


def report_body(ceil_raw, table, failures, runs, label, more=lambda r: []):
    """What a report holds after its header: the ceilings, the summary
    table, the failures, and every run's raw output under label(run),
    followed by more(run), the lines a script keeps of its own."""
    parts = ["## Ceilings", "", fenced(ceil_raw), "",
             "## Summary", "", table, ""]
    if failures:
        parts += ["## Failures", ""] + [f"- {f}" for f in failures] + [""]
    parts += ["## Raw output of every run", ""]
    for r in runs:
        parts += [f"### {label(r)}", "",
                  f"`{shlex.join(r.argv)}`: exit {r.rc}, {r.seconds:.1f} s",
                  "", fenced(r.stdout)]
        if r.stderr.strip():
            parts += ["", "stderr:", "", fenced(r.stderr)]
        parts += more(r) + [""]
    return parts


def report(a, bins, cmdline, ceil_raw, runs, table, failures,
           what="All-reduce", label=run_label):
    """Writes a.out: machine, command, then report_body."""
    over = "TCP" if a.transport == "tcp" else "shared memory"
    parts = [f"# {what}: hoop vs Open MPI vs gloo ({over})", ""]
    parts += machine_info(bins)
    parts += [f"- Command: `{cmdline}`",
              "- Method: shared/bench-method.md (barrier, one call timed on "
              "every rank, max over ranks, median over iterations; peers "
              "interleaved per repeat, each repeat starting with the next "
              "peer of hoop, mpi, gloo)", ""]
    parts += report_body(ceil_raw, table, failures, runs, label)
    a.out.write_text("\n".join(parts))


def failures_of(ceil_problem, runs, label=run_label):
    """The ceilings' problem, if any, then every run's under label(run)."""
    return [p for p in [ceil_problem] if p] + [
        f"{label(r)}: {p}" for r in runs for p in r.problems]


def finish(out, write_report, failures):
    """The end of a run, once its table is printed: write_report() where
    --out names a file, the failures on stderr, and the exit status."""
    if out:
        write_report()
        print(f"\nwrote {out}", file=sys.stderr)
    if failures:
        print("\nFAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    return 0


def main():
    a = parse_args(sys.argv[1:])
    cmdline = shlex.join([sys.executable] + sys.argv)
    bins = binaries(a)
    missing = missing_tools(bins)
    if missing:
        print("compare_allreduce: cannot run:\n  " + "\n  ".join(missing),
              file=sys.stderr)
        return 2
    ceil_raw, ceilings, ceil_problem = run_ceilings(bins, a.timeout)
    print(ceil_raw.rstrip("\n"))
    runs = run_all(a, bins)
    table = summary(a, runs, ceilings, os.cpu_count() or 1)
    print("\n" + table)
    failures = failures_of(ceil_problem, runs)
    return finish(a.out, lambda: report(a, bins, cmdline, ceil_raw, runs,
                                        table, failures), failures)


if __name__ == "__main__":
    sys.exit(main())
