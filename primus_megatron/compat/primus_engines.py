"""AMD's Primus (github.com/AMD-AGI/Primus) brings pipeline engines of its own, which cannot run beside
ours in one process: its `patch_zero_bubble` / `patch_primus_pipeline` replace Megatron-LM's
`get_forward_backward_func`, the same function our plugin replaces, and its TransformerEngine patch
swaps TE's `WeightGradStore` so that every TE module delays its weight gradient (our router then
refuses a delayed GroupedLinear built so, or routes layers whose queue Primus's engine drains). Its
Primus-Turbo layer spec replaces TE's Linear with its own, whose weight gradients we do not split (they
stay in B). `conflict()` names the patches that are active in this process (Primus's modules live
under the top-level package `primus`)."""
from __future__ import annotations

import sys
from typing import Optional


def _from_primus(obj) -> bool:
    module = getattr(obj, "__module__", "") or ""
    return module == "primus" or module.startswith("primus.")


def conflict() -> Optional[str]:
    """One sentence naming AMD Primus's active pipeline patches, or None."""
    found = []
    training = sys.modules.get("megatron.training.training")
    if training is not None and _from_primus(getattr(training, "get_forward_backward_func", None)):
        found.append("its pipeline schedules (patch_zero_bubble / patch_primus_pipeline replace Megatron-LM's "
                     "get_forward_backward_func)")
    common = sys.modules.get("transformer_engine.pytorch.module._common")
    if common is not None and _from_primus(getattr(common, "WeightGradStore", None)):
        found.append("its TransformerEngine WeightGradStore patch (every TE module delays its weight gradient)")
    if not found:
        return None
    return (f"AMD Primus's {' and '.join(found)} are active in this process, and --pipeline-schedule replaces the "
            f"same functions: turn Primus's zero-bubble / pipeline patches off in its config, or drop "
            f"--pipeline-schedule to run Primus's own")
