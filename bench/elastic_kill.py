#!/usr/bin/env python3
"""hoop-train --elastic when a rank is killed or stopped mid-run.

Measures what losing one rank costs an elastic training job
(`hoop-run --elastic -n R hoop-train --elastic`, the MLP on Fashion-MNIST):

- baselines: the same job uninterrupted, --baselines times up front and
  once more after every --baseline-every trials, interleaved, so that
  drift on a shared machine shows in both; plus one run for each of
  --acc-seeds (other training seeds), the yardstick for how much the
  final accuracy moves anyway, and one on R-1 ranks from the start (what
  a trial turns into after its loss; --no-fewer skips it);
- --trials SIGKILL trials: at a fraction f of the run's wall time drawn
  uniformly from --window (from the launch), one child of hoop-run picked
  at random (`pgrep -P`, its rank read from its HOOP_RANK) gets SIGKILL.
  The run's wall time is estimated as it goes (--timing run): the last 3
  baselines' median, scaled by when this run's header line came, then
  projected from its epoch lines; this machine's speed moves up to 2x
  between runs, and a fixed moment (--timing baseline) then lands after
  the end of some runs.  The job's combined output is read as it
  streams, each line timestamped.  Per trial: kill to rank 0's "rank(s)
  ... left; ... go on (recovered in X s)" line, X itself, whether
  hoop-run exited 0 with every epoch done, the final test accuracy minus
  the baselines' median (percentage points), the wall time minus theirs
  and minus the mean of the baselines run just before and after the
  trial (time lost per failure: detection, recovery, the redone step,
  and the rest of the run on one rank fewer), the epoch of the loss's
  seconds beside the run's other epochs (the same cost measured within
  the run), and samples/s of the whole epochs before (R ranks) and after
  (R-1 ranks) the loss, to tell those apart;
- --stop-trials SIGSTOP trials with HOOP_TIMEOUT_MS=--stop-timeout-ms in
  the ranks' environment: the stopped rank is left out once the survivors'
  call times out (expected: the timeout, the stall inquiry's timeout/5,
  then the recovery).  When the survivors are done (hoop-run waits for
  every child, so it would wait for the stopped one for ever) the stopped
  rank gets SIGCONT; what it then prints and how it exits is reported, and
  it gets SIGKILL if it is still there --cont-grace seconds later.

Every run has a hard limit (--run-timeout); a run past it is stopped
(SIGTERM to hoop-run, then SIGKILL to it and its children) and counted as
hung.  A kill can land before the first step (data loading, hoop_init,
the initial parameter broadcast): the per-trial table says in which phase
each kill landed.

With the defaults (4 ranks, 15 epochs, 20 + 5 trials, 15 + 6 + 1
uninterrupted runs) it takes 6-10 minutes on the project's 2-core VM.

  bench/elastic_kill.py --bin-dir build --out bench/results/FILE.md
  bench/elastic_kill.py --bin-dir /tmp/elastic-bin --trials 20 \
      --stop-trials 5 --epochs 15 --seed 1 --out FILE.md

--bin-dir is a build tree (tools/hoop-run, src/train/hoop-train,
src/libhoop.so) or one folder holding all three; LD_LIBRARY_PATH is set to
where libhoop.so is.  Standard library only.
"""
import argparse
import csv
import hashlib
import os
import random
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_allreduce import machine_info_basic  # noqa: E402

RECOVERED = re.compile(r"hoop-train: rank\(s\) (\S+) left; (\d+) of (\d+) "
                       r"ranks go on \(recovered in ([0-9.]+) s\)")
EPOCH = re.compile(r"epoch (\d+)/(\d+): loss ([0-9.]+), accuracy train "
                   r"([0-9.]+) test ([0-9.]+), ([0-9.]+) samples/s")
HEADER = re.compile(r"hoop-train: \d+ ranks?, ")
RUN_LINE = re.compile(r"hoop-run: rank (\d+) \(pid (\d+)\) (was killed by "
                      r"signal \d+|exited with code \d+)")


def parse_window(text):
    lo, hi = (float(x) for x in text.split(","))
    if not 0 <= lo < hi:
        raise argparse.ArgumentTypeError("--window LO,HI with 0 <= LO < HI")
    return lo, hi


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin-dir", type=Path, default=Path("build"),
                   help="build tree, or one folder with hoop-run, "
                   "hoop-train and libhoop.so (default build)")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--trials", type=int, default=20, help="SIGKILL trials")
    p.add_argument("--stop-trials", type=int, default=5,
                   help="SIGSTOP trials (0: none)")
    p.add_argument("--stop-timeout-ms", type=int, default=3000,
                   help="HOOP_TIMEOUT_MS for the SIGSTOP trials")
    p.add_argument("--baselines", type=int, default=3,
                   help="uninterrupted runs before the trials")
    p.add_argument("--baseline-every", type=int, default=2,
                   help="one more uninterrupted run after every N trials "
                   "(0: none)")
    p.add_argument("--acc-seeds", default="2,3,4,5,6,7",
                   help="training seeds of extra uninterrupted runs, for "
                   "the accuracy's spread over seeds ('' for none)")
    p.add_argument("--no-fewer", action="store_true",
                   help="skip the uninterrupted run on one rank fewer "
                   "(what the trials turn into after the loss)")
    p.add_argument("--train-seed", type=int, default=1,
                   help="hoop-train --seed of the baselines and trials")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of the kill moments and victims")
    p.add_argument("--window", type=parse_window, default=(0.10, 0.85),
                   help="signal moments, as fractions of the run's wall "
                   "time (default 0.10,0.85); see --timing")
    p.add_argument("--timing", choices=("run", "baseline"), default="run",
                   help="run: the fraction of this run's wall time as "
                   "estimated while it goes (the recent baselines' scaled "
                   "by this run's pace so far); baseline: of the median "
                   "wall time of the last 3 baselines (default run)")
    p.add_argument("--run-timeout", type=float, default=120.0)
    p.add_argument("--cont-grace", type=float, default=20.0,
                   help="seconds a stopped rank gets after SIGCONT")
    p.add_argument("--out", type=Path, help="markdown report")
    return p.parse_args(argv)


def binaries(bin_dir):
    """hoop-run, hoop-train and the folder holding libhoop.so."""
    d = bin_dir.resolve()
    layouts = [(d / "tools" / "hoop-run", d / "src" / "train" / "hoop-train",
                d / "src"),
               (d / "hoop-run", d / "hoop-train", d)]
    for run, train, lib in layouts:
        if run.is_file() and train.is_file():
            return run, train, lib
    sys.exit(f"elastic_kill: no hoop-run and hoop-train in {d}")


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def children(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True,
                         text=True).stdout.split()
    return sorted(int(x) for x in out)


def rank_of(pid):
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for kv in env:
        if kv.startswith(b"HOOP_RANK="):
            return int(kv.split(b"=", 1)[1])
    return None


def proc_state(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def shm_of(pids):
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return []
    return sorted(n for n in names for p in pids
                  if n.startswith(f"hoop-{p}-"))


class Job:
    """One hoop-run job: its output read line by line with timestamps
    (seconds since the launch), and at most one signal sent to one rank."""

    def __init__(self, a, bins, metrics, train_seed, env_extra=None,
                 ranks=None):
        run, train, lib = bins
        self.argv = [str(run), "--elastic", "-n", str(ranks or a.ranks),
                     str(train),
                     "--elastic", "--quiet", "--data", a.data, "--epochs",
                     str(a.epochs), "--seed", str(train_seed), "--metrics",
                     str(metrics)]
        self.env_extra = dict(env_extra or {})
        env = dict(os.environ, **self.env_extra)
        env["LD_LIBRARY_PATH"] = str(lib) + (
            ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        self.metrics = Path(metrics)
        self.lines = []          # (t, text)
        self.lock = threading.Lock()
        self.events = []         # (t, what), the bench's own doings
        self.victim = None       # (pid, rank)
        self.t_signal = None
        self.t_cont = None
        self.hung = False
        self.rank_pids = []
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, bufsize=1,
            errors="replace")
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def now(self):
        return time.monotonic() - self.t0

    def note(self, what):
        with self.lock:
            self.events.append((self.now(), what))

    def _read(self):
        for line in self.proc.stdout:
            t = self.now()
            with self.lock:
                self.lines.append((t, line.rstrip("\n")))

    def snapshot(self):
        with self.lock:
            return list(self.lines)

    def signal_one(self, sig, rng):
        """Sends sig to one of hoop-run's children, picked with rng."""
        kids = children(self.proc.pid)
        if not kids:
            self.note("no rank to signal (hoop-run has no children)")
            return False
        self.rank_pids = kids
        pid = rng.choice(kids)
        rank = rank_of(pid)
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            self.note(f"rank pid {pid} was gone before {sig.name}")
            return False
        self.t_signal = self.now()
        self.victim = (pid, rank)
        self.note(f"{sig.name} to rank {rank} (pid {pid}); "
                  f"children {kids}")
        return True

    def wait(self, deadline):
        """Waits for hoop-run until deadline (seconds since the launch);
        past it, stops the job and marks it hung."""
        try:
            self.proc.wait(timeout=max(0.1, deadline - self.now()))
        except subprocess.TimeoutExpired:
            self.hung = True
            self.stop_all(f"hung: still running at {deadline:.0f} s")
        self.reader.join(timeout=10)
        self.t_exit = self.now()
        self.rc = self.proc.returncode

    def stop_all(self, why):
        self.note(why + "; SIGTERM to hoop-run")
        kids = children(self.proc.pid)
        try:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.note("SIGKILL to hoop-run and its children "
                      f"{kids + children(self.proc.pid)}")
            for pid in set(kids + children(self.proc.pid)):
                try:
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.kill()
            self.proc.wait()

    def rows(self):
        try:
            with open(self.metrics, newline="") as f:
                return list(csv.DictReader(f))
        except OSError:
            return []

    def log(self):
        """Output and the bench's events, in time order."""
        items = [(t, 0, s) for t, s in self.snapshot()]
        items += [(t, 1, f"# bench: {w}") for t, w in self.events]
        items.sort(key=lambda x: (x[0], x[1]))
        return "\n".join(f"{t:8.3f} {s}" for t, _, s in items)


def outcome(job, a):
    """What a finished job did: its epochs, accuracy, times, recovery."""
    lines = job.snapshot()
    epochs = [(t, EPOCH.search(s)) for t, s in lines if EPOCH.search(s)]
    header = next((t for t, s in lines if HEADER.search(s)), None)
    rec = [(t, RECOVERED.search(s)) for t, s in lines if RECOVERED.search(s)]
    rows = job.rows()
    last_t = next((t for t, m in epochs if int(m.group(1)) == a.epochs), None)
    o = {"rc": job.rc, "hung": job.hung, "wall": job.t_exit,
         "last_epoch_t": last_t, "header_t": header,
         "epochs_logged": len(epochs), "csv_rows": len(rows),
         "test_acc": float(rows[-1]["test_acc"]) if rows else None,
         "rows": rows}
    o["complete"] = (job.rc == 0 and not job.hung and last_t is not None
                     and len(rows) == a.epochs
                     and int(rows[-1]["epoch"]) == a.epochs)
    if rec:
        t, m = rec[0]
        o.update(rec_t=t, rec_x=float(m.group(4)), rec_who=m.group(1),
                 rec_left=int(m.group(2)), rec_n=len(rec))
    else:
        o.update(rec_t=None, rec_x=None, rec_who=None, rec_left=None,
                 rec_n=0)
    # hoop-run's own line about the victim, and when it came.
    o["run_line_t"] = None
    if job.victim is not None and job.t_cont is None:  # not SIGSTOP
        for t, s in lines:
            m = RUN_LINE.search(s)
            if m and int(m.group(2)) == job.victim[0]:
                o["run_line_t"] = t
                break
    # Where the signal landed: before the header (load, hoop_init, the
    # initial broadcast: before the first step) or in which epoch.
    o["phase"] = "-"
    if job.t_signal is not None:
        if header is None or job.t_signal < header:
            o["phase"] = "startup"
        else:
            done = sum(1 for t, _ in epochs if t <= job.t_signal)
            o["phase"] = (f"epoch {done + 1}" if done < a.epochs
                          else "after the last epoch")
    # samples/s of whole epochs with every rank, and with one fewer.
    full = [float(r["samples_per_s"]) for r in rows
            if int(r["ranks"]) == a.ranks and int(r["ranks_left"]) == 0]
    fewer = [float(r["samples_per_s"]) for r in rows
             if int(r["ranks"]) == a.ranks - 1 and int(r["ranks_left"]) == 0]
    hit = [float(r["seconds"]) for r in rows if int(r["ranks_left"]) > 0]
    o["sps_full"] = statistics.median(full) if full else None
    o["sps_fewer"] = statistics.median(fewer) if fewer else None
    o["epoch_s"] = [float(r["seconds"]) for r in rows
                    if int(r["ranks_left"]) == 0]
    # The epoch of the loss beside this run's own whole epochs: what the
    # detection, recovery and redone step cost, measured within the run
    # (the machine's speed drifts between runs).
    o["hit_epoch_s"] = hit[0] if hit else None
    o["d_hit"] = (hit[0] - statistics.median(o["epoch_s"])
                  if hit and o["epoch_s"] else None)
    return o


def reference(bases, a):
    """The last 3 uninterrupted runs' median wall time, header time and
    time from the last epoch's line to the exit."""
    done = [b for b in bases
            if b["complete"] and b["train_seed"] == a.train_seed][-3:]
    return {"wall": statistics.median(b["wall"] for b in done),
            "header": statistics.median(b["header_t"] for b in done),
            "tail": statistics.median(b["wall"] - b["last_epoch_t"]
                                      for b in done)}


def estimate_wall(job, a, ref):
    """This run's wall time as far as its output tells so far."""
    lines = job.snapshot()
    header = next((t for t, s in lines if HEADER.search(s)), None)
    ends = [t for t, s in lines if EPOCH.search(s)]
    if header is None:
        return ref["wall"]
    if not ends:
        return ref["wall"] * header / ref["header"]
    pace = (ends[-1] - header) / len(ends)
    return ends[-1] + (a.epochs - len(ends)) * pace + ref["tail"]


def run_baseline(a, bins, tmp, tag, train_seed, ranks=None):
    metrics = tmp / f"{tag}.csv"
    metrics.unlink(missing_ok=True)
    job = Job(a, bins, metrics, train_seed, ranks=ranks)
    job.wait(a.run_timeout)
    o = outcome(job, a)
    o.update(kind="baseline", tag=tag, train_seed=train_seed, job=job,
             ranks=ranks or a.ranks)
    if ranks and ranks != a.ranks:
        rows = o["rows"]
        o["sps_full"] = (statistics.median(float(r["samples_per_s"])
                                           for r in rows) if rows else None)
    return o


def run_trial(a, bins, tmp, tag, sig, frac, ref, rng):
    metrics = tmp / f"{tag}.csv"
    metrics.unlink(missing_ok=True)
    env = ({"HOOP_TIMEOUT_MS": str(a.stop_timeout_ms)}
           if sig == signal.SIGSTOP else {})
    job = Job(a, bins, metrics, a.train_seed, env)
    deadline = a.run_timeout
    if a.timing == "baseline":
        job.note(f"{sig.name} due at {frac:.3f} x {ref['wall']:.2f} s")
        while job.now() < frac * ref["wall"] and job.proc.poll() is None:
            time.sleep(0.01)
    else:
        job.note(f"{sig.name} due at {frac:.3f} x this run's wall time "
                 f"(at first estimated {ref['wall']:.2f} s)")
        while (job.proc.poll() is None
               and job.now() < frac * estimate_wall(job, a, ref)):
            time.sleep(0.01)
    sent = job.proc.poll() is None and job.signal_one(sig, rng)
    cont = {}
    if sent and sig == signal.SIGSTOP:
        # hoop-run waits for every rank, the stopped one too: once the
        # survivors are gone (or the job is over time), continue it.
        pid = job.victim[0]
        while job.now() < deadline and job.proc.poll() is None:
            if set(children(job.proc.pid)) <= {pid}:
                break
            time.sleep(0.1)
        cont["survivors_done_t"] = job.now()
        cont["state"] = proc_state(pid)
        job.note(f"survivors done; stopped rank is in state {cont['state']};"
                 " SIGCONT")
        job.t_cont = job.now()
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        try:
            job.proc.wait(timeout=a.cont_grace)
            cont["exited_after_cont"] = True
        except subprocess.TimeoutExpired:
            cont["exited_after_cont"] = False
            job.note(f"stopped rank still there {a.cont_grace:.0f} s after "
                     "SIGCONT: SIGKILL")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    job.wait(deadline)
    o = outcome(job, a)
    at = job.t_signal if sent else None
    o.update(kind=sig.name, tag=tag, at=at, frac=frac, job=job, sent=sent,
             **cont)
    o["victim_rank"] = job.victim[1] if job.victim else None
    o["shm_left"] = shm_of(job.rank_pids)
    if sig == signal.SIGSTOP and job.victim is not None and job.t_cont:
        prefix = f"[{job.victim[1]}] "
        said = [s for t, s in job.snapshot()
                if t >= job.t_cont and s.startswith(prefix)]
        o["victim_said"] = said
        o["victim_exit"] = next(
            (s for t, s in job.snapshot() if t >= job.t_cont and
             (m := RUN_LINE.search(s)) and int(m.group(2)) == job.victim[0]),
            None)
    return o


def fmt(x, spec=".2f", none="-"):
    return none if x is None else format(x, spec)


def pct(x):
    return "-" if x is None else f"{100 * x:+.2f}"


def spread(xs, spec=".2f"):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    return (f"median {format(statistics.median(xs), spec)} "
            f"(min {format(min(xs), spec)}, max {format(max(xs), spec)}, "
            f"n {len(xs)})")


def main():
    a = parse_args(sys.argv[1:])
    if a.ranks < 2:
        sys.exit("elastic_kill: --ranks must be at least 2")
    bins = binaries(a.bin_dir)
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"elastic-kill-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    rng = random.Random(a.seed)
    head_at_start = subprocess.run(
        ["git", "-C", str(Path(__file__).resolve().parent), "rev-parse",
         "HEAD"], capture_output=True, text=True).stdout.strip()
    started = time.monotonic()
    bases, trials, log = [], [], []

    def progress(o):
        job = o["job"]
        log.append((o["tag"], " ".join(shlex.quote(x) for x in job.argv),
                    job.env_extra, job.log()))
        if o["kind"] == "baseline":
            print(f"# {o['tag']}: rc {o['rc']}, {o['wall']:.2f} s, test "
                  f"{fmt(o['test_acc'], '.4f')}", flush=True)
        else:
            print(f"# {o['tag']}: {o['kind']} rank {o['victim_rank']} at "
                  f"{fmt(o['at'])} s (f {o['frac']:.2f}, {o['phase']}), "
                  f"rc {o['rc']}, "
                  f"complete {o['complete']}, recovered "
                  f"{fmt(None if o['rec_t'] is None or not o['sent'] else o['rec_t'] - o['job'].t_signal)} s after, "
                  f"wall {o['wall']:.2f} s, test {fmt(o['test_acc'], '.4f')}",
                  flush=True)

    for i in range(a.baselines):
        o = run_baseline(a, bins, tmp, f"base{i + 1}", a.train_seed)
        bases.append(o)
        progress(o)
    ok = [b for b in bases if b["complete"]]
    if not ok:
        sys.exit("elastic_kill: no baseline run finished; see above")
    lo, hi = a.window

    sequence = list(bases)  # every run, in the order run

    # Kill and stop trials interleaved evenly, a baseline after every
    # --baseline-every trials.
    plan = [signal.SIGKILL] * a.trials
    for j in range(a.stop_trials):
        plan.insert(round((j + 1) * (len(plan) + 1) / (a.stop_trials + 1)),
                    signal.SIGSTOP)
    count = {signal.SIGKILL: 0, signal.SIGSTOP: 0}
    extra = 0
    for n, sig in enumerate(plan, 1):
        count[sig] += 1
        frac = rng.uniform(lo, hi)
        tag = f"{'kill' if sig == signal.SIGKILL else 'stop'}{count[sig]}"
        o = run_trial(a, bins, tmp, tag, sig, frac, reference(bases, a), rng)
        trials.append(o)
        sequence.append(o)
        progress(o)
        if a.baseline_every and n % a.baseline_every == 0 and n < len(plan):
            extra += 1
            b = run_baseline(a, bins, tmp, f"base{a.baselines + extra}",
                             a.train_seed)
            bases.append(b)
            sequence.append(b)
            progress(b)
    seed_runs = []
    for s in [int(x) for x in a.acc_seeds.split(",") if x.strip()]:
        o = run_baseline(a, bins, tmp, f"seed{s}", s)
        seed_runs.append(o)
        progress(o)
    fewer = None
    if not a.no_fewer:
        fewer = run_baseline(a, bins, tmp, f"fewer{a.ranks - 1}",
                             a.train_seed, a.ranks - 1)
        progress(fewer)
    total = time.monotonic() - started

    ok = [b for b in bases if b["complete"]]
    base_wall = statistics.median(b["wall"] for b in ok)
    base_last = statistics.median(b["last_epoch_t"] for b in ok)
    base_acc = statistics.median(b["test_acc"] for b in ok)
    base_sps = statistics.median(b["sps_full"] for b in ok)
    def neighbours(o):
        i = sequence.index(o)
        near = []
        for step in (-1, 1):
            j = i + step
            while 0 <= j < len(sequence):
                r = sequence[j]
                if r["kind"] == "baseline" and r["complete"]:
                    near.append(r)
                    break
                j += step
        return near

    for o in trials:
        near = neighbours(o)
        o["pair_wall"] = (statistics.mean(r["wall"] for r in near)
                          if near else None)
        o["pair_last"] = (statistics.mean(r["last_epoch_t"] for r in near)
                          if near else None)
        o["kill_to_rec"] = (o["rec_t"] - o["job"].t_signal
                            if o["sent"] and o["rec_t"] is not None
                            and o["rec_t"] >= o["job"].t_signal else None)
        o["run_seen"] = (o["run_line_t"] - o["job"].t_signal
                         if o["run_line_t"] is not None else None)
        o["d_acc"] = (o["test_acc"] - base_acc
                      if o["complete"] and o["test_acc"] is not None else None)
        # SIGKILL: hoop-run's exit; SIGSTOP: the last epoch's line, since
        # hoop-run's exit waits on the bench's SIGCONT.
        if o["kind"] == "SIGSTOP":
            ok_t = o["last_epoch_t"] is not None
            o["d_wall"] = o["last_epoch_t"] - base_last if ok_t else None
            o["d_pair"] = (o["last_epoch_t"] - o["pair_last"]
                           if ok_t and o["pair_last"] else None)
        else:
            o["d_wall"] = o["wall"] - base_wall if o["complete"] else None
            o["d_pair"] = (o["wall"] - o["pair_wall"]
                           if o["complete"] and o["pair_wall"] else None)
        o["rate_ratio"] = (o["sps_fewer"] / o["sps_full"]
                           if o["sps_full"] and o["sps_fewer"] else None)

    # ---- the report ----
    out = []
    cmd = "bench/elastic_kill.py " + " ".join(shlex.quote(x)
                                              for x in sys.argv[1:])
    run, train, lib = bins
    head = ["# hoop-train --elastic: a rank killed or stopped mid-run", ""]
    head += machine_info_basic()
    head += [
        f"- Binaries: {run} (sha256 {sha256(run)}), {train} "
        f"(sha256 {sha256(train)}), libhoop.so from {lib}"
        f" (sha256 {sha256(lib / 'libhoop.so')})"
        if (lib / "libhoop.so").exists() else
        f"- Binaries: {run} (sha256 {sha256(run)}), {train} "
        f"(sha256 {sha256(train)})",
        f"- hoop tree HEAD at the start: {head_at_start or 'unknown'} "
        "(the binaries are what --bin-dir holds: see their sha256)",
        f"- Command: {cmd}",
        f"- Job: hoop-run --elastic -n {a.ranks} hoop-train --elastic "
        f"--quiet --epochs {a.epochs} --seed {a.train_seed} (MLP "
        f"784-200-200-10, adam lr 0.001, batch 64 per rank, {a.data})",
        f"- {a.trials} SIGKILL and {a.stop_trials} SIGSTOP trials "
        f"(HOOP_TIMEOUT_MS={a.stop_timeout_ms} in those), signal at "
        f"f x the run's wall time from the launch, f uniform in "
        f"({lo:.2f}, {hi:.2f}), "
        + ("the wall time being the last 3 baselines' median"
           if a.timing == "baseline" else
           "the wall time estimated as the run goes (--timing run)")
        + "; one random rank; "
        f"kill-schedule seed {a.seed}; {len(bases)} baselines, interleaved "
        f"(one after every {a.baseline_every} trials); "
        f"extra seeds {a.acc_seeds or 'none'}",
        f"- The bench took {total:.0f} s", ""]

    out += ["## Baselines (uninterrupted)", "",
            "| run | ranks | seed | rc | wall s | last epoch line s | "
            "test acc | samples/s (median epoch) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for b in bases + seed_runs + ([fewer] if fewer else []):
        out.append(f"| {b['tag']} | {b['ranks']} | {b['train_seed']} | "
                   f"{b['rc']} | "
                   f"{b['wall']:.2f} | {fmt(b['last_epoch_t'])} | "
                   f"{fmt(b['test_acc'], '.4f')} | "
                   f"{fmt(b['sps_full'], '.0f')} |")
    out += ["",
            f"- wall s: {spread([b['wall'] for b in ok])}",
            f"- test acc (seed {a.train_seed}): "
            f"{spread([b['test_acc'] for b in ok], '.4f')}",
            f"- samples/s, {a.ranks} ranks: "
            f"{spread([b['sps_full'] for b in ok], '.0f')}"]
    if seed_runs:
        accs = [b["test_acc"] for b in seed_runs if b["test_acc"] is not None]
        allacc = [base_acc] + accs
        out.append(f"- test acc over seeds {a.train_seed},{a.acc_seeds}: "
                   + " ".join(f"{x:.4f}" for x in allacc) +
                   f" ({spread(allacc, '.4f')}; range "
                   f"{100 * (max(allacc) - min(allacc)):.2f} points)")
    if fewer:
        out.append(f"- {a.ranks - 1} ranks from the start, seed "
                   f"{a.train_seed}: test acc {fmt(fewer['test_acc'], '.4f')}"
                   f", {fmt(fewer['sps_full'], '.0f')} samples/s")
    out.append("")

    out += ["## Trials", "",
            "Times in s from the launch, or from the signal (kill -> ...). "
            "hoop-run seen: its line about the killed rank (a stopped one "
            "it does not see). acc and wall: minus "
            "the baselines' medians (points, s); paired: wall minus the "
            "mean of the baselines run just before and after; for SIGSTOP "
            "the walls are to the last epoch's line. hit epoch: the seconds of the epoch "
            "of the loss minus the median of the run's whole epochs. "
            "samples/s before and after: median over the run's whole "
            "epochs with all ranks and with one fewer.", "",
            "| trial | signal | rank | f | at | phase | rc | all epochs | "
            "hoop-run seen | kill -> recovered line | reported X | "
            "acc (points) | wall | paired | hit epoch | samples/s before | "
            "samples/s after | notes |",
            "|---|---|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|"
            "---:|---:|---:|---:|---|"]
    for o in trials:
        notes = []
        if o["hung"]:
            notes.append("HUNG")
        if not o["sent"]:
            notes.append("not signalled: the run ended first")
        if o["rec_n"] > 1:
            notes.append(f"{o['rec_n']} recoveries")
        if o["rec_who"] is not None and o["victim_rank"] is not None and \
                o["rec_who"] != str(o["victim_rank"]):
            notes.append(f"log says rank(s) {o['rec_who']} left")
        if o["shm_left"]:
            notes.append(f"/dev/shm left: {' '.join(o['shm_left'])}")
        if o["kind"] == "SIGSTOP":
            notes.append(f"survivors done at {fmt(o.get('survivors_done_t'))}"
                         f", state {o.get('state')}, exited after SIGCONT: "
                         f"{o.get('exited_after_cont')}")
        if o["csv_rows"] != a.epochs:
            notes.append(f"{o['csv_rows']} CSV rows")
        out.append(
            f"| {o['tag']} | {o['kind']} | {fmt(o['victim_rank'], 'd')} | "
            f"{o['frac']:.2f} | {fmt(o['at'])} | {o['phase']} | {o['rc']} | "
            f"{'yes' if o['complete'] else 'NO'} | {fmt(o['run_seen'])} | "
            f"{fmt(o['kill_to_rec'])} | {fmt(o['rec_x'])} | "
            f"{pct(o['d_acc'])} | {fmt(o['d_wall'], '+.2f')} | "
            f"{fmt(o['d_pair'], '+.2f')} | "
            f"{fmt(o['d_hit'], '+.2f')} | {fmt(o['sps_full'], '.0f')} | "
            f"{fmt(o['sps_fewer'], '.0f')} | {'; '.join(notes)} |")
    out.append("")

    out += ["## Summary", ""]
    for kind in ("SIGKILL", "SIGSTOP"):
        ts = [o for o in trials if o["kind"] == kind]
        if not ts:
            continue
        unsent = [o for o in ts if not o["sent"]]
        ts = [o for o in ts if o["sent"]]
        went = [o for o in ts if o["complete"] and o["rec_n"] >= 1]
        in_training = [o for o in ts if o["phase"].startswith("epoch")]
        went_tr = [o for o in in_training if o in went]
        k2r = [o["kill_to_rec"] for o in went]
        dacc = [o["d_acc"] for o in went]
        worst = max(dacc, key=abs) if dacc else None
        out.append(f"### {kind}" + (f" (HOOP_TIMEOUT_MS={a.stop_timeout_ms})"
                                    if kind == "SIGSTOP" else ""))
        out.append("")
        out.append(f"- went on to the end: {len(went)} of {len(ts)} "
                   f"({len(went_tr)} of {len(in_training)} signalled during "
                   "training; "
                   f"{sum(1 for o in ts if o['phase'] == 'startup')} before "
                   "the first step)")
        if unsent:
            out.append(f"- not signalled, the run having ended first: "
                       f"{len(unsent)} ("
                       + ", ".join(o["tag"] for o in unsent) + ")")
        bad = [o for o in ts if o not in went]
        for o in bad:
            out.append(f"  - {o['tag']}: rank {o['victim_rank']} at "
                       f"{fmt(o['at'])} s ({o['phase']}): rc {o['rc']}, "
                       f"{o['csv_rows']} CSV rows, recovery lines "
                       f"{o['rec_n']}{', HUNG' if o['hung'] else ''}")
        out.append(f"- signal -> recovered line, s: {spread(k2r)}")
        out.append(f"- reported recovery X, s: "
                   f"{spread([o['rec_x'] for o in went])}")
        if kind == "SIGKILL":
            out.append(f"- signal -> hoop-run's line about the victim, s: "
                       f"{spread([o['run_seen'] for o in ts])}")
        out.append(f"- final test acc minus the baselines' median "
                   f"({base_acc:.4f}), points: "
                   f"{spread([100 * x for x in dacc])}; worst "
                   f"{pct(worst)}; within 0.5: "
                   f"{sum(1 for x in dacc if abs(x) <= 0.005)} of {len(dacc)}")
        if seed_runs:
            allacc = [base_acc] + [b["test_acc"] for b in seed_runs
                                   if b["test_acc"] is not None]
            finals = [o["test_acc"] for o in went]
            inside = sum(1 for x in finals if min(allacc) <= x <= max(allacc))
            out.append(f"- final test acc: "
                       f"{spread(finals, '.4f')}; uninterrupted over "
                       f"{len(allacc)} seeds {spread(allacc, '.4f')}; "
                       f"within the seeds' range: {inside} of {len(finals)}")
        out.append(f"- time lost per failure (wall minus the baselines' "
                   f"median), s: {spread([o['d_wall'] for o in went])}")
        out.append(f"- time lost per failure, paired (wall minus the mean "
                   f"of the neighbouring baselines), s: "
                   f"{spread([o['d_pair'] for o in went])}")
        out.append(f"- of which in the epoch of the loss (its seconds minus "
                   f"the median of the run's whole epochs), s: "
                   f"{spread([o['d_hit'] for o in went])}")
        out.append(f"- samples/s of whole epochs: {a.ranks} ranks "
                   f"{spread([o['sps_full'] for o in went], '.0f')}; "
                   f"{a.ranks - 1} ranks "
                   f"{spread([o['sps_fewer'] for o in went], '.0f')} "
                   f"(baselines {base_sps:.0f}); within each run, "
                   f"{a.ranks - 1} / {a.ranks}: "
                   f"{spread([o['rate_ratio'] for o in went])}")
        if kind == "SIGSTOP":
            out.append("- the stopped rank, continued after the survivors "
                       "were done:")
            for o in ts:
                said = o.get("victim_said") or []
                last = said[-1] if said else "(nothing)"
                out.append(f"  - {o['tag']}: state {o.get('state')}, exited "
                           f"after SIGCONT: {o.get('exited_after_cont')}; "
                           f"hoop-run: {o.get('victim_exit')}; its last "
                           f"line: {last}")
        out.append("")

    text_summary = "\n".join(head + out)
    print(text_summary)
    if a.out:
        raw = ["## Raw output", "",
               "Each run: the command, then its combined output, each line "
               "with seconds since the launch; '# bench:' lines are the "
               "bench's own doings.", ""]
        for tag, argv, env, text in log:
            envs = " ".join(f"{k}={v}" for k, v in env.items())
            raw += [f"### {tag}", "", f"`{(envs + ' ') if envs else ''}{argv}`",
                    "", "```", text or "(no output)", "```", ""]
        a.out.write_text(text_summary + "\n" + "\n".join(raw))
    for f in tmp.glob("*.csv"):
        f.unlink()
    tmp.rmdir()


if __name__ == "__main__":
    main()
