"""Which of our pipeline schedules this test run exercises.

All of them by default. PRIMUS_TEST_SCHEDULES (comma-separated registered names) limits them:
the second CI leg (newer megatron-core, Makefile) sets it. Schedules are pure Python and the
same under every megatron-core; what a megatron-core version changes is the runtime's contact
with it, which one schedule of each kind reaches: 1f1b (one backward op), zb-h1 (split
backward, deferred W) and zbv (V placement, both ends of the model on rank 0; planned with an
all-to-all cost, overlapped F&B pairs through megatron's combined step, as dualpipev). Names that are
not registered schedules (megatron's own, `None`, `auto`) always stay.
"""
from __future__ import annotations

import os
from typing import Iterable, Optional

ENV = "PRIMUS_TEST_SCHEDULES"


def chosen() -> Optional[set]:
    """The schedules this run is limited to, or None (every one)."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return None
    from primus_megatron import schedules as S

    names = {n.strip() for n in text.split(",") if n.strip()}
    unknown = sorted(names - set(S.names()))
    if unknown:
        raise ValueError(f"{ENV} names {', '.join(unknown)}; registered schedules: {', '.join(S.names())}")
    return names


def _kept(name, limit: Optional[set]) -> bool:
    if limit is None or not isinstance(name, str):
        return True
    from primus_megatron import schedules as S

    return name not in S.names() or name in limit


def under_test(names: Iterable) -> list:
    """`names` limited to this run's schedules (order kept)."""
    limit = chosen()
    return [n for n in names if _kept(n, limit)]


def item_kept(params: dict, limit: Optional[set] = None) -> bool:
    """Whether a parametrized test stays under `limit` (default: this run's `chosen()`): none of
    its values (or tuple members) names a left-out schedule."""
    limit = chosen() if limit is None else limit
    return all(_kept(v, limit) for value in params.values()
               for v in (value if isinstance(value, tuple) else (value,)))
