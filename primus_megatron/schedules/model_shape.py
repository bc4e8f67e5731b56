"""A transformer's shape and what it costs per token: FLOPs and activation bytes (pure Python).

`primus-pipeline advise` turns a model's shape into per-layer F, B and W times by
scaling a GPU profile (measured at a reference shape) with the ratio of FLOPs
(`gpu_profiles.derive`). The formulas, per token of one microbatch, forward:

* attention projections: 2 x (weights of Q, K, V and the output projection), with
  grouped KV heads (num_query_groups) or DeepSeek's multi-latent attention
  (low-rank Q and KV, `q_lora_rank` / `kv_lora_rank`);
* core attention, causal: s x heads x (qk_dim + v_dim) (QK^T and AV, 2 FLOPs a
  multiply-add, half the keys on average);
* MLP: 2 x h x ffn x 3 gated (SwiGLU), x 2 otherwise; MoE: the router (2 h E),
  top-k experts of `moe_ffn`, plus shared experts; a model whose first
  `dense_layers` are dense (DeepSeek-V3) takes the mean layer.

F is their sum. B (input gradients) repeats every linear layer's GEMM once and
the core attention's 2.5 times (a fused attention's backward recomputes QK^T: 5
GEMMs to the forward's 2); W (weight gradients) repeats the linear layers once
and has no attention core (it has no weights). The output layer costs 2 h V per
token in each of F, B and W.

Activation bytes per layer (bf16, a fused attention: no s x s matrix) count what
the layer keeps for its backward: the norms' and linear layers' inputs, Q/K/V,
the attention output and the MLP's intermediate; only their ratio between two
shapes is used (the profile's measured bytes are scaled by it).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Optional

from .errors import ScheduleError


@dataclass(frozen=True)
class ModelShape:
    """What the cost of a GPT layer depends on (Megatron-LM's argument names in comments)."""

    num_layers: int  # --num-layers
    hidden: int  # --hidden-size
    heads: int  # --num-attention-heads
    groups: int  # --num-query-groups (KV heads; = heads without GQA)
    ffn: int  # --ffn-hidden-size (dense MLP)
    vocab: int  # --padded-vocab-size / --vocab-size
    seq: int = 4096  # --seq-length
    micro_batch: int = 1  # --micro-batch-size
    kv_channels: Optional[int] = None  # --kv-channels (default hidden / heads)
    gated: bool = True  # --swiglu
    experts: int = 0  # --num-experts (0: dense)
    topk: int = 0  # --moe-router-topk
    moe_ffn: int = 0  # --moe-ffn-hidden-size
    shared_ffn: int = 0  # --moe-shared-expert-intermediate-size
    dense_layers: int = 0  # leading dense layers of an MoE model (DeepSeek-V3's first_k_dense_replace)
    q_lora_rank: Optional[int] = None  # --q-lora-rank (multi-latent attention)
    kv_lora_rank: Optional[int] = None  # --kv-lora-rank (multi-latent attention: set means MLA)
    qk_head_dim: int = 128  # --qk-head-dim (MLA)
    qk_pos_dim: int = 64  # --qk-pos-emb-head-dim (MLA)
    v_head_dim: int = 128  # --v-head-dim (MLA)

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden", "heads", "groups", "ffn", "vocab", "seq", "micro_batch"):
            if getattr(self, name) < 1:
                raise ScheduleError(f"model shape: {name} must be >= 1, got {getattr(self, name)}")
        if self.heads % self.groups:
            raise ScheduleError(f"--num-attention-heads ({self.heads}) must be a multiple of --num-query-groups "
                                f"({self.groups})")
        if self.experts and not (1 <= self.topk <= self.experts and self.moe_ffn >= 1):
            raise ScheduleError(f"an MoE model (--num-experts {self.experts}) needs --moe-router-topk in 1..{self.experts} "
                                f"and --moe-ffn-hidden-size, got {self.topk} and {self.moe_ffn}")
        if not 0 <= self.dense_layers <= self.num_layers:
            raise ScheduleError(f"model shape: dense_layers must be in 0..{self.num_layers}, got {self.dense_layers}")

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden // self.heads

    @property
    def tokens(self) -> int:
        """Tokens of one microbatch."""
        return self.seq * self.micro_batch

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank is not None

    def with_(self, **changes) -> "ModelShape":
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ModelShape":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


# -- FLOPs per token -------------------------------------------------------------------------------

def _projection_weights(m: ModelShape) -> int:
    """Weights of the attention's linear layers (multiply-adds per token)."""
    h = m.hidden
    if m.mla:
        qk = m.qk_head_dim + m.qk_pos_dim
        q = h * m.heads * qk if m.q_lora_rank is None else h * m.q_lora_rank + m.q_lora_rank * m.heads * qk
        kv = h * (m.kv_lora_rank + m.qk_pos_dim) + m.kv_lora_rank * m.heads * (m.qk_head_dim + m.v_head_dim)
        return q + kv + m.heads * m.v_head_dim * h
    d_q, d_kv = m.heads * m.head_dim, m.groups * m.head_dim
    return h * (d_q + 2 * d_kv) + d_q * h


def _mlp_weights(m: ModelShape, ffn: int) -> int:
    return m.hidden * ffn * (3 if m.gated else 2)


def _mean_mlp_weights(m: ModelShape) -> float:
    """Active MLP weights per token of the mean layer (dense, MoE or DeepSeek's mix)."""
    if not m.experts:
        return _mlp_weights(m, m.ffn)
    moe = m.hidden * m.experts + m.topk * _mlp_weights(m, m.moe_ffn) + _mlp_weights(m, m.shared_ffn)
    dense = _mlp_weights(m, m.ffn)
    return (m.dense_layers * dense + (m.num_layers - m.dense_layers) * moe) / m.num_layers


def core_attention_flops(m: ModelShape) -> float:
    """Forward FLOPs per token of the causal core attention (module doc)."""
    qk, v = (m.qk_head_dim + m.qk_pos_dim, m.v_head_dim) if m.mla else (m.head_dim, m.head_dim)
    return float(m.seq * m.heads * (qk + v))


def linear_flops(m: ModelShape) -> float:
    """Forward FLOPs per token of the mean layer's linear layers."""
    return 2.0 * (_projection_weights(m) + _mean_mlp_weights(m))


BACKWARD_ATTENTION = 2.5  # a fused attention's backward: 5 GEMMs to the forward's 2 (it recomputes QK^T)


def layer_flops(m: ModelShape) -> dict[str, float]:
    """F, B and W FLOPs per token of the mean transformer layer (module doc)."""
    lin, core = linear_flops(m), core_attention_flops(m)
    return {"f": lin + core, "b": lin + BACKWARD_ATTENTION * core, "w": lin}


def head_flops(m: ModelShape) -> float:
    """FLOPs per token of the output layer in each of F, B and W."""
    return 2.0 * m.hidden * m.vocab


# -- activation bytes per token --------------------------------------------------------------------

def layer_activation_bytes(m: ModelShape) -> float:
    """bf16 bytes per token one layer keeps from its F to its backward (module doc)."""
    h = m.hidden
    if m.mla:
        qk = m.qk_head_dim + m.qk_pos_dim
        attention = (m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_pos_dim + 2 * m.heads * qk + 2 * m.heads * m.v_head_dim
    else:
        d_q, d_kv = m.heads * m.head_dim, m.groups * m.head_dim
        attention = d_q + 2 * d_kv + d_q  # q, k, v and the attention's output
    width = 3 if m.gated else 2  # fc1's output (gate and up) and the activation's
    dense = h + width * m.ffn
    if m.experts:
        moe = m.experts + m.topk * (h + width * m.moe_ffn) + (width * m.shared_ffn + h if m.shared_ffn else 0)
        mlp = (m.dense_layers * dense + (m.num_layers - m.dense_layers) * moe) / m.num_layers
    else:
        mlp = dense
    return 2.0 * (4 * h + attention + mlp)  # 4h: the two norms' inputs and the two linear inputs after them


# -- presets ---------------------------------------------------------------------------------------
# From the models' public config.json files on the Hugging Face hub (field names there in brackets):
# meta-llama/Meta-Llama-3-8B and Meta-Llama-3-70B [num_hidden_layers, hidden_size, num_attention_heads,
# num_key_value_heads, intermediate_size, vocab_size]; Qwen/Qwen3-30B-A3B [+ head_dim 128, num_experts,
# num_experts_per_tok, moe_intermediate_size; every layer MoE]; deepseek-ai/DeepSeek-V3 [+ q_lora_rank,
# kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, n_routed_experts, n_shared_experts x
# moe_intermediate_size, first_k_dense_replace; its multi-token-prediction layer is left out].
PRESETS: dict[str, ModelShape] = {
    "llama3-8b": ModelShape(num_layers=32, hidden=4096, heads=32, groups=8, ffn=14336, vocab=128256, seq=8192),
    "llama3-70b": ModelShape(num_layers=80, hidden=8192, heads=64, groups=8, ffn=28672, vocab=128256, seq=8192),
    "qwen3-30b-a3b": ModelShape(num_layers=48, hidden=2048, heads=32, groups=4, ffn=6144, vocab=151936, seq=4096,
                                kv_channels=128, experts=128, topk=8, moe_ffn=768),
    "deepseek-v3": ModelShape(num_layers=61, hidden=7168, heads=128, groups=128, ffn=18432, vocab=129280, seq=4096,
                              experts=256, topk=8, moe_ffn=2048, shared_ffn=2048, dense_layers=3,
                              q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_pos_dim=64, v_head_dim=128),
}


def preset(name: str) -> ModelShape:
    if name not in PRESETS:
        raise ScheduleError(f"--model must be one of {', '.join(PRESETS)}, got {name!r}")
    return PRESETS[name]
