"""Dropout that does not depend on the pipeline schedule.

Megatron draws dropout masks from one RNG stream per rank, so how many ops a
rank ran before (its stages, its order) changes the masks, and two schedules
of the same model give different losses. Here every transformer layer (and
the embedding) reseeds the RNG from (seed, iteration, microbatch, layer
number) right before its forward: masks depend only on what is computed, and
every schedule, pipeline size and placement trains identically.
"""
from __future__ import annotations

from typing import Callable

import torch


def _seed(base: int, iteration: int, layer: int, mb: int) -> int:
    return (base * 1_000_003 + iteration * 10_007 + mb * 101 + layer) % (2 ** 31)


def _reseed(value: int) -> None:
    if not torch.cuda.is_available():
        # CPU: only the CPU generator draws. torch.manual_seed would also queue a lazy CUDA seeding with
        # the Python stack formatted for it: 1 ms a call against 0.04 ms (every layer's every forward)
        torch.default_generator.manual_seed(value)
        return
    torch.manual_seed(value)
    # tensor-parallel regions draw from megatron's own tracker states
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    model_parallel_cuda_manual_seed(value)


def install(model: list, seed: int, iteration: Callable[[], int]) -> None:
    """Reseed before each layer's forward (layer 0 = the embedding); `iteration()` is the
    training loop's current iteration."""
    from megatron.core.transformer.transformer_layer import TransformerLayer

    for chunk in model:
        for module in chunk.modules():
            if isinstance(module, TransformerLayer):
                layer = module

                def hook(mod, args, layer=layer):
                    _reseed(_seed(seed, iteration(), layer.layer_number, getattr(layer, "current_microbatch", 0) or 0))

                module.register_forward_pre_hook(hook)
            elif type(module).__name__ == "LanguageModelEmbedding":
                def hook(mod, args, chunk=chunk):
                    mb = 0
                    for m in chunk.modules():
                        if isinstance(m, TransformerLayer):
                            mb = getattr(m, "current_microbatch", 0) or 0
                            break
                    _reseed(_seed(seed, iteration(), 0, mb))

                module.register_forward_pre_hook(hook)
