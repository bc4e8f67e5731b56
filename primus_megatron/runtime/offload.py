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

`offloaded(key)` after the F copies each recorded storage to host and lets the device
storage go (once the copy is done); `reload(key)` at the op the plan names copies it back
into a fresh device buffer; `ready(key)` before the B makes the B's stream wait for that
copy; unpack rebuilds each saved tensor on the reloaded storage with its own dtype,
size, stride and offset, so backward computes on the same bytes in the same layout
(bitwise the gradients without offload). `release(key)` after the B drops our
references (what W's closures keep stays alive through them).

What a B keeps for its W (a W share, plan key (microbatch, chunk, "W")) moves the same way:
the deferred weight-gradient closures hold no tensor of their own, the weight-gradient store
holds their arguments (`WeightGradStore.arguments`: megatron's linear layers' input and output
gradient, TE's through `te_wgrad`). `after(op)` at the B's end records each argument's storage
(parameters and their views excluded, one copy per storage), puts a packed reference in the
argument's place and copies the storages to host like an F's; `before(op)` reloads it at the op
the plan names and, as the W starts, waits for the reload and puts each argument back, rebuilt
on the reloaded storage with its own dtype, size, stride and offset.

On GPU: pinned host buffers (torch's caching host allocator), one device-to-host and one
host-to-device stream, CUDA events between them and the compute stream; the host never
waits (`poll` frees device storages whose copy-out event has fired). On CPU the same path
runs with a host pool: the original storage is freed, a copy is held until the reload.

On emulated devices (`runtime.emulated`; the runner's `emulated_copy_seconds`) the copies also
take the time the plan's bandwidth says, on one lane per direction as the planner models them: a copy out starts
when its F (B, for a W share) ends and its lane is free; a copy back when its issuing op starts, its
lane is free and its copy out has ended; the B (the W, for a W share) waits (sleeps) until its copy
back ends. The step's result lists the copies (`StepResult.copies`), timed on `time.monotonic`.

The copy lanes' bandwidth, when not given, is measured at start-up (`measured_bandwidth`): the
first step runs with its copies planned as free; then each rank times a device-to-host and a
host-to-device copy of one microbatch's activations as that step moved them (pinned buffers on
their own streams, timed by events, on GPU; host copies on CPU), converts it into the cost
model's units with that step's F times, and the ranks agree on the slowest.
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
from .resident import HOST_SCOPE
from .wgrad_store import get_store

Key = tuple  # (microbatch, chunk): an F's saved activations; (microbatch, chunk, "W"): what its B keeps for W


class OffloadError(RuntimeError):
    """The offload state of a step is not what the plan says (a bug, named with the op)."""


@dataclass
class _Entry:
    """The saved storages of one offloaded F."""

    storages: list = field(default_factory=list)  # device UntypedStorage, until copied out
    index: dict = field(default_factory=dict)  # (data_ptr, nbytes) -> position
    host: list = field(default_factory=list)  # uint8 host tensors, after the copy out
    back: list = field(default_factory=list)  # uint8 device tensors, after the reload
    out_event: object = None
    back_event: object = None
    state: str = "held"  # held -> out -> back

    @property
    def nbytes(self) -> int:
        return sum(k[1] for k in self.index)


class _Packed(tuple):
    """A saved tensor's place in an entry: (key, storage position, dtype, size, stride, offset)."""

    __slots__ = ()


def _as_bytes(storage: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


class ActivationOffload:
    """One rank's offloads for one step (module doc). `plan`: {Op: [keys reloaded as it starts]}
    and the set of offloaded keys, both from `schedules.offload.OffloadPlan`."""

    def __init__(self, keys, reloads_before: dict, device: torch.device, params=(), lane_seconds=None) -> None:
        self.keys = frozenset(keys)
        # emulated devices: {key: seconds one copy takes on a lane}; None: the copies' own time
        self.lanes = None if lane_seconds is None else _EmulatedLanes(lane_seconds)
        self.reloads_before = dict(reloads_before)
        self.device = device
        self.cuda = device.type == "cuda"
        self._params = {p.untyped_storage().data_ptr() for p in params}
        self.entries: dict[Key, _Entry] = {}
        self._freeing: list = []  # (event, storages) whose copy out may still run (GPU)
        if self.cuda:
            self.d2h = torch.cuda.Stream(device)
            self.h2d = torch.cuda.Stream(device)
        self.host_bytes = 0  # held in the host pool now
        self.peak_host_bytes = 0
        self.moved = 0  # F ops offloaded this step
        self.moved_bytes = 0  # what they saved, in all
        self.moved_w = 0  # W shares offloaded this step (what B ops kept for W)
        self.moved_w_bytes = 0

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
    def forward(self, key: Key) -> Iterator[None]:
        """Around an F whose activations the plan offloads (nothing otherwise)."""
        if key not in self.keys:
            yield
            return
        if key in self.entries:
            raise OffloadError(f"microbatch {key[0]} chunk {key[1]} ran its F twice in one step")
        entry = self.entries[key] = _Entry()

        def pack(t: torch.Tensor):
            return t if self._keeps(t) else self._pack(entry, key, t)

        def unpack(packed):
            return packed if torch.is_tensor(packed) else self._unpack(packed)

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            yield

    @staticmethod
    def _pack(entry: _Entry, key: Key, t: torch.Tensor) -> _Packed:
        """Record `t`'s storage in `entry` (once per storage) and return where `t` lies in it."""
        storage = t.untyped_storage()
        skey = (storage.data_ptr(), storage.nbytes())
        position = entry.index.get(skey)
        if position is None:
            position = entry.index[skey] = len(entry.storages)
            entry.storages.append(storage)
        return _Packed((key, position, t.dtype, t.size(), t.stride(), t.storage_offset()))

    def _unpack(self, packed: _Packed) -> torch.Tensor:
        owner, position, dtype, size, stride, offset = packed
        storage = self._storage(owner, position)
        return torch.empty(0, dtype=dtype, device=storage.device).set_(storage, offset, size, stride)

    def _storage(self, key: Key, position: int) -> torch.UntypedStorage:
        entry = self.entries.get(key)
        if entry is None:
            raise OffloadError(f"backward read an activation of microbatch {key[0]} chunk {key[1]} after its B "
                               f"released it")
        if entry.state == "held":
            return entry.storages[position]
        if entry.state == "out":  # used before its planned reload (e.g. a graph walk): bring it back now
            self.reload(key)
            self.ready(key)
        return entry.back[position].untyped_storage()

    # -- moves -----------------------------------------------------------------------------
    def after(self, op) -> None:
        """As `op` ends: an F's saved activations, or what a B keeps for its W, go to host as the plan says
        (an F's after the profiler's graph walk, which reads the saved tensors)."""
        if op.kind == F:
            self.offloaded((op.mb, op.chunk))
        elif op.kind == B:
            self.offload_w_share((op.mb, op.chunk))

    def offloaded(self, key: Key) -> None:
        """After the F of `key`: copy its storages to host; the device copies go once that is done."""
        entry = self.entries.get(key)
        if entry is None:
            return
        self._copy_out(key, entry)
        self.moved += 1
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
            for i, t in enumerate(args):
                if torch.is_tensor(t) and not self._keeps(t):
                    args[i] = self._pack(entry, wkey, t)
        self._copy_out(wkey, entry)
        self.moved_w += 1
        self.moved_w_bytes += entry.nbytes

    def _copy_out(self, key: Key, entry: _Entry) -> None:
        sources = [_as_bytes(s) for s in entry.storages]
        if self.cuda:
            self.d2h.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(self.d2h):
                entry.host = [torch.empty(src.numel(), dtype=torch.uint8, pin_memory=True) for src in sources]
                for dst, src in zip(entry.host, sources):
                    dst.copy_(src, non_blocking=True)
                entry.out_event = torch.cuda.Event()
                entry.out_event.record(self.d2h)
            self._freeing.append((entry.out_event, entry.storages))
        else:
            with torch.profiler.record_function(HOST_SCOPE):  # host memory: `resident` tells it from the device's
                entry.host = [src.clone() for src in sources]
        entry.storages = []
        entry.state = "out"
        if self.lanes:
            self.lanes.out(key)
        self.host_bytes += entry.nbytes
        self.peak_host_bytes = max(self.peak_host_bytes, self.host_bytes)
        self.poll()

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
                if isinstance(packed, _Packed):
                    args[i] = self._unpack(packed)
        self.release(wkey)  # the arguments hold the reloaded storages now

    def reload(self, key: Key) -> None:
        entry = self.entries[key]
        if self.cuda:
            compute = torch.cuda.current_stream(self.device)
            # allocated in the compute stream's order, so the H2D stream writes it only after the compute
            # stream is done with whatever that memory held before
            entry.back = [torch.empty(h.numel(), dtype=torch.uint8, device=self.device) for h in entry.host]
            self.h2d.wait_stream(compute)
            self.h2d.wait_event(entry.out_event)
            with torch.cuda.stream(self.h2d):
                for dst, src in zip(entry.back, entry.host):
                    dst.copy_(src, non_blocking=True)
                entry.back_event = torch.cuda.Event()
                entry.back_event.record(self.h2d)
        else:
            entry.back = [h.clone() for h in entry.host]
        if self.lanes:
            self.lanes.back(key)
        entry.state = "back"

    def ready(self, key: Key) -> None:
        """Before the B of `key` (the W, for a W share): what it reads is (or will be, in stream order) on
        the device."""
        entry = self.entries.get(key)
        if entry is None:
            return
        if entry.state == "out":
            self.reload(key)
        if self.cuda and entry.back_event is not None:
            torch.cuda.current_stream(self.device).wait_event(entry.back_event)
        if self.lanes:
            self.lanes.wait(key)

    def release(self, key: Key) -> None:
        """After the B of `key`: drop our references (W's closures keep theirs)."""
        entry = self.entries.pop(key, None)
        if entry is None:
            return
        if entry.state != "held":
            self.host_bytes -= entry.nbytes
        if self.cuda and entry.back_event is not None:
            # the host buffer may still be read by the H2D copy: free it after that event
            self._freeing.append((entry.back_event, entry.host))
        self.poll()

    def poll(self) -> None:
        """Let go of device storages (host buffers) whose copy out (back) has finished; never waits."""
        if self.cuda:
            self._freeing = [(event, held) for event, held in self._freeing if not event.query()]

    # -- step boundaries -------------------------------------------------------------------
    def assert_empty(self) -> None:
        if self.entries or self.host_bytes:
            keys = sorted(self.entries)[:4]
            raise OffloadError(f"the step ended with offloaded activations never used by a B (or W): {keys}")

    def clear(self) -> None:
        """A failed step: let everything go (after the copies in flight on GPU, which may still read it)."""
        if self.cuda:
            torch.cuda.current_stream(self.device).wait_stream(self.d2h)
            torch.cuda.current_stream(self.device).wait_stream(self.h2d)
        self.entries.clear()
        self._freeing.clear()
        self.host_bytes = 0


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
        from .emulated import wait_until

        wait_until(self.back_end.get(key, 0.0))


def for_rank(plan, rank: int, device: torch.device, params=(), *,
             emulated_copy_seconds: Optional[float] = None) -> Optional[ActivationOffload]:
    """The rank's offloader for one step of `plan` (an OffloadPlan), or None when it offloads nothing.
    On emulated devices (`emulated_copy_seconds`: seconds per time unit) each copy takes its plan's
    copy time (activation units / the plan's bandwidth) on its lane; None: copies take their own time."""
    if plan is None or not plan.reload_at[rank]:
        return None
    lanes = None
    if emulated_copy_seconds is not None:
        lanes = {key: emulated_copy_seconds * plan.copy_time(rank, key) for key in plan.reload_at[rank]}
    return ActivationOffload(plan.reload_at[rank].keys(), plan.reloads_before(rank), device, params, lanes)


# -- the copy lanes' bandwidth, measured ---------------------------------------------------------

def copy_seconds(nbytes: int, device: torch.device, repeats: int = 5) -> float:
    """Seconds one copy lane takes for `nbytes`: the slower of a device-to-host and a host-to-device
    copy (median of `repeats`). On GPU a pinned host buffer, each copy on a stream of its own between
    two events; on CPU a host copy, timed on the host's clock."""
    nbytes = max(1, int(nbytes))
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    times = []
    if device.type == "cuda":
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        back = torch.empty_like(src)
        d2h, h2d = torch.cuda.Stream(device), torch.cuda.Stream(device)
        for _ in range(repeats + 1):  # the first round warms the streams up
            marks = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            d2h.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(d2h):
                marks[0].record(d2h)
                host.copy_(src, non_blocking=True)
                marks[1].record(d2h)
            h2d.wait_stream(d2h)
            with torch.cuda.stream(h2d):
                marks[2].record(h2d)
                back.copy_(host, non_blocking=True)
                marks[3].record(h2d)
            marks[3].synchronize()
            times.append(max(marks[0].elapsed_time(marks[1]), marks[2].elapsed_time(marks[3])) / 1e3)
        times = times[1:]
    else:
        for _ in range(repeats):
            start = time.perf_counter()
            host = src.clone()
            mid = time.perf_counter()
            host.clone()
            end = time.perf_counter()
            times.append(max(mid - start, end - mid))
    return max(statistics.median(times), 1e-9)


def measured_bandwidth(step, schedule, costs, rank: int, device: torch.device, group=None) -> float:
    """The copy lanes' bandwidth in the cost model's units (activation shares per time unit), from
    a step that offloaded (`step`: the executor's StepResult, with its timeline) and a timed copy of
    one microbatch's activations of this rank. Time unit: this rank's F time for one microbatch
    under `costs` against the step's measured F time; memory unit: this rank's F memory under
    `costs` against the bytes the step's F ops saved. Every rank of `group` gets the smallest."""
    from ..schedules.offload import _resolve
    from ..schedules.ir import F

    sc = _resolve(schedule, costs)
    stages = schedule.stage_table[rank]
    f_units = sum(sc.duration(F, s) for s in stages)
    mem_units = sum(sc.memory(F, s) for s in stages)
    f_times = [r.end - r.start for r in step.timeline if r.op.kind == F]
    if not f_times or not step.offloaded or step.offloaded_bytes <= 0 or f_units <= 0 or mem_units <= 0:
        value = math.inf  # nothing moved here: this rank does not bound the lanes
    else:
        rank_bytes = step.offloaded_bytes / step.offloaded * len(stages)  # one microbatch, every chunk
        rank_seconds = statistics.median(f_times) * len(stages)
        seconds = copy_seconds(rank_bytes, device)
        # shares per time unit: (rank_bytes / mem_units) bytes per share, (rank_seconds / f_units) s per unit
        value = (rank_bytes / seconds) * (rank_seconds / f_units) / (rank_bytes / mem_units)
    if group is not None:
        import torch.distributed as dist

        box = torch.tensor([value], dtype=torch.float64)
        if dist.get_backend(group) == "nccl":
            box = box.to(device)
        dist.all_reduce(box, op=dist.ReduceOp.MIN, group=group)
        value = float(box.item())
    return value  # inf where no rank moved anything: copies are then free
