"""compat.cpu: megatron-core's optimizers save and resume their state on CPU ranks.

Megatron-LM checkpoints the optimizer through `sharded_state_dict` and
dist_checkpointing (torch_dist). On CPU, megatron-core's optimizers run torch's
AdamW (no TE/apex), a path where the DistributedOptimizer's load fails or
resumes with a wrong Adam step count unless compat.cpu patches it
(`_patch_distrib_optimizer_torch_adam`), and the fp16 grad scaler's load moves
its scale to CUDA (`_patch_grad_scaler`). Neither path is run by the training
tests, which resume plain fp32 runs.

Data parallel 2 on 2 gloo ranks, a 2-layer GPT wrapped as Megatron-LM wraps it
(Float16Module for fp16, megatron's DDP, `get_megatron_optimizer` Adam, its
config hooks): 2 steps, save, load into a fresh model and optimizer whose
weights were moved first; then the loaded optimizer state and the parameters
after one more step equal the uninterrupted run's, bitwise. Optimizers: the
DistributedOptimizer with Megatron-LM's default sharding ('dp_reshardable') and
with 'fully_reshardable' (gathered over the data-parallel group), and
Float16OptimizerWithFloat16Params in fp16 with a dynamic loss scale.

The sharding is always named, as Megatron-LM names it: megatron-core 0.16.1's
default ('fully_sharded_model_space', optimizer/distrib_optimizer.py:1225)
raises "ShardedTensor.flattened_range is not supported"
(dist_checkpointing/mapping.py:134) for some models (this test's with 4 layers
at dp=2), an upstream limit, not a CPU one.
"""
from __future__ import annotations

import os

import pytest
import torch

import megatron_reference as ref
from primus_megatron.runtime import local_ranks

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")

VARIANTS = {
    "distributed, dp_reshardable": {"distributed": True, "sharding": "dp_reshardable"},
    "distributed, fully_reshardable": {"distributed": True, "sharding": "fully_reshardable"},
    "fp16, dynamic loss scale": {"distributed": False, "fp16": True},
}
MICROBATCHES = 2  # per data-parallel rank and step


def _build(variant):
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer.module import Float16Module

    fp16 = variant.get("fp16", False)
    precision = {"fp16": True, "params_dtype": torch.float16, "pipeline_dtype": torch.float16} if fp16 else {}
    (chunk,) = ref.build_pipeline_chunks(2, **precision)
    config = chunk.config
    if fp16:
        chunk = Float16Module(config, chunk)
    ddp = DistributedDataParallel(config, DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, use_distributed_optimizer=variant["distributed"]), chunk)
    ddp.broadcast_params()  # as Megatron-LM's get_model: the same weights on every data-parallel rank
    optimizer = get_megatron_optimizer(OptimizerConfig(
        optimizer="adam", lr=1e-2, weight_decay=0.1, adam_beta1=0.9, adam_beta2=0.95, adam_eps=1e-6, clip_grad=1.0,
        fp16=fp16, params_dtype=torch.float16 if fp16 else torch.float32, initial_loss_scale=2.0**12,
        use_distributed_optimizer=variant["distributed"]), [ddp])
    config.grad_scale_func = optimizer.scale_loss
    config.finalize_model_grads_func = finalize_model_grads
    return ddp, optimizer


def _step(ddp, optimizer, step: int) -> None:
    """Megatron-LM's train_step with megatron's own schedule (no pipeline here)."""
    from megatron.core import parallel_state as ps
    from megatron.core.pipeline_parallel import get_forward_backward_func

    dp, dp_rank = ps.get_data_parallel_world_size(), ps.get_data_parallel_rank()
    batches = ref.make_microbatches(dp * MICROBATCHES, seed=100 + step)
    mine = batches[dp_rank * MICROBATCHES:(dp_rank + 1) * MICROBATCHES]
    ddp.zero_grad_buffer()
    optimizer.zero_grad()
    get_forward_backward_func()(forward_step_func=ref.make_forward_step_func(), data_iterator=iter(mine), model=ddp,
                                num_microbatches=MICROBATCHES, seq_length=ref.SEQ_LENGTH,
                                micro_batch_size=ref.MICRO_BATCH_SIZE)
    ok, _, _ = optimizer.step()
    assert ok, f"step {step} was skipped"


def _optimizer_state(optimizer) -> dict:
    """Every inner-optimizer tensor (main params, Adam moments, step) and the loss scale, by position."""
    out = {"loss scale": optimizer.get_loss_scale().detach().clone()}
    for i, opt in enumerate(optimizer.chained_optimizers):
        for g, group in enumerate(opt.optimizer.param_groups):
            for p, param in enumerate(group["params"]):
                out[f"{i}.{g}.{p}.param"] = param.detach().clone()
                for key, value in opt.optimizer.state[param].items():
                    out[f"{i}.{g}.{p}.{key}"] = value.detach().clone() if torch.is_tensor(value) else value
    return out


def _params(ddp) -> dict:
    return {name: p.detach().clone() for name, p in ref.named_global_parameters(ddp)}


def _sharded(ddp, optimizer, metadata, loading: bool) -> dict:
    # Megatron-LM checkpoints the unwrapped module (no DDP / Float16Module prefixes)
    state = {"model": ref.unwrap(ddp).sharded_state_dict()}
    state["optimizer"] = optimizer.sharded_state_dict(state["model"], is_loading=loading, metadata=metadata)
    return state


def _round_trips(rank: int, case: dict) -> dict:
    from megatron.core import dist_checkpointing

    from primus_megatron.compat.checkpoint_writer import write_in_process

    write_in_process()  # as CPU training saves: shards written in this process
    out = {}
    for name, variant in VARIANTS.items():
        path = os.path.join(case["dir"], str(len(out)))
        if rank == 0:
            os.makedirs(path)
        torch.distributed.barrier()
        metadata = {"distrib_optim_sharding_type": variant["sharding"]} if "sharding" in variant else None
        ddp, optimizer = _build(variant)
        for step in range(2):
            _step(ddp, optimizer, step)
        dist_checkpointing.save(_sharded(ddp, optimizer, metadata, loading=False), path)

        resumed, resumed_optimizer = _build(variant)
        with torch.no_grad():  # the load must really overwrite the weights
            for p in resumed.parameters():
                p.add_(1.0)
        loaded = dist_checkpointing.load(_sharded(resumed, resumed_optimizer, metadata, loading=True), path)
        ref.unwrap(resumed).load_state_dict(loaded["model"])
        resumed_optimizer.load_state_dict(loaded["optimizer"])
        state, resumed_state = _optimizer_state(optimizer), _optimizer_state(resumed_optimizer)
        _step(ddp, optimizer, 2)
        _step(resumed, resumed_optimizer, 2)
        out[name] = {"state": (state, resumed_state), "params": (_params(ddp), _params(resumed))}
    return out


def test_optimizer_state_saved_and_loaded_resumes_bitwise(tmp_path):
    per_rank = local_ranks.run_ranks(_round_trips, {"pp": 1, "dir": str(tmp_path)}, 2, timeout_s=300)
    for rank, results in enumerate(per_rank):
        for name, result in results.items():
            state, resumed = result["state"]
            assert set(resumed) == set(state) and len(state) > 1, f"{name} rank {rank}: {sorted(state)[:4]}"
            for key, value in state.items():
                same = torch.equal(resumed[key], value) if torch.is_tensor(value) else resumed[key] == value
                assert same, f"{name} rank {rank}: loaded optimizer state {key} differs"
            params, resumed_params = result["params"]
            for key, value in params.items():
                assert torch.equal(resumed_params[key], value), f"{name} rank {rank}: {key} after the next step"
