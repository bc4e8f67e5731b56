"""Megatron-LM's side of the pipeline options: the whole check of its parsed arguments (the
group's checks in `primus_megatron.options` plus its TransformerEngine probe), and a
balanced layer split written into its arguments (Megatron-LM builds the model from them).
The argument group itself and the PipelineSpec live in `primus_megatron.options`."""
from __future__ import annotations

import argparse
from typing import Optional

from .. import options
from ..options import PipelineSpec, parse_costs  # noqa: F401  (parse_costs: cli.py imports it from here)


def spec_of(args: argparse.Namespace) -> Optional[PipelineSpec]:
    """The spec of Megatron-LM's checked arguments (None without --pipeline-schedule).
    --deterministic-mode: no plan from measured costs (it can differ between launches, and with
    it the order in which a weight shared by two chunks, the tied embedding under V, sums its
    gradients)."""
    return options.from_args(args, deterministic=bool(getattr(args, "deterministic_mode", False)))


def check_schedule_args(args: argparse.Namespace, spec: Optional[PipelineSpec] = None) -> Optional[str]:
    """One sentence describing what is wrong with the schedule options, or None.

    The group always and, where the namespace has them, the pipeline size, the layer split,
    the microbatch count (global batch / micro batch / data parallel) and the options that
    cannot combine with deferred weight gradients. Pure Python unless the model has
    TransformerEngine layers and the schedule W ops: then the installed TE is asked whether it
    can defer them. `spec`: the one already built (balanced or chosen), else built here."""
    return checked(args, spec)[0]


def checked(args: argparse.Namespace,
            spec: Optional[PipelineSpec] = None) -> tuple[Optional[str], Optional[PipelineSpec]]:
    """`check_schedule_args`'s sentence, and the spec carrying the plan the check made."""
    from .balanced_data import problem as balance_problem

    problem = balance_problem(args)  # Megatron-LM's --sft path: what balanced data needs of its options
    if problem:
        return problem, spec
    problem = options.check_options(args, split_chosen=spec is not None and spec.split is not None,
                                    packed_thd=True)  # balanced data runs only on Megatron-LM's thd path here
    if problem:
        return problem, spec
    if spec is None:
        spec = spec_of(args)
    return options.checked(args, spec, te_support=check_te_support)


def check_te_support(schedule: str) -> Optional[str]:
    """For a schedule with W ops over TransformerEngine layers: can the installed TE defer
    weight gradients (runtime/te_wgrad.py support_problem: its API, its debug mode)? One
    sentence or None (the caller asks only with TE layers)."""
    from ..runtime.te_wgrad import support_problem

    return support_problem(f"--pipeline-schedule {schedule}")


def apply_balance(args: argparse.Namespace, spec: PipelineSpec, model, pp: int, microbatches: int, *,
                  source: str) -> tuple[PipelineSpec, str]:
    """`options.apply_balance`, with the chosen split written into Megatron-LM's arguments (its
    get_model builds from them); a layout replaces the virtual pipeline size options (the
    layout gives the virtual pipeline size itself). Returns the new spec and what to log."""
    chosen, text = options.apply_balance(spec, model, pp, microbatches, args.num_layers, source=source)
    for dest, value in options.split_arguments(chosen.split).items():
        setattr(args, dest, value)
    if chosen.split.layout:
        for dest in options.VIRTUAL_SIZE_ARGS:
            if getattr(args, dest, None) is not None:
                setattr(args, dest, None)
    return chosen, text
