"""Build this rank's model chunks for a schedule's placement.

Megatron-core decides which layers a chunk holds from (vp_stage, pp_rank)
with its loop placement `stage = vp_stage * pp + pp_rank`
(`get_num_layers_to_build`, `get_transformer_layer_offset`). For the V
placement we translate the chunk's global stage S back into the loop pair
(S // pp, S % pp) while the provider runs, so stage S gets exactly the layers
loop stage S would get: layer numbers stay global, any megatron split carries
over, and checkpoints map by layer number whatever the schedule.

Uneven splits (megatron-core 0.16.1; `schedules/layer_split.py` computes the
same split in pure Python and is checked against these two functions):

* `num_layers_in_first_pipeline_stage` / `num_layers_in_last_pipeline_stage`
  (Megatron-LM's --decoder-first/last-pipeline-num-layers) count the layers
  of the first / last *pipeline rank*. With a virtual pipeline (vp chunks per
  rank) megatron does not apply them to the first / last virtual stage only
  and needs no `pipeline_model_parallel_layout`: each of that rank's vp
  chunks gets count / vp layers (a multiple of vp is required) and the middle
  ranks' chunks share the rest evenly. As global stages, with 2 chunks: F/2
  layers in stages 0 and pp, L/2 in stages pp-1 and 2pp-1. Under V, rank 0
  (stages 0 and 2pp-1) and rank pp-1 (stages pp-1 and pp) then each hold
  F/2 + L/2 layers. megatron-core divides by zero when pp = 2, vp > 1 and both
  are given (giving only the first count is the same split), and builds
  negative layer counts when they exceed the layers; both are refused here.
* `account_for_embedding_in_pipeline_split` / `account_for_loss_in_pipeline_split`
  count the embedding / the loss as one layer of the split and place it in
  the global first / last *virtual* stage only, which builds one transformer
  layer fewer (possibly none). Under V both of these stages are rank 0's, so
  rank 0, which computes the embedding, the output layer and the loss, holds
  two layers fewer than the other ranks: the way to make rank 0's two chunks
  together no heavier than another rank's.
* `pipeline_model_parallel_layout` writes out every global stage's layers.
  Its object reads the pipeline rank from parallel_state rather than from
  the caller, so under V its own two lookups (`get_num_layers_to_build`,
  `get_layer_offset`; `get_layer_id_list` goes through them) are remapped
  too, and the module functions leave a layout config to them.
"""
from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Callable, Optional, Union

import torch

from .. import schedules as S
from ..schedules import layer_split
from ..schedules.errors import ScheduleError
from . import mtp, te_wgrad

if TYPE_CHECKING:
    from ..options import PipelineSpec

def _loop_pair(pp: int, placement: str, vp_stage: Optional[int], pp_rank: Optional[int]) -> tuple[Optional[int], int]:
    from megatron.core import parallel_state

    rank = parallel_state.get_pipeline_model_parallel_rank() if pp_rank is None else pp_rank
    if vp_stage is None:
        return None, rank
    stage = S.stage_of(placement, pp, rank, vp_stage)
    return stage // pp, stage % pp


def _layout_lookups(pp: int, placement: str) -> dict[str, Callable]:
    """megatron's layout object's two lookups, answered from its table for the
    loop pair of (vp_stage, pp_rank) under `placement`. megatron's own methods
    read the pipeline rank from parallel_state and take the virtual stage as 0
    while no virtual pipeline size is set there (a model built chunk by chunk,
    as `build_model` does, sets none)."""
    from megatron.core.transformer.enums import LayerType

    def num_layers(self, layer_type=LayerType.decoder, vp_stage=None, pp_rank=None):
        vp, rank = _loop_pair(pp, placement, vp_stage, pp_rank)
        return self.layout[rank][vp or 0].count(layer_type)

    def offset(self, layer_type=LayerType.decoder, vp_stage=None, pp_rank=None):
        vp, rank = _loop_pair(pp, placement, vp_stage, pp_rank)
        before = (vp or 0) * pp + rank  # loop stages come before this one in layer order
        return sum(self.layout[s % pp][s // pp].count(layer_type) for s in range(before))

    num_layers._primus_placement = offset._primus_placement = (pp, placement)
    return {"get_num_layers_to_build": num_layers, "get_layer_offset": offset}


@contextlib.contextmanager
def layer_placement(pp: int, placement: str, chunks: Optional[int] = None):
    """Within the context, megatron's layer split follows `placement`: its two
    split functions (and a layout's lookups) get the loop pair of the chunk's
    global stage, and its MTP placement functions answer by global stage
    (runtime/mtp.py; `chunks` per rank, else the config's or parallel_state's
    virtual pipeline size)."""
    from megatron.core.transformer import transformer_block, transformer_layer
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    patched = []
    if getattr(PipelineParallelLayerLayout.get_layer_offset, "_primus_placement", None) != (pp, placement):
        for name, fn in _layout_lookups(pp, placement).items():
            patched.append((PipelineParallelLayerLayout, name, PipelineParallelLayerLayout.__dict__[name]))
            setattr(PipelineParallelLayerLayout, name, fn)
    replacements = {}  # name -> (original, replacement)
    originals = {
        "get_transformer_layer_offset": transformer_layer.get_transformer_layer_offset,
        "get_num_layers_to_build": transformer_block.get_num_layers_to_build,
    }
    already = getattr(originals["get_transformer_layer_offset"], "_primus_placement", None) == (pp, placement)
    if placement != S.LOOP and not already:  # (already: e.g. installed for the whole run by megatron_lm.install)
        def remapped(original):
            def fn(config, vp_stage=None, pp_rank=None, *args, **kwargs):
                if getattr(config, "pipeline_model_parallel_layout", None) is not None:
                    return original(config, vp_stage, pp_rank, *args, **kwargs)  # the layout's lookups remap
                vp, rank = _loop_pair(pp, placement, vp_stage, pp_rank)
                return original(config, vp, rank, *args, **kwargs)

            return fn

        replacements.update({name: (fn, remapped(fn)) for name, fn in originals.items()})
    replacements.update(_mtp_replacements(pp, placement, chunks))
    for original, fn in replacements.values():
        fn._primus_placement = getattr(fn, "_primus_placement", (pp, placement))
    for module in list(sys.modules.values()):
        if module is None or not getattr(module, "__name__", "").startswith("megatron.core"):
            continue
        for name, (original, fn) in replacements.items():
            if getattr(module, name, None) is original:
                setattr(module, name, fn)
                patched.append((module, name, original))
    try:
        yield
    finally:
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)


def _mtp_replacements(pp: int, placement: str, chunks: Optional[int]) -> dict:
    """megatron's MTP placement functions answered by global stage (runtime/mtp.py), unless
    replacements for the same pipeline are in place already."""
    from megatron.core.transformer import multi_token_prediction

    out = {}
    for name, make in mtp.placement_functions(pp, placement, chunks).items():
        original = getattr(multi_token_prediction, name, None)
        if original is None or getattr(original, "_primus_placement", None) == (pp, placement, chunks):
            continue
        fn = make(original)
        fn._primus_placement = (pp, placement, chunks)
        out[name] = (original, fn)
    return out


def _unwrap(module: torch.nn.Module) -> torch.nn.Module:
    while hasattr(module, "module"):
        module = module.module
    return module


def _untie_group(placement: str):
    """V placement keeps embedding and output layer on rank 0: no cross-rank
    copy of the tied weight at construction (we share the Parameter instead)."""
    if placement != S.V:
        return contextlib.nullcontext()
    from megatron.core.models.common.language_module.language_module import LanguageModule

    @contextlib.contextmanager
    def ctx():
        original = LanguageModule._is_in_embd_group
        LanguageModule._is_in_embd_group = lambda self: False
        try:
            yield
        finally:
            LanguageModule._is_in_embd_group = original

    return ctx()


def build_model(provider: Callable[..., torch.nn.Module], *, schedule: Union[str, S.Schedule, PipelineSpec],
                chunks: Optional[int] = None, pp: Optional[int] = None, rank: Optional[int] = None,
                num_layers: Optional[int] = None, config=None) -> list[torch.nn.Module]:
    """This rank's chunks for `schedule`'s placement (a registered name with `chunks`, a
    Schedule, or a PipelineSpec).

    `provider(pre_process, post_process, vp_stage)` is Megatron-LM's
    model-provider contract (keyword arguments). Chunk c holds global stage
    `stage_of(placement, pp, rank, c)`; pre_process is set on stage 0 and
    post_process on the last stage. With V placement and tied embeddings,
    rank 0's output layer shares the embedding Parameter. For a schedule with W
    ops, TransformerEngine layers are routed to our weight-gradient store
    (`te_wgrad.enable`, which refuses a TE that cannot defer them in one
    sentence): wrap the chunks in megatron's DistributedDataParallel with
    `DistributedDataParallelConfig(delay_wgrad_compute=True)` when they hold any.
    A schedule without W ops leaves them TE's own (any TE runs it).

    The layer split is megatron's, even or uneven (see the module doc), under
    every placement. Given `config` (the provider's TransformerConfig) or
    `num_layers`, a split that cannot be built for this schedule is refused
    (ScheduleError, one sentence) before any chunk is built; each built chunk
    of megatron's TransformerBlock must hold the layers its global stage
    should (a provider whose config disagrees with the schedule, e.g. in its
    virtual pipeline size, is refused too).
    """
    from megatron.core import parallel_state

    from ..options import PipelineSpec, from_options

    spec = schedule if isinstance(schedule, PipelineSpec) else from_options(schedule, chunks=chunks)
    name, placement, nchunks, w_ops = spec.name, spec.placement, spec.chunks, spec.splits_backward
    pp = parallel_state.get_pipeline_model_parallel_world_size() if pp is None else pp
    rank = parallel_state.get_pipeline_model_parallel_rank() if rank is None else rank
    n = pp * nchunks
    what = f"pipeline schedule {name!r}"
    if config is not None:
        split = layer_split.LayerSplit.from_config(config)
    elif num_layers is not None:
        split = layer_split.LayerSplit(num_layers)
    else:
        split = None
    names = layer_split.CONFIG if config is not None else layer_split.CLI
    problem = layer_split.check(split, pp, nchunks, what, w_ops=w_ops, names=names)
    if problem:
        raise ScheduleError(problem)
    model = []
    with layer_placement(pp, placement, nchunks), _untie_group(placement):
        for c in range(nchunks):
            stage = S.stage_of(placement, pp, rank, c)
            chunk = provider(pre_process=stage == 0, post_process=stage == n - 1,
                             vp_stage=c if nchunks > 1 else None)
            chunk.pipeline_stage, chunk.pipeline_num_stages = stage, n
            _check_layers(chunk, stage, pp, nchunks, what)
            if w_ops:  # TransformerEngine layers defer into our store (no-op without TE); without W they stay TE's
                te_wgrad.enable(chunk, what=f"pipeline schedule {name!r}")
            model.append(chunk)
    if placement == S.V and rank == 0:
        _tie_embeddings(model)
    patch_float16_module()
    return model


def _check_layers(chunk: torch.nn.Module, stage: int, pp: int, chunks: int, what: str) -> None:
    """A chunk built on megatron's TransformerBlock holds the global layers of its stage."""
    from megatron.core.transformer.transformer_block import TransformerBlock

    inner = _unwrap(chunk)
    block, config = getattr(inner, "decoder", None), getattr(inner, "config", None)
    if not isinstance(block, TransformerBlock) or config is None or not isinstance(getattr(config, "num_layers", None), int):
        return
    try:
        expected = layer_split.stage_ranges(layer_split.LayerSplit.from_config(config), pp, chunks)[stage]
    except ScheduleError as exc:
        raise ScheduleError(f"the provider's TransformerConfig cannot be split for {what}: {exc}") from None
    held = [layer.layer_number for layer in block.layers]
    if held != list(expected):
        vp = getattr(config, "virtual_pipeline_model_parallel_size", None)
        cpp = getattr(config, "pipeline_model_parallel_size", None)
        raise ScheduleError(f"global stage {stage} of {what} was built with layers {held} instead of "
                            f"{list(expected)}: the provider's TransformerConfig must have "
                            f"pipeline_model_parallel_size={pp} and virtual_pipeline_model_parallel_size="
                            f"{chunks if chunks > 1 else None} (it has {cpp} and {vp})")


def patch_float16_module() -> None:
    """Make megatron's Float16Module convert at the global first and last stage.

    It upcasts outputs to fp32 when `vp_stage` is the last virtual stage *and* the
    rank is the last pipeline rank (and casts inputs on rank 0's chunk 0): right
    for the loop placement, wrong under V, where the loss stage is rank 0's chunk
    1. For modules built here (they carry `pipeline_stage`), decide by global
    stage; any other module keeps megatron's behaviour."""
    from megatron.core.transformer import module as mmodule

    cls = mmodule.Float16Module
    if getattr(cls.forward, "_primus", False):
        return
    original = cls.forward

    def forward(self, *inputs, fp32_output=True, **kwargs):
        stage = getattr(self.module, "pipeline_stage", None)
        if stage is None:
            return original(self, *inputs, fp32_output=fp32_output, **kwargs)
        if stage == 0:
            inputs = mmodule.fp32_to_float16(inputs, self.float16_convertor)
        outputs = self.module(*inputs, **kwargs)
        if stage == self.module.pipeline_num_stages - 1 and fp32_output is True:
            outputs = mmodule.float16_to_fp32(outputs)
        return outputs

    forward._primus = True
    cls.forward = forward


def _tie_embeddings(model: list[torch.nn.Module]) -> None:
    """Rank 0 holds both ends of the V: the output layer uses the embedding's
    Parameter itself, and MTP layers on the last stage read chunk 0's embedding
    (runtime/mtp.py). Both are registered in chunk 0 only, so a data-parallel
    wrapper per chunk never sees them twice."""
    first, last = _unwrap(model[0]), _unwrap(model[-1])
    if not getattr(first, "pre_process", False):
        return
    if mtp.share_embedding(first, last):
        last.primus_borrows_weight_of_chunk = 0  # chunk 0's reduce waits for chunk 1's last use
    if not getattr(last, "share_embeddings_and_output_weights", False):
        return
    weight = first.embedding.word_embeddings.weight
    del last.output_layer.weight
    last.output_layer.register_parameter("weight", None)
    last.shared_embedding_or_output_weight = lambda: weight  # GPTModel passes it to the output layer
    # The output layer's fused weight gradient sets grad_added_to_main_grad on the shared weight,
    # after which megatron's DDP hook would drop the embedding's own gradient: megatron marks the
    # same sharing at pp=1 with zero_out_wgrad (the hook then always adds .grad, a zero dummy when
    # fused), and the executor starts chunk 0's reduce only after chunk 1's last W.
    weight.zero_out_wgrad = True
    last.primus_borrows_weight_of_chunk = 0
    # Checkpoints: chunk 0 saves the weight under the embedding's key; the output
    # layer has no tensor of its own to tie in the sharded state dict.
    last.tie_embeddings_and_output_weights_state_dict = lambda *args, **kwargs: None


def global_parameter_name(chunk: torch.nn.Module, local_name: str) -> str:
    """The name a parameter has in the whole (unpipelined) model: decoder layers
    are numbered by their global layer number, whatever chunk holds them, and an
    expert-parallel rank's local experts by their global expert index (megatron's
    SequentialMLP `local_experts.<i>`; TE GroupedLinear's `weight<i>` / `bias<i>`)."""
    inner = _unwrap(chunk)
    parts = local_name.split(".")
    if parts[:2] == ["decoder", "layers"] and len(parts) > 2:
        layer = inner.decoder.layers[int(parts[2])]
        rest = _global_expert(layer, parts[3:])
        return ".".join(["decoder", "layers", str(layer.layer_number - 1), *rest])
    if parts[:2] == ["mtp", "layers"] and len(parts) > 4 and parts[3] == "transformer_layer":  # an MTP layer's experts
        layer = inner.mtp.layers[int(parts[2])].transformer_layer
        return ".".join([*parts[:4], *_global_expert(layer, parts[4:])])
    if local_name == "output_layer.weight" and getattr(inner, "share_embeddings_and_output_weights", False):
        return "embedding.word_embeddings.weight"
    return local_name


def _global_expert(layer: torch.nn.Module, parts: list) -> list:
    """A layer's parameter name with its local expert index made global (first local expert:
    expert-parallel rank x local experts)."""
    if parts[:2] != ["mlp", "experts"] or len(parts) < 4:
        return parts
    first = getattr(layer.mlp, "local_expert_indices", [0])[0]  # MoELayer's (moe_layer.py:108 at 0.16.1)
    if parts[2] == "local_experts":
        return [*parts[:3], str(first + int(parts[3])), *parts[4:]]
    leaf = parts[-1]
    digits = len(leaf) - len(leaf.rstrip("0123456789"))
    if digits and leaf[:-digits] in ("weight", "bias"):
        return [*parts[:-1], leaf[:-digits] + str(first + int(leaf[-digits:]))]
    return parts


def named_global_parameters(chunk: torch.nn.Module):
    """(global name, parameter) for every parameter of a (possibly wrapped) chunk."""
    inner = _unwrap(chunk)
    for name, param in inner.named_parameters():
        yield global_parameter_name(inner, name), param


def init_by_global_name_(model: list[torch.nn.Module], *, seed: int, std: float, num_layers: int,
                         tp_rank: int = 0, tp_size: int = 1) -> None:
    """Initialise every parameter from (seed, its global name), as megatron's
    initialisers would (normal(0, std) weights, output projections scaled by
    1/sqrt(2 L), zero biases, unit norm weights), then keep this
    tensor-parallel rank's shard. The result does not depend on the schedule,
    the pipeline size or the build order, so every schedule starts from the
    same weights."""
    import math
    import zlib

    with torch.no_grad():
        for chunk in model:
            for name, param in named_global_parameters(chunk):
                shape = list(param.shape)
                dim = getattr(param, "partition_dim", 0) if getattr(param, "tensor_model_parallel", False) else None
                if dim is not None:
                    shape[dim] *= tp_size
                kind = name.rstrip("0123456789")  # a grouped GEMM's weight<i> / bias<i>: its kind's rule
                leaf = kind.rsplit(".", 1)[-1]
                if "norm" in name and leaf == "weight" or leaf == "layer_norm_weight":
                    full = torch.ones(shape)
                elif leaf == "bias" or leaf.endswith("_bias"):
                    full = torch.zeros(shape)
                else:
                    gen = torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63)
                    scale = std / math.sqrt(2.0 * num_layers) if kind.endswith(("linear_proj.weight", "linear_fc2.weight")) else std
                    full = torch.randn(shape, generator=gen) * scale
                if dim is not None:
                    full = full.chunk(tp_size, dim=dim)[tp_rank]
                param.copy_(full.to(param.dtype))
