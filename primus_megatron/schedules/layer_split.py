"""Which transformer layers each global pipeline stage holds: megatron-core's
split, in pure Python (no torch), for the argument checks, the planner and
the tests.

megatron-core 0.16.1 (`get_num_layers_to_build` in transformer_block.py,
`get_transformer_layer_offset` in transformer_layer.py, the checks in
`TransformerConfig.__post_init__`; Megatron-LM's validate_args adds nothing
for a virtual pipeline given as `--num-virtual-stages-per-pipeline-rank`, which
the plugin sets, and refuses first/last counts with
`--num-layers-per-virtual-pipeline-stage`)
computes a chunk's layers from (vp_stage, pp_rank) in its loop layout, global
stage `s = vp_stage * pp + pp_rank`, with `vp` chunks per rank:

* even (the default): `num_layers / (pp * vp)` layers per stage;
* `num_layers_in_first_pipeline_stage` F / `num_layers_in_last_pipeline_stage`
  L (Megatron-LM's --decoder-first/last-pipeline-num-layers): the layers of
  the first / last *pipeline rank*, all of its chunks together. With vp > 1
  each chunk of that rank gets an equal share F / vp (L / vp): F and L must be
  multiples of vp; the rest, `num_layers - F - L`, is shared evenly by the
  middle ranks and again by their chunks. So with 2 chunks per rank F puts
  F/2 layers in global stages 0 and pp, L puts L/2 in stages pp-1 and 2pp-1;
  megatron has no option for "the first virtual stage only" (that needs
  the layout below);
* `account_for_embedding_in_pipeline_split` / `..._loss_...`: the embedding
  (the loss) counts as one layer in the split of `num_layers + 1 (+ 1)`
  layers, and is placed in the global first (last) *virtual* stage only,
  which builds one transformer layer fewer (possibly none);
* F / L cannot be combined with the embedding / loss accounting;
* `pipeline_model_parallel_layout` (Megatron-LM's --pipeline-model-parallel-layout,
  e.g. 'Ett|ttt|ttt|tL'): every global stage's layers written out, stages in
  global order; it excludes the four options above and sets the virtual
  pipeline size itself (stages / pp). The only way to give rank 0's two V
  stages together fewer layers than another rank's at pp = 2.

Refused here beyond megatron's own checks: F and L together on 2 pipeline
ranks with vp > 1 (megatron-core's offset divides by the zero middle ranks;
F alone is the same split), F + L above the layers (megatron builds negative
layer counts), for schedules with W ops a first stage holding the embedding
alone (W would find no weight gradient to run), and in a layout an embedding
(loss) outside the first (last) stage, empty middle stages and MTP layers (m)
anywhere but in the last stage, after its transformer layers (megatron's
"standalone" MTP stage sends activations (1 + MTP layers) times the sequence
long to the loss stage; our pipeline sends one fixed shape).

Multi-token prediction (megatron's `mtp_num_layers`, Megatron-LM's
--mtp-num-layers) adds its layers to one global stage and to none of the
counts above: the last stage without a layout (`get_mtp_num_layers_to_build`
in multi_token_prediction.py), the stage of the layout's 'm' with one
(`mtp_stage`). Under `v` that is rank 0's second chunk, next to the embedding
the MTP layers read.

Layer numbers are global and follow the stage order, so the first layer of
stage s is one more than the layers of stages 0 .. s-1. A placement decides
only which rank holds stage s (`ir.stage_of`); under `v` rank 0 holds stages
0 and 2pp-1 (the embedding and the loss), rank pp-1 stages pp-1 and pp. With
the accounting options both spared layers are rank 0's: the way to lighten
exactly the rank that computes the embedding, output layer and loss; with
F and L (2 chunks) ranks 0 and pp-1 each hold F/2 + L/2 layers.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from .errors import ScheduleError
from .ir import stage_of

CLI = {"first": "--decoder-first-pipeline-num-layers", "last": "--decoder-last-pipeline-num-layers",
       "embedding": "--account-for-embedding-in-pipeline-split", "loss": "--account-for-loss-in-pipeline-split",
       "layout": "--pipeline-model-parallel-layout", "num_layers": "--num-layers",
       "pp": "--pipeline-model-parallel-size", "mtp": "--mtp-num-layers"}
CONFIG = {"first": "num_layers_in_first_pipeline_stage", "last": "num_layers_in_last_pipeline_stage",
          "embedding": "account_for_embedding_in_pipeline_split", "loss": "account_for_loss_in_pipeline_split",
          "layout": "pipeline_model_parallel_layout", "num_layers": "num_layers", "pp": "pipeline_model_parallel_size",
          "mtp": "mtp_num_layers"}


class SplitError(ScheduleError):
    """The layer split cannot be built; one sentence naming the option."""


@dataclass(frozen=True)
class LayerSplit:
    """megatron's split options (None / False: not given)."""

    num_layers: int
    first: Optional[int] = None
    last: Optional[int] = None
    embedding: bool = False
    loss: bool = False
    layout: Optional[str] = None  # megatron's pipeline_model_parallel_layout, as its string
    mtp: Optional[int] = None  # megatron's mtp_num_layers (MTP layers, in one stage: `mtp_stage`)

    @classmethod
    def from_config(cls, config: Any) -> "LayerSplit":
        """From a TransformerConfig (or anything with its field names)."""
        return cls(config.num_layers, getattr(config, CONFIG["first"], None), getattr(config, CONFIG["last"], None),
                   bool(getattr(config, CONFIG["embedding"], False)), bool(getattr(config, CONFIG["loss"], False)),
                   layout_text(getattr(config, CONFIG["layout"], None)), getattr(config, CONFIG["mtp"], None) or None)

    @classmethod
    def from_args(cls, args: Any) -> Optional["LayerSplit"]:
        """From Megatron-LM's (or examples/pretrain_gpt.py's) parsed arguments; None without --num-layers."""
        num_layers = getattr(args, "num_layers", None)
        if num_layers is None:
            return None
        return cls(num_layers, getattr(args, "decoder_first_pipeline_num_layers", None),
                   getattr(args, "decoder_last_pipeline_num_layers", None),
                   bool(getattr(args, CONFIG["embedding"], False)), bool(getattr(args, CONFIG["loss"], False)),
                   layout_text(getattr(args, CONFIG["layout"], None)), getattr(args, CONFIG["mtp"], None) or None)

    @property
    def uneven(self) -> bool:
        return self.first is not None or self.last is not None or self.embedding or self.loss or bool(self.layout)


# -- megatron's layout strings ---------------------------------------------------------------------
# megatron-core 0.16.1 (transformer/pipeline_parallel_layer_layout.py): stages in global (loop) order
# separated by '|'; E embedding, L loss (output layer and loss), t transformer layer, m MTP layer;
# 'x*n' and '(...)*n' repeat, commas are cosmetic. E must come first and L last of all layers.
_LAYER_CHARS = "ELtm"
_LAYER_NAMES = {"embedding": "E", "loss": "L", "decoder": "t", "mtp": "m"}


def layout_text(value: Any) -> Optional[str]:
    """A layout as its string: megatron's string itself, a list of stages (each a
    list of layer names or LayerType members), or megatron's parsed object."""
    if value is None or isinstance(value, str):
        return value or None
    if isinstance(getattr(value, "input_data", None), str):  # PipelineParallelLayerLayout made from a string
        return value.input_data
    rows = getattr(value, "input_data", value)
    stages = []
    for stage in rows:
        chars = []
        for layer in stage:
            name = getattr(layer, "name", layer)
            chars.append(_LAYER_NAMES.get(str(name).strip().lower(), str(name)))
        stages.append("".join(chars))
    return "|".join(stages)


def parse_layout(text: str, *, option: str = CLI["layout"]) -> list[str]:
    """The stages of a layout string, each the string of its layers (repeats expanded)."""
    flat = text.replace(",", "").replace(" ", "")
    group = re.compile(r"\(([^()]*)\)\*(\d+)")  # innermost parenthesised repeat first
    while True:
        expanded = group.sub(lambda m: m.group(1) * int(m.group(2)), flat)
        if expanded == flat:
            break
        flat = expanded
    flat = re.sub(r"([^()*\d])\*(\d+)", lambda m: m.group(1) * int(m.group(2)), flat)
    bad = sorted(set(flat) - set(_LAYER_CHARS + "|"))
    if bad:
        raise SplitError(f"{option} {text!r} cannot be read: {''.join(bad)!r} is not a layer or a repeat; use E, L, "
                         f"t, m, '|' between stages, 'x*n' or '(...)*n' to repeat, e.g. 'Ett|tt|tt|ttL'")
    return flat.split("|")


def layout_string(counts: list[int], mtp: Optional[int] = None) -> str:
    """The layout string of per-stage transformer-layer counts (E in stage 0, `mtp` MTP layers
    and L in the last)."""
    stages = [f"t*{n}" if n > 1 else "t" * n for n in counts]
    stages[0] = "E" + stages[0]
    stages[-1] = stages[-1] + "m" * (mtp or 0) + "L"
    return "|".join(stages)


def mtp_stage(split: Optional[LayerSplit], stages: int) -> Optional[int]:
    """The global stage holding the MTP layers (None without them): the layout's stage with 'm'
    (its last, once `check` accepted it), else the last stage, as megatron places them."""
    if split is None:
        return None
    if split.layout:
        holding = [s for s, text in enumerate(parse_layout(split.layout)) if "m" in text]
        return holding[0] if holding else None
    return stages - 1 if split.mtp else None


def _layout_counts(split: LayerSplit, n: int, names: dict) -> list[int]:
    opt = names["layout"]
    stages = parse_layout(split.layout, option=opt)
    whole = "".join(stages)
    if len(stages) != n:
        raise SplitError(f"{opt} {split.layout!r} has {len(stages)} stages; the pipeline has {n} "
                         f"(pipeline ranks x chunks per rank): give {n} stages separated by '|'")
    _check_layout_mtp(split, stages, names)
    if whole.count("E") != 1 or not stages[0].startswith("E"):
        raise SplitError(f"{opt} {split.layout!r} must begin the first stage with the embedding E (once)")
    if whole.count("L") != 1 or not stages[-1].endswith("L"):
        raise SplitError(f"{opt} {split.layout!r} must end the last stage with the loss L (once)")
    counts = [stage.count("t") for stage in stages]
    if sum(counts) != split.num_layers:
        raise SplitError(f"{opt} {split.layout!r} holds {sum(counts)} transformer layers (t) but "
                         f"{names['num_layers']} is {split.num_layers}")
    empty = [s for s in range(1, n - 1) if counts[s] == 0]
    if empty:
        raise SplitError(f"{opt} {split.layout!r} leaves stage {empty[0]} without any layer; every stage between "
                         f"the first and the last needs a transformer layer (t)")
    return counts


def _check_layout_mtp(split: LayerSplit, stages: list[str], names: dict) -> None:
    """megatron's rules for 'm' (validate_layer_layout: as many as mtp_num_layers, all in one stage,
    after every transformer layer) and ours: that stage is the last one (see the module doc)."""
    opt, count = names["layout"], "".join(stages).count("m")
    if count != (split.mtp or 0):
        given = f"{names['mtp']} is {split.mtp}" if split.mtp else f"{names['mtp']} is not given"
        raise SplitError(f"{opt} {split.layout!r} has {count} MTP layers (m) but {given}; give as many m as "
                         f"{names['mtp']}, all in the last stage before L (e.g. 'Ett|tt|tt|t{'m' * (split.mtp or 1)}L')")
    if not count:
        return
    holding = [s for s, text in enumerate(stages) if "m" in text]
    last = stages[-1]
    if holding != [len(stages) - 1]:
        raise SplitError(f"{opt} {split.layout!r} places MTP layers (m) in stage {holding[0]}, not in the last stage "
                         f"with the loss: megatron's standalone MTP stage sends activations (1 + MTP layers) times "
                         f"the sequence long to the next stage, and the primus schedules send one fixed shape; put "
                         f"every m in the last stage, after its t and before L (e.g. '...|t{'m' * count}L')")
    if "t" in last[last.index("m"):]:
        raise SplitError(f"{opt} {split.layout!r} places a transformer layer (t) after an MTP layer (m); megatron "
                         f"builds the MTP layers after every transformer layer: write them after the t, before L")


def stage_layers(split: LayerSplit, pp: int, chunks: int = 1, *, names: dict = CLI,
                 what: Optional[str] = None) -> list[int]:
    """Transformer layers of each global stage 0 .. pp*chunks-1 (megatron's
    loop numbering, which is the global stage order under every placement).

    Raises SplitError (one sentence naming the option and what is allowed)
    for a split megatron-core cannot build. `names` names the options
    (CLI: Megatron-LM's command line; CONFIG: TransformerConfig fields);
    `what` (e.g. "--pipeline-schedule zbv") says where the chunk count comes from."""
    n, N = pp * chunks, split.num_layers
    per_rank = f"the {chunks} chunks per pipeline rank" + (f" of {what}" if what else "")
    opt = lambda key: names[key]  # noqa: E731
    if N < 1:
        raise SplitError(f"{opt('num_layers')} must be >= 1, got {N}")
    given = [k for k in ("first", "last") if getattr(split, k) is not None]
    accounted = [k for k in ("embedding", "loss") if getattr(split, k)]
    if split.layout:
        if given or accounted:
            raise SplitError(f"{opt('layout')} cannot be combined with {opt((given + accounted)[0])}: the layout "
                             f"decides every stage's layers itself")
        return _layout_counts(split, n, names)
    if given and accounted:
        raise SplitError(f"{opt(given[0])} cannot be combined with {opt(accounted[0])}: megatron-core takes either "
                         f"the first/last pipeline rank's layer counts or the embedding/loss accounting")
    if given:
        for key in given:
            value = getattr(split, key)
            if value < 1:
                raise SplitError(f"{opt(key)} must be >= 1, got {value}")
            if value % chunks:
                raise SplitError(f"{opt(key)} {value} must be a multiple of {chunks}: megatron-core gives each of "
                                 f"{per_rank} an equal share of it")
        if pp < 2:
            raise SplitError(f"{opt(given[0])} needs {opt('pp')} >= 2, got {pp}")
        if len(given) == 2 and pp == 2 and chunks > 1:
            raise SplitError(f"{opt('first')} and {opt('last')} cannot both be given with 2 pipeline ranks x {chunks} "
                             f"chunks (megatron-core's layer offset then divides by zero middle ranks); give only "
                             f"{opt('first')} {split.first}: the last rank holds the other {N - split.first} layers")
        first, last = split.first or 0, split.last or 0
        middle_layers, middle_ranks = N - first - last, pp - len(given)
        named = " + ".join(f"{opt(k)} {getattr(split, k)}" for k in given)
        if middle_layers < 0 or (middle_ranks == 0 and middle_layers):
            allowed = f"must equal {opt('num_layers')} {N}" if middle_ranks == 0 else f"must be below {opt('num_layers')} {N}"
            raise SplitError(f"{named} {allowed} on {pp} pipeline ranks")
        if middle_ranks and (middle_layers == 0 or middle_layers % (middle_ranks * chunks)):
            unit = middle_ranks * chunks
            where = f"{middle_ranks} middle pipeline rank{'s' if middle_ranks > 1 else ''}"
            if chunks > 1:
                where += f" x {chunks} chunks"
            raise SplitError(f"{opt('num_layers')} {N} minus {named} leaves {middle_layers} layers for the {where}; "
                             f"they must be a positive multiple of {unit}")
        middle = middle_layers // (middle_ranks * chunks) if middle_ranks else 0
        counts = []
        for s in range(n):
            rank = s % pp
            if rank == 0 and split.first is not None:
                counts.append(first // chunks)
            elif rank == pp - 1 and split.last is not None:
                counts.append(last // chunks)
            else:
                counts.append(middle)
        return counts
    total = N + len(accounted)
    if total % n:
        if accounted:
            plus = " and ".join(f"the {k}" for k in accounted)
            raise SplitError(f"{opt('num_layers')} {N} plus {plus} ({' and '.join(opt(k) for k in accounted)}) make "
                             f"{total} layers, which do not split into {n} equal stages ({pp} pipeline ranks"
                             f"{f' x {chunks} chunks' if chunks > 1 else ''}); use {opt('num_layers')} "
                             f"{_nearest(total, n) - len(accounted)}")
        raise SplitError(even_split_message(N, pp, chunks, what, names=names))
    counts = [total // n] * n
    if split.embedding:
        counts[0] -= 1
    if split.loss:
        counts[-1] -= 1
    return counts


def _nearest(value: int, unit: int) -> int:
    return unit * max(1, round(value / unit))


def even_split_message(num_layers: int, pp: int, chunks: int, what: Optional[str] = None, *,
                       names: dict = CLI) -> str:
    stages = pp * chunks
    ranks = f"{pp} pipeline ranks x {chunks} chunks" if chunks > 1 else f"{pp} pipeline ranks"
    return (f"{names['num_layers']} {num_layers} does not split into {stages} equal stages ({ranks})"
            f"{f' for {what}' if what else ''}; use a multiple of {stages}, e.g. {_nearest(num_layers, stages)}, "
            f"or an uneven split ({names['first']} / {names['last']}, or {names['embedding']} / {names['loss']})")


def check(split: Optional[LayerSplit], pp: Optional[int], chunks: int = 1, what: Optional[str] = None, *,
          w_ops: bool = False, names: dict = CLI) -> Optional[str]:
    """What is wrong with the split for a schedule with `chunks` per rank, in one
    sentence, or None (also when not known yet). `w_ops`: the schedule defers
    weight gradients to W ops, and every stage needs a layer whose weight
    gradient can be deferred; an embedding alone (stage 0 without transformer
    layers, which the embedding accounting can produce) has none."""
    if split is None or pp is None:
        return None
    try:
        counts = stage_layers(split, pp, chunks, names=names, what=what)
    except SplitError as exc:
        return str(exc)
    if w_ops and counts[0] == 0 and len(counts) > 1 and split.layout:
        return (f"{names['layout']} {split.layout!r} leaves the first stage with the embedding alone (no transformer "
                f"layer) and {what or 'a schedule with W ops'} needs a weight gradient to defer to W in every stage; "
                f"give the first stage a transformer layer (t), or use a schedule without W (1f1b, interleaved-1f1b)")
    if w_ops and counts[0] == 0 and len(counts) > 1:
        return (f"{names['num_layers']} {split.num_layers} with {names['embedding']} leaves the first stage with the "
                f"embedding alone (no transformer layer) and {what or 'a schedule with W ops'} needs a weight gradient "
                f"to defer to W in every stage; use more layers, drop {names['embedding']}, or use a schedule "
                f"without W (1f1b, interleaved-1f1b)")
    return None


def stage_ranges(split: LayerSplit, pp: int, chunks: int = 1, **kw) -> list[range]:
    """The global 1-based layer numbers of each global stage."""
    out, start = [], 1
    for count in stage_layers(split, pp, chunks, **kw):
        out.append(range(start, start + count))
        start += count
    return out


def rank_layers(split: LayerSplit, pp: int, chunks: int, placement: str) -> list[int]:
    """Transformer layers each pipeline rank holds under `placement` (all its chunks)."""
    counts = stage_layers(split, pp, chunks)
    return [sum(counts[stage_of(placement, pp, r, c)] for c in range(chunks)) for r in range(pp)]
