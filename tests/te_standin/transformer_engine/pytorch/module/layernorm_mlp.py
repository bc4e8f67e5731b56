"""TE v2.11 ``pytorch/module/layernorm_mlp.py`` (``LayerNormMLP``), refused by name: megatron-core
0.16.1 and 0.19 never build it (their TE layer specs make the MLP of ``TELayerNormColumnParallelLinear``
and ``TERowParallelLinear``; 0.19 names it only in a comment, ``custom_layers/batch_invariant_kernels.py``),
so the stand-in does not reproduce it."""
from __future__ import annotations


class LayerNormMLP:
    def __init__(self, *args, **kwargs) -> None:
        raise NotImplementedError("the TransformerEngine stand-in does not reproduce LayerNormMLP: megatron-core "
                                  "0.16.1 and 0.19 never build it")
