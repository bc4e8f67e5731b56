"""The timeline picture of a stopped job's last step, up to the stop, from its ranks' reports:
each rank's ops of the step in progress, and the op it was inside when it reported drawn up to
that moment. Drawn by schedules/plot.py (matplotlib, imported only here)."""
from __future__ import annotations

from typing import Optional

from ..schedules import Op
from ..schedules.plot import plot_timeline
from .postmortem import Finding
from .reports import Folder


class _Span:
    __slots__ = ("op", "start", "end")

    def __init__(self, kind: str, mb: int, chunk: int, start: float, end: float) -> None:
        self.op, self.start, self.end = Op(kind, mb, chunk), start, end


def last_step(folder: Folder, size: int) -> list:
    """Per global rank 0..size-1 its spans (empty: no report, or no op recorded)."""
    rows: list = [[] for _ in range(size)]
    for rank, rep in folder.reports.items():
        if rank >= size:
            continue
        steps = rep.get("steps") or [[]]
        rows[rank] = [_Span(s["kind"], s["mb"], s["chunk"], s["start"], s["end"]) for s in steps[-1]]
        op = rep.get("op")
        if op:  # the op it was inside: up to the report
            rows[rank].append(_Span(op["kind"], op["mb"], op["chunk"], op["since"], rep["time"]))
    return rows


def write_picture(path: str, f: Finding, folder: Folder, size: Optional[int] = None) -> None:
    size = size or max([*folder.reports, *folder.crashes, *f.missing, 0]) + 1
    root = "no root" if f.root is None else f"rank {f.root} is the root ({f.state.get('status')})"
    plot_timeline({f"last step up to the stop (seconds); {root}": last_step(folder, size)}, path,
                  title="primus-pipeline postmortem")
