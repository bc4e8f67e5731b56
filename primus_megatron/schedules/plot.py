"""Timeline pictures of one or several schedules (PNG or SVG).

Input is what the simulator returns (`SimResult`, or its `.timeline`) or a
timeline measured by the runtime: per rank a list of objects with `.op`
(kind, mb, chunk), `.start` and `.end`. Several inputs give one subplot each,
on a shared time axis, titled with the schedule's makespan, bubble rates and
peak activation memory (where known).

matplotlib is imported only when a picture is drawn, so the planner and the
CLI import without it.
"""
from __future__ import annotations

import dataclasses
import io
import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from .atomic_file import atomic_write
from .errors import ScheduleError
from .trace import op_fields

PLOT_FORMATS = {".png": "png", ".svg": "svg"}

# Okabe-Ito palette: distinguishable with the common colour-vision deficiencies.
KIND_COLOURS = {"F": "#0072B2", "B": "#E69F00", "W": "#009E73", "BW": "#CC79A7", "D2H": "#D55E00",
                "H2D": "#56B4E9", "D2H-W": "#EBAA80", "H2D-W": "#AAD9F4"}
KIND_LABELS = {"F": "F: forward", "B": "B: input gradient", "W": "W: weight gradient",
               "BW": "BW: full backward (B+W)", "D2H": "activations to host (offload lane)",
               "H2D": "activations back (reload lane)", "D2H-W": "what B keeps for W, to host (offload lane)",
               "H2D-W": "what B keeps for W, back (reload lane)"}
OTHER_COLOUR = "#999999"
CHUNK_HATCHES = ("", "///", "...", "xxx")  # chunk 0 solid, later chunks lighter and hatched


@dataclass
class Panel:
    """One subplot: a timeline and what its title says."""

    name: str
    timeline: list[list[Any]]
    makespan: float
    bubble_sync: float
    bubble_async: float
    peak_memory: Optional[float]
    simulated: bool
    copies: Optional[list] = None  # per rank: offload copies (schedules.offload.Copy), drawn as two thin lanes


def plot_format(path: str | os.PathLike) -> str:
    """'png' or 'svg' from the file name; a one-sentence ScheduleError otherwise."""
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in PLOT_FORMATS:
        raise ScheduleError(f"plot file {os.fspath(path)!r} must end in {' or '.join(PLOT_FORMATS)}, got {ext or 'no extension'!r}")
    return PLOT_FORMATS[ext]


def _is_span(x: Any) -> bool:
    return hasattr(x, "op") and hasattr(x, "start") and hasattr(x, "end")


def _is_timeline(x: Any) -> bool:
    """Per-rank lists of spans (at least one span somewhere, or all ranks empty)."""
    if isinstance(x, (str, bytes, Mapping)) or not isinstance(x, Sequence):
        return False
    if not all(isinstance(r, Sequence) and not isinstance(r, (str, bytes)) for r in x):
        return False
    spans = [s for r in x for s in r]
    return all(_is_span(s) for s in spans) and (bool(spans) or len(x) > 0)


def _timeline_panel(name: str, timeline: Sequence[Sequence[Any]]) -> Panel:
    """A panel for a bare (e.g. measured) timeline: stats computed from the spans."""
    ranks = [list(r) for r in timeline]
    starts = [float(s.start) for r in ranks for s in r]
    t0 = min(starts, default=0.0)
    if t0:
        ranks = [[_Shifted(s, t0) for s in r] for r in ranks]
    busy = [sum(float(s.end) - float(s.start) for s in r) for r in ranks]
    makespan = max((float(s.end) for r in ranks for s in r), default=0.0)
    spans = [max(float(s.end) for s in r) - min(float(s.start) for s in r) for r in ranks if r]
    period = max(spans, default=0.0)
    pp = max(1, len(ranks))
    sync = 1.0 - sum(busy) / (pp * makespan) if makespan > 0 else 0.0
    asyn = 1.0 - sum(busy) / (pp * period) if period > 0 else 0.0
    return Panel(name, ranks, makespan, max(0.0, sync), max(0.0, asyn), None, False)


class _Shifted:
    """A span moved in time so that a timeline starts at 0."""

    __slots__ = ("op", "start", "end")

    def __init__(self, span: Any, t0: float) -> None:
        self.op, self.start, self.end = span.op, float(span.start) - t0, float(span.end) - t0


def _result_panel(name: Optional[str], result: Any) -> Panel:
    schedule = getattr(result, "schedule", None)
    name = name or getattr(schedule, "name", None) or "schedule"
    peaks = getattr(result, "peak_memory", None)
    peak = max(peaks) if peaks else None
    return Panel(name, [list(r) for r in result.timeline], float(result.makespan), float(result.bubble_sync),
                 float(result.bubble_async), peak, True, getattr(result, "copies", None))


def _panel(name: Optional[str], item: Any) -> Panel:
    if hasattr(item, "timeline"):
        return _result_panel(name, item)
    if _is_timeline(item):
        return _timeline_panel(name or "timeline", item)
    raise TypeError(f"cannot draw {type(item).__name__}: give a SimResult or per-rank lists of spans "
                    f"with .op, .start and .end")


def panels(results_or_timelines: Any) -> list[Panel]:
    """Normalise the accepted inputs: a SimResult, a timeline, a `{name: either}`
    mapping, `(name, either)` pairs, or a list of any of these."""
    obj = results_or_timelines
    if isinstance(obj, Mapping):
        return [_panel(str(k), v) for k, v in obj.items()]
    if hasattr(obj, "timeline") or _is_timeline(obj):
        return [_panel(None, obj)]
    if isinstance(obj, Sequence) and not isinstance(obj, (str, bytes)) and obj:
        out = []
        for i, item in enumerate(obj):
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
                out.append(_panel(item[0], item[1]))
            else:
                p = _panel(None, item)
                if p.name == "timeline" and len(obj) > 1:
                    p.name = f"timeline {i}"
                out.append(p)
        return out
    raise TypeError("nothing to draw: give a SimResult, a timeline (per-rank lists of spans) or a list of them")


def _lighten(hex_colour: str, amount: float) -> tuple[float, float, float]:
    r, g, b = (int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)


def _text_colour(rgb: tuple[float, float, float]) -> str:
    lum = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]
    return "black" if lum > 0.45 else "white"


def _fmt(x: float) -> str:
    return f"{x:.4f}".rstrip("0").rstrip(".") if x == x else "nan"


def _title(p: Panel) -> str:
    parts = [p.name, f"makespan {_fmt(p.makespan)}",
             f"bubble sync {p.bubble_sync:.4f} / async {p.bubble_async:.4f}"]
    if p.peak_memory is not None:
        parts.append(f"peak memory {_fmt(p.peak_memory)}")
    return "   ".join([parts[0] + ":"] + parts[1:])


@dataclass(frozen=True)
class Labels:
    """What the picture says besides the ops: `notes`, a line drawn on the panel of that name; `titles`,
    a panel's whole title instead of its name and statistics; `own_axis`, the panels drawn last, each
    on a time axis of its own (e.g. a wall clock many times longer than the plan above it);
    `legend_note`, a line added to the legend's title."""

    notes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    titles: Mapping[str, str] = dataclasses.field(default_factory=dict)
    own_axis: frozenset = frozenset()
    legend_note: Optional[str] = None


def render_timeline(results_or_timelines: Any, fmt: str = "png", *, title: Optional[str] = None,
                    dpi: int = 110, time_unit: Optional[str] = None,
                    notes: Optional[Mapping[str, str]] = None, labels: Optional[Labels] = None) -> bytes:
    """The picture as bytes in `fmt` ('png' or 'svg'); see `plot_timeline`."""
    import matplotlib
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend
    from matplotlib.patches import Patch

    if fmt not in PLOT_FORMATS.values():
        raise ScheduleError(f"plot format must be one of {', '.join(PLOT_FORMATS.values())}, got {fmt!r}")
    labels = labels or Labels()
    if notes:
        labels = dataclasses.replace(labels, notes={**labels.notes, **notes})
    ps = panels(results_or_timelines)
    ps = [p for p in ps if p.name not in labels.own_axis] + [p for p in ps if p.name in labels.own_axis]
    # SVG keeps its text as text (searchable, smaller) instead of glyph outlines
    with matplotlib.rc_context({"hatch.linewidth": 0.6, "svg.fonttype": "none"}):
        return _render(ps, fmt, title, dpi, Figure, Patch, time_unit, labels)


def _render(ps: list[Panel], fmt: str, title: Optional[str], dpi: int, Figure: Any, Patch: Any,
            time_unit: Optional[str], labels: Labels) -> bytes:
    sizes = [max(1, len(p.timeline)) for p in ps]
    alone = [p.name in labels.own_axis for p in ps]
    row_in, head_in = 0.26, 0.55
    height = sum(n * row_in + head_in for n in sizes) + 1.3 + (0.3 if title else 0.0) + 0.3 * sum(alone)
    fig = Figure(figsize=(16.0, height), dpi=dpi, layout="constrained")
    simulated = all(p.simulated for p in ps)
    shared = simulated or time_unit is not None  # same time unit: one shared axis (own_axis panels aside)
    axes = fig.subplots(len(ps), 1, squeeze=False, gridspec_kw={"height_ratios": [n + 2.1 for n in sizes]})[:, 0]
    group = [ax for ax, a in zip(axes, alone) if not a]
    xmax = max((p.makespan for p, a in zip(ps, alone) if not a), default=1.0) or 1.0
    kinds_seen: list[str] = []
    max_chunk = 0
    boxes = []  # (ax, x, width, y, mb, text colour)
    for ax, p, a in zip(axes, ps, alone):
        max_chunk = max(max_chunk, _draw_panel(ax, p, kinds_seen, boxes, labels.notes.get(p.name),
                                               labels.titles.get(p.name)))
        ax.set_xlim(0, (xmax if shared and not a else (p.makespan or 1.0)) * 1.005)
        if shared and not a and ax is not group[-1]:
            ax.tick_params(axis="x", labelbottom=False)  # the group's one scale, under its last panel
    if time_unit is not None:
        xlabel = f"time ({time_unit})"
    else:
        xlabel = "time (cost units: one rank's forward of one microbatch = 1)" if simulated else "time"
    for ax, a in zip(axes, alone):
        if a or ax is (group[-1] if shared and group else axes[-1]):
            ax.set_xlabel(xlabel + (", an axis of its own" if a else ""), fontsize=9)
    with_memory = any(p.peak_memory is not None and p.name not in labels.titles for p in ps)
    _legend(fig, Patch, kinds_seen, max_chunk, with_memory, labels.legend_note)
    if title:
        fig.suptitle(title, fontsize=12)
    _label_boxes(fig, axes, boxes)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi)
    return buf.getvalue()


def _draw_panel(ax: Any, p: Panel, kinds_seen: list, boxes: list, note: Optional[str],
                title: Optional[str] = None) -> int:
    """One schedule's rows: ops as bars grouped by (rank, kind, chunk); returns its highest chunk.
    Records the kinds drawn in `kinds_seen` and the boxes to label in `boxes`."""
    pp = max(1, len(p.timeline))
    max_chunk = 0
    # (rank, kind, chunk, part) -> bars; part 0: the whole row, 1 / 2: the upper / lower half of an
    # overlapped pair (two consecutive spans of one rank over the same time: an F and a B or BW)
    groups: dict[tuple[int, str, int, int], list[tuple[float, float]]] = {}
    for rank, spans in enumerate(p.timeline):
        parts = _pair_parts(spans)
        for s, part in zip(spans, parts):
            kind, mb, chunk = op_fields(s.op)
            x, w = float(s.start), float(s.end) - float(s.start)
            if w <= 0:
                continue
            groups.setdefault((rank, kind, chunk, part), []).append((x, w))
            if kind not in kinds_seen:
                kinds_seen.append(kind)
            max_chunk = max(max_chunk, chunk)
            if mb is not None and part != 2:  # a pair is labelled once: "F's | B's microbatch"
                label = str(mb) if part == 0 else f"{mb}|{op_fields(spans[spans.index(s) + 1].op)[1]}"
                boxes.append((ax, x, w, rank, label, _text_colour(_face(kind, chunk))))
    lanes = bool(p.copies and any(p.copies))
    height = 0.56 if lanes else 0.84  # with offload, the ops' row leaves room for the two copy lanes below it
    for (rank, kind, chunk, part), bars in groups.items():
        base = KIND_COLOURS.get(kind, OTHER_COLOUR)
        y, h = (rank - 0.42, height) if part == 0 else (rank - 0.42 + (part - 1) * height / 2, height / 2)
        ax.broken_barh(bars, (y, h), facecolors=_face(kind, chunk), edgecolor=base if chunk else "white",
                       linewidth=0.4, hatch=CHUNK_HATCHES[min(chunk, len(CHUNK_HATCHES) - 1)])
    if lanes:
        for rank, copies in enumerate(p.copies):
            for lane, direction in enumerate(("D2H", "H2D")):
                for share, kind in ((False, direction), (True, f"{direction}-W")):  # F's activations; W shares
                    bars = [(float(c.start), float(c.end) - float(c.start)) for c in copies
                            if c.direction == direction and c.end > c.start and (len(c.key) == 3) == share]
                    if bars:
                        ax.broken_barh(bars, (rank + 0.16 + 0.13 * lane, 0.12), facecolors=KIND_COLOURS[kind],
                                       edgecolor="white", linewidth=0.3)
                        if kind not in kinds_seen:
                            kinds_seen.append(kind)
    ax.set_ylim(pp - 0.5, -0.5)
    ax.set_yticks(range(pp))
    ax.set_yticklabels([f"rank {r}" for r in range(pp)], fontsize=8)
    ax.tick_params(axis="y", length=0)
    for r in range(pp + 1):
        ax.axhline(r - 0.5, color="#dddddd", linewidth=0.6, zorder=0)
    ax.axvline(p.makespan, color="#444444", linewidth=0.8, linestyle=(0, (3, 3)), zorder=0)
    ax.set_title(title or _title(p), loc="left", fontsize=10)
    if note:  # e.g. why a measured timeline cannot show the schedule's own bubbles
        ax.text(0.995, 1.02, note, transform=ax.transAxes, ha="right", va="bottom", fontsize=8.5,
                style="italic", color="#8b0000", wrap=True)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.tick_params(axis="x", labelsize=8)
    return max_chunk


def _pair_parts(spans: Sequence[Any]) -> list[int]:
    """Per span: 0, or 1 and 2 for the first and second half of an overlapped pair (a span followed by
    one over exactly the same time)."""
    parts = [0] * len(spans)
    for i in range(len(spans) - 1):
        a, b = spans[i], spans[i + 1]
        if parts[i] == 0 and float(a.end) > float(a.start) and (float(a.start), float(a.end)) == (
                float(b.start), float(b.end)):
            parts[i], parts[i + 1] = 1, 2
    return parts


def _face(kind: str, chunk: int) -> tuple[float, float, float]:
    """A box's fill: the kind's colour, lighter for chunks after the first."""
    return _lighten(KIND_COLOURS.get(kind, OTHER_COLOUR), 0.55 if chunk else 0.0)


def _legend(fig: Any, Patch: Any, kinds_seen: list, max_chunk: int, with_memory: bool,
            note: Optional[str] = None) -> None:
    handles = [Patch(facecolor=KIND_COLOURS.get(k, OTHER_COLOUR), edgecolor="white", label=KIND_LABELS.get(k, k))
               for k in sorted(kinds_seen, key=lambda k: list(KIND_COLOURS).index(k) if k in KIND_COLOURS else 9)]
    if max_chunk:
        handles.append(Patch(facecolor="#666666", edgecolor="white", label="chunk 0: solid"))
        for c in range(1, min(max_chunk, len(CHUNK_HATCHES) - 1) + 1):
            what = f"chunk {c} (the rank's model chunk {c})"
            handles.append(Patch(facecolor=_lighten("#666666", 0.55), edgecolor="#666666",
                                 hatch=CHUNK_HATCHES[c], label=f"{what}: light, hatched"))
    handles.append(Patch(facecolor="white", edgecolor="#999999", label="empty: idle"))
    legend_title = "number in a box = microbatch; dashed line = makespan"
    if with_memory:
        legend_title += "; memory in units of one microbatch's activations on one rank"
    if note:
        legend_title += "\n" + note
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 8), fontsize=9,
               title=legend_title, title_fontsize=9, frameon=False)


def _label_boxes(fig: Any, axes: Any, boxes: list) -> None:
    """Label boxes with their microbatch once the layout is fixed: only where the number fits."""
    fig.draw_without_rendering()
    fig.set_layout_engine("none")  # freeze it: the labels must not move anything
    pt_per_unit = {}
    for ax in axes:
        bbox = ax.get_window_extent()
        lo, hi = ax.get_xlim()
        pt_per_unit[ax] = bbox.width * 72.0 / fig.dpi / (hi - lo)
    for ax, x, w, rank, label, colour in boxes:
        box_pt = w * pt_per_unit[ax]
        for size in (7.0, 6.0, 5.0):
            if box_pt >= 0.62 * size * len(label) + 2.5:
                ax.text(x + w / 2, rank, label, ha="center", va="center", fontsize=size, color=colour,
                        in_layout=False)
                break


def plot_timeline(results_or_timelines: Any, path: str | os.PathLike, *, title: Optional[str] = None,
                  time_unit: Optional[str] = None, notes: Optional[Mapping[str, str]] = None,
                  labels: Optional[Labels] = None) -> None:
    """Draw one subplot per schedule (one row per rank, ops as boxes coloured by
    kind, chunk 1 lighter and hatched, idle time empty) and write `path`
    (.png or .svg, atomically). Accepts a SimResult, a timeline (simulated or
    measured), a `{name: either}` mapping or a list of them. `time_unit`: every
    panel is in that unit (e.g. a plan simulated from measured milliseconds next
    to the measurement): one shared time axis. `notes`: a line of text drawn on
    the panel of that name; `labels`: titles, notes and axes of named panels (`Labels`)."""
    fmt = plot_format(path)
    atomic_write(path, render_timeline(results_or_timelines, fmt, title=title, time_unit=time_unit, notes=notes,
                                       labels=labels))
