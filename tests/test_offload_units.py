"""runtime/offload.py on CPU, one process: what is packed, what the host pool holds, what a failed
step leaves (nothing), and the same gradients bit for bit."""
from __future__ import annotations

import gc
from types import SimpleNamespace
import weakref

import pytest
import torch

import expected_skips

from primus_megatron.runtime.offload import ActivationOffload, OffloadError
from primus_megatron.runtime.offload_copies import aligned
from primus_megatron.runtime.wgrad_store import get_store
from primus_megatron.schedules import Op

CPU = torch.device("cpu")


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))


def _grads(model, x, offload=None, key=(0, 0)):
    model.zero_grad()
    ctx = offload.forward(key) if offload else torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
    with ctx:
        loss = model(x).square().sum()
    if offload:
        offload.offloaded(key)
        offload.ready(key)
    loss.backward()
    if offload:
        offload.release(key)
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def test_offloaded_backward_is_bitwise_the_plain_one():
    model, x = _model(), torch.randn(5, 8, requires_grad=True)
    plain_loss, plain = _grads(model, x)
    offload = ActivationOffload({(0, 0)}, {}, CPU, params=list(model.parameters()))
    loss, moved = _grads(model, x, offload)
    assert offload.moved == 1 and offload.peak_host_bytes > 0
    assert torch.equal(loss, plain_loss) and all(torch.equal(a, b) for a, b in zip(moved, plain))
    offload.assert_empty()


def test_parameters_and_their_views_stay_on_the_device():
    model, x = _model(), torch.randn(5, 8)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    offload = ActivationOffload({(0, 0)}, {}, CPU, params=list(model.parameters()))
    with offload.forward((0, 0)):
        model(x).sum()
    recorded = {ptr for ptr, _ in offload.entries[(0, 0)].index}
    assert recorded and not recorded & params  # activations recorded, no weight among them


def test_the_device_copy_is_freed_and_the_host_pool_holds_one_copy_per_storage():
    offload = ActivationOffload({(0, 0)}, {}, CPU)
    x = torch.randn(64, requires_grad=True)
    with offload.forward((0, 0)):
        h = x * 2  # saved by sin (and cos via the same storage): one storage
        y = h.sin() + h[:32].cos().sum()
    alive = weakref.ref(h.untyped_storage())
    del h
    offload.offloaded((0, 0))
    gc.collect()
    assert alive() is None  # the device copy went
    assert offload.host_bytes == aligned(64 * 4)  # one segment: what sin and cos read of it
    offload.ready((0, 0))
    y.sum().backward()
    plain = x.detach().clone().requires_grad_()
    ((plain * 2).sin() + (plain * 2)[:32].cos().sum()).sum().backward()
    assert torch.equal(x.grad, plain.grad)
    offload.release((0, 0))
    assert offload.host_bytes == 0
    offload.assert_empty()


def test_the_planned_op_issues_the_reload():
    offload = ActivationOffload({(1, 0)}, {Op("W", 0): [(1, 0)]}, CPU)
    x = torch.randn(4, requires_grad=True)
    with offload.forward((1, 0)):
        y = (x * 3).exp()
    offload.offloaded((1, 0))
    assert offload.entries[(1, 0)].state == "out"
    offload.before(Op("F", 2))
    assert offload.entries[(1, 0)].state == "out"
    offload.before(Op("W", 0))
    assert offload.entries[(1, 0)].state == "back"


def test_a_failed_step_releases_everything_and_an_unused_offload_is_reported():
    offload = ActivationOffload({(0, 0), (1, 0)}, {}, CPU)
    x = torch.randn(16, requires_grad=True)
    for mb in (0, 1):
        with offload.forward((mb, 0)):
            (x * (mb + 2)).sin()
        offload.offloaded((mb, 0))
    with pytest.raises(OffloadError, match="never used by a B"):
        offload.assert_empty()
    offload.clear()
    assert not offload.entries and offload.host_bytes == 0
    offload.assert_empty()


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason=expected_skips.reason("no-cuda", "needs a CUDA device (the pinned-buffer, stream and event path)"))
def test_cuda_offload_is_bitwise_and_frees_the_device_copy():
    """The GPU path: pinned host buffers, the copy streams, the B's stream waiting on the reload's event.
    The device is kept busy so the host runs ahead: the device copies go back to the allocator as the
    copy out is queued (record_stream), before it has run, and a block the allocator hands out at once
    and overwrites must not be one the copy still reads (issue 46)."""
    from primus_megatron.runtime import offload_copies as C

    device = torch.device("cuda", torch.cuda.current_device())
    model = _model().to(device)
    x = torch.randn(4096, 8, device=device, requires_grad=True)
    plain_loss, plain = _grads(model, x)
    offload = ActivationOffload({(0, 0)}, {}, device, params=list(model.parameters()))
    model.zero_grad()
    with offload.forward((0, 0)):
        loss = model(x).square().sum()
    with torch.cuda.stream(offload.copies.d2h):  # the copy lane is busy: the copy out runs late, after the
        torch.cuda._sleep(200_000_000)            # compute stream's next work (the overwrite below)
    before = torch.cuda.memory_allocated()
    offload.offloaded((0, 0))
    assert torch.cuda.memory_allocated() < before  # handed back at once, not when a poll sees the copy done
    # each freed block overwritten, one piece of its size each (benchmarks/gpu_pipeline.py _scribbling)
    junk = [torch.full((n,), 255, dtype=torch.uint8, device=device) for n in offload.entries[(0, 0)].freed_sizes]
    assert offload.entries[(0, 0)].host.is_pinned()
    offload.ready((0, 0))
    loss.backward()
    offload.release((0, 0))
    assert torch.equal(loss.detach(), plain_loss)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), plain))
    offload.assert_empty()
    del junk
    pair = C.copy_streams(device)
    assert C.copy_streams(device) is pair and offload.copies.d2h is pair[0]
    if C._runtime_library() is not None:  # the GPU runtime reached: streams outside torch's pool
        assert all(isinstance(s, torch.cuda.ExternalStream) for s in pair)


# -- the copy lanes' bandwidth, measured at start-up ----------------------------------------------

def _step_result(f_seconds: list, offloaded: int, nbytes: int, copies: tuple = ()):
    """What the executor hands back after a step: F records on the host clock, what was offloaded, its
    copies' (direction, bytes, seconds)."""
    from types import SimpleNamespace

    from primus_megatron.runtime.executor import OpRecord

    t, timeline = 0.0, []
    for i, seconds in enumerate(f_seconds):
        timeline.append(OpRecord(0, Op("F", i), 0, t, t + seconds))
        timeline.append(OpRecord(0, Op("B", i), 0, t + seconds, t + 3 * seconds))  # B times are not F's
        t += 4 * seconds
    return SimpleNamespace(timeline=timeline, offloaded=offloaded, offloaded_bytes=nbytes, copy_seconds=list(copies))


@pytest.mark.parametrize("name, chunks", [("zb-h1", 1), ("zbv", 2)])
def test_measured_bandwidth_is_in_activation_shares_per_time_unit(name, chunks):
    """Under unit costs the time unit is this rank's F of one microbatch and the memory unit its
    activations: 4 ms of F per chunk and lanes whose copies carried the rank's activations of a
    microbatch (every chunk's: 2 x 1000 bytes under V) per 1 ms carry 4 shares per unit of F time. The
    rate is the step's own copies' (issue 46: no separate probe), the slower direction's."""
    from primus_megatron.runtime import offload as rt
    from primus_megatron.schedules import Costs, generate

    schedule = generate(name, 2, 4)
    per_copy = 1e-3 / chunks  # 1000 bytes in 1/chunks ms: 1000 x chunks bytes per ms
    copies = [("D2H", 1000, per_copy)] * 4 + [("H2D", 1000, per_copy / 2)] * 4  # H2D twice as fast
    step = _step_result([4e-3, 4e-3, 5e-3, 4e-3], offloaded=4, nbytes=4 * 1000, copies=copies)
    assert rt.measured_bandwidth(step, schedule, None, 0, CPU) == pytest.approx(4.0 * chunks)
    # costs whose rank F takes 2 time units (a unit is half the F time) and adds 0.5 memory units (a
    # rank's activations of a microbatch are half a share): 4 x chunks x 1/2 x 1/2 shares per unit
    costs = Costs(f=2.0, mem_f=0.5, mem_b=-0.25, mem_w=-0.25)
    assert rt.measured_bandwidth(step, schedule, costs, 0, CPU) == pytest.approx(4.0 * chunks / 2.0 * 0.5)


def test_measured_bandwidth_reads_f_times_outside_overlapped_pairs():
    """A pair's F half is recorded with the pair's time (both halves in one combined call): the F ops
    outside pairs give the time unit."""
    from primus_megatron.runtime import offload as rt
    from primus_megatron.runtime.executor import OpRecord
    from primus_megatron.schedules import generate

    schedule = generate("dualpipev", 2, 8)
    paired = {schedule.ranks[0][p] for p in schedule.paired(0)}
    assert len(paired) > 8  # most of its 16 F ops: their median would be a pair's time
    timeline, t = [], 0.0
    for op in schedule.ranks[0]:
        seconds = 20e-3 if op in paired else 2e-3 if op.kind == "F" else 5e-3
        timeline.append(OpRecord(0, op, 0, t, t + seconds))
        t += seconds
    step = SimpleNamespace(timeline=timeline, offloaded=16, offloaded_bytes=16 * 1000,
                           copy_seconds=[("D2H", 1000, 0.5e-3)])
    # 2 ms of F per chunk (a time unit: 4 ms, both chunks) and 2000 bytes a share: lanes carrying 2000 bytes per
    # ms carry 4 shares per unit (the pairs' 20 ms read as F times would give about 40)
    assert rt.measured_bandwidth(step, schedule, None, 0, CPU) == pytest.approx(4.0)


def test_saves_inside_a_backward_pass_are_not_the_forwards_activations():
    """An overlapped pair in one combined call runs the B half's backward under the F half's hooks; a
    recompute inside that backward (a reentrant checkpoint) saves tensors of its own, left alone."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(8, 8))
    other = torch.utils.checkpoint.checkpoint(lambda t: (t @ w).tanh().square(), torch.randn(4, 8, requires_grad=True),
                                              use_reentrant=True)  # the B half's microbatch, made earlier
    offload = ActivationOffload({(0, 0)}, {}, CPU, params=[w])
    with offload.forward((0, 0)):
        y = (torch.randn(4, 8, requires_grad=True) @ w).tanh()  # the F half: saves its input and tanh's output
        other.sum().backward()  # the B half, recomputing inside the backward pass
    recorded = offload.entries[(0, 0)].storages
    assert len(recorded) == 2 and w.grad is not None
    offload.offloaded((0, 0))
    offload.ready((0, 0))
    y.sum().backward()
    offload.release((0, 0))
    offload.assert_empty()


def test_lane_rate_is_the_slower_direction_over_all_its_copies():
    from primus_megatron.runtime.offload import lane_rate

    assert lane_rate([("D2H", 100, 1.0), ("D2H", 300, 1.0), ("H2D", 400, 1.0)]) == 200.0
    assert lane_rate([("H2D", 400, 2.0)]) == 200.0
    assert lane_rate([]) == float("inf")


def test_a_rank_that_moved_nothing_does_not_bound_the_lanes():
    from primus_megatron.runtime import offload as rt
    from primus_megatron.schedules import generate

    step = _step_result([4e-3], offloaded=0, nbytes=0)
    assert rt.measured_bandwidth(step, generate("zb-h1", 2, 4), None, 1, CPU) == float("inf")


def test_copy_seconds_times_a_host_copy():
    from primus_megatron.runtime.offload_copies import copy_seconds

    seconds = copy_seconds(1 << 20, CPU, repeats=3)
    assert 0 < seconds < 10


@pytest.mark.skipif(not torch.cuda.is_available(), reason=expected_skips.reason(
    "no-cuda", "needs a CUDA device (pinned buffers, copy streams, events)"))
def test_cuda_copy_seconds_times_both_lanes_with_events():
    from primus_megatron.runtime.offload_copies import copy_seconds

    device = torch.device("cuda", torch.cuda.current_device())
    small, large = copy_seconds(1 << 16, device), copy_seconds(1 << 28, device)
    assert 0 < small < large < 10  # 256 MiB over PCIe/xGMI takes longer than 64 KiB


# -- emulated devices: the copies take the time the bandwidth says -----------------------------------

def test_emulated_lanes_queue_copies_and_the_b_waits_for_its_reload():
    """One lane per direction: two copies out queue behind each other, a copy back starts once its
    copy out has ended, and `ready` (before the B) sleeps until the copy back ends."""
    import time

    offload = ActivationOffload({(0, 0), (1, 0)}, {}, CPU, lane_seconds={(0, 0): 0.05, (1, 0): 0.05})
    x = torch.randn(8, requires_grad=True)
    ys = {}
    for mb in (0, 1):
        with offload.forward((mb, 0)):
            ys[mb] = (x * (mb + 2)).sin()
        offload.offloaded((mb, 0))
    began = time.monotonic()
    offload.reload((1, 0))  # its copy out ends after the first one's: it starts then
    offload.ready((1, 0))
    waited = time.monotonic() - began
    copies = offload.lanes.copies
    (d0, k0, s0, e0), (d1, k1, s1, e1), (d2, k2, s2, e2) = copies
    assert (d0, d1, d2) == ("D2H", "D2H", "H2D") and (k0, k1, k2) == ((0, 0), (1, 0), (1, 0))
    assert s1 >= e0 and e1 - s1 == pytest.approx(0.05)  # queued on the offload lane
    assert s2 >= e1 and e2 - s2 == pytest.approx(0.05)  # after its own copy out
    assert time.monotonic() >= e2 and waited >= 0.05  # the B waited for the copy back
    ys[1].sum().backward()
    offload.release((1, 0))
    offload.ready((0, 0))
    ys[0].sum().backward()
    offload.release((0, 0))
    offload.assert_empty()


def test_for_rank_times_the_lanes_from_the_plan_only_on_emulated_devices():
    from primus_megatron.runtime import offload as rt
    from primus_megatron.schedules import generate
    from primus_megatron.schedules import offload as O

    schedule = generate("zbv", 2, 4)
    plan = O.choose(schedule, "all", bandwidth=4.0).plan
    assert plan.copy_time(0, (0, 0)) == pytest.approx(0.5 / 4.0)  # a chunk holds half a rank's activations
    assert rt.for_rank(plan, 0, CPU).lanes is None  # real devices: the copies' own time
    lanes = rt.for_rank(plan, 0, CPU, emulated_copy_seconds=0.1).lanes
    assert lanes.seconds[(0, 0)] == pytest.approx(0.1 * 0.5 / 4.0)


# -- resident memory from the allocator's events -------------------------------------------------------

def test_resident_memory_counts_what_the_step_allocates_and_keeps_and_not_the_host_pool():
    import time

    from primus_megatron.runtime.resident import ResidentMemory

    def mark() -> float:
        """A perf_counter time 10 ms clear of the allocations on either side: the profiler stamps
        them on its own clock, mapped onto perf_counter, which a loaded host can skew a little."""
        time.sleep(0.01)
        t = time.perf_counter()
        time.sleep(0.01)
        return t

    before = torch.ones(1 << 16)  # allocated before: the baseline, its free is not the step's
    with ResidentMemory() as memory:
        kept = torch.ones(1 << 14)  # 64 KiB, kept
        t_kept = mark()
        temp = torch.ones(1 << 15)  # 128 KiB, freed again
        t_both = mark()
        del temp
        offload = ActivationOffload({(0, 0)}, {}, CPU)
        x = torch.ones(1 << 12, requires_grad=True)
        with offload.forward((0, 0)):
            y = (x * 2).sin()  # saves x * 2: 16 KiB
        t_saved = mark()
        offload.offloaded((0, 0))  # its copy goes to the host pool; the device copy is freed
        t_out = mark()
        del before
        t_end = mark()
    assert memory.at(t_kept) == 64 << 10
    assert memory.at(t_both) == (64 + 128) << 10
    assert memory.at(t_saved) >= (64 + 16 + 16) << 10  # kept, x * 2, y
    assert memory.at(t_out) == memory.at(t_saved) - (16 << 10)  # the saved storage left the device
    assert memory.host_bytes_peak == 16 << 10  # and went to the host pool, not counted as resident
    assert memory.at(t_end) == memory.at(t_out)  # a block from before the step frees nothing of the step's
    offload.ready((0, 0))
    y.sum().backward()
    offload.release((0, 0))


# -- what B keeps for W (a W share): moved to host after the B, back before the W ----------------------

def _deferred_w(key, go, inp, weight, out: list) -> None:
    """A B's deferred weight gradient as the hooked layers queue it: the store holds its arguments."""
    with get_store().capture(key):
        get_store().defer(lambda g, i, w: out.append(g.t().matmul(i) + w.sum()), tensors=(go, inp),
                          args=(go, inp, weight))


def test_w_share_goes_to_host_after_the_b_and_its_w_is_bitwise_the_plain_one():
    store = get_store()
    weight = torch.nn.Parameter(torch.randn(3, 6))
    base = torch.randn(6, 12)
    out, expected = [], []
    with store.step(splitting=True):
        _deferred_w((2, 1), base[:3].t().clone(), base.t(), weight, expected)
        store.run((2, 1))
        offload = ActivationOffload({(2, 1, "W")}, {Op("F", 5): [(2, 1, "W")]}, CPU, params=[weight])
        # the input: a transposed view (non-contiguous); the output gradient a view into the same storage
        held = base.clone()
        _deferred_w((2, 1), held[:3].t(), held.t(), weight, out)
        args = store.arguments((2, 1))[0]
        alive = weakref.ref(held.untyped_storage())
        del held
        offload.after(Op("B", 2, 1))
        gc.collect()
        assert alive() is None  # what B kept left the device
        assert args[2] is weight  # a parameter stays where it is
        assert offload.moved_w == 1 and offload.host_bytes == aligned(6 * 12 * 4)  # one copy of the shared storage
        assert offload.entries[(2, 1, "W")].state == "out"
        offload.before(Op("F", 5))  # the planned op issues the reload
        assert offload.entries[(2, 1, "W")].state == "back"
        offload.before(Op("W", 2, 1))  # the W gets its arguments back, rebuilt on the reloaded storage
        assert (2, 1, "W") not in offload.entries and offload.host_bytes == 0
        assert args[1].stride() == (1, 12) and args[1].shape == (12, 6)
        assert args[0].untyped_storage().data_ptr() == args[1].untyped_storage().data_ptr()
        store.run((2, 1))
    assert torch.equal(out[0], expected[0])
    offload.assert_empty()


def test_a_failed_step_releases_w_shares_and_an_unused_one_is_reported():
    store = get_store()
    with pytest.raises(RuntimeError, match="the step failed"):
        with store.step(splitting=True):
            offload = ActivationOffload({(0, 0, "W")}, {}, CPU)
            _deferred_w((0, 0), torch.randn(4, 2), torch.randn(4, 5), torch.nn.Parameter(torch.ones(1)), [])
            offload.after(Op("B", 0))
            assert offload.host_bytes == aligned(8 * 4) + aligned(20 * 4)  # one buffer, a segment per storage
            with pytest.raises(OffloadError, match="never used by a B \\(or W\\)"):
                offload.assert_empty()
            raise RuntimeError("the step failed")
    offload.clear()  # what the executor does when a step raises
    assert not offload.entries and offload.host_bytes == 0 and not store.pending((0, 0))
    offload.assert_empty()


def test_emulated_lanes_time_w_shares_and_the_w_waits_for_its_reload():
    import time

    store = get_store()
    with store.step(splitting=True):
        offload = ActivationOffload({(0, 0, "W")}, {}, CPU, lane_seconds={(0, 0, "W"): 0.05})
        with store.capture((0, 0)):
            store.defer(lambda: None)  # an emulated device's W keeps no tensor: only the time is real
        offload.after(Op("B", 0))
        began = time.monotonic()
        offload.before(Op("W", 0))  # not reloaded by a planned op: reloaded now, and waited for
        assert time.monotonic() - began >= 0.05
        (d0, k0, s0, e0), (d1, k1, s1, e1) = offload.lanes.copies
        assert (d0, d1) == ("D2H", "H2D") and k0 == k1 == (0, 0, "W") and s1 >= e0
        assert e1 - s1 == pytest.approx(0.05)
        store.run((0, 0))
    offload.assert_empty()


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason=expected_skips.reason("no-cuda", "needs a CUDA device (the pinned-buffer, stream and event path)"))
def test_cuda_w_share_offload_is_bitwise_and_frees_the_device_copy():
    store = get_store()
    device = torch.device("cuda", torch.cuda.current_device())
    weight = torch.nn.Parameter(torch.randn(64, 256, device=device))
    go, inp = torch.randn(4096, 64, device=device), torch.randn(4096, 256, device=device)
    out, expected = [], []
    with store.step(splitting=True):
        _deferred_w((0, 0), go, inp, weight, expected)
        store.run((0, 0))
        offload = ActivationOffload({(0, 0, "W")}, {}, device, params=[weight])
        _deferred_w((0, 0), go.clone(), inp.clone(), weight, out)
        with torch.cuda.stream(offload.copies.d2h):  # the copy out runs late (see the test above)
            torch.cuda._sleep(200_000_000)
        before = torch.cuda.memory_allocated()
        offload.after(Op("B", 0))
        assert torch.cuda.memory_allocated() < before  # handed back as the copy out is queued
        junk = [torch.full((n,), 255, dtype=torch.uint8, device=device)
                for n in offload.entries[(0, 0, "W")].freed_sizes]
        assert offload.entries[(0, 0, "W")].host.is_pinned()
        offload.before(Op("W", 0))  # reloaded on the H2D stream; the W's stream waits for its event
        store.run((0, 0))
        del junk
    torch.cuda.synchronize()
    assert torch.equal(out[0], expected[0])
    offload.assert_empty()
