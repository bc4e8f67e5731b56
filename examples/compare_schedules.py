"""Compare every registered pipeline schedule for pp=8 and 24 microbatches.

    python examples/compare_schedules.py        (or: make plan)

Prints the comparison table (makespan, bubble rates, peak activation memory)
and writes out/schedules_pp8_m24.png, one timeline per schedule. A thin
wrapper over `primus-pipeline compare --pp 8 --microbatches 24 --plot ...`;
no GPU, no torch needed.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

try:
    from primus_megatron import cli
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, ROOT)
    from primus_megatron import cli


def main() -> int:
    out = os.path.join(ROOT, "out")
    os.makedirs(out, exist_ok=True)
    picture = os.path.join(out, "schedules_pp8_m24.png")
    rc = cli.main(["compare", "--pp", "8", "--microbatches", "24", "--plot", picture])
    if rc == 0:
        shown = os.path.relpath(picture)
        print(f"\ntimeline picture: {picture if shown.startswith('..') else shown}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
