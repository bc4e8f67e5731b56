"""Multi-token prediction (MTP) under any placement: where its layers go, and under V
the one embedding they read.

megatron-core places the MTP block (multi_token_prediction.py at core_v0.16.1:
`get_mtp_num_layers_to_build` 521, which the MTP block spec asks; core_v0.19.0's GPTModel
also asks `mtp_on_this_rank`, 615) from parallel_state: the last pipeline rank's last
virtual stage (`is_pipeline_last_stage(ignore_virtual=False, vp_stage)`), or the stage of
the layout's 'm', read as `layout[pp_rank][vp_stage]` with parallel_state's rank. Both go
wrong for chunks built one by one without a virtual pipeline size in parallel_state (every
chunk of the last rank would get the block) and under V (rank 0's second chunk holds the
last stage). `placement_functions` answers both by global stage
(`layer_split.mtp_stage`), whatever the placement.

On the MTP stage GPTModel builds an embedding of its own (gpt_model.py:149): a copy of the
first stage's, zeroed and all-reduced over megatron's embedding group at construction
(language_module.py:207-245), its gradient summed with the first stage's in
finalize_model_grads (`_allreduce_word_embedding_grads`). Under V both stages are rank 0's:
`share_embedding` hands the MTP chunk chunk 0's embedding module itself, so the embedding
(and the tied output layer) has one Parameter and one gradient, and no all-reduce joins
them (runtime/forward_backward.py gives finalize_model_grads a one-rank embedding group).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Optional

import torch

from .. import schedules as S
from ..schedules import layer_split

def _rank(pp_rank: Optional[int]) -> int:
    from megatron.core import parallel_state

    return parallel_state.get_pipeline_model_parallel_rank() if pp_rank is None else pp_rank


def _chunks(chunks: Optional[int], config: Any = None) -> int:
    """Chunks per rank: given, else the config's or parallel_state's virtual pipeline size."""
    if chunks:
        return chunks
    vp = getattr(config, "virtual_pipeline_model_parallel_size", None)
    if not vp:
        from megatron.core import parallel_state

        vp = parallel_state.get_virtual_pipeline_model_parallel_world_size()
    return vp or 1


def _mtp_stage(layout: Any, mtp_num_layers: Optional[int], stages: int) -> Optional[int]:
    split = layer_split.LayerSplit(1, layout=layer_split.layout_text(layout), mtp=mtp_num_layers or None)
    return layer_split.mtp_stage(split, stages)


def placement_functions(pp: int, placement: str, chunks: Optional[int]) -> dict[str, Callable[[Callable], Callable]]:
    """{name: make(original) -> replacement} for megatron's MTP placement functions."""
    def layers_to_build(original: Callable) -> Callable:
        def get_mtp_num_layers_to_build(config, vp_stage=None, pp_rank=None, *args, **kwargs) -> int:
            n = pp * _chunks(chunks, config)
            stage = S.stage_of(placement, pp, _rank(pp_rank), vp_stage or 0)
            held = stage == _mtp_stage(config.pipeline_model_parallel_layout, config.mtp_num_layers, n)
            return (config.mtp_num_layers or 0) if held else 0
        return get_mtp_num_layers_to_build

    def on_this_rank(original: Callable) -> Callable:
        signature = inspect.signature(original)

        def mtp_on_this_rank(*args, **kwargs) -> bool:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            given = bound.arguments
            config = given.get("config")  # core_v0.16.1: (config, ...); core_v0.19.0: (layout, mtp_num_layers, ...)
            layout = getattr(config, "pipeline_model_parallel_layout", None) if config is not None \
                else given.get("layout")
            layers = getattr(config, "mtp_num_layers", None) if config is not None else given.get("mtp_num_layers")
            nchunks = _chunks(chunks, config)
            target = _mtp_stage(layout, layers, pp * nchunks)
            rank = _rank(None)
            if not given.get("ignore_virtual", True) and given.get("vp_stage") is not None:
                return S.stage_of(placement, pp, rank, given["vp_stage"]) == target
            return any(S.stage_of(placement, pp, rank, c) == target for c in range(nchunks))
        return mtp_on_this_rank

    return {"get_mtp_num_layers_to_build": layers_to_build, "mtp_on_this_rank": on_this_rank}


def share_embedding(first: torch.nn.Module, last: torch.nn.Module) -> bool:
    """Under V: rank 0's MTP chunk (`last`, the loss stage) reads chunk 0's embedding module
    instead of its own copy (see the module doc). The module is not registered in `last`, so a
    data-parallel wrapper or optimizer per chunk sees its parameters once (in chunk 0).
    Returns whether `last` held MTP layers and an embedding of its own."""
    if not getattr(last, "mtp_process", False) or getattr(last, "pre_process", False) \
            or getattr(last, "embedding", None) is None:
        return False
    del last.embedding  # nn.Module removes the registered copy
    object.__setattr__(last, "embedding", first.embedding)  # read through the attribute, as GPTModel reads it
    original = last.sharded_state_dict

    def sharded_state_dict(*args, **kwargs):
        # GPTModel ties the MTP stage's embedding copy into the checkpoint as a replica of the
        # first stage's (gpt_model.py:834); here chunk 0 saves the one embedding itself
        last.mtp_process = False
        try:
            return original(*args, **kwargs)
        finally:
            last.mtp_process = True

    last.sharded_state_dict = sharded_state_dict
    return True


# The per-step sums megatron's MTP loss tracker keeps (MTPLossLoggingHelper.tracker): core_v0.16.1's
# "values", core_v0.19.0's "loss_values" and its acceptance counts; its "cumulative_*" entries are the
# logging rank's own history.
TRACKED = ("values", "loss_values", "correct_values", "total_values")


def hand_over_tracker(p2p, rank: int, holder: int, last: int, device: torch.device) -> None:
    """After a training step: the MTP losses the holder of the MTP block tracked move to the last
    pipeline rank, where Megatron-LM's training_log reads, reduces and logs them ("mtp_1 loss",
    track_mtp_metrics at every iteration: training.py:1990-1994 at core_v0.16.1) as it does after
    megatron's own schedules, which compute them there. The holder keeps none (its own log call finds
    nothing, as any rank without MTP layers); every data-parallel replica's pair does the same."""
    from megatron.core import parallel_state
    from megatron.core.transformer.multi_token_prediction import MTPLossLoggingHelper

    from .loss_handover import receive_losses, send_losses

    if holder == last or rank not in (holder, last):
        return
    tracker = MTPLossLoggingHelper.tracker
    if rank == holder:
        send_losses(p2p, [{key: tracker.pop(key) for key in TRACKED if key in tracker}], to=last, device=device)
        return
    (sums,) = receive_losses(p2p, source=holder, device=device)
    for key, value in sums.items():
        tracker[key] = tracker[key] + value if key in tracker else value.clone()
    if sums:  # what the holder's save_loss_to_tracker set, for this rank's data-parallel peers
        tracker["reduce_group"] = None
        tracker["avg_group"] = parallel_state.get_data_parallel_group(with_context_parallel=True)
