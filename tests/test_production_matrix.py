"""Configuration matrix (issue #12, deliverable 1): every schedule equals
megatron-core's own 1F1B and a non-pipelined reference on the settings
Megatron-LM users train with.

For each configuration below, our schedules and megatron-core's own 1F1B run
on the same model (tiny GPTModel: hidden 32, 4 heads, vocab 128, seq 16, 4
layers, micro batch 2, 4 microbatches per data-parallel rank, different data
per dp rank and per iteration), the same initial weights (drawn from each
parameter's global name, whatever the placement) and Megatron-LM's wiring
(training.py at core_v0.16.1): megatron's DistributedDataParallel per chunk
(`disable_bucketing=(i > 0)`), `get_megatron_optimizer` (Adam),
`no_sync_func` / `grad_sync_func` (overlap_grad_reduce, align_grad_reduce),
`param_sync_func` (overlap_param_gather with a virtual pipeline),
`finalize_model_grads`, `grad_scale_func = optimizer.scale_loss`, and every
iteration `zero_grad_buffer()` + `optimizer.zero_grad()`.

Over every iteration, after finalize_model_grads:
* every parameter's gradient (DDP main_grad, fp32; the owned reduce-scattered
  shard under the distributed optimizer) and every loss equal (a) the
  non-pipelined single-process reference (full model, plain autograd over the
  global batch = mean over data-parallel ranks) and (b) megatron's 1F1B;
* after every optimizer step, its outcome (successful, grad norm) and the
  optimizer's main parameters equal the reference's and megatron 1F1B's; at
  the end, the model's own parameters too. Under post-validation a step's
  outcome is known one step later (validated inside the next forward-backward
  call, or by `finish()` after the last): that is when it is recorded.
* Selective recompute: every core attention runs twice per microbatch (its
  recomputation in the backward), once without recompute (the bf16 fusion
  configuration is the control).
Both oracles run megatron-core's own linear layers, not our hook
(`megatron_reference.megatron_own_linear`), with the reference's own
parameter naming.

Tolerances (why: every run does the same arithmetic per microbatch and layer;
what differs is the order of fp32 sums: microbatches accumulated into
main_grad, the data-parallel mean of 2 partial sums against the reference's
sum over 8 microbatches, tied-embedding sums, tensor-parallel partial GEMMs):
* against megatron's 1F1B: bitwise (losses, gradients, parameters after every
  step and at the end; bf16 in every iteration too), except the tied embedding
  under V, whose two copies' gradients are summed in another order: 1e-6 of the
  tensor's largest value (measured <= 8e-7), parameters as below. Grad norms:
  1e-6 relative (the sum of squares runs over a rank's parameters in chunk
  order, which differs under several chunks per rank; measured <= 9e-8).
* against the reference, losses and gradients: max |a - e| / max |e| per tensor
  <= 1e-5 (fp32; bf16 in the first iteration). Measured today: <= 2e-6. A
  missing or doubled microbatch (25 % of a gradient), a weight-gradient product
  rounded to bf16 before its fp32 accumulation (~2^-9) or a misplaced layer is
  far above it.
* against the reference, bf16 from the second iteration on: 1e-2. After a step,
  a fp32 main parameter that differs by an ulp (the reference sums its
  microbatches in another order) may round to the neighbouring bf16 weight
  (2^-8 relative), which moves later gradients and losses by up to about that much.
* against the reference (and megatron's 1F1B with tied embeddings under V),
  main parameters after every Adam step, and the model's parameters at the end:
  |a - e| <= 1e-2 lr per element (+ one bf16 rounding step, 2^-8 |e|, for a bf16
  model's own parameters). Adam moves every element by about lr whatever its
  gradient's size, so a wrong or skipped update is ~100x above this; measured
  <= 4e-7. Adam's eps is 1e-6 rather than 1e-8: elements whose gradient is
  within rounding noise of zero otherwise get updates that differ by a visible
  fraction of lr between runs whose gradients agree to 1e-7 (1e-3 lr measured).
* the context-parallel rows (k-cp2-*) run bf16: TE v2.11 has no context-parallel
  attention for fp32 (dot_product_attention/utils.py 436-465, 756-760), nor has
  the stand-in. Against megatron's 1F1B nothing changes (bitwise as above;
  measured so). Against the whole-sequence reference they differ from the first
  iteration on, not from rounded weights but from the arithmetic itself: the
  reference's attention is TE's unfused backend in bf16 (Q K^T and P V as bf16
  GEMMs, P rounded to bf16) where CP runs TE's ring (fp32 inside, its output
  rounded once), and CP sums each weight gradient over its tokens in two parts
  (one per rank). In bf16 any such difference becomes a rounding step (2^-9) at
  the next rounding and travels through the backward: a few % of a tensor's
  largest value where the terms cancel (norm weights' gradients). In fp32, before
  TE's dtype rule was kept, the same rows agreed to 1e-5; with the reference's
  attention computed in fp32 (an experiment) iteration 0's losses agreed exactly
  and its gradients still differed by up to 2.6e-2. Hence: gradients 6e-2 per
  tensor (measured <= 4.4e-2; a missing microbatch is 25 %), losses 1e-3
  (measured <= 1.6e-4), grad norms 1e-2 (<= 2.5e-3). Parameters: Adam moves an
  element by about lr whatever its gradient's size, so an element whose
  gradient is within that noise of zero may move the other way (2 lr apart after
  one step): every element within 2 lr per step (+ 1e-2 lr, + one bf16 step for
  the model's own parameters) and at most 10 % of each piece's elements more
  than lr / 2 apart (measured: 1 of 32, 0.4 % overall; a skipped update moves
  nearly all by lr).
* the balanced-data rows with TE layers (l-balance-*-te: packs in megatron-core's thd format) take
  the rules above, fp32 as the local rows (TE v2.11 runs fp32 thd on its unfused backend,
  dot_product_attention/utils.py 548) and the bf16 twin the bf16 rule, not the CP rows': the
  reference runs the same packs through the same thd attention, so the arithmetic per microbatch
  is the same (measured against the reference: fp32 gradients <= 5.5e-7, bf16 <= 1.2e-8 in both
  iterations). With per-token loss the reference backpropagates each pack's masked loss sum and
  finalize_model_grads divides by the global token count, as megatron's schedules do (dividing
  first rounds a bf16 backward otherwise: 1e-2 in iteration 0). LB-Mini against the plain split
  (other packs): 1e-5 (measured 2.3e-7); with cu_seqlens ignored they differ by 67%.
test_the_checks_catch_small_errors shows that results which pass fail after a
3e-5 change of one gradient element, 1e-4 of one loss, 2e-5 of one parameter,
or without one parameter's gradient on one rank.

Worlds: 4 gloo ranks as DP=2 x PP=2 (expert parallel 2, for MoE); the same again in
fresh processes with TransformerEngine's stand-in first on the import path (tests/te_standin:
megatron-core decides at import whether TE is there) for the MoE recipe with grouped experts
(TEGroupedMLP over TE's GroupedLinear, whose weight gradients our W runs); 8 as TP=2 x
DP=2 x PP=2 (TP + sequence parallel with an overlapped data-parallel reduce that
has a group to reduce over); and context parallelism with TE's attention (the stand-in's p2p ring
over TE v2.11's load-balanced causal chunks, keys and values exchanged inside every F and B):
CP=2 x PP=2 (4 ranks) and CP=2 x DP=2 x PP=2 (8), each rank's microbatches sliced by megatron's
own get_batch_on_this_cp_rank, the reference's loss the mean over CP ranks of each one's own masked
mean (what megatron's forward_step and DDP's data x context parallel average train); the
reference in a world of one (one more for the TE spec). One launch per world runs every case; a case
that raises costs only itself (matrix_harness). `-k` selects which
configurations run, not only which are checked, and PRIMUS_TEST_MATRIX_ROWS which rows
exist (the second CI leg's PY312_MATRIX_ROWS: one row per megatron-core feature the runtime touches; a
row whose feature another row of that leg also runs is left to the first leg, the Makefile says which). Run time: about 3 minutes when every case passes
(7 launches: the references in two, five worlds; 181 s measured 2026-11-28 with every row, before
the 8-rank CP x DP row ran one schedule of each kind); a case that deadlocks adds the 60 s p2p / gloo
timeout.
"""
from __future__ import annotations

import math
import os

import pytest
import torch

import matrix_harness as H
import megatron_reference as ref
from primus_megatron import schedules as S

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")

OURS = ["1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-auto", "interleaved-zb", "zbv", "v-half", "v-min"]
V_SCHEDULES = ["zbv", "v-half", "v-min"]
# every registered schedule with W ops, the FP8 rows' (issue 54: FP8 under every W schedule), but zb-optimal:
# at the matrix's size (pp 2, 4 microbatches, equal costs) its integer program plans zb-auto's ops, op for op
# on every rank (test_zb_optimal_plans_zb_auto_s_ops_here), so its case would run zb-auto's again
W_SCHEDULES = [n for n in S.names() if S.info(n).splits_backward and n != "zb-optimal"]
# the MoE and Llama FP8 rows: loop placement, V, V with overlapped F&B pairs. What differs between W schedules
# (how many microbatches' quantized tensors wait for W and how long, chunks per rank) the n-fp8 rows show under
# every one; these rows add the grouped experts and post-validation's redone forwards. Every W schedule there
# cost 63 s more CPU (56 s -> 119 s for the two rows; all passed; scripts/cpu_time.py, 2026-11-29)
FP8_SMALL_SET = ["zb-h1", "zbv", "dualpipev"]

BASE = {"num_layers": 4, "microbatches": 4, "iterations": 2}
OVERLAP = {"overlap_grad_reduce": True, "bucket_size": 3000}  # several buckets per chunk

# name -> (world, spec). spec: ddp (DistributedDataParallelConfig fields), align_grad_reduce,
# optimizer, model (TransformerConfig fields), bf16, tied, moe, post_validation, schedules.
# Which schedules a row runs (megatron's 1F1B always): every one on the rows that combine what Megatron-LM
# users train with (overlapped reduce; tied embeddings under V; MoE with grouped TE experts; FP8 with bf16,
# fusion, overlap and the distributed optimizer with overlapped gathers, every W schedule, which is also the
# bf16 fusion configuration); a row that changes one thing the runtime sees the same way
# in every schedule (no overlap, no aligned reduce, the plain distributed optimizer, fp32 or bf16 fusion,
# selective recompute, the Llama block, local MoE experts, MLA, CP, TP + SP, the fp32 distributed optimizer
# with overlapped gathers) runs one schedule of each kind the runtime executes differently (one chunk,
# interleaved chunks, V), chosen so that every schedule meets several of them, and the rows of the second CI leg keep its one-of-each-kind subset (1f1b, zb-h1, zbv:
# tests/schedule_subset.py) where they ran it before. Within a kind the schedules differ only in op order,
# which the full rows, the parity tests and the planner's proofs cover. Every schedule on every such row
# cost a fifth of the matrix (40 of 215 cases, about 100 s of the suite; 2026-11-29); bf16 fusion, the
# Llama block and local MoE experts, 19 cases more, moved to one of each kind the same day, then TP + SP (8
# ranks) and the fp32 distributed optimizer with overlapped gathers, 12 more.
CONFIGS = {
    "a-overlap-grad-sync": ("dp2pp2", {"ddp": OVERLAP}),
    "a-overlap-no-grad-sync": ("dp2pp2", {"ddp": OVERLAP, "align_grad_reduce": False,
                                          "schedules": ["zb-h2", "interleaved-zb", "v-half"]}),
    "a-no-overlap": ("dp2pp2", {"schedules": ["zb-auto", "interleaved-1f1b", "zbv"]}),
    # megatron's schedules without W ops (one chunk, interleaved) and a W schedule with one chunk and with V
    # placement (2026-11-29): the FP8 rows
    # (n-fp8-*) run every W schedule with these DDP and optimizer settings (overlapped reduce, the distributed
    # optimizer, overlapped parameter gathers), whose gathers wait on each chunk's first forward in any of them
    "b-distopt-overlap-param-gather": ("dp2pp2", {"ddp": {**OVERLAP, "use_distributed_optimizer": True,
                                                          "overlap_param_gather": True},
                                                  "schedules": ["1f1b", "interleaved-1f1b", "zb-h2", "v-min"]}),
    "b-distopt": ("dp2pp2", {"ddp": {"use_distributed_optimizer": True},
                             "schedules": ["1f1b", "interleaved-zb", "v-min"]}),
    # A constant loss scale gives megatron's optimizer its non-finite check; the NaN injected
    # into stage 0's gradient at iteration 1 makes the synchronous step skip it and the
    # post-validation step roll back.
    "b-distopt-post-validation": ("dp2pp2", {"ddp": {"use_distributed_optimizer": True}, "post_validation": True,
                                             "optimizer": {"loss_scale": 1.0}, "inject_nonfinite_at": 1,
                                             "iterations": 3, "schedules": ["zb-h2", "zbv"]}),
    # the same with overlapped reduce and parameter gathers: the rollback must wait for gathers of the
    # optimistic parameters, and the mid-step zeroing of DDP's buffers must not restart its reduces
    "b-distopt-overlap-post-validation": ("dp2pp2", {"ddp": {**OVERLAP, "use_distributed_optimizer": True,
                                                             "overlap_param_gather": True},
                                                     "post_validation": True, "optimizer": {"loss_scale": 1.0},
                                                     "inject_nonfinite_at": 1, "iterations": 3,
                                                     "schedules": ["zb-h2", "zbv"]}),
    "c-fusion-fp32": ("dp2pp2", {"model": {"gradient_accumulation_fusion": True},
                                 "schedules": ["zb-h1", "interleaved-1f1b", "v-half"]}),
    # bf16 with fused accumulation: the n-fp8 rows (bf16, fusion, overlapped reduce, the distributed optimizer)
    # run it under every W schedule; here one of each kind, and the selective-recompute control
    "c-fusion-bf16": ("dp2pp2", {"model": {"gradient_accumulation_fusion": True}, "bf16": True,
                                 "schedules": ["interleaved-1f1b", "zb-auto", "v-min"]}),
    "d-tied-fusion-overlap": ("dp2pp2", {"tied": True, "model": {"gradient_accumulation_fusion": True},
                                         "ddp": OVERLAP, "schedules": V_SCHEDULES}),
    "d-tied-fusion": ("dp2pp2", {"tied": True, "model": {"gradient_accumulation_fusion": True},
                                 "schedules": V_SCHEDULES}),
    # 8 ranks: at DP=2 the overlapped reduce has a data-parallel group to reduce over. One schedule of each
    # kind (2026-11-29): tensor and sequence parallelism live inside the layers' F and B (all-gathers and
    # reduce-scatters) and in the input a column-parallel W closure keeps, which every W schedule defers the
    # same way; 8 ranks on 2 cores made this row a sixth of the matrix's CPU with every schedule
    "e-tp2-sp": ("tp2dp2pp2", {"model": {"sequence_parallel": True}, "ddp": OVERLAP,
                               "schedules": ["1f1b", "zb-h1", "interleaved-zb", "zbv"]}),
    # no linear biases, as Megatron-LM's MoE recipes (--disable-bias-linear); megatron-core 0.16.1's
    # expert MLP adds its bias in place into a view and fails with expert tensor parallel 1
    "f-moe-ep2": ("dp2pp2", {"moe": {"experts": 4, "topk": 2, "aux_loss_coeff": 1e-2, "ep": 2},
                             # h-moe-grouped-te runs MoE under every schedule (grouped TE experts); here the
                             # local sequential experts under one of each kind and DualPipeV's pairs
                             "model": {"add_bias_linear": False}, "schedules": ["1f1b", "zb-h1", "zbv", "dualpipev"]}),
    # megatron-core's combined 1F1B (--overlap-moe-expert-parallel-comm: each steady-state F and B through
    # combined_forward_backward_step over the model's schedule plan; on CPU compat.cpu_combined runs its two
    # streams in program order) against megatron's plain 1F1B, bitwise. bf16: megatron refuses the flag in
    # fp32 (transformer_config.py:1882-1884 at core_v0.16.1)
    "f-moe-ep2-bf16-a2a-overlap": ("dp2pp2", {"moe": {"experts": 4, "topk": 2, "aux_loss_coeff": 1e-2, "ep": 2},
                                              "model": {"add_bias_linear": False}, "bf16": True, "a2a_overlap": True,
                                              "schedules": [H.MEGATRON_COMBINED, "dualpipev"]}),
    "g-bf16-selective-recompute": ("dp2pp2", {"bf16": True, "model": {"recompute_granularity": "selective"},
                                              "schedules": ["zb-h1", "interleaved-zb", "zbv"]}),
    # Megatron-LM's MoE recipe: TransformerEngine layers (the stand-in) with grouped experts
    # (TEGroupedMLP over TE's GroupedLinear, --moe-grouped-gemm), a shared expert, the aux loss,
    # overlapped reduce, the distributed optimizer and fused weight-gradient accumulation
    # (and DeepSeek's DualPipeV, whose steady state is overlapped F&B pairs, run as F then B on CPU)
    "h-moe-grouped-te": ("dp2pp2-te", {"te": True,
                                       "moe": {"experts": 4, "topk": 2, "aux_loss_coeff": 1e-2, "ep": 2,
                                               "grouped": True, "shared": 48},
                                       "model": {"add_bias_linear": False, "gradient_accumulation_fusion": True},
                                       "ddp": {**OVERLAP, "use_distributed_optimizer": True},
                                       "schedules": OURS + ["dualpipev"]}),
    # the architectures teams train (matrix_harness.ARCHS), untied embeddings, RoPE per chunk (under V
    # rank 0 holds the embedding and the output layer, each chunk its own rotary table)
    # the Llama block under one of each kind (the block changes what a layer computes, not what the runtime
    # does; o-fp8-llama-post-validation-te and the l-balance-*-te rows run it too)
    "i-llama-distopt-overlap-fusion": ("dp2pp2", {"arch": "llama", "model": {"gradient_accumulation_fusion": True},
                                                  "ddp": {**OVERLAP, "use_distributed_optimizer": True},
                                                  "schedules": ["1f1b", "zb-h1", "interleaved-zb", "zbv"]}),
    "j-deepseek-mla-moe-te": ("dp2pp2-te", {"te": True, "arch": "deepseek",
                                            "moe": {"experts": 4, "topk": 2, "aux_loss_coeff": 1e-2, "ep": 2,
                                                    "grouped": True, "shared": 48},
                                            "model": {"gradient_accumulation_fusion": True},
                                            "ddp": {**OVERLAP, "use_distributed_optimizer": True},
                                            "schedules": ["zb-h1", "interleaved-1f1b", "zbv"]}),
    # context parallelism (long sequences): TE's attention (the stand-in's p2p ring, TE v2.11's load-balanced
    # causal chunks) exchanges keys and values inside every F and B; the loss is each CP rank's own mean
    # and gradients reduce over data x context parallel ranks (matrix_harness._reference_loss)
    "k-cp2-te": ("cp2pp2-te", {"te": True, "bf16": True, "ddp": {**OVERLAP, "use_distributed_optimizer": True},
                               "schedules": ["1f1b", "zb-h1", "interleaved-zb", "zbv", "v-half"]}),
    # 8 ranks on the machine's cores: one schedule of each kind (the CP rows together run six of nine)
    "k-cp2-dp2-te-fusion": ("cp2dp2pp2-te", {"te": True, "bf16": True,
                                             "model": {"gradient_accumulation_fusion": True},
                                             "ddp": {**OVERLAP, "use_distributed_optimizer": True},
                                             "schedules": ["1f1b", "zb-h1", "zbv"]}),
    # TE's other exchanges (megatron's --cp-comm-type): all-to-all between sequence and head sharding, and
    # keys/values all-gathered (its backward reduce-scatters them)
    **{f"k-cp2-{kind.replace('_', '-')}-te": ("cp2pp2-te", {"te": True, "bf16": True, "model": {"cp_comm_type": kind},
                                                           "ddp": {**OVERLAP, "use_distributed_optimizer": True},
                                                           "schedules": ["zb-h1", "zbv"]})
       for kind in ("a2a", "all_gather")},
    # a Llama-style model (RoPE, whose tables each CP rank slices for its chunks, GQA, SwiGLU, RMSNorm)
    "k-cp2-llama-te": ("cp2pp2-te", {"te": True, "bf16": True, "arch": "llama",
                                     "ddp": {**OVERLAP, "use_distributed_optimizer": True},
                                     "schedules": ["zb-h1", "zbv"]}),
    # post-training data (issue 40): long-tail sample lengths packed into fixed-length microbatches, each
    # replica with its own microbatch count, the loss normalised by the global token count; ODC's LB-Mini
    # split and megatron's plain one train the same samples (`data_seed`) to the same gradients
    **{f"l-balance-{mode}-distopt-overlap": ("dp2pp2", {
        "balance": {"mode": mode, "global_batch": 24, "data_seed": 45}, "model": {"calculate_per_token_loss": True},
        "ddp": {**OVERLAP, "use_distributed_optimizer": True}, "schedules": schedules})
       for mode, schedules in (("lb-mini", ["1f1b", "zb-h1", "zbv"]), ("off", ["zb-h1"]))},
    # the same with TransformerEngine layers (the stand-in) and a Llama-style model: each pack in megatron-core's
    # thd format (PackedSeqParams over the samples' cu_seqlens, the padding a sequence of its own; no mask), which
    # keeps TE's attention and megatron's RoPE inside each sample. fp32, as the local rows: TE v2.11 runs fp32 thd
    # on its unfused backend (utils.py 548); the bf16 twin is what a GPU runs (cuDNN's fused attention)
    **{f"l-balance-{mode}-te": ("dp2pp2-te", {
        "te": True, "arch": "llama", "balance": {"mode": mode, "global_batch": 24, "data_seed": 45},
        "model": {"calculate_per_token_loss": True}, "ddp": {**OVERLAP, "use_distributed_optimizer": True},
        "schedules": schedules})
       for mode, schedules in (("lb-mini", ["zb-h1", "zbv"]), ("off", ["zb-h1"]))},
    "l-balance-lb-mini-te-bf16": ("dp2pp2-te", {
        "te": True, "bf16": True, "arch": "llama", "balance": {"mode": "lb-mini", "global_batch": 24, "data_seed": 45},
        "model": {"calculate_per_token_loss": True}, "ddp": {**OVERLAP, "use_distributed_optimizer": True},
        "schedules": ["zb-h1"]}),
    # multi-token prediction (DeepSeek-V3's MTP, megatron's --mtp-num-layers 1) on an MoE model: the MTP block (a
    # MoE layer of its own) and its loss on the loss stage, which under V is rank 0's chunk 1, next to the
    # embedding it reads (one Parameter, one gradient, no embedding-group all-reduce); RoPE (the Llama block):
    # megatron's MTP stage copies the word embedding and keeps it in step with the first stage's, but also builds
    # a learned position table of its own that nothing synchronises, which a pp=1 reference does not have
    "m-mtp-moe-ep2-llama": ("dp2pp2", {"arch": "llama", "moe": {"experts": 4, "topk": 2, "aux_loss_coeff": 1e-2, "ep": 2},
                                       "model": {"mtp_num_layers": 1, "gradient_accumulation_fusion": True},
                                       "ddp": {**OVERLAP, "use_distributed_optimizer": True},
                                       "schedules": ["zb-h1", "zbv", "dualpipev"]}),
    # FP8 (issue 54): TE layers in bf16 under megatron's --fp8-format hybrid with the per-tensor recipes the TE
    # stand-in reproduces (delayed: amax histories reduced over the data-parallel amax group; tensorwise:
    # current scaling), on an emulated Hopper; DP2 x PP2 with overlapped reduce, the distributed optimizer with
    # overlapped parameter gathers and fused weight-gradient accumulation. Bitwise megatron's 1F1B (losses,
    # gradients, parameters, amax histories and scales), under every schedule with W ops.
    # Not against the fp32 reference: FP8's rounding is the point (test_fp8_rows_train_in_fp8).
    **{f"n-fp8-{recipe}-te": ("dp2pp2-te", {
        "te": True, "bf16": True, "fp8": {"format": "hybrid", "recipe": recipe},
        "model": {"gradient_accumulation_fusion": True},
        "ddp": {**OVERLAP, "use_distributed_optimizer": True, "overlap_param_gather": True},
        "schedules": W_SCHEDULES}) for recipe in ("delayed", "tensorwise")},
    # FP8 in the MoE recipe: TE's grouped experts (TEGroupedMLP over GroupedLinear, each expert's rows cast by
    # its own quantizer, their amaxes MAX-reduced over the data-parallel amax group) with megatron's
    # --moe-router-padding-for-fp8 (the router pads each expert's tokens to 16 rows, TE's alignment for FP8
    # grouped GEMMs, so TE's Fp8Padding copies nothing), a shared expert, the aux loss; as n-fp8-*
    "o-fp8-moe-grouped-te": ("dp2pp2-te", {
        "te": True, "bf16": True, "fp8": {"format": "hybrid", "recipe": "delayed"},
        "moe": {"experts": 4, "topk": 2, "aux_loss_coeff": 1e-2, "ep": 2, "grouped": True, "shared": 48},
        "model": {"add_bias_linear": False, "gradient_accumulation_fusion": True, "moe_router_padding_for_fp8": True},
        "ddp": {**OVERLAP, "use_distributed_optimizer": True}, "schedules": FP8_SMALL_SET}),
    # FP8 in a Llama-style model (--fp8-format e4m3) with post-validation: the NaN injected at iteration 1 makes
    # the synchronous step skip and ours roll back, and every rollback or clipped re-step redoes the next
    # iteration's first forwards, whose casts must leave delayed scaling's amax histories and scales as
    # megatron's 1F1B has them (one forward each, not two)
    "o-fp8-llama-post-validation-te": ("dp2pp2-te", {
        "te": True, "bf16": True, "arch": "llama", "fp8": {"format": "e4m3", "recipe": "delayed"},
        "model": {"gradient_accumulation_fusion": True},
        "ddp": {**OVERLAP, "use_distributed_optimizer": True, "overlap_param_gather": True},
        "post_validation": True, "optimizer": {"loss_scale": 1.0}, "inject_nonfinite_at": 1, "iterations": 3,
        "schedules": FP8_SMALL_SET}),
}
WORLDS = {"dp2pp2": {"world": 4, "tp": 1, "pp": 2, "ep": 2, "dp": 2},
          "dp2pp2-te": {"world": 4, "tp": 1, "pp": 2, "ep": 2, "dp": 2, "te": True},
          "tp2dp2pp2": {"world": 8, "tp": 2, "pp": 2, "ep": 1, "dp": 2},
          "cp2pp2-te": {"world": 4, "tp": 1, "pp": 2, "ep": 1, "dp": 1, "cp": 2, "te": True},
          "cp2dp2pp2-te": {"world": 8, "tp": 1, "pp": 2, "ep": 1, "dp": 2, "cp": 2, "te": True}}


# PRIMUS_TEST_MATRIX_ROWS (comma-separated configuration names) limits the rows: the second CI leg
# (Makefile's PY312_MATRIX_ROWS) keeps one row per megatron-core feature the runtime touches, as
# PRIMUS_TEST_SCHEDULES keeps one schedule of each kind (tests/schedule_subset.py)
ROWS_ENV = "PRIMUS_TEST_MATRIX_ROWS"


def _limit_rows(configs: dict) -> dict:
    text = os.environ.get(ROWS_ENV, "").strip()
    if not text:
        return configs
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in configs]
    if unknown:
        raise pytest.UsageError(f"{ROWS_ENV} names {', '.join(unknown)}; the matrix's rows: {', '.join(configs)}")
    return {n: configs[n] for n in configs if n in names}


CONFIGS = _limit_rows(CONFIGS)


def _spec(name: str) -> dict:
    world, spec = CONFIGS[name]
    return {**BASE, **spec, "dp": WORLDS[world]["dp"], "cp": WORLDS[world].get("cp", 1), "seed": sum(map(ord, name))}


def _schedules(name: str) -> list:
    return [H.MEGATRON] + CONFIGS[name][1].get("schedules", OURS)


CASES = [(c, s) for c in CONFIGS for s in _schedules(c)]


def _rows_or_none(items: list) -> list:
    """A parameter list that PRIMUS_TEST_MATRIX_ROWS may leave empty (the second CI leg has no FP8 row):
    pytest would collect an empty one as a skipped placeholder; this placeholder is deselected instead
    (tests/conftest.py), as the rows the filter leaves out are."""
    return items or [pytest.param(None, id="no-row-selected", marks=pytest.mark.no_row_selected)]


def _ids(case):
    return f"{case[0]}-{case[1]}"


def _selected_cases(request) -> set:
    """The (configuration, schedule) cases whose tests were collected (`-k` and PRIMUS_TEST_SCHEDULES
    select what runs, not only what is checked), with megatron's 1F1B in each configuration."""
    chosen = set()
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        case = params.get("case") or ((params["config"], H.MEGATRON) if isinstance(params.get("config"), str)
                                      else None)
        case = case if isinstance(case, tuple) else None  # an empty parameter set's placeholder is no case
        several = params.get("cases", ())  # `cases`: a test of several
        for c in ([case] if case is not None else []) + list(several if isinstance(several, list) else ()):
            if item.module is request.module:
                chosen |= {tuple(c), (c[0], H.MEGATRON)}
    return chosen


def _selected_configs(request) -> list:
    configs = {c for c, _ in _selected_cases(request)}
    return [c for c in CONFIGS if c in configs]


@pytest.fixture(scope="module")
def reference(request):
    return H.run_reference({name: _spec(name) for name in _selected_configs(request)})


@pytest.fixture(scope="module")
def worlds(request, tmp_path_factory):
    """(config, schedule) -> per-rank results, or {'error': text}. megatron's 1F1B runs first
    in every configuration; one launch per world layout (plus one per case that raised)."""
    selected = _selected_cases(request)
    out = {}
    for world, layout in WORLDS.items():
        cases = [{"spec": _spec(c), "schedule": s, "config": c} for c, s in CASES
                 if CONFIGS[c][0] == world and (c, s) in selected]
        if not cases:
            continue
        results = H.run_world(layout, cases, str(tmp_path_factory.mktemp(world)))
        for case, res in zip(cases, results):
            out[(case["config"], case["schedule"])] = res
    return out


def _result(worlds, config, schedule):
    res = worlds[(config, schedule)]
    if isinstance(res, dict):
        pytest.fail(f"{config} / {schedule}: the run raised:\n{res['error'][:6000]}", pytrace=False)
    return res


# -- tolerances (module doc) ----------------------------------------------------------------------

LR = 1e-3  # matrix_harness.build's default
PARAM_ATOL = 1e-2 * LR
BF16_ULP = 2.0 ** -8


def _bf16(config) -> bool:
    return bool(CONFIGS[config][1].get("bf16"))


def _cp_bf16(config) -> bool:
    """A bf16 row that the reference rounds differently from the first iteration on: context parallelism
    (every CP row: TE has no fp32 context-parallel attention), or experts split by expert parallelism (the
    reference, ep = 1, runs each expert over the tokens of both replicas at once)."""
    split = WORLDS[CONFIGS[config][0]].get("cp", 1) > 1 or CONFIGS[config][1].get("moe", {}).get("ep", 1) > 1
    return _bf16(config) and split


# CP rows in bf16 against the whole-sequence reference, from the first iteration on (module doc):
CP_BF16_GRAD = 6e-2  # max |a - e| / max |e| per tensor; measured <= 4.4e-2 (3.1e-2 in iteration 0)
CP_BF16_LOSS = 1e-3  # relative; measured <= 1.6e-4
CP_BF16_NORM = 1e-2  # grad norm, relative; measured <= 2.5e-3
CP_BF16_FLIPS = 0.1  # share of a piece's elements more than lr / 2 apart; measured <= 1 of 32 (0.4 % overall)


def _grad_tol(config, it, against: str = "reference", schedule: str = "") -> float:
    if against == "megatron":
        return _megatron_tol(config, schedule)
    if _cp_bf16(config):
        return CP_BF16_GRAD
    return 1e-2 if _bf16(config) and it > 0 else 1e-5


def _loss_tol(config, it) -> float:
    return CP_BF16_LOSS if _cp_bf16(config) else _grad_tol(config, it)


def _norm_tol(config) -> float:
    """The grad norm against the reference (1e-5: _check_step's default)."""
    return CP_BF16_NORM if _cp_bf16(config) else 1e-5


# The grad norm's sum of squares runs over a rank's parameters in their chunks' order, which
# differs under several chunks per rank (interleaved, V): a few fp32 ulps (measured <= 9e-8).
NORM_VS_MEGATRON = 1e-6


def _megatron_tol(config, schedule: str = "") -> float:
    """Against megatron's 1F1B the runs are bitwise equal (bf16 in every iteration too), except
    the tied embedding's two gradient copies under V, summed in another order (likewise, with MTP under
    V, the embedding that the first stage and the MTP layers read: one gradient of both uses in op order
    where megatron sums the two copies'), and, where more than
    two data x context parallel ranks reduce a gradient, schedules with several chunks per rank: each
    chunk's DDP buffer is laid out on its own (megatron's 1F1B has one), so gloo's reduction sums an
    element's more than two partial values in another order (a few fp32 ulps: measured <= 7e-8; two
    values sum the same either way)."""
    world = WORLDS[CONFIGS[config][0]]
    reduced_over = world["dp"] * world.get("cp", 1)
    several_chunks = schedule == H.MEGATRON_COMBINED or (
        bool(schedule) and schedule != H.MEGATRON and S.info(schedule).chunks > 1)
    mtp_under_v = bool(CONFIGS[config][1].get("model", {}).get("mtp_num_layers")) and bool(schedule) \
        and schedule not in H.ORACLES and S.info(schedule).placement == S.V
    return 1e-6 if CONFIGS[config][1].get("tied") or mtp_under_v or (several_chunks and reduced_over > 2) else 0.0


def _relative(tol):
    """max |a - e| / max |e| <= tol, per tensor."""
    def check(values, expected):
        err = H.max_rel_error(values, expected)
        return err <= tol, f"max rel error {err:.3g} > {tol:g} (max |expected| {expected.abs().max().item():.3g})"
    return check


def _elementwise(atol, rtol=0.0):
    """|a - e| <= atol + rtol |e|, per element."""
    def check(values, expected):
        if values.shape != expected.shape:
            return False, f"{values.numel()} values, expected {expected.numel()}"
        excess = (values - expected).abs() - rtol * expected.abs()
        worst = excess.max().item() if excess.numel() else 0.0
        i = int(excess.argmax()) if excess.numel() else 0
        ok = bool(torch.isfinite(values).all()) and worst <= atol
        return ok, (f"element {i}: {values.reshape(-1)[i].item():.9g} vs {expected.reshape(-1)[i].item():.9g} "
                    f"(|diff| - {rtol:g}|e| = {worst:.3g} > {atol:g})")
    return check


def _check_pieces(what, pieces_per_rank, expected_of, check, *, must_cover=None, replicas=None):
    """Every piece (each copy: dp replicas, tied copies, tp shards) against `expected_of`.
    `must_cover`: {(name, tp_rank): numel} that the pieces must cover completely, by each
    data-parallel replica when `replicas` (dp rank per entry of pieces_per_rank) is given
    (expert parameters, split over the dp ranks by expert parallelism, by all ranks together),
    else by all ranks together (the distributed optimizer's shards)."""
    for pieces in pieces_per_rank:
        for name, tp_rank, pdim, lo, hi, values, _ in pieces:
            expected = expected_of(name, tp_rank, pdim, lo, hi)
            assert expected is not None, f"{what}: parameter {name} (tp rank {tp_rank}) has no counterpart"
            ok, why = check(values, expected)
            assert ok, f"{what}: {name} (tp rank {tp_rank}, elements {lo}:{hi}) {why}"
    if must_cover is None:
        return
    groups = {None: pieces_per_rank} if replicas is None else {
        dp: [[p for r, pieces in zip(replicas, pieces_per_rank) for p in pieces
              if r == dp or H.is_expert(p[0])]] for dp in sorted(set(replicas))}
    for dp, group in groups.items():
        flat = H.flat_tensors(group)
        whose = "" if dp is None else f" (data-parallel replica {dp})"
        for key, numel in must_cover.items():
            assert key in flat, f"{what}: no rank{whose} holds parameter {key[0]} (tp rank {key[1]})"
            covered = flat[key][1]
            assert covered.numel() == numel and covered.all(), \
                f"{what}: parameter {key[0]} (tp rank {key[1]}) only partly covered{whose} " \
                f"({int(covered.sum())}/{numel})"


def _losses_by_dp(per_rank, it):
    """(dp rank, cp rank) -> that rank's per-microbatch losses (from whichever pipeline rank holds the
    loss; under context parallelism each CP rank reports the loss of its own part of the sequence)."""
    out = {}
    for res in per_rank:
        losses = res["iterations"][it]["losses"]
        key = (res["dp_rank"], res.get("cp_rank", 0))
        if losses:
            assert key not in out or out[key] == losses, \
                f"iteration {it}: two ranks of dp rank {key[0]} (cp rank {key[1]}) returned different losses"
            out.setdefault(key, losses)
    return out


def _check_losses(what, losses, expected, tol):
    assert len(losses) == len(expected), f"{what}: {len(losses)} losses, expected {len(expected)}"
    err = H.max_rel_error(torch.tensor(losses), torch.tensor(expected))
    assert err <= tol, f"{what}: losses {losses} != {expected} (max rel error {err:.3g} > {tol:g})"


def _check_step(what, ours, theirs, rel_tol=1e-5):
    """(update successful, grad norm) of the optimizer step."""
    assert ours[0] == theirs[0], f"{what}: step successful {ours[0]}, expected {theirs[0]}"
    if ours[1] is not None or theirs[1] is not None:
        assert ours[1] is not None and theirs[1] is not None \
            and math.isclose(ours[1], theirs[1], rel_tol=rel_tol, abs_tol=0.0), \
            f"{what}: grad norm {ours[1]} != {theirs[1]} (rel tol {rel_tol:g})"


def _final_check(config):
    return _elementwise(PARAM_ATOL, BF16_ULP if _bf16(config) else 0.0)


def _adam_sign_noise(steps: int, rtol: float = 0.0):
    """CP rows in bf16 against the reference (module doc): no element further apart than two Adam
    runs can be after `steps` steps (each step moves an element by at most about lr, whatever its
    gradient), and at most CP_BF16_FLIPS of each piece's elements more than lr / 2 apart (the
    elements whose gradient is within bf16 noise of zero, whose update's sign may differ). A skipped
    or misdirected update moves about every element by lr."""
    bound, flipped = _elementwise(2 * LR * steps + PARAM_ATOL, rtol), _elementwise(LR / 2, rtol)

    def check(values, expected):
        ok, why = bound(values, expected)
        if not ok:
            return ok, why
        if values.numel() == 0:
            return True, ""
        share = ((values - expected).abs() - rtol * expected.abs() > LR / 2).float().mean().item()
        return share <= CP_BF16_FLIPS, (f"{share:.1%} of the elements are more than lr / 2 apart "
                                        f"(> {CP_BF16_FLIPS:.0%}); {flipped(values, expected)[1]}")
    return check


def _reference_param_check(config, steps: int, final: bool = False):
    """Parameters against the reference after `steps` optimizer steps (main parameters, or the
    model's own at the end)."""
    if _cp_bf16(config):
        return _adam_sign_noise(steps, BF16_ULP if final else 0.0)
    return _final_check(config) if final else _elementwise(PARAM_ATOL)


# -- against the reference ------------------------------------------------------------------------

def _reference_expectation(full: dict, tp_size: int):
    def expected_of(name, tp_rank, pdim, lo, hi):
        if name not in full:
            return None
        return H.reference_slice(full[name], tp_rank, tp_size, pdim, lo, hi)
    return expected_of


def _full_from_pieces(pieces) -> dict:
    """The reference's tensors by name (tp = 1: every piece is a whole parameter)."""
    return {name: values.reshape(shape) for name, _, _, _, _, values, shape in pieces}


def _coverage(full: dict, tp_size: int, pdims: dict) -> dict:
    """{(name, tp rank): elements of that rank's shard} for every reference parameter."""
    return {(name, t): tensor.numel() // (tp_size if pdims.get(name) is not None else 1)
            for name, tensor in full.items() for t in range(tp_size)}


def _pdims(per_rank) -> dict:
    return {name: pdim for res in per_rank for name, _, pdim, *_ in res["final_params"]}


def _replicas(config, per_rank):
    """dp rank of each rank's results when every dp replica holds whole tensors (not sharded)."""
    sharded = CONFIGS[config][1].get("ddp", {}).get("use_distributed_optimizer", False)
    return None if sharded else [r["dp_rank"] for r in per_rank]


def assert_matches_reference(config, schedule, per_rank, refs):
    tp = WORLDS[CONFIGS[config][0]]["tp"]
    spec = _spec(config)
    m = spec["microbatches"]
    pdims = _pdims(per_rank)
    replicas = _replicas(config, per_rank)
    for it, ref_it in enumerate(refs["iterations"]):
        what = f"{config} / {schedule} / iteration {it}"
        by_dp = _losses_by_dp(per_rank, it)
        assert sorted(by_dp) == [(dp, cp) for dp in range(spec["dp"]) for cp in range(spec["cp"])], \
            f"{what}: losses came from (dp, cp) ranks {sorted(by_dp)}"
        counts = ref_it.get("counts") or [m] * spec["dp"]  # balanced data: each replica its own count
        for (dp, cp), losses in by_dp.items():
            lo = sum(counts[:dp])
            _check_losses(f"{what} dp rank {dp} cp rank {cp}", losses,
                          ref_it["losses_by_cp"][cp][lo:lo + counts[dp]], _loss_tol(config, it))
        full = _full_from_pieces(ref_it["grads"])
        _check_pieces(f"{what} gradient", [r["iterations"][it]["grads"] for r in per_rank],
                      _reference_expectation(full, tp), _relative(_grad_tol(config, it)),
                      must_cover=_coverage(full, tp, pdims), replicas=replicas)
        # every step's outcome and parameters, post-validation's too (known one step later)
        assert "params" in per_rank[0]["iterations"][it], f"{what}: no parameters recorded after the step"
        for r in per_rank:
            _check_step(f"{what} rank {r['rank']} optimizer step", r["iterations"][it]["step"], ref_it["step"],
                        rel_tol=_norm_tol(config))
        full = _full_from_pieces(ref_it["params"])
        _check_pieces(f"{what} main parameter after the step", [r["iterations"][it]["params"] for r in per_rank],
                      _reference_expectation(full, tp), _reference_param_check(config, it + 1),
                      must_cover=_coverage(full, tp, pdims), replicas=replicas)
    full = _full_from_pieces(refs["final_params"])
    _check_pieces(f"{config} / {schedule} / model parameters at the end", [r["final_params"] for r in per_rank],
                  _reference_expectation(full, tp), _reference_param_check(config, spec["iterations"], final=True),
                  must_cover=_coverage(full, tp, pdims), replicas=[r["dp_rank"] for r in per_rank])


FP8_ROWS = [c for c in CONFIGS if CONFIGS[c][1].get("fp8")]


# FP8 rows are checked against megatron's 1F1B only: the fp32 reference has no FP8 rounding to equal
@pytest.mark.parametrize("case", _rows_or_none([c for c in CASES if c[0] not in FP8_ROWS]), ids=_ids)
def test_equals_the_non_pipelined_reference(worlds, reference, case):
    """Losses, gradients after finalize_model_grads and parameters after every step equal the
    single-process reference; the megatron-1f1b rows check the harness itself."""
    config, schedule = case
    per_rank = _result(worlds, config, schedule)
    refs = reference[config]
    if "error" in refs:
        pytest.fail(f"{config}: the non-pipelined reference raised:\n{refs['error'][-6000:]}", pytrace=False)
    # the oracles (the reference, megatron's 1F1B) ran megatron's own linear layers, not our hook
    assert refs["oracle_linear"] == [ref.MEGATRON_LINEAR] * 2, f"{config}: reference ran {refs['oracle_linear']}"
    if schedule in H.ORACLES:
        for r in per_rank:
            assert r["oracle_linear"] == [ref.MEGATRON_LINEAR] * 2, \
                f"{config}: megatron's 1F1B on rank {r['rank']} ran {r['oracle_linear']}"
    assert_matches_reference(config, schedule, per_rank, refs)


# -- against megatron's own 1F1B ------------------------------------------------------------------

def _megatron_expectation(pieces_per_rank):
    flat = H.flat_tensors(pieces_per_rank)

    def expected_of(name, tp_rank, pdim, lo, hi):
        if (name, tp_rank) not in flat:
            return None
        values, covered = flat[(name, tp_rank)]
        assert covered[lo:hi].all(), f"megatron's run does not cover {name} {lo}:{hi}"
        return values[lo:hi]
    return expected_of, {k: v[0].numel() for k, v in flat.items()}


def assert_matches_megatron(config, schedule, per_rank, mega):
    spec = _spec(config)
    replicas = _replicas(config, per_rank)
    for it in range(spec["iterations"]):
        what = f"{config} / {schedule} vs megatron 1F1B / iteration {it}"
        ours, theirs = _losses_by_dp(per_rank, it), _losses_by_dp(mega, it)
        assert sorted(ours) == sorted(theirs), f"{what}: losses came from dp ranks {sorted(ours)}, not {sorted(theirs)}"
        for key in theirs:
            _check_losses(f"{what} (dp, cp) rank {key}", ours[key], theirs[key], _grad_tol(config, it, "megatron", schedule))
        expected_of, coverage = _megatron_expectation([r["iterations"][it]["grads"] for r in mega])
        _check_pieces(f"{what} gradient", [r["iterations"][it]["grads"] for r in per_rank], expected_of,
                      _relative(_grad_tol(config, it, "megatron", schedule)), must_cover=coverage, replicas=replicas)
        assert "params" in per_rank[0]["iterations"][it], f"{what}: no parameters recorded after the step"
        for r in per_rank:
            _check_step(f"{what} rank {r['rank']} optimizer step", r["iterations"][it]["step"],
                        mega[0]["iterations"][it]["step"], rel_tol=NORM_VS_MEGATRON)
        expected_of, coverage = _megatron_expectation([r["iterations"][it]["params"] for r in mega])
        _check_pieces(f"{what} main parameter after the step", [r["iterations"][it]["params"] for r in per_rank],
                      expected_of, _megatron_param_check(config, schedule), must_cover=coverage, replicas=replicas)
    expected_of, coverage = _megatron_expectation([r["final_params"] for r in mega])
    _check_pieces(f"{config} / {schedule} vs megatron 1F1B / model parameters at the end",
                  [r["final_params"] for r in per_rank], expected_of,
                  _megatron_param_check(config, schedule) if _megatron_tol(config, schedule) == 0
                  else _final_check(config),
                  must_cover=coverage, replicas=[r["dp_rank"] for r in per_rank])


def _megatron_param_check(config, schedule: str = ""):
    return _elementwise(0.0) if _megatron_tol(config, schedule) == 0 else _elementwise(PARAM_ATOL)


OUR_CASES = [c for c in CASES if c[1] != H.MEGATRON]


@pytest.mark.parametrize("case", _rows_or_none(OUR_CASES), ids=_ids)
def test_equals_megatrons_own_1f1b(worlds, case):
    """Same losses, gradients and parameters as megatron-core's 1F1B on the same configuration."""
    config, schedule = case
    per_rank = _result(worlds, config, schedule)
    mega = _result(worlds, config, H.MEGATRON)
    assert_matches_megatron(config, schedule, per_rank, mega)
    if CONFIGS[config][1].get("post_validation"):
        stats = [r["post_validation"] for r in per_rank]
        assert all(s["redone"] >= 1 for s in stats) and sum(s["rollbacks"] for s in stats) >= 1, \
            f"{config} / {schedule}: the injected non-finite gradient forced no rollback ({stats})"


def _fp8_state_by_name(per_rank, it: int) -> dict:
    """name -> (forward amax history, forward scale, backward amax history, backward scale), checking that
    every copy (data-parallel replicas: the amaxes are MAX-reduced over them) holds the same state."""
    out = {}
    for r in per_rank:
        for name, state in r["iterations"][it]["fp8_state"].items():
            if name in out:
                assert all(torch.equal(a, b) for a, b in zip(out[name], state)), \
                    f"{name}: replicas hold different FP8 scaling state in iteration {it}"
            out[name] = state
    return out


@pytest.mark.parametrize("case", _rows_or_none([c for c in OUR_CASES if c[0] in FP8_ROWS]), ids=_ids)
def test_fp8_scaling_state_equals_megatrons_own_1f1b(worlds, case):
    """Delayed scaling's amax histories and scales of every TE module, forward and backward, after every
    step: bitwise megatron's 1F1B (each microbatch's forward amaxes reduced at its autocast exit, its
    backward amaxes at the end of the first module's backward, in B, once; W casts nothing)."""
    config, schedule = case
    per_rank, mega = _result(worlds, config, schedule), _result(worlds, config, H.MEGATRON)
    for it in range(_spec(config)["iterations"]):
        ours, theirs = _fp8_state_by_name(per_rank, it), _fp8_state_by_name(mega, it)
        assert sorted(ours) == sorted(theirs), f"{config} / {schedule}: FP8 modules {sorted(ours)} vs {sorted(theirs)}"
        for name, state in theirs.items():
            for what, a, b in zip(("forward amax history", "forward scale", "backward amax history",
                                   "backward scale"), ours[name], state):
                assert torch.equal(a, b), f"{config} / {schedule} iteration {it}: {name} {what} {a} vs {b}"


@pytest.mark.parametrize("config", _rows_or_none(FP8_ROWS))
def test_fp8_rows_train_in_fp8(worlds, config):
    """The FP8 rows' TE layers ran FP8 GEMMs: delayed scaling recorded non-zero amaxes and moved its scales
    off their initial 1 in both directions, and the losses are not the bf16 run's (FP8 rounds more)."""
    mega = _result(worlds, config, H.MEGATRON)
    counts = [r["iterations"][0]["fp8_modules"] for r in mega]
    assert min(counts) > 0, f"{config}: TE modules under FP8 per rank {counts}"
    if CONFIGS[config][1]["fp8"]["recipe"] == "delayed":
        state = _fp8_state_by_name(mega, 0)
        assert state and all((s[1] != 1).any() and (s[3] != 1).any() for s in state.values()), \
            f"{config}: delayed scaling did not update every module's forward and backward scales"
        if CONFIGS[config][1].get("moe", {}).get("grouped"):  # the experts' GroupedLinears among them
            experts = [n for n in state if ".mlp.experts.linear_fc" in n and n.endswith(".weight0")]
            assert len(experts) == 2 * _spec(config)["num_layers"], f"{config}: FP8 expert layers {experts}"


@pytest.mark.parametrize("case", _rows_or_none([c for c in CASES if CONFIGS[c[0]][1].get("a2a_overlap")
                                                and c[1] != H.MEGATRON]), ids=_ids)
def test_a2a_overlap_runs_forward_and_backward_as_one_step(worlds, case):
    """Under --overlap-moe-expert-parallel-comm the steady state ran F and B of two microbatches as one
    combined step (megatron's combined_forward_backward_step with both halves) on every rank."""
    config, schedule = case
    for res in _result(worlds, config, schedule):
        for it, record in enumerate(res["iterations"]):
            assert record["combined_pairs"] > 0, \
                f"{config} / {schedule} / iteration {it}: rank {res['rank']} ran no F and B as one combined step"


def test_zb_optimal_plans_zb_auto_s_ops_here():
    """Why the FP8 rows leave zb-optimal out (W_SCHEDULES): at the rows' size it plans exactly zb-auto's ops.
    Were it to plan others, it would train differently and belong among the rows' schedules."""
    pp, m = WORLDS["dp2pp2-te"]["pp"], BASE["microbatches"]
    optimal, auto = S.generate("zb-optimal", pp, m), S.generate("zb-auto", pp, m)
    assert (optimal.placement, optimal.chunks_per_rank, optimal.ranks, optimal.pairs) == \
        (auto.placement, auto.chunks_per_rank, auto.ranks, auto.pairs)
    assert any(op.kind == S.W for ops in optimal.ranks for op in ops)


# -- MoE: expert weight gradients are deferred -----------------------------------------------------

def _splits(schedule: str, pp: int, m: int) -> bool:
    return any(op.kind == S.W for ops in S.generate(schedule, pp, m).ranks for op in ops)


MOE_SPLIT_CASES = [c for c in OUR_CASES if CONFIGS[c[0]][1].get("moe") and c[1] not in H.ORACLES
                   and _splits(c[1], WORLDS[CONFIGS[c[0]][0]]["pp"], _spec(c[0])["microbatches"])]


@pytest.mark.parametrize("case", _rows_or_none(MOE_SPLIT_CASES), ids=_ids)
def test_expert_weight_gradients_are_deferred(worlds, case):
    """Under schedules with W ops, every linear layer (the experts' included) defers its
    weight gradient once per microbatch, and W runs each."""
    config, schedule = case
    per_rank = _result(worlds, config, schedule)
    m = _spec(config)["microbatches"]
    for res in per_rank:
        total, experts = res["linear_layers"]
        assert experts > 0, f"{config}: rank {res['rank']} holds no expert linear layer"
        calls = total + res["output_layer_reuse"]  # the output layer once more per MTP layer on the loss stage
        for it, record in enumerate(res["iterations"]):
            assert record["wgrads_deferred"] == calls * m, \
                (f"{config} / {schedule} / iteration {it}: rank {res['rank']} deferred {record['wgrads_deferred']} "
                 f"weight gradients, expected {total} linear layers ({experts} of them in experts, "
                 f"{res['output_layer_reuse']} more MTP calls of the output layer) x {m} microbatches")
            assert record["wgrads_run"] == record["wgrads_deferred"], \
                f"{config} / {schedule} / iteration {it}: rank {res['rank']} ran {record['wgrads_run']} of them"


@pytest.mark.parametrize("case", _rows_or_none([c for c in CASES if CONFIGS[c[0]][1].get("moe")]), ids=_ids)
def test_every_gradient_bucket_is_reduced_once_per_step(worlds, case):
    """megatron's DDP starts each bucket group's gradient reduce exactly once per step, the
    experts' (over the expert data-parallel group) and the rest's: deferring weight gradients to
    W neither reduces a bucket before its last gradient arrived nor twice. Gradient values could
    not show it here: the experts' data-parallel group is one rank (EP 2 over DP 2)."""
    config, schedule = case
    per_rank = _result(worlds, config, schedule)
    for res in per_rank:
        kinds = {kind for record in res["iterations"] for _, kind, _ in record["grad_reduces"]}
        assert kinds == {"dense", "expert"}, f"{config} / {schedule}: rank {res['rank']} has bucket groups {kinds}"
        for it, record in enumerate(res["iterations"]):
            wrong = {k: n for k, n in record["grad_reduces"].items() if n != 1}
            assert not wrong, (f"{config} / {schedule} / iteration {it}: rank {res['rank']} reduced these bucket "
                               f"groups (chunk, kind, index) other than once: {wrong}")


# -- multi-token prediction ------------------------------------------------------------------------

MTP_ROWS = [c for c in CONFIGS if CONFIGS[c][1].get("model", {}).get("mtp_num_layers")]


@pytest.mark.parametrize("case", _rows_or_none([c for c in CASES if c[0] in MTP_ROWS]), ids=_ids)
def test_mtp_losses_are_megatrons(worlds, reference, case):
    """The MTP losses megatron's MTP block tracks (MTPLossLoggingHelper: what Megatron-LM logs as
    "mtp_1 loss") in every iteration: on one pipeline rank per data-parallel replica, the loss stage's
    (rank 0 under V, the last under loop placement), megatron's 1F1B's replica by replica (bitwise in the
    first iteration; later within the gradients' tolerance against it, whose parameters they run on), and
    their mean over the replicas the reference's over the global batch (which sums twice the microbatches)."""
    config, schedule = case
    per_rank, mega = _result(worlds, config, schedule), _result(worlds, config, H.MEGATRON)
    refs = reference[config]
    if "error" in refs:
        pytest.fail(f"{config}: the non-pipelined reference raised:\n{refs['error'][-6000:]}", pytrace=False)
    spec, pp = _spec(config), WORLDS[CONFIGS[config][0]]["pp"]
    holder = 0 if schedule not in H.ORACLES and S.info(schedule).placement == S.V else pp - 1

    def by_replica(results, it, holder):
        out = {}
        for r in results:
            values = r["iterations"][it]["mtp_losses"]
            assert bool(values) == (r["pp_rank"] == holder), \
                f"{config} / {schedule}: pipeline rank {r['pp_rank']} tracked MTP losses {values}"
            if values:
                out[r["dp_rank"]] = values
        assert sorted(out) == list(range(spec["dp"])), f"{config} / {schedule}: MTP losses of replicas {sorted(out)}"
        return out

    for it in range(spec["iterations"]):
        ours, theirs = by_replica(per_rank, it, holder), by_replica(mega, it, pp - 1)
        if it == 0:  # the same weights and data: the same forward, bit for bit
            assert ours == theirs, f"{config} / {schedule} / iteration 0: MTP losses {ours}, megatron's 1F1B {theirs}"
        for dp in theirs:  # after a step: the parameters' tolerance against megatron (_megatron_tol) carries over
            _check_losses(f"{config} / {schedule} / iteration {it} replica {dp} MTP losses against megatron's 1F1B",
                          ours[dp], theirs[dp], _grad_tol(config, it, "megatron", schedule))
        mean = [sum(ours[dp][k] for dp in ours) / spec["dp"] for k in range(len(ours[0]))]
        expected = [v / spec["dp"] for v in refs["iterations"][it]["mtp_losses"]]
        _check_losses(f"{config} / {schedule} / iteration {it} MTP losses against the reference", mean, expected,
                      _loss_tol(config, it))


# -- balanced data: replicas with their own counts train the gradients of the plain split ------------

BALANCE_ROWS = [c for c in CONFIGS if CONFIGS[c][1].get("balance")]


@pytest.mark.parametrize("config", _rows_or_none(BALANCE_ROWS))
def test_balanced_rows_give_replicas_different_counts(reference, config):
    """The rows exercise what they claim: in some iteration the two replicas run different counts."""
    counts = [it["counts"] for it in reference[config]["iterations"]]
    assert any(len(set(c)) > 1 for c in counts), f"{config}: every iteration gave the replicas equal counts {counts}"


@pytest.mark.parametrize("cases", _rows_or_none([
    pytest.param([(f"l-balance-{mode}{kind}", "zb-h1") for mode in ("lb-mini", "off")], id=name)
    for kind, name in (("-distopt-overlap", "l-balance-zb-h1"), ("-te", "l-balance-te-thd-zb-h1"))
    if all(f"l-balance-{mode}{kind}" in CONFIGS for mode in ("lb-mini", "off"))]))
def test_lb_mini_and_the_plain_split_train_the_same_gradients(worlds, cases):
    """The same samples split by LB-Mini and by megatron's plain split (other replicas, other packs,
    other counts) give the same full gradient in the first step, to fp32 summation order (the loss is
    normalised by the global token count, not per replica). With TE layers (thd packs, RoPE) the
    same: a sample sees no other whatever pack it lands in, so attention across samples (cu_seqlens
    not honoured, by TE's attention or by the RoPE positions) changes the gradient by far more."""
    lb, off = (_result(worlds, *case) for case in cases)

    def full(per_rank):  # the distributed optimizer's owned shards, gathered by parameter
        out = {}
        for r in per_rank:
            for name, tp_rank, _, lo, hi, values, shape in r["iterations"][0]["grads"]:
                out.setdefault(name, torch.full((math.prod(shape),), float("nan")))[lo:hi] = values
        return out
    a, b = full(lb), full(off)
    assert sorted(a) == sorted(b) and a
    for name in a:
        assert not a[name].isnan().any(), f"{name}: the gradient shards do not cover it"
        scale = max(float(b[name].abs().max()), 1e-12)
        diff = float((a[name] - b[name]).abs().max()) / scale
        assert diff <= 1e-5, f"{name}: lb-mini and off gradients differ by {diff:.3g} of the largest"


# -- the architecture rows build the architecture they name -----------------------------------------

ARCH_CONFIGS = [c for c in CONFIGS if CONFIGS[c][1].get("arch") and not CONFIGS[c][1].get("fp8")]  # (no FP8 reference)


@pytest.mark.parametrize("config", _rows_or_none(ARCH_CONFIGS))
def test_architecture_rows_build_what_they_name(reference, config):
    """The reference's parameters show the architecture: RoPE (no position embedding table), no
    biases, RMSNorm (no norm biases), SwiGLU (fc1 twice the FFN width), and grouped-query attention
    (2 key/value groups: a narrower QKV) for Llama; multi-latent attention's low-rank projections
    for DeepSeek."""
    refs = reference[config]
    if "error" in refs:
        pytest.fail(f"{config}: the non-pipelined reference raised:\n{refs['error'][-6000:]}", pytrace=False)
    shapes = {name: shape for name, _, _, _, _, _, shape in refs["final_params"]}
    assert not any("position_embeddings" in n for n in shapes), f"{config}: a learned position table, not RoPE"
    assert not any(n.endswith("bias") or ".bias" in n for n in shapes), f"{config}: biases {sorted(shapes)}"
    hidden, heads = 32, 4  # megatron_reference.tiny_gpt_config
    # SwiGLU: every fc1 is twice its FFN width (the dense MLP's, each routed expert's, the shared expert's)
    spec = CONFIGS[config][1]
    widths = {"mlp.linear_fc1.weight": 4 * hidden, "shared_experts.linear_fc1.weight": spec.get("moe", {}).get("shared"),
              "experts.linear_fc1.weight": 4 * hidden, "experts.local_experts.": 4 * hidden}  # (grouped, sequential)
    fc1 = {n: s for n, s in shapes.items() if ".linear_fc1.weight" in n and "self_attention" not in n}
    assert fc1, f"{config}: no MLP"
    for n, s in fc1.items():
        width = next(w for key, w in widths.items() if key in n.rstrip("0123456789"))
        assert s[0] == 2 * width, f"{config}: {n} {s} is not SwiGLU's 2 x {width}"
    if CONFIGS[config][1]["arch"] == "llama":
        qkv = [s for n, s in shapes.items() if n.endswith("linear_qkv.weight")]
        assert qkv and all(s == (hidden + 2 * 2 * hidden // heads, hidden) for s in qkv), f"{config}: QKV {qkv}"
    else:
        for part in ("linear_q_down_proj", "linear_kv_down_proj", "linear_kv_up_proj"):
            assert any(part in n for n in shapes), f"{config}: no {part} (multi-latent attention)"


# -- selective recompute recomputes ---------------------------------------------------------------

RECOMPUTE_CASES = [c for c in CASES if CONFIGS[c[0]][1].get("model", {}).get("recompute_granularity") == "selective"]
# the control: the same precision without recompute runs each core attention once per microbatch
NO_RECOMPUTE_CASES = [c for c in CASES if c[0] == "c-fusion-bf16"]


@pytest.mark.parametrize("case", _rows_or_none(RECOMPUTE_CASES + NO_RECOMPUTE_CASES), ids=_ids)
def test_selective_recompute_runs_core_attention_again_in_the_backward(worlds, case):
    """Under `recompute_granularity='selective'` (megatron's default modules: core attention)
    every core attention runs twice per microbatch and iteration, its forward and its
    recomputation in the backward; without recompute once."""
    config, schedule = case
    per_rank = _result(worlds, config, schedule)
    m = _spec(config)["microbatches"]
    runs = 2 if case in RECOMPUTE_CASES else 1
    for res in per_rank:
        assert res["core_attention"] > 0, f"{config}: rank {res['rank']} holds no core attention"
        for it, record in enumerate(res["iterations"]):
            assert record["core_attention_calls"] == runs * res["core_attention"] * m, \
                (f"{config} / {schedule} / iteration {it}: rank {res['rank']}'s {res['core_attention']} core attention "
                 f"modules ran {record['core_attention_calls']} times, expected {runs} x {m} microbatches each")


# -- the checks themselves can fail ----------------------------------------------------------------

def _perturbed(per_rank, mutate):
    import copy

    out = copy.deepcopy(per_rank)
    mutate(out)
    return out


# the rows a run keeps; a PRIMUS_TEST_MATRIX_ROWS without either leaves this test deselected (_rows_or_none)
CHECKED_ROW = next((c for c in ("a-no-overlap", "a-overlap-grad-sync") if c in CONFIGS), None)


@pytest.mark.parametrize("case", _rows_or_none([(CHECKED_ROW, H.MEGATRON), (CHECKED_ROW, "zbv")] if CHECKED_ROW else []),
                         ids=_ids)
def test_the_checks_catch_small_errors(worlds, reference, case):
    """A result that passes fails once one gradient element moves by 3e-5 of its tensor's
    largest value, one loss by 1e-4, one main parameter element by 2x the parameter
    tolerance, or one parameter shard goes missing."""
    config, schedule = case
    per_rank = _result(worlds, config, schedule)
    mega = _result(worlds, config, H.MEGATRON)
    refs = reference[config]
    assert_matches_reference(config, schedule, per_rank, refs)
    if schedule != H.MEGATRON:
        assert_matches_megatron(config, schedule, per_rank, mega)

    def grad(res):
        values = res[1]["iterations"][1]["grads"][3][5]
        values[7] += 3e-5 * values.abs().max()

    def loss(res):
        holder = next(r for r in res if r["iterations"][0]["losses"])
        holder["iterations"][0]["losses"][2] *= 1 + 1e-4

    def param(res):
        res[2]["iterations"][0]["params"][4][5][1] += 2 * PARAM_ATOL

    def missing(res):
        del res[3]["iterations"][1]["grads"][0]

    for mutate in (grad, loss, param, missing):
        bad = _perturbed(per_rank, mutate)
        with pytest.raises(AssertionError):
            assert_matches_reference(config, schedule, bad, refs)
        if schedule != H.MEGATRON:
            with pytest.raises(AssertionError):
                assert_matches_megatron(config, schedule, bad, mega)


def test_the_cp_bf16_parameter_check_catches_a_skipped_or_reversed_update():
    """The CP rows' parameter check against the reference (_adam_sign_noise) passes the noise bf16
    gives (a few elements an update apart, the rest within 1e-2 lr) and fails an update skipped or
    reversed on a whole tensor, or one element further apart than the steps allow."""
    gen = torch.Generator().manual_seed(0)
    expected = torch.randn(64, generator=gen)
    check = _adam_sign_noise(steps=1)
    noisy = expected + PARAM_ATOL * (torch.rand(64, generator=gen) - 0.5)
    noisy[:3] += 2 * LR  # three elements whose gradient sign differed
    assert check(noisy, expected)[0]
    sign = torch.where(torch.rand(64, generator=gen) < 0.5, -1.0, 1.0)
    assert not check(expected + LR * sign, expected)[0]  # the step skipped
    assert not check(expected + 2 * LR * sign, expected)[0]  # every update reversed
    far = expected.clone()
    far[5] += 3 * LR
    assert not check(far, expected)[0]
