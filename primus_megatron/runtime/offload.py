"""Move an F's saved activations to host memory and back before its B, as the plan says.

The F of a planned (microbatch, chunk) runs under `torch.autograd.graph.saved_tensors_hooks`:
each saved tensor is recorded by its storage (one copy per storage, however many saved
tensors view it) and autograd keeps only (storage index, dtype, size, stride, offset).
Parameters and views of parameters are not recorded: pack hands them back as they are
(they are not activations, and copying a weight would be wrong once the optimizer
steps). Under hooks autograd re-wraps every saved tensor on unpack, parameters included,
so backward code must not read Python attributes off a saved weight; `linear_hooks`
gives megatron's linear backward the parameter itself (DDP's `main_grad`,
`grad_added_to_main_grad`).

An overlapped pair run as one call of megatron's combined step (runtime/combined.py) runs under the
F half's hooks: what is saved inside a backward pass then (the B half recomputing for its own
backward) is the B half's, not the F's, and is left alone.

`offloaded(key)` after the F copies each recorded storage to host and lets the device
storage go (once the copy is done); `reload(key)` at the op the plan names copies it back
into a fresh device buffer; `ready(key)` before the B makes the B's stream wait for that
copy; unpack rebuilds each saved tensor on the reloaded storage with its own dtype,
size, stride and offset, so backward computes on the same bytes in the same layout
(bitwise the gradients without offload). `release(key)` after the B drops our
references (what W's closures keep stays alive through them).

TransformerEngine's quantized tensors (FP8: `runtime.quantized`) move too. Most reach the hooks as
plain float8 tensors (TE saves a storage object's buffers); a quantized wrapper (`Float8Tensor`:
GroupedLinear's inputs, a module's cached FP8 weight) reaches them as itself, a tensor subclass with
no storage of its own: pack splits a copy of it into its buffers (data, transpose, scale-inverse),
records each like any saved tensor and keeps the emptied copy; unpack rebuilds a wrapper on the
buffers as they are then. A cached weight's buffers are kept alive by its module, so they stay.

What a B keeps for its W (a W share, plan key (microbatch, chunk, "W")) moves the same way:
the deferred weight-gradient closures hold no tensor of their own, the weight-gradient store
holds their arguments (`WeightGradStore.arguments`: megatron's linear layers' input and output
gradient, TE's through `te_wgrad`). `after(op)` at the B's end records each argument's storage
(parameters and their views excluded, one copy per storage), puts a packed reference in the
argument's place and copies the storages to host like an F's; `before(op)` reloads it at the op
the plan names and, as the W starts, waits for the reload and puts each argument back, rebuilt
on the reloaded storage with its own dtype, size, stride and offset.

Each moved storage's device copy goes back to the allocator as its copy out is issued, marked as in
use by the copy stream (`record_stream`): the allocator reuses it once the copy has run, checking at
each allocation and, before an out-of-memory, waiting for it. Nothing polls events, the host never
waits, and however far the host runs ahead of the device the memory comes back when the copy ends,
as the plan assumes. A storage that stays alive anyway (the F's input, which the executor keeps until
B; a module's cache) is left where it is: moving it would add a second copy and save nothing. Only
the bytes the saved tensors span are copied, into one host buffer per offloaded F (W share) and, at
reload, one device buffer per storage (what a W keeps of a B's activations then holds only its own). The copies themselves (host pool on CPU; pinned buffers, the
device's two copy streams and events on a GPU) are `offload_copies`'.

On emulated devices (`emulation.chunks`; the runner's `emulated_copy_seconds`) the copies also
take the time the plan's bandwidth says, on one lane per direction as the planner models them: a copy out starts
when its F (B, for a W share) ends and its lane is free; a copy back when its issuing op starts, its
lane is free and its copy out has ended; the B (the W, for a W share) waits (sleeps) until its copy
back ends. The step's result lists the copies (`StepResult.copies`), timed on `time.monotonic`.

The copy lanes' bandwidth, when not given, is measured at start-up (`measured_bandwidth`): the
first step runs with its copies planned as free; each rank then reads the time its own copies of
that step took (events on the copy streams on a GPU: many copies, both directions at once, beside
compute and NCCL, as every later step makes them; no extra memory), converts the slower direction's
rate into the cost model's units with that step's F times, and the ranks agree on the slowest.
"""
from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Iterator, Optional

import torch

from ..schedules.ir import B, F, W
from .offload_copies import aligned
from .quantized import is_quantized, rebuilt, split
from .wgrad_store import get_store

Key = tuple  # (microbatch, chunk): an F's saved activations; (microbatch, chunk, "W"): what its B keeps for W
ROUND = 16  # bytes: a segment starts at a multiple of this in its storage, a multiple of every dtype's size


class OffloadError(RuntimeError):
    """The offload state of a step is not what the plan says (a bug, named with the op)."""


def _use_count(storage: torch.UntypedStorage) -> int:
    """References to the storage's memory (tensors, storages); 1 when ours is the only one."""
    counter = getattr(torch._C, "_storage_Use_Count", None)
    return 1 if counter is None else counter(storage._cdata)


@dataclass
class _Entry:
    """The saved storages of one offloaded F (W share)."""

    storages: list = field(default_factory=list)  # device UntypedStorage; a moved one until its copy out
    index: dict = field(default_factory=dict)  # (data_ptr, nbytes) -> position
    spans: list = field(default_factory=list)  # per position: [first byte, end byte) the saved tensors read
    at: list = field(default_factory=list)  # per position: its segment's index, None: kept on the device
    segments: list = field(default_factory=list)  # (byte offset in the host buffer, bytes) per moved storage
    host: object = None  # uint8 host buffer, after the copy out
    back: list = field(default_factory=list)  # uint8 device buffers (a segment each), after the reload
    out_token: object = None  # "the copy out has ended" (an event on a GPU)
    back_token: object = None
    state: str = "held"  # held -> out -> back
    nbytes: int = 0  # bytes moved (the buffers' size)
    waited: bool = False  # the compute stream waits for the reload already
    freed_sizes: list = field(default_factory=list)  # bytes of each device storage handed back (the GPU check
    # overwrites exactly those blocks)


def _tensors(value) -> list:
    if torch.is_tensor(value):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


class _Packed(tuple):
    """A saved tensor's place in an entry: (key, storage position, dtype, size, stride, offset)."""

    __slots__ = ()


class _PackedQuantized(tuple):
    """A quantized value's: (its emptied shell, per buffer a _Packed, a tensor left as it is, or None)."""

    __slots__ = ()


def _as_bytes(storage: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def _extent(t: torch.Tensor) -> tuple[int, int]:
    """[first byte, end byte) of `t` in its storage."""
    size = t.element_size()
    first = t.storage_offset() * size
    if t.numel() == 0:
        return first, first
    return first, first + (1 + sum((n - 1) * s for n, s in zip(t.size(), t.stride()))) * size


class ActivationOffload:
    """One rank's offloads for one step (module doc). `reloads_before`: {Op: [keys reloaded as it
    starts]} and the set of offloaded keys, both from `schedules.offload.OffloadPlan`. `copies`: an
    `offload_copies` object (the device's own by default; a test's double)."""

    def __init__(self, keys, reloads_before: dict, device: torch.device, params=(), lane_seconds=None,
                 copies=None) -> None:
        from .offload_copies import copies_for

        self.keys = frozenset(keys)
        # emulated devices: {key: seconds one copy takes on a lane}; None: the copies' own time
        self.lanes = None if lane_seconds is None else _EmulatedLanes(lane_seconds)
        self.reloads_before = dict(reloads_before)
        self.device = device
        self.copies = copies if copies is not None else copies_for(device)
        self._params = {p.untyped_storage().data_ptr() for p in params}
        self.entries: dict[Key, _Entry] = {}
        self.host_bytes = 0  # held in host memory now, as allocated (pinned blocks are rounded up)
        self.peak_host_bytes = 0
        self.device_bytes = 0  # what offload itself keeps on the device now: reload buffers
        self.peak_device_bytes = 0
        self.moved = 0  # F ops offloaded this step (that moved bytes)
        self.moved_bytes = 0  # what they saved, in all
        self.moved_w = 0  # W shares offloaded this step (what B ops kept for W)
        self.moved_w_bytes = 0
        self.kept_bytes = 0  # saved storages left on the device because something else keeps them alive

    # -- hooks -----------------------------------------------------------------------------
    def _keeps(self, t: torch.Tensor) -> bool:
        """Tensors left where they are: parameters and their views, and anything not a plain dense tensor."""
        if isinstance(t, torch.nn.Parameter) or type(t) is not torch.Tensor:
            return True
        if t.layout != torch.strided or t.is_quantized or t.device.type == "meta" or t.device != self.device:
            return True
        storage = t.untyped_storage()
        return storage.nbytes() == 0 or storage.data_ptr() in self._params

    @contextlib.contextmanager
    def forward(self, key: Key, keep: Optional[torch.Tensor] = None) -> Iterator[None]:
        """Around an F whose activations the plan offloads (nothing otherwise). `keep`: the F's input,
        which the executor holds until the B anyway: saved as it is."""
        if key not in self.keys:
            yield
            return
        if key in self.entries:
            raise OffloadError(f"microbatch {key[0]} chunk {key[1]} ran its F twice in one step")
        entry = self.entries[key] = _Entry()
        kept = None if keep is None else keep.untyped_storage().data_ptr()

        def pack(t: torch.Tensor):
            if torch._C._current_graph_task_id() != -1:
                # saved inside a backward pass: the other half of an overlapped pair run in one call
                # (megatron's combined step), recomputing for its own backward, not this F's activations
                return t
            if is_quantized(t) and not isinstance(t, torch.nn.Parameter):
                return self._pack_quantized(entry, key, t, kept)
            if self._keeps(t) or (kept is not None and t.untyped_storage().data_ptr() == kept):
                return t
            return self._pack(entry, key, t)

        def unpack(packed):
            return packed if torch.is_tensor(packed) else self._unpacked(packed)

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            yield

    @staticmethod
    def _pack(entry: _Entry, key: Key, t: torch.Tensor) -> _Packed:
        """Record `t`'s storage in `entry` (once per storage), widen the span its saved tensors read, and
        return where `t` lies in it."""
        storage = t.untyped_storage()
        skey = (storage.data_ptr(), storage.nbytes())
        position = entry.index.get(skey)
        first, end = _extent(t)
        if position is None:
            position = entry.index[skey] = len(entry.storages)
            entry.storages.append(storage)
            entry.spans.append([first, end])
        else:
            span = entry.spans[position]
            span[0], span[1] = min(span[0], first), max(span[1], end)
        return _Packed((key, position, t.dtype, t.size(), t.stride(), t.storage_offset()))

    def _pack_quantized(self, entry: _Entry, key: Key, value, kept: Optional[int] = None) -> _PackedQuantized:
        """Record the buffers of a TE quantized value (`runtime.quantized`), each as a saved tensor; what
        `_keeps` would keep (or the F's input, `kept`) stays in the record as it is."""
        shell, buffers = split(value)
        parts = []
        for t in buffers:
            if t is None or self._keeps(t) or (kept is not None and t.untyped_storage().data_ptr() == kept):
                parts.append(t)
            else:
                parts.append(self._pack(entry, key, t))
        return _PackedQuantized((shell, parts))

    def _unpacked(self, packed):
        """A saved value rebuilt on the storages it lies in now (a tensor, or TE quantized data)."""
        if isinstance(packed, _PackedQuantized):
            shell, parts = packed
            return rebuilt(shell, [p if p is None or torch.is_tensor(p) else self._unpack(p) for p in parts])
        return self._unpack(packed)

    def _unpack(self, packed: _Packed) -> torch.Tensor:
        owner, position, dtype, size, stride, offset = packed
        storage, shift = self._storage(owner, position)
        return torch.empty(0, dtype=dtype, device=storage.device).set_(storage, offset + shift // dtype.itemsize,
                                                                       size, stride)

    def _storage(self, key: Key, position: int) -> tuple[torch.UntypedStorage, int]:
        """(storage, byte shift of the saved tensors' offsets) a saved tensor of `key` lies in now."""
        entry = self.entries.get(key)
        if entry is None:
            raise OffloadError(f"backward read an activation of microbatch {key[0]} chunk {key[1]} after its B "
                               f"released it")
        at = entry.at[position] if entry.at else None
        if at is None:  # not copied out yet, or kept on the device
            return entry.storages[position], 0
        if entry.state == "out":  # used before its planned reload (e.g. a graph walk): bring it back now
            self.reload(key)
        self.ready(key)  # whatever reads it waits for the reload (idempotent)
        return entry.back[at].untyped_storage(), -entry.spans[position][0]

    # -- moves -----------------------------------------------------------------------------
    def after(self, op, output=None) -> None:
        """As `op` ends: an F's saved activations, or what a B keeps for its W, go to host as the plan says
        (an F's after the profiler's graph walk, which reads the saved tensors). `output`: the F's."""
        if op.kind == F:
            self.offloaded((op.mb, op.chunk), output)
        elif op.kind == B:
            self.offload_w_share((op.mb, op.chunk))

    def offloaded(self, key: Key, output=None) -> None:
        """After the F of `key`: copy its storages to host; their device copies go back to the allocator.
        `output`: the F's output, whose storage is moved even though the executor still holds it (megatron
        frees its data once it is sent, `deallocate_pipeline_outputs`)."""
        entry = self.entries.get(key)
        if entry is None:
            return
        self._copy_out(key, entry, {t.untyped_storage().data_ptr() for t in _tensors(output)})
        self.moved += bool(entry.nbytes)  # an F whose saved storages something else kept moved nothing
        self.moved_bytes += entry.nbytes

    def offload_w_share(self, key: Key) -> None:
        """After the B of `key` (mb, chunk): what its W's closures are given goes to host (module doc)."""
        wkey = (*key, W)
        if wkey not in self.keys:
            return
        if wkey in self.entries:
            raise OffloadError(f"microbatch {key[0]} chunk {key[1]} ran its B twice in one step")
        entry = self.entries[wkey] = _Entry()
        for args in get_store().arguments(key):
            for i in range(len(args)):
                if is_quantized(args[i]):  # TE's quantized inputs and grad outputs (FP8)
                    args[i] = self._pack_quantized(entry, wkey, args[i])
                elif torch.is_tensor(args[i]) and not self._keeps(args[i]):
                    args[i] = self._pack(entry, wkey, args[i])
        self._copy_out(wkey, entry)
        self.moved_w += bool(entry.nbytes)
        self.moved_w_bytes += entry.nbytes

    def _copy_out(self, key: Key, entry: _Entry, transient: frozenset = frozenset()) -> None:
        """Copy the span of each storage nothing else keeps alive (but `transient`, data_ptrs of storages
        whose other holders let go soon) into one host buffer and hand its device copy back to the
        allocator (module doc); the rest stay."""
        sources, offsets, total = [], [], 0
        for position, span in enumerate(entry.spans):  # no loop variable may hold a storage past the loop
            storage_ptr = entry.storages[position].data_ptr()
            if storage_ptr not in transient and _use_count(entry.storages[position]) > 1:  # a module's cache
                entry.at.append(None)
                self.kept_bytes += entry.storages[position].nbytes()
                continue
            span[0] -= span[0] % ROUND
            entry.at.append(len(entry.segments))
            entry.segments.append((total, span[1] - span[0]))
            sources.append(_as_bytes(entry.storages[position])[span[0]:span[1]])
            entry.freed_sizes.append(entry.storages[position].nbytes())
            offsets.append(total)
            entry.storages[position] = None
            total += aligned(span[1] - span[0])
        entry.nbytes = total
        if total:
            entry.host, entry.out_token = self.copies.out(sources, offsets, total)
        del sources  # the last references to the moved storages: the allocator has them back
        entry.state = "out"
        if self.lanes:
            self.lanes.out(key)
        self.host_bytes += self.copies.host_bytes(total) if total else 0
        self.peak_host_bytes = max(self.peak_host_bytes, self.host_bytes)

    def _device(self, delta: int) -> None:
        self.device_bytes += delta
        self.peak_device_bytes = max(self.peak_device_bytes, self.device_bytes)

    def before(self, op) -> None:
        """As `op` starts: issue the reloads the plan puts here; a W then waits for what its B kept and
        gets it back (module doc)."""
        for key in self.reloads_before.get(op, ()):
            if key in self.entries and self.entries[key].state == "out":
                self.reload(key)
        if op.kind == W:
            self._w_share_back((op.mb, op.chunk))

    def _w_share_back(self, key: Key) -> None:
        wkey = (*key, W)
        if wkey not in self.entries:
            return
        self.ready(wkey)
        for args in get_store().arguments(key):
            for i, packed in enumerate(args):
                if isinstance(packed, (_Packed, _PackedQuantized)):
                    args[i] = self._unpacked(packed)
        self.release(wkey)  # the arguments hold the reloaded storages now

    def reload(self, key: Key) -> None:
        entry = self.entries[key]
        if entry.nbytes:
            entry.back, entry.back_token = self.copies.back(entry.host, entry.segments, entry.out_token, self.device)
            self._device(entry.nbytes)
        if self.lanes:
            self.lanes.back(key)
        entry.state = "back"

    def ready(self, key: Key) -> None:
        """Before the B of `key` (the W, for a W share): what it reads is (or will be, in stream order) on
        the device."""
        entry = self.entries.get(key)
        if entry is None or entry.state == "held":
            return
        if entry.state == "out":
            self.reload(key)
        if not entry.waited:
            entry.waited = True
            self.copies.compute_waits(entry.back_token)
            if self.lanes:
                self.lanes.wait(key)

    def release(self, key: Key) -> None:
        """After the B of `key`: drop our references (W's closures keep theirs). A pinned host buffer may
        still be read by its copy back: the host allocator reuses it only after that copy (offload_copies)."""
        entry = self.entries.pop(key, None)
        if entry is None:
            return
        if entry.state != "held":
            self.host_bytes -= self.copies.host_bytes(entry.nbytes) if entry.nbytes else 0
        if entry.state == "back":
            self._device(-entry.nbytes)

    # -- step boundaries -------------------------------------------------------------------
    def assert_empty(self) -> None:
        if self.entries or self.host_bytes:
            keys = sorted(self.entries)[:4]
            raise OffloadError(f"the step ended with offloaded activations never used by a B (or W): {keys}")

    def clear(self) -> None:
        """A failed step: let everything go (after the copies in flight on GPU, which may still read it)."""
        self.copies.drain()
        self.entries.clear()
        self.host_bytes = 0
        self.device_bytes = 0


class _EmulatedLanes:
    """The copy lanes of an emulated device (module doc): their timing, no data."""

    def __init__(self, seconds: dict) -> None:
        self.seconds = seconds
        self.d2h_free = self.h2d_free = 0.0
        self.out_end: dict = {}
        self.back_end: dict = {}
        self.copies: list = []  # ("D2H" | "H2D", key, start, end), time.monotonic

    def out(self, key) -> None:
        start = max(time.monotonic(), self.d2h_free)
        self.d2h_free = self.out_end[key] = start + self.seconds.get(key, 0.0)
        self.copies.append(("D2H", key, start, self.d2h_free))

    def back(self, key) -> None:
        start = max(time.monotonic(), self.h2d_free, self.out_end.get(key, 0.0))
        self.h2d_free = self.back_end[key] = start + self.seconds.get(key, 0.0)
        self.copies.append(("H2D", key, start, self.h2d_free))

    def wait(self, key) -> None:
        from .deadline import wait_until

        wait_until(self.back_end.get(key, 0.0))


def for_rank(plan, rank: int, device: torch.device, params=(), *,
             emulated_copy_seconds: Optional[float] = None, copies=None) -> Optional[ActivationOffload]:
    """The rank's offloader for one step of `plan` (an OffloadPlan), or None when it offloads nothing.
    On emulated devices (`emulated_copy_seconds`: seconds per time unit) each copy takes its plan's
    copy time (activation units / the plan's bandwidth) on its lane; None: copies take their own time.
    `copies`: the device's copies (`offload_copies`), made once by the caller and kept across steps."""
    if plan is None or not plan.reload_at[rank]:
        return None
    lanes = None
    if emulated_copy_seconds is not None:
        lanes = {key: emulated_copy_seconds * plan.copy_time(rank, key) for key in plan.reload_at[rank]}
    return ActivationOffload(plan.reload_at[rank].keys(), plan.reloads_before(rank), device, params, lanes,
                             copies=copies)


# -- the copy lanes' bandwidth, measured ---------------------------------------------------------

def lane_rate(copies: list) -> float:
    """Bytes per second of the slower lane over `copies` ((direction, bytes, seconds)); inf: none timed."""
    rates = []
    for direction in ("D2H", "H2D"):
        moved = [(n, t) for d, n, t in copies if d == direction and n > 0]
        if moved:
            rates.append(sum(n for n, _ in moved) / max(sum(t for _, t in moved), 1e-12))
    return min(rates, default=math.inf)


def measured_bandwidth(step, schedule, costs, rank: int, device: torch.device, group=None) -> float:
    """The copy lanes' bandwidth in the cost model's units (activation shares per time unit), from
    a step that offloaded (`step`: the executor's StepResult, with its timeline and its copies'
    times, `copy_seconds`). Time unit: this rank's F time for one microbatch under `costs` against
    the step's measured F time; memory unit: this rank's F memory under `costs` against the bytes the
    step's F ops saved. Every rank of `group` gets the smallest."""
    from ..schedules.offload import _resolve
    from ..schedules.ir import F

    sc = _resolve(schedule, costs)
    stages = schedule.stage_table[rank]
    f_units = sum(sc.duration(F, s) for s in stages)
    mem_units = sum(sc.memory(F, s) for s in stages)
    # an overlapped pair's F half is recorded with the pair's time: only the F ops outside pairs tell F's (a
    # rank with none does not bound the lanes)
    paired = {schedule.ranks[rank][p] for p in schedule.paired(rank)}
    f_times = [r.end - r.start for r in step.timeline if r.op.kind == F and r.op not in paired]
    rate = lane_rate(getattr(step, "copy_seconds", ()))
    if not f_times or not step.offloaded or step.offloaded_bytes <= 0 or f_units <= 0 or mem_units <= 0 \
            or math.isinf(rate):
        value = math.inf  # nothing moved here: this rank does not bound the lanes
    else:
        rank_bytes = step.offloaded_bytes / step.offloaded * len(stages)  # one microbatch, every chunk
        rank_seconds = statistics.median(f_times) * len(stages)
        # shares per time unit: (rank_bytes / mem_units) bytes per share, (rank_seconds / f_units) s per unit
        value = rate * (rank_seconds / f_units) / (rank_bytes / mem_units)
    if group is not None:
        import torch.distributed as dist

        box = torch.tensor([value], dtype=torch.float64)
        if dist.get_backend(group) == "nccl":
            box = box.to(device)
        dist.all_reduce(box, op=dist.ReduceOp.MIN, group=group)
        value = float(box.item())
    return value  # inf where no rank moved anything: copies are then free
