"""What the rank runs for tests/test_te_standin_thd.py (tests/te_standin first on its path; never
imports TransformerEngine at import time): the stand-in's DotProductAttention with qkv_format="thd"
against its own sbhd attention run on each sequence alone, the rows outside every sequence, what
it refuses (exception type and message), and megatron-core's GPTModel over TE layers fed a packed
microbatch as PackedSeqParams against each sample run alone.

`attention(rank, case)` and `gpt(rank, case)` return plain tensors and tuples for the test to check."""
from __future__ import annotations

import torch

HEADS, GROUPS, D = 4, 2, 8


def record_raised(attempts: dict) -> dict:
    """name -> None when the attempt ran, else (exception type, message)."""
    rec = {}
    for name, attempt in attempts.items():
        try:
            attempt()
            rec[name] = None
        except Exception as exc:  # noqa: BLE001 (what raises is the record)
            rec[name] = (type(exc).__name__, str(exc))
    return rec


def _inputs(t: int, dtype: torch.dtype, seed: int) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(t, h, D, generator=gen).to(dtype) for h in (HEADS, GROUPS, GROUPS))
    return q, k, v, torch.randn(t, HEADS * D, generator=gen)


def _thd(te, q, k, v, dout, mask_type="padding_causal", **kwargs) -> dict:
    """Output and q/k/v gradients of one thd call (the output gradient: dout's first rows)."""
    attn = te.DotProductAttention(HEADS, D, num_gqa_groups=GROUPS, qkv_format="thd", attn_mask_type=mask_type)
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    out = attn(q, k, v, **kwargs)
    (out.float() * dout[:out.shape[0]]).sum().backward()
    return {"out": out.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}


def _alone(te, q, k, v, dout, starts, lens, mask_type="causal") -> list:
    """Each sequence [start, start + n) through the sbhd path, a batch of one."""
    attn = te.DotProductAttention(HEADS, D, num_gqa_groups=GROUPS, qkv_format="sbhd", attn_mask_type=mask_type)
    out = []
    for s, n in zip(starts, lens):
        qs, ks, vs = (x[s:s + n].detach().clone().unsqueeze(1).requires_grad_(True) for x in (q, k, v))
        o = attn(qs, ks, vs).squeeze(1)
        (o.float() * dout[s:s + n]).sum().backward()
        out.append({"start": s, "n": n, "out": o.detach(), "dq": qs.grad.squeeze(1), "dk": ks.grad.squeeze(1),
                    "dv": vs.grad.squeeze(1)})
    return out


def attention(rank: int, case: dict) -> dict:
    import transformer_engine.pytorch as te

    res = {}
    # a pack: sequences of 5, 3 and 7 tokens, then 1 of padding as a sequence of its own (packed_batch.pack)
    cu = torch.tensor([0, 5, 8, 15, 16], dtype=torch.int32)
    lens = (cu[1:] - cu[:-1]).tolist()
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        q, k, v, dout = _inputs(16, dtype, seed=1)
        for mask, alone_mask in (("padding_causal", "causal"), ("padding", "no_mask")):
            res[f"pack_{mask}_{name}"] = (_thd(te, q, k, v, dout, mask, cu_seqlens_q=cu, cu_seqlens_kv=cu,
                                               max_seqlen_q=7, max_seqlen_kv=7),
                                          _alone(te, q, k, v, dout, cu[:-1].tolist(), lens, alone_mask))
        # max_seqlen left to TE (it rounds the longest up to 64)
        res[f"no_max_seqlen_{name}"] = _thd(te, q, k, v, dout, cu_seqlens_q=cu, cu_seqlens_kv=cu)["out"]
        # the tail after the last sequence not counted as one: bf16 (fused) zeroes it, fp32 (unfused) drops it
        res[f"uncovered_tail_{name}"] = _thd(te, q, k, v, dout, cu_seqlens_q=cu[:-1], cu_seqlens_kv=cu[:-1])
    # padding between sequences (cu_seqlens_padded), bf16: sequences at [0, 5), [6, 9), [10, 17) of 18 rows
    q, k, v, dout = _inputs(18, torch.bfloat16, seed=2)
    cu, padded = torch.tensor([0, 5, 8, 15], dtype=torch.int32), torch.tensor([0, 6, 10, 17], dtype=torch.int32)
    res["padded_bf16"] = (_thd(te, q, k, v, dout, cu_seqlens_q=cu, cu_seqlens_kv=cu, cu_seqlens_q_padded=padded,
                               cu_seqlens_kv_padded=padded, max_seqlen_q=7, max_seqlen_kv=7),
                          _alone(te, q, k, v, dout, [0, 6, 10], [5, 3, 7]))
    res["refusals"] = refusals(te)
    return res


def refusals(te) -> dict:
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)

    def call(dtype=torch.bfloat16, *, shape3=True, mask_type="padding_causal", ctor=None, **kwargs):
        def run():
            attn = te.DotProductAttention(HEADS, D, num_gqa_groups=GROUPS, qkv_format="thd", **(ctor or {}))
            q, k, v, _ = _inputs(8, dtype, seed=3)
            if not shape3:
                q, k, v = (x.unsqueeze(1) for x in (q, k, v))
            attn(q, k, v, attn_mask_type=mask_type, **{"cu_seqlens_q": cu, "cu_seqlens_kv": cu, **kwargs})
        return run

    padded = torch.tensor([0, 4, 8], dtype=torch.int32)
    attempts = {
        # TE's own checks (dot_product_attention.py 1106-1117)
        "4d_inputs": call(shape3=False),
        "causal_mask_type": call(mask_type="causal"),
        "no_mask": call(mask_type="no_mask"),
        "no_cu_seqlens": call(cu_seqlens_q=None),
        "int64_cu_seqlens": call(cu_seqlens_q=cu.long(), cu_seqlens_kv=cu.long()),
        "cu_seqlens_shapes_differ": call(cu_seqlens_kv=torch.tensor([0, 8], dtype=torch.int32)),
        # TE runs these; the stand-in does not reproduce them
        "fp32_padding_between": call(torch.float32, cu_seqlens_q_padded=padded, cu_seqlens_kv_padded=padded),
        "fp32_attention_mask": call(torch.float32, attention_mask=torch.zeros(2, 1, 1, 8, dtype=torch.bool)),
        "post_scale_bias": call(core_attention_bias_type="post_scale_bias",
                                core_attention_bias=torch.zeros(1, HEADS, 8, 8)),
        "max_seqlen_short": call(max_seqlen_q=4, max_seqlen_kv=4),
        "cu_seqlens_past_the_tokens": call(cu_seqlens_q=torch.tensor([0, 3, 9], dtype=torch.int32),
                                           cu_seqlens_kv=torch.tensor([0, 3, 9], dtype=torch.int32)),
        "fp64": call(torch.float64),
    }
    return record_raised(attempts)


def gpt(rank: int, case: dict) -> dict:
    """Per-token losses and the input-embedding gradient of samples packed into one thd microbatch
    (packed_batch.pack + packed_seq_params) against each sample run alone (TE's causal sbhd attention,
    no PackedSeqParams), on megatron-core's GPTModel over TE layers with RoPE and grouped-query attention."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    from primus_megatron.train.packed_batch import alone, pack, packed_seq_params

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[case["dtype"]]
    torch.manual_seed(3)
    config = TransformerConfig(num_layers=2, hidden_size=32, num_attention_heads=4, num_query_groups=2,
                               ffn_hidden_size=64, hidden_dropout=0.0, attention_dropout=0.0,
                               use_cpu_initialization=True, params_dtype=dtype, bf16=dtype == torch.bfloat16,
                               normalization="RMSNorm", gated_linear_unit=True,
                               activation_func=torch.nn.functional.silu, add_bias_linear=False)
    model = GPTModel(config, get_gpt_layer_with_transformer_engine_spec(), vocab_size=128, max_sequence_length=32,
                     position_embedding_type="rope")
    gen = torch.Generator().manual_seed(1)
    samples = [torch.randint(0, 128, (n + 1,), generator=gen) for n in (5, 9, 3)]
    batch = pack(samples, 20)
    out = {"cu_seqlens": batch["cu_seqlens"], "max_seqlen": batch["max_seqlen"]}
    emb = model.embedding.word_embeddings.weight
    packed = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"],
                   packed_seq_params=packed_seq_params(batch))
    (packed.float() * batch["loss_mask"]).sum().backward()
    out["packed"], out["packed_grad"] = packed.detach().float(), emb.grad.detach().float().clone()
    emb.grad = None
    alone_losses = []
    for sample in samples:
        one = alone(sample)
        own = model(one["tokens"], one["position_ids"], None, labels=one["labels"])
        own.float().sum().backward()
        alone_losses.append(own.detach().float())
    out["alone"], out["alone_grad"] = alone_losses, emb.grad.detach().float().clone()
    # the same pack without PackedSeqParams: TE's causal attention across the whole pack
    out["unpacked"] = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"]).detach().float()
    return out
