"""GPU timing comes from CUDA/HIP events, chosen by the device (issue 28, 5).

No GPU here: the event type is injected (a fake with torch.cuda.Event's methods), the device is
a torch.device("cuda") object (constructing one needs no GPU). What is checked: the clock is
picked by the device and nothing else; on a GPU a mark is a recorded event and reading a time
waits for that event (never a host timestamp, never a device-wide synchronise); the executed
timeline keeps events and turns them into seconds only when read.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from primus_megatron.runtime.executor import OpRecord
from primus_megatron.runtime.profiler import EventClock, HostClock, clock_for
from primus_megatron.schedules import Op


class FakeEvent:
    """torch.cuda.Event's surface: record() on the current stream, synchronize(), elapsed_time() in ms.
    Its 'GPU time' is the order of recording, 2.5 ms apart."""

    recorded: list = []

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing, "events must be created with enable_timing=True to be timed"
        self.at = None
        self.synchronized = False

    def record(self, stream=None) -> None:
        self.at = 2.5 * len(FakeEvent.recorded)
        FakeEvent.recorded.append(self)

    def synchronize(self) -> None:
        self.synchronized = True

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert end.synchronized, "read an event's time only after it completed"
        return end.at - self.at


def test_the_clock_is_chosen_by_the_device():
    assert isinstance(clock_for(torch.device("cpu")), HostClock)
    assert isinstance(clock_for(torch.device("cuda", 0), event_type=FakeEvent), EventClock)
    assert isinstance(clock_for(SimpleNamespace(type="cuda"), event_type=FakeEvent), EventClock)  # HIP too
    assert isinstance(clock_for(torch.device("meta")), HostClock)


def test_event_marks_are_recorded_events_read_after_the_fact():
    FakeEvent.recorded = []
    clock = clock_for(torch.device("cuda", 0), event_type=FakeEvent)
    a, b, c = clock.mark(), clock.mark(), clock.mark()
    assert FakeEvent.recorded == [a, b, c] and not any(e.synchronized for e in (a, b, c))
    assert clock.elapsed(a, c) == 5e-3 and c.synchronized
    assert abs((clock.seconds(b) - clock.seconds(a)) - 2.5e-3) < 1e-9


def test_a_tiny_negative_event_interval_reads_as_zero():
    """Issue 45 item 11: HIP can return a tiny negative hipEventElapsedTime for a very short interval
    (ROCm/rocm-systems#9375); a negative op time would stop re-planning (Costs refuses negative costs)."""

    class HipEvent(FakeEvent):
        def elapsed_time(self, end) -> float:
            return -0.0004

    clock = clock_for(torch.device("cuda", 0), event_type=HipEvent)
    a, b = clock.mark(), clock.mark()
    assert clock.elapsed(a, b) == 0.0


def test_a_rank_launched_as_a_one_gpu_node_gets_its_device_under_hip_too():
    """Issue 45 item 12: ROCm's torch takes HIP_VISIBLE_DEVICES over CUDA_VISIBLE_DEVICES; an inherited
    one (AMD's images export it) must not put every rank on one device."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
    import rank_launch

    envs = [rank_launch.node_env({"HIP_VISIBLE_DEVICES": "0,1,2,3"}, r, 4, 4, 29500) for r in range(4)]
    assert [e["HIP_VISIBLE_DEVICES"] for e in envs] == ["0", "1", "2", "3"]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "1", "2", "3"]
    assert "HIP_VISIBLE_DEVICES" not in rank_launch.node_env({}, 1, 4, 4, 29500)  # NVIDIA: left alone
    # an inherited list: each rank on its entry of it (4-7), not on devices 0-3 outside it
    envs = [rank_launch.node_env({"HIP_VISIBLE_DEVICES": "4,5,6,7", "ROCR_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"},
                                 r, 8, 4, 29500) for r in range(8)]
    assert [e["HIP_VISIBLE_DEVICES"] for e in envs] == ["4", "5", "6", "7"] * 2
    assert {e["ROCR_VISIBLE_DEVICES"] for e in envs} == {"0,1,2,3,4,5,6,7"}
    assert [rank_launch.node_env({"CUDA_VISIBLE_DEVICES": "2,3"}, r, 2, 2, 29500)["CUDA_VISIBLE_DEVICES"]
            for r in range(2)] == ["2", "3"]


def test_the_executed_timeline_keeps_events_until_read():
    FakeEvent.recorded = []
    clock = clock_for(torch.device("cuda", 0), event_type=FakeEvent)
    start, end = clock.mark(), clock.mark()
    record = OpRecord(0, Op("F", 3, 0), 1, start, end, clock)
    assert not end.synchronized  # recording the op waited for nothing
    # record.start/end are seconds on the host's clock (hours of uptime: a float resolves ~4e-12 s
    # there, so 1e-12 failed once the machine had been up 5 hours); 1 ns still pins the 2.5 ms
    assert abs((record.end - record.start) - 2.5e-3) < 1e-9 and end.synchronized
    host = OpRecord(0, Op("F", 3, 0), 1, 1.0, 1.25)  # CPU: marks are seconds
    assert (host.start, host.end) == (1.0, 1.25)


def test_on_cpu_an_op_record_keeps_its_cpu_time_beside_its_wall_time():
    """The host clock's marks carry the thread's CPU time: a wait counts in the wall time and not in
    the CPU time, work in both (what the demo replays on time-shared cores, train/cpu_replay.py)."""
    import time

    from primus_megatron.train.cpu_replay import cpu_seconds

    clock = clock_for(torch.device("cpu"))
    start = clock.mark()
    time.sleep(0.2)
    slept = clock.mark()
    busy_until = time.thread_time() + 0.05
    while time.thread_time() < busy_until:
        pass
    worked = clock.mark()
    assert clock.elapsed(start, slept) >= 0.2 and clock.cpu_elapsed(start, slept) < 0.1
    assert clock.cpu_elapsed(slept, worked) >= 0.05
    assert clock.elapsed(slept, worked) >= clock.cpu_elapsed(slept, worked)
    record = OpRecord(0, Op("F", 0), 0, start, worked, clock)
    assert record.start == clock.seconds(start) and record.end - record.start == clock.elapsed(start, worked)
    assert cpu_seconds(record) == clock.cpu_elapsed(start, worked)
    assert cpu_seconds(OpRecord(0, Op("F", 0), 0, 0.0, 1.0)) is None  # marks without a clock: no CPU time
