#!/usr/bin/env python3
"""hoop-train beside PyTorch DDP (gloo, CPU), same model, data and optimiser.

For each rank count, runs hoop-train (under hoop-run) and the PyTorch peer
(bench/peers/ddp_train.py, one thread per rank) with the same model (the
MLP 784-200-200-10 with SGD lr 0.1, momentum 0.9; or, --model cnn, the CNN
of PyTorch's MNIST example with SGD lr 0.01, momentum 0.9, where lr 0.1
diverges), batch 64 per rank, interleaved over repeats, and
prints samples/s, seconds per epoch and test accuracy for both.  Then:
hoop-train's all-reduce time per step on the most ranks beside
hoop-bench's time for the same gradient buckets, in --comm-pairs
interleaved pairs of runs, and hoop-train with its own defaults for
--own-epochs epochs (accuracy target).

  /usr/bin/python3 bench/train_vs_ddp.py --build build [--model cnn] --out FILE
"""
import argparse
import csv
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_allreduce import (  # noqa: E402  (shares the launch helpers)
    Run, execute, machine_info_basic, parse_rows, parse_ranks)

HERE = Path(__file__).resolve().parent
PEER = HERE / "peers" / "ddp_train.py"
SAME = {"mlp": ["--batch", "64", "--lr", "0.1", "--momentum", "0.9",
                "--hidden", "200,200"],
        "cnn": ["--batch", "64", "--lr", "0.01", "--momentum", "0.9",
                "--model", "cnn"]}
SHAPE = {"mlp": "MLP 784-200-200-10, SGD lr 0.1 momentum 0.9",
         "cnn": "CNN conv10-conv20-320-50-10 (PyTorch's MNIST example), "
                "SGD lr 0.01 momentum 0.9"}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", type=Path, default=Path("build"))
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--model", choices=sorted(SAME), default="mlp")
    p.add_argument("--ranks", type=lambda t: parse_ranks(t, least=1),
                   default=[1, 2])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--own-epochs", type=int, default=10)
    p.add_argument("--own-ranks", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--acc-seeds", default="1,2,3,4,5",
                   help="seeds for the accuracy comparison on one rank")
    p.add_argument("--comm-pairs", type=int, default=5,
                   help="training and bench runs, interleaved, for the "
                   "communication comparison (0: none)")
    p.add_argument("--timeout", type=int, default=1800)
    p.add_argument("--out", type=Path, required=True)
    return p.parse_args(argv)


def train_cmd(a, ranks, extra, metrics):
    return [str(a.build / "tools" / "hoop-run"), "--no-prefix", "-n",
            str(ranks), str(a.build / "src" / "train" / "hoop-train"),
            "--quiet", "--data", a.data, "--metrics", metrics] + extra


def run_hoop(a, ranks, extra, log):
    with tempfile.NamedTemporaryFile(suffix=".csv") as m:
        argv = train_cmd(a, ranks, extra, m.name)
        rc, out, err, _ = execute(argv, a.timeout)
        log.append((" ".join(argv), out + err))
        if rc != 0:
            sys.exit(f"train_vs_ddp: hoop-train failed ({rc}):\n{out}{err}")
        rows = list(csv.DictReader(io.StringIO(Path(m.name).read_text())))
    return rows, out


def run_torch(a, ranks, port, log, seed=1):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               WORLD_SIZE=str(ranks), OMP_NUM_THREADS="1")
    argv = ["/usr/bin/python3", str(PEER), "--data", a.data,
            "--epochs", str(a.epochs), "--seed", str(seed)] + SAME[a.model]
    procs = [subprocess.Popen(argv, env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for r in range(ranks)]
    outs = [p.communicate(timeout=a.timeout) for p in procs]
    log.append((f"RANK=0..{ranks - 1} WORLD_SIZE={ranks} " + " ".join(argv),
                outs[0][0] + outs[0][1]))
    if any(p.returncode != 0 for p in procs):
        sys.exit("train_vs_ddp: the PyTorch peer failed:\n" +
                 "\n".join(o + e for o, e in outs))
    return [json.loads(line) for line in outs[0][0].splitlines()
            if line.startswith("{")]


def summarise(rows, key_rate, key_secs, key_acc):
    # The first epoch pays for page faults and warm-up; the median over the
    # others is the steady rate.
    steady = rows[1:] if len(rows) > 1 else rows
    return (statistics.median(float(r[key_rate]) for r in steady),
            statistics.median(float(r[key_secs]) for r in steady),
            float(rows[-1][key_acc]))


# hoop-bench -S: one rank arrives this late (us), inside the waiting
# ranks' spin-and-yield window (HOOP_SPIN_US + HOOP_YIELD_US, 2005 us by
# default), as most steps' last ranks do (median skew 330 us, in
# bench/results/2026-11-23-train-comm-cold-caches.md); the arrival within
# it made no difference there.
STAGGER_US = 100


def last_level_cache_bytes():
    """The largest CPU cache sysfs lists (per instance), or 32 MiB."""
    largest = 0
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        largest = max(largest, int(text.rstrip("KMG")) * scale)
    return largest or 32 << 20


def bench_buckets(a, ranks, algo, buckets, log, stagger=0, evict=0,
                  input_cold=False):
    """hoop-bench's median time (us) per bucket size, same ranks/algo/op.

    hoop-train averages its gradients in place, so the bench averages and
    its in-place column is read: the division is part of what a step's
    all-reduce costs.  With stagger, hoop-bench -S stagger: one rank comes
    that late to each call, and its time from arriving is what counts.
    With evict, hoop-bench -E evict: each rank writes that much other
    memory before each call, as a training step's forward and backward do,
    then rewrites the input (gradients just computed) unless input_cold
    (-I cold: gradients computed early in backward).
    """
    total = 0.0
    for size in buckets:
        argv = [str(a.build / "tools" / "hoop-run"), "--no-prefix", "-n",
                str(ranks), str(a.build / "bench" / "hoop-bench"), "-a", algo,
                "-o", "avg", "-b", str(size), "-e", str(size), "-n", "200",
                "-w", "20", "-c", "1"]
        if stagger:
            argv += ["-S", str(stagger)]
        if evict:
            argv += ["-E", str(evict)]
        if input_cold:
            argv += ["-I", "cold"]
        rc, out, err, _ = execute(argv, a.timeout)
        log.append((" ".join(argv), out + err))
        run = Run("hoop", ranks, 0, argv, rc=rc, stdout=out, stderr=err)
        parse_rows(run, in_place=True)
        if rc != 0 or run.problems or size not in run.times:
            sys.exit(f"train_vs_ddp: hoop-bench failed: {run.problems}\n"
                     f"{out}{err}")
        total += run.times[size]
    return total


def compare_comm(a, ranks, log):
    """hoop-train's all-reduce per step beside hoop-bench on its buckets.

    This machine's speed moves 2-4x from minute to minute, and within one
    training run, so one run of each says little.  Each pair is a 2-epoch
    training run (epoch 2's medians) followed at once by hoop-bench on the
    same buckets; the ratio is taken within the pair, then its median over
    the pairs.  The trainer's figure is each step's last rank in, timed
    from its arrival, as hoop-bench times a call.
    """
    # Twice the last-level cache, so that none of hoop's buffers or the
    # gradients' old lines survive, as after a step's compute.
    evict = 2 * last_level_cache_bytes()
    late = STAGGER_US
    pairs = []
    for _ in range(a.comm_pairs):
        rows, out = run_hoop(a, ranks, ["--epochs", "2", "--optim", "sgd",
                                        "--seed", "1"] + SAME[a.model], log)
        buckets = [int(b) for line in out.splitlines()
                   if "gradient buckets" in line
                   for b in line.split(":")[-1].split()]
        algo = rows[-1]["algo"]
        pairs.append({
            "step": float(rows[-1]["step_comm_median_us"]),
            "moving": float(rows[-1]["step_moving_median_us"]),
            "train": float(rows[-1]["step_last_in_median_us"]),
            "bench": bench_buckets(a, ranks, algo, buckets, log),
            "late": bench_buckets(a, ranks, algo, buckets, log, late),
            "cold": bench_buckets(a, ranks, algo, buckets, log, late, evict),
            "colder": bench_buckets(a, ranks, algo, buckets, log, late,
                                    evict, input_cold=True)})
    benches = ("bench", "late", "cold", "colder")
    lines = [
        f"- {ranks} ranks, algorithm {algo}, buckets {buckets} bytes; "
        f"{a.comm_pairs} pairs",
        "- train: epoch 2's median over steps of the last rank in's time "
        "in the step's all-reduce calls, less hoop's wait counter (each "
        "step's least over the ranks); rank 0's own median step, with and "
        "without the wait, beside it",
        "- bench: hoop-bench, same buckets and ranks, in place, averaging, "
        "sum of the buckets' medians; -S: one rank arrives "
        f"{late} us late and the late rank's time counts; -E: every rank "
        f"writes {evict >> 20} MiB of other memory before each call, as a "
        "step's forward and backward do; -I cold: the gradients are left "
        "cold too, as those written early in backward are", "",
        "| pair | train (us) | rank 0: step, without the wait (us) | "
        "bench | -S | -S -E | -S -E -I cold | train / bench | train / -S "
        "| train / -S -E | train / -S -E -I cold |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for i, p in enumerate(pairs):
        lines.append(
            f"| {i + 1} | {p['train']:.1f} | {p['step']:.1f}, "
            f"{p['moving']:.1f} | " +
            " | ".join(f"{p[b]:.1f}" for b in benches) + " | " +
            " | ".join(f"{p['train'] / p[b]:.2f}" for b in benches) + " |")
    lines.append("")
    for b, name in zip(benches, ("hoop-bench", f"-S {late}",
                                 f"-S {late} -E {evict}",
                                 f"-S {late} -E {evict} -I cold")):
        ratios = [p["train"] / p[b] for p in pairs]
        lines.append(f"- train / {name}: median {statistics.median(ratios):.2f}"
                     f" (min {min(ratios):.2f}, max {max(ratios):.2f})")
    return lines


def main():
    a = parse_args(sys.argv[1:])
    log = []
    results = {}
    port = 29600
    for ranks in a.ranks:
        for _ in range(a.repeats):
            rows, out = run_hoop(a, ranks, ["--epochs", str(a.epochs),
                                            "--optim", "sgd", "--seed", "1"]
                                 + SAME[a.model], log)
            results.setdefault(("hoop", ranks), []).append(
                summarise(rows, "samples_per_s", "seconds", "test_acc"))
            port += 1
            trows = run_torch(a, ranks, port, log)
            results.setdefault(("torch", ranks), []).append(
                summarise(trows, "samples_per_s", "seconds", "test_acc"))

    lines = ["| ranks | trainer | samples/s (median epoch) | s/epoch | "
             f"test acc after {a.epochs} epochs | hoop / PyTorch samples/s |",
             "|---:|---|---:|---:|---:|---:|"]
    for ranks in a.ranks:
        med = {}
        for who in ("hoop", "torch"):
            runs = results[(who, ranks)]
            med[who] = [statistics.median(r[i] for r in runs)
                        for i in range(3)]
            spread = "/".join(f"{r[0]:.0f}" for r in runs)
            accs = "/".join(f"{r[2]:.4f}" for r in runs)
            name = "hoop-train" if who == "hoop" else "PyTorch DDP (gloo)"
            ratio = (f"{med['hoop'][0] / med['torch'][0]:.2f}"
                     if who == "torch" else "")
            lines.append(f"| {ranks} | {name} | {med[who][0]:.0f} "
                         f"({spread}) | {med[who][1]:.2f} | {accs} | {ratio} |")

    # One run per trainer says little about accuracy: SGD at lr 0.1 moves
    # the final figure by a point or two from seed to seed.
    seeds = [int(x) for x in a.acc_seeds.split(",") if x]
    accs = {"hoop": [], "torch": []}
    for seed in seeds:
        rows, _ = run_hoop(a, 1, ["--epochs", str(a.epochs), "--optim", "sgd",
                                  "--seed", str(seed)] + SAME[a.model], log)
        accs["hoop"].append(float(rows[-1]["test_acc"]))
        port += 1
        accs["torch"].append(run_torch(a, 1, port, log, seed)[-1]["test_acc"])
    acc_lines = []
    if seeds:
        mean = {k: statistics.mean(v) for k, v in accs.items()}
        sd = {k: statistics.stdev(v) if len(v) > 1 else 0.0
              for k, v in accs.items()}
        acc_lines = [
            f"- 1 rank, {a.epochs} epochs, seeds {seeds}",
            "- hoop-train test accuracy: " +
            " ".join(f"{x:.4f}" for x in accs["hoop"]) +
            f" (mean {mean['hoop']:.4f}, sd {sd['hoop']:.4f})",
            "- PyTorch test accuracy: " +
            " ".join(f"{x:.4f}" for x in accs["torch"]) +
            f" (mean {mean['torch']:.4f}, sd {sd['torch']:.4f})",
            f"- difference of means (hoop - PyTorch): "
            f"{100 * (mean['hoop'] - mean['torch']):+.2f} points"]

    comm_lines = []
    if max(a.ranks) > 1 and a.comm_pairs > 0:
        comm_lines = compare_comm(a, max(a.ranks), log)

    own_rows, _ = run_hoop(a, a.own_ranks,
                           ["--epochs", str(a.own_epochs), "--model", a.model],
                           log)
    own = (f"- hoop-train defaults (adam, lr 0.001, batch 64), "
           f"{a.own_ranks} ranks, {a.own_epochs} epochs: test accuracy "
           f"{float(own_rows[-1]['test_acc']):.4f}")

    report = ["# hoop-train vs PyTorch DDP (CPU, gloo)", ""]
    report += machine_info_basic()
    report += [f"- Command: bench/train_vs_ddp.py {' '.join(sys.argv[1:])}",
               f"- Same for both: {SHAPE[a.model]}, batch 64 per rank, "
               f"seed 1, Fashion-MNIST ({a.data}), "
               f"{a.epochs} epochs, one compute thread per rank; "
               f"{a.repeats} runs each, interleaved", "",
               "## Throughput and accuracy", ""] + lines
    report += ["", "## Accuracy over seeds", ""] + acc_lines
    report += ["", "## Communication per step", ""] + comm_lines
    report += ["", "## hoop-train's own defaults", "", own, "",
               "## Raw output", ""]
    for cmd, out in log:
        report += [f"`{cmd}`", "", "```", out.strip(), "```", ""]
    text = "\n".join(report) + "\n"
    a.out.write_text(text)
    print("\n".join(report[:report.index("## Raw output")]))


if __name__ == "__main__":
    main()
