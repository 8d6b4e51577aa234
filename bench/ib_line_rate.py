#!/usr/bin/python3
"""hoop over RDMA verbs beside the adapter's line rate (ib_write_bw's).

On a machine with an RDMA device this runs, interleaved for each repeat
and size: perftest's ib_write_bw (one RC queue pair streaming RDMA
writes, the rate the adapter can carry one way), then 2 ranks of
hoop-bench all-reduce and broadcast with HOOP_TRANSPORT=ib on the same
device and port. hoop-bench has no point-to-point mode; broadcast on 2
ranks is the one-way figure (rank 0 sends the whole buffer to rank 1,
busbw = bytes / time), all-reduce the figure the target is about (on 2
ranks busbw = bytes / time, with both directions busy). Ratios are hoop
busbw / ib_write_bw's BW average, paired by repeat, median and min-max.
Target: all-reduce at 64 MiB >= 0.90 of the line rate.

Placement: by default both ib_write_bw ends and both ranks run on this
host through one port, which the adapter loops back internally (what
perftest's run_perftest_loopback does). With --netns PREFIX the server and
rank 0 run in namespace PREFIX-h0 and the client and rank 1 in PREFIX-h1,
the client dialling 10.99.0.1: hoop-run --netns's convention, and the
layout of tools/netsim.sh and tools/softroce.sh. There --device may name
one device per namespace (softroce.sh: --device hooprxe0,hooprxe1) and
hoop's bootstrap interface is HOOP_SOCKET_IFNAME, which hoop-run sets to
eth0 unless it is set (softroce.sh: HOOP_SOCKET_IFNAME=hooprxe-v).

The device is --device NAME[:PORT], else HOOP_IB_HCA when it names one
device (NAME, =NAME, with an optional :PORT), else the first device with
an ACTIVE port; the port, unless given, is the device's first ACTIVE one.
Each rank gets HOOP_IB_HCA==NAME:PORT so that hoop uses what ib_write_bw
used; HOOP_IB_GID_INDEX, when set, goes to ib_write_bw as -x as well.

Exit status 77, with one line saying why, where nothing can be measured:
no RDMA device, no ACTIVE port, no ib_write_bw (apt-get install perftest),
or a hoop build without libibverbs. 1 if any run fails, reports
#wrong > 0, or prints nothing this script can parse; 0 otherwise, whether
or not the target is met (the table says which).

    /usr/bin/python3 bench/ib_line_rate.py --build build --device mlx5_0 \\
        --size 64M --iters 100 --repeats 5 --out ib-line-rate.md

Standard library only.
"""

import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_allreduce import Run as Launch  # noqa: E402
from compare_allreduce import (  # noqa: E402
    execute, failures_of, fenced, finish, human, machine_info_basic,
    parse_rows, parse_size, parser_with_build, report_body, run_ceilings,
    tool_line)

CANNOT = 77
SYSFS = Path("/sys/class/infiniband")
TARGET_RATIO = 0.90
TARGET_BYTES = 64 << 20
COLLS = ("allreduce", "broadcast")
# hoop-run --netns: rank 0's address on the emulated network.
NETNS_ROOT = "10.99.0.1"
# BW units perftest's header may name -> bytes per second per unit.
# --report_gbits gives Gb/sec (10^9 bits); without it perftest 6 writes
# MB/sec and others MiB/sec, both meaning 2^20 bytes (its --help says so).
BW_UNITS = {"Gb/sec": 1e9 / 8, "MB/sec": float(1 << 20),
            "MiB/sec": float(1 << 20)}


class CannotMeasure(Exception):
    """This machine lacks something the measurement needs (exit 77)."""


@dataclass
class Port:
    """One end: the device and port it uses, and the namespace it runs in."""
    device: str
    port: int
    netns: str = ""

    def hca(self):
        return f"={self.device}:{self.port}"


@dataclass
class Run(Launch):
    """One launch on 2 ranks: ib_write_bw's client (its server kept in
    `server`) or hoop-bench under hoop-run, with its figure."""
    size: int = 0
    gbps: float = None  # line rate, or hoop's busbw; None if none parsed
    server: tuple = None  # ib_write_bw: (argv, exit status, output)


def parse_write_bw(text):
    """ib_write_bw's report -> {message bytes: BW average in GB/s (1e9 B/s)}.

    Rows follow the '#bytes #iterations ...' header, one per size; the
    column that holds the average, and its unit, come from the header,
    since dual-port and other modes add columns. Raises ValueError when
    there is no header, the unit is unknown, a row does not fit the
    header, or no row follows: a figure never comes from a guess.
    """
    rows, names, scale, avg = {}, None, None, None
    for line in text.splitlines():
        if "#bytes" in line and "#iterations" in line:
            names = re.findall(r"#\w+|[A-Za-z][\w ]*?\[[^\]]*\]", line)
            avg = next((i for i, n in enumerate(names)
                        if n.startswith("BW average[")), None)
            if avg is None:
                raise ValueError(f"no 'BW average[...]' column in {line!r}")
            unit = names[avg][len("BW average["):-1]
            if unit not in BW_UNITS:
                raise ValueError(f"unknown bandwidth unit {unit!r} in "
                                 f"{line!r}")
            scale = BW_UNITS[unit] / 1e9
            continue
        f = line.split()
        if names is None or not f or not f[0].isdigit():
            continue
        if len(f) != len(names):
            raise ValueError(f"row {line!r} has {len(f)} fields, the header "
                             f"{len(names)}")
        try:
            rows[int(f[0])] = float(f[avg]) * scale
        except ValueError:
            raise ValueError(f"row {line!r}: {f[avg]!r} is not a "
                             "bandwidth") from None
    if names is None:
        raise ValueError("no '#bytes #iterations' header: ib_write_bw "
                         "printed no report")
    if not rows:
        raise ValueError("a report header but no row under it")
    return rows


def parse_hca(text):
    """'mlx5_0', '=mlx5_0', 'mlx5_0:1' or '=mlx5_0:1' -> (name, port or
    None). HOOP_IB_HCA's other forms (prefixes, lists, exclusions) may
    select several devices, and ib_write_bw needs one: ValueError."""
    body = text[1:] if text.startswith("=") else text
    name, colon, port = body.partition(":")
    if (not name or any(c in name for c in ",^=")
            or (colon and not port.isdigit())):
        raise ValueError(f"{text!r} does not name one device "
                         "(NAME, =NAME, NAME:PORT or =NAME:PORT)")
    return name, int(port) if colon else None


def active_ports(device):
    """The device's ports whose state is ACTIVE, in order."""
    ports = []
    for state in sorted((SYSFS / device / "ports").glob("*/state"),
                        key=lambda p: int(p.parent.name)):
        if "ACTIVE" in state.read_text():
            ports.append(int(state.parent.name))
    return ports


def port_attr(port, attr):
    try:
        return (SYSFS / port.device / "ports" / str(port.port) /
                attr).read_text().strip()
    except OSError:
        return "unknown"


def device_attr(port, attr):
    try:
        return (SYSFS / port.device / attr).read_text().strip()
    except OSError:
        return "unknown"


def rdma_devices():
    """The RDMA devices the kernel has, or CannotMeasure saying why none."""
    if not SYSFS.is_dir():
        raise CannotMeasure(f"this machine has no RDMA device ({SYSFS} does "
                            "not exist: the kernel has no RDMA support "
                            "loaded)")
    devices = sorted(p.name for p in SYSFS.iterdir())
    if not devices:
        raise CannotMeasure(f"this machine has no RDMA device ({SYSFS} is "
                            "empty)")
    return devices


def choose_ports(a):
    """One Port per end: [both] on loopback, [server, client] with
    --netns. Raises CannotMeasure or ValueError (a bad --device)."""
    devices = rdma_devices()
    source = "--device" if a.device else "HOOP_IB_HCA"
    specs = a.device.split(",") if a.device else []
    if not specs and os.environ.get("HOOP_IB_HCA"):
        specs = [os.environ["HOOP_IB_HCA"]]
    if len(specs) > (2 if a.netns else 1):
        raise ValueError(f"--device {a.device}: one device per end, and "
                         f"there {'are 2' if a.netns else 'is 1'}")
    if not specs:
        with_port = [d for d in devices if active_ports(d)]
        if not with_port:
            raise CannotMeasure("no port of " + ", ".join(devices) +
                                " is ACTIVE")
        specs = [with_port[0]]
    ports = []
    for spec in specs:
        try:
            name, port = parse_hca(spec)
        except ValueError as e:
            raise ValueError(f"{source}: {e}") from None
        if name not in devices:
            raise ValueError(f"{source}: no RDMA device {name!r} (this "
                             f"machine has {', '.join(devices)})")
        active = active_ports(name)
        if port is None:
            if not active:
                raise CannotMeasure(f"no port of {name} is ACTIVE")
            port = active[0]
        elif port not in active:
            raise CannotMeasure(f"port {port} of {name} is not ACTIVE")
        ports.append(Port(name, port))
    if a.netns:
        if len(ports) == 1:
            ports *= 2
        ports = [Port(p.device, p.port, f"{a.netns}-h{i}")
                 for i, p in enumerate(ports)]
    return ports


def parse_sizes(text):
    return [parse_size(s) for s in text.split(",")]


def parse_args(argv):
    p = parser_with_build(__doc__)
    p.add_argument("--device", help="NAME[:PORT] (with --netns, one or "
                   "two, comma-separated); default HOOP_IB_HCA, else the "
                   "first device with an ACTIVE port")
    p.add_argument("--netns", metavar="PREFIX",
                   help="run one end in PREFIX-h0 and the other in "
                   "PREFIX-h1 (as hoop-run --netns; needs root)")
    p.add_argument("--size", type=parse_sizes, default="64M",
                   help="message sizes, comma-separated; K/M/G = powers "
                   "of 1024")
    p.add_argument("--iters", type=int, default=100,
                   help="ib_write_bw's messages and hoop-bench's timed "
                   "calls per size")
    p.add_argument("--warmup", type=int, default=5,
                   help="hoop-bench's untimed calls per size")
    p.add_argument("--repeats", type=int, default=5,
                   help="interleaved rounds of ib_write_bw and hoop")
    p.add_argument("--timeout", type=int, default=300,
                   help="seconds before a run counts as hung")
    p.add_argument("--out", type=Path, help="markdown results file")
    a = p.parse_args(argv)
    # ib_write_bw refuses fewer than 5 iterations.
    if a.iters < 5 or a.warmup < 0 or a.repeats < 1:
        p.error("need --iters >= 5, --warmup >= 0, --repeats >= 1")
    if any(s % 4 for s in a.size):
        p.error("sizes must be whole float32 arrays (multiples of 4)")
    return a


def binaries(build):
    return {"hoop-run": build / "tools" / "hoop-run",
            "hoop-bench": build / "bench" / "hoop-bench",
            "hoop-ceilings": build / "bench" / "hoop-ceilings"}


def has_verbs(build):
    """Whether the build was configured with libibverbs; None if unknown."""
    config = build / "generated" / "hoop_build_config.h"
    try:
        m = re.search(r"#define HOOP_HAVE_VERBS (\d)", config.read_text())
    except OSError:
        return None
    return m.group(1) == "1" if m else None


def check_tools(a, bins):
    """Exits 2 on a bad --build; raises CannotMeasure for what is missing."""
    missing = [f"{n}: {p} not found or not executable"
               for n, p in bins.items() if not os.access(p, os.X_OK)]
    if missing:
        print("ib_line_rate: cannot run:\n  " + "\n  ".join(missing),
              file=sys.stderr)
        sys.exit(2)
    ports = choose_ports(a)
    if not shutil.which("ib_write_bw"):
        raise CannotMeasure("ib_write_bw is not installed (apt-get install "
                            "perftest)")
    if has_verbs(a.build) is False:
        raise CannotMeasure(f"the hoop build in {a.build} has no RDMA verbs "
                            "(configured without libibverbs-dev)")
    return ports


def in_netns(netns, argv):
    return ["ip", "netns", "exec", netns] + argv if netns else argv


def free_tcp_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def listening(pid, port):
    """Whether process pid has a TCP socket listening on port. Reads the
    process's own /proc view, which is its network namespace's; a probe
    connection would instead be taken for the client."""
    want = f":{port:04X}"
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()
        except OSError:
            continue
        for line in lines[1:]:
            f = line.split()
            if len(f) > 3 and f[1].endswith(want) and f[3] == "0A":
                return True
    return False


def last_line(text):
    lines = text.strip().splitlines()
    return lines[-1].strip() if lines else "(no output)"


def write_bw_argv(end, size, iters, tcp_port):
    argv = ["ib_write_bw", "-d", end.device, "-i", str(end.port), "-s",
            str(size), "-n", str(iters), "-p", str(tcp_port),
            "--report_gbits", "-F"]
    gid = os.environ.get("HOOP_IB_GID_INDEX", "")
    if gid.isdigit():
        argv += ["-x", gid]
    return in_netns(end.netns, argv)


def run_write_bw(a, ports, size, repeat):
    """The server, started first, then the client once it listens. The
    client's report is the figure; the server's output is kept beside it."""
    tcp_port = free_tcp_port()
    server_argv = write_bw_argv(ports[0], size, a.iters, tcp_port)
    client_argv = write_bw_argv(ports[-1], size, a.iters, tcp_port) + [
        NETNS_ROOT if a.netns else "127.0.0.1"]
    run = Run("ib_write_bw", 2, repeat, client_argv, size=size)
    t0 = time.monotonic()
    server = subprocess.Popen(server_argv, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    try:
        while (server.poll() is None and not listening(server.pid, tcp_port)
               and time.monotonic() - t0 < a.timeout):
            time.sleep(0.05)
        if server.poll() is None and listening(server.pid, tcp_port):
            run.rc, run.stdout, run.stderr, _ = execute(client_argv,
                                                        a.timeout)
            if run.rc != 0:
                run.problems.append(f"client exit status {run.rc}: "
                                    + last_line(run.stdout + run.stderr))
        else:
            run.rc = None
            run.problems.append(f"the server never listened on port "
                                f"{tcp_port}; the client did not run")
        # A server whose client failed waits for it forever.
        try:
            server_out, _ = server.communicate(
                timeout=a.timeout if run.rc == 0 else 5)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server_out, _ = server.communicate()
            run.problems.append("the server did not exit: killed")
    except BaseException:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        raise
    run.seconds = time.monotonic() - t0
    run.server = (shlex.join(server_argv), server.returncode, server_out)
    if server.returncode != 0:
        run.problems.append(f"server exit status {server.returncode}: "
                            + last_line(server_out))
    if run.rc is None:
        return run
    try:
        run.gbps = parse_write_bw(run.stdout).get(size)
    except ValueError as e:
        run.problems.append(f"cannot parse the client's report: {e}")
        return run
    if run.gbps is None:
        run.problems.append(f"the report has no row for {size} bytes")
    return run


def hoop_argv(a, bins, ports, coll, size):
    bench = [str(bins["hoop-bench"]), "-C", coll, "-b", str(size), "-e",
             str(size), "-n", str(a.iters), "-w", str(a.warmup), "-c", "1"]
    if ports[0].hca() != ports[-1].hca():
        # Each rank names its own device (softroce.sh's two rxe devices).
        bench = ["sh", "-c", 'if [ "$HOOP_RANK" = 0 ]; then HOOP_IB_HCA=$1; '
                 'else HOOP_IB_HCA=$2; fi; export HOOP_IB_HCA; shift 2; '
                 'exec "$@"', "sh", ports[0].hca(), ports[-1].hca()] + bench
    launch = [str(bins["hoop-run"]), "--no-prefix", "-n", "2"]
    if a.netns:
        launch += ["--netns", a.netns]
    return ["env", "HOOP_TRANSPORT=ib", f"HOOP_IB_HCA={ports[0].hca()}"] + \
        launch + bench


def run_hoop(a, bins, ports, coll, size, repeat):
    run = Run(coll, 2, repeat, hoop_argv(a, bins, ports, coll, size),
              size=size)
    run.rc, run.stdout, run.stderr, run.seconds = execute(run.argv,
                                                          a.timeout)
    if run.rc != 0:
        run.problems.append(f"exit status {run.rc}")
    parse_rows(run, in_place=False)
    if size not in run.times:
        run.problems.append(f"no row for {size} bytes")
    else:
        # On 2 ranks busbw = bytes / time for both (2(N-1)/N = 1).
        run.gbps = size / (run.times[size] * 1e3)
    return run


def run_all(a, bins, ports):
    runs = []
    for rep in range(1, a.repeats + 1):
        for size in a.size:
            batch = [run_write_bw(a, ports, size, rep)]
            batch += [run_hoop(a, bins, ports, c, size, rep) for c in COLLS]
            for run in batch:
                status = "; ".join(run.problems) or f"{run.gbps:.2f} GB/s"
                print(f"[repeat {rep}/{a.repeats}, {human(size)}] "
                      f"{run.peer:11s} {run.seconds:6.1f} s  {status}",
                      file=sys.stderr)
            runs += batch
    return runs


def per_repeat(runs, peer, size, repeats):
    """GB/s indexed by repeat; None where that run gave no figure."""
    got = {r.repeat: r.gbps for r in runs
           if r.peer == peer and r.size == size}
    return [got.get(rep) for rep in range(1, repeats + 1)]


def ratios(hoop, line):
    """hoop / line, paired by repeat: the two ran next to each other."""
    return [h / w for h, w in zip(hoop, line) if h and w]


def median_cell(values):
    values = [v for v in values if v]
    return f"{statistics.median(values):.2f}" if values else "-"


def ratio_cells(values):
    if not values:
        return ["-", "-"]
    return [f"{statistics.median(values):.3f}",
            f"{min(values):.3f}-{max(values):.3f}"]


def verdict(a, runs):
    """Whether the target holds at TARGET_BYTES, by the median ratio."""
    text = (f"Target: all-reduce busbw >= {TARGET_RATIO:.2f} x line rate "
            f"at {human(TARGET_BYTES)}: ")
    if TARGET_BYTES not in a.size:
        return text + "not measured in this run (no such size)."
    r = ratios(per_repeat(runs, "allreduce", TARGET_BYTES, a.repeats),
               per_repeat(runs, "ib_write_bw", TARGET_BYTES, a.repeats))
    if not r:
        return text + "no figure (no pair of runs gave both)."
    med = statistics.median(r)
    return text + (f"{'met' if med >= TARGET_RATIO else 'NOT met'} "
                   f"(median ratio {med:.3f}, min {min(r):.3f}).")


def commands(runs):
    """The first repeat's command lines, one per tool and size."""
    out = []
    for r in runs:
        if r.repeat == 1:
            if r.server:
                out.append(f"  - server: `{r.server[0]}`")
            out.append(f"  - {'client' if r.server else 'hoop'}: "
                       f"`{shlex.join(r.argv)}`")
    return out


def summary(a, runs, ceilings):
    lines = [
        "Line rate: ib_write_bw's BW average (one RC queue pair, RDMA "
        "writes one way). hoop: 2 ranks, HOOP_TRANSPORT=ib, float32; "
        "all-reduce (sum) and broadcast (root 0, the one-way figure), "
        "out-of-place, each run's median over iterations of the slowest "
        "rank's time; busbw = bytes / time on 2 ranks. GB = 1e9 B. GB/s: "
        f"median over {a.repeats} repeats; ratio = hoop busbw / line rate "
        "paired by repeat, median and min-max.",
        "",
        f"Ceiling: single-thread memcpy {ceilings.get('memcpy_GBps', '?')} "
        "GB/s (ib copies each byte into its send ring).",
        "",
        "| size | ib_write_bw GB/s | all-reduce busbw | all-reduce/line "
        "| spread | broadcast busbw | broadcast/line | spread |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in a.size:
        line = per_repeat(runs, "ib_write_bw", size, a.repeats)
        cells = [human(size), median_cell(line)]
        for coll in COLLS:
            bw = per_repeat(runs, coll, size, a.repeats)
            cells += [median_cell(bw)] + ratio_cells(ratios(bw, line))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines + ["", verdict(a, runs)])


def describe(ports):
    out = []
    for end in dict.fromkeys((p.device, p.port) for p in ports):
        p = Port(*end)
        out.append(f"- RDMA port: {p.device} port {p.port}, link layer "
                   f"{port_attr(p, 'link_layer')}, rate "
                   f"{port_attr(p, 'rate')}, firmware "
                   f"{device_attr(p, 'fw_ver')}, board "
                   f"{device_attr(p, 'board_id')}")
    return out


def header(a, ports, cmdline, runs):
    """Date, host, machine, the RDMA ports, perftest, and every command."""
    where = (f"namespaces {a.netns}-h0 and {a.netns}-h1" if a.netns
             else "one host, through the adapter's loopback")
    return machine_info_basic() + [f"- Host: {socket.gethostname()}"] + \
        describe(ports) + [
        f"- perftest: {tool_line(['ib_write_bw', '--version'])}",
        f"- Placement: {where}",
        f"- Command: `{cmdline}`",
        "- Method: shared/bench-method.md; per repeat and size "
        "ib_write_bw, hoop all-reduce, hoop broadcast, one after another",
        "- Commands of the first repeat:"] + commands(runs)


def run_label(r):
    return f"repeat {r.repeat}, {human(r.size)}, {r.peer}"


def server_output(r):
    """ib_write_bw's server end, which ran beside the client a run names."""
    if not r.server:
        return []
    argv, rc, out = r.server
    return ["", f"server `{argv}`: exit {rc}", "", fenced(out)]


def report(a, head, ceil_raw, runs, table, failures):
    parts = ["# hoop over RDMA verbs against ib_write_bw's line rate", ""]
    parts += head + [""] + report_body(ceil_raw, table, failures, runs,
                                       run_label, server_output)
    a.out.write_text("\n".join(parts))


def main():
    # As an exception, SIGTERM kills the ranks and ib_write_bw's ends on its
    # way out, which run in sessions of their own.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    a = parse_args(sys.argv[1:])
    cmdline = shlex.join([sys.executable] + sys.argv)
    bins = binaries(a.build)
    try:
        ports = check_tools(a, bins)
    except CannotMeasure as e:
        print(f"ib_line_rate: cannot measure: {e}", file=sys.stderr)
        return CANNOT
    except ValueError as e:
        print(f"ib_line_rate: {e}", file=sys.stderr)
        return 2
    ceil_raw, ceilings, ceil_problem = run_ceilings(bins, a.timeout)
    print(ceil_raw.rstrip("\n"))
    runs = run_all(a, bins, ports)
    head = header(a, ports, cmdline, runs)
    table = summary(a, runs, ceilings)
    print("\n" + "\n".join(head) + "\n\n" + table)
    failures = failures_of(ceil_problem, runs, run_label)
    return finish(a.out, lambda: report(a, head, ceil_raw, runs, table,
                                        failures), failures)


if __name__ == "__main__":
    sys.exit(main())
