"""What differs between megatron-core 0.16.1 and 0.19.x, each handled by a feature check.

Both CI legs run this file (Python 3.11 + 0.16.1, Python 3.12 + 0.19.x): every test exercises
the installed megatron-core's real code; a test of something one version lacks says so where
it is skipped. The other tests of the 0.19 leg (parity, production configurations, training,
checkpoints, post-validation, Megatron-LM's own loop) run the same paths end to end.
"""
from __future__ import annotations

import inspect
import multiprocessing
import types

import pytest
import torch

import expected_skips
import megatron_reference as ref

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")


def _has(module: str, name: str) -> bool:
    import importlib

    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


# -- parallel linear layers: the hooked function's arguments --------------------------------------

def _split_grads(layer, x, defer: bool):
    from primus_megatron.runtime.wgrad_store import get_store

    layer.zero_grad(set_to_none=True)
    x.grad = None
    store = get_store()
    with store.step(splitting=defer):
        out, _ = layer(x)
    if defer:
        with store.capture("k"):
            out.square().sum().backward()
        assert layer.weight.grad is None and store.pending("k") == 1
        if hasattr(layer, "backward_dw"):  # megatron-core 0.19: a no-op backward_dw() on these layers
            layer.backward_dw()
            assert layer.weight.grad is None and store.pending("k") == 1, "backward_dw must not run our W"
        store.run("k")
    else:
        out.square().sum().backward()
    return [t.clone() for t in (x.grad, layer.weight.grad, *([layer.bias.grad] if layer.bias is not None else []))]


@pytest.mark.parametrize("kind", ["column", "row"])
def test_megatrons_layers_call_the_hook_with_their_own_arguments(kind):
    """0.16.1 passes (..., async_grad_allreduce=None, tp_group=...), 0.19 (..., tp_group=...,
    gtp_remat_size=...) and lost async_grad_allreduce: both layers split, equal to megatron's."""
    ref.init_single_process()
    from megatron.core.tensor_parallel import layers

    from primus_megatron.runtime import linear_hooks

    linear_hooks.install()
    assert layers.linear_with_grad_accumulation_and_async_allreduce is linear_hooks.deferrable_linear
    assert linear_hooks._megatron_forward_args()[-1] in ("tp_group", "gtp_remat_size")
    config = ref.tiny_gpt_config(1)
    torch.manual_seed(0)
    if kind == "column":
        layer = layers.ColumnParallelLinear(8, 6, config=config, init_method=torch.nn.init.normal_, bias=True,
                                            gather_output=True)
    else:
        layer = layers.RowParallelLinear(8, 6, config=config, init_method=torch.nn.init.normal_, bias=True,
                                         input_is_parallel=True, skip_bias_add=False)
    x = torch.randn(5, 2, 8, requires_grad=True)
    for eager, deferred in zip(_split_grads(layer, x, False), _split_grads(layer, x, True)):
        torch.testing.assert_close(deferred, eager, rtol=0, atol=0)


def test_the_hook_takes_exactly_the_installed_functions_keywords():
    ref.init_single_process()
    from primus_megatron.runtime import linear_hooks

    linear_hooks.install()
    names = linear_hooks._ORIGINAL_PARAMS
    x, w = torch.randn(3, 4), torch.randn(5, 4)
    plain = torch.nn.functional.linear(x, w)
    extra = {}
    if "async_grad_allreduce" in names:  # megatron-core 0.16.1
        extra["async_grad_allreduce"] = False
    if "gtp_remat_size" in names:  # megatron-core 0.19
        extra["gtp_remat_size"] = 1
    out = linear_hooks.deferrable_linear(x, w, None, False, False, False, None, 0, tp_group=None, **extra)
    torch.testing.assert_close(out, plain)
    with pytest.raises(TypeError, match="unexpected keyword"):
        linear_hooks.deferrable_linear(x, w, None, False, False, False, not_an_argument=1)


@pytest.mark.skipif(not _has("megatron.core.tensor_parallel.gtp_api", "wrap_module_params_gtp"),
                    reason=expected_skips.reason("megatron-core<0.19", "GTP weight sharding is megatron-core 0.19's; 0.16.1 has none"))
def test_gtp_sharded_weights_are_refused_in_steps_with_w_ops():
    ref.init_single_process()
    from primus_megatron.runtime import linear_hooks
    from primus_megatron.runtime.wgrad_store import get_store

    linear_hooks.install()
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.nn.Parameter(torch.randn(5, 4))
    store = get_store()
    with store.step(splitting=True), \
            pytest.raises(linear_hooks.GTPWeightShardingUnsupported, match="gtp_remat_size 2"):
        linear_hooks.deferrable_linear(x, w, None, False, False, False, None, 0, tp_group=None, gtp_remat_size=2)


# -- megatron's backward_step -------------------------------------------------------------------

def test_backward_step_is_called_with_the_arguments_it_takes():
    """0.19 dropped backward_step's model_type: the executor asks the signature (the parity and
    training tests run it)."""
    from megatron.core.pipeline_parallel import schedules

    from primus_megatron.runtime.executor import backward_takes_model_type

    params = list(inspect.signature(schedules.backward_step).parameters)
    assert backward_takes_model_type(schedules.backward_step) == ("model_type" in params)
    ref.init_single_process()
    config = ref.tiny_gpt_config(1)
    x = torch.randn(3, requires_grad=True)
    y = (x * 2).sum()
    args = (None, y, None, *([None] if "model_type" in params else []), config)
    schedules.backward_step(*args)
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))


# -- CPU mode: megatron's CUDA stream calls -------------------------------------------------------

def test_ddp_bucket_reduce_asks_for_the_current_stream_on_cpu():
    """0.19's start_grad_sync calls torch.cuda.current_stream() unconditionally
    (param_and_grad_buffer.py): compat.cpu's proxy answers for that module."""
    ref.init_single_process()
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed import param_and_grad_buffer

    assert param_and_grad_buffer.torch.cuda.current_stream().query()
    config = ref.tiny_gpt_config(2)
    model = ref._gpt(config, pre_process=True, post_process=True)
    ddp = DistributedDataParallel(config, DistributedDataParallelConfig(overlap_grad_reduce=True, bucket_size=10000),
                                  model)
    batch = ref.make_microbatches(1)[0]
    loss = ddp(batch["tokens"], batch["position_ids"], None, labels=batch["labels"]).sum()
    loss.backward()
    ddp.finish_grad_sync()  # every bucket's reduce started (in the hooks) and finished
    assert all(p.main_grad.abs().sum() > 0 for p in ddp.module.parameters() if p.requires_grad)


def test_an_unbatched_send_keeps_its_memory_until_waited_on_cpu(monkeypatch):
    """Megatron-LM's interleaved schedule (overlapped p2p) frees an output right after posting its send
    (deallocate_output_tensor) and waits on the send later; gloo reads the memory until then, so on CPU
    the send holds it (compat.cpu._patch_p2p_sends; without it megatron's interleaved 1F1B in
    Megatron-LM's loop drifted from its 1F1B, or hit NaN, tests/test_megatron_lm_moe.py)."""
    ref.init_single_process()
    from megatron.core.pipeline_parallel import p2p_communication as p2p, schedules

    posted = []

    class Work:
        def wait(self):
            posted.append("waited")
            return True

    monkeypatch.setattr(torch.distributed, "isend", lambda tensor, dst, group: posted.append(tensor) or Work())
    out = torch.arange(6.0)
    memory = out.untyped_storage().data_ptr()
    group = types.SimpleNamespace(size=lambda: 4, rank=lambda: 0)  # 4 ranks: no second group
    reqs = p2p._p2p_ops(tensor_send_prev=None, tensor_recv_prev=None, tensor_send_next=out, tensor_recv_next=None,
                        group=group, prev_pipeline_rank=3, next_pipeline_rank=1)
    schedules.deallocate_output_tensor(out, deallocate_pipeline_outputs=True)
    assert posted == [out] and out.numel() == 1
    held = reqs["send_next"]._held
    assert held.untyped_storage().data_ptr() == memory and held.tolist() == [0, 1, 2, 3, 4, 5]
    assert reqs["send_next"].wait() and posted[-1] == "waited" and reqs["send_next"]._held is None


# -- torch_dist checkpoints written in the rank's own process -----------------------------------

def test_checkpoint_writer_runs_in_process_with_this_megatrons_queue_factory(tmp_path):
    """0.16.1 names the results-queue factory _get_write_results_queue, 0.19
    get_write_results_queue (and looks the writer up at save time): both are replaced, a save
    starts no process, and what it wrote loads back."""
    ref.init_single_process()
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing import ShardedTensor
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    from primus_megatron.compat.checkpoint_writer import write_in_process

    write_in_process()
    factories = [n for n in ("_get_write_results_queue", "get_write_results_queue") if hasattr(filesystem_async, n)]
    assert factories
    for name in factories:
        assert type(getattr(filesystem_async, name)()).__module__ == "queue"
    value = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    before = set(multiprocessing.active_children())
    dist_checkpointing.save({"w": ShardedTensor.from_rank_offsets("w", value, replica_id=0)}, str(tmp_path))
    assert set(multiprocessing.active_children()) == before, "the save started a process"
    loaded = dist_checkpointing.load({"w": ShardedTensor.from_rank_offsets("w", torch.zeros(3, 4), replica_id=0)},
                                     str(tmp_path))
    torch.testing.assert_close(loaded["w"], value)


# -- post-validation: the gradients megatron takes the norm of ----------------------------------

def _optimizer(tag_mtp: bool = False):
    ref.init_single_process()
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    config = ref.tiny_gpt_config(2)
    model = ref._gpt(config, pre_process=True, post_process=True)
    if tag_mtp:
        next(model.parameters()).grad_norm_group = "mtp"
    ddp = DistributedDataParallel(config, DistributedDataParallelConfig(), model)
    opt = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=1e-3, clip_grad=1.0), [ddp])
    return ddp, opt


def test_post_validation_norm_is_megatrons_own():
    """0.19 renamed get_main_grads_for_grad_norm() to get_grads_for_grad_norm(grad_norm_group=None):
    the local sum of squares post-validation all-reduces is the one megatron's get_grad_norm takes."""
    from primus_megatron.optim.post_validation import PostValidationOptimizer, _grads_for_norm

    ddp, opt = _optimizer()
    batch = ref.make_microbatches(1)[0]
    ddp(batch["tokens"], batch["position_ids"], None, labels=batch["labels"]).sum().backward()
    ddp.finish_grad_sync()
    subs = list(getattr(opt, "chained_optimizers", [opt]))
    for sub in subs:
        sub.prepare_grads()
    getter = "get_grads_for_grad_norm" if hasattr(subs[0], "get_grads_for_grad_norm") else "get_main_grads_for_grad_norm"
    assert [g.data_ptr() for g in _grads_for_norm(subs[0])] == [g.data_ptr() for g in getattr(subs[0], getter)()]
    wrapped = PostValidationOptimizer(opt, [ddp])
    local = float(wrapped._local_norm_sq().item()) ** 0.5
    assert local == pytest.approx(float(opt.get_grad_norm()), rel=1e-6)


@pytest.mark.skipif(not _has("megatron.core.optimizer.optimizer", "SEPARATE_GRAD_NORM_GROUPS"),
                    reason=expected_skips.reason("megatron-core<0.19", "separate gradient-norm groups are megatron-core 0.19's"))
def test_post_validation_refuses_a_separately_clipped_group():
    from primus_megatron.optim.post_validation import PostValidationOptimizer

    ddp, opt = _optimizer(tag_mtp=True)
    with pytest.raises(ValueError, match=r"grad_norm_group mtp.*drop --optimizer-post-validation") as exc:
        PostValidationOptimizer(opt, [ddp])
    assert "\n" not in str(exc.value)


# -- forward_backward_func arguments and config flags: honoured or refused at start-up ------------

def _refusal(obj, also=(), schedule="zb-h1"):
    from primus_megatron.unsupported import refusal_for

    return refusal_for(obj, schedule=schedule, splits_backward=True, v_placement=False, uses_te=False, also=also)


@pytest.mark.parametrize("fields, needle", [
    ({"moe_paged_stash": True}, "--moe-paged-stash cannot be used with --pipeline-schedule zb-h1"),
    ({"tensor_parallel_num_weight_shards": 2, "tensor_model_parallel_size": 1},
     "--tensor-parallel-num-weight-shards 2 cannot be used"),
    ({"expert_tensor_parallel_num_weight_shards": 4, "expert_tensor_parallel_size": 2},
     "--expert-tensor-parallel-num-weight-shards 4 cannot be used"),
    ({"cuda_graph_impl": "local"}, "--cuda-graph-impl local cannot be used"),
    ({"fine_grained_activation_offloading": True}, "--fine-grained-activation-offloading cannot be used"),
    ({"use_transformer_engine_op_fuser": True}, "--use-transformer-engine-op-fuser cannot be used"),
    ({"hybrid_context_parallel": True}, "--hybrid-context-parallel cannot be used with --pipeline-schedule zb-h1"),
])
def test_megatron_lm_arguments_are_refused_in_one_sentence(fields, needle):
    args = types.SimpleNamespace(**fields)
    problem = _refusal(args)
    assert problem and needle in problem and "\n" not in problem
    assert _refusal(types.SimpleNamespace(tensor_parallel_num_weight_shards=2, tensor_model_parallel_size=2)) is None


def test_megatron_fsdp_is_refused_from_the_ddp_config():
    from megatron.core.distributed import DistributedDataParallelConfig

    if not hasattr(DistributedDataParallelConfig(), "use_megatron_fsdp"):
        pytest.skip(expected_skips.reason("megatron-core<0.19", "this megatron-core has no Megatron-FSDP"))
    config = ref.tiny_gpt_config(1)
    problem = _refusal(config, also=(DistributedDataParallelConfig(use_megatron_fsdp=True),))
    assert problem and "--use-megatron-fsdp cannot be used with --pipeline-schedule zb-h1" in problem
    assert _refusal(config, also=(DistributedDataParallelConfig(),)) is None


@pytest.mark.skipif(not _has("megatron.core.transformer.transformer_config", "TransformerConfig")
                    or "moe_paged_stash" not in inspect.signature(
                        __import__("megatron.core.transformer.transformer_config",
                                   fromlist=["TransformerConfig"]).TransformerConfig).parameters,
                    reason=expected_skips.reason("megatron-core<0.19", "config.moe_paged_stash is megatron-core 0.19's"))
def test_this_megatrons_config_fields_are_the_refused_ones():
    """The table names real fields of the installed TransformerConfig (a renamed field would
    silently pass)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    fields = inspect.signature(TransformerConfig).parameters
    for name in ("moe_paged_stash", "tensor_parallel_num_weight_shards", "expert_tensor_parallel_num_weight_shards",
                 "cuda_graph_impl", "fine_grained_activation_offloading", "use_transformer_engine_op_fuser",
                 "hybrid_context_parallel", "moe_single_grouped_weight", "moe_single_grouped_bias",
                 "fp8_output_proj"):
        assert name in fields, name


@pytest.mark.parametrize("case, needle", [
    ({"config": {"moe_paged_stash": True}}, "--moe-paged-stash cannot be used"),
    ({"config": {"tensor_parallel_num_weight_shards": 2}}, "--tensor-parallel-num-weight-shards 2 cannot be used"),
    # off_interface.reset() / create_cudagraphs() run on forward-only calls too in 0.19: refused there as well
    ({"config": {"fine_grained_activation_offloading": True}, "forward_only": True},
     "--fine-grained-activation-offloading cannot be used"),
    ({"config": {"cuda_graph_impl": "local"}, "forward_only": True}, "--cuda-graph-impl local cannot be used"),
    ({"call": "other-stages"}, "the p2p_communicator describes pipeline stage 2 of 3"),
    # Megatron-FSDP re-synchronises its gathers after forward-only calls in 0.19: refused, read from the chunk's
    # DDP config
    ({"ddp_config": {"use_megatron_fsdp": True}, "forward_only": True}, "--use-megatron-fsdp cannot be used"),
    pytest.param({"call": "multi-module"}, "multi-module pipeline",
                 marks=pytest.mark.skipif(not _has("megatron.core.process_groups_config",
                                                   "MultiModuleProcessGroupCollection"),
                                          reason=expected_skips.reason("megatron-core<0.19",
                                                                        "multi-module pipelines are megatron-core 0.19's"))),
], ids=["paged-stash", "gtp", "offloading-forward-only", "local-cuda-graphs-forward-only", "communicator-stages",
        "megatron-fsdp-forward-only", "multi-module"])
def test_refused_on_every_rank_before_any_wait(case, needle):
    import pipeline_harness as H

    results = H.run_ranks({"body": H.refused_call_body, "pp": 2, "schedule": "zb-h1", "late_s": 5, "num_layers": 4,
                           **case}, 2, timeout_s=120)
    for res in results:
        assert res["message"] is not None and needle in res["message"] and "\n" not in res["message"], res
    assert results[0]["elapsed"] < 4  # rank 0 did not wait for the late rank 1


def test_megatrons_own_p2p_communicator_is_accepted():
    """0.19's P2PCommunicator answers total_stages / current_stage from its group: for the
    schedule's own pipeline group they agree, and the step is the step without it."""
    import pipeline_harness as H

    results = H.run_ranks({"body": H.communicator_body, "pp": 2, "schedule": "zb-h1", "num_layers": 4}, 2,
                          timeout_s=180)
    for rank, res in enumerate(results):
        assert res["with"] == res["without"]
        assert res["deferred"] > 0
        if res["stages"][0] is not None:
            assert res["stages"] == (2, rank)


def test_megatron_lm_get_forward_backward_func_refuses_a_multi_module_collection():
    """Megatron-LM core_v0.19.0 calls get_forward_backward_func(schedule_pg_collection=...)."""
    from primus_megatron.megatron_lm.plugin import refuse_schedule_groups
    from primus_megatron.runtime.forward_backward import UnsupportedSetting

    ref.init_single_process()
    from megatron.core.process_groups_config import ProcessGroupCollection

    plain = ProcessGroupCollection.use_mpu_process_groups()
    refuse_schedule_groups(schedule_pg_collection=plain)  # Megatron-LM's usual call: fine
    refuse_schedule_groups(None, None, None)
    try:
        from megatron.core.process_groups_config import MultiModuleProcessGroupCollection
    except ImportError:
        pytest.skip(expected_skips.reason("megatron-core<0.19", "multi-module pipelines are megatron-core 0.19's"))
    multi = MultiModuleProcessGroupCollection(module_pgs={"llm": plain}, language_model_module_name="llm")
    with pytest.raises(UnsupportedSetting, match="multi-module pipeline"):
        refuse_schedule_groups(schedule_pg_collection=multi)
