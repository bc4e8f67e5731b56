"""Measured costs: per-stage F, B, W and p2p times and activation memory.

Time comes from a clock chosen by the device (`clock_for`): on a GPU (CUDA, or
HIP, whose devices torch also calls "cuda"), CUDA/HIP events recorded on the
current stream, read once they have completed, so an op's time is the GPU's
and the host never waits for it (host timestamps would show launch order);
on CPU the host's clock (each op's CPU time is recorded beside it, `HostCpuClock`). On CPU,
time is wall time and memory is what the executor and the
weight-gradient store keep alive: the tensors autograd saved during F (read from
the graph's nodes, one count per storage, parameters and TransformerEngine's cached FP8
weights excluded, a quantized tensor counted by its buffers: `quantized`), of which B frees all but
what the deferred weight-gradient closures hold (and B adds the output
gradients those closures keep), and W frees the rest. On GPU, ops are timed
between device synchronisations and memory is the allocator's.

`measured_costs` all-gathers the per-rank measurements of the pipeline and
turns them into a `schedules.Costs` with one value per global stage, memory in
units of one microbatch's activations of an average rank, so that every rank
derives the same schedule from them.
"""
from __future__ import annotations

import contextlib
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import torch
import torch.distributed as dist

from .. import schedules as S
from ..schedules.costs import measured_backward
from .quantized import buffers, cached_weights


class HostClock:
    """The host's clock: a mark is a time in seconds."""

    kind = "host"

    def mark(self) -> float:
        return time.perf_counter()

    def elapsed(self, start, end) -> float:
        return end - start

    def seconds(self, mark) -> float:
        return mark


class HostCpuClock(HostClock):
    """The host's clock, with the marking thread's CPU time beside it: a mark is (seconds, CPU
    seconds of this thread). `elapsed` and `seconds` are the host's wall time, as `HostClock`'s;
    `cpu_elapsed` is the CPU time the thread spent between two marks. An op runs on its rank's
    one thread, so that is the op's own work even when several ranks time-share a core, where
    its wall time also counts the time the operating system gave to other ranks."""

    kind = "host+cpu"

    def mark(self) -> tuple[float, float]:
        return time.perf_counter(), time.thread_time()

    def elapsed(self, start, end) -> float:
        return end[0] - start[0]

    def seconds(self, mark) -> float:
        return mark[0]

    def cpu_elapsed(self, start, end) -> float:
        return end[1] - start[1]


class EventClock:
    """CUDA/HIP events on the current stream (`torch.cuda.Event(enable_timing=True)`; HIP maps
    them to hipEvents): a mark is an event, recorded without waiting; reading one waits for it
    (`Event.synchronize`), so read after the step. `seconds` puts marks on the host's axis: the
    first mark's host time plus the GPU time since it."""

    kind = "events"

    def __init__(self, event_type=None) -> None:
        self.event_type = event_type or torch.cuda.Event
        self.origin = None
        self.origin_host = 0.0

    def mark(self):
        event = self.event_type(enable_timing=True)
        event.record()
        if self.origin is None:
            self.origin, self.origin_host = event, time.perf_counter()
        return event

    def elapsed(self, start, end) -> float:
        end.synchronize()
        # milliseconds; HIP can report a tiny negative time for a very short interval
        # (ROCm/rocm-systems#9375), which the cost model would refuse as a negative cost
        return max(0.0, start.elapsed_time(end) / 1e3)

    def seconds(self, mark) -> float:
        return self.origin_host + self.elapsed(self.origin, mark)


def clock_for(device, *, event_type=None):
    """EventClock on a GPU device, else the host's clock with each thread's CPU time beside it
    (HostCpuClock): chosen by the device, not by a flag."""
    return EventClock(event_type) if getattr(device, "type", device) == "cuda" else HostCpuClock()


def _storage_key(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.nbytes()


def _stored(t) -> list:
    """The tensors whose storages a saved tensor keeps: itself, or the buffers of a TransformerEngine
    quantized wrapper (a Float8Tensor has no storage of its own: runtime/quantized.py)."""
    if not torch.is_tensor(t) or t.device.type == "meta":
        return []
    parts = buffers(t)
    return [t] if parts is None else parts


def _bytes(keys) -> int:
    return sum(n for _, n in keys)


def saved_storages(output, exclude=frozenset()) -> set:
    """Storages the autograd graph behind `output` keeps for backward, one count per
    storage, less `exclude` (data pointers: the parameters). Read from the graph's nodes
    rather than through saved-tensor hooks: under hooks autograd hands backward a new
    tensor object for each saved parameter, without the attributes megatron's DDP and
    fused weight-gradient path read from it (grad_added_to_main_grad)."""
    roots = output if isinstance(output, (list, tuple)) else [output]
    stack = [t.grad_fn for t in roots if torch.is_tensor(t) and t.grad_fn is not None]
    keys, seen = set(), set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for name in dir(node):  # generated nodes: _saved_<name>; custom Functions: saved_tensors
            if not (name.startswith("_saved_") or name == "saved_tensors"):
                continue
            try:
                value = getattr(node, name)
            except Exception:  # freed already, or a node type that cannot hand it out: a measurement, not a step
                continue
            for t in value if isinstance(value, (list, tuple)) else (value,):
                for part in _stored(t):
                    key = _storage_key(part)
                    if key[0] not in exclude and key[1]:
                        keys.add(key)
        stack.extend(fn for fn, _ in node.next_functions)
    return keys


@dataclass
class Profile:
    """One rank's measurements over the profiled steps."""

    durations: dict = field(default_factory=lambda: defaultdict(list))  # (kind, stage) -> [seconds]
    memory: dict = field(default_factory=lambda: defaultdict(list))  # (kind, stage) -> [bytes delta]
    comm: list = field(default_factory=list)  # seconds a receive took once its send was posted
    steps: int = 0

    def summary(self) -> dict:
        return {"durations": {k: statistics.median(v) for k, v in self.durations.items()},
                "memory": {k: statistics.median(v) for k, v in self.memory.items()},
                "comm": statistics.median(self.comm) if self.comm else 0.0, "steps": self.steps}


class OpMemory:
    """Activation bytes an op adds (F), exchanges (B) or frees (W)."""

    def __init__(self, device: torch.device, params=(), chunks=()) -> None:
        self.cuda = device.type == "cuda"
        self._before = 0
        self._params = {p.untyped_storage().data_ptr() for p in params}  # weights are not activations
        self._chunks = chunks  # nor are the FP8 copies of them TE caches (quantized.cached_weights)
        self.saved: dict = {}  # (mb, chunk) -> storages autograd saved in F
        self.held: dict = {}  # (mb, chunk) -> storages the W closures keep
        self.live = 0  # bytes currently attributed to activations
        self.peak = 0

    @contextlib.contextmanager
    def forward(self, key) -> Iterator[None]:
        """Around an F op on GPU: the allocator's growth (on CPU, `forward_done` counts)."""
        if not self.cuda:
            yield
            return
        before = torch.cuda.memory_allocated()
        yield
        self._add(torch.cuda.memory_allocated() - before)
        self.saved[key] = torch.cuda.memory_allocated() - before

    def forward_done(self, key, output) -> None:
        """On CPU, after an F op (outside its timing): the storages its autograd graph saved."""
        if self.cuda:
            return
        keys = saved_storages(output, exclude=self._params | cached_weights(self._chunks))
        self.saved[key] = keys
        self._add(_bytes(keys))

    def begin(self) -> None:
        """Before a B or W on GPU: the allocator's baseline."""
        if self.cuda:
            self._before = torch.cuda.memory_allocated()

    def backward(self, key, held: list, full: bool) -> float:
        """Delta of a B (full=False) or BW; `held` are the tensors W closures keep."""
        saved = self.saved.pop(key, set())
        if self.cuda:
            delta = torch.cuda.memory_allocated() - self._before
            self._add(delta)
            return delta
        held_keys = set() if full else {_storage_key(t) for t in held if torch.is_tensor(t)}
        delta = _bytes(held_keys - saved) - _bytes(saved - held_keys)
        if not full:
            self.held[key] = held_keys
        self._add(delta)
        return delta

    def weight(self, key) -> float:
        held = self.held.pop(key, set())
        delta = torch.cuda.memory_allocated() - self._before if self.cuda else -_bytes(held)
        self._add(delta)
        return delta

    def forward_bytes(self, key) -> float:
        value = self.saved.get(key)
        return value if self.cuda else _bytes(value or ())

    def _add(self, delta: float) -> None:
        self.live += delta
        self.peak = max(self.peak, self.live)


def measure_p2p(group, rank: int, shape, dtype, device, repeats: int = 8, *, clock=None) -> float:
    """One-way time of one activation-sized message to the next pipeline rank: a ping-pong,
    neighbours in two phases so that every pair runs alone. A warm-up round trip first
    synchronises the pair; on a GPU the round trips are timed with events on the current stream
    (which each NCCL wait joins), on CPU with the host's clock after blocking waits."""
    clock = clock or clock_for(device)
    pp = dist.get_world_size(group)
    buf = torch.zeros(shape, dtype=dtype, device=device)
    peer_of = lambda r: dist.get_global_rank(group, r)  # noqa: E731
    one_way = 0.0
    for phase in (0, 1):
        if rank % 2 == phase and rank + 1 < pp:
            dist.send(buf, peer_of(rank + 1), group=group)  # warm-up round trip: both ends in step
            dist.recv(buf, peer_of(rank + 1), group=group)
            start = clock.mark()
            for _ in range(repeats):
                dist.send(buf, peer_of(rank + 1), group=group)
                dist.recv(buf, peer_of(rank + 1), group=group)
            one_way = clock.elapsed(start, clock.mark()) / repeats / 2
        elif (rank - 1) % 2 == phase and rank >= 1:
            for _ in range(repeats + 1):
                dist.recv(buf, peer_of(rank - 1), group=group)
                dist.send(buf, peer_of(rank - 1), group=group)
    return one_way


def per_rank_costs(costs: S.Costs, schedule: S.Schedule) -> S.Costs:
    """Per-stage costs of one placement as per-rank shares (a list of length pp):
    the form that carries over to a schedule with another placement or chunk count."""
    n, pp = schedule.num_stages, schedule.pp

    def share(values) -> list:
        out = [0.0] * pp
        for stage in range(n):
            out[schedule.owner(stage)[0]] += values[stage]
        return out

    return S.Costs(f=share(costs.f), b=share(costs.b), w=share(costs.w), comm=costs.comm,
                   mem_f=share(costs.mem_f), mem_b=share(costs.mem_b), mem_w=share(costs.mem_w),
                   bw=None if costs.bw is None else share(costs.bw))


def measured_costs(profile: Profile, schedule: S.Schedule, group, rank: int) -> tuple[S.Costs, dict]:
    """Every rank's measurements, all-gathered, as per-stage Costs (identical on
    all ranks) and a summary (seconds, bytes) for logging."""
    gathered: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, (rank, profile.summary()), group=group)
    return combined_costs([summary for _, summary in gathered], schedule)


def agree_across_replicas(costs: S.Costs) -> S.Costs:
    """The costs every rank of the job plans with: each value the largest any pipeline replica measured.
    Data, tensor, context and expert parallel replicas of a pipeline each gather their own pipeline's
    measurements, which differ a little; planned apart, `zb-auto` or a V re-plan could give them
    different op orders, and their ranks meet inside ops (tensor and context parallel exchanges in F and
    B, expert all-to-alls) and in DDP's bucket reduces, issued in W's order: a mismatched order hangs
    NCCL or pairs the wrong tensors. The slowest replica sets the pace of a synchronous step, so its
    costs are the ones to plan for."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return costs
    mine = tuple(None if v is None else (v,) if isinstance(v, (int, float)) else tuple(v)
                 for v in (costs.f, costs.b, costs.w, costs.comm, costs.mem_f, costs.mem_b, costs.bw))
    every: list = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)

    def largest(i: int):
        values = [m[i] for m in every if m[i] is not None]
        if not values:
            return None
        if len({len(v) for v in values}) != 1:
            raise ValueError(f"ranks measured costs for different numbers of stages ({sorted({len(v) for v in values})}): "
                             f"every rank must run the same schedule and pipeline size")
        merged = tuple(max(column) for column in zip(*values))
        return merged[0] if len(merged) == 1 and isinstance(getattr(costs, _FIELDS[i]), (int, float)) else merged

    f, b, w, comm, mf, mb, bw = (largest(i) for i in range(len(_FIELDS)))
    mw = tuple(-(x + y) for x, y in zip(mf, mb)) if not isinstance(mf, float) else -(mf + mb)
    return S.Costs(f=f, b=b, w=w, comm=comm, mem_f=mf, mem_b=mb, mem_w=mw, bw=bw)


_FIELDS = ("f", "b", "w", "comm", "mem_f", "mem_b", "bw")


def combined_costs(summaries: list, schedule: S.Schedule) -> tuple[S.Costs, dict]:
    """Per-stage Costs and a summary from every rank's `Profile.summary()`. A backward that
    ran as one op (BW) is `bw` (B + W on stages that ran none), and half B, half W on a stage
    that ran no B and W apart."""
    n = schedule.num_stages
    f, b, w = [0.0] * n, [0.0] * n, [0.0] * n
    bw: list = [None] * n  # a BW op's own time, where the schedule ran one
    mf, mb = [0.0] * n, [0.0] * n
    comms = []
    for summary in summaries:
        if summary["comm"] > 0:
            comms.append(summary["comm"])
        for (kind, stage), seconds in summary["durations"].items():
            if kind == S.F:
                f[stage] = seconds
            elif kind == S.B:
                b[stage] = seconds
            elif kind == S.W:
                w[stage] = seconds
            elif kind == S.BW:
                bw[stage] = seconds
        for (kind, stage), delta in summary["memory"].items():
            if kind == S.F:
                mf[stage] = delta
            elif kind == S.B:
                mb[stage] = delta
            elif kind == S.BW:
                mb[stage] = 0.0  # one backward op: nothing is kept for a W
    b, w, fused = measured_backward(b, w, bw)
    # Memory in units of an average rank's activations for one microbatch.
    per_rank = defaultdict(float)
    for stage in range(n):
        per_rank[schedule.owner(stage)[0]] += mf[stage]
    unit = (sum(per_rank.values()) / len(per_rank)) or 1.0
    mf, mb = ([x / unit for x in v] for v in (mf, mb))
    # W frees what F added and B kept, so the deltas sum to zero exactly; the measured W deltas
    # (medians over other steps) need not, and are not used.
    mw = [-(a + c) for a, c in zip(mf, mb)]
    costs = S.Costs(f=f, b=b, w=w, comm=statistics.median(comms) if comms else 0.0, mem_f=mf, mem_b=mb, mem_w=mw,
                    bw=fused)
    return costs, {"unit_bytes": unit, "f": f, "b": b, "w": w, "comm": costs.comm}
