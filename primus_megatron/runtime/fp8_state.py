"""TransformerEngine's delayed-scaling state, copied before a post-validation prefix and put back
when the prefix is redone.

Under FP8 with delayed scaling (TE's `DelayedScaling`, megatron's `--fp8-recipe delayed`) every cast
records its tensor's amax into row 0 of its module's amax history, and leaving the outermost autocast
with gradients enabled (megatron: each chunk's forward) MAX-reduces those over the amax group, rolls
every history and recomputes every scale (TE v2.11 `pytorch/quantization.py` 496-548, 600-610); the
end of the first module's backward does the same for the backward tensors. A post-validation prefix
(the rank's leading forwards, run before the previous optimizer step is validated) does that with
parameters a failed validation then replaces; redone, it would record and roll a second time where
megatron's own schedule ran each forward once, and the scales of every later cast would differ. So
the prefix starts from a copy of each module's histories and scales (`module.fp8_meta["scaling_fwd"]`
/ `["scaling_bwd"]`: `amax_history`, `scale`, TE's `DelayedScalingRecipeState`, 1049-1096) and a redo
copies it back in place: the global amax buffers hold views of those same tensors (360-411), and
each quantizer's scale and amax are views of them too. Current scaling keeps no state between casts;
the cached FP8 weights are re-cast by the redone first microbatch (`is_first_microbatch`).
"""
from __future__ import annotations

from typing import Sequence

import torch

_STATES = ("scaling_fwd", "scaling_bwd")


def delayed_scaling_tensors(chunks: Sequence[torch.nn.Module]) -> list:
    """Every amax history and scale of the TE modules in `chunks` (empty without delayed scaling)."""
    out, seen = [], set()
    for chunk in chunks:
        for module in chunk.modules():
            meta = getattr(module, "fp8_meta", None)
            if not isinstance(meta, dict):
                continue
            for key in _STATES:
                for name in ("amax_history", "scale"):
                    tensor = getattr(meta.get(key), name, None)
                    if isinstance(tensor, torch.Tensor) and id(tensor) not in seen:
                        seen.add(id(tensor))
                        out.append(tensor)
    return out


class DelayedScalingSnapshot:
    """A copy of the delayed-scaling state of `chunks`, restorable in place (nothing when there is none)."""

    def __init__(self, chunks: Sequence[torch.nn.Module]) -> None:
        self.tensors = delayed_scaling_tensors(chunks)
        self.copies = [t.detach().clone() for t in self.tensors]

    @torch.no_grad()
    def restore(self) -> None:
        for tensor, copy in zip(self.tensors, self.copies):
            tensor.copy_(copy)
