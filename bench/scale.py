#!/usr/bin/python3
"""How hoop's set-up cost grows with the ranks on one host, beside Open MPI.

Issue 38. For each rank count N and each repeat, runs back to back (so
drift hits all three) hoop-scale-probe with HOOP_RUNTIME_CONNECT=0
(hoop-eager: every pair connects at init, each pair on a host with its
own shared-memory segment) and =1 (hoop-lazy: a pair connects when a
call first needs it), then peer-mpi-scale-probe under mpirun with Open
MPI's shared-memory BTL. Each rank prints one JSON line (init time,
first 4 KiB all-reduce, median of 50 more, peak RSS and open descriptors
before teardown, the algorithms hoop's calls ran); meanwhile this script
samples the bytes used in /dev/shm every 50 ms (so a launch shorter than
a few samples may show less than it held). Per run the table gives
the slowest rank's init, first call and init + first call (the most any
rank spent on both, i.e. when the last rank had its first result), the
median over ranks of the per-call median, the largest RSS and descriptor
count, the /dev/shm peak above what it held before the launch, the wall
time of the launch, and for hoop (init + first call) over MPI's in the same
repeat; then the medians over repeats. --large-mib adds the slowest rank's
time for one large all-reduce; --alltoall BYTES its time for one checked
all-to-all of BYTES per peer and for a barrier after it.

A launch that times out, dies (the kernel's OOM killer counts in
/proc/vmstat's oom_kill), returns wrong sums or leaves files in /dev/shm
is reported as such. A launch is skipped when MemAvailable cannot hold
its estimate, and hoop-eager above the N where its N(N-1)/2 segments
would fill more than half of RAM.

    /usr/bin/python3 bench/scale.py --build build --ranks 2,4,8,16,32,64 \\
        --repeats 2 --json FILE.json

Standard library only. Exits non-zero if any launch that ran failed.
"""

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

IMPLS = ("hoop-eager", "hoop-lazy", "mpi")
MIB = 1 << 20
GIB = 1 << 30
# One pair's segment at the default HOOP_SHM_SLOT_BYTES x HOOP_SHM_SLOTS:
# a 4 KiB header and two 2 MiB rings (src/transport/shm.c), which fill as
# they are used, 64 KiB at a time: a pair that carried only small calls
# holds its header and one step each way, one that carried a large call
# all of it.
SEGMENT_BYTES = 4096 + 2 * 8 * 256 * 1024
SEGMENT_SMALL_BYTES = 4096 + 2 * 64 * 1024
# Per rank beyond its segments, from runs at 2 to 256 ranks (12 to 16 MiB
# for hoop and Open MPI alike), with room.
RANK_BYTES = 32 * MIB
GRACE = 30  # after the launcher's own time limit, before SIGKILL
MAX_TIMEOUT = 600 - GRACE  # so that no launch runs past 10 minutes


def parse_ranks(text):
    try:
        ranks = [int(x) for x in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"rank counts {text!r}: not integers")
    if not ranks or any(n < 2 or n > 1024 for n in ranks):
        raise argparse.ArgumentTypeError(
            f"rank counts {text!r}: each must be 2 to 1024")
    return ranks


def parse_impls(text):
    impls = text.split(",")
    bad = [i for i in impls if i not in IMPLS]
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown implementation(s) {bad}; choose from {', '.join(IMPLS)}")
    return impls


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--build", type=Path, default=Path("build"))
    p.add_argument("--ranks", type=parse_ranks, default="2,4,8,16,32,64")
    p.add_argument("--impls", type=parse_impls, default=",".join(IMPLS))
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--timeout", type=int, default=300,
                   help=f"seconds per launch, at most {MAX_TIMEOUT}")
    p.add_argument("--large-mib", type=int, default=0,
                   help="also time one all-reduce of this many MiB per rank")
    p.add_argument("--alltoall", type=int, default=0, metavar="BYTES",
                   help="also time one all-to-all of this many bytes per "
                   "peer, then a barrier")
    p.add_argument("--json", type=Path, help="every run's row, raw")
    a = p.parse_args(argv)
    if (a.repeats < 1 or not 1 <= a.timeout <= MAX_TIMEOUT or
            a.large_mib < 0 or a.alltoall < 0):
        p.error(f"need --repeats >= 1, 1 <= --timeout <= {MAX_TIMEOUT}, "
                "--large-mib >= 0, --alltoall >= 0")
    return a


def shm_used():
    st = os.statvfs("/dev/shm")
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def shm_free():
    st = os.statvfs("/dev/shm")
    return st.f_bavail * st.f_frsize


def shm_entries():
    return set(os.listdir("/dev/shm"))


def meminfo(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/meminfo has no {key}")


def oom_kills():
    with open("/proc/vmstat") as f:
        for line in f:
            name, value = line.split()
            if name == "oom_kill":
                return int(value)
    return 0


def cpu_busy():
    """Seconds the machine's CPUs have been busy, all of them together."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")


def job_cpu():
    """CPU seconds of the launches so far: launchers wait for their ranks,
    so the ranks' time is in their launcher's."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def estimate(impl, n, large_mib, alltoall):
    """(bytes of /dev/shm, bytes of memory in all) a launch needs. Eager,
    and an all-to-all: every pair has a segment. Lazy: a rank's segments
    are its ring neighbours' and, where auto picks the parameter server,
    rank 0's with every rank, so about 2N in all. A large call fills the
    ring's N segments. Each rank holds the large buffer and about as much
    again in scratch."""
    pairs = (n * (n - 1) // 2 if impl == "hoop-eager" or alltoall
             else 2 * n)
    shm = pairs * SEGMENT_SMALL_BYTES + (n * SEGMENT_BYTES if large_mib
                                         else 0)
    if impl == "mpi":
        shm = n * 4 * MIB
    return shm, shm + n * (RANK_BYTES + 2 * large_mib * MIB)


def skip_reason(impl, n, large_mib, alltoall):
    shm, total = estimate(impl, n, large_mib, alltoall)
    if impl == "hoop-eager" and shm > meminfo("MemTotal") / 2:
        return f"skipped: needs ~{shm / GIB:.1f} GiB of /dev/shm"
    avail = meminfo("MemAvailable")
    if total > avail - GIB:
        return (f"skipped: needs ~{total / GIB:.1f} GiB, "
                f"{avail / GIB:.1f} GiB available")
    if shm > shm_free():
        return (f"skipped: needs ~{shm / GIB:.1f} GiB of /dev/shm, "
                f"{shm_free() / GIB:.1f} GiB free there")
    return None


def command(a, impl, n):
    probe_args = (["-l", str(a.large_mib)] if a.large_mib else []) + (
        ["-a", str(a.alltoall)] if a.alltoall else [])
    if impl == "mpi":
        return ([shutil.which("mpirun") or "mpirun"] +
                (["--allow-run-as-root"] if os.geteuid() == 0 else []) +
                # ob1 over vader: shared memory, as hoop's ranks use here.
                ["--oversubscribe", "--bind-to", "none",
                 "--mca", "pml", "ob1", "--mca", "btl", "self,vader",
                 "--timeout", str(a.timeout), "-n", str(n),
                 str(a.build / "bench" / "peer-mpi-scale-probe")] + probe_args)
    return [str(a.build / "tools" / "hoop-run"), "--no-prefix",
            "--timeout", str(a.timeout), "-n", str(n),
            str(a.build / "bench" / "hoop-scale-probe")] + probe_args


def environment(impl):
    env = dict(os.environ)
    if impl == "mpi":
        env.pop("HOOP_RUNTIME_CONNECT", None)
    else:
        env["HOOP_RUNTIME_CONNECT"] = "1" if impl == "hoop-lazy" else "0"
    return env


class Sampler(threading.Thread):
    """The most /dev/shm held, and the least MemAvailable, every 50 ms."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.shm_peak = shm_used()
        self.mem_low = meminfo("MemAvailable")

    def run(self):
        while not self.stop.wait(0.05):
            self.shm_peak = max(self.shm_peak, shm_used())
            self.mem_low = min(self.mem_low, meminfo("MemAvailable"))


def launch(a, impl, n):
    """Runs one launch in its own session (so that a hung launcher and its
    ranks can be killed together) and returns its raw row."""
    argv = command(a, impl, n)
    before = shm_entries()
    shm0 = shm_used()
    busy0, job0 = cpu_busy(), job_cpu()
    oom0 = oom_kills()
    sampler = Sampler()
    t0 = time.monotonic()
    sampler.start()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=environment(impl))
    killed = False
    try:
        out, err = proc.communicate(timeout=a.timeout + GRACE)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        killed = True
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        sampler.stop.set()
        sampler.join()
    wall = time.monotonic() - t0
    others = (cpu_busy() - busy0 - (job_cpu() - job0)) / wall
    ranks = []
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                ranks.append(json.loads(line))
            except ValueError:
                pass
    pids = {r.get("pid") for r in ranks}
    new = [owner(name, pids) for name in sorted(shm_entries() - before)]
    # Another user of this machine's hoop (tests run beside this) is not
    # this launch's leftover.
    leftovers = [f"{name} ({who})" for name, who, live_other in new
                 if not live_other]
    foreign = [f"{name} ({who})" for name, who, live_other in new
               if live_other]
    row = {"impl": impl, "nranks": n, "argv": argv,
           "other_cpus_busy": others,
           "env": ({"HOOP_RUNTIME_CONNECT": environment(impl)[
               "HOOP_RUNTIME_CONNECT"]} if impl != "mpi" else {}),
           "rc": proc.returncode, "wall_s": wall,
           "shm_peak_bytes": sampler.shm_peak - shm0,
           "mem_available_low_bytes": sampler.mem_low,
           "oom_kills": oom_kills() - oom0, "leftovers": leftovers,
           "shm_new_by_others": foreign,
           "ranks": ranks, "stderr_tail": err[-20000:]}
    row["status"] = status(row, killed)
    return row


def owner(name, job_pids):
    """(name, whose it is, whether a live process outside the job made it)
    for a file new in /dev/shm; hoop's names begin with the creating pid."""
    parts = name.split("-")
    if parts[0] == "hoop" and len(parts) > 1 and parts[1].isdigit():
        pid = int(parts[1])
        if pid in job_pids:
            return name, f"made by this job's rank pid {pid}", False
        if not os.path.exists(f"/proc/{pid}"):
            return name, f"made by pid {pid}, now gone", False
        return name, f"made by live pid {pid}, not this job's", True
    return name, "name gives no pid", False


def status(row, killed):
    n, rc = row["nranks"], row["rc"]
    problems = []
    if killed:
        problems.append(f"killed by this script after {row['wall_s']:.0f} s")
    elif (row["impl"] != "mpi" and rc == 124) or (row["impl"] == "mpi"
                                                  and rc == 110):
        problems.append(f"timeout (launcher's rc {rc})")
    elif rc != 0:
        sig = rc - 128 if rc > 128 else -rc if rc < 0 else 0
        what = f"rc {rc}" + (f" ({signal.Signals(sig).name})"
                             if sig in signal.valid_signals() else "")
        problems.append(f"failed: {what}")
    if row["oom_kills"]:
        problems.append(f"OOM killer: {row['oom_kills']} kill(s)")
    if len(row["ranks"]) != n:
        problems.append(f"{len(row['ranks'])} of {n} ranks reported")
    wrong = sum(r.get("wrong", 0) for r in row["ranks"])
    if wrong:
        problems.append(f"{wrong} wrong elements")
    if row["leftovers"]:
        problems.append(f"{len(row['leftovers'])} left in /dev/shm")
    return "; ".join(problems) or "ok"


def summary(row):
    """The row's table cells as numbers, None where the launch gave none."""
    ranks = row.get("ranks") or []
    if row["status"] != "ok" or not ranks:
        return None
    return {
        "init": max(r["init_s"] for r in ranks),
        "first": max(r["first_s"] for r in ranks),
        "both": max(r["init_s"] + r["first_s"] for r in ranks),
        "call": statistics.median(r["call_us_median"] for r in ranks),
        "rss": max(r["rss_kb"] for r in ranks) / 1024,
        "fds": max(r["fds"] for r in ranks),
        "shm": row["shm_peak_bytes"] / MIB,
        "wall": row["wall_s"],
        "large": (max(r["large_s"] for r in ranks)
                  if "large_s" in ranks[0] else None),
        "alltoall": (max(r["alltoall_s"] for r in ranks)
                     if "alltoall_s" in ranks[0] else None),
        "barrier": (max(r["barrier_s"] for r in ranks)
                    if "barrier_s" in ranks[0] else None),
        "algos": ",".join(sorted({r.get("algos", "") for r in ranks}
                                 - {""})),
    }


COLUMNS = ["N", "impl", "init s (max)", "first call s (max)",
           "init+first s (max)", "call us (median)", "RSS MB (max)",
           "fds (max)", "/dev/shm peak MB", "wall s", "x MPI init+first"]


# Key, column title and the factor from seconds to the column's unit.
OPTIONAL = (("large", "large s (max)", 1),
            ("alltoall", "all-to-all ms (max)", 1e3),
            ("barrier", "barrier ms (max)", 1e3))


def optional_columns(a):
    """The OPTIONAL keys this run measures."""
    return [k for k, _, _ in OPTIONAL
            if (a.large_mib if k == "large" else a.alltoall)]


def cells(n, impl, s, ratio, keys):
    c = [str(n), impl, f"{s['init']:.3f}", f"{s['first']:.3f}",
         f"{s['both']:.3f}", f"{s['call']:.0f}", f"{s['rss']:.1f}",
         f"{s['fds']:.0f}", f"{s['shm']:.1f}", f"{s['wall']:.1f}",
         "" if ratio is None else f"{ratio:.2f}"]
    for k, _, factor in OPTIONAL:
        if k in keys:
            c.append("" if s[k] is None else f"{s[k] * factor:.3f}")
    return c


def table(header, lines):
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out)


def ratio_of(rows, s):
    mpi = rows.get("mpi")
    ms = summary(mpi) if mpi else None
    if s is None or ms is None or ms["both"] <= 0:
        return None
    return s["both"] / ms["both"]


def report(a, results):
    """results: {(n, repeat): {impl: row}}. Prints per-run and median
    tables."""
    keys = optional_columns(a)
    header = COLUMNS + [t for k, t, _ in OPTIONAL if k in keys] + ["status"]
    settings = sorted(f"{k}={v}" for k, v in os.environ.items()
                      if k.startswith(("HOOP_", "OMPI_MCA_")))
    print("hoop's and Open MPI's settings from the environment: " +
          (" ".join(settings) or "none") +
          " (hoop-eager and hoop-lazy set HOOP_RUNTIME_CONNECT)\n")
    per_run = []
    for (n, rep), rows in sorted(results.items()):
        for impl in a.impls:
            row = rows.get(impl)
            if row is None:
                continue
            s = summary(row)
            if s is None:
                per_run.append([str(n), impl] + [""] * (len(header) - 3) +
                               [row["status"]])
                continue
            ratio = ratio_of(rows, s) if impl != "mpi" else None
            per_run.append(cells(n, impl, s, ratio, keys) + [
                f"rep {rep + 1}; {s['algos'] or 'ok'}; others "
                f"{row['other_cpus_busy']:.1f} CPU"])
    print("## Every run\n")
    print(table(header, per_run))
    medians = []
    for n in a.ranks:
        for impl in a.impls:
            rows = [results[(n, r)] for r in range(a.repeats)
                    if (n, r) in results and impl in results[(n, r)]]
            runs = [r[impl] for r in rows]
            if not runs:
                continue
            oks = [(summary(r[impl]), r) for r in rows
                   if summary(r[impl]) is not None]
            if not oks:
                medians.append([str(n), impl] + [""] * (len(header) - 3) +
                               ["; ".join(sorted({r["status"]
                                                  for r in runs}))])
                continue
            med = {k: statistics.median(s[k] for s, _ in oks)
                   for k in ("init", "first", "both", "call", "rss", "fds",
                             "shm", "wall")}
            for k in keys:
                got = [s[k] for s, _ in oks if s[k] is not None]
                med[k] = statistics.median(got) if got else None
            ratios = [ratio_of(r, s) for s, r in oks if impl != "mpi"]
            ratios = [x for x in ratios if x is not None]
            ratio = statistics.median(ratios) if ratios else None
            bad = sorted({r["status"] for r in runs if r["status"] != "ok"})
            algos = sorted({s["algos"] for s, _ in oks if s["algos"]})
            note = f"{len(oks)}/{len(runs)} ok" + (
                "; " + "; ".join(bad) if bad else "") + (
                "; " + " ".join(algos) if algos else "")
            medians.append(cells(n, impl, med, ratio, keys) + [note])
    print(f"\n\"others\": CPUs kept busy by other work during the launch "
          f"(all busy CPU time less the launch's, over its wall time; "
          f"{os.cpu_count()} CPUs here). Other work also shares /dev/shm.")
    print(f"\n## Medians over {a.repeats} repeat(s)\n")
    print(table(header, medians))
    notes = [f"- N={row['nranks']} {row['impl']}: {row['status']}; "
             f"leftovers: {', '.join(row['leftovers']) or 'none'}; "
             f"stderr tail: {row['stderr_tail'][-600:].strip()!r}"
             for rows in results.values() for row in rows.values()
             if row["status"] != "ok" and "ranks" in row]
    if notes:
        print("\n## Failures and leftovers\n")
        print("\n".join(notes))


def main(argv):
    a = parse_args(argv)
    missing = [str(p) for p in (a.build / "tools" / "hoop-run",
                                a.build / "bench" / "hoop-scale-probe",
                                a.build / "bench" / "peer-mpi-scale-probe")
               if not os.access(p, os.X_OK)]
    if "mpi" in a.impls and shutil.which("mpirun") is None:
        missing.append("mpirun")
    if missing:
        sys.exit(f"scale.py: not found or not executable: "
                 f"{', '.join(missing)}")
    results = {}
    raw = []
    failed = False
    for n in a.ranks:
        for rep in range(a.repeats):
            rows = results.setdefault((n, rep), {})
            for impl in a.impls:
                why = skip_reason(impl, n, a.large_mib, a.alltoall)
                if why:
                    row = {"impl": impl, "nranks": n, "status": why}
                else:
                    row = launch(a, impl, n)
                    failed |= row["status"] != "ok"
                row["repeat"] = rep
                rows[impl] = row
                raw.append(row)
                print(f"[scale] N={n} rep {rep + 1} {impl}: {row['status']}"
                      + (f" ({row['wall_s']:.1f} s)" if "wall_s" in row
                         else ""), file=sys.stderr, flush=True)
    report(a, results)
    if a.json:
        a.json.write_text(json.dumps(raw, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
