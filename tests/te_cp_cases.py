"""What each rank runs for tests/test_te_standin_context_parallel.py (imported by the ranks,
which have tests/te_standin first on their path; never imports TransformerEngine at import time).

`run_cases(rank, case)`: every numeric case of CASES with context parallelism on the two-rank
group, each rank holding its load-balanced share of one seeded sequence (chunks r and 2*cp-1-r, as
megatron's get_batch_on_this_cp_rank slices), plus on rank 0 the stand-in's own attention without
context parallelism on the whole sequence (fp32: the unfused backend, which TE runs in fp32 without
CP); and every refusal of REFUSALS, as (exception type, message).

Each case runs twice. In fp32 through ``attention_with_cp`` (TE's attn_forward_func_with_cp), below
DotProductAttention's dtype refusal: TE v2.11 has no context-parallel backend for fp32, so only there
can the ring's arithmetic be checked to fp32 rounding. And in bf16 and fp16 through DotProductAttention
itself, the way megatron calls it (the whole path, dtype refusal included), with 16-bit tolerances.
The inputs are bf16 values (held in fp32), so every run sees the same numbers."""
from __future__ import annotations

import torch

S, B, D = 8, 2, 8  # whole sequence, batch, head dim

# name: (cp_comm_type, qkv_format, attn_mask_type, heads, kv groups, (dk, dv))
CASES = {
    "p2p_causal_sbhd": ("p2p", "sbhd", "causal", 4, 4, (D, D)),
    "p2p_no_mask_bshd": ("p2p", "bshd", "no_mask", 4, 4, (D, D)),
    "p2p_causal_gqa_bshd": ("p2p", "bshd", "causal", 4, 2, (D, D)),
    "p2p_causal_mla_sbhd": ("p2p", "sbhd", "causal", 2, 2, (D, 4)),
    "a2a_causal_sbhd": ("a2a", "sbhd", "causal", 4, 4, (D, D)),
    "a2a_causal_gqa_bshd": ("a2a", "bshd", "causal", 4, 2, (D, D)),
    "a2a_no_mask_sbhd": ("a2a", "sbhd", "no_mask", 2, 2, (D, D)),
    "all_gather_causal_sbhd": ("all_gather", "sbhd", "causal", 4, 2, (D, D)),
    "all_gather_no_mask_bshd": ("all_gather", "bshd", "no_mask", 2, 2, (D, D)),
    "a2a+p2p_reduced_to_p2p_causal_sbhd": ("a2a+p2p", "sbhd", "causal", 2, 2, (D, D)),
}

COUNTED = ("isend", "irecv", "all_to_all_single", "all_gather", "all_reduce")


HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}  # what TE's context-parallel backends take (utils.py 436-465)


def full_inputs(name: str) -> dict:
    """The whole sequence's q, k, v and output gradient, [s, b, h, d], seeded by the case; fp32
    holding bf16 values, so a bf16 run starts from the fp32 run's numbers (fp16 rounds only the
    rare values below its normal range, 6e-5)."""
    _, _, _, heads, groups, (dk, dv) = CASES[name]
    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    x = {"q": torch.randn(S, B, heads, dk, generator=gen), "k": torch.randn(S, B, groups, dk, generator=gen),
         "v": torch.randn(S, B, groups, dv, generator=gen), "dout": torch.randn(S, B, heads * dv, generator=gen)}
    return {n: t.to(torch.bfloat16).float() for n, t in x.items()}


def load_balanced(x: torch.Tensor, rank: int, cp: int, dim: int = 0) -> torch.Tensor:
    """Chunks rank and 2*cp-1-rank of 2*cp along `dim` (megatron's get_batch_on_this_cp_rank)."""
    chunks = x.chunk(2 * cp, dim=dim)
    return torch.cat((chunks[rank], chunks[2 * cp - 1 - rank]), dim=dim)


def _to_format(x: torch.Tensor, qkv_format: str) -> torch.Tensor:
    return x.transpose(0, 1).contiguous() if qkv_format == "bshd" else x


def _attention(name: str, cp_group, cp_global_ranks, cp_comm_type: str, **kwargs):
    import transformer_engine.pytorch as te

    _, _, mask, heads, groups, channels = CASES[name]
    kw = dict(num_gqa_groups=groups, attn_mask_type=mask, attention_dropout=0.0)
    kw.update(kwargs)
    return te.DotProductAttention(heads, channels, cp_group=cp_group, cp_global_ranks=cp_global_ranks,
                                  cp_stream=None, cp_comm_type=cp_comm_type, **kw)


def _ring(name: str, cp_group, cp_global_ranks, cp_comm_type: str):
    """TE's attn_forward_func_with_cp as DotProductAttention calls it for this case (backends.py
    1867-1912: no bias, no window, no dropout, scale 1/sqrt(dk)), below its dtype refusal: the only
    way to run the ring in fp32, which TE v2.11 has no context-parallel backend for."""
    from transformer_engine.pytorch.attention.context_parallel import attention_with_cp

    _, _, mask, _, _, (dk, _) = CASES[name]

    def attn(q, k, v, qkv_format):
        out = attention_with_cp(q, k, v, qkv_format=qkv_format, attn_mask_type=mask, attn_bias_type="no_bias",
                                attn_bias=None, window_size=None, cp_group=cp_group, cp_global_ranks=cp_global_ranks,
                                cp_stream=None, cp_comm_type=cp_comm_type, softmax_scale=dk ** -0.5, dropout_p=0.0)
        return out.reshape(*out.shape[:-2], -1)
    return attn


def _run(attn, inputs: dict, qkv_format: str, counts: dict, dtype=torch.float32) -> dict:
    q, k, v = (_to_format(inputs[n].to(dtype, copy=True), qkv_format).requires_grad_() for n in "qkv")
    before = dict(counts)
    out = attn(q, k, v, qkv_format=qkv_format)
    forward = {c: counts[c] - before[c] for c in COUNTED}
    before = dict(counts)
    out.backward(_to_format(inputs["dout"].to(dtype), qkv_format))
    backward = {c: counts[c] - before[c] for c in COUNTED}
    fmt = (lambda x: x.transpose(0, 1)) if qkv_format == "bshd" else (lambda x: x)  # back to [s, b, ...]
    return {"out": fmt(out.detach()), "dq": fmt(q.grad), "dk": fmt(k.grad), "dv": fmt(v.grad),
            "forward_comm": forward, "backward_comm": backward}


def _count_collectives() -> dict:
    import torch.distributed as dist

    counts = {c: 0 for c in COUNTED}
    for c in COUNTED:
        original = getattr(dist, c)

        def counted(*args, _c=c, _original=original, **kwargs):
            counts[_c] += 1
            return _original(*args, **kwargs)

        setattr(dist, c, counted)
    return counts


def _refusal(fn) -> tuple:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - what a refusal raises is the result
        return type(exc).__name__, str(exc)
    return None, "no exception"


def refusals(group, ranks, singles, rank) -> dict:
    """Each refused configuration on this rank's share (nothing is communicated before a refusal), in
    bf16 unless `dtype` says otherwise: TE refuses fp32 under CP in get_attention_backend, before
    FusedAttention's and the ring's own checks, so fp32 inputs would hide those."""
    cp = len(ranks)

    def call(name, comm="p2p", *, heads=4, groups=4, channels=(D, D), seq=S, kv_seq=None, fmt="sbhd",
             cp_group=group, ctor=None, dtype=torch.bfloat16, thd_3d=False, **fwd):
        def run():
            import transformer_engine.pytorch as te

            attn = te.DotProductAttention(heads, channels, num_gqa_groups=groups, cp_group=cp_group,
                                          cp_global_ranks=ranks, cp_stream=None, cp_comm_type=comm,
                                          **(ctor or {}))
            q = torch.randn(seq // cp, B, heads, channels[0])
            k = torch.randn((kv_seq or seq) // cp, B, groups, channels[0])
            v = torch.randn((kv_seq or seq) // cp, B, groups, channels[1])
            q, k, v = (x.to(dtype) for x in (q, k, v))
            if fmt == "bshd" or fmt == "thd":
                q, k, v = (x.transpose(0, 1).contiguous() for x in (q, k, v))
            if thd_3d:  # the B sequences end to end: [B * s, h, d]
                q, k, v = (x.reshape(-1, *x.shape[2:]) for x in (q, k, v))
            attn(q, k, v, qkv_format=fmt, **fwd)
        return name, run

    cases = [
        call("unknown_comm_type", "ring"),
        call("a2a_heads_not_divisible", "a2a", heads=3, groups=3),
        call("a2a_gqa_groups_not_divisible", "a2a", heads=4, groups=1),
        call("a2a_head_dim_not_multiple_of_8", "a2a", channels=(4, 4)),
        call("all_gather_head_dim_not_multiple_of_8", "all_gather", channels=(4, 4)),
        call("a2a_mla", "a2a", channels=(D, 16)),
        call("all_gather_mla", "all_gather", channels=(D, 16)),
        call("p2p_odd_local_sequence", seq=6, attn_mask_type="causal"),
        call("a2a_odd_local_sequence", "a2a", seq=6, attn_mask_type="no_mask"),
        call("padding_causal", attn_mask_type="padding_causal",
             attention_mask=torch.zeros(B, 1, 1, S // cp, dtype=torch.bool)),
        call("causal_bottom_right", attn_mask_type="causal_bottom_right"),
        call("arbitrary_mask", attn_mask_type="arbitrary", attention_mask=torch.zeros(1, 1, S // cp, S // cp,
                                                                                       dtype=torch.bool)),
        call("alibi", core_attention_bias_type="alibi"),
        call("causal_cross_attention", kv_seq=2 * S, attn_mask_type="causal", ctor={"attention_type": "cross"}),
        call("p2p_sliding_window", attn_mask_type="causal", window_size=(2, 0)),
        call("a2a_post_scale_bias", "a2a", attn_mask_type="no_mask", core_attention_bias_type="post_scale_bias",
             core_attention_bias=torch.zeros(1, 4, S, S)),
        call("a2a+p2p_one_group", "a2a+p2p", cp_group=[group]),
        call("p2p_group_list", "p2p", cp_group=[group, group]),
        call("thd_4d", fmt="thd", attn_mask_type="padding_causal"),
        call("thd", fmt="thd", attn_mask_type="padding_causal", thd_3d=True,
             cu_seqlens_q=torch.tensor([0, S, 2 * S], dtype=torch.int32),
             cu_seqlens_kv=torch.tensor([0, S, 2 * S], dtype=torch.int32), max_seqlen_q=S, max_seqlen_kv=S),
        call("thd_fp32", fmt="thd", attn_mask_type="padding_causal", thd_3d=True, dtype=torch.float32,
             cu_seqlens_q=torch.tensor([0, S, 2 * S], dtype=torch.int32),
             cu_seqlens_kv=torch.tensor([0, S, 2 * S], dtype=torch.int32), max_seqlen_q=S, max_seqlen_kv=S),
        call("p2p_post_scale_bias", attn_mask_type="no_mask", core_attention_bias_type="post_scale_bias",
             core_attention_bias=torch.zeros(1, 4, S // cp, S)),
        call("dropout_in_training", ctor={"attention_dropout": 0.1}),
        # no context-parallel backend for fp32 / fp64 in TE v2.11 (utils.py 436-465, 756-760)
        call("p2p_fp32", dtype=torch.float32, attn_mask_type="causal"),
        call("a2a_fp32", "a2a", dtype=torch.float32, attn_mask_type="causal"),
        call("all_gather_fp64", "all_gather", dtype=torch.float64, attn_mask_type="no_mask"),
        call("a2a+p2p_reduced_fp32", "a2a+p2p", cp_group=[singles[rank], group], dtype=torch.float32),
        call("fp8_e4m3", dtype=torch.float8_e4m3fn),
    ]
    return {name: _refusal(run) for name, run in cases}


def run_cases(rank: int, case: dict) -> dict:
    import torch.distributed as dist

    cp = dist.get_world_size()
    ranks = list(range(cp))
    group = dist.new_group(ranks)
    singles = [dist.new_group([r]) for r in ranks]  # every rank takes part in creating each group
    counts = _count_collectives()
    results, references, half = {}, {}, {label: {} for label in HALF}
    for name, (comm, fmt, *_rest) in CASES.items():
        inputs = full_inputs(name)
        local = {n: load_balanced(x, rank, cp) for n, x in inputs.items()}
        cp_group = [singles[rank], group] if comm == "a2a+p2p" else group
        results[name] = _run(_ring(name, cp_group, ranks, comm), local, fmt, counts)
        for label, dtype in HALF.items():
            half[label][name] = _run(_attention(name, cp_group, ranks, comm), local, fmt, counts, dtype)
        if rank == 0:  # the stand-in's attention without context parallelism, whole sequence
            references[name] = _run(_attention(name, None, None, "p2p"), inputs, fmt, counts)
    return {"results": results, "half": half, "references": references,
            "refusals": refusals(group, ranks, singles, rank),
            "ring_of_four": ring_of_four() if rank == 0 else None}


# --- a ring of four in one process: threads as ranks, messages through queues -------------------

RING = 4
RING_GLOBAL_RANKS = [10, 11, 12, 13]  # the group's ranks in the world: peers are named by these


class _FakeGroup:
    def __init__(self, rank: int):
        self.rank, self.size = rank, RING


class _Sent:
    def wait(self) -> None:
        pass


class _Received:
    def __init__(self, box, tensor):
        self.box, self.tensor = box, tensor

    def wait(self) -> None:
        self.tensor.copy_(self.box.get(timeout=30))


class _FakeDist:
    """isend / irecv between the threads of `ring_of_four`, peers named by global rank."""

    def __init__(self):
        import queue

        self.boxes = {(a, b): queue.Queue() for a in range(RING) for b in range(RING)}
        self.sends = []  # (direction, from group rank, to global rank)
        self.phase = {}

    def isend(self, tensor, dst, group):
        self.sends.append((self.phase.get(group.rank), group.rank, dst))
        self.boxes[(group.rank, RING_GLOBAL_RANKS.index(dst))].put(tensor.clone())
        return _Sent()

    def irecv(self, tensor, src, group):
        return _Received(self.boxes[(RING_GLOBAL_RANKS.index(src), group.rank)], tensor)


def ring_of_four() -> dict:
    """AttnFuncWithCPAndKVP2P on a simulated ring of RING ranks (threads; gloo ranks are two), so
    that the middle steps (KV and dKV travelling together), the ring's direction and the use of
    cp_global_ranks show; with the whole sequence of length 4*RING."""
    import threading

    from transformer_engine.pytorch.attention import context_parallel as cpm

    gen = torch.Generator().manual_seed(7)
    seq, heads, groups = 4 * RING, 4, 2
    full = {"q": torch.randn(seq, B, heads, D, generator=gen), "k": torch.randn(seq, B, groups, D, generator=gen),
            "v": torch.randn(seq, B, groups, D, generator=gen), "dout": torch.randn(seq, B, heads, D, generator=gen)}
    fake, results, errors = _FakeDist(), [None] * RING, []
    saved = cpm.dist, cpm.get_distributed_world_size, cpm.get_distributed_rank
    cpm.dist, cpm.get_distributed_world_size, cpm.get_distributed_rank = (
        fake, lambda group: group.size, lambda group: group.rank)

    def one_rank(r: int) -> None:
        try:
            group = _FakeGroup(r)
            q, k, v = (load_balanced(full[n], r, RING).requires_grad_() for n in "qkv")
            fake.phase[r] = "forward"
            out = cpm.AttnFuncWithCPAndKVP2P.apply(q, k, v, True, D ** -0.5, group, RING_GLOBAL_RANKS)
            fake.phase[r] = "backward"
            out.backward(load_balanced(full["dout"], r, RING))
            results[r] = {"out": out.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            errors.append(f"ring rank {r}: {type(exc).__name__}: {exc}")

    try:
        threads = [threading.Thread(target=one_rank, args=(r,)) for r in range(RING)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        cpm.dist, cpm.get_distributed_world_size, cpm.get_distributed_rank = saved
    import transformer_engine.pytorch as te

    attn = te.DotProductAttention(heads, D, num_gqa_groups=groups, attn_mask_type="causal", attention_dropout=0.0)
    q, k, v = (full[n].clone().requires_grad_() for n in "qkv")
    out = attn(q, k, v)
    out.backward(full["dout"].reshape(seq, B, -1))
    reference = {"out": out.detach().view(seq, B, heads, D), "dq": q.grad, "dk": k.grad, "dv": v.grad}
    return {"results": results, "reference": reference, "sends": fake.sends, "errors": errors}
