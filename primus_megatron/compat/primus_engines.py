"""AMD's Primus (github.com/AMD-AGI/Primus) brings pipeline engines of its own, which cannot run beside
ours in one process: its `patch_zero_bubble` / `patch_primus_pipeline` replace Megatron-LM's
`get_forward_backward_func`, the same function our plugin replaces, and its TransformerEngine patch
swaps TE's `WeightGradStore` so that every TE module delays its weight gradient (our router then
refuses a delayed GroupedLinear built so, or routes layers whose queue Primus's engine drains). Primus
patches that class's methods in place (`te_wgrad_store.py` `patch_weight_grad_store` assigns `__init__`,
`put` and `pop`; the class keeps TE's module name), and it applies its pipeline patches in its
`before_train` phase, after Megatron-LM's `validate_args`: so the check looks at the methods, and runs
again before a schedule's first step (`runtime.forward_backward`). Its
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
        found.append("patch_zero_bubble / patch_primus_pipeline replace Megatron-LM's get_forward_backward_func")
    common = sys.modules.get("transformer_engine.pytorch.module._common")
    store = getattr(common, "WeightGradStore", None) if common is not None else None
    if store is not None and (_from_primus(store) or any(_from_primus(getattr(store, name, None))
                                                         for name in ("__init__", "put", "pop"))):
        found.append("its TransformerEngine WeightGradStore patch makes every TE module delay its weight gradient")
    if not found:
        return None
    return (f"AMD Primus's pipeline patches are active in this process ({'; '.join(found)}), and --pipeline-schedule "
            f"replaces the same functions: turn Primus's zero-bubble / pipeline patches off in its config, or drop "
            f"--pipeline-schedule to run Primus's own")
