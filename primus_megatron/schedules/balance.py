"""A layer split balanced from measured costs (pure Python, no torch).

Under the V placement rank 0 holds the first and the last stage: the
embedding, the output layer and the loss land on one rank while the layers
are split evenly, and with a large vocabulary the output layer and the loss
cost as much as several transformer layers. megatron-core moves layers only
through four options (`layer_split`): the layer counts of the first and last
pipeline rank, and the embedding / loss counted as a layer of the first /
last virtual stage. This module:

* fits a cost model to measured per-stage costs: each stage's F, B and W time
  is its transformer layers times a per-layer cost, plus the embedding's
  cost on stage 0 and the head's (output layer and loss) on the last stage
  (`fit`; least squares over the stages; with only two kinds of stage, as on
  two loop-placed ranks, the embedding is taken as free, since its lookup is
  small next to a layer);
* enumerates every split megatron-core can build for the pipeline
  (`candidates`), simulates the schedule under each (cost-driven schedules
  are planned for each split's own costs) and keeps the fastest that fits the
  memory limit (`choose`), reporting the gain over the even split.

Costs and memory follow the simulator's units: time in whatever unit the
profile uses, activation memory in microbatches of an average rank's layers.
A profile is saved and read as JSON (`save_profile`, `load_profile`), so a
launch can take the split measured by an earlier one.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import shlex
from dataclasses import asdict, dataclass, field, replace
from typing import Optional, Sequence

from .costs import Costs
from .errors import ScheduleError
from .ir import stage_of
from .layer_split import CLI, LayerSplit, check, layout_string, stage_layers

FORMAT = "primus-pipeline-profile/1"


@dataclass(frozen=True)
class Part:
    """F, B and W time of one piece of the model for one microbatch."""

    f: float = 0.0
    b: float = 0.0
    w: float = 0.0


@dataclass(frozen=True)
class ModelCosts:
    """Per-microbatch costs of one transformer layer, the embedding and the head
    (output layer and loss), the p2p time of one activation, the head's
    activation memory in layers (logits of a large vocabulary), `fused`: a
    backward run as one op (BW)'s time over B + W, where measured, and
    `wgrad_memory`: the share of an F's activations the weight gradient keeps
    from B until W (B frees the rest; 1.0, the default, has W free everything;
    measured runs keep about 32h / (34h + 5as) of a transformer layer's)."""

    layer: Part
    embedding: Part = field(default_factory=Part)
    head: Part = field(default_factory=Part)
    comm: float = 0.0
    head_memory: float = 0.0
    fused: float = 1.0
    wgrad_memory: float = 1.0


def stage_parts(split: LayerSplit, pp: int, chunks: int) -> list[tuple[int, int, int]]:
    """(transformer layers, holds the embedding, holds the head) of every global stage."""
    layers = stage_layers(split, pp, chunks)
    n = len(layers)
    return [(count, int(s == 0), int(s == n - 1)) for s, count in enumerate(layers)]


def stage_costs(model: ModelCosts, split: LayerSplit, pp: int, chunks: int) -> Costs:
    """Per-stage simulator costs of `split` under `model`."""
    parts = stage_parts(split, pp, chunks)
    per_rank = split.num_layers / pp  # memory unit: an average rank's layers
    def kind(k: str) -> list[float]:
        return [n * getattr(model.layer, k) + e * getattr(model.embedding, k) + h * getattr(model.head, k)
                for n, e, h in parts]
    mem = [(n + h * model.head_memory) / per_rank for n, _, h in parts]
    b, w = kind("b"), kind("w")
    bw = None if model.fused == 1.0 else [(x + y) * model.fused for x, y in zip(b, w)]
    kept = model.wgrad_memory
    return Costs(f=kind("f"), b=b, w=w, comm=model.comm, mem_f=mem, mem_b=[-(1.0 - kept) * x for x in mem],
                 mem_w=[-kept * x for x in mem], bw=bw)


@dataclass(frozen=True)
class LayoutCosts:
    """A profile's costs for whichever chunk layout asks: `self(chunks)` is the stage costs of `split`
    over `pp` ranks with `chunks` per rank. Schedules of other layouts run side by side (a V schedule
    against megatron's 1F1B) take their own: per-stage lists of one layout do not fit the other's."""

    model: ModelCosts
    split: LayerSplit
    pp: int

    def __call__(self, chunks: int) -> Costs:
        return stage_costs(self.model, self.split, self.pp, chunks)


def retimed(costs: Costs, model: ModelCosts, split: LayerSplit, pp: int, chunks: int) -> Costs:
    """`costs` (memory and p2p as measured) with F, B and W times from `model` on the stages of
    a schedule with `chunks` per rank: measured per-rank shares would keep the head on the
    last rank, where under V it sits on rank 0 with the embedding."""
    times = stage_costs(model, split, pp, chunks)
    return replace(costs, f=times.f, b=times.b, w=times.w, bw=times.bw)


# -- fitting ---------------------------------------------------------------------------------------

def _solve(rows: list[list[float]], values: list[float]) -> Optional[list[float]]:
    """Least squares through the normal equations (Gaussian elimination); None if singular."""
    k = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(k)] + [sum(r[i] * v for r, v in zip(rows, values))]
         for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda i: abs(a[i][col]))
        if abs(a[pivot][col]) < 1e-12 * max(1.0, max(abs(x) for row in a for x in row[:k])):
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for i in range(k):
            if i != col:
                factor = a[i][col] / a[col][col]
                a[i] = [x - factor * y for x, y in zip(a[i], a[col])]
    return [a[i][k] / a[i][i] for i in range(k)]


def _per_stage(value, n: int) -> list[float]:
    return [float(value)] * n if isinstance(value, (int, float)) else [float(v) for v in value]


def fit(measured: Costs, split: LayerSplit, pp: int, chunks: int, *, head_memory: float = 0.0) -> ModelCosts:
    """The cost model that best explains per-stage measured costs (`measured`'s
    f, b, w: one value per global stage) of a run on `split`."""
    parts = stage_parts(split, pp, chunks)
    n = len(parts)
    out = {}
    for k in ("f", "b", "w"):
        values = _per_stage(getattr(measured, k), n)
        if len(values) != n:
            raise ScheduleError(f"measured {k.upper()} costs have {len(values)} entries, expected one per stage ({n})")
        full = _solve([[float(a), float(e), float(h)] for a, e, h in parts], values) if n >= 3 else None
        if full is None:  # two kinds of stage only: the embedding's lookup taken as free
            full = _solve([[float(a), float(h)] for a, _, h in parts], values)
            full = None if full is None else [full[0], 0.0, full[1]]
        if full is None:
            raise ScheduleError("the measured stages do not determine a per-layer cost (every stage holds the same "
                                "parts); profile a pipeline of at least 2 ranks")
        out[k] = [max(0.0, x) for x in full]  # noise can make a small part slightly negative
    return ModelCosts(layer=Part(out["f"][0], out["b"][0], out["w"][0]),
                      embedding=Part(out["f"][1], out["b"][1], out["w"][1]),
                      head=Part(out["f"][2], out["b"][2], out["w"][2]),
                      comm=float(measured.comm) if isinstance(measured.comm, (int, float)) else max(measured.comm),
                      head_memory=head_memory,
                      fused=1.0 if measured.bw is None else fused_ratio(measured, measured),
                      wgrad_memory=wgrad_memory(measured))


def wgrad_memory(measured: Costs) -> float:
    """The share of the F's activations that W frees (what B left for the weight gradient),
    over all stages of measured costs, in [0, 1]; 1.0 where F measured none."""
    lists = [len(v) for v in (measured.mem_f, measured.mem_w) if not isinstance(v, (int, float))]
    n = lists[0] if lists else 1
    added = sum(_per_stage(measured.mem_f, n))
    if added <= 0:
        return 1.0
    return min(1.0, max(0.0, -sum(_per_stage(measured.mem_w, n)) / added))


def fused_ratio(unsplit: Costs, split: Costs) -> float:
    """A backward run as one op's time over B + W's, from two profiles of the same stages:
    `unsplit`'s BW times (a schedule that ran BW ops, such as 1f1b) and `split`'s B and W
    times (one that ran them apart). 1.0 where `unsplit` measured no BW."""
    if unsplit.bw is None:
        return 1.0
    lists = [len(v) for v in (unsplit.bw, split.b, split.w) if not isinstance(v, (int, float))]
    if len(set(lists)) > 1:
        raise ScheduleError(f"the two profiles have {sorted(set(lists))} stages: measure both on the same stages")
    n = lists[0] if lists else 1
    apart = sum(_per_stage(split.b, n)) + sum(_per_stage(split.w, n))
    return sum(_per_stage(unsplit.bw, n)) / apart if apart > 0 else 1.0


# -- choosing --------------------------------------------------------------------------------------

def candidates(num_layers: int, pp: int, chunks: int, *, w_ops: bool, model: Optional[ModelCosts] = None,
               placement: str = "loop", exhaustive: bool = True) -> list[LayerSplit]:
    """Every split megatron-core builds for the pipeline with its first/last and
    embedding/loss options, then layouts (one per distinct layer layout): every
    one while there are few, else those that balance the ranks' work under
    `model` (`balanced_layouts`). Not `exhaustive`: the even split, the
    embedding/loss options and the balanced layouts only (a few, for ranking
    every schedule in seconds)."""
    options = [LayerSplit(num_layers)]
    options += [LayerSplit(num_layers, embedding=e, loss=l) for e in (False, True) for l in (False, True) if e or l]
    steps = range(chunks, num_layers, chunks) if exhaustive else range(0)
    options += [LayerSplit(num_layers, first=f) for f in steps]
    options += [LayerSplit(num_layers, last=l) for l in steps]
    options += [LayerSplit(num_layers, first=f, last=l) for f in steps for l in steps if f + l < num_layers]
    n = pp * chunks
    if exhaustive and _compositions(num_layers, n) <= EVERY_LAYOUT_UP_TO:
        counts = _every_composition(num_layers, n)
    else:
        counts = balanced_layouts(num_layers, pp, chunks, placement, model) if model is not None else []
    options += [LayerSplit(num_layers, layout=layout_string(c)) for c in counts]
    seen, out = set(), []
    for split in options:
        if check(split, pp, chunks, w_ops=w_ops) is not None:
            continue
        layout = tuple(stage_layers(split, pp, chunks))
        if layout not in seen:
            seen.add(layout)
            out.append(split)
    return out


EVERY_LAYOUT_UP_TO = 400  # layouts with one layer or more per stage; beyond, the balanced ones only


def _compositions(total: int, parts: int) -> int:
    """Ways to write `total` as `parts` positive summands."""
    return math.comb(total - 1, parts - 1) if total >= parts >= 1 else 0


def _every_composition(total: int, parts: int) -> list[list[int]]:
    """Every way to write `total` as `parts` positive summands (cut points between layers)."""
    return [[b - a for a, b in zip((0,) + cuts, cuts + (total,))]
            for cuts in itertools.combinations(range(1, total), parts - 1)]


def balanced_layouts(num_layers: int, pp: int, chunks: int, placement: str, model: ModelCosts) -> list[list[int]]:
    """Per-stage layer counts that even out the ranks' work (F + B + W) under
    `model`: the layers go one at a time to the least loaded rank, counting the
    embedding and the head on the ranks that hold them (with the head weighed
    at 1/2, 1 and 3/2 of its fitted cost, as the fit is noisy), and each rank's
    layers are shared by its chunks as evenly as can be, the odd layer first
    in the earlier or in the later chunk."""
    n = pp * chunks
    if num_layers < n:
        return []
    def work(part: Part) -> float:
        return part.f + part.b + part.w
    per_layer = max(work(model.layer), 1e-12)
    stages_of = [[stage_of(placement, pp, r, c) for c in range(chunks)] for r in range(pp)]
    out = []
    for head_weight in (0.5, 1.0, 1.5):
        load = [0.0] * pp
        for r, stages in enumerate(stages_of):
            load[r] += work(model.embedding) * (0 in stages) + head_weight * work(model.head) * (n - 1 in stages)
        layers = [chunks] * pp  # every stage keeps a layer
        load = [x + chunks * per_layer for x in load]
        for _ in range(num_layers - chunks * pp):
            r = min(range(pp), key=lambda i: (load[i], i))
            layers[r] += 1
            load[r] += per_layer
        for later_first in (False, True):
            counts = [0] * n
            for r, stages in enumerate(stages_of):
                share, odd = divmod(layers[r], chunks)
                order = sorted(stages, reverse=later_first)
                for i, s in enumerate(order):
                    counts[s] = share + (i < odd)
            out.append(counts)
    return out


@dataclass
class Candidate:
    split: LayerSplit
    layers: tuple[int, ...]  # per global stage
    iteration: Optional[float]
    peak_memory: Optional[float]
    note: str = ""


def flag_args(split: LayerSplit) -> list[str]:
    """The split as Megatron-LM's command-line arguments, one list item per argv word ([] for the even split)."""
    out = []
    if split.first is not None:
        out += [CLI["first"], str(split.first)]
    if split.last is not None:
        out += [CLI["last"], str(split.last)]
    if split.embedding:
        out.append(CLI["embedding"])
    if split.loss:
        out.append(CLI["loss"])
    if split.layout:
        out += [CLI["layout"], split.layout]
    return out


def flags(split: LayerSplit) -> str:
    """The split as Megatron-LM's command-line options, quoted for a shell ('' for the even split)."""
    return shlex.join(flag_args(split))


def evaluate(name: str, pp: int, microbatches: int, model: ModelCosts, split: LayerSplit, *,
             memory_limit: Optional[float] = None, post_validation: bool = False) -> Candidate:
    """Simulated iteration time and peak memory of schedule `name` on `split`."""
    from .registry import generate, info
    from .simulation import simulate

    entry = info(name)
    chunks = entry.chunks
    layers = tuple(stage_layers(split, pp, chunks))
    costs = stage_costs(model, split, pp, chunks)
    try:
        sched = generate(name, pp, microbatches, costs=costs,
                         memory_limit=memory_limit if entry.cost_driven else None, post_validation=post_validation)
        result = simulate(sched, costs)
    except ScheduleError as exc:
        return Candidate(split, layers, None, None, str(exc))
    peak = max(result.peak_memory)
    iteration = max(result.span) if post_validation else result.makespan
    note = "" if memory_limit is None or peak <= memory_limit + 1e-9 else f"needs {peak:.2f} > limit {memory_limit:g}"
    return Candidate(split, layers, iteration, peak, note)


def choose(name: str, pp: int, microbatches: int, model: ModelCosts, num_layers: int, *,
           memory_limit: Optional[float] = None, post_validation: bool = False,
           exhaustive: bool = True) -> tuple[Candidate, list[Candidate]]:
    """(the fastest split that fits, every candidate) for schedule `name`.

    A rank given more layers keeps more activations per microbatch: every row
    reports its peak, and `memory_limit` (units: an average rank's layers for
    one microbatch) excludes what exceeds it. The even split wins ties (it
    needs no option). `exhaustive`: as `candidates` takes it."""
    from .registry import info

    entry = info(name)
    splits = candidates(num_layers, pp, entry.chunks, w_ops=entry.splits_backward, model=model,
                        placement=entry.placement, exhaustive=exhaustive)
    rows = [evaluate(name, pp, microbatches, model, split, memory_limit=memory_limit,
                     post_validation=post_validation) for split in splits]
    fitting = [c for c in rows if c.iteration is not None and not c.note]
    if not fitting:
        built = [c for c in rows if c.iteration is not None]
        why = f" ({rows[0].note})" if rows and not built else ""  # nothing built: say why the first was not
        raise ScheduleError(f"no layer split of {num_layers} layers fits {name} on {pp} pipeline ranks"
                            + (f" within the memory limit {memory_limit:g}" if memory_limit is not None and built
                               else "") + why)
    best = min(fitting, key=lambda c: (c.iteration, len(flags(c.split))))
    even = next((c for c in fitting if not flags(c.split)), None)
    if even is not None and even.iteration <= best.iteration * (1 + 1e-6):
        best = even  # no gain: keep the split that needs no option
    return best, rows


@dataclass
class ScheduleChoice:
    """One schedule's fastest split (`best`, None where none fits: `note` says why) and every candidate."""

    name: str
    best: Optional[Candidate]
    rows: list[Candidate]
    note: str = ""


def per_schedule(names: Sequence[str], pp: int, microbatches: int, model: ModelCosts, num_layers: int, *,
                 memory_limit: Optional[float] = None, post_validation: bool = False,
                 exhaustive: bool = True) -> list[ScheduleChoice]:
    """`choose` for each of `names`, in their order (a schedule no split fits has its reason)."""
    out = []
    for name in names:
        try:
            cand, rows = choose(name, pp, microbatches, model, num_layers, memory_limit=memory_limit,
                                post_validation=post_validation, exhaustive=exhaustive)
        except ScheduleError as exc:
            out.append(ScheduleChoice(name, None, [], str(exc)))
            continue
        out.append(ScheduleChoice(name, cand, rows))
    return out


def choose_schedule_and_split(names: Sequence[str], pp: int, microbatches: int, model: ModelCosts, num_layers: int,
                              *, memory_limit: Optional[float] = None,
                              post_validation: bool = False) -> tuple[str, Candidate, list[Candidate]]:
    """The fastest (schedule, split) over `names` (`--pipeline-schedule auto` with a
    profile): (name, its best candidate, that schedule's candidates); the first of `names` wins a tie."""
    best = None
    for choice in per_schedule(names, pp, microbatches, model, num_layers, memory_limit=memory_limit,
                               post_validation=post_validation):
        if choice.best is not None and (best is None or choice.best.iteration < best[1].iteration * (1 - 1e-9)):
            best = (choice.name, choice.best, choice.rows)
    if best is None:
        raise ScheduleError(f"no registered schedule and layer split fits {num_layers} layers on {pp} pipeline ranks"
                            + (f" within the memory limit {memory_limit:g}" if memory_limit is not None else ""))
    return best


def table(rows: Sequence[Candidate], best: Candidate, even: Optional[Candidate] = None) -> str:
    """One line per candidate, fastest first; gain relative to the even split."""
    even = even or next((c for c in rows if not flags(c.split)), None)
    head = f"{'layers per stage':24s} {'iteration':>10s} {'vs even':>8s} {'peak mem':>8s}  options"
    lines = [head]
    for c in sorted(rows, key=lambda c: (c.iteration is None, c.iteration or 0.0))[:12]:
        layout = ",".join(map(str, c.layers))
        if c.iteration is None:
            lines.append(f"{layout:24s} {'-':>10s} {'-':>8s} {'-':>8s}  {flags(c.split) or '(even)'}: {c.note}")
            continue
        gain = f"{c.iteration / even.iteration:.3f}" if even and even.iteration else "-"
        mark = "  <- chosen" if c is best else ""
        lines.append(f"{layout:24s} {c.iteration:10.4g} {gain:>8s} {c.peak_memory:8.2f}  "
                     f"{flags(c.split) or '(even)'}{(' ' + c.note) if c.note else ''}{mark}")
    return "\n".join(lines)


# -- profile files ---------------------------------------------------------------------------------

def save_profile(path: str, model: ModelCosts, *, meta: Optional[dict] = None) -> None:
    from .atomic_file import atomic_write

    atomic_write(path, json.dumps({"format": FORMAT, "costs": asdict(model), "meta": meta or {}}, indent=2) + "\n")


def load_profile(path: str) -> ModelCosts:
    """A profile written by `save_profile`; a one-sentence ScheduleError otherwise."""
    if not os.path.isfile(path):
        raise ScheduleError(f"profile {path!r} does not exist")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if data.get("format") != FORMAT:
            raise ValueError
        c = data["costs"]
        model = ModelCosts(layer=Part(**c["layer"]), embedding=Part(**c["embedding"]), head=Part(**c["head"]),
                           comm=float(c["comm"]), head_memory=float(c.get("head_memory", 0.0)),
                           fused=float(c.get("fused", 1.0)), wgrad_memory=float(c.get("wgrad_memory", 1.0)))
    except (ValueError, KeyError, TypeError):
        raise ScheduleError(f"profile {path!r} is not a {FORMAT} file (write one with --pipeline-profile-out)") from None
    for part in (model.layer, model.embedding, model.head):
        if min(part.f, part.b, part.w) < 0:
            raise ScheduleError(f"profile {path!r} has negative costs")
    if not model.fused > 0:
        raise ScheduleError(f"profile {path!r} has a non-positive fused-backward ratio")
    if not 0.0 <= model.wgrad_memory <= 1.0:
        raise ScheduleError(f"profile {path!r} has a weight-gradient memory share outside [0, 1]")
    return model
