"""Device-resident activation bytes of one step, measured from the allocator's own events.

An independent check of the planner's memory model (and of activation offload): nothing here
reads the autograd graph (the profiler's walk in `profiler.OpMemory`) or the offloader's
bookkeeping. `torch.profiler` with `profile_memory=True` reports every allocation and free the
allocator makes while it runs, with its time, pointer and size; blocks allocated before it
started (parameters, gradients, optimizer state: the baseline at step start) report no free.
So the bytes allocated on the device after the step started and not yet freed, at an instant,
are what the step keeps resident: activations autograd saved, what B keeps for W, messages
in flight, and the loss values kept for logging.

On CPU the host pool of offloaded activations is host memory in the same allocator: blocks
allocated under `HOST_SCOPE` (a `torch.profiler.record_function` scope that
`runtime.offload` opens around its copies to host) are host memory, not resident. On GPU only
device allocations count (pinned host buffers are the CPU's).

`ResidentMemory.at(t)` reads the resident bytes at a time on the host clock
(`time.perf_counter`, the executor's CPU timeline); `peak_at_ops(timeline)` is the largest of
them at the start and the end of every op, where the planner counts memory (transients inside
an op, freed before it ends, are not the plan's).
"""
from __future__ import annotations

import bisect
import time
from typing import Iterable, Optional

import torch

HOST_SCOPE = "primus_offload::to_host"


def _walk(events) -> Iterable:
    stack = list(events)
    while stack:
        event = stack.pop()
        yield event
        stack.extend(event.children)


def _under(event, scope: str) -> bool:
    parent = event.parent
    while parent is not None:
        if parent.name == scope:
            return True
        parent = parent.parent
    return False


class ResidentMemory:
    """A context manager around one step (module doc)."""

    def __init__(self, device: Optional[torch.device] = None) -> None:
        self.device_type = (device or torch.device("cpu")).type
        self._times: list = []  # host-clock seconds of each change, ascending
        self._live: list = []  # resident bytes after that change
        self.host_bytes_peak = 0

    def __enter__(self) -> "ResidentMemory":
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.device_type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._prof = torch.profiler.profile(activities=activities, profile_memory=True)
        self._prof.__enter__()
        # the profiler stamps events on the Unix clock; the executor's CPU timeline is perf_counter
        self._unix_ns, self._perf = time.time_ns(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self._prof.__exit__(*exc)
        if exc[0] is None:
            self._read(self._prof.profiler.kineto_results.experimental_event_tree())

    def _read(self, tree) -> None:
        changes = []  # (unix ns, bytes, ptr, host)
        for event in _walk(tree):
            if not str(event.tag).endswith("Allocation"):  # torch._C._profiler._EventType.Allocation
                continue
            fields = event.extra_fields
            if fields.device.type != self.device_type:
                continue
            changes.append((event.start_time_ns, fields.alloc_size, fields.ptr, event))
        changes.sort(key=lambda c: c[0])
        live = host = 0
        host_blocks: set = set()
        for ns, size, ptr, event in changes:
            if size > 0 and _under(event, HOST_SCOPE):
                host_blocks.add(ptr)
                host += size
                self.host_bytes_peak = max(self.host_bytes_peak, host)
                continue
            if size < 0 and ptr in host_blocks:
                host_blocks.discard(ptr)
                host += size
                continue
            live += size
            self._times.append(self._perf + (ns - self._unix_ns) / 1e9)
            self._live.append(live)

    def at(self, t: float) -> int:
        """Resident bytes at host-clock time `t` (seconds, `time.perf_counter`)."""
        i = bisect.bisect_right(self._times, t)
        return self._live[i - 1] if i else 0

    def peak_at_ops(self, timeline) -> int:
        """The largest resident bytes at the start and the end of the step's ops (executor OpRecords
        timed on the host's wall clock: CPU runs, with or without the ops' CPU time beside it)."""
        peak = 0
        for record in timeline:
            if record.clock is not None and not record.clock.kind.startswith("host"):
                raise ValueError("resident memory is read against a host-clock timeline (CPU runs)")
            peak = max(peak, self.at(record.start), self.at(record.end))
        return peak


def simulated_peak(runner, pp: int, microbatches: int, costs, unit_bytes: float, rank: int) -> float:
    """The simulator's peak resident activation bytes on `rank` for the plan `runner` (a PipelineRunner)
    ran last at (pp, microbatches): its schedule and offload set and reload points under `costs`
    (memory in units of `unit_bytes`). The CPU host pool copies on the compute thread, each done
    before the next op starts, so the copies are timed so (free lanes), not overlapping later ops."""
    import math

    from .. import schedules as S

    schedule = runner.plan(pp, microbatches)[0]
    plan = runner.planner.offload_plan((pp, microbatches, False))
    if plan is not None:
        plan = S.offload.OffloadPlan(plan.mode, math.inf, plan.reload_at, plan.sizes)
    return S.offload.simulate_offload(schedule, plan, costs).peak_memory[rank] * unit_bytes
