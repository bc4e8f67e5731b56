"""Sleeping until a deadline on `time.monotonic` (emulated devices' op and copy times)."""
from __future__ import annotations

import time


def wait_until(deadline: float) -> None:
    """Sleep until time.monotonic() reaches `deadline` (no core used while waiting)."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(left)
