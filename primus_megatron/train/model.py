"""GPT model, data-parallel wrapper, optimizer and LR schedule from the arguments
(what Megatron-LM's get_model / setup_model_and_optimizer do, on megatron-core)."""
from __future__ import annotations

import argparse
from functools import partial
from typing import Optional

import torch

from ..options import PipelineSpec
from ..schedules.layer_split import LayerSplit


def transformer_config(args: argparse.Namespace, spec: Optional[PipelineSpec] = None):
    """megatron's TransformerConfig for the arguments, on the spec's chunks and layer split (the
    one --pipeline-balance chose, else the arguments')."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    dtype = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else torch.float32
    chunks = spec.chunks if spec is not None else 1
    split = (spec.layer_split(args) if spec is not None else None) or LayerSplit.from_args(args)
    return TransformerConfig(
        num_layers=args.num_layers,
        hidden_size=args.hidden_size,
        ffn_hidden_size=args.ffn_hidden_size,
        num_attention_heads=args.num_attention_heads,
        hidden_dropout=args.hidden_dropout,
        attention_dropout=args.attention_dropout,
        init_method_std=args.init_method_std,
        # Llama/Qwen-style architectures (train/arguments.py), as Megatron-LM maps its options
        normalization=args.normalization,
        layernorm_epsilon=args.norm_epsilon,
        add_bias_linear=args.add_bias_linear,
        num_query_groups=args.num_query_groups,
        qk_layernorm=args.qk_layernorm,
        **({"gated_linear_unit": True, "activation_func": torch.nn.functional.silu} if args.swiglu else {}),
        **_moe_fields(args),
        tensor_model_parallel_size=args.tensor_model_parallel_size,
        pipeline_model_parallel_size=args.pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=chunks if chunks > 1 else None,
        # megatron's uneven split: the same global stages under every placement (runtime/placement.py)
        num_layers_in_first_pipeline_stage=split.first,
        num_layers_in_last_pipeline_stage=split.last,
        account_for_embedding_in_pipeline_split=split.embedding,
        account_for_loss_in_pipeline_split=split.loss,
        pipeline_model_parallel_layout=split.layout,
        sequence_parallel=args.sequence_parallel,
        use_cpu_initialization=args.cpu,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=args.bf16,
        fp16=args.fp16,
        gradient_accumulation_fusion=args.gradient_accumulation_fusion,
        recompute_granularity=getattr(args, "recompute_granularity", None),
        recompute_method=getattr(args, "recompute_method", None),
        recompute_num_layers=getattr(args, "recompute_num_layers", None),
        bias_dropout_fusion=not args.cpu,
        # megatron's fused softmax imports apex's scaled_masked_softmax_cuda at the first forward
        # (fusions/fused_softmax.py:357): asked for only where that kernel is installed
        masked_softmax_fusion=not args.cpu and _has_module("scaled_masked_softmax_cuda"),
        apply_rope_fusion=False,
        deallocate_pipeline_outputs=True,
        # normalised by the global batch's loss-token count (finalize_model_grads divides by it), not per
        # microbatch and replica: asked for, or --pipeline-balance-data (replicas hold different token counts)
        calculate_per_token_loss=getattr(args, "calculate_per_token_loss", False)
        or getattr(args, "pipeline_balance_data", None) is not None,
        # the backend TransformerEngine's NVTE_*_ATTN variables agree with (compat/attention_env.py): with
        # AMD's NVTE_FLASH_ATTN=0 NVTE_FUSED_ATTN=1, megatron's default auto asserts at model build
        **_attention_backend(),
        # megatron 0.16's default scope ("full") is deprecated and warns on every rank; [] means the same
        **({"cuda_graph_scope": []} if "cuda_graph_scope" in TransformerConfig.__dataclass_fields__ else {}),
    )


def _moe_fields(args: argparse.Namespace) -> dict:
    """megatron's MoE fields from Megatron-LM's options (none for a dense model)."""
    if args.num_experts is None:
        return {}
    return dict(num_moe_experts=args.num_experts, moe_router_topk=args.moe_router_topk,
                moe_ffn_hidden_size=args.moe_ffn_hidden_size or args.ffn_hidden_size,
                moe_shared_expert_intermediate_size=args.moe_shared_expert_intermediate_size,
                moe_router_load_balancing_type=args.moe_router_load_balancing_type,
                moe_aux_loss_coeff=args.moe_aux_loss_coeff, moe_token_dispatcher_type=args.moe_token_dispatcher_type,
                expert_model_parallel_size=args.expert_model_parallel_size, moe_grouped_gemm=False)


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _attention_backend() -> dict:
    from ..compat.attention_env import config_fields

    return config_fields()


def gpt_provider(args: argparse.Namespace, config, vocab_size: int, pre_process: bool = True,
                 post_process: bool = True, vp_stage=None):
    """Megatron-LM's model-provider contract: (pre_process, post_process, vp_stage) -> GPTModel."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    return GPTModel(
        config,
        get_gpt_layer_local_spec(num_experts=args.num_experts, moe_grouped_gemm=False,
                                 normalization=args.normalization, qk_layernorm=args.qk_layernorm),
        vocab_size=vocab_size,
        max_sequence_length=args.max_position_embeddings,
        pre_process=pre_process,
        post_process=post_process,
        share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
        position_embedding_type=args.position_embedding_type,
        rotary_percent=args.rotary_percent,
        rotary_base=args.rotary_base,
        vp_stage=vp_stage,
    )


def build_model(args: argparse.Namespace, spec: Optional[PipelineSpec], config, vocab_size: int, init=None) -> list:
    """This rank's chunks for the spec's placement (megatron's own split without a spec), in
    half precision if asked, wrapped in megatron's DistributedDataParallel."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.transformer.module import Float16Module

    from .. import runtime

    provider = partial(gpt_provider, args, config, vocab_size)
    if spec is not None:
        chunks = runtime.build_model(provider, schedule=spec, config=config)
    elif args.pipeline_model_parallel_size > 1:
        from megatron.core import parallel_state as ps

        chunks = [provider(pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage())]
    else:
        chunks = [provider(pre_process=True, post_process=True)]
    if init is not None:
        init(chunks)  # before any wrapper copies the parameters
    if not args.cpu:
        chunks = [c.cuda(torch.cuda.current_device()) for c in chunks]
    if args.fp16 or args.bf16:
        chunks = [Float16Module(config, c) for c in chunks]
    from ..runtime.te_wgrad import is_routed

    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=args.accumulate_allreduce_grads_in_fp32 or not (args.fp16 or args.bf16),
        overlap_grad_reduce=args.overlap_grad_reduce,
        use_distributed_optimizer=args.use_distributed_optimizer,
        # routed TransformerEngine layers take DDP's grad-ready hook on the layer (it fires in W)
        delay_wgrad_compute=any(is_routed(m) for c in chunks for m in c.modules()),
    )
    wrapped = []
    for i, c in enumerate(chunks):
        # bucketing only for the first chunk, as Megatron-LM does
        wrapped.append(DistributedDataParallel(config, ddp_config, c, disable_bucketing=i > 0))
    return wrapped


def build_optimizer(args: argparse.Namespace, model: list):
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    config = OptimizerConfig(
        optimizer="adam", lr=args.lr, min_lr=args.min_lr, weight_decay=args.weight_decay,
        adam_beta1=args.adam_beta1, adam_beta2=args.adam_beta2, adam_eps=args.adam_eps,
        clip_grad=args.clip_grad, bf16=args.bf16, fp16=args.fp16,
        params_dtype=torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else torch.float32,
        loss_scale=args.loss_scale, initial_loss_scale=args.initial_loss_scale,
        use_distributed_optimizer=args.use_distributed_optimizer,
    )
    optimizer = get_megatron_optimizer(config, model)
    gbs = args.global_batch_size
    scheduler = OptimizerParamScheduler(
        optimizer, init_lr=0.0 if args.lr_warmup_iters else args.lr, max_lr=args.lr, min_lr=args.min_lr,
        lr_warmup_steps=args.lr_warmup_iters * gbs, lr_decay_steps=args.lr_decay_iters * gbs,
        lr_decay_style=args.lr_decay_style, start_wd=args.weight_decay, end_wd=args.weight_decay,
        wd_incr_steps=args.train_iters * gbs, wd_incr_style="constant",
        wsd_decay_steps=None, lr_wsd_decay_style=None)
    return optimizer, scheduler
