"""Grouped-expert layouts whose weight gradients our W ops cannot take, named at start-up.

Our W ops defer a grouped-expert layer's weight gradients when each expert has a parameter of its own:
TransformerEngine's `GroupedLinear` as built by default (`weight{i}`, `bias{i}`; runtime/te_wgrad.py). Two
other layouts keep the experts in one stacked parameter; both are refused with W ops, in one sentence naming
the layout and what to use instead, because neither can give each expert's gradient to its own W once:

* TE `GroupedLinear(single_grouped_weight=True)` (and `single_grouped_bias`): added in TE v2.14 (commit
  f031cf87, `transformer_engine/pytorch/module/grouped_linear.py`: argument 635; `make_grouped_weights`,
  762-818, registers one `weight` parameter and sets `weight{i}` to None, 805-813); since v2.15 it takes
  effect only with `NVTE_GROUPED_LINEAR_SINGLE_PARAM=1` (`utils.py:85-112`: the argument alone falls back
  to per-expert parameters with a warning). Its backward still hands `put` one weight-gradient buffer per
  expert (v2.14 grouped_linear.py:467-485), and TE's own `backward_dw` assigns them as `.grad` of the
  per-expert views `_get_weight_tensors` splits off the grouped tensor (1106-1110; 1164-1171), not of the
  `weight` parameter, in every release through v2.18: unfused, the grouped parameter gets no weight gradient
  (TE issue #3234); TE's main branch fixed it after v2.18 (#3224, 2d80391f). megatron-core 0.19 reaches it
  only through `--moe-single-grouped-weight`, which it accepts only with the op fuser
  (`transformer/transformer_config.py:1567-1584`: "The non-op-fuser TE GroupedLinear path ... does not
  support single-grouped-weight training"), also refused with W ops (primus_megatron/unsupported.py).
* ROCm TransformerEngine's `GroupedLinearV2` (ROCm/TransformerEngine, commit 9ee5f14b,
  `transformer_engine/pytorch/module/grouped_linear_v2.py`): a `TransformerEngineBaseModule`, not a
  `GroupedLinear`, with one `weight` [experts, out, in] and one `bias` [experts, out]. Delayed, its backward
  `put`s per-expert views of one stacked gradient and returns a dummy (fused) or None in B; its
  `backward_dw` adds the stacked gradient to `weight.grad` and never calls the layer's DDP hooks, and its
  constructor marks no parameter `skip_backward_post_hook`. Undelayed, its weight gradient is computed in B:
  under a schedule with W ops it would stay there, silently. Routing it would need that layout reproduced
  in tests/te_standin (stacked gradient views, or one stacked tensor under its Triton GEMMs) and verified;
  until then it is refused.
"""
from __future__ import annotations

from typing import Optional

import torch

NO_W = "a schedule without W (1f1b, interleaved-1f1b)"


def _stacked_parameters(layer: torch.nn.Module) -> list:
    """The parameters named `weight` / `bias` directly on a grouped layer (one stacked tensor for all experts)."""
    return [n for n in ("weight", "bias") if isinstance(layer._parameters.get(n), torch.nn.Parameter)]


def problem(layer: torch.nn.Module, name: str, *, split_class: bool) -> Optional[str]:
    """One sentence on why the grouped-expert `layer` cannot defer its weight gradients to W ops, or None.
    `split_class`: it is TE's GroupedLinear (a class te_wgrad splits); otherwise any other TE module."""
    if not hasattr(layer, "num_gemms"):
        return None
    who = f"TransformerEngine layer {name or type(layer).__name__} ({type(layer).__name__})"
    if split_class:
        flags = [f for f in ("single_grouped_weight", "single_grouped_bias") if getattr(layer, f, False)]
        stacked = _stacked_parameters(layer)
        if not (flags or stacked):
            return None
        what = ", ".join(flags) or "one grouped " + " and ".join(stacked)
        return (f"{who} keeps all {layer.num_gemms} experts in one grouped parameter ({what}: TransformerEngine "
                f"2.14+, with NVTE_GROUPED_LINEAR_SINGLE_PARAM=1 since 2.15, megatron-core 0.19's "
                f"--moe-single-grouped-weight / --moe-single-grouped-bias), whose weight gradient our W ops cannot "
                f"take per expert (TE's own backward_dw leaves it on per-expert views through TE 2.18, TE issue "
                f"#3234): build it with one weight per expert (unset NVTE_GROUPED_LINEAR_SINGLE_PARAM, drop "
                f"--moe-single-grouped-weight), or use {NO_W}")
    if _stacked_parameters(layer):
        return (f"{who} is a grouped-expert layer with its experts stacked in one parameter (ROCm "
                f"TransformerEngine's GroupedLinearV2 layout), whose weight gradients our W ops do not split (its "
                f"backward computes them in B, or its own backward_dw runs them without megatron's DDP hooks): use "
                f"TransformerEngine's GroupedLinear (megatron's TEGroupedMLP, --moe-grouped-gemm), or use {NO_W}")
    return None
