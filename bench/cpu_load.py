"""Busy processes beside a benchmark: a machine shared with other jobs.

How a library waits decides how it fares when its ranks do not have the
cores to themselves (a training job beside data loaders, a CI machine).
`busy(n)` keeps n processes spinning for as long as its block runs, at
the benchmark's own priority, so runs with and without load, or of two
builds under the same load, can be put side by side.

Standard library only.
"""

import contextlib
import subprocess
import sys


@contextlib.contextmanager
def busy(n):
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(n)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
