"""Stand-in for TE v2.11 ``DotProductAttention`` (commit c188b533,
``pytorch/attention/dot_product_attention/dot_product_attention.py``: constructor lines 318-490
with TE's signature, forward 799-1600), computed as TE's unfused backend computes it
(``backends.py`` ``UnfusedDotProductAttention.forward``, lines 250-590: scores = alpha * Q K^T by
baddbmm (423), the full mask of ``dot_product_attention/utils.py`` ``get_full_mask`` (1223-1374), masked fill with -10000.0
(``pytorch/utils.py`` ``attention_mask_func`` 72-77), softmax in fp32 for 16-bit inputs
(``softmax.py`` ``forward_torch_softmax`` 248-278), dropout under the RNG tracker's fork, context
= P V, returned as [s, b, h*d] for ``sbhd``). On a GPU TE would pick its flash or cuDNN backend
(the same function up to rounding). Supported here: ``qkv_format`` sbhd/bshd, mask types
``no_mask``/``causal``/``padding``/``padding_causal`` (and ``arbitrary`` with a given mask), GQA,
``no_bias``/``post_scale_bias``; anything else (sliding windows, alibi, learnable softmax
offsets, FP8 attention (a recipe's ``fp8_dpa`` / ``fp8_mha``; under an FP8 autocast without them it
attends in the inputs' precision, as TE does), KV caching) raises NotImplementedError.

``qkv_format="thd"`` (packed sequences, megatron-core's ``PackedSeqParams``): first TE's checks
(lines 1106-1117, AssertionError with TE's messages: 3D inputs, a ``padding*`` mask type,
``cu_seqlens_q``/``cu_seqlens_kv`` given, of one shape, int32). Then sequence i, of
``cu_seqlens[i + 1] - cu_seqlens[i]`` tokens, attends only to itself (causal inside, top-left, for
``padding_causal``), computed as the sbhd path computes a batch of one. Where it sits and what the
rest of the output holds follows the backend TE picks for the dtype (``utils.py`` 436-465, 548):
fp16/bf16 run FusedAttention (cuDNN; FlashAttention where no padding lies between sequences):
sequence i starts at ``cu_seqlens_padded[i]`` (``cu_seqlens`` when not given), the output has all
t rows and is zeroed first (``csrc/extensions/attention.cpp`` 156-160), so a row outside every
sequence (padding between sequences, or after ``cu_seqlens_padded[-1]``) is 0 and passes no
gradient; ``attention_mask`` is not read. fp32 runs UnfusedDotProductAttention, which TE v2.11
has for thd (so fp32 is accepted, unlike under context parallelism): sequences at ``cu_seqlens``
(``ConvertTHDtoBSHD``, ``backends.py`` 306-324; ``cu_seqlens_*_padded`` are not read) and an
output of ``cu_seqlens_q[-1]`` rows (``ConvertBSHDtoTHD``, 555-566; ``utils.py`` 1776-1787): a
tail after the last sequence makes the output shorter than the input (so a caller must count the
padding of a pack as a sequence of its own). Not reproduced (NotImplementedError): padding between
sequences or an ``attention_mask`` in fp32 (TE's unfused backend would read the wrong tokens or
apply the mask in place of ``cu_seqlens``), attention bias, ``max_seqlen`` below a sequence's
length, ``cu_seqlens`` outside the tokens given, fp64, and thd under context parallelism.

Context parallelism (a ``cp_group`` of more than one rank, counted as TE counts it, lines
1208-1214) runs TE's FusedAttention path (``backends.py`` 1867-1912) through
``context_parallel.py`` beside this file, which reproduces ``attn_forward_func_with_cp``
(``dot_product_attention/context_parallel.py`` 3890-4110) for ``cp_comm_type`` ``p2p`` (the KV
ring of ``AttnFuncWithCPAndKVP2P`` 1232-2730, forward and backward, with the load-balanced causal
sections), ``a2a`` (``AttnFuncWithCPAndQKVOA2A`` 3268-3888) and ``all_gather``
(``AttnFuncWithCPAndKVAllGather`` 2759-3266), and ``a2a+p2p`` where one of its two groups has one
rank (TE then runs ``p2p`` or ``a2a``, 3996-4001); see that module. Before it, what TE refuses
under context parallelism is refused with TE's exception and message: ``get_attention_backend``
leaves no backend (ValueError, lines 1396-1401) for KV caching, ``*_bottom_right`` and
``arbitrary`` masks, causal cross-attention and bias types other than
``no_bias``/``post_scale_bias`` (``utils.py`` 555-559, 756-827, 848-853); padding masks fail
FusedAttention's assertion (``backends.py`` 1796-1799). Inputs other than fp16/bf16 (fp32, fp64)
get the same ValueError: TE has no context-parallel backend for them (``utils.py`` 436-443 disables
FlashAttention 2, and 444-465 FlashAttention 3 and FusedAttention, for a ``qkv_dtype`` outside
bf16/fp16 (fp8 e4m3 for the latter two); 756-760 disables the unfused backend under context
parallelism). Not
reproduced under context parallelism (NotImplementedError): ``a2a+p2p`` with both groups larger
than one rank, attention bias, dropout in training, sliding windows, FP8 (float8_e4m3fn inputs
included), checkpointed core attention, ``thd`` (after the checks above). ``cp_stream`` is accepted and unused (TE overlaps
two steps' attention on it; the values do not depend on it). The ring computes in fp32 and casts
its output to the input dtype (context_parallel.py); the fp32 exactness checks of
tests/te_cp_cases.py call it there, below the dtype refusal."""
from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Callable, List, Optional, Tuple, Union

import torch

from ..distributed import get_distributed_world_size, set_all_rng_states
from ..module.base import TransformerEngineBaseModule
from .context_parallel import attention_with_cp, cp_size_of

AttnMaskTypes = ("no_mask", "padding", "causal", "padding_causal", "causal_bottom_right",
                 "padding_causal_bottom_right", "arbitrary")  # TE constants.py
AttnTypes = ("self", "cross")


def _not_reproduced(what: str) -> NotImplementedError:
    return NotImplementedError(f"the TransformerEngine stand-in's DotProductAttention does not reproduce {what}")


class DotProductAttention(TransformerEngineBaseModule):
    def __init__(self, num_attention_heads: int, kv_channels: Union[int, Tuple[int, int]],
                 num_gqa_groups: Optional[int] = None, attention_dropout: float = 0.0, qkv_format: str = "sbhd",
                 attn_mask_type: str = "causal", window_size: Optional[Tuple[int, int]] = None,
                 sequence_parallel: bool = False, tp_size: int = 1, get_rng_state_tracker: Optional[Callable] = None,
                 tp_group=None, layer_number: Optional[int] = None, attention_type: str = "self",
                 cp_group=None, cp_global_ranks: List[int] = None, cp_stream=None, cp_comm_type: str = "p2p",
                 softmax_scale: Optional[float] = None, softmax_type: str = "vanilla",
                 return_max_logit: Optional[bool] = False) -> None:
        super().__init__()
        self.qkv_format = qkv_format
        attn_mask_type = attn_mask_type.replace(",", "_")
        if attn_mask_type == "causal_padding":
            attn_mask_type = "padding_causal"
        self.attn_mask_type = attn_mask_type
        if window_size is not None and tuple(window_size) not in ((-1, -1), (-1, 0)):
            raise _not_reproduced("sliding-window attention")
        if tp_group is None:
            self.tp_size = tp_size
            if tp_size == 1:
                self.set_tensor_parallel_group(tp_group)
        else:
            self.tp_size = get_distributed_world_size(tp_group)
            self.set_tensor_parallel_group(tp_group)
        self.get_rng_state_tracker = get_rng_state_tracker
        self.num_attention_heads = num_attention_heads
        self.layer_number = 1 if layer_number is None else layer_number
        self.cp_group, self.cp_global_ranks, self.cp_stream, self.cp_comm_type = (cp_group, cp_global_ranks,
                                                                                  cp_stream, cp_comm_type)
        self.hidden_size_per_attention_head_k = kv_channels if isinstance(kv_channels, int) else kv_channels[0]
        self.hidden_size_per_attention_head_v = kv_channels if isinstance(kv_channels, int) else kv_channels[1]
        self.num_gqa_groups = num_attention_heads if num_gqa_groups is None else num_gqa_groups
        self.num_gqa_groups_per_partition = int(self.num_gqa_groups // self.tp_size)
        assert num_attention_heads % self.num_gqa_groups == 0, \
            "The number of attention heads must be divisible by the number of GQA groups!"
        self.rng_states_tracker = None
        if sequence_parallel or get_rng_state_tracker is None:  # lines 383-388
            self.attention_dropout_ctx = nullcontext
        else:
            self.rng_states_tracker = get_rng_state_tracker()
            set_all_rng_states(self.rng_states_tracker.get_states())
            self.attention_dropout_ctx = self.rng_states_tracker.fork
        if softmax_scale is None:
            softmax_scale = 1.0 / math.sqrt(self.hidden_size_per_attention_head_k)
        self.softmax_scale = softmax_scale
        assert attention_type in AttnTypes, f"attention_type {attention_type} not supported"
        self.attention_type = attention_type
        self.attention_dropout = attention_dropout
        self.dropout = torch.nn.Dropout(attention_dropout)
        if softmax_type != "vanilla":
            raise _not_reproduced(f"softmax_type={softmax_type!r}")
        if return_max_logit:
            raise _not_reproduced("return_max_logit")
        self.softmax_type = softmax_type
        self.return_max_logit = return_max_logit

    def set_context_parallel_group(self, cp_group, cp_global_ranks, cp_stream, cp_comm_type="p2p") -> None:
        self.cp_group, self.cp_global_ranks, self.cp_stream, self.cp_comm_type = (cp_group, cp_global_ranks,
                                                                                  cp_stream, cp_comm_type)

    def forward(self, query_layer: torch.Tensor, key_layer: torch.Tensor, value_layer: torch.Tensor,
                attention_mask=None, qkv_format: str = None, cu_seqlens_q=None, cu_seqlens_kv=None,
                cu_seqlens_q_padded=None, cu_seqlens_kv_padded=None, max_seqlen_q: int = None,
                max_seqlen_kv: int = None, attn_mask_type: Optional[str] = None, window_size=None,
                checkpoint_core_attention: bool = False, core_attention_bias_type: str = "no_bias",
                core_attention_bias: Optional[torch.Tensor] = None, alibi_slopes=None, fast_zero_fill: bool = True,
                inference_params=None, pad_between_seqs: Optional[bool] = None, fp8_output: Optional[bool] = False,
                num_splits: Optional[int] = 1) -> torch.Tensor:
        # the checks of lines 1040-1079 (TE asserts CUDA tensors first, 1041-1043)
        assert query_layer.dtype == key_layer.dtype == value_layer.dtype, \
            "Queries, keys and values must have the same data type!"
        assert key_layer.shape[:-1] == value_layer.shape[:-1], \
            "Keys and values must have the same batch size, sequence length and number of heads!"
        assert query_layer.shape[-1] == key_layer.shape[-1], "Queries and keys must have the same head dimension!"
        assert query_layer.shape[-1] == self.hidden_size_per_attention_head_k, (
            f"Keys have head_dim = {query_layer.shape[-1]}, but expected head_dim ="
            f" {self.hidden_size_per_attention_head_k}!")
        assert value_layer.shape[-1] == self.hidden_size_per_attention_head_v, (
            f"Values have head_dim = {value_layer.shape[-1]}, but expected head_dim ="
            f" {self.hidden_size_per_attention_head_v}!")
        assert key_layer.shape[-2] == self.num_gqa_groups_per_partition, (
            f"Keys and values must have num_gqa_group = {self.num_gqa_groups_per_partition} heads! "
            f"Found {key_layer.shape[-2]}.")
        if attn_mask_type is None:
            attn_mask_type = self.attn_mask_type
        else:
            attn_mask_type = attn_mask_type.replace(",", "_")
            if attn_mask_type == "causal_padding":
                attn_mask_type = "padding_causal"
        assert attn_mask_type in AttnMaskTypes, f"Attention mask type {attn_mask_type} is not supported!"
        qkv_format = self.qkv_format if qkv_format is None else qkv_format
        assert qkv_format in ("sbhd", "bshd", "thd"), \
            "DotProductAttention only supports qkv_format = {'sbhd', 'bshd', 'thd'}!"
        if qkv_format == "thd":  # lines 1106-1117
            assert all(len(x.shape) == 3 for x in (query_layer, key_layer, value_layer)), \
                "Queries, keys and values must be 3D tensors when qkv_format = thd!"
            assert "padding" in attn_mask_type, \
                "Attention mask type must be padding or padding_causal for qkv_format=thd!"
            assert cu_seqlens_q is not None and cu_seqlens_kv is not None, \
                "cu_seqlens_q and cu_seqlens_kv can not be None when qkv_format = thd!"
            assert (cu_seqlens_q.shape == cu_seqlens_kv.shape and len(cu_seqlens_q.shape) == 1
                    and len(cu_seqlens_kv.shape) == 1), \
                "cu_seqlens_q and cu_seqlens_q must both have shape [batch_size + 1]!"
            assert cu_seqlens_q.dtype == torch.int32 and cu_seqlens_kv.dtype == torch.int32, \
                "cu_seqlens_q and cu_seqlens_q must both be in dtype torch.int32!"
        if cp_size_of(self.cp_group) > 1:
            return self._forward_cp(query_layer, key_layer, value_layer, qkv_format, attn_mask_type, window_size,
                                    checkpoint_core_attention, core_attention_bias_type, core_attention_bias,
                                    inference_params, fp8_output)
        if "bottom_right" in attn_mask_type or (window_size is not None and tuple(window_size) != (-1, -1)):
            raise _not_reproduced(f"attn_mask_type={attn_mask_type!r} / sliding windows")
        if core_attention_bias_type not in ("no_bias", "post_scale_bias"):
            raise _not_reproduced(f"core_attention_bias_type={core_attention_bias_type!r}")
        if inference_params is not None or checkpoint_core_attention or fp8_output:
            raise _not_reproduced("KV caching, checkpointed core attention or FP8 output")
        self._fp8_attention_check()
        if qkv_format == "thd":
            return self._forward_thd(query_layer, key_layer, value_layer, attention_mask, attn_mask_type,
                                     cu_seqlens_q, cu_seqlens_kv, cu_seqlens_q_padded, cu_seqlens_kv_padded,
                                     max_seqlen_q, max_seqlen_kv, core_attention_bias_type, pad_between_seqs)
        return self._attend(query_layer, key_layer, value_layer, qkv_format, attention_mask, attn_mask_type,
                            core_attention_bias_type, core_attention_bias)

    def _fp8_attention_check(self) -> None:
        """Under an FP8 autocast TE's DotProductAttention runs FP8 only where the recipe asks for it
        (TE v2.11 dot_product_attention.py: init_fp8_metadata 680-682 takes fp8 from the autocast,
        1019-1038 the FP8 checks, which only set fp8_output = False unless fp8_dpa; fp8_mha forces
        fp8_dpa, 1020-1026; every backend is handed fp8 = self.fp8 and recipe.fp8_dpa, 1436-1569):
        with fp8_dpa and fp8_mha off it attends in the inputs' precision, as here. FP8 attention itself
        (fp8_dpa / fp8_mha) is not reproduced. Not reproduced either, and without effect on any value:
        the attention's own delayed-scaling buffers TE registers (base.py 1058-1067), whose amaxes
        stay 0 when nothing is cast, so their reduction and update change nothing (the fused update
        keeps a quantizer that cast nothing)."""
        from ..quantization import FP8GlobalStateManager

        self.fp8 = FP8GlobalStateManager.is_fp8_enabled()
        self.fp8_calibration = FP8GlobalStateManager.is_fp8_calibration()
        if self.fp8_calibration:
            raise _not_reproduced("FP8 calibration")
        recipe = FP8GlobalStateManager.get_fp8_recipe() if self.fp8 else None
        if recipe is not None and (getattr(recipe, "fp8_dpa", False) or getattr(recipe, "fp8_mha", False)):
            raise _not_reproduced("FP8 attention (the recipe's fp8_dpa / fp8_mha)")

    def _attend(self, q, k, v, qkv_format, attention_mask, attn_mask_type, core_attention_bias_type,
                core_attention_bias) -> torch.Tensor:
        """UnfusedDotProductAttention.forward on sbhd/bshd inputs (backends.py 250-590)."""
        if qkv_format == "bshd":
            q, k, v = (x.transpose(0, 1) for x in (q, k, v))
        sq, b, np_, hn = q.shape
        sk = k.shape[0]
        if k.shape[2] != np_:  # GQA (backends.py 360-372)
            k = k.repeat_interleave(np_ // k.shape[2], dim=2)
            v = v.repeat_interleave(np_ // v.shape[2], dim=2)
        # scores [b, np, sq, sk] = scale * Q K^T (backends.py 374-430)
        scores = torch.baddbmm(torch.empty(b * np_, sq, sk, dtype=q.dtype, device=q.device),
                               q.reshape(sq, b * np_, -1).transpose(0, 1),
                               k.reshape(sk, b * np_, -1).transpose(0, 1).transpose(1, 2),
                               beta=0.0, alpha=self.softmax_scale).view(b, np_, sq, sk)
        if core_attention_bias_type == "post_scale_bias":
            assert core_attention_bias is not None, "core_attention_bias should not be None!"
            scores = (scores + core_attention_bias).to(dtype=q.dtype)
        mask = self._full_mask(attention_mask, attn_mask_type, sq, sk, q.device)
        x = scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores
        if mask is not None and attn_mask_type != "no_mask":
            x = x.masked_fill(mask, -10000.0)
        probs = torch.nn.functional.softmax(x, dim=-1).to(scores.dtype)
        if "padding" in attn_mask_type:
            probs = probs.masked_fill(mask, 0)
        with self.attention_dropout_ctx():
            probs = self.dropout(probs)
        context = torch.bmm(probs.view(b * np_, sq, sk), v.reshape(sk, b * np_, -1).transpose(0, 1))
        context = context.view(b, np_, sq, -1)
        if qkv_format == "sbhd":
            return context.permute(2, 0, 1, 3).contiguous().view(sq, b, -1)
        return context.permute(0, 2, 1, 3).contiguous().view(b, sq, -1)

    def _forward_thd(self, q, k, v, attention_mask, attn_mask_type, cu_seqlens_q, cu_seqlens_kv, cu_seqlens_q_padded,
                     cu_seqlens_kv_padded, max_seqlen_q, max_seqlen_kv, core_attention_bias_type,
                     pad_between_seqs) -> torch.Tensor:
        """qkv_format='thd' without context parallelism: [t, h, d] inputs holding sequences end to end,
        sequence i at [cu_seqlens[i], cu_seqlens[i + 1]) (at cu_seqlens_padded[i] when given), each
        attending only to itself (causal inside with padding_causal); returns [t, h * d_v] (module doc)."""
        if core_attention_bias_type != "no_bias":
            raise _not_reproduced("attention bias with qkv_format='thd'")
        if q.dtype == torch.float8_e4m3fn:
            raise _not_reproduced("FP8 attention")
        if q.dtype not in (torch.float16, torch.bfloat16, torch.float32):  # TE's thd<->bshd kernels: NVTE_ERROR
            raise _not_reproduced(f"qkv_format='thd' in {q.dtype}")
        half = q.dtype in (torch.float16, torch.bfloat16)
        lens_q = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).tolist()
        lens_kv = (cu_seqlens_kv[1:] - cu_seqlens_kv[:-1]).tolist()
        padded_q = cu_seqlens_q if cu_seqlens_q_padded is None else cu_seqlens_q_padded
        padded_kv = cu_seqlens_kv if cu_seqlens_kv_padded is None else cu_seqlens_kv_padded
        for given, padded, lens in ((max_seqlen_q, padded_q, lens_q), (max_seqlen_kv, padded_kv, lens_kv)):
            if given is not None and lens and int(given) < max(lens):  # TE: a kernel reading past max_seqlen
                raise _not_reproduced(f"max_seqlen {given} below a sequence's length {max(lens)}")
        if pad_between_seqs is None:  # dot_product_attention.py 1298-1307
            pad_between_seqs = bool(
                (cu_seqlens_q_padded is not None and not torch.equal(cu_seqlens_q_padded[:-1], cu_seqlens_q[:-1]))
                or (cu_seqlens_kv_padded is not None
                    and not torch.equal(cu_seqlens_kv_padded[:-1], cu_seqlens_kv[:-1])))
        if half:
            # FusedAttention (cuDNN; FlashAttention where there is no padding between sequences): sequence i
            # starts at cu_seqlens_padded[i]; the output is zeroed first (csrc/extensions/attention.cpp 156-160),
            # so rows outside every sequence stay 0, the attention_mask is not read
            starts_q, starts_kv = padded_q[:-1].tolist(), padded_kv[:-1].tolist()
            rows = q.shape[0]
        else:
            # fp32/fp64: only UnfusedDotProductAttention (utils.py 436-465, 548), which reads sequence i at
            # cu_seqlens[i] (ConvertTHDtoBSHD, backends.py 306-324: cu_seqlens_*_padded are not read) and
            # returns cu_seqlens_q[-1] rows (ConvertBSHDtoTHD, backends.py 555-566, utils.py 1776-1787)
            if pad_between_seqs:
                raise _not_reproduced("padding between sequences (cu_seqlens_*_padded) in fp32: TE's unfused "
                                      "backend reads the sequences at cu_seqlens")
            if attention_mask is not None:
                raise _not_reproduced("an attention_mask with qkv_format='thd' in fp32: TE's unfused backend "
                                      "applies it in place of the one built from cu_seqlens")
            starts_q, starts_kv = cu_seqlens_q[:-1].tolist(), cu_seqlens_kv[:-1].tolist()
            rows = int(cu_seqlens_q[-1])
        for starts, lens, x in ((starts_q, lens_q, q), (starts_kv, lens_kv, k)):
            ends = [s + n for s, n in zip(starts, lens)]
            if any(n < 0 for n in lens) or any(s < e for s, e in zip(starts[1:], ends)) \
                    or (starts and (starts[0] < 0 or ends[-1] > x.shape[0])):
                raise _not_reproduced(f"cu_seqlens {starts + ends[-1:]} (lengths {lens}) outside the "
                                      f"{x.shape[0]} tokens given or overlapping")
        width = q.shape[1] * v.shape[-1]
        mask_type = "causal" if "causal" in attn_mask_type else "no_mask"
        pieces, at = [], 0
        for sq, lq, sk, lk in zip(starts_q, lens_q, starts_kv, lens_kv):
            if lq == 0:
                continue
            if lk == 0:
                raise _not_reproduced("a sequence with queries and no keys")
            if sq > at:
                pieces.append(q.new_zeros(sq - at, width))
            piece = self._attend(*(x[s:s + n].unsqueeze(1) for x, s, n in ((q, sq, lq), (k, sk, lk), (v, sk, lk))),
                                 "sbhd", None, mask_type, "no_bias", None)
            pieces.append(piece.squeeze(1))
            at = sq + lq
        if rows > at:
            pieces.append(q.new_zeros(rows - at, width))
        return torch.cat(pieces) if pieces else q.new_zeros(0, width)

    def _forward_cp(self, q, k, v, qkv_format, attn_mask_type, window_size, checkpoint_core_attention,
                    core_attention_bias_type, core_attention_bias, inference_params, fp8_output) -> torch.Tensor:
        """Context parallelism: what get_attention_backend (utils.py 436-465, 555-559, 756-827) and
        FusedAttention.forward (backends.py 1796-1799, 1867-1874) refuse, then context_parallel.py."""
        seq_dim = 0 if qkv_format == "thd" else qkv_format.index("s")
        if q.dtype == torch.float8_e4m3fn:  # FusedAttention takes it (utils.py 444); FP8 is not reproduced
            raise _not_reproduced("FP8 attention")
        # fp32/fp64: the dtype filter (utils.py 436-465) leaves only the unfused backend, which has no
        # context parallelism (756-760); a stand-in must not accept what TE refuses
        if (q.dtype not in (torch.float16, torch.bfloat16)
                or inference_params is not None or "bottom_right" in attn_mask_type or attn_mask_type == "arbitrary"
                or ("causal" in attn_mask_type and q.shape[seq_dim] != k.shape[seq_dim])
                or core_attention_bias_type not in ("no_bias", "post_scale_bias")):
            raise ValueError(  # dot_product_attention.py 1396-1401: CP leaves no backend for these
                "No dot product attention backend is available for the provided inputs. Please"
                " run with NVTE_DEBUG=1 NVTE_DEBUG_LEVEL=2 to find out the reasons for"
                " disabling all backends.")
        if qkv_format == "thd":  # TE runs it (FusedAttention / FlashAttention through the ring); not reproduced
            raise _not_reproduced("qkv_format='thd' under context parallelism")
        if "padding" in attn_mask_type:
            raise AssertionError("Padding mask not supported with context parallelism!")
        self._fp8_attention_check()
        if checkpoint_core_attention or fp8_output:
            raise _not_reproduced("checkpointed core attention or FP8 output")
        out = attention_with_cp(
            q, k, v, qkv_format=qkv_format, attn_mask_type=attn_mask_type, attn_bias_type=core_attention_bias_type,
            attn_bias=core_attention_bias, window_size=window_size, cp_group=self.cp_group,
            cp_global_ranks=self.cp_global_ranks, cp_stream=self.cp_stream, cp_comm_type=self.cp_comm_type,
            softmax_scale=self.softmax_scale, dropout_p=self.attention_dropout if self.training else 0.0)
        return out.reshape(*out.shape[:-2], -1)  # backends.py 1955

    def _full_mask(self, attention_mask, attn_mask_type: str, sq: int, sk: int, device) -> Optional[torch.Tensor]:
        """utils.get_full_mask for the supported types: padding OR'ed with the causal mask (j > i)."""
        if "padding" in attn_mask_type:
            if attention_mask is None:
                raise _not_reproduced("padding masks built from cu_seqlens")
            if self.attention_type == "self":
                attention_mask = torch.logical_or(attention_mask.squeeze(1).unsqueeze(3), attention_mask)
            else:
                attention_mask = torch.logical_or(attention_mask[0].squeeze(1).unsqueeze(3), attention_mask[1])
        if "causal" in attn_mask_type:
            causal = torch.triu(torch.ones(sq, sk, dtype=torch.bool, device=device), diagonal=1)
            attention_mask = causal if attention_mask is None else torch.logical_or(attention_mask, causal)
        return attention_mask
