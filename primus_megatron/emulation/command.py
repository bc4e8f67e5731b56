"""What `primus-pipeline emulate` runs once cli.py has checked its options: the host work per op
charged to the plan (given, or measured by a short zb-h1 run), the plan, the launch and the report.
Bad input is refused before the first rank starts (ScheduleError from the plan); a run that fails
raises `EmulationFailed`, one line for cli.py to print. Its options come as `EmulateOptions`, not
the CLI's argparse namespace, so emulation does not depend on how the command line is parsed."""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

from . import launch, planning, reporting


class EmulationFailed(Exception):
    """An emulated run (or the short run measuring host work per op) failed: one line, exit 1."""


@dataclasses.dataclass(frozen=True)
class EmulateOptions:
    """What `emulate` reads of `primus-pipeline emulate`'s options, already checked by cli.py."""
    schedule: str  # a registered schedule or "auto"
    chunks: Optional[int]  # chunks per rank, for schedules that allow a choice
    memory_limit: Optional[float]  # peak activation memory per rank, in microbatch units
    post_validation: bool  # plan for the optimizer's post-validation (the longest per-rank span)
    optimizer_post_validation: bool  # our schedule steps its emulated optimizer under post-validation
    op_overhead_ms: Optional[float]  # host work per op; None: measured by a short zb-h1 run
    steps: int  # measured steps, after one warm-up step
    p2p_mode: str  # how gloo carries p2p: strict, strict-lazy or plain
    p2p_timeout_s: Optional[float]  # None: the launcher's default
    text: bool  # also print what the plan chose (text output; JSON output prints only the report)
    recv_policy: str = "early"  # where our schedule posts its receives: early or just-in-time
    fault: Optional[dict] = None  # an injected fault (`launch.run`'s `fault`): a stalled or killed rank
    recv_stall: float = 1.0  # ROCm's pending-receive stall on our schedule's ops (1: none)
    straggler: Optional[dict] = None  # a slowed rank (`launch.run`'s `straggler`)
    health: Optional[dict] = None  # in-flight health options (get_forward_backward_func's health_*)
    p2p_groups: str = "one"  # our schedule's p2p process groups: one, or per-direction


def emulate(options: EmulateOptions, costs: Any, pp: int, m: int, unit: float, elements: int, baselines: list,
            optimizer: Optional[dict]) -> tuple[list, list, dict]:
    """Plan and run `options.schedule` (and `baselines`) on `pp` emulated ranks at `unit` ms per cost
    unit; (the variants, their results, the report)."""
    scale = unit / 1000.0
    overhead_s, chosen = _op_overhead(options, pp, m, costs, scale, elements)
    variants = planning.plan(options.schedule, pp, m, costs, scale=scale, memory_limit=options.memory_limit,
                             chunks=options.chunks, post_validation=options.post_validation, baselines=baselines,
                             op_overhead_s=overhead_s)
    if optimizer and options.optimizer_post_validation:
        variants[0] = dataclasses.replace(variants[0], post_validation=True)
    try:
        results, memory = launch.run(variants, pp, m, elements=elements, steps=options.steps,
                                     p2p_mode=options.p2p_mode, p2p_timeout_s=options.p2p_timeout_s,
                                     optimizer=optimizer, recv_policy=options.recv_policy,
                                     fault=options.fault, recv_stall=options.recv_stall,
                                     straggler=options.straggler, health=options.health,
                                     p2p_groups=options.p2p_groups)
    except (RuntimeError, TimeoutError) as exc:
        raise EmulationFailed(f"the emulated run of {variants[0].label} at pp={pp}, {m} microbatches failed: "
                              f"{reporting.first_failure(str(exc))}") from None
    report = reporting.report(variants, results, memory, pp=pp, microbatches=m, unit_ms=unit, elements=elements,
                              p2p_mode=options.p2p_mode, optimizer=optimizer)
    if chosen is not None:  # planned with host work per op charged (auto, the cost-planned schedules)
        report["plan_op_overhead_ms"] = round(1e3 * overhead_s, 4)
        report["plan_op_overhead_measured"] = options.op_overhead_ms is None
    if options.schedule == "auto":
        best, rows = chosen
        report["auto"] = {"chose": best, "op_overhead_ms": round(1e3 * overhead_s, 4),
                          "op_overhead_measured": options.op_overhead_ms is None,
                          "candidates": [dataclasses.asdict(r) for r in rows]}
    return variants, results, report


def _op_overhead(options: EmulateOptions, pp: int, m: int, costs, scale: float, elements: int) -> tuple:
    """(host work per op in seconds charged to every op, the plan it chose with: None for a schedule
    planned without costs; (best, rows) for auto; () for the other cost-planned schedules). The plan
    is checked first (bad input is refused before any rank starts); the overhead is --op-overhead or
    measured by a short zb-h1 run."""
    from ..schedules.auto import table as auto_table
    from ..schedules.registry import info as schedule_info

    auto = options.schedule == "auto"
    if not (auto or schedule_info(options.schedule).uses_costs):
        return 0.0, None
    if auto:
        planning.choose(pp, m, costs, scale=scale, op_overhead_s=0.0, memory_limit=options.memory_limit,
                        post_validation=options.post_validation)
    else:
        planning.plan(options.schedule, pp, m, costs, scale=scale, memory_limit=options.memory_limit, chunks=options.chunks,
                      post_validation=options.post_validation)
    if options.op_overhead_ms is not None:
        overhead_s, how = options.op_overhead_ms / 1000.0, "given"
    else:
        try:
            overhead_s = launch.measure_op_overhead(pp, costs, scale=scale, elements=elements,
                                                    p2p_mode=options.p2p_mode, p2p_timeout_s=options.p2p_timeout_s)
        except (RuntimeError, TimeoutError) as exc:
            raise EmulationFailed(f"measuring the host work per op (a short zb-h1 run) at pp={pp} failed: "
                                  f"{reporting.first_failure(str(exc))}") from None
        how = "measured"
    if not auto:
        if options.text:
            print(f"{options.schedule}: planned with {1e3 * overhead_s:.2f} ms of host work per op ({how}) charged "
                  f"to every op\n", flush=True)
        return overhead_s, ()
    best, rows = planning.choose(pp, m, costs, scale=scale, op_overhead_s=overhead_s, memory_limit=options.memory_limit,
                                 post_validation=options.post_validation)
    if options.text:
        print(f"auto: host work per op {1e3 * overhead_s:.2f} ms ({how}), charged to every op; simulated "
              f"iteration times in cost units:\n{auto_table(rows, best)}\nauto: chose {best}\n", flush=True)
    return overhead_s, (best, rows)
