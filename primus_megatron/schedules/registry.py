"""Schedule registry: name -> generator. Adding a schedule is one file in
`builtin/` (or anywhere) with one `@register(...)` decorator; the CLI, the
validator, the runtime and the argument parsers all read this registry.
"""
from __future__ import annotations

import difflib
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable, Optional

from .costs import UNIT, Costs, StageCosts
from .errors import ScheduleError
from .ir import LOOP, PLACEMENTS, Op, Schedule, flatten_pairs

# generator(pp, microbatches, *, chunks, costs, memory_limit) -> per-rank lists of Op (or Pair: an
# overlapped F&B op, `ir.Pair`)
Generator = Callable[..., list[list[Op]]]


@dataclass(frozen=True)
class ScheduleInfo:
    name: str
    generator: Generator
    placement: str
    chunks: int  # chunks per rank (the default where `variable_chunks`)
    memory: str  # peak activation memory vs 1F1B's, e.g. "1x", "2x", or microbatches' worth at pipeline size p: "ceil(p/3)+1"
    description: str
    aliases: tuple[str, ...] = ()
    variable_chunks: bool = False
    cost_driven: bool = False  # the order is searched under the costs and a memory limit (auto passes its limit)
    needs_extra: Optional[str] = None  # pip extra the generator needs
    default_memory_limit: Optional[Callable[[int], float]] = field(default=None, compare=False)
    order: int = 100  # position in listings (family order), then registration order
    # The order depends on per-stage costs: given none, the runtime measures them over the first
    # steps and re-plans (every cost-driven schedule, and the V family's cost-aware candidates).
    uses_costs: bool = False
    # The order has W ops (backward split into B and W, weight gradients deferred): what the
    # runtime's hooks, TransformerEngine routing and the option checks need to know before any
    # schedule is generated. Declared by the generator's @register; generate() holds it to it.
    splits_backward: bool = False


# The registry itself (one per process, filled by @register as modules import; the built-ins
# are imported on first lookup): the place every consumer reads, by design.
_REGISTRY: dict[str, ScheduleInfo] = {}
_ALIASES: dict[str, str] = {}
_loaded = False


def register(name: str, *, placement: str = LOOP, chunks: int = 1, memory: str = "1x",
             description: str = "", aliases: tuple[str, ...] = (), variable_chunks: bool = False,
             cost_driven: bool = False, needs_extra: Optional[str] = None,
             default_memory_limit: Optional[Callable[[int], float]] = None,
             order: int = 100, uses_costs: bool = False,
             splits_backward: bool = False) -> Callable[[Generator], Generator]:
    """Register `generator` under `name` (and `aliases`). `splits_backward`: its orders
    have W ops (a generator whose orders disagree fails in generate())."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}")

    def deco(fn: Generator) -> Generator:
        for key in (name, *aliases):
            if key in _REGISTRY or key in _ALIASES:
                raise ValueError(f"pipeline schedule name {key!r} is registered twice")
        _REGISTRY[name] = ScheduleInfo(name, fn, placement, chunks, memory, description or (fn.__doc__ or "").strip().split("\n")[0],
                                       tuple(aliases), variable_chunks, cost_driven, needs_extra, default_memory_limit,
                                       order, uses_costs or cost_driven, splits_backward)
        for alias in aliases:
            _ALIASES[alias] = name
        return fn

    return deco


def _load_builtins() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    from . import builtin

    for mod in pkgutil.iter_modules(builtin.__path__):
        importlib.import_module(f"{builtin.__name__}.{mod.name}")


def names(*, aliases: bool = False) -> list[str]:
    """Registered schedule names in registration order (plus aliases if asked)."""
    _load_builtins()
    out = sorted(_REGISTRY, key=lambda k: (_REGISTRY[k].order, list(_REGISTRY).index(k)))
    return out + list(_ALIASES) if aliases else out


def info(name: str) -> ScheduleInfo:
    """The registry entry for `name` or an alias; one clear error otherwise."""
    _load_builtins()
    key = _ALIASES.get(name, name)
    if key in _REGISTRY:
        return _REGISTRY[key]
    known = names(aliases=True)
    close = suggest(str(name), known)
    hint = f"; did you mean {close!r}?" if close else ""
    raise ScheduleError(f"unknown pipeline schedule {name!r}: choose one of {', '.join(known)}{hint}")


def suggest(name: str, known: list[str]) -> Optional[str]:
    """The registered name closest to a mistyped one: same words in another
    order or with other separators first ('1f1b-interleaved'), then spelling."""
    norm = name.lower().replace("_", "-").replace(" ", "-")
    words = sorted(norm.split("-"))
    for k in known:
        if sorted(k.split("-")) == words:
            return k
    close = difflib.get_close_matches(norm, known, n=1)
    return close[0] if close else None


def _check_int(option: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScheduleError(f"{option} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ScheduleError(f"{option} must be >= {minimum}, got {value}")
    return value


def resolve_chunks(entry: ScheduleInfo, chunks: Optional[int]) -> int:
    if chunks is None:
        return entry.chunks
    if entry.variable_chunks:
        return _check_int(f"chunks per rank for {entry.name}", chunks, entry.chunks)
    if chunks != entry.chunks:
        raise ScheduleError(f"schedule {entry.name!r} uses exactly {entry.chunks} chunk(s) per rank, got {chunks}")
    return chunks


def generate(name: str, pp: int, microbatches: int, *, costs: Optional[Costs] = None,
             memory_limit: Optional[float] = None, chunks: Optional[int] = None,
             validate: bool = True, time_limit: Optional[float] = None,
             post_validation: bool = False) -> Schedule:
    """Build (and by default validate) schedule `name` for `pp` ranks and `microbatches`.

    `time_limit`: seconds a searching generator (zb-optimal's solver) may spend;
    it returns the best order found by then. Other generators ignore it.
    `post_validation`: the run has no optimizer barrier between iterations, so a
    generator that searches (zb-auto, the V schedules' candidates, zb-optimal)
    minimises the longest per-rank span rather than the makespan (`variants.objective`)."""
    entry = info(name)
    pp = _check_int("pipeline size (pp)", pp, 2)
    microbatches = _check_int("microbatches", microbatches, 1)
    if memory_limit is not None:
        if isinstance(memory_limit, bool) or not isinstance(memory_limit, (int, float)) or not memory_limit > 0:
            raise ScheduleError(f"memory limit must be a positive number of activation units, got {memory_limit!r}")
        if memory_limit == float("inf"):
            memory_limit = None  # no limit
    nchunks = resolve_chunks(entry, chunks)
    costs = costs or UNIT
    sc: StageCosts = costs.resolve(pp, nchunks, entry.placement, microbatches)
    extra = {} if time_limit is None else {"time_limit": float(time_limit)}
    if post_validation:
        extra["post_validation"] = True
    ranks = entry.generator(pp, microbatches, chunks=nchunks, costs=sc, memory_limit=memory_limit, **extra)
    flat = [flatten_pairs(r) for r in ranks]
    schedule = Schedule(entry.name, pp, microbatches, nchunks, entry.placement, tuple(ops for ops, _ in flat),
                        {"costs": costs, "memory_limit": memory_limit, "post_validation": bool(post_validation)},
                        tuple(starts for _, starts in flat) if any(starts for _, starts in flat) else ())
    if schedule.splits_backward != entry.splits_backward:
        has = "has W ops" if schedule.splits_backward else "has no W ops"
        raise ScheduleError(f"schedule {entry.name!r} is registered with splits_backward={entry.splits_backward}, but "
                            f"its order for pp={pp}, {microbatches} microbatches {has}: declare "
                            f"splits_backward={schedule.splits_backward} in its @register")
    if validate:
        from .validation import validate as _validate

        _validate(schedule, costs=costs, memory_limit=memory_limit)
    return schedule
