#!/usr/bin/python3
"""PNG figures from the benchmarks' machine-readable output.

- busbw-COLL.png, one per collective: out-of-place busbw against size, one
  panel per rank count, a line per hoop algorithm (hoop-bench -J files as
  bench/coll_sweep.py writes them) and, where bench/compare_peers.py --json
  measured the same rank count, dashed lines for hoop, Open MPI and gloo
  from that run.
- ps-vs-ring.png: all-reduce time against N on emulated hosts for ps, ring
  and tree (median and min-max of bench/ps_vs_ring.py --json) with each
  one's duplex model as a line.

Any input left out skips its figures. Needs Debian's python3-matplotlib:

    /usr/bin/python3 bench/plot_results.py \\
        --sweep-dir bench/results/2026-11-22-sweep \\
        --peers bench/results/2026-11-22-collectives-vs-mpi-gloo.json \\
        --ps-ring bench/results/2026-11-22-ps-vs-ring-emulated-hosts.json \\
        --out-dir bench/results
"""
import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

COLLS = ("allreduce", "reducescatter", "allgather", "broadcast", "reduce",
         "alltoall")
ALGO_STYLE = {"ring": "C0", "tree": "C1", "ps": "C2", "auto": "C3"}
PEER_STYLE = {"hoop": "C3", "mpi": "C4", "gloo": "C5"}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sweep-dir", type=Path,
                   help="hoop-bench -J files named COLL-ALGO-Nranks.jsonl")
    p.add_argument("--peers", type=Path, help="compare_peers.py --json")
    p.add_argument("--ps-ring", type=Path, help="ps_vs_ring.py --json")
    p.add_argument("--out-dir", type=Path, default=Path("bench/results"))
    return p.parse_args(argv)


def load_sweep(directory):
    """-> {coll: {ranks: {requested algo: [(bytes, busbw)]}}}."""
    data = defaultdict(lambda: defaultdict(dict))
    for path in sorted(directory.glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        rows = [r for r in rows if r["in_place"] == 0]
        if not rows:
            continue
        r0 = rows[0]
        data[r0["collective"]][r0["ranks"]][r0["algo_requested"]] = sorted(
            (r["bytes"], r["busbw_GBps"]) for r in rows)
    return data


def load_peers(path):
    """-> {coll: {ranks: {peer: [(bytes, busbw)]}}}."""
    data = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for c in json.loads(path.read_text()):
        data[c["collective"]][c["ranks"]][c["peer"]].append(
            (c["bytes"], c["busbw_GBps"]))
    return data


def plot_busbw(coll, sweep, peers, out_dir):
    ranks = sorted(set(sweep.get(coll, {})) | set(peers.get(coll, {})))
    if not ranks:
        return None
    fig, axes = plt.subplots(1, len(ranks), figsize=(4.2 * len(ranks), 3.6),
                             sharey=True, squeeze=False)
    for ax, n in zip(axes[0], ranks):
        for algo, pts in sweep.get(coll, {}).get(n, {}).items():
            ax.plot(*zip(*pts), marker="o", ms=3, color=ALGO_STYLE[algo],
                    label=f"hoop {algo}")
        for peer, pts in sorted(peers.get(coll, {}).get(n, {}).items()):
            ax.plot(*zip(*sorted(pts)), ls="--", color=PEER_STYLE[peer],
                    label=f"{peer} (peer run)")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{coll}, {n} ranks")
        ax.set_xlabel("size (bytes)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("busbw (GB/s, nccl-tests factor)")
    fig.suptitle("out of place, float32; local ranks over loopback, 2-core "
                 "machine", fontsize=9)
    fig.tight_layout()
    path = out_dir / f"busbw-{coll}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_ps_ring(path, out_dir):
    rows = json.loads(path.read_text())
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, algo in enumerate(("ps", "ring", "tree")):
        mine = sorted((r for r in rows if r["algo"] == algo and r["times_ms"]),
                      key=lambda r: r["ranks"])
        if not mine:
            continue
        ns = [r["ranks"] for r in mine]
        med = [statistics.median(r["times_ms"]) for r in mine]
        lo = [m - min(r["times_ms"]) for m, r in zip(med, mine)]
        hi = [max(r["times_ms"]) - m for m, r in zip(med, mine)]
        color = f"C{i}"
        ax.errorbar(ns, med, yerr=[lo, hi], fmt="o", color=color, capsize=3,
                    label=f"{algo} measured")
        ax.plot(ns, [r["duplex_model_ms"] for r in mine], color=color,
                label=f"{algo} model")
    r0 = rows[0]
    ax.set_title(f"all-reduce of {r0['bytes'] >> 20} MiB, links {r0['rate']} "
                 "each way (emulated hosts)", fontsize=9)
    ax.set_xlabel("N (hosts)")
    ax.set_ylabel("time (ms)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = out_dir / "ps-vs-ring.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main():
    a = parse_args(sys.argv[1:])
    a.out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    sweep = load_sweep(a.sweep_dir) if a.sweep_dir else {}
    peers = load_peers(a.peers) if a.peers else {}
    for coll in COLLS:
        path = plot_busbw(coll, sweep, peers, a.out_dir)
        if path:
            written.append(path)
    if a.ps_ring:
        written.append(plot_ps_ring(a.ps_ring, a.out_dir))
    for path in written:
        print(f"wrote {path}")
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
