"""Cost model: per-stage op times, p2p latency and activation memory.

Scalar values describe one rank's full layer share for one microbatch (what a
1F1B stage costs); an op on one of `chunks` chunks costs value / chunks. A list
of length `pp` gives per-rank shares (also divided by chunks); a list of length
`pp * chunks` gives per-virtual-stage values used as they are. `comm` is the
latency of one p2p message leaving a stage and is never divided.

`bw`, when given, is the time of a backward that is not split (a BW op: input
and weight gradients in one autograd pass, as megatron's 1F1B runs it), in
the same forms as `b`; it can be less than `b + w` (one pass over the saved
activations, no deferred closure). Left out, a BW op costs `b + w`.

`a2a` is the part of each F and of each B (or BW) that is expert-parallel all-to-all (token
dispatch and combine) rather than compute, in the same forms as `f`: alone, an op takes its
whole time (`f` includes its all-to-all). An overlapped pair (`ir.Pair`: an F and a B or BW run
as one op) hides each half's all-to-all under the other's compute: it takes both computations
plus what of each all-to-all the other's compute cannot cover,
(f - a) + (b - a') + max(0, a - (b - a')) + max(0, a' - (f - a)), with a, a' the halves' a2a
(`StageCosts.pair_duration`). With `a2a` 0 a pair costs f + b: no faster than the two ops.

`mb_scale`, when given, holds one factor per microbatch of the step (positive; the mean need not
be 1): the F, B, W and BW times of microbatch i, and its all-to-all part, are the stage's times
times `mb_scale[i]` (packed variable-length data: a microbatch of long sequences costs more, its
attention growing as s^2). Neither the p2p latency nor the memory scales: messages and
activations have the packed microbatch's fixed shape and token count. Left out, every
microbatch costs the same (a list of 1.0 gives the same times exactly). `StageCosts.duration`
and `pair_duration` take the microbatch; `mb_order` chooses which data microbatch runs where.

Memory is in units of one rank's full activation share for one microbatch:
F adds `mem_f`, B adds `mem_b`, W adds `mem_w` (signed deltas that sum to 0).
The default frees everything at W (as if the weight gradient needed all the
layer's activations). What the runtime measures, and the zero-bubble paper's
model, is B freeing all but what the weight gradient keeps (per transformer
layer 32sbh of the sb(34h+5as) an F adds), and W freeing that: `memory_model`
checks the pair as the command-line options give it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Optional, Sequence, Union

from .errors import ScheduleError
from .ir import B, BW, F, W, owner_of

Value = Union[float, Sequence[float]]


@dataclass(frozen=True)
class Costs:
    f: Value = 1.0
    b: Value = 1.0
    w: Value = 1.0
    comm: Value = 0.0
    mem_f: Value = 1.0
    mem_b: Value = 0.0
    mem_w: Value = -1.0
    bw: Optional[Value] = None
    a2a: Value = 0.0
    mb_scale: Optional[Sequence[float]] = None  # one factor per microbatch (module doc)

    def __post_init__(self) -> None:
        for fld in fields(self):
            value = getattr(self, fld.name)
            if value is None and fld.name in ("bw", "mb_scale"):
                continue
            if fld.name == "mb_scale":
                self._check_mb_scale(value)
                continue
            values = [value] if isinstance(value, (int, float)) else list(value)
            if not values or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
                raise ScheduleError(f"cost-{fld.name.replace('_', '-')} must be a finite number or a non-empty list of them, got {value!r}")
            if fld.name in ("f", "b", "w", "comm", "mem_f", "bw", "a2a") and min(values) < 0:
                raise ScheduleError(f"cost-{fld.name.replace('_', '-')} must be >= 0, got {value!r}")
            if not isinstance(value, (int, float)):
                object.__setattr__(self, fld.name, tuple(float(v) for v in values))

    def _check_mb_scale(self, value: object) -> None:
        values = [] if isinstance(value, (int, float, str)) else list(value)
        if not values or not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in values):
            raise ScheduleError(f"cost-mb-scale must be a non-empty list of positive finite factors, one per "
                                f"microbatch, got {value!r}")
        object.__setattr__(self, "mb_scale", tuple(float(v) for v in values))

    def resolve(self, pp: int, chunks: int, placement: str, microbatches: Optional[int] = None) -> "StageCosts":
        """Per-virtual-stage values for a pipeline of `pp` ranks x `chunks`; with `microbatches`
        (the step's count), per-microbatch factors (`mb_scale`) must have that many entries."""
        n = pp * chunks

        def per_stage(name: str, divide: bool) -> tuple[float, ...]:
            value = getattr(self, name)
            scale = 1.0 / chunks if divide else 1.0
            if isinstance(value, (int, float)):
                return (float(value) * scale,) * n
            if len(value) == n and n != pp:
                return tuple(float(v) for v in value)
            if len(value) == pp:
                return tuple(value[owner_of(placement, pp, s)[0]] * scale for s in range(n))
            allowed = f"{pp}" if n == pp else f"{pp} (per rank) or {n} (per stage)"
            raise ScheduleError(f"cost-{name.replace('_', '-')} list must have {allowed} entries, got {len(value)}")

        sc = StageCosts(
            time={F: per_stage("f", True), B: per_stage("b", True), W: per_stage("w", True)},
            mem={F: per_stage("mem_f", True), B: per_stage("mem_b", True), W: per_stage("mem_w", True)},
            comm=per_stage("comm", False),
            fused=None if self.bw is None else per_stage("bw", True),
            a2a=per_stage("a2a", True),
            mb_scale=self.mb_scale,
        )
        if microbatches is not None:
            sc.check_microbatches(microbatches)
        for s in range(n):
            if sc.a2a[s] > min(sc.time[F][s], sc.time[B][s]) + 1e-12:
                raise ScheduleError(f"cost-a2a is the all-to-all part of an F and of a B, so it cannot exceed either "
                                    f"(stage {s}: a2a {sc.a2a[s]:g}, F {sc.time[F][s]:g}, B {sc.time[B][s]:g})")
        for s in range(n):
            total = sc.mem[F][s] + sc.mem[B][s] + sc.mem[W][s]
            if abs(total) > 1e-9 * max(1.0, abs(sc.mem[F][s])):
                raise ScheduleError(f"cost-mem-f + cost-mem-b + cost-mem-w must sum to 0 (stage {s} sums to {total:g})")
        return sc


@dataclass(frozen=True)
class StageCosts:
    """Costs resolved to virtual stages: `time[kind][stage]`, `mem[kind][stage]`, `comm[stage]`,
    and `fused[stage]`, a BW op's time where measured (else B + W)."""

    time: dict
    mem: dict
    comm: tuple[float, ...]
    fused: Optional[tuple[float, ...]] = None
    a2a: Optional[tuple[float, ...]] = None  # the all-to-all part of an F and of a B (module doc)
    mb_scale: Optional[tuple[float, ...]] = None  # per microbatch, the factor on its op times (module doc)

    @property
    def one_slot(self) -> bool:
        """Every F, B and W of every microbatch takes the same time on every stage and messages
        are free: the cost model the paper's fixed patterns and blocks are built for."""
        times = {t for kind in (F, B, W) for t in self.time[kind]}
        # (`fused` left out: the patterns have no BW ops; an all-to-all to hide calls for pairs)
        return (len(times) == 1 and max(self.comm) == 0 and not any(self.a2a or ())
                and len(set(self.mb_scale or ())) <= 1)

    def check_microbatches(self, microbatches: int) -> None:
        """Per-microbatch factors, where given, must be one per microbatch of the step."""
        if self.mb_scale is not None and len(self.mb_scale) != microbatches:
            raise ScheduleError(f"cost-mb-scale gives {len(self.mb_scale)} factors, but the step has {microbatches} "
                                f"microbatches (one factor per microbatch)")

    def scale(self, mb: Optional[int]) -> float:
        """The factor on the op times of microbatch `mb` (1.0 without factors or without a microbatch)."""
        return 1.0 if self.mb_scale is None or mb is None else self.mb_scale[mb]

    def duration(self, kind: str, stage: int, mb: Optional[int] = None) -> float:
        """An op's time: of microbatch `mb` (its factor applied, `mb_scale`), or the stage's own (None)."""
        if kind == BW:
            base = self.time[B][stage] + self.time[W][stage] if self.fused is None else self.fused[stage]
        else:
            base = self.time[kind][stage]
        return base if self.mb_scale is None or mb is None else base * self.mb_scale[mb]

    def pair_duration(self, f_stage: int, b_kind: str, b_stage: int, f_mb: Optional[int] = None,
                      b_mb: Optional[int] = None) -> float:
        """An overlapped F (at `f_stage`, of microbatch `f_mb`) and B or BW (at `b_stage`, of `b_mb`)
        run as one op (module doc): each half's time and all-to-all scaled by its microbatch's factor."""
        f, b = self.duration(F, f_stage, f_mb), self.duration(b_kind, b_stage, b_mb)
        a_f, a_b = ((self.a2a[f_stage] * self.scale(f_mb), self.a2a[b_stage] * self.scale(b_mb))
                    if self.a2a is not None else (0.0, 0.0))
        compute_f, compute_b = f - a_f, b - a_b
        return compute_f + compute_b + max(0.0, a_f - compute_b) + max(0.0, a_b - compute_f)

    def memory(self, kind: str, stage: int) -> float:
        if kind == BW:
            return self.mem[B][stage] + self.mem[W][stage]
        return self.mem[kind][stage]


UNIT = Costs()


def memory_model(mem_b: Optional[Value], mem_w: Optional[Value], *, names: tuple[str, str] = ("--mem-b", "--mem-w"),
                 ) -> tuple[Value, Value]:
    """(mem_b, mem_w) as options give them (None where left out), in units of what an F adds
    (F adds 1): the other follows from one, both left out is the default (0, -1). They must sum
    to -1 and W may only free (mem_w <= 0); ScheduleError naming the option `names` otherwise."""
    def each(value: Value) -> list[float]:
        return [float(value)] if isinstance(value, (int, float)) else [float(v) for v in value]

    def rest(value: Value) -> Value:
        out = [-1.0 - v for v in each(value)]
        return out[0] if isinstance(value, (int, float)) else tuple(out)

    def show(value: Value) -> str:
        return f"{value:g}" if isinstance(value, (int, float)) else ",".join(f"{v:g}" for v in value)

    if mem_b is None and mem_w is None:
        return 0.0, -1.0
    mem_b = rest(mem_w) if mem_b is None else mem_b
    mem_w = rest(mem_b) if mem_w is None else mem_w
    bs, ws = each(mem_b), each(mem_w)
    if not all(math.isfinite(v) for v in bs + ws):
        raise ScheduleError(f"{names[0]} and {names[1]} must be finite numbers, got {show(mem_b)} and {show(mem_w)}")
    if len(bs) != len(ws) and 1 not in (len(bs), len(ws)):
        raise ScheduleError(f"{names[0]} and {names[1]} must have as many values as each other, got {len(bs)} and "
                            f"{len(ws)}")
    if max(ws) > 1e-12:
        raise ScheduleError(f"{names[1]} must be <= 0 (a W frees what the weight gradient kept), got {show(mem_w)}")
    pairs = zip(bs * (len(ws) if len(bs) == 1 else 1), ws * (len(bs) if len(ws) == 1 else 1))
    if any(abs(b + w + 1.0) > 1e-9 for b, w in pairs):
        raise ScheduleError(f"{names[0]} and {names[1]} must sum to -1 (F adds 1; B and W together free it), got "
                            f"{show(mem_b)} and {show(mem_w)}")
    return mem_b, mem_w


def measured_backward(b: list, w: list, bw: list) -> tuple[list, list, Optional[list]]:
    """Per-stage measured B, W (0.0 where none ran) and BW (None where none ran) times as the
    cost model's b, w and bw: a BW op counts half B, half W on a stage that ran no B and W
    apart, and `bw` is B + W on stages that ran no BW (None if none did)."""
    b, w = list(b), list(w)
    for s, full in enumerate(bw):
        if full is not None and b[s] == w[s] == 0.0:
            b[s] = w[s] = full / 2
    fused = None if all(x is None for x in bw) else [b[s] + w[s] if x is None else x for s, x in enumerate(bw)]
    return b, w, fused
