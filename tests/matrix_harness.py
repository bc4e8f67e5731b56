"""Worker bodies for tests/test_production_matrix.py: Megatron-LM's production
configurations (DDP with overlapped gradient reduce, distributed optimizer,
gradient-accumulation fusion, bf16 Float16Module, tied embeddings, TP+SP, MoE,
selective recompute) under every schedule and under megatron-core's own 1F1B,
wired exactly as Megatron-LM's training (megatron/training/training.py at
core_v0.16.1) wires them, plus a non-pipelined single-process reference.

Not a test module; the test imports it. Three kinds of process launches:

* `reference_body` (world of 1, tp = pp = 1): for every configuration, the full
  model (pp = 1) trained with plain autograd over each iteration's global batch
  (every data-parallel rank's microbatches), megatron's DDP (dp = 1) and
  megatron's optimizer with the same settings;
* `world_body` (4 ranks, one launch per world layout): every (configuration,
  schedule) case in turn, each from scratch (model, DDP, optimizer, config
  hooks). Results go to one file per (case, rank). After each case the ranks
  agree through the launch's TCP store: a case that raised on every rank (say
  in a constructor, or after all of them timed out) is followed by fresh
  process groups and the next case in the same processes; a case that raised
  on some ranks while others are blocked on them ends the launch, and
  `run_world` relaunches the world after that case. Either way a failing case
  costs only itself.

What a case records (per rank, per iteration), always as *pieces*
`(name, tp_rank, partition_dim, lo, hi, flat values, shard shape)`: a slice
[lo, hi) of this tensor-parallel rank's shard (flattened) of the full-model
parameter `name` (global names: decoder layers by global layer number, a tied
output layer as the word embedding, experts by global expert index):

* `grads`: after finalize_model_grads, the DDP `main_grad` (fp32). With the
  distributed optimizer, only the range this data-parallel rank owns (the
  reduce-scattered shard; the rest of the buffer is not meaningful);
* `params`: after optimizer.step(), the optimizer's main (fp32) parameters; with
  the distributed optimizer the owned shard;
* `final_params`: the model's own parameters after the last step (after a final
  all-gather under the distributed optimizer);
* `losses`: per-microbatch loss of this data-parallel rank's microbatches;
* `wgrads_deferred` / `wgrads_run` of our runtime's last step, and the rank's
  count of linear layers (all, and inside MoE experts).
"""
from __future__ import annotations

import contextlib
import glob
import io
import math
import os
import re
import time
import traceback
import zlib
from functools import partial

import torch

import megatron_reference as ref
from primus_megatron.runtime import local_ranks
from primus_megatron.train.packed_batch import pack, packed_seq_params

# The TransformerEngine stand-in (TE v2.11's classes on CPU): a world or reference of a `te` spec
# runs in fresh processes with it first on the import path (local_ranks' sys_path), so that
# megatron-core finds it when it decides at import whether TE is there.
TE_STANDIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "te_standin")
SEQ = ref.SEQ_LENGTH
MBS = ref.MICRO_BATCH_SIZE
MEGATRON = "megatron-1f1b"
# megatron-core's own combined 1F1B (--overlap-moe-expert-parallel-comm): its interleaved schedule
# (2 chunks per rank, as megatron requires under pp > 1, transformer_config.py:1857-1861 at
# core_v0.16.1) running each steady-state F&B through combined_forward_backward_step
MEGATRON_COMBINED = "megatron-combined-1f1b"
ORACLES = (MEGATRON, MEGATRON_COMBINED)


# -- configuration ------------------------------------------------------------------------------

# The architectures teams train, in small (spec['arch']; TransformerConfig fields, the activation by
# name): Llama/Qwen-style (RMSNorm, SwiGLU, grouped-query attention, no biases; RoPE in the
# provider) and DeepSeek-style (multi-latent attention with YaRN RoPE; its MoE with a shared expert
# comes from spec['moe']). megatron-core's local attention has no separate key/value head sizes:
# multi-latent attention needs TE's (the stand-in's) DotProductAttention.
ARCHS = {
    "llama": {"normalization": "RMSNorm", "gated_linear_unit": True, "activation_func": "silu",
              "num_query_groups": 2, "add_bias_linear": False},
    "deepseek": {"normalization": "RMSNorm", "gated_linear_unit": True, "activation_func": "silu",
                 "add_bias_linear": False, "multi_latent_attention": True, "q_lora_rank": 16, "kv_lora_rank": 16,
                 "qk_head_dim": 8, "qk_pos_emb_head_dim": 4, "v_head_dim": 8, "rope_type": "yarn"},
}


def _arch_fields(spec: dict) -> dict:
    fields = dict(ARCHS.get(spec.get("arch"), {}))
    if "activation_func" in fields:
        fields["activation_func"] = getattr(torch.nn.functional, fields["activation_func"])
    return fields


def transformer_config(spec: dict, *, tp: int, pp: int, vp, reference: bool = False, a2a_overlap: bool = False):
    """The case's TransformerConfig; the reference has tp = pp = 1 (no sequence parallel).
    `a2a_overlap`: megatron's overlap_moe_expert_parallel_comm (pairs through its schedule plan)."""
    dtype = torch.bfloat16 if spec.get("bf16") else torch.float32
    overrides = {**_arch_fields(spec), **spec.get("model", {})}
    if reference:
        overrides.pop("sequence_parallel", None)
    if a2a_overlap:
        overrides["overlap_moe_expert_parallel_comm"] = True
    moe = spec.get("moe")
    if moe:
        overrides.update(num_moe_experts=moe["experts"], moe_router_topk=moe["topk"],
                         moe_token_dispatcher_type="alltoall", moe_aux_loss_coeff=moe["aux_loss_coeff"],
                         moe_router_load_balancing_type="aux_loss", moe_grouped_gemm=bool(moe.get("grouped")),
                         moe_shared_expert_intermediate_size=moe.get("shared"),
                         expert_model_parallel_size=1 if reference else moe["ep"])
    if spec.get("cp", 1) > 1 and not reference:
        overrides["context_parallel_size"] = spec["cp"]
    if spec.get("fp8"):  # megatron's --fp8-format / --fp8-recipe (TE layers: the stand-in's FP8)
        overrides.update(fp8=spec["fp8"]["format"], fp8_recipe=spec["fp8"]["recipe"])
    return ref.tiny_gpt_config(spec["num_layers"], tensor_model_parallel_size=1 if reference else tp,
                               pipeline_model_parallel_size=1 if reference else pp,
                               virtual_pipeline_model_parallel_size=vp,
                               params_dtype=dtype, pipeline_dtype=dtype, bf16=bool(spec.get("bf16")),
                               **overrides)


def provider(config, spec, pre_process=True, post_process=True, vp_stage=None):
    """Megatron-LM's model-provider contract for the case's GPTModel: the local spec, or with
    `spec['te']` megatron-core's TransformerEngine spec (TE's grouped experts with `moe.grouped`)."""
    from megatron.core.models.gpt import gpt_layer_specs
    from megatron.core.models.gpt.gpt_model import GPTModel

    moe = spec.get("moe")
    make = (gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec if spec.get("te")
            else gpt_layer_specs.get_gpt_layer_local_spec)
    kwargs = {"num_experts": moe["experts"], "moe_grouped_gemm": bool(moe.get("grouped"))} if moe else {}
    arch = ARCHS.get(spec.get("arch"), {})
    if arch.get("multi_latent_attention"):
        kwargs["multi_latent_attention"] = True
    if not spec.get("te") and arch.get("normalization"):
        kwargs["normalization"] = arch["normalization"]  # the TE spec's norms read the config's
    layer_spec = make(**kwargs)
    return GPTModel(config, layer_spec, vocab_size=ref.VOCAB_SIZE, max_sequence_length=SEQ,
                    pre_process=pre_process, post_process=post_process,
                    share_embeddings_and_output_weights=bool(spec.get("tied")), vp_stage=vp_stage,
                    position_embedding_type="rope" if arch else "learned_absolute",
                    # multi-token prediction (spec['model']['mtp_num_layers']): the MTP block on its stage
                    mtp_block_spec=ref.mtp_block_spec(config, layer_spec, vp_stage,
                                                      use_transformer_engine=bool(spec.get("te"))))


def microbatches(spec: dict, iteration: int, dp_rank: int) -> list:
    """This data-parallel rank's microbatches of `iteration` (different per dp rank and iteration);
    with spec['balance'], its packed microbatches of the iteration's global batch (`balanced_plan`):
    with TransformerEngine layers (spec['te']) in megatron-core's thd format (`thd`)."""
    if spec.get("balance"):
        plan, samples = balanced_plan(spec, iteration)
        packs = [pack([samples[i] for i in mb], SEQ) for mb in plan.replicas[dp_rank]]
        return [thd(b) for b in packs] if spec.get("te") else packs
    return ref.make_microbatches(spec["microbatches"], seed=1000 * (iteration + 1) + 17 * dp_rank + spec.get("seed", 0))


def thd(batch: dict) -> dict:
    """A packed microbatch as TE layers take it: PackedSeqParams over its cu_seqlens (each sample, then
    the padding as a sequence of its own) and no mask (TE's causal attention would not read it; its fp32
    backend would apply it in place of cu_seqlens)."""
    return {**batch, "attention_mask": None, "packed_seq_params": packed_seq_params(batch)}


def balanced_plan(spec: dict, iteration: int):
    """(BatchPlan, sample token tensors) of `iteration`'s global batch under spec['balance']
    ({'mode', 'global_batch', 'data_seed'}): LongAlign-shaped lengths scaled to SEQ, split over the
    data-parallel replicas and packed by `--pipeline-balance-data`'s mode. The data seed, not the
    configuration's, draws the samples: rows of different modes train the same samples."""
    from primus_megatron.balancing import SampleCost, longalign_batch, plan_batch

    bal = spec["balance"]
    seed = 1000 * (iteration + 1) + bal.get("data_seed", 0)
    lengths = longalign_batch(bal["global_batch"], SEQ, seed, min_len=2)
    gen = torch.Generator().manual_seed(seed)
    samples = [torch.randint(0, ref.VOCAB_SIZE, (n + 1,), generator=gen) for n in lengths]
    return plan_batch(lengths, spec["dp"], SEQ, bal["mode"], SampleCost(a=1.0 / SEQ, b=1.0)), samples


def cp_positions(seq: int, cp: int, cp_rank: int) -> torch.Tensor:
    """The sequence positions context-parallel rank `cp_rank` holds: chunks cp_rank and 2 cp - 1 - cp_rank
    of 2 cp (megatron-core's get_batch_on_this_cp_rank, utils.py:1994-2038 at core_v0.16.1)."""
    chunk = seq // (2 * cp)
    return torch.cat([torch.arange(c * chunk, (c + 1) * chunk) for c in (cp_rank, 2 * cp - 1 - cp_rank)])


def on_this_cp_rank(batches: list) -> list:
    """Each microbatch sliced as pretrain_gpt slices it under context parallelism (megatron's own
    get_batch_on_this_cp_rank); no attention mask (TransformerEngine's causal attention builds its own,
    as pretrain_gpt's batches have none unless --create-attention-mask-in-dataloader)."""
    import inspect

    from megatron.core.utils import get_batch_on_this_cp_rank

    from megatron.core import parallel_state as ps

    # megatron-core 0.19 dispatches on is_hybrid_cp (required; 0.16.1 has no such argument) and reads the
    # sizes off cp_group itself (None would mean the whole world there, parallel state in 0.16.1)
    extra = {"is_hybrid_cp": False} if "is_hybrid_cp" in inspect.signature(get_batch_on_this_cp_rank).parameters \
        else {}
    cp_group = ps.get_context_parallel_group()
    return [get_batch_on_this_cp_rank({**b, "attention_mask": None}, cp_group=cp_group, **extra) for b in batches]


# -- names -----------------------------------------------------------------------------------------

_GROUPED_GEMM = re.compile(r"(\.mlp\.experts\.linear_fc[12]\.(?:weight|bias))(\d+)$")


def is_expert(name: str) -> bool:
    """A routed expert's parameter (split over the ranks by expert parallelism; not a shared expert's)."""
    return ".mlp.experts." in name


def named_global_parameters(chunk, ep_rank: int = 0):
    """(global name, parameter) of a (wrapped) chunk; local experts get their global index
    (SequentialMLP's `local_experts.<i>`, TE GroupedLinear's `weight<i>` / `bias<i>`)."""
    inner = ref.unwrap(chunk)  # the reference's own naming (megatron_reference), not the product's
    for local, p in inner.named_parameters():
        name = ref.global_param_name(inner, local)
        parts = name.split(".")
        if "local_experts" in parts or _GROUPED_GEMM.search(name):
            first = inner.decoder.layers[0].mlp.experts.num_local_experts * ep_rank
            grouped = _GROUPED_GEMM.search(name)
            if grouped:
                name = name[:grouped.start(2)] + str(first + int(grouped.group(2)))
            else:
                i = parts.index("local_experts") + 1
                parts[i] = str(first + int(parts[i]))
                name = ".".join(parts)
        yield name, p


def _partition_dim(p):
    return getattr(p, "partition_dim", 0) if getattr(p, "tensor_model_parallel", False) else None


def init_by_global_name_(chunks, *, tp_rank: int, tp_size: int, ep_rank: int = 0, seed: int = 11) -> None:
    """Every parameter from (seed, its global name), then this tensor-parallel rank's shard:
    the same weights whatever the placement, pipeline/tensor/expert split or build order.
    Biases are not zero and norms not one, so a misplaced tensor cannot go unnoticed."""
    with torch.no_grad():
        for chunk in chunks:
            for name, p in named_global_parameters(chunk, ep_rank):
                shape = list(p.shape)
                dim = _partition_dim(p)
                if dim is not None:
                    shape[dim] *= tp_size
                gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
                full = 0.02 * torch.randn(shape, generator=gen)
                if name.endswith("layer_norm_weight") or ("norm" in name and name.endswith("weight")):
                    full += 1.0
                if dim is not None:
                    full = full.chunk(tp_size, dim=dim)[tp_rank]
                p.copy_(full.to(p.dtype))


# -- what a case records ---------------------------------------------------------------------------

def _subs(optimizer):
    return list(getattr(optimizer, "chained_optimizers", [optimizer]))


def _owned_ranges(optimizer) -> dict:
    """id(model param) -> (start, end) of the flattened param this dp rank's distributed optimizer owns."""
    owned = {}
    for sub in _subs(optimizer):
        if type(sub).__name__ != "DistributedOptimizer":
            continue
        for p in sub.model_param_gbuf_map:
            r = sub._get_model_param_range_map(p)["param"]
            owned[id(p)] = (r.start, r.end)
    return owned


def _params_by_id(model, ep_rank: int) -> dict:
    """id(param) -> (global name, param), each Parameter once (a tied V weight is one Parameter)."""
    out = {}
    for chunk in model:
        for name, p in named_global_parameters(chunk, ep_rank):
            out.setdefault(id(p), (name, p))
    return out


def record_grads(model, owned, distributed: bool, tp_rank: int, ep_rank: int) -> list:
    pieces = []
    for name, p in _params_by_id(model, ep_rank).values():
        grad = getattr(p, "main_grad", None)
        if grad is None:
            continue
        flat = grad.detach().float().reshape(-1)
        if distributed:
            if id(p) not in owned:
                continue
            lo, hi = owned[id(p)]
        else:
            lo, hi = 0, flat.numel()
        pieces.append((name, tp_rank, _partition_dim(p), lo, hi, flat[lo:hi].clone(), tuple(p.shape)))
    return pieces


def record_params(model, owned, distributed: bool, tp_rank: int, ep_rank: int) -> list:
    """The optimizer's main (fp32) parameters: the owned shard under the distributed optimizer."""
    pieces = []
    for name, p in _params_by_id(model, ep_rank).values():
        main = getattr(p, "main_param", None)
        if distributed:
            if id(p) not in owned:
                continue
            lo, hi = owned[id(p)]
            values = main if main is not None and getattr(p, "main_param_sharded", False) \
                else p.detach().reshape(-1)[lo:hi]
        else:
            lo, hi = 0, p.numel()
            values = (main if main is not None else p).detach().reshape(-1)
        pieces.append((name, tp_rank, _partition_dim(p), lo, hi, values.detach().float().clone(), tuple(p.shape)))
    return pieces


def record_model_params(model, tp_rank: int, ep_rank: int) -> list:
    """The model's own (possibly bf16) parameters, full: after a final parameter all-gather."""
    return [(name, tp_rank, _partition_dim(p), 0, p.numel(), p.detach().float().reshape(-1).clone(), tuple(p.shape))
            for name, p in _params_by_id(model, ep_rank).values()]


def _is_linear(mod) -> bool:
    """megatron's ColumnParallelLinear / RowParallelLinear, or one of its TransformerEngine wrappers
    (TELinear, TELayerNormColumnParallelLinear, TEColumnParallelGroupedLinear, ...)."""
    name = type(mod).__name__
    return name in ("ColumnParallelLinear", "RowParallelLinear") or (name.startswith("TE") and name.endswith("Linear"))


def _linear_counts(model) -> tuple[int, int]:
    """(all linear layers, those of the routed experts) on this rank."""
    total = experts = 0
    for chunk in model:
        for mod_name, mod in chunk.named_modules():
            if _is_linear(mod):
                total += 1
                experts += is_expert(f".{mod_name}.")
    return total, experts


def count_grad_reduces(model) -> dict:
    """{(chunk, 'dense' | 'expert', bucket group index): gradient reduces started} of megatron's DDP,
    counting only the calls of `start_grad_sync` that communicate: megatron skips one while its
    first batch's collective is in flight (`is_first_batch and grad_reduce_handle is not None`,
    param_and_grad_buffer.py:373 at 0.16.1, :603 at 0.19). Returns the live counter."""
    counts = {}
    for c, chunk in enumerate(model):
        for kind, groups in (("dense", chunk.bucket_groups), ("expert", chunk.expert_parallel_bucket_groups)):
            for g, group in enumerate(groups):
                key = (c, kind, g)
                counts[key] = 0

                def start(*args, _key=key, _group=group, _start=group.start_grad_sync, **kwargs):
                    if not (_group.is_first_batch and _group.grad_reduce_handle is not None):
                        counts[_key] += 1
                    return _start(*args, **kwargs)
                group.start_grad_sync = start
    return counts


# -- one case on every rank ------------------------------------------------------------------------

def fp8_device(spec: dict):
    """The stand-in answering as an FP8 device (a Hopper) for an FP8 row; a no-op otherwise."""
    if not spec.get("fp8"):
        return contextlib.nullcontext()
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager, emulate_fp8_device

    FP8GlobalStateManager.reset()  # a previous case's amax buffers and autocast keys
    return emulate_fp8_device(spec["fp8"].get("platform", "sm90"))


def record_fp8_state(model, ep_rank: int) -> dict:
    """Every TE module's delayed-scaling state, by its (first) weight's global name: (forward amax history,
    forward scale, backward amax history, backward scale). Empty without FP8 or with current scaling
    (whose scales are each tensor's own amax, recomputed at every cast). A GroupedLinear (TEGroupedMLP's
    experts: `weight0`...) is named by its module alone: its amaxes are MAX-reduced over the amax group
    (data parallel, which holds the expert-parallel ranks), so each expert-parallel rank holds the same."""
    out = {}
    for c in model:
        inner = ref.unwrap(c)
        for mod_name, mod in inner.named_modules():
            meta = getattr(mod, "fp8_meta", None) or {}
            fwd, bwd = meta.get("scaling_fwd"), meta.get("scaling_bwd")
            weight = "weight" if getattr(mod, "weight", None) is not None else (
                "weight0" if getattr(mod, "weight0", None) is not None else None)
            if not hasattr(fwd, "amax_history") or weight is None:
                continue
            name = ref.global_param_name(inner, f"{mod_name}.{weight}" if mod_name else weight)
            out[name] = tuple(t.detach().clone() for t in (fwd.amax_history, fwd.scale, bwd.amax_history, bwd.scale))
    return out


def _clear_megatron_state() -> None:
    """Global megatron state a previous case may have left."""
    ref.mtp_losses_taken()
    try:
        from megatron.core.transformer.moe.moe_utils import clear_aux_losses_tracker

        clear_aux_losses_tracker()
    except Exception:  # older/newer megatron without it, or a tracker never created
        pass
    # megatron keeps its MoE metrics per layer, sized by the first model that logged them: a later row with
    # more layers (MTP's among them) would index past them (0.16.1 moe_utils.save_to_aux_losses_tracker,
    # 0.19 moe_logging.MoEMetricsTracker.record); clearing only zeroes them, so they are dropped
    try:
        from megatron.core.transformer.moe.moe_logging import destroy_moe_metrics_tracker

        destroy_moe_metrics_tracker()
    except ImportError:  # megatron-core before 0.19: the tracker is a module-level dict
        from megatron.core.transformer.moe.moe_utils import get_moe_layer_wise_logging_tracker

        get_moe_layer_wise_logging_tracker().clear()


def build(spec: dict, schedule: str, *, reference: bool = False):
    """(model chunks wrapped as Megatron-LM wraps them, optimizer, config, fbf or None, chunks)."""
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer.module import Float16Module

    import primus_megatron as pm
    import primus_megatron.schedules  # noqa: F401

    tp, pp = ps.get_tensor_model_parallel_world_size(), ps.get_pipeline_model_parallel_world_size()
    tp_rank = ps.get_tensor_model_parallel_rank()
    ep_rank = ps.get_expert_model_parallel_rank() if spec.get("moe") and not reference else 0
    ddp_spec = dict(spec.get("ddp", {}))
    fbf = None
    if reference:
        config = transformer_config(spec, tp=1, pp=1, vp=None, reference=True)
        chunks = [provider(config, spec)]
        nchunks = 1
        ddp_spec = {}  # plain synchronous DDP (dp = 1)
    elif schedule == MEGATRON:  # run inside ref.megatron_own_linear() (world_body)
        config = transformer_config(spec, tp=tp, pp=pp, vp=None)
        chunks = [provider(config, spec, pre_process=ps.is_pipeline_first_stage(),
                           post_process=ps.is_pipeline_last_stage())]
        nchunks = 1
    elif schedule == MEGATRON_COMBINED:  # megatron's interleaved split, 2 chunks per rank
        nchunks = 2
        config = transformer_config(spec, tp=tp, pp=pp, vp=nchunks, a2a_overlap=True)
        # Megatron-LM runs the interleaved schedule at pp = 2 only with overlapped p2p, and then
        # unbatched (training/arguments.py:573-582, :1326 at core_v0.16.1): batched, both directions
        # with the one peer swap tensors of equal shape (compat.cpu's doc, NVIDIA/Megatron-LM#1450)
        config.overlap_p2p_comm, config.batch_p2p_comm = True, False
        chunks = [provider(config, spec, pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=v),
                           post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=v), vp_stage=v)
                  for v in range(nchunks)]
    else:
        fbf = pm.get_forward_backward_func(schedule, p2p_timeout_s=60,  # installs the linear hooks
                                           offload=spec.get("offload", "off"),
                                           balance_data=(spec.get("balance") or {}).get("mode"))
        nchunks = fbf.chunks
        # our pairs through megatron's combined step (runtime/combined.py) where the row asks for it
        config = transformer_config(spec, tp=tp, pp=pp, vp=nchunks if nchunks > 1 else None,
                                    a2a_overlap=bool(spec.get("a2a_overlap")))
        chunks = pm.build_model(partial(provider, config, spec), schedule=schedule)
    init_by_global_name_(chunks, tp_rank=0 if reference else tp_rank, tp_size=1 if reference else tp,
                         ep_rank=ep_rank)
    if spec.get("bf16"):
        chunks = [Float16Module(config, c) for c in chunks]
    overlap = ddp_spec.get("overlap_grad_reduce", False)
    distributed = ddp_spec.get("use_distributed_optimizer", False)
    overlap_param_gather = ddp_spec.get("overlap_param_gather", False)
    # Megatron-LM: align_param_gather is forced off without a virtual pipeline; bucket_size is
    # None (one bucket) without overlap, else --ddp-bucket-size (small here: several buckets).
    align_param_gather = overlap_param_gather and nchunks > 1
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=overlap, use_distributed_optimizer=distributed,
        overlap_param_gather=overlap_param_gather, align_param_gather=align_param_gather,
        check_for_nan_in_grad=False, bucket_size=ddp_spec.get("bucket_size") if overlap else None,
        # TE layers routed to our W ops (pm.build_model under a schedule with W): DDP's grad-ready
        # hook fires when W has delivered the weight gradient, as Megatron-LM under our plugin builds it
        delay_wgrad_compute=_routed_to_w(chunks))
    model = [DistributedDataParallel(config, ddp_config, c, disable_bucketing=(i > 0)) for i, c in enumerate(chunks)]
    opt_spec = spec.get("optimizer", {})
    dtype = torch.bfloat16 if spec.get("bf16") else torch.float32
    optimizer = get_megatron_optimizer(OptimizerConfig(
        optimizer="adam", lr=opt_spec.get("lr", 1e-3), weight_decay=opt_spec.get("weight_decay", 0.01),
        adam_beta1=0.9, adam_beta2=0.95, adam_eps=opt_spec.get("adam_eps", 1e-6),
        clip_grad=opt_spec.get("clip_grad", 1.0), loss_scale=opt_spec.get("loss_scale"),
        bf16=bool(spec.get("bf16")), params_dtype=dtype,
        use_distributed_optimizer=distributed and not reference,
        overlap_param_gather=overlap_param_gather and not reference), model)
    # training.py's hooks (core_v0.16.1, lines 2547-2565)
    from megatron.core.distributed import finalize_model_grads

    config.grad_scale_func = optimizer.scale_loss
    if overlap:
        no_sync = [c.no_sync for c in model]
        config.no_sync_func = no_sync[0] if len(model) == 1 else no_sync
        if spec.get("align_grad_reduce", True):
            sync = [c.start_grad_sync for c in model]
            config.grad_sync_func = sync[0] if len(model) == 1 else sync
    if overlap_param_gather and align_param_gather:
        sync = [c.start_param_sync for c in model]
        config.param_sync_func = sync[0] if len(model) == 1 else sync
    config.finalize_model_grads_func = finalize_model_grads
    return model, optimizer, config, fbf, nchunks, ep_rank


def _routed_to_w(chunks) -> bool:
    from primus_megatron.runtime.te_wgrad import is_routed

    return any(is_routed(m) for c in chunks for m in c.modules())


def run_case(spec: dict, schedule: str) -> dict:
    """Megatron-LM's train_step, `spec['iterations']` times, for one schedule."""
    from megatron.core import parallel_state as ps

    _clear_megatron_state()
    torch.manual_seed(1234)  # anything drawn outside our init (none expected) is the same per case
    model, optimizer, config, fbf, nchunks, ep_rank = build(spec, schedule)
    ddp_spec = spec.get("ddp", {})
    distributed = ddp_spec.get("use_distributed_optimizer", False)
    param_gather_hooks = distributed and ddp_spec.get("overlap_param_gather", False)
    post_validation = spec.get("post_validation") and schedule not in ORACLES
    tp_rank, dp_rank = ps.get_tensor_model_parallel_rank(), ps.get_data_parallel_rank()
    cp_size, cp_rank = ps.get_context_parallel_world_size(), ps.get_context_parallel_rank()
    pp_rank = ps.get_pipeline_model_parallel_rank()
    if fbf is None:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        fbf = get_forward_backward_func()
    if post_validation:
        from primus_megatron.optim import PostValidationOptimizer

        optimizer = PostValidationOptimizer(optimizer, model, timeout_s=60)
        fbf.validation = optimizer.take_validation  # the next step validates this one
    owned = _owned_ranges(optimizer.optimizer if post_validation else optimizer)
    saved_param_sync = None
    if param_gather_hooks:  # training.py: no pre-hook and no param_sync_func until the first step succeeded
        for c in model:
            c.disable_forward_pre_hook(param_sync=False)
        saved_param_sync, config.param_sync_func = config.param_sync_func, None
    out = {"rank": torch.distributed.get_rank(), "pp_rank": pp_rank, "dp_rank": dp_rank, "tp_rank": tp_rank,
           "cp_rank": cp_rank,
           "iterations": [], "linear_layers": _linear_counts(model),
           # the loss stage's output layer runs once more per MTP layer (each MTP depth's logits)
           "output_layer_reuse": sum((ref.unwrap(c).config.mtp_num_layers or 0) for c in model
                                     if getattr(ref.unwrap(c), "post_process", False))}
    attention_calls = _count_core_attention_calls(model, out)
    pairs = _count_combined_pairs()
    reduces = count_grad_reduces(model)
    for it in range(spec["iterations"]):
        batches = microbatches(spec, it, dp_rank)
        m = len(batches)  # this replica's own count under spec['balance']
        if cp_size > 1:
            batches = on_this_cp_rank(batches)
        data = [iter(batches) for _ in model] if len(model) > 1 else iter(batches)
        if not post_validation:
            for c in model:
                c.zero_grad_buffer()
        optimizer.zero_grad()  # post-validation: deferred until the pending step is validated
        attention_calls[0] = pairs[0] = 0
        reduces.update(dict.fromkeys(reduces, 0))
        store = fbf(forward_step_func=ref.make_forward_step_func(), data_iterator=data,
                    model=model if len(model) > 1 else model[0], num_microbatches=m, seq_length=SEQ,
                    micro_batch_size=1 if spec.get("balance") else MBS, decoder_seq_length=SEQ,
                    forward_only=False)
        record = {"losses": ref.losses_from_store(store), "mtp_losses": ref.mtp_losses_taken(),
                  "core_attention_calls": attention_calls[0],
                  "combined_pairs": pairs[0],
                  "grad_reduces": dict(reduces),
                  "grads": record_grads(model, owned, distributed, tp_rank, ep_rank),
                  "fp8_state": record_fp8_state(model, ep_rank),
                  "fp8_modules": sum(bool(getattr(m, "fp8", False)) for c in model for m in c.modules())}
        if post_validation and it > 0:
            # the previous step was validated (rolled back, or clipped and redone) inside this call,
            # after this step's prefix: its outcome and parameters are known now
            out["iterations"][-1].update(step=_outcome(optimizer.last_result),
                                         params=record_params(model, owned, distributed, tp_rank, ep_rank))
        last = getattr(fbf, "last_step", None)
        if last is not None:
            record.update(wgrads_deferred=last.wgrads_deferred, wgrads_run=last.wgrads_run,
                          offloaded=last.offloaded, offloaded_w=last.offloaded_w,
                          offloaded_w_bytes=last.offloaded_w_bytes,
                          peak_host_bytes=last.peak_host_bytes)
        if spec.get("inject_nonfinite_at") == it and pp_rank == 0:
            from primus_megatron.optim import inject_nonfinite_gradient

            inject_nonfinite_gradient(model)  # stage 0 is on pipeline rank 0 under every placement
        result = optimizer.step()
        if not post_validation:
            record["step"] = _outcome(result)
            record["params"] = record_params(model, owned, distributed, tp_rank, ep_rank)
        # Under post-validation the outcome is known in the next step (Megatron-LM's loop is told the
        # step succeeded, as primus_megatron.megatron_lm.post_validation answers): the hooks go on
        # after the first step, and a rollback gathers the restored parameters itself.
        if it == 0 and param_gather_hooks and (post_validation or result[0]):
            for c in model:
                c.enable_forward_pre_hook()
            config.param_sync_func = saved_param_sync
        out["iterations"].append(record)
    if post_validation:
        final = optimizer.finish()
        out["step"] = None if final is None else (bool(final[0]), final[1])
        out["post_validation"] = dict(optimizer.stats)
        out["iterations"][-1].update(step=_outcome(final),
                                     params=record_params(model, owned, distributed, tp_rank, ep_rank))
    if param_gather_hooks and len(model[0].remove_forward_pre_hook_handles):
        for c in model:  # training.py at the end of train(): a final synchronous all-gather
            c.disable_forward_pre_hook()
    elif distributed:
        for c in model:
            c.start_param_sync(force_sync=True)
    out["final_params"] = record_model_params(model, tp_rank, ep_rank)
    return out


def _outcome(result) -> tuple:
    """(update successful, grad norm) of an optimizer step's (ok, norm, zeros)."""
    return bool(result[0]), None if result[1] is None else float(result[1])


def _count_combined_pairs() -> list:
    """Count megatron's combined steps given both a forward and a backward model chunk (an F&B pair;
    combined_1f1b.py:237 at core_v0.16.1), whoever calls it. Returns the counter ([pairs]); the
    wrapper stays for the process (each case resets the counter)."""
    from megatron.core.pipeline_parallel import combined_1f1b

    step = combined_1f1b.combined_forward_backward_step
    counter = getattr(step, "_matrix_pairs", None)
    if counter is None:
        counter = [0]

        def counted(forward_step_func, data_iterator, f_model, num_microbatches, input_tensor, forward_data_store,
                    b_model, *args, **kwargs):
            counter[0] += f_model is not None and b_model is not None
            return step(forward_step_func, data_iterator, f_model, num_microbatches, input_tensor,
                        forward_data_store, b_model, *args, **kwargs)
        counted._matrix_pairs = counter
        combined_1f1b.combined_forward_backward_step = counted
    return counter


def _count_core_attention_calls(model, out: dict) -> list:
    """Count the forward calls of every core attention module (the part selective recompute
    checkpoints, megatron's default `recompute_modules=['core_attn']`): one per microbatch in
    the forward pass, one more in the backward when it is recomputed (tensor_parallel's
    CheckpointFunction runs it again). Returns the counter ([calls]); out['core_attention']
    gets the number of such modules."""
    calls = [0]
    modules = [mod for chunk in model for name, mod in chunk.named_modules() if name.endswith(".core_attention")]

    def count(*_):
        calls[0] += 1

    for mod in modules:
        mod.register_forward_hook(count)
    out["core_attention"] = len(modules)
    return calls


def _save(obj, path: str) -> None:
    buf = io.BytesIO()
    torch.save(obj, buf)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(buf.getvalue())
    os.replace(tmp, path)


def _init_parallel_state(world_case: dict) -> None:
    """Fresh megatron process groups for world_case's tp x pp (x ep): at start-up (local_ranks set up
    tp x pp; MoE needs expert parallel too) and after a case that failed on every rank, so
    that nothing a failed case left in flight on the old groups can reach the next case.
    The old groups stay registered with torch.distributed (never garbage-collected while a
    worker thread may still wait on them)."""
    from megatron.core import parallel_state as ps

    ps.destroy_model_parallel()
    ps.initialize_model_parallel(world_case.get("tp", 1), world_case["pp"],
                                 context_parallel_size=world_case.get("cp", 1),
                                 expert_model_parallel_size=world_case.get("ep", 1),
                                 distributed_timeout_minutes=max(1, math.ceil(world_case.get("gloo_timeout", 60) / 60)))


# After each case every rank posts "ok" or "err" in the launch's TCP store and waits for one
# decision per case, set atomically (compare_set) by the first rank that can take it:
# every rank posted, all "ok" -> "ok"; every rank posted, some "err" -> "recover" (fresh process
# groups, next case in the same processes: a failure every rank saw, e.g. in a constructor or
# after every rank timed out, costs no relaunch); a rank that failed and has not seen every rank
# post within AGREE_S (peers blocked on it) -> "abort": the ranks exit, blocked peers then fail
# fast (closed connections) and find "abort" too, and the parent relaunches after the case.
AGREE_S = 5.0


def _agree(store, prefix: str, i: int, rank: int, world: int, failed: bool) -> str:
    store.set(f"{prefix}/{i}/{rank}", "err" if failed else "ok")
    keys = [f"{prefix}/{i}/{r}" for r in range(world)]
    decision = f"{prefix}/{i}/decision"
    limit = time.monotonic() + (AGREE_S if failed else 600.0)
    while True:
        if store.check([decision]):
            return store.get(decision).decode()
        if store.check(keys):
            verdict = "ok" if all(store.get(k) == b"ok" for k in keys) else "recover"
        elif time.monotonic() > limit:
            verdict = "abort"
        else:
            time.sleep(0.02)
            continue
        return store.compare_set(decision, "", verdict).decode()


def _forget_failed_step() -> None:
    """Process-wide runtime state a step that raised may leave (queued weight gradients; a
    pending post-validation belongs to that case's optimizer and runner): the next case starts clean."""
    from primus_megatron.runtime import wgrad_store

    wgrad_store.get_store().clear()


@contextlib.contextmanager
def _virtual_pipeline(schedule: str):
    """megatron's interleaved schedule (and its stage predicates) read the virtual pipeline size from
    parallel state (schedules.py:142,755 at core_v0.16.1): 2 for the combined 1F1B case only."""
    from megatron.core import parallel_state as ps

    if schedule != MEGATRON_COMBINED:
        yield
        return
    ps.set_virtual_pipeline_model_parallel_world_size(2)
    try:
        yield
    finally:
        ps.set_virtual_pipeline_model_parallel_world_size(None)


def world_body(rank: int, world_case: dict) -> int:
    """Cases world_case['cases'][start:] in order; each one's result (or error) in its own
    file. After each case the ranks agree (`_agree`): go on, go on with fresh process groups,
    or end the launch (the parent relaunches the world after the case)."""
    import torch.distributed as dist

    if world_case.get("ep", 1) > 1 or world_case.get("cp", 1) > 1:
        _init_parallel_state(world_case)
    directory, world = world_case["dir"], dist.get_world_size()
    store = dist.distributed_c10d._get_default_store()
    prefix = f"matrix/{world_case['start']}"
    done = 0
    for i in range(world_case["start"], len(world_case["cases"])):
        case = world_case["cases"][i]
        started = time.perf_counter()
        failed = False
        # megatron's 1F1B is an oracle: megatron's own linear layers, not the hook a schedule of
        # ours installed in this process
        oracle = ref.megatron_own_linear() if case["schedule"] in ORACLES else contextlib.nullcontext()
        try:
            with oracle as oracle_linear, _virtual_pipeline(case["schedule"]), fp8_device(case["spec"]):
                result = run_case(case["spec"], case["schedule"])
            result["oracle_linear"] = oracle_linear
            result["seconds"] = time.perf_counter() - started
            _save(result, os.path.join(directory, f"{i}.{rank}.pt"))
            done += 1
        except Exception as exc:
            failed = True
            with open(os.path.join(directory, f"{i}.{rank}.err"), "w") as f:
                f.write(f"{time.time():.6f}\n{type(exc).__name__}: {exc}\n{traceback.format_exc()[-3000:]}")
        verdict = _agree(store, prefix, i, rank, world, failed)
        if verdict == "abort":
            raise RuntimeError(f"case {i} failed on some rank and not on every rank: relaunch after it")
        if verdict == "recover":
            if rank == 0:
                open(os.path.join(directory, f"{i}.recovered"), "w").close()
            _forget_failed_step()
            _init_parallel_state(world_case)
    return done


def reference_body(rank: int, world_case: dict) -> dict:
    """Every configuration's non-pipelined reference, in one process (see the module doc);
    a configuration whose reference raises gets {'error': text}."""
    out = {}
    for name, spec in world_case["specs"].items():
        try:
            with ref.megatron_own_linear() as oracle_linear:
                out[name] = _reference_run(spec)
            out[name]["oracle_linear"] = oracle_linear
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-3000:]}"}
    return out


def _reference_run(spec: dict) -> dict:
    """One configuration's reference: full model, dp = 1, plain autograd over the global batch."""
    from megatron.core.transformer.moe.router import MoEAuxLossAutoScaler
    from megatron.core.transformer.multi_token_prediction import MTPLossAutoScaler

    _clear_megatron_state()
    torch.manual_seed(1234)
    (model,), optimizer, config, _, _, _ = build(spec, MEGATRON, reference=True)
    records = []
    for it in range(spec["iterations"]):
        per_dp = [microbatches(spec, it, dp) for dp in range(spec["dp"])]
        batches = [b for mbs in per_dp for b in mbs]
        model.zero_grad_buffer()
        optimizer.zero_grad()
        losses = []
        n = len(batches)
        # per-token loss (balanced data, megatron's calculate_per_token_loss): every token of the global
        # batch weighs the same, 1 / its token count, whatever microbatch and replica it landed in
        tokens = sum(float(b["loss_mask"].sum()) for b in batches) if spec.get("balance") else None
        by_cp = [[] for _ in range(spec.get("cp", 1))]
        for batch in batches:
            extra = {"packed_seq_params": batch["packed_seq_params"]} if batch.get("packed_seq_params") else {}
            per_token = model(batch["tokens"], batch["position_ids"], batch["attention_mask"],
                              labels=batch["labels"], **extra)
            loss = _reference_loss(per_token.float(), batch["loss_mask"].float(), by_cp)
            if spec.get("moe"):  # what megatron's forward_step sets: the aux loss's share of the batch
                MoEAuxLossAutoScaler.set_loss_scale(config.grad_scale_func(torch.ones(1)) / n)
            if config.mtp_num_layers:  # and the MTP losses' (schedules.py:296-305 at core_v0.16.1)
                MTPLossAutoScaler.set_loss_scale(config.grad_scale_func(torch.ones(1)) / n)
            # per-token: the masked sum, divided by the global count in finalize_model_grads (as megatron's
            # schedules and finalize_model_grads do: in bf16 dividing before the backward rounds otherwise)
            share = torch.sum(per_token.float().view(-1) * batch["loss_mask"].float().view(-1)) if tokens else loss / n
            config.grad_scale_func(share).backward()
            losses.append(float(loss.detach()))
        if tokens:
            config.finalize_model_grads_func([model], num_tokens=torch.tensor(int(tokens)))
        else:
            config.finalize_model_grads_func([model])
        record = {"losses": losses, "losses_by_cp": by_cp, "grads": record_grads([model], {}, False, 0, 0),
                  "mtp_losses": ref.mtp_losses_taken(),
                  "counts": [len(mbs) for mbs in per_dp]}
        if spec.get("inject_nonfinite_at") == it:
            record["step"] = (False, None)  # the synchronous path skips a step with a non-finite grad
        else:
            ok, norm, _ = optimizer.step()
            record["step"] = (bool(ok), None if norm is None else float(norm))
        record["params"] = record_params([model], {}, False, 0, 0)
        records.append(record)
    return {"iterations": records, "final_params": record_model_params([model], 0, 0)}


def _reference_loss(per_token: torch.Tensor, mask: torch.Tensor, by_cp: list) -> torch.Tensor:
    """A microbatch's loss as the pipelined runs train it. Without context parallelism the masked mean.
    With it (len(by_cp) = CP ranks) each CP rank's forward_step divides its own masked sum by its own
    token count (megatron's 3-tuple loss, schedules.py forward_step_calc_loss) and DDP averages the
    gradients over data x context parallel ranks: the mean over CP ranks of their local means, each
    appended to its rank's reported losses."""
    if len(by_cp) == 1:
        loss = torch.sum(per_token.view(-1) * mask.view(-1)) / mask.sum()
        by_cp[0].append(float(loss.detach()))
        return loss
    local = []
    for r in range(len(by_cp)):
        at = cp_positions(per_token.shape[1], len(by_cp), r)
        local.append(torch.sum(per_token[:, at] * mask[:, at]) / mask[:, at].sum())
        by_cp[r].append(float(local[-1].detach()))
    return torch.stack(local).mean()


# -- the parent side -------------------------------------------------------------------------------

def run_reference(specs: dict, *, timeout_s: float = 900) -> dict:
    """Every spec's reference: those with TransformerEngine layers in a process of their own,
    with the stand-in on its path (TE_STANDIN)."""
    out = {}
    for te in (False, True):
        group = {name: spec for name, spec in specs.items() if bool(spec.get("te")) == te}
        if group:
            out.update(local_ranks.run_ranks(reference_body, {"pp": 1, "specs": group}, 1, timeout_s=timeout_s,
                                             sys_path=[TE_STANDIN] if te else ())[0])
    return out


def run_world(layout: dict, cases: list, directory: str, *, timeout_s: float = 1800) -> list:
    """Run `cases` ({'spec', 'schedule'}) on the world `layout` ({'world', 'tp', 'pp', 'ep'}; `te`:
    TransformerEngine's stand-in first on the ranks' path). Returns per case either a list of
    per-rank results or {'error': text}."""
    world = layout["world"]
    results: list = [None] * len(cases)
    start = 0
    began = time.monotonic()
    deadline = began + timeout_s
    log = open(os.path.join(directory, "log.txt"), "a")
    while start < len(cases):
        print(f"{time.monotonic() - began:7.1f} s: launch {world} ranks from case {start}", file=log, flush=True)
        for path in glob.glob(os.path.join(directory, "*.err")) + glob.glob(os.path.join(directory, "*.recovered")):
            os.remove(path)
        launch_error = None
        try:
            local_ranks.run_ranks(world_body, {**layout, "cases": cases, "start": start, "dir": directory}, world,
                                  timeout_s=max(60.0, deadline - time.monotonic()),
                                  sys_path=[TE_STANDIN] if layout.get("te") else ())
        except (RuntimeError, TimeoutError) as exc:
            launch_error = str(exc)
        failed = None
        for i in range(start, len(cases)):
            paths = [os.path.join(directory, f"{i}.{r}.pt") for r in range(world)]
            if all(os.path.exists(p) for p in paths):
                results[i] = [torch.load(p, weights_only=False) for p in paths]
                continue
            errors = "\n".join(filter(None, [_silent_deaths(launch_error), _errors(directory, i, world)]))
            results[i] = {"error": errors or launch_error or "no result and no error"}
            if not os.path.exists(os.path.join(directory, f"{i}.recovered")):
                failed = i  # the case that ended the launch
                break
        print(f"{time.monotonic() - began:7.1f} s: launch ended, first case not finished on every rank: {failed}",
              file=log, flush=True)
        if failed is None:
            break
        if time.monotonic() > deadline:
            for j in range(failed + 1, len(cases)):
                results[j] = {"error": "not run: the world's time budget was spent"}
            break
        start = failed + 1
    return results


def _silent_deaths(launch_error: str | None) -> str:
    """The ranks local_ranks found dead without a word (a signal, the out-of-memory killer): they
    wrote no error file, and their peers' errors (connections reset) only point at them. Each
    comes with the stack faulthandler wrote at its death, when there is one."""
    found = re.findall(r"^rank (\d+) failed:\n(its process .*?)(?=^rank \d+ failed:\n|\Z)", launch_error or "",
                       re.M | re.S)
    return "\n".join(f"rank {r}: {text.rstrip()}" for r, text in found)


def _errors(directory: str, i: int, world: int) -> str:
    """Every rank's error in one line, the first to fail first (the others usually waited on
    it), then that rank's traceback."""
    errors = []
    for r in range(world):
        path = os.path.join(directory, f"{i}.{r}.err")
        if os.path.exists(path):
            with open(path) as f:
                when, _, text = f.read().partition("\n")
            errors.append((float(when), r, text))
    if not errors:
        return ""
    errors.sort()
    lines = [f"rank {r} (+{when - errors[0][0]:.1f} s): {text.splitlines()[0][:400]}" for when, r, text in errors]
    return "\n".join(lines) + f"\n\nrank {errors[0][1]}:\n{errors[0][2]}"


# -- comparisons -----------------------------------------------------------------------------------

def reference_slice(full: torch.Tensor, tp_rank: int, tp_size: int, pdim, lo: int, hi: int) -> torch.Tensor:
    """What a piece holds, taken from the full (tp = 1) reference tensor."""
    shard = full if pdim is None or tp_size == 1 else full.chunk(tp_size, dim=pdim)[tp_rank]
    return shard.reshape(-1)[lo:hi].float()


def flat_tensors(pieces_per_rank: list) -> dict:
    """(name, tp_rank) -> flat tensor assembled from pieces of every rank (and a coverage mask).
    Pieces of the same elements from different copies (dp replicas, tied copies) must agree
    with each other; the first one is kept and the others are checked elsewhere."""
    sizes = {}
    for pieces in pieces_per_rank:
        for name, tp_rank, pdim, lo, hi, values, _ in pieces:
            sizes.setdefault((name, tp_rank), [])
            sizes[(name, tp_rank)].append((lo, hi, values))
    out = {}
    for key, items in sizes.items():
        n = max(hi for _, hi, _ in items)
        flat = torch.zeros(n)
        covered = torch.zeros(n, dtype=torch.bool)
        for lo, hi, values in items:
            fresh = ~covered[lo:hi]
            flat[lo:hi][fresh] = values[fresh]
            covered[lo:hi] = True
        out[key] = (flat, covered)
    return out


def max_rel_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |a - e| / max |e| (max |a - e| when e is all zero; inf on NaN)."""
    if actual.shape != expected.shape:
        return math.inf
    diff = (actual.float() - expected.float()).abs()
    if not torch.isfinite(diff).all():
        return math.inf
    scale = expected.float().abs().max().item() if expected.numel() else 0.0
    d = diff.max().item() if diff.numel() else 0.0
    return d / scale if scale > 0 else d
