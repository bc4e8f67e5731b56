"""Measured resident activation memory matches the simulator's, with and without offload (issue 32).

pp=2, zbv, a small GPTModel whose activations dwarf its p2p messages (which the planner's memory
model leaves out): the costs come from two profiled steps (the profiler's graph walk, what plans
are made with); then `--pipeline-offload` off and all each run a start-up step (the bandwidth is
measured there) and a step measured by `runtime.resident` from torch's allocator events alone
(never the autograd graph). On every rank the measured peak at op boundaries is within 5% of the
simulator's for the plan that ran (with `all`: every F's activations and what every B keeps for its W
on the host between the copies; and `all` again with copies that are never seen finished until the
compute stream waits for them, a GPU whose host runs ahead of its copies: issue 46), offloading
everything really frees device memory, and the
bandwidth left out was measured at start-up, the same on every rank. The
whole-matrix table (every schedule x off/all/auto at pp=4) is benchmarks/offload_memory.py's.
"""
from __future__ import annotations

from functools import partial

import pytest

import megatron_reference as ref

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")

PP, M, LAYERS, SEQ = 2, 4, 8, 128
TOLERANCE = 0.05


def _provider(config, pre_process=True, post_process=True, vp_stage=None):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    return GPTModel(config, get_gpt_layer_local_spec(), vocab_size=ref.VOCAB_SIZE, max_sequence_length=SEQ,
                    pre_process=pre_process, post_process=post_process, vp_stage=vp_stage)


def _body(rank, case):
    import torch

    import primus_megatron as pm
    from primus_megatron.runtime.resident import ResidentMemory, simulated_peak

    config = ref.tiny_gpt_config(LAYERS, hidden=32, heads=16, pipeline_model_parallel_size=PP,
                                 virtual_pipeline_model_parallel_size=2, deallocate_pipeline_outputs=True)
    torch.manual_seed(3)
    model = pm.build_model(partial(_provider, config), schedule="zbv")
    batches = ref.make_microbatches(M, seq_length=SEQ, micro_batch_size=1, seed=5)

    def step(runner):
        runner(forward_step_func=ref.make_forward_step_func(), data_iterator=iter(batches), model=model,
               num_microbatches=M, seq_length=SEQ, micro_batch_size=1)

    profiler = pm.get_forward_backward_func("zbv", profile_steps=(1, 2), p2p_timeout_s=60)
    for _ in range(2):
        step(profiler)
    costs, summary = profiler.measured
    out = {}
    for mode in ("off", "all", "all-lagging"):
        if mode == "all-lagging":  # the same plan (same costs and bandwidth), its copies never seen done
            _copies_that_lag()
        runner = pm.get_forward_backward_func(
            "zbv", costs=costs, offload=mode.split("-")[0], p2p_timeout_s=60,
            offload_bandwidth=out["all"]["bandwidth"] if mode == "all-lagging" else None)
        step(runner)  # with offload: the start-up step, which measures the bandwidth
        for chunk in model:
            chunk.zero_grad(set_to_none=False)  # gradients exist before the step: not the step's allocations
        with ResidentMemory() as memory:
            step(runner)
        out[mode] = {"measured": memory.peak_at_ops(runner.last_step.timeline),
                     "simulated": simulated_peak(runner, PP, M, costs, summary["unit_bytes"], rank),
                     "offloaded": runner.last_step.offloaded, "offloaded_w": runner.last_step.offloaded_w,
                     "host_peak": memory.host_bytes_peak,
                     "bandwidth": runner.spec.offload_bandwidth}
    return out


def _copies_that_lag() -> None:
    """This rank's offload copies from now on: the host pool's (so `resident` tells host from device), but
    a copy is never seen finished (a token's query() is False) until the compute stream waits for it, as
    on a GPU whose host runs ahead of its copies: device memory must go back when a copy is queued, not
    when a poll sees it done."""
    from primus_megatron.runtime import offload_copies as C

    class Late:
        def __init__(self) -> None:
            self.waited = False

        def query(self) -> bool:
            return self.waited

    class LaggingHost(C.HostCopies):
        def out(self, sources, offsets, nbytes):
            return super().out(sources, offsets, nbytes)[0], Late()

        def back(self, host, segments, after, device):
            return super().back(host, segments, after, device)[0], Late()

        def compute_waits(self, token) -> None:
            if token is not None:
                token.waited = True

    lagging = LaggingHost()
    C.copies_for = lambda device: lagging


@pytest.fixture(scope="module")
def measured():
    import pipeline_harness as H

    return H.run_ranks({"body": _body, "pp": PP}, PP, timeout_s=600)


@pytest.mark.parametrize("mode", ["off", "all", "all-lagging"])
def test_measured_resident_peak_is_the_simulated_one(measured, mode):
    """all-lagging: the plan of `all`, run with copies that are never seen finished (`_copies_that_lag`)."""
    for rank, per_rank in enumerate(measured):
        got, want = per_rank[mode]["measured"], per_rank[mode]["simulated"]
        assert want > 0
        assert abs(got - want) <= TOLERANCE * want, (
            f"rank {rank}, offload {mode}: measured {got / 2**20:.2f} MiB, simulated {want / 2**20:.2f} MiB")


def test_offloading_everything_frees_device_memory(measured):
    for rank, per_rank in enumerate(measured):
        off, every = per_rank["off"], per_rank["all"]
        assert every["offloaded"] == 2 * M and off["offloaded"] == 0
        assert every["offloaded_w"] == 2 * M and off["offloaded_w"] == 0  # every B's W share too
        assert every["host_peak"] > 0 and off["host_peak"] == 0  # the host pool seen by the allocator
        assert every["measured"] < 0.8 * off["measured"], (rank, every["measured"], off["measured"])


def test_the_bandwidth_left_out_is_measured_at_start_up_and_agreed(measured):
    """No --pipeline-offload-bandwidth: the start-up step measured one, the same on every rank."""
    values = {per_rank["all"]["bandwidth"] for per_rank in measured}
    assert len(values) == 1
    value = values.pop()
    assert value is not None and 0 < value < float("inf")
    assert all(per_rank["off"]["bandwidth"] is None for per_rank in measured)
