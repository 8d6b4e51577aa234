#!/usr/bin/env python3
"""Plots hoop-train's per-epoch metrics CSV: loss, and train/test accuracy.

  hoop-plot-metrics METRICS.csv OUT.png
"""
import csv
import sys


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("hoop-plot-metrics: needs matplotlib "
              "(apt-get install python3-matplotlib)", file=sys.stderr)
        return 1
    with open(argv[1], newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        print(f"hoop-plot-metrics: {argv[1]} has no epochs", file=sys.stderr)
        return 1
    epoch = [int(r["epoch"]) for r in rows]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(epoch, [float(r["loss"]) for r in rows], marker="o")
    ax_loss.set(xlabel="epoch", ylabel="training loss", title="loss")
    ax_acc.plot(epoch, [float(r["train_acc"]) for r in rows], marker="o",
                label="train")
    ax_acc.plot(epoch, [float(r["test_acc"]) for r in rows], marker="s",
                label="test")
    ax_acc.set(xlabel="epoch", ylabel="accuracy", title="accuracy")
    ax_acc.legend()
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=100)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
