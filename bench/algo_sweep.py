#!/usr/bin/env python3
"""Ring vs tree vs the automatic choice for all-reduce, measured side by side.

For each rank count, runs hoop-bench with -a ring, -a tree and -a auto,
interleaved (ring, tree, auto, ring, ...) so that drift on a shared machine
hits all three, keeps each size's median over repeats, and prints which
algorithm won, auto's time relative to the better of ring and tree, and the
cost model's predicted ring/tree crossover (from hoop-info) beside the
measured one.  Timing follows ../shared/bench-method.md through hoop-bench.

  /usr/bin/python3 bench/algo_sweep.py --build build --ranks 4,8 --out FILE

With --emulate RATE (root) every rank runs on its own emulated host
(tools/netsim.sh: a namespace per rank, every link capped at RATE each way
by tbf; hoop-run --netns), and the model is told that network:

  HOOP_LINK_MBPS  the link's payload rate, RATE/8 x 1448/1514 in MB/s
                  (tbf counts whole frames; 1448 of a 1514-byte frame are
                  TCP payload), unless --link-mbps says otherwise;
  HOOP_ALPHA_NS   measured before each rank count's sweep, unless
                  --alpha-ns says otherwise: on the same N emulated hosts,
                  hoop-bench -a ring at 8 bytes; the median call time over
                  --alpha-repeats runs, divided by the ring's 2(N-1)
                  sequential messages;
  HOOP_SPIN_US    --spin-us, 0 by default: every emulated host has one rank
                  and so believes it has both cores to itself, but all of
                  them share this machine's cores, where a rank busy-polling
                  steals the time its peers need to answer (measured: 8
                  ranks at 1 KiB took ~5x longer with a 200 us spin, the
                  engine's default before 7b51765).  Set explicitly so that
                  the runs do not depend on the default.

Each size's table row then also names the model's faster of ring and tree
and AUTO's pick (hoop-info, same settings) and what AUTO ran (hoop-bench -J).

  sudo /usr/bin/python3 bench/algo_sweep.py --build build --ranks 4,8 \
      --emulate 1gbit --out FILE
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_allreduce import (  # noqa: E402  (shares the launch helpers)
    Run, execute, machine_info_basic, parse_rows, parse_ranks, parse_size)
import ps_vs_ring  # noqa: E402  (netsim and rates)

ALGOS = ("ring", "tree", "auto")
ALPHA_BYTES = 8


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", type=Path, default=Path("build"))
    p.add_argument("--ranks", type=parse_ranks, default=[4, 8])
    p.add_argument("--begin", type=parse_size, default=1 << 10)
    p.add_argument("--end", type=parse_size, default=16 << 20)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--emulate", metavar="RATE",
                   help="run each rank on its own emulated host "
                   "(tools/netsim.sh), every link capped at RATE each way, "
                   "e.g. 1gbit; needs root")
    p.add_argument("--alpha-ns", type=int,
                   help="HOOP_ALPHA_NS for the model (--emulate measures "
                   "it when not given)")
    p.add_argument("--link-mbps", type=int,
                   help="HOOP_LINK_MBPS (--emulate: RATE's payload rate "
                   "when not given)")
    p.add_argument("--spin-us", type=int, default=0,
                   help="HOOP_SPIN_US with --emulate")
    p.add_argument("--alpha-iters", type=int, default=200)
    p.add_argument("--alpha-repeats", type=int, default=3)
    a = p.parse_args(argv)
    a.rate_bps = ps_vs_ring.parse_rate(a.emulate) if a.emulate else None
    return a


def hoop_run(a, ranks):
    """hoop-run and its options, on emulated hosts with --emulate."""
    netns = ["--netns", ps_vs_ring.PREFIX] if a.emulate else []
    return [str(a.build / "tools" / "hoop-run"), "--no-prefix", *netns,
            "-n", str(ranks)]




def measure_alpha(a, ranks, raw):
    """Median 8-byte ring all-reduce on the sweep's hosts / its 2(N-1) hops
    -> (alpha in ns, how it was measured).

    Measured at each rank count, not once on two hosts: with N ranks
    sharing this machine's cores a hop also waits for its receiver to be
    scheduled (on 2 cores, 11.4 us per hop on 2 hosts, 28.7-30.8 us on 4
    and 39.1-39.2 us on 8 in the 2026-11-23 sweeps), and the model should
    price the hops the sweep's calls take."""
    argv = hoop_run(a, ranks) + [
        str(a.build / "bench" / "hoop-bench"), "-a", "ring", "-b",
        str(ALPHA_BYTES), "-e", str(ALPHA_BYTES), "-n", str(a.alpha_iters),
        "-w", "20", "-c", "1"]
    times = []
    for rep in range(a.alpha_repeats):
        run = Run(peer="ring", ranks=ranks, repeat=rep, argv=argv)
        run.rc, run.stdout, run.stderr, run.seconds = execute(argv, a.timeout)
        parse_rows(run, in_place=False)
        raw.append(f"#### alpha: {ranks} hosts, ring, {ALPHA_BYTES} bytes, "
                   f"repeat {rep + 1}\n```\n{' '.join(argv)}\n"
                   f"{run.stdout}{run.stderr}```")
        if run.rc != 0 or run.problems or ALPHA_BYTES not in run.times:
            raise RuntimeError(f"alpha run failed: {run.problems} "
                               f"{run.stderr.strip()}")
        times.append(run.times[ALPHA_BYTES])
    hops = 2 * (ranks - 1)
    alpha = round(statistics.median(times) / hops * 1e3)
    how = (f"HOOP_ALPHA_NS={alpha} (measured: 8-byte ring all-reduce on "
           f"these {ranks} hosts, median call times "
           f"{', '.join(f'{t:.2f}' for t in times)} us over "
           f"{a.alpha_repeats} runs of {a.alpha_iters} iterations; their "
           f"median / {hops} hops)")
    return alpha, how


def bench_argv(a, ranks, algo, json_path=None):
    return hoop_run(a, ranks) + [
        str(a.build / "bench" / "hoop-bench"), "-a", algo,
        "-b", str(a.begin), "-e", str(a.end), "-f", "4", "-n",
        str(a.iters), "-w", str(a.warmup), "-c", "1",
        *(["-J", str(json_path)] if json_path else [])]


def predicted_crossover(a, ranks):
    """-> (crossover line, hoop-info's text, {bytes: (ring, tree, ps, auto
    pick)} from its prediction table)."""
    argv = hoop_run(a, ranks) + [str(a.build / "tools" / "hoop-info")]
    rc, out, err, _ = execute(argv, a.timeout)
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 6 and f[0].isdigit():  # ring tree ps hier auto
            rows[int(f[0])] = (float(f[1]), float(f[2]), float(f[3]), f[5])
    for line in out.splitlines():
        if "tree -> ring" in line:
            return line.strip("# ").strip(), out, rows
    return "unavailable", out + err, rows


def auto_ran(json_text):
    """{bytes: set of algorithms AUTO ran} from hoop-bench -J lines."""
    ran = {}
    for line in json_text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        ran.setdefault(row["bytes"], set()).add(row["algo"])
    return ran


def table(a, runs, ranks, cores, predicted, ran):
    """-> (markdown lines, measured crossover text, worst auto / best,
    worst ratio of the ring or tree runs AUTO's pick stands for, None
    where AUTO picked neither)."""
    sizes = sorted({s for r in runs for s in r.times})
    hosts = "emulated hosts" if a.emulate else "ranks"
    lines = [f"### {ranks} {hosts}" + (f" (more than the {cores} cores: "
                                       "small sizes measure scheduling too)"
                                       if ranks > cores else ""),
             "", "| bytes | ring us | tree us | auto us | faster | "
             "auto / best | model: faster of ring/tree | model: AUTO picks "
             "| AUTO ran | its ring/tree runs / best | ring / tree range "
             "over repeats |",
             "|---:|---:|---:|---:|---|---:|---|---|---|---:|---|"]
    winners, worst, worst_pick = [], 0.0, None
    for size in sizes:
        med = {al: statistics.median(r.times[size] for r in runs
                                     if r.peer == al and size in r.times)
               for al in ALGOS}
        ratios = [r.times[size] / t.times[size] for r, t in zip(
            [r for r in runs if r.peer == "ring"],
            [r for r in runs if r.peer == "tree"])
            if size in r.times and size in t.times]
        best = min(med["ring"], med["tree"])
        faster = "ring" if med["ring"] <= med["tree"] else "tree"
        winners.append((size, faster))
        worst = max(worst, med["auto"] / best)
        # Where AUTO ran ring or tree, that algorithm's own runs price the
        # choice apart from the noise between runs of the same schedule.
        picked = ran.get(size, set())
        pick_ratio = (med[next(iter(picked))] / best
                      if len(picked) == 1 and picked <= {"ring", "tree"}
                      else None)
        if pick_ratio is not None:
            worst_pick = max(worst_pick or 0.0, pick_ratio)
        pred = predicted.get(size)
        model_faster = ("-" if pred is None else
                        "ring" if pred[0] <= pred[1] else "tree")
        lines.append(f"| {size} | {med['ring']:.1f} | {med['tree']:.1f} | "
                     f"{med['auto']:.1f} | {faster} | "
                     f"{med['auto'] / best:.2f} | {model_faster} | "
                     f"{pred[3] if pred else '-'} | "
                     f"{'/'.join(sorted(picked)) or '-'} | "
                     f"{'-' if pick_ratio is None else f'{pick_ratio:.2f}'} | "
                     f"{min(ratios):.2f}-{max(ratios):.2f} |")
    # Measured crossover: the smallest size from which ring wins at every
    # larger size of the sweep (between it and the size before it).
    cross = None
    for i in range(len(winners) - 1, -1, -1):
        if winners[i][1] != "ring":
            break
        cross = i
    if cross is None:
        text = "ring is faster at no size from which it stays faster"
    elif cross == 0:
        text = f"ring is faster at every size ({winners[0][0]} bytes on)"
    else:
        text = (f"ring is faster from {winners[cross][0]} bytes on (tree at "
                f"{winners[cross - 1][0]}), so between the two")
    flips = sum(1 for x, y in zip(winners, winners[1:]) if x[1] != y[1])
    if flips > 1:
        text += f"; the faster one changes {flips} times over the sweep"
    return lines, text, worst, worst_pick


def sweep_n(a, ranks, cores, raw):
    """All repeats of ring, tree and auto on `ranks` ranks -> (lines,
    worst auto / best, failed)."""
    runs, ran, failed = [], {}, False
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.repeats):
            for algo in ALGOS:
                jpath = Path(tmp) / f"{algo}-{rep}.json"
                argv = bench_argv(a, ranks, algo,
                                  jpath if algo == "auto" else None)
                run = Run(peer=algo, ranks=ranks, repeat=rep, argv=argv)
                run.rc, run.stdout, run.stderr, run.seconds = execute(
                    argv, a.timeout)
                parse_rows(run, in_place=False)
                if run.rc != 0:
                    run.problems.append(f"exit status {run.rc}")
                if algo == "auto" and jpath.exists():
                    for size, algos in auto_ran(jpath.read_text()).items():
                        ran.setdefault(size, set()).update(algos)
                failed |= bool(run.problems)
                print(f"[{ranks} ranks, repeat {rep + 1}/{a.repeats}] {algo}"
                      f" {run.seconds:.1f} s {run.problems or 'ok'}",
                      flush=True)
                runs.append(run)
                raw.append(f"#### {ranks} ranks, {algo}, repeat {rep + 1}\n"
                           f"```\n{' '.join(argv)}\n{run.stdout}{run.stderr}"
                           "```")
    predicted, info, pred_rows = predicted_crossover(a, ranks)
    lines, measured, worst, worst_pick = table(a, runs, ranks, cores,
                                               pred_rows, ran)
    lines += ["", f"Model: {predicted}. Measured: {measured}.",
              f"AUTO / better of ring and tree, worst over the sweep: "
              f"{worst:.2f} ({'within' if worst <= 1.10 else 'NOT within'}"
              " 10%); " + ("AUTO ran neither ring nor tree at any size."
                           if worst_pick is None else
                           "where AUTO ran ring or tree, that algorithm's "
                           f"own runs / the better: worst {worst_pick:.2f}."),
              "",
              f"```\n{info}```", ""]
    return lines, worst, failed


def emulation_setup(a, raw):
    """Sets the model's environment for emulated hosts -> report lines."""
    payload_Bps = a.rate_bps / 8 * ps_vs_ring.PAYLOAD_PER_FRAME
    link = a.link_mbps or round(payload_Bps / 1e6)
    os.environ["HOOP_LINK_MBPS"] = str(link)
    os.environ["HOOP_SPIN_US"] = str(a.spin_us)
    if a.alpha_ns is None:
        alpha = "measured on each rank count's hosts (below)"
    else:
        alpha = f"{a.alpha_ns} (given, --alpha-ns)"
        os.environ["HOOP_ALPHA_NS"] = str(a.alpha_ns)
    return [f"- Hosts: each rank in its own network namespace "
            f"(tools/netsim.sh, hoop-run --netns {ps_vs_ring.PREFIX}), every "
            f"host link capped at {a.emulate} each way by tbf; payload rate "
            f"{payload_Bps / 1e6:.2f} MB/s (x 1448/1514)",
            f"- Model: HOOP_LINK_MBPS={link} "
            f"({'given' if a.link_mbps else 'the payload rate'}); "
            f"HOOP_ALPHA_NS={alpha}",
            f"- HOOP_SPIN_US={a.spin_us}: every emulated host has one rank, "
            "so each would busy-poll as if it had the cores to itself, but "
            "all share this machine's cores"]


def main():
    a = parse_args(sys.argv[1:])
    cores = os.cpu_count() or 1
    head, raw, body = [], [], []
    failed, worst = False, {}
    if a.emulate:
        if os.geteuid() != 0:
            print("algo_sweep: --emulate needs root (namespaces, tc)",
                  file=sys.stderr)
            return 2
        signal.signal(signal.SIGTERM, ps_vs_ring.on_signal)
        signal.signal(signal.SIGHUP, ps_vs_ring.on_signal)
    try:
        if a.emulate:
            head = emulation_setup(a, raw)
            print("\n".join(head), flush=True)
        for ranks in a.ranks:
            if a.emulate:
                ps_vs_ring.netsim(a, "up", str(ranks), a.emulate)
            try:
                how = None
                if a.emulate and a.alpha_ns is None:
                    alpha, how = measure_alpha(a, ranks, raw)
                    os.environ["HOOP_ALPHA_NS"] = str(alpha)
                lines, worst[ranks], f = sweep_n(a, ranks, cores, raw)
                if how:
                    lines[1:1] = ["", f"Model: {how}."]
                failed |= f
            finally:
                if a.emulate:
                    ps_vs_ring.netsim(a, "down")
            body += lines
            print("\n".join(lines), flush=True)
    except (ps_vs_ring.Stop, KeyboardInterrupt, RuntimeError) as e:
        failed = True
        body += ["", f"Stopped early: {e}", ""]
        print(f"algo_sweep: stopped early: {e}", file=sys.stderr)
    finally:
        if a.emulate:  # a failure may have left namespaces behind
            subprocess.run([str(ps_vs_ring.HERE.parent / "tools" /
                                "netsim.sh"), "down"], capture_output=True)
    title = ("# All-reduce algorithms: ring vs tree vs auto"
             + (" on emulated hosts" if a.emulate else ""))
    # machine_info_basic lists the HOOP_* settings the runs had.
    report = [title, "", *machine_info_basic(),
              f"- Command: {' '.join(sys.argv)}", *head, "",
              f"- AUTO within 10% of the better of ring and tree at every "
              f"size: {'yes' if worst and max(worst.values()) <= 1.10 else 'no'}"
              f" (worst AUTO / best: " + ", ".join(
                  f"{n} ranks {w:.2f}" for n, w in worst.items()) + ")", "",
              *body, "## Raw output", "", *raw]
    a.out.write_text("\n".join(report) + "\n")
    print(f"wrote {a.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
