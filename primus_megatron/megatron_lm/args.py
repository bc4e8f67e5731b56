"""The `--pipeline-schedule` argument group, shared by our training script and
Megatron-LM's (as an `extra_args_provider`). Choices come from the registry."""
from __future__ import annotations

import argparse
import math
from typing import Callable, Optional

from ..schedules import V, layer_split, names, registry


def add_args(parser: argparse.ArgumentParser, *, extra: Optional[Callable] = None) -> argparse.ArgumentParser:
    """Add the pipeline-schedule options to `parser` (and chain `extra`, an
    existing Megatron-LM extra_args_provider, if given). Returns the parser."""
    if extra is not None:
        parser = extra(parser) or parser
    if any("--pipeline-schedule" in a.option_strings for a in parser._actions):
        return parser  # idempotent
    group = parser.add_argument_group("pipeline schedule (primus_megatron)")
    group.add_argument("--pipeline-schedule", default=None, metavar="NAME",
                       help="pipeline schedule: " + ", ".join(names(aliases=True)) +
                            ", or auto (the fastest by simulation that fits the memory limit: from measured "
                            "costs in examples/pretrain_gpt.py, from --pipeline-costs or equal costs in Megatron-LM's "
                            "loop, which builds the model once; see `primus-pipeline list`); default: megatron's own "
                            "schedule")
    group.add_argument("--pipeline-memory-limit", type=float, default=None, metavar="UNITS",
                       help="activation memory limit per rank, in microbatches of a rank's layer share "
                            "(zb-auto and other cost-driven schedules; default 1F1B's: the pipeline size)")
    group.add_argument("--pipeline-offload", choices=("off", "all", "auto"), default="off",
                       help="activation offload: the F's saved activations go to host memory after the F and come "
                            "back before their B, planned with the schedule (all: every F; auto: the fastest plan "
                            "within --pipeline-memory-limit, which then bounds what stays on the device, taking "
                            "activations whose lifespan hides the copies first); default off")
    group.add_argument("--pipeline-offload-bandwidth", type=float, default=None, metavar="X",
                       help="each direction's host copy bandwidth for the offload plan, in activation units (a "
                            "rank's activations of one microbatch) per unit of --pipeline-costs' F time; default: measured "
                            "at start-up (the first step's copies are planned as free)")
    group.add_argument("--pipeline-chunks", type=int, default=None, metavar="V",
                       help="model chunks per rank for schedules with a variable count (interleaved-1f1b)")
    group.add_argument("--pipeline-p2p-timeout", type=float, default=600.0, metavar="SECONDS",
                       help="how long a rank waits for a pipeline peer before failing with a diagnosis")
    group.add_argument("--pipeline-costs", default=None, metavar="F,B,W[,COMM[,BW]][,mem-b=X][,mem-w=Y]",
                       help="relative op costs for the schedules that use them (zb-auto, zbv, v-half, v-min) and "
                            "for auto; BW: a backward run as one op, as 1f1b runs it (default B + W; usually less); "
                            "mem-b / mem-w: activation memory a B / W adds in units of what an F adds (they sum to "
                            "-1; one gives the other; default 0 and -1, W frees everything; measured runs have B free "
                            "all but what the weight gradient keeps, e.g. mem-w=-0.37); COMM and BW may be named too "
                            "(comm=, bw=); default: measured over the first --pipeline-profile-steps steps, then "
                            "re-planned")
    group.add_argument("--pipeline-profile-out", default=None, metavar="FILE.json",
                       help="measure per-stage costs over the first --pipeline-profile-steps steps and write the "
                            "fitted per-layer, embedding and head costs there (for `primus-pipeline balance` and "
                            "--pipeline-balance FILE)")
    group.add_argument("--pipeline-balance", default=None, metavar="auto|FILE.json",
                       help="choose the layer split (first/last pipeline rank layer counts, embedding/loss "
                            "accounting) that runs the schedule fastest by simulation: from a profile written by "
                            "--pipeline-profile-out, or `auto` (examples/pretrain_gpt.py only: measured in the first "
                            "steps, then the model is rebuilt on the chosen split)")
    group.add_argument("--pipeline-profile-steps", type=int, default=3, metavar="N",
                       help="steps whose F/B/W/p2p times and activation memory are measured (for zb-auto's "
                            "and the V schedules' re-planning and --pipeline-schedule auto); 0 disables")
    return parser


def check_schedule_args(args: argparse.Namespace) -> Optional[str]:
    """One sentence describing what is wrong with the schedule options, or None.

    Works on Megatron-LM's parsed arguments and on examples/pretrain_gpt.py's:
    the schedule group always, and, where the namespace has them, the pipeline
    size, the layer split, the microbatch count (global batch / micro batch /
    data parallel) and the options that cannot combine with deferred weight
    gradients. Pure Python unless the model has TransformerEngine layers and the
    schedule W ops: then the installed TE is asked whether it can defer them."""
    name = getattr(args, "pipeline_schedule", None)
    if name is None:
        return None
    steps = getattr(args, "pipeline_profile_steps", 3)
    if steps < 0:
        return f"--pipeline-profile-steps must be >= 0, got {steps}"
    problem = check_balance_args(args, steps)
    if problem:
        return problem
    if name != "auto":
        try:
            entry = registry.info(name)
        except ValueError as exc:
            return f"--pipeline-schedule: {exc}"
        try:
            chunks = registry.resolve_chunks(entry, getattr(args, "pipeline_chunks", None))
        except ValueError as exc:
            return f"--pipeline-chunks: {exc}"
    # options every schedule reads, auto's choice included
    timeout = getattr(args, "pipeline_p2p_timeout", 600.0)
    if not (timeout > 0 and math.isfinite(timeout)):
        return f"--pipeline-p2p-timeout must be a positive number of seconds, got {timeout:g}"
    limit = getattr(args, "pipeline_memory_limit", None)
    if limit is not None and not limit > 0:
        return f"--pipeline-memory-limit must be a positive number of activation units, got {limit:g}"
    offload = getattr(args, "pipeline_offload", "off") or "off"
    bandwidth = getattr(args, "pipeline_offload_bandwidth", None)
    if bandwidth is not None and not (bandwidth > 0 and not math.isnan(bandwidth)):
        return (f"--pipeline-offload-bandwidth must be a positive number of activation units per time unit, got "
                f"{bandwidth:g}")
    costs = None
    if getattr(args, "pipeline_costs", None):
        try:
            costs = parse_costs(args.pipeline_costs)
        except ValueError as exc:
            return str(exc)
    if name == "auto":
        pp = getattr(args, "pipeline_model_parallel_size", None)
        if steps < 1:
            return "--pipeline-schedule auto measures costs first: --pipeline-profile-steps must be >= 1"
        if pp is not None and pp < 2:
            return f"--pipeline-schedule auto needs --pipeline-model-parallel-size >= 2, got {pp}"
        # profiled with a 1-chunk schedule that has W ops; the candidates are those the split fits
        return (check_layer_split(args, pp, 1, "--pipeline-schedule auto", w_ops=True)
                or check_te_support(args, "auto"))
    pp = getattr(args, "pipeline_model_parallel_size", None)
    if pp is not None and pp < 2:
        return (f"--pipeline-schedule {entry.name} needs --pipeline-model-parallel-size >= 2, got {pp}; "
                f"drop --pipeline-schedule to train without pipelining")
    problem = check_layer_split(args, pp, chunks, f"--pipeline-schedule {entry.name}",
                                w_ops=splits_weight_gradients(entry))
    if problem:
        return problem
    problem = check_deferred_wgrad_args(args, entry)
    if problem:
        return problem
    microbatches = _num_microbatches(args)
    if pp is not None and microbatches is not None:
        from ..schedules import ScheduleError, generate

        try:  # the schedule itself: microbatch count, memory limit (pure Python, fast)
            generate(entry.name, pp, microbatches, costs=costs, memory_limit=limit if offload == "off" else None,
                     chunks=chunks, post_validation=bool(getattr(args, "optimizer_post_validation", False)))
        except ScheduleError as exc:
            return (f"--pipeline-schedule {entry.name} with {microbatches} microbatches (global batch / micro batch "
                    f"/ data parallel) on {pp} pipeline ranks: {exc}")
    return None


VIRTUAL_SIZE_ARGS = ("num_virtual_stages_per_pipeline_rank", "num_layers_per_virtual_pipeline_stage")


def check_layer_split(args: argparse.Namespace, pp: Optional[int], chunks: int, what: Optional[str], *,
                      w_ops: bool = False) -> Optional[str]:
    """The layer split of the arguments (--num-layers, --decoder-first/last-pipeline-num-layers,
    --account-for-embedding/loss-in-pipeline-split, and Megatron-LM's --pipeline-model-parallel-layout)
    for `pp` ranks x `chunks`, in one sentence, or None. megatron-core's split
    (schedules/layer_split.py), the same global stages under every placement
    (a layout's stages too: its stage count must be the schedule's)."""
    if getattr(args, "pipeline_model_parallel_layout", None):
        for dest in VIRTUAL_SIZE_ARGS:
            if getattr(args, dest, None) is not None:
                return (f"--pipeline-model-parallel-layout sets the virtual pipeline size itself (its stages / "
                        f"pipeline ranks): drop --{dest.replace('_', '-')}")
    return layer_split.check(layer_split.LayerSplit.from_args(args), pp, chunks, what, w_ops=w_ops)


def split_fits(args: argparse.Namespace, name: str) -> bool:
    """Whether the arguments' layer split (even or uneven) can be built for schedule `name`
    (the candidates of --pipeline-schedule auto)."""
    entry = registry.info(name)
    return check_layer_split(args, getattr(args, "pipeline_model_parallel_size", None), entry.chunks, name,
                             w_ops=splits_weight_gradients(entry)) is None


def check_balance_args(args: argparse.Namespace, steps: int) -> Optional[str]:
    """--pipeline-profile-out and --pipeline-balance, or None."""
    import os

    out = getattr(args, "pipeline_profile_out", None)
    if out is not None:
        if not out.endswith(".json"):
            return f"--pipeline-profile-out must name a .json file, got {out!r}"
        if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
            return f"--pipeline-profile-out {out!r}: its directory does not exist"
        if steps < 1:
            return "--pipeline-profile-out measures costs first: --pipeline-profile-steps must be >= 1"
    balance = getattr(args, "pipeline_balance", None)
    if balance is None:
        return None
    given = [opt for key, opt in (("decoder_first_pipeline_num_layers", "--decoder-first-pipeline-num-layers"),
                                  ("decoder_last_pipeline_num_layers", "--decoder-last-pipeline-num-layers"),
                                  ("account_for_embedding_in_pipeline_split", "--account-for-embedding-in-pipeline-split"),
                                  ("account_for_loss_in_pipeline_split", "--account-for-loss-in-pipeline-split"),
                                  ("pipeline_model_parallel_layout", "--pipeline-model-parallel-layout"))
             if getattr(args, key, None) not in (None, False)]
    if given and not getattr(args, "pipeline_balance_applied", False):
        return f"--pipeline-balance chooses the layer split itself: drop {given[0]}"
    if balance == "auto":
        return None if steps >= 1 else "--pipeline-balance auto measures costs first: --pipeline-profile-steps must be >= 1"
    from ..schedules.balance import load_profile

    try:
        load_profile(balance)
    except ValueError as exc:
        return f"--pipeline-balance must be auto or a profile file: {exc}"
    return None


SPLIT_ARGS = {"first": "decoder_first_pipeline_num_layers", "last": "decoder_last_pipeline_num_layers",
              "embedding": "account_for_embedding_in_pipeline_split", "loss": "account_for_loss_in_pipeline_split",
              "layout": "pipeline_model_parallel_layout"}


def apply_balance(args: argparse.Namespace, model, pp: int, microbatches: int, *, source: str) -> str:
    """Choose the layer split (and, for `--pipeline-schedule auto`, the schedule) from
    the cost model `model` (schedules.balance.ModelCosts), set the arguments to it
    and return what to log. Raises ScheduleError when nothing fits."""
    from ..schedules import balance, names
    from ..schedules.registry import info

    post = bool(getattr(args, "optimizer_post_validation", False))
    limit = getattr(args, "pipeline_memory_limit", None)
    if args.pipeline_schedule == "auto":
        usable = [n for n in names() if info(n).needs_extra != "ilp"]
        name, best, rows = balance.choose_schedule_and_split(usable, pp, microbatches, model, args.num_layers,
                                                             memory_limit=limit, post_validation=post)
        args.pipeline_schedule = name
    else:
        name = info(args.pipeline_schedule).name
        best, rows = balance.choose(name, pp, microbatches, model, args.num_layers, memory_limit=limit,
                                    post_validation=post)
    for key, dest in SPLIT_ARGS.items():
        value = getattr(best.split, key)
        setattr(args, dest, bool(value) if key in ("embedding", "loss") else value)
    if best.split.layout:  # the layout gives the virtual pipeline size (the schedule's chunks) itself
        for dest in VIRTUAL_SIZE_ARGS:
            if getattr(args, dest, None) is not None:
                setattr(args, dest, None)
    args.pipeline_balance_applied = True
    even = next((c for c in rows if not balance.flags(c.split)), None)
    gain = f"; simulated iteration {best.iteration / even.iteration:.3f}x the even split's" \
        if even is not None and even.iteration else ""
    return (f"--pipeline-balance ({source}): {name} on layer split {list(best.layers)} "
            f"({balance.flags(best.split) or 'the even split'}){gain}, peak activation "
            f"{best.peak_memory:.2f}\n{balance.table(rows, best)}")


def _num_microbatches(args: argparse.Namespace) -> Optional[int]:
    gbs, mbs = getattr(args, "global_batch_size", None), getattr(args, "micro_batch_size", None)
    dp = getattr(args, "data_parallel_size", None)
    if not gbs or not mbs or not dp or gbs % (mbs * dp):
        return None  # not known yet (or refused by the caller's own batch check)
    return gbs // (mbs * dp)


def splits_weight_gradients(entry: registry.ScheduleInfo) -> bool:
    """Does the schedule have W ops (weight gradients deferred from B)?"""
    if entry.needs_extra:
        return True  # generators behind an optional extra (zb-optimal) split; do not import the extra here
    from ..schedules import generate

    return generate(entry.name, 2, 4, validate=False).splits_backward


NO_W = "a schedule without W (1f1b, interleaved-1f1b)"


def _uses_te(args: argparse.Namespace) -> bool:
    """Megatron-LM builds TransformerEngine layers (its default --transformer-impl); our
    examples/pretrain_gpt.py has no such option and builds megatron-core's local layers."""
    return getattr(args, "transformer_impl", "local") == "transformer_engine"


def check_te_support(args: argparse.Namespace, schedule: str) -> Optional[str]:
    """For a schedule with W ops over TransformerEngine layers: can the installed TE defer
    weight gradients (runtime/te_wgrad.py support_problem: its API, its debug mode)? One
    sentence or None; None without TE layers or without TE."""
    if not _uses_te(args):
        return None
    from ..runtime.te_wgrad import support_problem

    return support_problem(f"--pipeline-schedule {schedule}")


def check_deferred_wgrad_args(args: argparse.Namespace, entry: registry.ScheduleInfo) -> Optional[str]:
    """Options that cannot combine with the schedule's deferred weight
    gradients (or its placement), with what to do instead, and a TransformerEngine
    that cannot defer them; None if fine. A schedule without W ops never touches
    TE's weight-gradient store: any TE runs it."""
    from ..runtime.unsupported import refusal_for

    splits = splits_weight_gradients(entry)
    problem = refusal_for(args, schedule=entry.name, splits_backward=splits, v_placement=entry.placement == V,
                          uses_te=_uses_te(args), offload=getattr(args, "pipeline_offload", "off") or "off")
    if problem or not splits:
        return problem
    return check_te_support(args, entry.name)


COST_NAMES = ("comm", "bw", "mem-b", "mem-w")  # the named entries of --pipeline-costs


def parse_costs(text: str):
    """'F,B,W[,COMM[,BW]][,mem-b=X][,mem-w=Y]' -> schedules.Costs (BW: a backward run as one op,
    default B + W; mem-b / mem-w: the memory model, `schedules.costs.memory_model`). Positional
    numbers first, then `name=value` entries (comm and bw may be named instead). One-sentence
    ValueError naming --pipeline-costs otherwise."""
    import math

    from ..schedules import Costs, ScheduleError
    from ..schedules.costs import memory_model

    form = (f"--pipeline-costs must be F,B,W[,COMM[,BW]] numbers, got {text!r} (named entries may follow: "
            f"{', '.join(n + '=X' for n in COST_NAMES)})")
    positional, named = [], {}
    for part in (p.strip() for p in text.split(",")):
        key, eq, value = part.partition("=")
        try:
            number = float(value if eq else part)
        except ValueError:
            raise ValueError(form) from None
        if not math.isfinite(number):
            raise ValueError(form)
        if not eq:
            if named:
                raise ValueError(form)  # positional numbers come first
            positional.append(number)
        elif key.strip() not in COST_NAMES or key.strip() in named:
            raise ValueError(form)
        else:
            named[key.strip()] = number
    if len(positional) not in (3, 4, 5):
        raise ValueError(form)
    given = dict(zip(("f", "b", "w", "comm", "bw"), positional))
    for key in ("comm", "bw"):
        if key in named:
            if key in given:
                raise ValueError(f"--pipeline-costs gives {key} twice, got {text!r}")
            given[key] = named[key]
    try:
        mem_b, mem_w = memory_model(named.get("mem-b"), named.get("mem-w"), names=("mem-b", "mem-w"))
        return Costs(f=given["f"], b=given["b"], w=given["w"], comm=given.get("comm", 0.0), bw=given.get("bw"),
                     mem_b=mem_b, mem_w=mem_w)
    except ScheduleError as exc:
        raise ValueError(f"--pipeline-costs: {exc}") from None
