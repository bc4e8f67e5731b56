"""Megatron settings the engine does not honour, refused before any rank waits.

One table, read in two places with the same sentences: Megatron-LM's parsed
arguments (their names are the TransformerConfig fields', so `--x-y` is the
field `x_y`), checked before process groups exist, and the model config each
forward_backward call receives, checked on the first call before the ranks
compare schedules. Pure Python: no torch import.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional



@dataclass(frozen=True)
class Rule:
    field: str
    refuses: Callable[[Any, "Setting"], bool]  # (value, setting) -> refused?
    why: str
    flag: Optional[str] = None  # Megatron-LM's option when it is not --<field> (e.g. --fp8-format for fp8)
    offload: bool = False  # refused only together with activation offload (--pipeline-offload all/auto)

    @property
    def option(self) -> str:
        return self.flag or "--" + self.field.replace("_", "-")


@dataclass(frozen=True)
class Setting:
    """What a rule may look at besides the field's value."""

    schedule: str
    splits_backward: bool  # the schedule has W ops
    v_placement: bool
    uses_te: Optional[bool]  # TransformerEngine layers in the model (None: not known yet)
    get: Callable[[str], Any]  # another field's value (None when absent)
    offload: str = "off"  # --pipeline-offload
    pairs: Optional[bool] = None  # the schedule has overlapped F&B pairs (None: not planned yet, known by name)


# Schedules whose orders have overlapped F&B pairs: dualpipev always, zbv when its costs have an
# all-to-all part (schedules/pairing.py). Before a schedule is planned only its name is known.
PAIRED_SCHEDULES = ("dualpipev", "zbv")


def _without_pairs(value: Any, s: Setting) -> bool:
    return bool(value) and not (s.pairs if s.pairs is not None else s.schedule in PAIRED_SCHEDULES)


def _truthy(value: Any, _: Setting) -> bool:
    return bool(value)


def _weight_shards(tp_field: str, gtp_field: str) -> Callable[[Any, "Setting"], bool]:
    """GTP weight sharding (megatron-core 0.19+): more weight shards than tensor-parallel ranks,
    or the derived gtp_*weight_remat_size above 1."""
    def refuses(value: Any, s: Setting) -> bool:
        tp = s.get(tp_field) or s.get("tensor_model_parallel_size") or 1
        return (s.get(gtp_field) or 1) > 1 or (value or tp) > tp

    return refuses


def _cuda_graphs(value: Any, s: Setting) -> bool:
    return value not in (None, "none") or bool(s.get("enable_cuda_graph")) or bool(s.get("external_cuda_graph"))


# TransformerEngine versions on which FP8 (and FP4) training with W ops was verified on a GPU
# (tests/test_gpu_te.py: losses and gradients equal megatron's own schedule). Under FP8 megatron
# resets is_first_microbatch every step, so each chunk's first W overwrites main_grad (safe only
# in microbatch order, which validate() enforces), and TE computes the bias gradient in B. No
# GPU run has verified it yet: add one when it does. Entries are (version, platform), platform "cuda" or
# "rocm-<gfx target>": ROCm's TransformerEngine reports the upstream version it tracks (its dev branch says
# 2.17.0 like upstream, ROCm/TransformerEngine#660), and its FP8 formats differ by target: gfx942
# (MI300) has the FNUZ variants (e4m3fnuz/e5m2fnuz), gfx950 (MI350/MI355) the OCP ones NVIDIA uses
# (AMD's "Precision support" page of the ROCm docs; ROCm TE's te_fp8 format selection). A version
# verified on NVIDIA, or on one AMD target, says nothing of another.
FP8_VERIFIED_TE_VERSIONS: frozenset[tuple[str, str]] = frozenset()


def te_platform() -> str:
    """"cuda"; under a ROCm build of torch "rocm-" and the first GPU's target (e.g. "rocm-gfx942"), or
    "rocm" where no GPU is visible."""
    import torch

    if not getattr(torch.version, "hip", None):
        return "cuda"
    try:
        arch = torch.cuda.get_device_properties(0).gcnArchName.split(":")[0] if torch.cuda.is_available() else ""
    except Exception:  # noqa: BLE001 - a runtime that cannot answer: no target, nothing verified for it
        arch = ""
    return f"rocm-{arch}" if arch else "rocm"


def installed_te_version() -> Optional[str]:
    """The TransformerEngine version, without importing it (None when not installed)."""
    import sys

    te = sys.modules.get("transformer_engine")
    if te is not None and getattr(te, "__version__", None):
        return str(te.__version__)
    try:
        from importlib import metadata

        return metadata.version("transformer_engine")
    except Exception:  # noqa: BLE001 - not installed (or no metadata): nothing verified
        return None


# FP8 recipes (megatron's --fp8-recipe) whose training with W ops our CPU reproduction of a TransformerEngine
# release covers, as (TE major.minor, recipe): tests/te_standin reproduces TE v2.11 (c188b533) for the per-tensor
# recipes (E4M3 and HYBRID; the FNUZ formats of an emulated gfx942) in Linear, LayerNormLinear and the grouped
# experts' GroupedLinear (with TE's Fp8Padding and megatron's --moe-router-padding-for-fp8), and the production
# matrix trains them bitwise as megatron's own 1F1B (tests/test_production_matrix.py, n-fp8-*, o-fp8-*).
# megatron-core 0.16.1 and 0.19 never build TE's LayerNormMLP, the one TE linear layer left out.
# Not a GPU verification: that is FP8_VERIFIED_TE_VERSIONS.
FP8_CPU_REPRODUCED: frozenset[tuple[str, str]] = frozenset({("2.11", "delayed"), ("2.11", "tensorwise")})

# Why each recipe the reproduction does not cover is refused (megatron-core 0.16.1 --fp8-recipe choices)
FP8_RECIPES_NOT_REPRODUCED = {
    "blockwise": "its 1x128 and 128x128 block scales",
    "mxfp8": "its E8M0 scales per 32-element block",
    "custom": "the quantizers of its --fp8-quantizer-factory",
}
# and each FP4 recipe (--fp4-recipe, with --fp4-format e2m1): none is reproduced
FP4_RECIPES_NOT_REPRODUCED = {
    "nvfp4": "its E2M1 values with an E4M3 scale per 16-element block and a per-tensor scale",
    "custom": "the quantizers of its --fp4-quantizer-factory",
}


def _te_minor(version: Optional[str]) -> Optional[str]:
    """"2.11.0+c188b53" -> "2.11"."""
    parts = (version or "").split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else None


def _recipe_name(value: Any, default: str) -> str:
    """A recipe field as its name: megatron's configs hold strings, its code compares them with the str
    enums Fp8Recipe / Fp4Recipe, whose str() is "Fp8Recipe.delayed" (hence their value)."""
    return str(getattr(value, "value", value) or default)


def fp8_recipe_of(s: "Setting") -> str:
    """megatron's --fp8-recipe (its default, delayed, when unset)."""
    return _recipe_name(s.get("fp8_recipe"), "delayed")


def fp8_with_w_basis(recipe: str) -> Optional[str]:
    """Why FP8 with W ops is accepted for the installed TE: "gpu" (a GPU run verified this version on this
    platform), "cpu" (the CPU reproduction covers this version and recipe), or None (refused)."""
    version = installed_te_version()
    if (version, te_platform()) in FP8_VERIFIED_TE_VERSIONS:
        return "gpu"
    return "cpu" if (_te_minor(version), recipe) in FP8_CPU_REPRODUCED else None


def _with_w_over_te(value: Any, s: Setting) -> bool:
    return bool(value) and s.splits_backward and s.uses_te is not False


def _fp8_recipe_not_reproduced(recipe: str) -> Callable[[Any, Setting], bool]:
    def refuses(value: Any, s: Setting) -> bool:
        return _with_w_over_te(value, s) and fp8_recipe_of(s) == recipe and fp8_with_w_basis(recipe) is None
    return refuses


def _fp8_version_not_reproduced(value: Any, s: Setting) -> bool:
    return _with_w_over_te(value, s) and fp8_with_w_basis(fp8_recipe_of(s)) is None


def _fp8_not_reproduced_with(field: str) -> Callable[[Any, Setting], bool]:
    """FP8 with W ops where `field` is on and a GPU has not verified this TE: the CPU reproduction lacks it."""
    def refuses(value: Any, s: Setting) -> bool:
        return _with_w_over_te(value, s) and bool(s.get("fp8")) and bool(s.get(field)) \
            and fp8_with_w_basis(fp8_recipe_of(s)) != "gpu"
    return refuses


def _fp4_recipe_not_reproduced(recipe: str) -> Callable[[Any, Setting], bool]:
    """FP4 with W ops under `recipe` (megatron's default nvfp4) on a TE no GPU run has verified."""
    def refuses(value: Any, s: Setting) -> bool:
        return _with_w_over_te(value, s) and _recipe_name(s.get("fp4_recipe"), "nvfp4") == recipe \
            and (installed_te_version(), te_platform()) not in FP8_VERIFIED_TE_VERSIONS
    return refuses


def _userbuffers_backward(value: Any, s: Setting) -> bool:
    """--tp-comm-overlap with TE layers: the bulk wgrad overlap (on by default) makes TE raise for a
    delayed GEMM; the bulk dgrad / grad_output all-gather overlaps hand the delayed GEMM tensors in a
    shared userbuffers buffer (runtime/te_wgrad.py UB_BACKWARD_OVERLAPS)."""
    return bool(value) and s.splits_backward and s.uses_te is not False


_NO_W = "use a schedule without W ops (1f1b, interleaved-1f1b)"
_FP8_NOT_REPRODUCED = ("our CPU reproduction of TransformerEngine (tests/te_standin) does not reproduce {what}, so deferred "
                       "weight gradients under it are neither reproduced nor verified on a GPU (primus_megatron/"
                       "unsupported.py FP8_VERIFIED_TE_VERSIONS); {fix}")
FP8_RULES: tuple[Rule, ...] = (
    *(Rule("fp8", _fp8_recipe_not_reproduced(recipe), _FP8_NOT_REPRODUCED.format(
        what=f"the {recipe} FP8 recipe ({why})", fix=f"use --fp8-recipe delayed or tensorwise, or {_NO_W[4:]}"),
        flag="--fp8-format") for recipe, why in FP8_RECIPES_NOT_REPRODUCED.items()),
    Rule("fp8", _fp8_version_not_reproduced,
         "deferred weight gradients under FP8 are not yet verified on a GPU for this TransformerEngine "
         "(primus_megatron/unsupported.py FP8_VERIFIED_TE_VERSIONS) and reproduced on CPU only for TransformerEngine "
         "2.11 with the delayed and tensorwise recipes (FP8_CPU_REPRODUCED); install TransformerEngine 2.11 or " + _NO_W,
         flag="--fp8-format"),
    *(Rule(field, _fp8_not_reproduced_with(field), _FP8_NOT_REPRODUCED.format(what=what, fix=f"drop it, or {_NO_W}"))
      for field, what in (("fp8_dot_product_attention", "FP8 attention"),
                          ("fp8_multi_head_attention", "FP8 attention"),
                          ("fp8_param", "FP8 parameters (fp8_model_init)"))),
)

# Grouped-expert and head layouts of megatron-core 0.19 our W ops cannot split (runtime/grouped_layouts.py),
# named before the rules they would otherwise meet first (the op fuser, the mxfp8 recipe)
LAYOUT_RULES: tuple[Rule, ...] = (
    # transformer_config.py:1556-1587 at core_v0.19.0: TE >= 2.14, grouped GEMM, and for the weight the op fuser
    Rule("moe_single_grouped_weight", lambda v, s: bool(v) and s.splits_backward,
         "it keeps each layer's experts in one TransformerEngine grouped weight (GroupedLinear single_grouped_weight, "
         "TransformerEngine 2.14+), whose weight gradient our W ops cannot take per expert (TE's own backward_dw "
         "leaves it on per-expert views through TE 2.18, TE issue #3234); drop it for one weight per expert "
         "(TEGroupedMLP, whose experts' weight gradients run in W), or " + _NO_W),
    Rule("moe_single_grouped_bias", lambda v, s: bool(v) and s.splits_backward,
         "it keeps each layer's expert biases in one TransformerEngine grouped bias (GroupedLinear "
         "single_grouped_bias, TransformerEngine 2.14+), while our W ops deliver each expert's bias gradient to its "
         "own bias; drop it for one bias per expert, or " + _NO_W),
    # extensions/transformer_engine.py:1514-1560 at core_v0.19.0: the output layer as a TE Linear, built only
    # under fp8_recipe mxfp8 (transformer_config.py:1442-1448), whose deferral nothing reproduces or verifies
    Rule("fp8_output_proj", lambda v, s: _with_w_over_te(v, s) and fp8_with_w_basis("mxfp8") is None,
         "it builds the output layer as megatron-core 0.19's TELMHeadColumnParallelLinear, an MXFP8 "
         "TransformerEngine Linear, and deferred weight gradients under MXFP8 are neither reproduced by our CPU "
         "stand-in nor verified on a GPU (primus_megatron/unsupported.py FP8_VERIFIED_TE_VERSIONS); drop it (the "
         "output layer is then megatron's own ColumnParallelLinear), or " + _NO_W),
)

RULES: tuple[Rule, ...] = (
    *LAYOUT_RULES,
    *FP8_RULES,
    *(Rule("fp4", _fp4_recipe_not_reproduced(recipe), _FP8_NOT_REPRODUCED.format(
        what=f"the {recipe} FP4 recipe ({why})", fix=_NO_W), flag="--fp4-format")
      for recipe, why in FP4_RECIPES_NOT_REPRODUCED.items()),
    Rule("tp_comm_overlap", _userbuffers_backward,
         "TransformerEngine's userbuffers overlap of the backward either refuses a delayed weight gradient (bulk "
         "wgrad overlap: NotImplementedError in module/linear.py and layernorm_linear.py) or gathers the tensors the "
         "delayed GEMM reads into a shared buffer that later layers overwrite before W (bulk dgrad and grad-output "
         "all-gather overlap); use a schedule without W ops (1f1b, interleaved-1f1b)"),
    Rule("defer_embedding_wgrad_compute", _truthy,
         "megatron computes the deferred output-layer weight gradient at the end of its own schedules "
         "(finish_embedding_wgrad_compute); the W ops of ours defer weight gradients already"),
    Rule("variable_seq_lengths", _truthy,
         "the pipeline sends fixed-shape activations; sequences of varying length need megatron's shape exchange"),
    Rule("context_parallel_size", lambda v, s: (v or 1) > 1 and s.uses_te is False,
         "context parallelism needs TransformerEngine attention (--transformer-impl transformer_engine)"),
    # TE v2.11 (attention/dot_product_attention/utils.py 436-465, 756-760; dot_product_attention.py 1396-1401):
    # flash and fused attention take fp16/bf16 only and unfused attention has no context parallelism, so fp32
    # under CP finds no backend at the first forward; refused here, before any rank starts
    Rule("context_parallel_size", lambda v, s: (v or 1) > 1 and s.uses_te is not False
         and not (s.get("bf16") or s.get("fp16")),
         "TransformerEngine has no context-parallel attention in fp32 (its flash and fused attention take fp16 or "
         "bf16 only, its unfused attention has no context parallelism); add --bf16 or --fp16"),
    # TE's hierarchical exchange (a2a inside a node, p2p ring across: hierarchical_context_parallel_sizes with
    # both levels > 1) is the one CP exchange no test of ours runs (the TE stand-in reproduces p2p, a2a and
    # all_gather, tests/test_production_matrix.py k-cp2-*): refused rather than accepted untested
    Rule("cp_comm_type", lambda v, s: (s.get("context_parallel_size") or 1) > 1 and "a2a+p2p" in (
        [v] if isinstance(v, str) else list(v or [])) and min(s.get("hierarchical_context_parallel_sizes") or [1]) > 1,
         "TransformerEngine's hierarchical a2a+p2p exchange is not verified with our schedules (p2p, a2a and all_gather "
         "are: docs/configurations.md); use --cp-comm-type p2p, a2a or all_gather"),
    # megatron-core 0.16.1 schedules.py:615 (forward_backward_no_pipelining): its own balancer over DP x CP,
    # pipeline size 1 only (Megatron-LM asserts it, arguments.py:918-919)
    Rule("hybrid_context_parallel", _truthy,
         "it is megatron's own schedule without pipelining (hybrid_context_parallel_forward_backward balances "
         "variable-length sequences over data x context parallel ranks, pipeline size 1)"),
    # accepted where the schedule has pairs: each pair runs through megatron's combined F&B step over the
    # model's schedule plan (runtime/combined.py)
    Rule("overlap_moe_expert_parallel_comm", _without_pairs,
         "it overlaps the expert all-to-all inside overlapped F&B pairs and this schedule has none; use dualpipev, "
         "or zbv with an all-to-all cost (a2a= in --pipeline-costs)"),
    # megatron's layer plan would then run the weight gradients (backward_dw) itself inside each pair
    # (model_chunk_schedule_plan.py:231,252,523 at core_v0.16.1), where our B/BW and W ops take them
    Rule("delay_wgrad_compute", lambda v, s: bool(v) and bool(s.get("overlap_moe_expert_parallel_comm")),
         "with --overlap-moe-expert-parallel-comm megatron's schedule plan runs the delayed weight gradients "
         "(backward_dw) inside each F&B pair, while our schedules' B, BW and W ops own them; drop it"),
    # megatron-core 0.19 moe_layer.py:780-800: _RegisterDelayedWgradForExperts calls backward_dw inside B
    Rule("overlap_dispatch_backward_with_experts_wgrad", lambda v, s: bool(v) and s.splits_backward,
         "it runs the experts' weight gradients (backward_dw) inside the dispatch's backward, in B, where the W ops "
         "of ours take them; use a schedule without W (1f1b, interleaved-1f1b) or drop it"),
    # megatron-core 0.19 (experts.py:286-290, 402-570; extensions TEFusedMLP): the fused MLP and the fused
    # grouped experts run te.pytorch.ops modules that hold the layers' parameters, not the TE Linear /
    # LayerNormLinear / GroupedLinear modules whose weight gradients te_wgrad routes to W
    Rule("use_transformer_engine_op_fuser", lambda v, s: bool(v) and s.splits_backward,
         "TransformerEngine's operation fuser runs the MLP's and the grouped experts' GEMMs as fused ops "
         "(te.pytorch.ops) that compute their weight gradients outside the TE layers whose weight gradients our "
         "W ops take; use a schedule without W (1f1b, interleaved-1f1b) or drop it"),
    Rule("fine_grained_activation_offloading", _truthy,
         "its offload and reload points follow megatron's own op order"),
    Rule("cuda_graph_impl", _cuda_graphs,
         "CUDA graphs capture megatron's own forward-backward (per layer or the whole iteration), not ours"),
    Rule("moe_grouped_gemm", lambda v, s: bool(v) and s.splits_backward and s.uses_te is False,
         "the legacy GroupedMLP computes expert weight gradients inside grouped GEMMs that cannot be deferred to W "
         "ops; use SequentialMLP (no --moe-grouped-gemm) or TransformerEngine's grouped experts"),
    Rule("tensor_parallel_num_weight_shards", _weight_shards("tensor_model_parallel_size", "gtp_weight_remat_size"),
         "GTP weight sharding all-gathers each weight before its layer runs and reduce-scatters its gradient in "
         "megatron's own order; keep as many weight shards as tensor-parallel ranks"),
    Rule("expert_tensor_parallel_num_weight_shards",
         _weight_shards("expert_tensor_parallel_size", "expert_gtp_weight_remat_size"),
         "GTP weight sharding of the experts all-gathers each weight before its layer runs and reduce-scatters "
         "its gradient in megatron's own order; keep as many expert weight shards as expert tensor-parallel ranks"),
    Rule("moe_paged_stash", _truthy,
         "its stash pages are reset at the start of each of megatron's own schedules and laid out in their op "
         "order"),
    Rule("use_megatron_fsdp", _truthy,
         "Megatron-FSDP gathers and frees parameters around megatron's own op order (and re-synchronises its "
         "gathers after forward-only calls), which the deferred weight gradients and V placement do not follow; "
         "use megatron's DistributedDataParallel (with --use-distributed-optimizer to shard optimizer state)"),
    Rule("recompute_granularity", lambda v, s: v == "full" and s.splits_backward,
         "full recompute rebuilds a layer's activations inside its backward and the W ops would hold them until "
         "later, undoing the recompute; use --recompute-granularity selective or a schedule without W ops "
         "(1f1b, interleaved-1f1b)"),
)


# Megatron-core 0.16.1 modules whose selective recompute runs through CheckpointWithoutOutput
# (transformer_layer.py:577 and 672 for "layernorm", moe/experts.py for "moe_act",
# multi_latent_attention.py for "mla_up_proj"): after the forward it frees the checkpointed
# output's storage (resize to 0) and its backward recomputes into that same storage.
_STORAGE_REFILLING_RECOMPUTE = ("layernorm", "moe_act", "mla_up_proj")


def _refills_storage(value: Any, s: Setting) -> bool:
    return s.get("recompute_granularity") == "selective" and any(m in _STORAGE_REFILLING_RECOMPUTE for m in value)


# Activation offload moves TransformerEngine's quantized tensors (FP8: their data, transposes and scale-inverses)
# through TE's own saving protocol, prepare_for_saving / restore_from_saved (runtime/quantized.py); the CPU
# reproduction of TE 2.11 (tests/te_standin) verifies it for the per-tensor recipes (tests/test_offload_fp8.py).
# Anything else under FP8 or FP4 is not reproduced, so not accepted with offload.
def _fp8_offload_recipe(recipe: str) -> Callable[[Any, Setting], bool]:
    def refuses(value: Any, s: Setting) -> bool:
        return bool(value) and fp8_recipe_of(s) == recipe
    return refuses


def _fp8_offload_version(value: Any, s: Setting) -> bool:
    recipe = fp8_recipe_of(s)
    return bool(value) and recipe not in FP8_RECIPES_NOT_REPRODUCED \
        and (_te_minor(installed_te_version()), recipe) not in FP8_CPU_REPRODUCED


_OFFLOAD_NOT_REPRODUCED = ("activation offload moves TransformerEngine's quantized tensors through TE's own saving "
                           "protocol, which our CPU reproduction of TransformerEngine 2.11 (tests/te_standin) verifies "
                           "for the delayed and tensorwise FP8 recipes only, not {what}; {fix}, or train without "
                           "--pipeline-offload")
OFFLOAD_FP8_RULES: tuple[Rule, ...] = (
    *(Rule("fp8", _fp8_offload_recipe(recipe), _OFFLOAD_NOT_REPRODUCED.format(
        what=f"the {recipe} FP8 recipe ({why})", fix="use --fp8-recipe delayed or tensorwise"),
        flag="--fp8-format", offload=True) for recipe, why in FP8_RECIPES_NOT_REPRODUCED.items()),
    Rule("fp8", _fp8_offload_version, _OFFLOAD_NOT_REPRODUCED.format(
        what="FP8 on another TransformerEngine version", fix="install TransformerEngine 2.11"),
        flag="--fp8-format", offload=True),
    Rule("fp8_param", lambda v, s: bool(v) and bool(s.get("fp8")), _OFFLOAD_NOT_REPRODUCED.format(
        what="FP8 parameters (fp8_model_init)", fix="drop it"), offload=True),
    *(Rule("fp4", lambda v, s, r=recipe: bool(v) and _recipe_name(s.get("fp4_recipe"), "nvfp4") == r,
           _OFFLOAD_NOT_REPRODUCED.format(what=f"the {recipe} FP4 recipe ({why})", fix="train in FP8"),
           flag="--fp4-format", offload=True)
      for recipe, why in FP4_RECIPES_NOT_REPRODUCED.items()),
)

OFFLOAD_RULES = (
    Rule("recompute_modules", _refills_storage,
         f"selective recompute of {', '.join(_STORAGE_REFILLING_RECOMPUTE)} frees an output's storage after the "
         "forward and recomputes into that same storage in backward, while offload copies the storages autograd "
         "saved to host and hands backward the copy, which the recompute never fills; recompute other modules "
         "(core_attn, mlp, moe) or drop --pipeline-offload", offload=True),
    Rule("cpu_offloading", _truthy,
         "megatron's layer-level CPU offloading moves the same saved activations with saved-tensor hooks of its "
         "own, and the inner hooks would take them from ours", offload=True),
    *OFFLOAD_FP8_RULES,
)


def refusals(setting: Setting) -> list[tuple[Rule, str]]:
    """Every refused option, in the table's order: (its rule, one sentence naming it)."""
    out = []
    for rule in RULES + (OFFLOAD_RULES if setting.offload != "off" else ()):
        value = setting.get(rule.field)
        if value is not None and rule.refuses(value, setting):
            shown = "" if value is True else f" {','.join(value) if isinstance(value, (list, tuple)) else value}"
            if rule.offload:
                out.append((rule, f"{rule.option}{shown} cannot be used with --pipeline-offload {setting.offload}: "
                                  f"{rule.why}"))
            else:
                out.append((rule, f"{rule.option}{shown} cannot be used with --pipeline-schedule {setting.schedule}: "
                                  f"{rule.why} (or drop --pipeline-schedule for megatron's own schedule)"))
    return out


def first_refusal(setting: Setting) -> Optional[str]:
    """One sentence naming the first refused option, or None."""
    found = refusals(setting)
    return found[0][1] if found else None


def refusal_for(obj: Any, *, schedule: str, splits_backward: bool, v_placement: bool,
                uses_te: Optional[bool], also: tuple = (), offload: str = "off",
                pairs: Optional[bool] = None) -> Optional[str]:
    """`first_refusal` over an object with the fields as attributes (a TransformerConfig or
    Megatron-LM's argument namespace); a field `obj` lacks is looked up in `also` (e.g. the
    model chunks' DistributedDataParallelConfig), in order."""
    return first_refusal(setting_of(obj, schedule=schedule, splits_backward=splits_backward, v_placement=v_placement,
                                    uses_te=uses_te, also=also, offload=offload, pairs=pairs))


def setting_of(obj: Any, *, schedule: str, splits_backward: bool, v_placement: bool, uses_te: Optional[bool],
               also: tuple = (), offload: str = "off", pairs: Optional[bool] = None) -> Setting:
    """The Setting of an object with the fields as attributes (see `refusal_for`)."""
    def get(name: str) -> Any:
        for source in (obj, *also):
            value = getattr(source, name, None)
            if value is not None:
                return value
        return None

    return Setting(schedule, splits_backward, v_placement, uses_te, get, offload, pairs)


def depends_on_installed_te(rule: Rule) -> bool:
    """Whether the rule's answer depends on the TransformerEngine installed where it is evaluated (its version
    and platform): a CPU dry run judges it for its own TransformerEngine, not the cluster's."""
    return rule in FP8_RULES or rule.refuses is _fp8_offload_version or (rule.field == "fp4" and not rule.offload)


_FP8_BASIS_LOGGED: set = set()


def fp8_basis_note(recipe: str) -> Optional[str]:
    """The start-up line for FP8 with W ops over TE layers: which (version, platform) pairs a GPU has verified
    and, unless this one is among them, that this run rests on the CPU reproduction (None when refused)."""
    basis = fp8_with_w_basis(recipe)
    if basis is None:
        return None
    verified = ", ".join(f"{v} on {p}" for v, p in sorted(FP8_VERIFIED_TE_VERSIONS)) or "none yet"
    here = f"TransformerEngine {installed_te_version()} on {te_platform()}"
    if basis == "gpu":
        return f"FP8 with deferred weight gradients: {here} was verified on a GPU (verified: {verified})"
    return (f"FP8 with deferred weight gradients: verified on a GPU for {verified}; {here} with the {recipe} recipe "
            f"rests on the CPU reproduction of TransformerEngine 2.11 (tests/te_standin, primus_megatron/"
            f"unsupported.py FP8_CPU_REPRODUCED), not on a GPU run")


def log_fp8_basis_once(recipe: str) -> None:
    """Logs fp8_basis_note once per process and recipe (primus_megatron logger, INFO)."""
    note = fp8_basis_note(recipe)
    if note is None or recipe in _FP8_BASIS_LOGGED:
        return
    _FP8_BASIS_LOGGED.add(recipe)
    import logging

    logging.getLogger("primus_megatron").info(note)
