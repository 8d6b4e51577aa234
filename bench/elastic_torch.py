#!/usr/bin/env python3
"""PyTorch DDP with hoop_torch.elastic when a rank is killed mid-run.

Runs docs/examples/ddp_mnist.py --elastic (MLP, SGD, Fashion-MNIST) under
`hoop-run --elastic -n R`: first --baselines uninterrupted runs, then
--trials runs in each of which one random rank (a child of hoop-run,
`pgrep -P`) gets SIGKILL at a moment drawn uniformly from --window, as a
fraction of the baselines' median wall time measured from the first
epoch line (so that the kill lands in training, not while torch starts).
A baseline runs again after every --baseline-every trials, interleaved.
The job's output is read as it streams, each line timestamped. Per trial:
whether it exited 0 with every epoch done, the time from the kill to rank
0's "rank(s) ... left; ... go on (recovered in X s)" line, X itself, the
final test accuracy minus the baselines' median, and the wall time minus
theirs.

    PYTHONPATH=build/python bench/elastic_torch.py --bin-dir build \\
        --trials 20 --out bench/results/DATE-elastic-torch.md
"""
import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "docs" / "examples" / "ddp_mnist.py"
RECOVERED = re.compile(r"rank\(s\) ([\d,]+) left; (\d+) ranks go on "
                       r"\(recovered in ([\d.]+) s\)")
EPOCH = re.compile(r"epoch (\d+): loss [\d.]+, test accuracy ([\d.]+)")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin-dir", type=Path, default=Path("build"))
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--baselines", type=int, default=3)
    p.add_argument("--baseline-every", type=int, default=5)
    p.add_argument("--window", default="0.05,0.80",
                   help="LO,HI: the kill's moment, as a fraction of a "
                        "baseline's time from its first epoch line")
    p.add_argument("--seed", type=int, default=1, help="of the kills")
    p.add_argument("--run-timeout", type=float, default=180.0)
    p.add_argument("--out", type=Path)
    return p.parse_args()


def run_job(a, kill_at=None, rng=None):
    """One job; kill_at (seconds after the first epoch line) kills a random
    rank. Returns a dict of what happened, and the timestamped log."""
    cmd = [str(a.bin_dir / "tools" / "hoop-run"), "--elastic", "-n",
           str(a.ranks), sys.executable, str(EXAMPLE), "--elastic",
           "--epochs", str(a.epochs)]
    start = time.monotonic()
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
    fd = job.stdout.fileno()
    os.set_blocking(fd, False)
    log, buf = [], ""
    first_epoch = killed_at = recovered_at = None
    out = {"killed_rank": None, "recover_s": None}
    while True:
        now = time.monotonic()
        try:
            chunk = os.read(fd, 65536).decode(errors="replace")
        except BlockingIOError:
            chunk = None
        buf += chunk or ""
        while "\n" in buf:
            line, buf = buf.split("\n", 1)
            log.append((now - start, line))
            if first_epoch is None and EPOCH.search(line):
                first_epoch = now
            m = RECOVERED.search(line)
            if m and recovered_at is None:
                recovered_at = now
                out["recover_s"] = float(m.group(3))
        if (kill_at is not None and killed_at is None and
                first_epoch is not None and now - first_epoch >= kill_at):
            ranks = subprocess.run(["pgrep", "-P", str(job.pid)],
                                   capture_output=True, text=True).stdout
            pids = sorted(ranks.split(), key=int)
            if pids:
                victim = rng.randrange(len(pids))
                os.kill(int(pids[victim]), signal.SIGKILL)
                killed_at, out["killed_rank"] = now, victim
        if job.poll() is not None and chunk == "":
            break
        if now - start > a.run_timeout:
            job.kill()
        time.sleep(0.01)
    out["code"] = job.returncode
    out["wall_s"] = time.monotonic() - start
    epochs = [EPOCH.search(l) for _, l in log]
    epochs = [m for m in epochs if m]
    out["epochs"] = len(epochs)
    out["accuracy"] = float(epochs[-1].group(2)) if epochs else None
    out["kill_to_recovered_s"] = (recovered_at - killed_at
                                  if killed_at and recovered_at else None)
    out["from_first_epoch_s"] = (time.monotonic() - first_epoch
                                 if first_epoch else None)
    return out, log


def fmt(seconds):
    return "none" if seconds is None else f"{seconds:.3f} s"


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    return (f"median {statistics.median(values):.3f}, "
            f"{min(values):.3f} to {max(values):.3f} (n {len(values)})")


def main():
    a = parse_args()
    lo, hi = (float(x) for x in a.window.split(","))
    rng = random.Random(a.seed)
    lines = [f"# {' '.join(sys.argv)}",
             f"# {a.ranks} ranks, {a.epochs} epochs, ddp_mnist.py --elastic"]
    base, trials = [], []

    def baseline():
        r, _ = run_job(a)
        base.append(r)
        lines.append(f"baseline: exit {r['code']}, {r['epochs']} epochs, "
                     f"accuracy {r['accuracy']}, wall {r['wall_s']:.2f} s")
        print(lines[-1], flush=True)

    for _ in range(a.baselines):
        baseline()
    for t in range(a.trials):
        span = statistics.median(b["from_first_epoch_s"] for b in base
                                 if b["from_first_epoch_s"])
        kill_at = rng.uniform(lo, hi) * span
        r, log = run_job(a, kill_at, rng)
        trials.append(r)
        acc = statistics.median(b["accuracy"] for b in base)
        wall = statistics.median(b["wall_s"] for b in base)
        went_on = r["code"] == 0 and r["epochs"] == a.epochs
        lines.append(
            f"trial {t + 1}: kill rank {r['killed_rank']} at "
            f"{kill_at:.2f} s after epoch 1; exit {r['code']}, "
            f"{r['epochs']} epochs ({'went on' if went_on else 'STOPPED'}); "
            f"kill to recovered {fmt(r['kill_to_recovered_s'])}; reported "
            f"{fmt(r['recover_s'])}; accuracy {r['accuracy']} "
            f"({(r['accuracy'] or 0) - acc:+.4f}); wall {r['wall_s']:.2f} s "
            f"({r['wall_s'] - wall:+.2f})")
        print(lines[-1], flush=True)
        if not went_on:
            lines.extend(f"    {s:7.3f} {l}" for s, l in log[-30:])
        if (t + 1) % a.baseline_every == 0:
            baseline()
    acc = statistics.median(b["accuracy"] for b in base)
    wall = statistics.median(b["wall_s"] for b in base)
    went = sum(r["code"] == 0 and r["epochs"] == a.epochs for r in trials)
    lines += [
        "",
        f"went on: {went} of {len(trials)}",
        f"kill to recovered line, s: "
        f"{spread([r['kill_to_recovered_s'] for r in trials])}",
        f"reported recovery, s: {spread([r['recover_s'] for r in trials])}",
        f"accuracy minus baselines' median ({acc:.4f}), points: "
        f"{spread([100 * (r['accuracy'] - acc) for r in trials if r['accuracy']])}",
        f"baselines' accuracy: {spread([b['accuracy'] for b in base])}",
        f"wall minus baselines' median ({wall:.2f} s), s: "
        f"{spread([r['wall_s'] - wall for r in trials])}",
        f"baselines' wall, s: {spread([b['wall_s'] for b in base])}",
    ]
    print("\n".join(lines[-8:]), flush=True)
    if a.out:
        a.out.write_text("```\n" + "\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
