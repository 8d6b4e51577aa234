#!/usr/bin/env python3
"""Stops or kills one rank of a running job and checks what the others say.

Each trial starts N ranks of hoop-bench looping on all-reduce (with a
barrier before every call, as it times), waits a random moment, sends
SIGSTOP (a debugger, a hung driver, swap) or SIGKILL to a random rank,
and then checks that every survivor
  - fails within its timeout and the inquiry after it (no hang),
  - names the victim in its error: for SIGSTOP the stall report must name
    it first ("stall report: rank V ("), for SIGKILL the error must name
    it at all ("rank V ("),
and that nothing is left in /dev/shm once the victim is gone.

  tools/fault_campaign.py --build build --trials 50            # everything
  tools/fault_campaign.py --ranks 4 --transport tcp --signal STOP -t 10

Prints one line per trial and a table per (signal, N, transport); exits 1
when a configuration misses its target (>= 95% named for SIGSTOP, 100%
for SIGKILL, no hang, nothing left in /dev/shm).
"""
import argparse
import os
import random
import re
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time

TARGET = {"STOP": 0.95, "KILL": 1.0}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shm_segments():
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("hoop")}
    except FileNotFoundError:
        return set()


def failure_line(text):
    """hoop-bench's own line for the call that failed, if any."""
    for line in text.splitlines():
        if line.startswith("hoop-bench: rank ") and " failed: " in line:
            return line
    return None


def trial(args, nranks, transport, signame, rng):
    """One job; returns a dict describing what every survivor said."""
    victim = rng.randrange(nranks)
    env = dict(os.environ,
               HOOP_ROOT_ADDR="127.0.0.1:%d" % free_port(),
               HOOP_WORLD_SIZE=str(nranks),
               HOOP_AUTH_TOKEN=secrets.token_hex(16),
               HOOP_TIMEOUT_MS=str(args.timeout_ms),
               HOOP_TRANSPORT=transport)
    bench = os.path.join(args.build, "bench", "hoop-bench")
    cmd = [bench, "-b", args.size, "-e", args.size, "-n", "100000000",
           "-w", "1"]
    procs = []
    for rank in range(nranks):
        env["HOOP_RANK"] = str(rank)
        procs.append(subprocess.Popen(cmd, env=dict(env),
                                      stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
    # Set-up takes a moment; the victim is hit somewhere in the loop after.
    time.sleep(args.settle + rng.uniform(0, args.spread))
    hit = time.monotonic()
    sig = signal.SIGSTOP if signame == "STOP" else signal.SIGKILL
    procs[victim].send_signal(sig)
    # A survivor must fail within its timeout, the inquiry and set-down.
    deadline = hit + args.timeout_ms / 1000.0 + args.grace
    out = {"victim": victim, "named": 0, "first": 0, "hung": 0,
           "survivors": nranks - 1, "secs": [], "early": 0, "lines": []}
    for rank, p in enumerate(procs):
        if rank == victim:
            continue
        try:
            _, err = p.communicate(timeout=max(0.1, deadline -
                                               time.monotonic()))
        except subprocess.TimeoutExpired:
            out["hung"] += 1
            p.kill()
            _, err = p.communicate()
            out["lines"].append("rank %d hung" % rank)
            continue
        out["secs"].append(time.monotonic() - hit)
        line = failure_line(err)
        if line is None:
            out["early"] += 1
            out["lines"].append("rank %d: no failure line: %s" %
                                (rank, err.strip().splitlines()[-1:]))
            continue
        name = "rank %d (" % victim
        strict = name if signame == "KILL" else "stall report: " + name
        out["named"] += name in line
        out["first"] += strict in line
        if strict not in line:
            out["lines"].append("rank %d: %s" % (rank, line))
    procs[victim].kill()
    procs[victim].communicate()
    time.sleep(0.05)
    out["leftovers"] = sorted(shm_segments())
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 4, 8])
    ap.add_argument("--transport", nargs="+", default=["shm", "tcp"])
    ap.add_argument("--signal", nargs="+", default=["STOP", "KILL"],
                    choices=["STOP", "KILL"])
    ap.add_argument("-t", "--trials", type=int, default=50)
    ap.add_argument("--timeout-ms", type=int, default=3000)
    ap.add_argument("--size", default="256K",
                    help="all-reduce size (hoop-bench -b/-e)")
    ap.add_argument("--settle", type=float, default=0.5,
                    help="seconds before the earliest hit")
    ap.add_argument("--spread", type=float, default=1.0,
                    help="seconds over which the hit is drawn")
    ap.add_argument("--grace", type=float, default=8.0,
                    help="seconds past the timeout before a rank counts "
                         "as hung")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    if shm_segments():
        sys.exit("fault_campaign: /dev/shm already holds hoop segments: %s"
                 % sorted(shm_segments()))
    print("# fault_campaign: %s, timeout %d ms, %d trials each, seed %d" %
          (args.build, args.timeout_ms, args.trials, args.seed))
    rows, ok = [], True
    for signame in args.signal:
        for transport in args.transport:
            for n in args.ranks:
                tot = {"named": 0, "first": 0, "hung": 0, "survivors": 0,
                       "early": 0, "leftover_trials": 0}
                secs = []
                for i in range(args.trials):
                    r = trial(args, n, transport, signame, rng)
                    for k in ("named", "first", "hung", "survivors",
                              "early"):
                        tot[k] += r[k]
                    tot["leftover_trials"] += bool(r["leftovers"])
                    secs += r["secs"]
                    print("SIG%s n=%d %s trial %d: victim %d, named by "
                          "%d/%d (first %d), hung %d%s" %
                          (signame, n, transport, i, r["victim"], r["named"],
                           r["survivors"], r["first"], r["hung"],
                           ", left " + " ".join(r["leftovers"])
                           if r["leftovers"] else ""), flush=True)
                    for line in r["lines"]:
                        print("    " + line[:400], flush=True)
                    for seg in r["leftovers"]:
                        try:
                            os.unlink("/dev/shm/" + seg)
                        except OSError:
                            pass
                share = tot["first"] / max(1, tot["survivors"])
                good = (share >= TARGET[signame] and tot["hung"] == 0 and
                        tot["leftover_trials"] == 0)
                ok &= good
                rows.append((signame, n, transport, args.trials,
                             tot["survivors"], tot["first"], tot["named"],
                             share, tot["hung"], tot["leftover_trials"],
                             statistics.median(secs) if secs else
                             float("nan"), "yes" if good else "NO"))
    print()
    print("| signal | ranks | transport | trials | survivor errors | "
          "name the victim first | name it at all | share | hung | "
          "trials leaving /dev/shm | median s to error | target met |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| SIG%s | %d | %s | %d | %d | %d | %d | %.1f%% | %d | %d | "
              "%.2f | %s |" % (r[0], r[1], r[2], r[3], r[4], r[5], r[6],
                               100 * r[7], r[8], r[9], r[10], r[11]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
