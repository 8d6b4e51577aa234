#!/usr/bin/python3
"""bench/ib_line_rate.py without an RDMA device: its parser of ib_write_bw's
report, its reading of a device name, and its refusal to measure.

    /usr/bin/python3 tests/test_ib_line_rate.py --build build

The reports below are laid out as perftest's ib_write_bw prints them (its
banner, a dashed rule, the '#bytes #iterations' header, one row per size)
with invented numbers: they test the parser, they measure nothing.
Standard library only.
"""

import argparse
import subprocess
import sys
import unittest
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(SOURCE / "bench"))
import ib_line_rate  # noqa: E402

BUILD = None
RULE = "-" * 87
BANNER = f"""{RULE}
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : mlx5_0
 Number of qps   : 1            Transport type : IB
 Connection type : RC           Using SRQ      : OFF
 TX depth        : 128
 CQ Moderation   : 1
 Mtu             : 4096[B]
 Link type       : IB
 Max inline data : 0[B]
 rdma_cm QPs     : OFF
 Data ex. method : Ethernet
{RULE}
 local address: LID 0x05 QPN 0x0123 PSN 0x4c5d6e RKey 0x1fffbd VAddr 0x007f2b3c600000
 remote address: LID 0x06 QPN 0x0124 PSN 0x1a2b3c RKey 0x1fffbe VAddr 0x007f8e24a00000
{RULE}
"""

# --report_gbits: Gb/sec, 10^9 bits.
GBITS = BANNER + f""" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      5000             96.40              96.31  \t\t   0.183697
 67108864   100              96.52              96.48  \t\t   0.000180
{RULE}
"""

# perftest's default unit, MB/sec, is 2^20 bytes a second.
MBYTES = BANNER + f""" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 67108864   100              11506.27           11501.50  \t\t   0.000180
{RULE}
"""

# Dual-port mode: four more columns, the average still the fourth.
DUAL = BANNER + f""" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]   BW Port1[Gb/sec]   MsgRate Port1[Mpps]   BW Port2[Gb/sec]   MsgRate Port2[Mpps]
 67108864   200              190.10             189.92      0.000354        94.96      0.000177        94.96      0.000177
{RULE}
"""


class ParseWriteBw(unittest.TestCase):
    def test_gbits_become_gigabytes(self):
        got = ib_line_rate.parse_write_bw(GBITS)
        self.assertEqual(sorted(got), [65536, 67108864])
        self.assertAlmostEqual(got[67108864], 96.48 / 8)
        self.assertAlmostEqual(got[65536], 96.31 / 8)

    def test_mebibytes_become_gigabytes(self):
        got = ib_line_rate.parse_write_bw(MBYTES)
        self.assertAlmostEqual(got[67108864], 11501.50 * 2**20 / 1e9)

    def test_the_header_says_which_column_is_the_average(self):
        got = ib_line_rate.parse_write_bw(DUAL)
        self.assertAlmostEqual(got[67108864], 189.92 / 8)

    def test_what_is_not_a_report_is_refused(self):
        cases = {
            "no header": (BANNER + " Couldn't connect to 127.0.0.1:18515\n",
                          "no '#bytes #iterations' header"),
            "empty": ("", "no '#bytes #iterations' header"),
            "no row": (GBITS.split(" 65536")[0], "no row under it"),
            "unit": (GBITS.replace("Gb/sec", "Kb/sec"),
                     "unknown bandwidth unit 'Kb/sec'"),
            "short row": (GBITS.replace("96.31  \t\t   0.183697", ""),
                          "has 3 fields, the header 5"),
            "not a number": (GBITS.replace("96.48", "n/a"),
                             "'n/a' is not a bandwidth"),
        }
        for name, (text, why) in cases.items():
            with self.subTest(name):
                with self.assertRaises(ValueError) as e:
                    ib_line_rate.parse_write_bw(text)
                self.assertIn(why, str(e.exception))


class ParseHca(unittest.TestCase):
    def test_one_device_with_or_without_a_port(self):
        self.assertEqual(ib_line_rate.parse_hca("mlx5_0"), ("mlx5_0", None))
        self.assertEqual(ib_line_rate.parse_hca("=mlx5_0"), ("mlx5_0", None))
        self.assertEqual(ib_line_rate.parse_hca("mlx5_1:2"), ("mlx5_1", 2))
        self.assertEqual(ib_line_rate.parse_hca("=mlx5_1:1"), ("mlx5_1", 1))

    def test_forms_that_may_select_several_are_refused(self):
        for text in ("mlx5_0,mlx5_1", "^mlx5_1", "^=mlx5_1", "", "=",
                     "mlx5_0:", "mlx5_0:x"):
            with self.subTest(text):
                with self.assertRaises(ValueError):
                    ib_line_rate.parse_hca(text)


class NoDevice(unittest.TestCase):
    def test_exits_77_saying_why(self):
        sysfs = ib_line_rate.SYSFS
        if sysfs.is_dir() and any(sysfs.iterdir()):
            self.skipTest(f"this host has RDMA devices ({sysfs}): the "
                          "script measures here instead of refusing")
        p = subprocess.run(
            ["/usr/bin/python3", str(SOURCE / "bench" / "ib_line_rate.py"),
             "--build", str(BUILD)], capture_output=True, text=True,
            timeout=120)
        out = p.stdout + p.stderr
        self.assertEqual(p.returncode, 77, out)
        self.assertEqual(len(out.strip().splitlines()), 1, out)
        self.assertIn("ib_line_rate: cannot measure: this machine has no "
                      "RDMA device", out)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", type=Path, required=True,
                    help="hoop build directory")
    args, rest = ap.parse_known_args()
    BUILD = args.build.resolve()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
