"""Chrome / Perfetto trace export of a timeline (open in https://ui.perfetto.dev or chrome://tracing).

A timeline is what `simulation.simulate` returns in `SimResult.timeline`: per
rank a list of spans with `.op` (kind, mb, chunk), `.start`, `.end` and,
optionally, `.stage`. A timeline measured by the runtime has the same shape,
so both are exported the same way. One process per schedule, one thread per
rank, one complete event (`"ph": "X"`) per op.
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, Optional, Sequence

from .atomic_file import atomic_write


def op_fields(op: Any) -> tuple[str, Optional[int], int]:
    """(kind, mb, chunk) of an op given as an object with attributes or as a tuple."""
    if hasattr(op, "kind"):
        return str(op.kind), getattr(op, "mb", None), int(getattr(op, "chunk", 0) or 0)
    if isinstance(op, str):
        return op, None, 0
    seq = tuple(op)
    return str(seq[0]), (seq[1] if len(seq) > 1 else None), int(seq[2]) if len(seq) > 2 else 0


def chrome_trace(timelines: Mapping[str, Sequence[Sequence[Any]]], *, us_per_unit: float = 1000.0) -> dict:
    """The trace object for `{schedule name: timeline}`: one process per schedule,
    one thread per rank. Times are multiplied by `us_per_unit` (default 1000:
    one cost unit of the simulator shows as 1 ms; use 1e6 for times in seconds)."""
    events: list[dict] = []
    for pid, (name, timeline) in enumerate(timelines.items()):
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": str(name)}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        for rank, spans in enumerate(timeline):
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": rank, "args": {"name": f"rank {rank}"}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": rank, "args": {"sort_index": rank}})
            for span in spans:
                kind, mb, chunk = op_fields(span.op)
                start, end = float(span.start), float(span.end)
                label = kind + (str(mb) if mb is not None else "") + (f".{chunk}" if chunk else "")
                events.append({
                    "name": label, "cat": kind, "ph": "X", "pid": pid, "tid": rank,
                    "ts": round(start * us_per_unit, 6), "dur": round(max(0.0, end - start) * us_per_unit, 6),
                    "args": {"mb": mb, "chunk": chunk, "stage": getattr(span, "stage", None)},
                })
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def chrome_trace_json(timeline: Any, *, name: str = "schedule", us_per_unit: float = 1000.0) -> str:
    """JSON text of the trace; `timeline` is one timeline (named `name`) or a
    mapping `{name: timeline}` for several schedules (one process each)."""
    timelines = dict(timeline) if isinstance(timeline, Mapping) else {name: timeline}
    return json.dumps(chrome_trace(timelines, us_per_unit=us_per_unit), separators=(",", ":"))


def write_chrome_trace(timeline: Any, path: str | os.PathLike, *, name: str = "schedule",
                       us_per_unit: float = 1000.0) -> None:
    """Write the Chrome/Perfetto trace JSON of `timeline` to `path` (atomically)."""
    atomic_write(path, chrome_trace_json(timeline, name=name, us_per_unit=us_per_unit))

