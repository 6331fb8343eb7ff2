"""``peagle-lab prepare``: download and convert the embedded default target once."""

from __future__ import annotations

import time

from ..models import convert_default


def register_cli(sub):
    prep = sub.add_parser("prepare", help="download and convert the embedded default target once")
    prep.set_defaults(func=run)


def run(args):
    t0 = time.perf_counter()
    path = convert_default()
    print(f"embedded target ready at {path} ({time.perf_counter() - t0:.1f} s)")
