"""The `--pipeline-schedule` argument group, shared by our training script and
Megatron-LM's (as an `extra_args_provider`). Choices come from the registry."""
from __future__ import annotations

import argparse
from typing import Callable, Optional

from ..schedules import names, registry


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
                            " (see `primus-pipeline list`); default: megatron's own schedule")
    group.add_argument("--pipeline-memory-limit", type=float, default=None, metavar="UNITS",
                       help="activation memory limit per rank, in microbatches of a rank's layer share "
                            "(zb-auto and other cost-driven schedules; default 1F1B's: the pipeline size)")
    group.add_argument("--pipeline-chunks", type=int, default=None, metavar="V",
                       help="model chunks per rank for schedules with a variable count (interleaved-1f1b)")
    group.add_argument("--pipeline-p2p-timeout", type=float, default=600.0, metavar="SECONDS",
                       help="how long a rank waits for a pipeline peer before failing with a diagnosis")
    group.add_argument("--pipeline-costs", default=None, metavar="F,B,W,COMM",
                       help="relative op costs for cost-driven schedules (default: equal)")
    return parser


def check_schedule_args(args: argparse.Namespace) -> Optional[str]:
    """One sentence describing what is wrong with the schedule options, or None."""
    name = getattr(args, "pipeline_schedule", None)
    if name is None:
        return None
    try:
        entry = registry.info(name)
        registry.resolve_chunks(entry, getattr(args, "pipeline_chunks", None))
    except ValueError as exc:
        return str(exc)
    if args.pipeline_p2p_timeout <= 0:
        return f"--pipeline-p2p-timeout must be a positive number of seconds, got {args.pipeline_p2p_timeout:g}"
    if args.pipeline_memory_limit is not None and not args.pipeline_memory_limit > 0:
        return f"--pipeline-memory-limit must be a positive number of activation units, got {args.pipeline_memory_limit:g}"
    if getattr(args, "pipeline_costs", None):
        try:
            parse_costs(args.pipeline_costs)
        except ValueError as exc:
            return str(exc)
    return None


def parse_costs(text: str):
    """'F,B,W[,COMM]' -> schedules.Costs."""
    from ..schedules import Costs

    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--pipeline-costs must be F,B,W[,COMM] numbers, got {text!r}") from None
    if len(values) not in (3, 4):
        raise ValueError(f"--pipeline-costs must be F,B,W[,COMM] numbers, got {text!r}")
    f, b, w = values[:3]
    return Costs(f=f, b=b, w=w, comm=values[3] if len(values) == 4 else 0.0)
