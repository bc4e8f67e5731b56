"""Stand-in for TE v2.11 context parallelism (commit c188b533,
``pytorch/attention/dot_product_attention/context_parallel.py``, cited below as cp.py; the
FusedAttention backend's entry, ``backends.py`` 1762-1912, is the path reproduced), on gloo.

TE's ``attn_forward_func_with_cp`` (cp.py 3890-4110) is ``attention_with_cp`` here, with its
assertions in its order and with its messages (3986-4050, 4108). Its three communication types:

* ``p2p``, ``AttnFuncWithCPAndKVP2P`` (1232-2730): K and V, packed in one buffer (1532), go round
  the ring for cp_size steps, sent to ``cp_global_ranks[rank+1]`` and received from
  ``cp_global_ranks[rank-1]`` (1294-1295) with ``isend``/``irecv`` in TE's even/odd order
  (``flash_attn_p2p_communicate`` 62-102, the unbatched branch; NVTE_BATCH_MHA_P2P_COMM is not
  read); step i's transfer is posted before step i's attention and waited for after it (1539-1560).
  With a causal mask the local sequence is chunks r and 2*cp-1-r and each step is one of TE's
  sections (1615-1700): step 0 the diagonal (both chunks, causal), steps i <= rank the lower
  triangle (all of Q, the first half of the KV, no mask: ``cp_p2p_fwd_prepare_qkv`` 647-764, the
  mask of ``cp_p2p_fwd_fused_attn`` 820-854), later steps the upper triangle (second half of Q,
  all of the KV); without a mask every step is "all". Each step returns its output and its
  log-sum-exp; the LSE is merged in fp32 as max + log1p(exp(min - max)) (151-173, 1760-1795,
  the second half only for upper-triangle steps) and the outputs are rescaled by exp(lse_step - lse)
  and summed in fp32 (105-148, 1809-1858), then cast to the input dtype. The backward (2020-2730)
  is a second ring in the other direction (send to rank-1, receive from rank+1, 2041-2042) starting
  from the last KV the forward received (1923): the KV travels with the dKV accumulated so far
  (only KV at step 0, only dKV at the last step, 2300-2310), step i works on the KV of rank
  (rank+i+1) % cp in the mirrored sections (2384-2440: the diagonal last), and gradients come from
  the saved output and LSE (flash-attention backward: P = exp(S - lse), dS = P * (dP - rowsum(dO*O)))
  rather than from autograd through the forward.
* ``a2a``, ``AttnFuncWithCPAndQKVOA2A`` (3268-3888): ``all_to_all_single`` from sequence-sharded
  to head-sharded (``flash_attn_a2a_communicate`` 404-496), the chunks put back in sequence order
  (``get_seq_chunk_ids_for_reordering_before_attn`` 202-217), attention on the whole sequence, the
  reverse reordering (220-234) and all-to-all back; the backward all-to-alls dO, recomputes on
  the whole sequence and all-to-alls dQ, dK, dV (3690-3830).
* ``all_gather``, ``AttnFuncWithCPAndKVAllGather`` (2759-3266): K and V all-gathered and put in
  sequence order (2865-2876), each local Q chunk attending to the KV up to its end with a
  bottom-right causal mask (2882-2940, ``get_kv_seq_info_after_all_gather`` 2732-2756); the
  backward gathers again (3074) and reduce-scatters dK, dV (3235).

Not reproduced: the second CUDA stream (``cp_stream``, accepted and unused: on a GPU TE overlaps
two steps' attention on it, which changes timing, not values), FP8, dropout, attention bias,
``return_max_logit``, softmax offsets, sliding windows, ``thd``, and ``a2a+p2p`` with both
groups larger than one (TE reduces it to ``p2p`` or ``a2a`` when one of them has one rank,
3996-4001, and so does this). Arithmetic is fp32 whatever the input dtype (TE accumulates dQ and
dKV in the input dtype), the output cast to the input dtype. Only fp16/bf16 inputs reach this module
through ``DotProductAttention``: TE has no context-parallel backend for fp32 (``utils.py`` 436-465
keep flash and fused attention to fp16/bf16, 756-760 take the unfused backend off under CP), and
the stand-in's ``_forward_cp`` raises TE's ValueError (``dot_product_attention.py`` 1396-1401) for
them. The functions here take any dtype, so that tests can check the ring's arithmetic in fp32."""
from __future__ import annotations

from typing import List, Optional

import torch
import torch.distributed as dist

from ..distributed import (gather_along_first_dim, get_distributed_rank, get_distributed_world_size,
                           reduce_scatter_along_first_dim)

dist_group_type = dist.ProcessGroup  # TE constants.py


def _not_reproduced(what: str) -> NotImplementedError:
    return NotImplementedError(f"the TransformerEngine stand-in's DotProductAttention does not reproduce {what}")


def cp_size_of(cp_group) -> int:
    """dot_product_attention.py 1208-1214."""
    if isinstance(cp_group, dist_group_type):
        return get_distributed_world_size(cp_group)
    size = 1
    if isinstance(cp_group, list):
        for group in cp_group:
            size *= get_distributed_world_size(group)
    return size


# --- one attention block, [s, b, h, d] in, fp32 out, with its log-sum-exp [b, h, sq] ----------

def _heads_first(x: torch.Tensor, heads: int) -> torch.Tensor:
    """[s, b, g, d] -> fp32 [b, h, s, d], KV heads repeated for GQA (backends.py 360-372)."""
    if x.shape[2] != heads:
        x = x.repeat_interleave(heads // x.shape[2], dim=2)
    return x.float().permute(1, 2, 0, 3)


def _scores(q, k, scale: float, causal_offset: Optional[int]) -> torch.Tensor:
    """scale * Q K^T, [b, h, sq, sk]; with `causal_offset` key j is hidden from query i when
    j > i + offset (0: top-left diagonal, sk - sq: bottom-right)."""
    s = torch.matmul(_heads_first(q, q.shape[2]), _heads_first(k, q.shape[2]).transpose(-1, -2)) * scale
    if causal_offset is not None:
        hidden = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1 + causal_offset)
        s = s.masked_fill(hidden, float("-inf"))
    return s


def _block_fwd(q, k, v, scale: float, causal_offset: Optional[int]):
    s = _scores(q, k, scale, causal_offset)
    lse = torch.logsumexp(s, dim=-1)
    out = torch.matmul(torch.exp(s - lse.unsqueeze(-1)), _heads_first(v, q.shape[2]))
    return out.permute(2, 0, 1, 3), lse


def _block_bwd(q, k, v, out, dout, lse, scale: float, causal_offset: Optional[int]):
    """The flash-attention backward of one block from the final output and LSE of its queries."""
    heads, groups = q.shape[2], k.shape[2]
    p = torch.exp(_scores(q, k, scale, causal_offset) - lse.unsqueeze(-1))
    do, o = _heads_first(dout, heads), _heads_first(out, heads)
    dv = torch.matmul(p.transpose(-1, -2), do)
    ds = p * (torch.matmul(do, _heads_first(v, heads).transpose(-1, -2)) - (do * o).sum(-1, keepdim=True))
    dq = torch.matmul(ds, _heads_first(k, heads)) * scale
    dk = torch.matmul(ds.transpose(-1, -2), _heads_first(q, heads)) * scale
    b, sk = dk.shape[0], dk.shape[2]
    dk, dv = (x.reshape(b, groups, heads // groups, sk, x.shape[-1]).sum(2) for x in (dk, dv))
    return dq.permute(2, 0, 1, 3), dk.permute(2, 0, 1, 3), dv.permute(2, 0, 1, 3)


# --- p2p ---------------------------------------------------------------------------------------

def _p2p(rank: int, send, dst: int, recv, src: int, group) -> list:
    """cp.py 62-102 (unbatched): even ranks send first, odd ranks receive first."""
    if rank % 2 == 0:
        return [dist.isend(send, dst, group), dist.irecv(recv, src, group)]
    return [dist.irecv(recv, src, group), dist.isend(send, dst, group)]


def _section(causal: bool, kv_before_q: bool, diagonal: bool) -> str:
    if not causal:
        return "all"
    return "diagonal" if diagonal else ("lower-triangle" if kv_before_q else "upper-triangle")


def _split(section: str, q, k, v, half: int):
    """What one step attends with (cp.py 647-764 / 967-1030) and its causal offset."""
    if section == "lower-triangle":
        return q, k[:half], v[:half], None
    if section == "upper-triangle":
        return q[half:], k, v, None
    return q, k, v, (0 if section == "diagonal" else None)


def _merge_lse(lse: torch.Tensor, step: torch.Tensor) -> None:
    """cp.py 151-173, in place."""
    hi, lo = torch.maximum(lse, step), torch.minimum(lse, step)
    lse.copy_(hi + torch.log1p(torch.exp(lo - hi)))


class AttnFuncWithCPAndKVP2P(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, cp_group, cp_global_ranks):
        cp, rank = get_distributed_world_size(cp_group), get_distributed_rank(cp_group)
        send_dst, recv_src = cp_global_ranks[(rank + 1) % cp], cp_global_ranks[(rank - 1) % cp]
        half = q.shape[0] // 2
        kv = torch.cat((k.reshape(-1), v.reshape(-1)))
        steps = []
        for i in range(cp):
            reqs, received = [], None
            if i < cp - 1:
                received = torch.empty_like(kv)
                reqs = _p2p(rank, kv, send_dst, received, recv_src, cp_group)
            k_i, v_i = kv[:k.numel()].view(k.shape), kv[k.numel():].view(v.shape)
            section = _section(causal, i <= rank, i == 0)
            q_part, k_part, v_part, offset = _split(section, q, k_i, v_i, half)
            steps.append((section, *_block_fwd(q_part, k_part, v_part, scale, offset)))
            for req in reqs:
                req.wait()
            kv = received if received is not None else kv
        lse = steps[0][2].clone()
        for section, _, lse_i in steps[1:]:
            _merge_lse(lse[..., half:] if section == "upper-triangle" else lse, lse_i)
        out = torch.zeros(*q.shape[:3], v.shape[-1], dtype=torch.float32, device=q.device)
        for section, out_i, lse_i in steps:
            rows = slice(half, None) if section == "upper-triangle" else slice(None)
            out[rows] += out_i * torch.exp(lse_i - lse[..., rows]).permute(2, 0, 1).unsqueeze(-1)
        out = out.to(q.dtype)
        ctx.save_for_backward(q, kv, out, lse)  # kv: the last one received, rank+1's (cp.py 1923)
        ctx.args = (causal, scale, cp_group, cp_global_ranks, k.shape, v.shape)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, kv, out, lse = ctx.saved_tensors
        causal, scale, cp_group, cp_global_ranks, k_shape, v_shape = ctx.args
        cp, rank = get_distributed_world_size(cp_group), get_distributed_rank(cp_group)
        send_dst, recv_src = cp_global_ranks[(rank - 1) % cp], cp_global_ranks[(rank + 1) % cp]
        half, k_numel, dout = q.shape[0] // 2, torch.Size(k_shape).numel(), dout.contiguous()
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        dkv = None
        for i in range(cp):
            send = kv if i == 0 else (dkv if i == cp - 1 else torch.cat((kv, dkv)))
            received = torch.empty_like(send)
            reqs = _p2p(rank, send, send_dst, received, recv_src, cp_group)
            # this step's KV is rank (rank+i+1) % cp's: before ours when i >= cp-rank-1 (cp.py 2384-2440)
            section = _section(causal, i >= cp - rank - 1, i == cp - 1)
            k_i, v_i = kv[:k_numel].view(k_shape), kv[k_numel:].view(v_shape)
            q_part, k_part, v_part, offset = _split(section, q, k_i, v_i, half)
            rows = slice(half, None) if section == "upper-triangle" else slice(None)
            dq_i, dk_i, dv_i = _block_bwd(q_part, k_part, v_part, out[rows], dout[rows], lse[..., rows],
                                          scale, offset)
            dq[rows] += dq_i
            if section == "lower-triangle":  # the second half of that KV was hidden from every query
                dk_i, dv_i = (torch.cat((x, torch.zeros_like(x))) for x in (dk_i, dv_i))
            step_dkv = torch.cat((dk_i.reshape(-1), dv_i.reshape(-1))).to(kv.dtype)
            for req in reqs:
                req.wait()
            if i == 0:
                kv, dkv = received, step_dkv
            elif i == cp - 1:
                dkv = received + step_dkv
            else:
                kv, dkv = received[:kv.numel()], received[kv.numel():] + step_dkv
        dk, dv = dkv[:k_numel].view(k_shape), dkv[k_numel:].view(v_shape)
        return dq.to(q.dtype), dk, dv, None, None, None, None


# --- a2a ---------------------------------------------------------------------------------------

def _chunk_ids_before_attn(cp: int) -> List[int]:
    """cp.py 202-217: rank-major chunks (r, 2cp-1-r per rank) -> sequence order."""
    ids = [0] * (2 * cp)
    for r in range(cp):
        ids[r], ids[r + cp] = 2 * r, 2 * cp - 2 * r - 1
    return ids


def _chunk_ids_after_attn(cp: int) -> List[int]:
    """cp.py 220-234: sequence order -> rank-major chunks."""
    ids = [0] * (2 * cp)
    for r in range(cp):
        ids[2 * r], ids[2 * r + 1] = r, 2 * cp - r - 1
    return ids


def _reorder(x: torch.Tensor, ids: List[int]) -> torch.Tensor:
    """x [2cp*c, ...] viewed as 2cp chunks along dim 0, taken in the order `ids`."""
    chunks = x.reshape(len(ids), x.shape[0] // len(ids), *x.shape[1:])
    return chunks[torch.tensor(ids, device=x.device)].reshape(x.shape)


def _a2a_before_attn(x: torch.Tensor, cp: int, group) -> torch.Tensor:
    """[s, b, h, d] (this rank's chunks, all heads) -> [cp*s, b, h/cp, d] (the sequence in order,
    this rank's heads): cp.py 404-460 for bshd/sbhd."""
    s, b, h, d = x.shape
    send = x.reshape(s, b, cp, h // cp, d).movedim(2, 0).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    return _reorder(recv.reshape(cp * s, b, h // cp, d), _chunk_ids_before_attn(cp))


def _a2a_after_attn(x: torch.Tensor, cp: int, group) -> torch.Tensor:
    """The inverse of `_a2a_before_attn` (cp.py 461-494)."""
    seq, b, hc, d = x.shape
    send = _reorder(x, _chunk_ids_after_attn(cp)).reshape(cp, seq // cp, b, hc, d).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    return recv.movedim(0, 2).reshape(seq // cp, b, cp * hc, d)


class AttnFuncWithCPAndQKVOA2A(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, cp_group):
        cp = get_distributed_world_size(cp_group)
        q_, k_, v_ = (_a2a_before_attn(x, cp, cp_group) for x in (q, k, v))
        out_, lse = _block_fwd(q_, k_, v_, scale, 0 if causal else None)
        out_ = out_.to(q.dtype)
        ctx.save_for_backward(q_, k_, v_, out_, lse)
        ctx.args = (causal, scale, cp_group)
        return _a2a_after_attn(out_, cp, cp_group)

    @staticmethod
    def backward(ctx, dout):
        q_, k_, v_, out_, lse = ctx.saved_tensors
        causal, scale, cp_group = ctx.args
        cp = get_distributed_world_size(cp_group)
        dout_ = _a2a_before_attn(dout.contiguous(), cp, cp_group)
        grads = _block_bwd(q_, k_, v_, out_, dout_, lse, scale, 0 if causal else None)
        dq, dk, dv = (_a2a_after_attn(g.to(q_.dtype), cp, cp_group) for g in grads)
        return dq, dk, dv, None, None, None


# --- all_gather --------------------------------------------------------------------------------

def _gather_kv(k, v, cp_group, cp: int):
    """cp.py 2862-2876: K and V all-gathered, in sequence order."""
    return tuple(_reorder(gather_along_first_dim(x.contiguous(), cp_group)[0], _chunk_ids_before_attn(cp))
                 for x in (k, v))


def _ag_steps(causal: bool, rank: int, cp: int, half: int):
    """Per local chunk (ids rank and 2cp-1-rank, cp.py 2882): its rows, the KV it sees and the
    bottom-right causal offset (cp.py 2732-2756)."""
    for i, chunk in enumerate((rank, 2 * cp - rank - 1)):
        end = (chunk + 1) * half if causal else 2 * cp * half
        yield slice(i * half, (i + 1) * half), end, (end - half if causal else None)


class AttnFuncWithCPAndKVAllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, cp_group):
        cp, rank = get_distributed_world_size(cp_group), get_distributed_rank(cp_group)
        k_ag, v_ag = _gather_kv(k, v, cp_group, cp)
        half = q.shape[0] // 2
        outs, lses = [], []
        for rows, end, offset in _ag_steps(causal, rank, cp, half):
            out_i, lse_i = _block_fwd(q[rows], k_ag[:end], v_ag[:end], scale, offset)
            outs.append(out_i)
            lses.append(lse_i)
        out = torch.cat(outs).to(q.dtype)
        ctx.save_for_backward(q, k, v, out, torch.cat(lses, dim=-1))
        ctx.args = (causal, scale, cp_group)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        causal, scale, cp_group = ctx.args
        cp, rank = get_distributed_world_size(cp_group), get_distributed_rank(cp_group)
        k_ag, v_ag = _gather_kv(k, v, cp_group, cp)
        half, dout = q.shape[0] // 2, dout.contiguous()
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        dk_ag = torch.zeros(k_ag.shape, dtype=torch.float32, device=q.device)
        dv_ag = torch.zeros(v_ag.shape, dtype=torch.float32, device=q.device)
        for rows, end, offset in _ag_steps(causal, rank, cp, half):
            dq_i, dk_i, dv_i = _block_bwd(q[rows], k_ag[:end], v_ag[:end], out[rows], dout[rows],
                                          lse[..., rows], scale, offset)
            dq[rows] = dq_i
            dk_ag[:end] += dk_i
            dv_ag[:end] += dv_i
        dk, dv = (reduce_scatter_along_first_dim(_reorder(x.to(k.dtype), _chunk_ids_after_attn(cp)), cp_group)[0]
                  for x in (dk_ag, dv_ag))
        return dq.to(q.dtype), dk, dv, None, None, None


# --- attn_forward_func_with_cp -----------------------------------------------------------------

def attention_with_cp(q, k, v, *, qkv_format: str, attn_mask_type: str, attn_bias_type: str, attn_bias,
                      window_size, cp_group, cp_global_ranks, cp_stream, cp_comm_type: str,
                      softmax_scale: float, dropout_p: float) -> torch.Tensor:
    """cp.py 3890-4110 for bshd/sbhd on the FusedAttention path (use_fused_attention=True); q, k, v
    [s, b, h, d] or [b, s, h, d]; returns [s, b, h, dv] or [b, s, h, dv]."""
    if cp_comm_type == "a2a+p2p":  # 3986-4001
        assert isinstance(cp_group, list) and len(cp_group) == 2, \
            "CP implementation a2a+p2p requires cp_group = [a2a_cp_group, p2p_cp_group]!"
        assert attn_bias_type == "no_bias", \
            f"{attn_bias_type} bias type is not supported with hierarchical CP implementation yet!"
        if get_distributed_world_size(cp_group[0]) == 1:
            cp_group, cp_comm_type = cp_group[1], "p2p"
        elif get_distributed_world_size(cp_group[1]) == 1:
            cp_group, cp_comm_type = cp_group[0], "a2a"
    else:
        assert isinstance(cp_group, dist_group_type), \
            f"cp_group must be {dist_group_type} type for {cp_comm_type=}!"
    sliding_window_attn = window_size is not None and tuple(window_size) not in ((-1, 0), (-1, -1))
    assert not sliding_window_attn or cp_comm_type in ["a2a", "all_gather"], \
        "Context parallelism does not support sliding window attention with {cp_comm_type=}!"
    assert k.shape[-1] == v.shape[-1] or cp_comm_type in ["p2p", "a2a+p2p"], \
        "Context parallelism does not support MLA with {cp_comm_type=}!"
    if cp_comm_type not in ("p2p", "all_gather", "a2a"):
        if cp_comm_type == "a2a+p2p":
            raise _not_reproduced("cp_comm_type='a2a+p2p' with both CP groups larger than one rank")
        raise ValueError(f"Unsupported communication type: {cp_comm_type}!")
    causal = "causal" in attn_mask_type
    seq_dim = qkv_format.index("s")
    if cp_comm_type == "p2p":
        assert q.shape[seq_dim] % 2 == 0 and k.shape[seq_dim] % 2 == 0, \
            "Sequence length per GPU needs to be divisible by 2!"  # 1432-1434
    else:  # 2800-2848 / 3314-3379
        if cp_comm_type == "all_gather":
            assert "padding" not in attn_mask_type, f"{attn_mask_type} mask type is not supported!"
        else:
            assert "padding" not in attn_mask_type, \
                f"{attn_mask_type} mask type is not supported for BSHD and SBHD!"
        assert attn_bias_type == "no_bias", f"{attn_bias_type} bias type is not supported!"
        assert q.shape[-1] % 8 == 0, "Hidden size per attention head should be multiple of 8!"
        if cp_comm_type == "a2a":
            cp = get_distributed_world_size(cp_group)
            assert q.shape[-2] % cp == 0 and k.shape[-2] % cp == 0, \
                "The number of attention heads needs to be divisible by CP size!"
        assert q.shape[seq_dim] % 2 == 0 and k.shape[seq_dim] % 2 == 0, \
            "Sequence length per GPU needs to be divisible by 2!"
    if attn_bias_type != "no_bias" or attn_bias is not None:
        raise _not_reproduced("attention bias under context parallelism")
    if sliding_window_attn:
        raise _not_reproduced("sliding-window attention")
    if dropout_p != 0.0:
        raise _not_reproduced("attention dropout under context parallelism")
    del cp_stream  # TE overlaps two steps on it; the values do not depend on it
    if qkv_format == "bshd":
        q, k, v = (x.transpose(0, 1) for x in (q, k, v))
    if cp_comm_type == "p2p":
        out = AttnFuncWithCPAndKVP2P.apply(q, k, v, causal, softmax_scale, cp_group, cp_global_ranks)
    elif cp_comm_type == "a2a":
        out = AttnFuncWithCPAndQKVOA2A.apply(q, k, v, causal, softmax_scale, cp_group)
    else:
        out = AttnFuncWithCPAndKVAllGather.apply(q, k, v, causal, softmax_scale, cp_group)
    return out.transpose(0, 1) if qkv_format == "bshd" else out
