"""The two block shapes the GPU benchmark measures, built from megatron-core's own layers.

* `dense`: Llama-3-8B-like (hidden 4096, 32 query heads, 8 KV groups, SwiGLU FFN 14336, RMSNorm,
  RoPE base 500000, no biases, untied embeddings, vocabulary 128256), sequence 4096, micro-batch 1.
* `moe`: Qwen3-30B-A3B-like (hidden 2048, 32 x 128 query heads, 4 KV groups, QK RMSNorm, 128 routed
  experts, top-8, expert FFN 768 SwiGLU, RoPE base 1e6, vocabulary 151936), sequence 4096,
  micro-batch 1; experts as megatron's `SequentialMLP` (the expert implementation there is without
  TransformerEngine), the all-to-all token dispatcher at expert-parallel size 1, the aux-loss router.

Both in bf16, two layers per chunk, through `get_gpt_layer_local_spec` (megatron's
ColumnParallelLinear / RowParallelLinear, which our hooks split), or with `attention="te"` through
`get_gpt_layer_with_transformer_engine_spec` (TE's layers, attention and norms; the MoE block's
experts as TE's `GroupedLinear`, `TEGroupedMLP`), optionally in FP8 (`fp8="delayed"` or
`"tensorwise"`: megatron's `--fp8-format hybrid` with that recipe; `make gpu-te`). The core attention is megatron's
own `DotProductAttention` (`attention="local"`: unfused, it keeps a [heads, s, s] probability matrix
per layer) or `SdpaAttention` below (`attention="sdpa"`), torch's fused scaled-dot-product kernel in
its place: a fused attention, as TransformerEngine's would be, so the time and memory around the
linear layers are not swamped by the unfused softmax. The core attention has no weights, so nothing
of the weight-gradient split depends on that choice.

`DRY_BLOCKS` are the same architectures at toy sizes for the CPU dry run (fp32).
"""
from __future__ import annotations

import math
import zlib
from dataclasses import replace
from typing import Optional

BLOCKS = {
    "dense": dict(label="Llama-3-8B-like", hidden=4096, heads=32, groups=8, kv_channels=128, ffn=14336,
                  vocab=128256, seq=4096, mbs=1, rotary_base=500000, qk_norm=False, experts=None,
                  model_layers=32, attentions=("sdpa", "local")),
    "moe": dict(label="Qwen3-30B-A3B-like", hidden=2048, heads=32, groups=4, kv_channels=128, ffn=6144,
                vocab=151936, seq=4096, mbs=1, rotary_base=1000000, qk_norm=True, experts=128, topk=8,
                expert_ffn=768, model_layers=48, attentions=("sdpa",)),
}
DRY_BLOCKS = {
    "dense": {**BLOCKS["dense"], "hidden": 64, "heads": 4, "groups": 2, "kv_channels": 16, "ffn": 160,
              "vocab": 256, "seq": 32, "attentions": ("sdpa", "local")},
    "moe": {**BLOCKS["moe"], "hidden": 64, "heads": 4, "groups": 2, "kv_channels": 16, "ffn": 128,
            "vocab": 256, "seq": 32, "experts": 8, "topk": 2, "expert_ffn": 32, "attentions": ("sdpa",)},
}
LAYERS_PER_CHUNK = 2


def blocks(dry_run: bool) -> dict:
    return DRY_BLOCKS if dry_run else BLOCKS


def transformer_config(block: dict, *, num_layers: int, pp: int = 1, chunks: int = 1, gpu: bool, te: bool = False,
                       fp8: Optional[str] = None):
    """megatron-core's TransformerConfig for `block` (bf16 on a GPU, fp32 on CPU); with `te`, TE's grouped
    experts; with `fp8` (a recipe), megatron's FP8 (hybrid format) around the TE layers."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    from primus_megatron.compat.attention_env import config_fields

    dtype = torch.bfloat16 if gpu else torch.float32
    extra = {}
    if block.get("experts"):
        extra = dict(num_moe_experts=block["experts"], moe_router_topk=block["topk"],
                   moe_ffn_hidden_size=block["expert_ffn"], moe_token_dispatcher_type="alltoall",
                   moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=1e-3, moe_grouped_gemm=te)
    if fp8:
        extra.update(fp8="hybrid", fp8_recipe=fp8)
    return TransformerConfig(
        num_layers=num_layers, hidden_size=block["hidden"], num_attention_heads=block["heads"],
        num_query_groups=block["groups"], kv_channels=block["kv_channels"], ffn_hidden_size=block["ffn"],
        gated_linear_unit=True, activation_func=F.silu, normalization="RMSNorm", add_bias_linear=False,
        qk_layernorm=block["qk_norm"], hidden_dropout=0.0, attention_dropout=0.0,
        bf16=gpu, params_dtype=dtype, pipeline_dtype=dtype,
        use_cpu_initialization=not gpu, perform_initialization=False,  # init_weights_ below draws them
        gradient_accumulation_fusion=False, bias_dropout_fusion=False, masked_softmax_fusion=False,
        bias_activation_fusion=False, apply_rope_fusion=False, persist_layer_norm=False,
        pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=chunks if chunks > 1 else None,
        deallocate_pipeline_outputs=True, **extra,
        **config_fields())  # AMD's images set NVTE_*_ATTN, which megatron's default auto asserts against


def _sdpa_class():
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.module import MegatronModule

    class SdpaAttention(MegatronModule):
        """Core attention through `torch.nn.functional.scaled_dot_product_attention` (causal): megatron's
        core-attention interface (query [sq, b, np, hn], key/value [sk, b, ng, hn] -> [sq, b, np * hn]).
        Grouped KV heads are repeated to the query heads first, so the fused (flash) kernel takes them
        on any torch that has it."""

        def __init__(self, config, layer_number: int, attn_mask_type, attention_type: str, attention_dropout=None,
                     softmax_scale: Optional[float] = None, **_unused) -> None:
            super().__init__(config=config)
            self.softmax_scale = softmax_scale if softmax_scale is not None else config.softmax_scale

        def forward(self, query, key, value, attention_mask=None, attn_mask_type=None, attention_bias=None,
                    packed_seq_params=None):
            if packed_seq_params is not None or attention_bias is not None:
                raise ValueError("SdpaAttention takes neither packed sequences nor an attention bias")
            repeat = query.size(2) // key.size(2)
            if repeat > 1:
                key, value = key.repeat_interleave(repeat, dim=2), value.repeat_interleave(repeat, dim=2)
            q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, heads, s, hn]
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.softmax_scale)
            s, b = query.size(0), query.size(1)
            return out.permute(2, 0, 1, 3).reshape(s, b, -1)

    return SdpaAttention


_SDPA = None


def sdpa_attention():
    global _SDPA
    if _SDPA is None:
        _SDPA = _sdpa_class()
    return _SDPA


def layer_spec(block: dict, attention: str):
    """megatron's local layer spec for `block`, its core attention swapped for SdpaAttention when asked;
    TE's layer spec for `attention="te"`."""
    from megatron.core.models.gpt.gpt_layer_specs import (get_gpt_layer_local_spec,
                                                          get_gpt_layer_with_transformer_engine_spec)

    if attention == "te":
        return get_gpt_layer_with_transformer_engine_spec(num_experts=block.get("experts"), moe_grouped_gemm=True,
                                                          qk_layernorm=block["qk_norm"])
    spec = get_gpt_layer_local_spec(num_experts=block.get("experts"), moe_grouped_gemm=False,
                                    qk_layernorm=block["qk_norm"], normalization="RMSNorm")
    if attention == "local":
        return spec
    if attention != "sdpa":
        raise ValueError(f"attention must be local, sdpa or te, got {attention!r}")
    attn = spec.submodules.self_attention
    attn_sub = replace(attn.submodules, core_attention=sdpa_attention())
    return replace(spec, submodules=replace(spec.submodules, self_attention=replace(attn, submodules=attn_sub)))


def provider(config, block: dict, attention: str, pre_process: bool = True, post_process: bool = True,
             vp_stage=None):
    """Megatron-LM's model-provider contract: a GPTModel chunk of `block`'s architecture."""
    from megatron.core.models.gpt.gpt_model import GPTModel

    return GPTModel(config, layer_spec(block, attention), vocab_size=block["vocab"],
                    max_sequence_length=block["seq"], pre_process=pre_process, post_process=post_process,
                    share_embeddings_and_output_weights=False, position_embedding_type="rope",
                    rotary_base=block["rotary_base"], vp_stage=vp_stage)


def init_weights_(chunks, *, seed: int, num_layers: int, std: float = 0.02) -> None:
    """Every parameter from (seed, its global name) on its own device (a device generator: a GPU
    fills a billion weights in well under a second), so every placement of one model starts from
    the same weights: norms one, output projections scaled by 1/sqrt(2 L), the rest normal(0, std)."""
    import torch

    from primus_megatron.runtime.placement import named_global_parameters

    with torch.no_grad():
        for chunk in chunks:
            for name, param in named_global_parameters(chunk):
                leaf = name.rsplit(".", 1)[-1]
                if "norm" in name and leaf == "weight":
                    param.fill_(1.0)
                    continue
                gen = torch.Generator(device=param.device).manual_seed(
                    (seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63)
                scale = std / math.sqrt(2.0 * num_layers) if name.endswith(("linear_proj.weight", "linear_fc2.weight")) \
                    else std
                param.copy_(torch.randn(param.shape, generator=gen, device=param.device, dtype=torch.float32) * scale)


def make_batches(block: dict, count: int, device, *, seed: int = 0) -> list:
    """`count` microbatches of random tokens (labels the next token; full loss mask; causal)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    s, b = block["seq"], block["mbs"]
    out = []
    for _ in range(count):
        tokens = torch.randint(0, block["vocab"], (b, s + 1), generator=gen)
        out.append({"tokens": tokens[:, :-1].contiguous().to(device), "labels": tokens[:, 1:].contiguous().to(device),
                    "loss_mask": torch.ones(b, s, device=device),
                    "position_ids": torch.arange(s, device=device).repeat(b, 1)})
    return out


def forward_step(data_iterator, model):
    """megatron's forward-step contract, pretrain_gpt's 3-tuple loss (runtime_throughput.loss_func);
    no attention mask: the causal one is megatron's default (and SdpaAttention's)."""
    from functools import partial

    from runtime_throughput import loss_func

    batch = next(data_iterator)
    output = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])
    return output, partial(loss_func, batch["loss_mask"])
