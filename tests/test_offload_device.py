"""Activation offload's GPU semantics shown on CPU (issue 46): a device double whose copies have not
run when the host moves on (a GPU's host runs ahead: p2p waits are device-side), the copy streams made
once per device, the simulator counting reload buffers from their issue, and what is not worth moving.

`Lagging` stands in for `runtime.offload_copies.CudaCopies`: the same four verbs, data copied at once
(so gradients can be compared) but no copy "has run" until the compute stream waits for it, and every
source storage marked for the copy stream (CudaCopies' `record_stream`) before the offloader may drop
it. It is at least as strict as the GPU where it matters here: an offloader that waited for a copy by
polling would never see one finish, and one that read a reload without waiting is caught."""
from __future__ import annotations

import gc
import weakref
from contextlib import nullcontext

import pytest
import torch

from primus_megatron.runtime import offload_copies as C
from primus_megatron.runtime.offload import ActivationOffload
from primus_megatron.schedules import Op, generate
from primus_megatron.schedules import offload as O

CPU = torch.device("cpu")


class Token:
    def __init__(self, what: str) -> None:
        self.what, self.waited = what, False


class Lagging:
    """A GPU whose copies run behind the host (module doc)."""

    def __init__(self) -> None:
        self.marked: set = set()  # data_ptr of every storage marked as in use by the copy stream
        self.waits: list = []  # tokens the compute stream waited for, in order
        self.backs: list = []

    def out(self, sources, offsets, nbytes):
        host = torch.empty(nbytes, dtype=torch.uint8)
        for src, at in zip(sources, offsets):
            host[at:at + src.numel()].copy_(src)
            self.marked.add(src.untyped_storage().data_ptr())
        return host, Token("out")

    def back(self, host, segments, after, device):
        token = Token("back")
        self.backs.append(token)
        return [host[at:at + n].clone() for at, n in segments], token

    def compute_waits(self, token) -> None:
        if token is not None:
            token.waited = True
            self.waits.append(token)

    def drain(self) -> None:
        pass

    def host_bytes(self, nbytes: int) -> int:
        return C.pinned_bytes(nbytes)

    def seconds(self) -> list:
        return []


def _forward(offload, key, x, scale: float):
    with offload.forward(key):
        h = x * scale
        return h, (h.sin() * 3).sum()


def test_device_copies_go_back_to_the_allocator_as_the_copy_is_queued_not_when_a_poll_sees_it():
    """Item 1: with no copy run yet, each moved storage is already unreferenced (the allocator reuses
    it once its copy has run, record_stream) and was marked for the copy stream first; nothing of
    offload's stays on the device until a reload."""
    device = Lagging()
    offload = ActivationOffload({(0, 0), (1, 0), (2, 0)}, {}, CPU, copies=device)
    x = torch.randn(256, requires_grad=True)
    losses = {}
    for mb in range(3):
        h, losses[mb] = _forward(offload, (mb, 0), x, mb + 2.0)
        ptr, alive = h.untyped_storage().data_ptr(), weakref.ref(h.untyped_storage())
        del h
        offload.offloaded((mb, 0))
        gc.collect()
        assert alive() is None and ptr in device.marked
        assert offload.device_bytes == 0 and not device.waits  # the host never waited
    for mb in reversed(range(3)):
        offload.ready((mb, 0))
        losses[mb].backward()
        offload.release((mb, 0))
    assert [t.what for t in device.waits] == ["back"] * 3  # each B waited for its own reload only
    offload.assert_empty()


def test_a_saved_tensor_read_after_its_reload_was_issued_waits_for_it():
    """Item 8: a graph walk that unpacks between the reload's issue and the B's `ready` gets the
    reloaded buffer only after the compute stream waited for the copy back."""
    device = Lagging()
    offload = ActivationOffload({(0, 0)}, {Op("F", 1): [(0, 0)]}, CPU, copies=device)
    x = torch.randn(64, requires_grad=True)
    with offload.forward((0, 0)):
        y = (x * 2).sin()
    offload.offloaded((0, 0))
    offload.before(Op("F", 1))  # issues the reload
    assert device.backs and not device.backs[0].waited
    saved = y.grad_fn._saved_self  # unpacks
    assert device.backs[0].waited and torch.equal(saved, x.detach() * 2)
    offload.ready((0, 0))
    y.sum().backward()
    offload.release((0, 0))


def test_releasing_one_b_frees_nothing_of_another_key():
    """Item 3: what happens inside a B's measured window (its `release`) lets go of that key's reload
    and nothing else, so a profiled B's memory is the same with offload as without."""
    offload = ActivationOffload({(0, 0), (1, 0)}, {}, CPU, copies=Lagging())
    x = torch.randn(128, requires_grad=True)
    loss0 = _forward(offload, (0, 0), x, 2.0)[1]  # h dropped: nothing but the saved tensor keeps it
    loss1 = _forward(offload, (1, 0), x, 3.0)[1]
    offload.offloaded((0, 0))
    offload.offloaded((1, 0))
    offload.ready((0, 0))
    offload.ready((1, 0))
    other = weakref.ref(offload.entries[(0, 0)].back[0].untyped_storage())
    both = offload.device_bytes
    loss1.backward()
    offload.release((1, 0))
    gc.collect()
    assert other() is not None and offload.device_bytes == both // 2
    loss0.backward()
    offload.release((0, 0))
    assert offload.device_bytes == 0


def test_the_f_input_and_storages_alive_elsewhere_are_not_moved():
    """Item 5: the F's input (the executor keeps it until B) and a module's cache stay on the device:
    copying them would save nothing and reload a second copy."""
    device = Lagging()
    cache = torch.randn(32)  # e.g. RoPE frequencies a module keeps
    offload = ActivationOffload({(0, 0)}, {}, CPU, copies=device)
    x = torch.randn(64, requires_grad=True)  # the F's input, held by the caller
    with offload.forward((0, 0)):
        y = (x.sin() * cache.repeat(2)).sum() + (x * 2).exp().sum()  # saves x, cache's repeat, x * 2
    offload.offloaded((0, 0))
    assert x.untyped_storage().data_ptr() not in device.marked
    assert offload.kept_bytes == 64 * 4  # x only: the repeat and x * 2 are the F's own
    assert offload.moved_bytes == 2 * C.aligned(64 * 4)
    plain = x.detach().clone().requires_grad_()
    ((plain.sin() * cache.repeat(2)).sum() + (plain * 2).exp().sum()).backward()
    offload.ready((0, 0))
    y.backward()
    offload.release((0, 0))
    assert torch.equal(x.grad, plain.grad)


def test_a_small_view_of_a_large_storage_moves_only_what_it_reads():
    """Item 5: saving a 32-byte view of a 256 KiB buffer copies one aligned segment, not the buffer, and
    backward reads the same bytes (gradients bitwise)."""
    offload = ActivationOffload({(0, 0)}, {}, CPU, copies=Lagging())
    w = torch.randn(8, requires_grad=True)
    with offload.forward((0, 0)):
        big = torch.randn(1 << 16) * 1.0
        y = (big[100:108] * w).sum()  # saves the view big[100:108] (and w, a leaf the caller holds)
        expected = big[100:108].clone()
    del big
    offload.offloaded((0, 0))
    assert offload.moved_bytes == C.aligned(8 * 4 + 100 * 4 % 16)
    offload.ready((0, 0))
    y.backward()
    offload.release((0, 0))
    assert torch.equal(w.grad, expected)


def test_pinned_host_bytes_are_reported_as_the_host_allocator_allocates_them():
    """Item 7: torch's caching host allocator rounds each pinned block up to a power of two."""
    assert [C.pinned_bytes(n) for n in (0, 1, 512, 513, 3000, 1 << 20)] == [0, 1, 512, 1024, 4096, 1 << 20]
    offload = ActivationOffload({(0, 0)}, {}, CPU, copies=Lagging())
    x = torch.randn(300, requires_grad=True)
    loss = _forward(offload, (0, 0), x, 2.0)[1]
    offload.offloaded((0, 0))
    assert offload.moved_bytes == C.aligned(1200) == 1536 and offload.peak_host_bytes == 2048
    offload.ready((0, 0))
    loss.backward()
    offload.release((0, 0))


def test_the_copy_streams_are_made_once_per_device_for_the_life_of_the_process(monkeypatch):
    """Item 2: twenty steps' offloaders share one stream pair per device (a fresh pool stream every
    step would soon be one of NCCL's)."""
    made = []
    monkeypatch.setattr(C, "_STREAMS", {})
    monkeypatch.setattr(C, "_dedicated_stream", lambda index: made.append(index) or object())
    monkeypatch.setattr(torch.cuda, "device", lambda index: nullcontext())
    pairs = {C.copy_streams(torch.device("cuda", i % 2)) for i in range(20)}
    assert len(pairs) == 2 and sorted(made) == [0, 0, 1, 1]
    if not torch.cuda.is_available():  # no GPU runtime loaded in this process: the pool streams, drawn once
        assert C._runtime_library() is None


def test_reload_buffers_count_from_the_op_that_issues_them():
    """Item 4: a reload issued at F1 while F0's copy out still runs (bandwidth 0.5: two time units per
    copy) holds its buffer from F1's start, not from when the lane starts the copy at 3: at F1's end
    three units are resident (F0's activations, their reload buffer, F1's)."""
    schedule = generate("1f1b", 2, 4)
    ops = schedule.ranks[0]
    plan = O.check_given_plan(O.OffloadPlan("custom", 0.5, ({(0, 0): ops[1]}, {}), ({(0, 0): 1.0}, {})), schedule)
    result = O.simulate_offload(schedule, plan)
    back = [c for c in result.copies[0] if c.direction == "H2D"][0]
    assert back.start == 3.0 and result.timeline[0][1].start == 1.0
    assert result.peak_memory[0] == 3.0 and result.peak_at[0] == 2.0
    plain = O.simulate_offload(schedule, None)
    assert plain.peak_memory[0] == 2.0  # without offload: F0, F1 before the first backward


def test_the_freed_block_sizes_are_those_of_the_storages_handed_back():
    """What the GPU check overwrites (benchmarks/gpu_pipeline.py _scribbling, and the CUDA unit tests): one
    piece per storage handed back, each that storage's size (the allocator's best fit lands it on that
    block), not the entry's moved bytes in one piece; a storage kept on the device is not among them."""
    offload = ActivationOffload({(0, 0)}, {}, CPU, copies=Lagging())
    x = torch.randn(100, requires_grad=True)
    cache = torch.randn(100)  # a module's cache: alive elsewhere, kept on the device
    with offload.forward((0, 0)):
        h = x.exp()  # exp saves its result; sin saves its input: one storage
        k = x[:25].add(1.0).exp()  # another, of its own size
        loss = ((h.sin()[:25] + k.cos()) * cache[:25]).sum()  # the product saves the cache's slice
    del h, k  # only the saved tensors hold them now
    offload.offloaded((0, 0))
    entry = offload.entries[(0, 0)]
    assert sorted(entry.freed_sizes) == [100, 400]
    assert offload.kept_bytes == cache.untyped_storage().nbytes()
    offload.ready((0, 0))
    loss.backward()
    assert x.grad is not None


def test_pool_streams_are_used_with_a_warning_where_the_runtime_cannot_be_reached(monkeypatch):
    """Without the GPU runtime library the copy streams come from torch's pool, which NCCL shares: said once
    per stream made, as a RuntimeWarning naming the consequence."""
    monkeypatch.setattr(C, "_create_raw_stream", lambda: None)
    monkeypatch.setattr(torch.cuda, "Stream", lambda index: ("pool", index))
    with pytest.warns(RuntimeWarning, match="NCCL/RCCL may share"):
        assert C._dedicated_stream(0) == ("pool", 0)
