#!/usr/bin/env python3
"""PyTorch DDP when a rank is killed mid-run: hoop_torch.elastic against
torchrun's restarts, on the same script, and replacements that join.

Runs docs/examples/ddp_mnist.py (MLP, SGD, Fashion-MNIST, --ranks
processes) three ways, each with uninterrupted baselines and kill trials:

- hoop: `hoop-run --elastic -n R ddp_mnist.py --elastic`; the survivors
  shrink and go on (hoop_torch.elastic.shrink);
- respawn: the same with `hoop-run --respawn 1`: a replacement starts,
  joins at the members' next look (every 16 steps) and takes up rank 0's
  state (elastic.join, elastic.grow);
- torchrun: `torchrun --standalone --max_restarts 1 ddp_mnist.py
  --backend hoop --checkpoint FILE`: torchrun stops every worker when one
  fails and starts them all again, and they go on from the checkpoint
  rank 0 saved after the last whole epoch. --monitor_interval is 0.1 s
  (PyTorch 1.13's default, 5 s, would add up to 5 s to every run);
- train and train-respawn: hoop's own trainer, `hoop-run --elastic
  [--respawn 1] -n R hoop-train --elastic` (the MLP in C, --train-epochs),
  the same two ways as hoop and respawn (--ways train,train-respawn).

In each trial one random rank (a child of the launcher running the
example, `pgrep -P`) gets SIGKILL at a moment drawn uniformly from
--window, as a fraction of that way's baselines' median time from the
first epoch line (so that the kill lands in training, not while torch
starts); trial i of every way uses the same fraction. The ways run
interleaved, trial by trial, and a baseline of each runs again after
every --baseline-every trials. The job's output is read as it streams,
each line timestamped. Per trial: whether it exited 0 with every epoch
done; the kill to rank 0's "rank(s) ... left; ... go on (recovered in X
s)" line, and X; for respawn, the replacement's start (hoop-run's line),
its "ready to join" (Python, torch and the data loaded) and rank 0's
"joined" line; the final test accuracy and wall time minus the way's
baselines' median: the time lost per failure.

    PYTHONPATH=build/python bench/elastic_torch.py --bin-dir build \\
        --trials 20 --out bench/results/DATE-elastic-torch.txt
"""
import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "docs" / "examples" / "ddp_mnist.py"
# Each line as the example and hoop-train print it.
RECOVERED = re.compile(r"rank\(s\) ([\w ,]+) left; (\d+) (?:of \d+ )?ranks "
                       r"go on \(recovered in ([\d.]+) s\)")
EPOCH = re.compile(r"epoch (\d+)(?:/\d+)?: loss [\d.]+, (?:test accuracy|"
                   r"accuracy train [\d.]+ test) ([\d.]+)")
REPLACEMENT = re.compile(r"hoop-run: started a replacement")
READY = re.compile(r"ready to join")
JOINED = re.compile(r"\d+ rank\(s\) joined; (\d+) ranks go on"
                    r"(?: \(the members waited ([\d.]+) s)?")
WAYS = ("hoop", "respawn", "torchrun", "train", "train-respawn")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin-dir", type=Path, default=Path("build"))
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--epochs", type=int, default=4, help="of the example")
    p.add_argument("--train-epochs", type=int, default=15,
                   help="of hoop-train")
    p.add_argument("--trials", type=int, default=20, help="per way")
    p.add_argument("--ways", default="hoop,respawn,torchrun",
                   help="which of " + ",".join(WAYS))
    p.add_argument("--baselines", type=int, default=3, help="per way")
    p.add_argument("--baseline-every", type=int, default=5)
    p.add_argument("--window", default="0.05,0.80",
                   help="LO,HI: the kill's moment, as a fraction of a "
                        "baseline's time from its first epoch line")
    p.add_argument("--seed", type=int, default=1, help="of the kills")
    p.add_argument("--run-timeout", type=float, default=180.0)
    p.add_argument("--out", type=Path)
    return p.parse_args()


def program(way):
    """What the ranks run: hoop-train or the example."""
    return "hoop-train" if way.startswith("train") else EXAMPLE.name


def command(a, way, checkpoint):
    example = [sys.executable, str(EXAMPLE), "--epochs", str(a.epochs)]
    if way.startswith("train"):
        example = [str(a.bin_dir / "src" / "train" / "hoop-train"),
                   "--quiet", "--epochs", str(a.train_epochs)]
    if way == "torchrun":
        # Debian's PyTorch 1.13 on Python 3.11 rejects torchrun's default
        # --redirects/--tee (0); 1 sends stdout to a file and to us.
        return ["torchrun", "--standalone", "--nproc_per_node", str(a.ranks),
                "--max_restarts", "1", "--monitor_interval", "0.1",
                "--redirects", "1", "--tee", "1", str(EXAMPLE),
                "--epochs", str(a.epochs), "--backend", "hoop",
                "--checkpoint", checkpoint]
    run = [str(a.bin_dir / "tools" / "hoop-run"), "--elastic"]
    if way.endswith("respawn"):
        run += ["--respawn", "1"]
    return run + ["-n", str(a.ranks)] + example + ["--elastic"]


def ranks_of(launcher, way):
    """The launcher's children that run the way's program."""
    pids = subprocess.run(["pgrep", "-P", str(launcher), "-f", program(way)],
                          capture_output=True, text=True).stdout.split()
    return sorted(pids, key=int)


def run_job(a, way, kill_at=None, rng=None):
    """One job; kill_at (seconds after the first epoch line) kills a random
    rank. Returns a dict of what happened, and the timestamped log."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = command(a, way, os.path.join(tmp, "checkpoint.pt"))
        start = time.monotonic()
        job = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
        fd = job.stdout.fileno()
        os.set_blocking(fd, False)
        log, buf = [], ""
        seen = {}
        out = {"killed_rank": None, "recover_s": None,
               "members_waited_s": None}
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
                for name, pattern in (("first_epoch", EPOCH),
                                      ("recovered", RECOVERED),
                                      ("replacement", REPLACEMENT),
                                      ("ready", READY), ("joined", JOINED)):
                    m = pattern.search(line)
                    if m and name not in seen:
                        seen[name] = now
                        if name == "recovered":
                            out["recover_s"] = float(m.group(3))
                        if name == "joined" and m.group(2):
                            out["members_waited_s"] = float(m.group(2))
            if (kill_at is not None and "killed" not in seen and
                    "first_epoch" in seen and
                    now - seen["first_epoch"] >= kill_at):
                pids = ranks_of(job.pid, way)
                if pids:
                    victim = rng.randrange(len(pids))
                    os.kill(int(pids[victim]), signal.SIGKILL)
                    seen["killed"], out["killed_rank"] = now, victim
            if job.poll() is not None and chunk == "":
                break
            if now - start > a.run_timeout:
                job.kill()
            time.sleep(0.01)
    out["code"] = job.returncode
    out["wall_s"] = time.monotonic() - start
    epochs = [m for m in (EPOCH.search(l) for _, l in log) if m]
    # After a restart torchrun's workers print the epochs since the
    # checkpoint again: count each epoch once.
    out["epochs"] = len({m.group(1) for m in epochs})
    out["accuracy"] = float(epochs[-1].group(2)) if epochs else None

    def between(a_, b_):
        return seen[b_] - seen[a_] if a_ in seen and b_ in seen else None

    out["kill_to_recovered_s"] = between("killed", "recovered")
    out["start_to_ready_s"] = between("replacement", "ready")
    out["ready_to_joined_s"] = between("ready", "joined")
    out["start_to_joined_s"] = between("replacement", "joined")
    out["from_first_epoch_s"] = (time.monotonic() - seen["first_epoch"]
                                 if "first_epoch" in seen else None)
    return out, log


def epochs_of(a, way):
    return a.train_epochs if way.startswith("train") else a.epochs


def fmt(seconds):
    return "none" if seconds is None else f"{seconds:.3f} s"


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    return (f"median {statistics.median(values):.3f}, "
            f"{min(values):.3f} to {max(values):.3f} (n {len(values)})")


def median_of(runs, key):
    return statistics.median(r[key] for r in runs if r[key] is not None)


def main():
    a = parse_args()
    ways = a.ways.split(",")
    if not set(ways) <= set(WAYS):
        sys.exit(f"--ways: each of {','.join(WAYS)}")
    lo, hi = (float(x) for x in a.window.split(","))
    rng = random.Random(a.seed)
    lines = [f"# {' '.join(sys.argv)}",
             f"# {a.ranks} ranks, {a.epochs} epochs, ways {','.join(ways)}"]
    for way in ways:
        lines.append(f"# {way}: {' '.join(command(a, way, 'FILE'))}")
    base = {w: [] for w in ways}
    trials = {w: [] for w in ways}

    def baseline(way):
        r, _ = run_job(a, way)
        base[way].append(r)
        lines.append(f"{way} baseline: exit {r['code']}, {r['epochs']} "
                     f"epochs, accuracy {r['accuracy']}, wall "
                     f"{r['wall_s']:.2f} s")
        print(lines[-1], flush=True)

    for _ in range(a.baselines):
        for way in ways:
            baseline(way)
    for t in range(a.trials):
        fraction = rng.uniform(lo, hi)
        for way in ways:
            kill_at = fraction * median_of(base[way], "from_first_epoch_s")
            r, log = run_job(a, way, kill_at, rng)
            trials[way].append(r)
            acc = median_of(base[way], "accuracy")
            wall = median_of(base[way], "wall_s")
            went_on = r["code"] == 0 and r["epochs"] == epochs_of(a, way)
            victim = (f"no kill (the run ended before {kill_at:.2f} s "
                      f"after epoch 1)" if r["killed_rank"] is None else
                      f"kill rank {r['killed_rank']} at {kill_at:.2f} s "
                      f"after epoch 1")
            text = (f"{way} trial {t + 1}: {victim}; exit {r['code']}, "
                    f"{r['epochs']} epochs "
                    f"({'went on' if went_on else 'STOPPED'}); ")
            if way != "torchrun":
                text += (f"kill to recovered {fmt(r['kill_to_recovered_s'])}"
                         f"; reported {fmt(r['recover_s'])}; ")
            if way == "train-respawn":
                text += (f"replacement start to joined "
                         f"{fmt(r['start_to_joined_s'])}, members waited "
                         f"{fmt(r['members_waited_s'])}; ")
            if way == "respawn":
                text += (f"replacement start to ready "
                         f"{fmt(r['start_to_ready_s'])}, ready to joined "
                         f"{fmt(r['ready_to_joined_s'])}; ")
            text += (f"accuracy {r['accuracy']} "
                     f"({(r['accuracy'] or 0) - acc:+.4f}); wall "
                     f"{r['wall_s']:.2f} s ({r['wall_s'] - wall:+.2f})")
            lines.append(text)
            print(text, flush=True)
            if not went_on:
                lines.extend(f"    {s:7.3f} {l}" for s, l in log[-30:])
        if (t + 1) % a.baseline_every == 0:
            for way in ways:
                baseline(way)
    lines.append("")
    for way in ways:
        acc = median_of(base[way], "accuracy")
        wall = median_of(base[way], "wall_s")
        # A run that ended before its kill's moment proves nothing.
        unkilled = sum(r["killed_rank"] is None for r in trials[way])
        runs = [r for r in trials[way] if r["killed_rank"] is not None]
        went = sum(r["code"] == 0 and r["epochs"] == epochs_of(a, way)
                   for r in runs)
        lines += [
            f"{way}: went on: {went} of {len(runs)} killed"
            + (f" ({unkilled} more ended before their kill, left out)"
               if unkilled else ""),
            f"{way}: wall minus baselines' median ({wall:.2f} s), s: "
            f"{spread([r['wall_s'] - wall for r in runs])}",
            f"{way}: baselines' wall, s: "
            f"{spread([b['wall_s'] for b in base[way]])}",
            f"{way}: accuracy minus baselines' median ({acc:.4f}), points: "
            f"{spread([100 * (r['accuracy'] - acc) for r in runs if r['accuracy']])}",
        ]
        if way != "torchrun":
            lines += [
                f"{way}: kill to recovered line, s: "
                f"{spread([r['kill_to_recovered_s'] for r in runs])}",
                f"{way}: reported recovery, s: "
                f"{spread([r['recover_s'] for r in runs])}"]
        if way.endswith("respawn"):
            lines.append(f"{way}: replacement start to joined, s: "
                         f"{spread([r['start_to_joined_s'] for r in runs])}")
        if way == "train-respawn":
            lines.append(f"{way}: members' wait for the joiner, s: "
                         f"{spread([r['members_waited_s'] for r in runs])}")
        if way == "respawn":
            lines += [
                f"{way}: start to ready (Python, torch, data), s: "
                f"{spread([r['start_to_ready_s'] for r in runs])}",
                f"{way}: ready to joined (hoop's join, the next look, DDP, "
                f"the state), s: "
                f"{spread([r['ready_to_joined_s'] for r in runs])}"]
    summary = lines[lines.index("") + 1:]
    print("\n".join(summary), flush=True)
    if a.out:
        a.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
