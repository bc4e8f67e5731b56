"""primus-pipeline: plan pipeline schedules before spending cluster hours.

    primus-pipeline list
    primus-pipeline simulate --schedule zbv --pp 8 --microbatches 24 --plot zbv.png
    primus-pipeline simulate --schedule zb-auto --pp 8 -m 32 --cost-f 18.5 --cost-b 18.1 --cost-w 9.3 \
        --cost-comm 0.6 --mem-b -0.63 --mem-w -0.37 --memory-limit 16 --post-validation
    primus-pipeline compare --pp 8 --microbatches 24 --plot all.png
    primus-pipeline export --schedule zb-h1 --pp 4 --microbatches 8 --format torch
    primus-pipeline balance --profile run.profile.json --schedule zbv --pp 8 --microbatches 24 --num-layers 32
    primus-pipeline advise --model llama3-70b --pp 8 --microbatches 32
    primus-pipeline emulate --schedule zb-auto --pp 16 -m 48 --cost-f 11.3 --cost-b 11.2 --cost-w 8.1 --baselines all

Pure Python: imports the planner only (no torch, no megatron); matplotlib
only when a picture is asked for; `emulate` alone runs the torch runtime. Bad arguments print one sentence and exit
with status 2; set PRIMUS_DEBUG=1 to see tracebacks of unexpected errors.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shlex
import sys
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

if TYPE_CHECKING:  # emulation (and torch) load only when `emulate` runs
    from .emulation.command import EmulateOptions

PROG = "primus-pipeline"
COST_FIELDS = ("f", "b", "w", "comm")


class UsageError(Exception):
    """Bad command-line input: one sentence, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line (`primus-pipeline: error: ...`)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")


# ---------------------------------------------------------------- arguments

def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {value}")
        return value

    return parse


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def _cost(text: str) -> Any:
    try:
        values = [_number(part.strip()) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a finite number or a comma-separated list of them (per rank or per stage), got {text!r}") from None
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return values[0] if len(values) == 1 else tuple(values)


def _factors(text: str) -> tuple[float, ...]:
    """A comma-separated list of positive finite numbers (--cost-mb-scale)."""
    try:
        values = tuple(_number(part.strip()) for part in text.split(","))
    except ValueError:
        values = ()
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(
            f"must be a comma-separated list of positive numbers, one factor per microbatch, got {text!r}")
    return values


def _positive(unit: str) -> Callable[[str], float]:
    """Parser of a finite number > 0; `unit` names it in the error."""
    def parse(text: str) -> float:
        try:
            value = _number(text)
        except ValueError:
            value = 0.0
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be a positive number of {unit}, got {text!r}")
        return value

    return parse


def _non_negative(unit: str) -> Callable[[str], float]:
    """Parser of a finite number >= 0; `unit` names it in the error."""
    def parse(text: str) -> float:
        try:
            value = _number(text)
        except ValueError:
            value = -1.0
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be a number >= 0 of {unit}, got {text!r}")
        return value

    return parse


def _memory_delta(text: str) -> Any:
    """A number or a comma-separated list of them, any sign (memory an op adds or frees)."""
    try:
        values = [_number(part.strip()) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a finite number or a comma-separated list of them (per rank or per stage), got {text!r}") from None
    return values[0] if len(values) == 1 else tuple(values)


_memory_limit = _positive("activation units")
_bandwidth = _positive("activation units per time unit")


def _add_offload(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group(
        "activation offload", "F's saved activations go to host memory after the F and come back before the B (and "
                              "what B keeps for W, after the B and back before the W), on a copy lane per direction "
                              "and rank that overlaps compute; with --memory-limit, the limit bounds what stays on "
                              "the device")
    group.add_argument("--offload", choices=("off", "all", "auto"), default="off",
                       help="off (default); all: every F's activations and every W share (what B keeps for W); "
                            "auto: the fastest plan within --memory-limit, taking those whose lifespan hides the "
                            "copies first")
    group.add_argument("--offload-bandwidth", type=_bandwidth, default=1.0, metavar="X",
                       help="each copy lane's bandwidth in activation units per time unit (one rank's activations "
                            "of a microbatch per unit of --cost-f's time; default 1)")
_seconds = _positive("seconds")


def _add_recv_policy(p: argparse.ArgumentParser, default: Optional[str] = "early") -> None:
    p.add_argument("--recv-policy", "--pipeline-recv-policy", dest="recv_policy",
                   choices=("early", "just-in-time", "auto"), default=default,
                   help="where each p2p receive is posted: early (as soon as the global message order allows), "
                        "just-in-time (right before its consumer, where the hang check allows: on ROCm a pending "
                        "receive stalls compute), auto (just-in-time with a ROCm build of torch, else early)"
                        + ("" if default is None else f"; default {default}"))
    p.add_argument("--p2p-groups", "--pipeline-p2p-groups", dest="p2p_groups", choices=("one", "per-direction"),
                   default=None if default is None else "one",
                   help="process groups of the p2p queues the hang check and lowered makespan run under: one "
                        "(one queue per rank) or per-direction (a second group for what is sent towards a lower "
                        "rank: two queues per rank)" + ("" if default is None else "; default one"))


ROCM_RECV_STALL = 1.3  # --rocm-recv-stall's factor when none is given: a guess until an AMD run measures it


def _stall_factor(text: str) -> float:
    try:
        value = _number(text)
    except ValueError:
        value = 0.0
    if not value >= 1:
        raise argparse.ArgumentTypeError(f"must be a factor >= 1 on the compute time, got {text!r}")
    return value


def _add_recv_stall(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rocm-recv-stall", type=_stall_factor, nargs="?", const=ROCM_RECV_STALL, default=None,
                   metavar="FACTOR",
                   help="model ROCm's pending-receive stall (PyTorch #172668): a compute op that starts while a "
                        "receive posted on its rank has not completed takes FACTOR times as long (default factor "
                        f"{ROCM_RECV_STALL}; off without the option)")


def _recv_policy(args: argparse.Namespace) -> str:
    from .options import resolve_recv_policy

    return resolve_recv_policy(args.recv_policy)


def _lowered_makespan(schedule: Any, costs: Any, policy: str, stall: Optional[float] = None,
                      p2p_groups: str = "one") -> float:
    """The makespan of the schedule lowered under `policy` (hang-checked) on NCCL/RCCL's queues, one
    per rank and process group of `p2p_groups`, with the ROCm receive stall `stall` if given
    (`rendezvous` module doc)."""
    from .schedules import validate
    from .schedules.rendezvous import run_p2p

    sc = costs.resolve(schedule.pp, schedule.chunks_per_rank, schedule.placement, schedule.microbatches)
    return run_p2p(validate(schedule, costs=costs, recv_policy=policy, p2p_groups=p2p_groups), sc,
                   recv_stall=stall or 1.0).makespan


def _stall_text(args: argparse.Namespace) -> str:
    return "" if args.rocm_recv_stall is None else (
        f", with the ROCm receive stall (an op starting while a receive of its rank is pending takes "
        f"x{args.rocm_recv_stall:g})")


def _add_common(p: argparse.ArgumentParser, *, schedule: bool, size_required: bool = True) -> None:
    if schedule:
        p.add_argument("--schedule", required=True, metavar="NAME", help="a registered schedule (see 'primus-pipeline list')")
    p.add_argument("--pp", required=size_required, type=_int_at_least(2), metavar="P", help="pipeline ranks (>= 2)")
    p.add_argument("--microbatches", "-m", required=size_required, type=_int_at_least(1), metavar="M",
                   help="microbatches per step (>= 1)")
    costs = p.add_argument_group("costs", "a number, or a comma-separated list: per rank (P values) or per virtual stage "
                                          "(P x chunks values); f, b, w are one rank's full share of a microbatch")
    costs.add_argument("--cost-f", type=_cost, default=1.0, metavar="F", help="forward time (default 1)")
    costs.add_argument("--cost-b", type=_cost, default=1.0, metavar="B", help="input-gradient time (default 1)")
    costs.add_argument("--cost-w", type=_cost, default=1.0, metavar="W", help="weight-gradient time (default 1)")
    costs.add_argument("--cost-comm", type=_cost, default=0.0, metavar="C",
                       help="latency of one p2p message (default 0)")
    costs.add_argument("--cost-bw", type=_cost, default=None, metavar="BW",
                       help="a backward run as one op, as 1f1b runs it (default B + W; measured, usually less)")
    costs.add_argument("--cost-a2a", type=_cost, default=0.0, metavar="A",
                       help="the expert-parallel all-to-all part of each F and each B, included in their times; an "
                            "overlapped F&B pair (dualpipev) hides each one's under the other's compute (default 0)")
    costs.add_argument("--cost-mb-scale", type=_factors, default=None, metavar="S0,S1,...",
                       help="one factor per microbatch (as many as --microbatches) on its F, B, W and all-to-all "
                            "times, not on p2p latency or memory: microbatches of packed variable-length sequences "
                            "that cost different amounts (default: all the same)")
    memory = p.add_argument_group(
        "memory model", "activation memory each op adds, in units of what an F adds (F adds 1): the two sum to -1. "
                        "Give one and the other follows. Default: B frees nothing and W frees it all (-1). The "
                        "paper's model (and what the runtime measures): B frees all but what the weight gradient "
                        "needs, W frees that; per transformer layer the weight gradient keeps 32sbh of the "
                        "sb(34h+5as) an F adds (about --mem-w -0.4)")
    memory.add_argument("--mem-b", type=_memory_delta, default=None, metavar="MB",
                        help="memory a B adds (negative: frees); default 0, or -1 - MW")
    memory.add_argument("--mem-w", type=_memory_delta, default=None, metavar="MW",
                        help="memory a W adds (<= 0); default -1, or -1 - MB")
    p.add_argument("--memory-limit", type=_memory_limit, default=None, metavar="X",
                   help="peak activation memory per rank, in units of one microbatch's activations on one rank")
    p.add_argument("--post-validation", action="store_true",
                   help="the run steps its optimizer with --optimizer-post-validation (no barrier between "
                        "iterations): cost-driven schedules minimise the longest per-rank span (the async bubble) "
                        "instead of the makespan")


def _add_simulate(sub: Any) -> None:
    p = sub.add_parser("simulate", help="timing, bubble and memory of one schedule",
                       description="Simulate one schedule: makespan, bubble rates, per-rank busy/idle and peak memory.")
    _add_common(p, schedule=True)
    p.add_argument("--chunks", type=_int_at_least(1), default=None, metavar="C",
                   help="chunks per rank, for schedules that allow a choice (interleaved-1f1b)")
    p.add_argument("--plot", metavar="FILE", help="write the timeline picture (.png or .svg)")
    p.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace (.json)")
    p.add_argument("--json", action="store_true", help="print the schedule's JSON export instead of the table")
    p.add_argument("--mb-order", choices=("data", "best"), default="data",
                   help="with --cost-mb-scale: run the microbatches in the data's order (default), or in the order "
                        "of the lowest simulated iteration time among identity, sorted, mountain and swaps "
                        "(schedules.mb_order; the candidates are printed)")
    _add_offload(p)
    _add_recv_policy(p)
    _add_recv_stall(p)


def _add_compare(sub: Any) -> None:
    p = sub.add_parser("compare", help="every schedule side by side",
                       description="Simulate every registered schedule for the same pipeline and costs.")
    _add_common(p, schedule=False)
    p.add_argument("--plot", metavar="FILE", help="write one picture with a timeline per schedule (.png or .svg)")
    p.add_argument("--time-limit", type=_seconds, default=10.0, metavar="SECONDS",
                   help="time budget of each solve of the integer program (default 10): zb-optimal's row and the "
                        "'vs optimum' column (one solve per placement and peak memory, up to 36 ops per rank); past "
                        "it the best order found so far is used, which may not be optimal")
    p.add_argument("--profile", default=None, metavar="FILE",
                   help="costs from a profile (make gpu-bench's, or training's --pipeline-profile-out; seconds) "
                        "instead of --cost-*: each schedule on its own chunk layout's stage costs, the layers split "
                        "evenly (`balance` and `advise` choose splits)")
    p.add_argument("--num-layers", type=_int_at_least(1), default=None, metavar="N",
                   help="transformer layers, with --profile (default: the profiled run's)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of the table")
    _add_offload(p)
    _add_recv_policy(p)
    _add_recv_stall(p)


def _add_export(sub: Any) -> None:
    p = sub.add_parser("export", help="the schedule's op order as JSON or torch action strings",
                       description="Export one schedule: JSON (the documented format) or torch.distributed.pipelining "
                                   "action strings, one rank per line.")
    _add_common(p, schedule=True)
    p.add_argument("--chunks", type=_int_at_least(1), default=None, metavar="C",
                   help="chunks per rank, for schedules that allow a choice (interleaved-1f1b)")
    p.add_argument("--format", choices=("json", "torch"), default="json", help="output format (default json)")
    p.add_argument("--output", "-o", metavar="FILE", help="write to FILE instead of standard output")
    _add_recv_policy(p, default=None)


def _add_balance(sub: Any) -> None:
    p = sub.add_parser("balance", help="the layer split that runs a schedule fastest, from a measured profile",
                       description="Simulate the schedule on every layer split megatron-core can build (first/last "
                                   "pipeline rank layer counts, embedding/loss accounted) under the per-layer, "
                                   "embedding and head costs of a profile (written by training with "
                                   "--pipeline-profile-out), and print the options of the fastest.")
    p.add_argument("--profile", required=True, metavar="FILE", help="a profile written with --pipeline-profile-out")
    p.add_argument("--schedule", required=True, metavar="NAME",
                   help="a registered schedule, or auto: every schedule training's --pipeline-schedule auto takes, "
                        "each on its fastest split, the fastest recommended")
    p.add_argument("--pp", required=True, type=_int_at_least(2), metavar="P", help="pipeline ranks (>= 2)")
    p.add_argument("--microbatches", "-m", required=True, type=_int_at_least(1), metavar="M",
                   help="microbatches per step (>= 1)")
    p.add_argument("--num-layers", required=True, type=_int_at_least(1), metavar="N", help="transformer layers")
    p.add_argument("--memory-limit", type=_memory_limit, default=None, metavar="X",
                   help="peak activation memory per rank, in units of an average rank's layers for one microbatch")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Plan zero-bubble pipeline schedules: list, simulate, compare, export, balance, advise; "
                                               "emulate runs one on local ranks with emulated devices.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    sub.add_parser("list", help="registered schedules", description="Every registered schedule name and alias.")

    _add_simulate(sub)
    _add_compare(sub)
    _add_export(sub)
    _add_balance(sub)
    from .advise_command import add_parser as _add_advise

    _add_advise(sub)
    from .postmortem_command import add_parser as _add_postmortem

    _add_postmortem(sub)

    p = sub.add_parser("emulate", help="run the real runtime on P local ranks with emulated devices",
                       description="Run a schedule with the real runtime (executor, strict NCCL-order p2p, weight-"
                                   "gradient store) on P local gloo ranks whose model chunks take the given op times "
                                   "instead of computing, and print measured against simulated iteration time and "
                                   "bubble rate. A dry run of a pipeline before a cluster job: a hang shows here, "
                                   "named. Costs: --cost-* (or --pipeline-costs), a profile (--profile) or one of the "
                                   "Zero Bubble paper's settings (--paper-setting).")
    _add_common(p, schedule=True, size_required=False)
    p.add_argument("--chunks", type=_int_at_least(1), default=None, metavar="C",
                   help="chunks per rank, for schedules that allow a choice (interleaved-1f1b)")
    p.add_argument("--op-overhead", type=_non_negative("milliseconds"), default=None, metavar="MS",
                   help="the runtime's host work per op, charged to every op where the plan depends on the costs: "
                        "every candidate of --schedule auto, and the order of zb-auto and the V schedules "
                        "(default: measured first on these emulated chunks, by one short zb-h1 run)")
    p.add_argument("--pipeline-costs", default=None, metavar="F,B,W[,COMM[,BW]][,mem-b=X][,mem-w=Y]",
                   help="costs as training's --pipeline-costs takes them (instead of --cost-*)")
    p.add_argument("--profile", default=None, metavar="FILE",
                   help="costs from a profile written by training with --pipeline-profile-out (seconds)")
    p.add_argument("--num-layers", type=_int_at_least(1), default=None, metavar="N",
                   help="transformer layers, with --profile (default: the profiled run's)")
    p.add_argument("--paper-setting", default=None, metavar="NAME",
                   help="the Zero Bubble paper's profiled costs (ms) and memory model, and its pp and microbatches: "
                        "t5-MODEL-pP-mM (Table 5) or t8-MODEL-pP-mM (Table 8, per-chunk costs), e.g. t5-1.5B-p8-m32")
    p.add_argument("--time-unit", type=_positive("milliseconds"), default=None, metavar="MS",
                   help="milliseconds of emulated time per cost unit (default 1: costs in ms; with --profile "
                        "1000: its seconds)")
    p.add_argument("--activation-kib", type=_positive("KiB"), default=64.0, metavar="K",
                   help="size of one microbatch's activation (and gradient) between stages, KiB (default 64)")
    p.add_argument("--steps", type=_int_at_least(1), default=3, metavar="N",
                   help="measured steps (default 3; the median is reported), after one warm-up step")
    p.add_argument("--baselines", default="", metavar="LIST",
                   help="also run, in the same processes: megatron-1f1b, megatron-interleaved, "
                        "megatron-combined-1f1b (its order and pairs, run by our runtime), torch-interleaved-zb, "
                        "torch-zbv, torch-dualpipev (torch.distributed.pipelining's; comma-separated), or all")
    p.add_argument("--p2p-mode", choices=("strict", "strict-lazy", "plain"), default="strict",
                   help="how gloo carries p2p: strict (as NCCL orders it, eager init; default), strict-lazy, plain")
    p.add_argument("--p2p-timeout", type=_seconds, default=None, metavar="SECONDS",
                   help="a rank waiting this long on another fails the run, naming who waited for what (default: "
                        "60 + twice the longest planned step + 1 per rank)")
    p.add_argument("--optimizer-ms", type=_positive("milliseconds"), default=None, metavar="MS",
                   help="end every iteration with an emulated optimizer step: a real all-reduce of the gradient norm "
                        "(every rank waits for the slowest) and MS of step time; steps then run back to back")
    p.add_argument("--optimizer-post-validation", action="store_true",
                   help="with --optimizer-ms: our schedule steps under post-validation (no global synchronisation "
                        "before the step; megatron's baselines keep the synchronous step)")
    p.add_argument("--straggler", default=None, metavar="RANK:FACTOR[@STEP]",
                   help="every op of pipeline rank RANK (and its optimizer step, with --optimizer-ms) takes FACTOR "
                        "times as long, from step STEP on if given (steps counted from 1, the warm-up step "
                        "included): a slow GPU for the in-flight health line to name (docs/health.md)")
    p.add_argument("--fault", default=None, metavar="ACTION:RANK:OP",
                   help="inject a fault into our schedule's run: stall (the op never ends) or kill (SIGKILL) "
                        "pipeline rank RANK as its op OP (F or B and a microbatch, e.g. F2) starts; with "
                        "PRIMUS_HANG_REPORT_DIR set the ranks leave reports for `postmortem` (docs/health.md)")
    p.add_argument("--timeline", metavar="FILE", help="write measured and simulated timelines as a Chrome/Perfetto "
                                                      "trace (.json)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    _add_health(p)
    _add_recv_policy(p)
    _add_recv_stall(p)
    return parser


def _add_health(p: argparse.ArgumentParser) -> None:
    from .options import add_health_args  # training's own options, so emulate reads as training does

    add_health_args(p, replan="off")


# ---------------------------------------------------------------- helpers

def _check_output(option: str, path: str, extensions: Optional[tuple[str, ...]] = None) -> None:
    """Reject an output path before any work: wrong extension, missing or unwritable folder."""
    if extensions is not None:
        ext = os.path.splitext(path)[1].lower()
        if ext not in extensions:
            raise UsageError(f"{option} file {path!r} must end in {' or '.join(extensions)}")
    if os.path.isdir(path):
        raise UsageError(f"{option} {path!r} is a folder, not a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"{option} cannot write {path!r}: folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{option} cannot write {path!r}: folder {folder!r} is not writable")


def _costs(args: argparse.Namespace):
    from .schedules import Costs
    from .schedules.costs import memory_model

    mem_b, mem_w = memory_model(args.mem_b, args.mem_w)
    return Costs(f=args.cost_f, b=args.cost_b, w=args.cost_w, comm=args.cost_comm, bw=args.cost_bw,
                 mem_b=mem_b, mem_w=mem_w, a2a=args.cost_a2a, mb_scale=args.cost_mb_scale)


def _num(x: float, decimals: int = 4) -> str:
    text = f"{x:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[bool] = ()) -> str:
    """Plain aligned text: columns padded, numbers right-aligned where `right` says so.
    A short row's last cell spans the remaining columns (and does not widen them)."""
    n = len(headers)
    widths = [max([len(str(h))] + [len(str(r[i])) for r in rows if i < len(r) and (len(r) == n or i < len(r) - 1)])
              for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, cell in enumerate(cells):
            if i >= len(widths) or (len(cells) < n and i == len(cells) - 1):
                out.append(str(cell))
            elif i < len(right) and right[i]:
                out.append(str(cell).rjust(widths[i]))
            else:
                out.append(str(cell).ljust(widths[i]))
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep] + [line(r) for r in rows])


def _write_outputs(outputs: list[tuple[str, bytes | str]]) -> None:
    """Write every output only now that all of them are ready: each to a temporary
    file next to it first, then all renamed into place, so that a failure leaves
    no output file behind (and never a half-written one)."""
    import tempfile

    staged: list[tuple[str, str]] = []
    try:
        for path, data in outputs:
            raw = data.encode("utf-8") if isinstance(data, str) else data
            try:
                fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix="-" + os.path.basename(path),
                                           dir=os.path.dirname(os.path.abspath(path)))
                staged.append((tmp, path))
                with os.fdopen(fd, "wb") as fh:
                    fh.write(raw)
                os.chmod(tmp, 0o644)
            except OSError as exc:
                raise UsageError(f"cannot write {path!r}: {exc.strerror or exc}") from None
        for tmp, path in staged:
            os.replace(tmp, path)
    finally:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
    for path, _ in outputs:
        print(f"{PROG}: wrote {path}", file=sys.stderr)


def _render_plot(results: Any, path: str, title: str) -> bytes:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'primus_megatron[plot]'") from None
    from .schedules.plot import plot_format, render_timeline

    return render_timeline(results, plot_format(path), title=title)


def _chunks_label(entry: Any) -> str:
    return f">={entry.chunks}" if entry.variable_chunks else str(entry.chunks)


# ---------------------------------------------------------------- commands

def cmd_list(args: argparse.Namespace) -> int:
    from .schedules import registry

    rows = []
    for name in registry.names(aliases=True):
        entry = registry.info(name)
        desc = entry.description
        if name != entry.name:
            desc = f"alias of {entry.name}: {desc}"
        if entry.needs_extra:
            desc += f" (needs pip extra '{entry.needs_extra}')"
        rows.append([name, _chunks_label(entry), entry.placement, entry.memory, desc])
    print(table(["name", "chunks/rank", "placement", "memory", "description"], rows))
    print("memory: peak activation memory per rank, as a multiple of 1F1B's (p microbatches' worth at pipeline "
          "size p), or as microbatches' worth at most (ceil(p/3)+1 is 4 of 1F1B's 8 at p=8); "
          "'primus-pipeline compare --pp P -m M' gives yours")
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from .schedules import export, generate, simulate

    if args.plot:
        _check_output("--plot", args.plot, (".png", ".svg"))
    if args.trace:
        _check_output("--trace", args.trace)
    costs = _costs(args)
    order, order_text = None, ""
    if args.mb_order == "best":
        costs, order, order_text = _best_mb_order(costs, args)
    offloading = args.offload != "off"
    schedule = generate(args.schedule, args.pp, args.microbatches, costs=costs,
                        memory_limit=None if offloading else args.memory_limit, chunks=args.chunks,
                        post_validation=args.post_validation)
    result = simulate(schedule, costs)
    policy = _recv_policy(args)
    queued = _lowered_makespan(schedule, costs, policy, args.rocm_recv_stall, args.p2p_groups)
    warn_few_microbatches(schedule.name, args.pp, args.microbatches, costs, chunks=schedule.chunks_per_rank)
    moved = _offload_result(schedule, costs, args) if offloading else None
    outputs: list[tuple[str, bytes | str]] = []
    if args.plot:
        title = f"{schedule.name}: pp={schedule.pp}, {schedule.microbatches} microbatches"
        drawn = [(f"{schedule.name}, no offload", result), (f"{schedule.name}, offload {args.offload}", moved)] \
            if moved else [result]
        outputs.append((args.plot, _render_plot(drawn, args.plot, title)))
    if args.trace:
        from .schedules.trace import chrome_trace_json

        outputs.append((args.trace, chrome_trace_json(result.timeline, name=schedule.name)))
    if args.json:
        data = export.to_dict(schedule, costs, offload=moved)
        if order is not None:
            data["mb_order"] = list(order)  # the data microbatch each schedule microbatch runs
        data["recv_policy"], data["lowered_makespan"] = policy, round(queued, 6)
        data["p2p_groups"] = args.p2p_groups
        data["rocm_recv_stall"] = args.rocm_recv_stall
        text = json.dumps(data, indent=1)
    else:
        head = (f"schedule {schedule.name}: pp={schedule.pp}, microbatches={schedule.microbatches}, "
                f"{schedule.chunks_per_rank} chunk(s) per rank, {schedule.placement} placement; planned for "
                + ("post-validation (no optimizer barrier: the longest span, bubble async)" if args.post_validation
                   else "an optimizer barrier (the makespan, bubble sync)"))
        summary = table(["makespan", "bubble sync", "bubble async", "max peak memory"],
                        [[_num(result.makespan), f"{result.bubble_sync:.4f}", f"{result.bubble_async:.4f}",
                          _num(result.max_peak_memory)]], right=[True] * 4)
        ranks = table(["rank", "busy", "idle", "span", "peak memory"],
                      [[str(r), _num(result.busy[r]), _num(result.idle[r]), _num(result.span[r]), _num(result.peak_memory[r])]
                       for r in range(schedule.pp)], right=[True] * 5)
        text = (f"{head}\n\n{summary}\n\n{ranks}\n\nreceives posted {policy}: makespan {_num(queued)} with every "
                f"rank's p2p queued as NCCL/RCCL runs it{_stall_text(args)} (hang check passed, eager and lazy init)")
        if moved:
            text += "\n\n" + _offload_table(moved, result, args)
        text += order_text
    _write_outputs(outputs)
    print(text)
    return 0


def warn_few_microbatches(name: str, pp: int, microbatches: int, costs: Any, *, chunks: Optional[int] = None,
                          label: Optional[str] = None, fix: str = "raise --microbatches to --pp or more") -> None:
    """Fewer microbatches than pipeline ranks: the bubble it costs, once, on stderr (stdout may be JSON)."""
    from .schedules.few_microbatches import few_microbatches

    text = few_microbatches(name, pp, microbatches, costs=costs, chunks=chunks, fix=fix, label=label)
    if text:
        print(f"{PROG}: warning: {text}", file=sys.stderr)


def _best_mb_order(costs, args: argparse.Namespace) -> tuple[Any, tuple, str]:
    """--mb-order best: the costs as the schedule sees them in the chosen order, the order, its report."""
    from .schedules import mb_order

    if costs.mb_scale is None:
        raise UsageError("--mb-order best needs --cost-mb-scale (one factor per microbatch)")
    order, tried = mb_order.choose_order(args.schedule, args.pp, costs, memory_limit=args.memory_limit,
                                         chunks=args.chunks, post_validation=args.post_validation)
    return mb_order.permuted(costs, order), order, (
        f"\n\nmicrobatch order (data microbatch run as schedule microbatch 0, 1, ...): "
        f"{','.join(map(str, order))}\n\n{mb_order.table_text(tried, order)}")


def _offload_result(schedule, costs, args: argparse.Namespace):
    """The offload plan --offload asks for under --memory-limit, timed; ScheduleError where the limit cannot be met."""
    from .schedules import ScheduleError
    from .schedules import offload

    moved = offload.choose(schedule, args.offload, bandwidth=args.offload_bandwidth, costs=costs,
                           memory_limit=args.memory_limit)
    if args.memory_limit is not None and moved.max_peak_memory > args.memory_limit + 1e-9:
        raise ScheduleError(f"schedule {schedule.name!r} with --offload {args.offload} at bandwidth "
                            f"{_num(args.offload_bandwidth)} keeps {_num(moved.max_peak_memory)} activation units "
                            f"resident, above --memory-limit {_num(args.memory_limit)}")
    return moved


def _offload_table(moved, plain, args: argparse.Namespace) -> str:
    head = (f"offload {args.offload} at {_num(args.offload_bandwidth)} activation units per time unit per lane: "
            f"{moved.plan.count - moved.plan.count_w} of the F ops' activations and {moved.plan.count_w} W shares "
            f"(what B keeps for W) go to host; makespan {_num(moved.makespan)} "
            f"(without offload {_num(plain.makespan)}), max resident peak {_num(moved.max_peak_memory)} "
            f"(without {_num(plain.max_peak_memory)})")
    rows = []
    for r in range(len(moved.peak_memory)):
        shares = sum(len(key) == 3 for key in moved.plan.reload_at[r])
        rows.append([str(r), str(len(moved.plan.reload_at[r]) - shares), str(shares), _num(plain.peak_memory[r]),
                     _num(moved.peak_memory[r]), _num(moved.stall[r])])
    return head + "\n\n" + table(["rank", "F offloaded", "W shares offloaded", "peak without", "resident peak",
                                   "B and W wait for reloads"], rows, right=[True] * 6)


def _compare_costs(args: argparse.Namespace) -> Callable[[Any], Any]:
    """The costs each schedule of `compare` runs on, by its registry entry: the --cost-* options, or a
    profile's per-stage costs for the schedule's own chunk layout (--profile)."""
    from .schedules import ScheduleError, registry

    if args.profile:
        flags = _given_cost_flags(args) + [f for f, v in (("--mem-b", args.mem_b), ("--mem-w", args.mem_w)) if v is not None]
        if flags:
            raise UsageError(f"give --profile or the --cost-* options, not both ({', '.join(flags)})")
        layout = _profile_layout(args, args.pp)
        return lambda entry: layout(entry.chunks)
    costs = _costs(args)
    # Costs that fit no registered layout are the user's error, not every schedule's.
    layouts = {(e.chunks, e.placement) for e in map(registry.info, registry.names())}
    errors = []
    for chunks, placement in sorted(layouts):
        try:
            costs.resolve(args.pp, chunks, placement, args.microbatches)
        except ScheduleError as exc:
            errors.append(str(exc))
    if len(errors) == len(layouts):
        raise ScheduleError(errors[0])
    return lambda entry: costs


def _compare_row(name: str, costs, args: argparse.Namespace, base: Optional[float]) -> tuple[dict, Any, Any]:
    """(the row of one schedule, its simulation, what is drawn); ScheduleError where it is not built."""
    from .schedules import generate, simulate

    offloading = args.offload != "off"
    schedule = generate(name, args.pp, args.microbatches, costs=costs,
                        memory_limit=None if offloading else args.memory_limit,
                        time_limit=args.time_limit, post_validation=args.post_validation)
    result = simulate(schedule, costs)
    moved = _offload_result(schedule, costs, args) if offloading else None
    shown = moved or result
    row = {"name": name, "chunks": schedule.chunks_per_rank, "makespan": shown.makespan,
           "lowered_makespan": _lowered_makespan(schedule, costs, _recv_policy(args), args.rocm_recv_stall,
                                                 args.p2p_groups),
           "bubble_sync": shown.bubble_sync, "bubble_async": shown.bubble_async,
           "max_peak_memory": shown.max_peak_memory, "memory_vs_1f1b": shown.max_peak_memory / base if base else None}
    if moved:
        row.update(offloaded_f=moved.plan.count - moved.plan.count_w, offloaded_w=moved.plan.count_w,
                   makespan_without=result.makespan, peak_without=result.max_peak_memory)
    return row, result, shown


def _optimum_gaps(args: argparse.Namespace, results: list, costs_for) -> tuple[dict, str]:
    """'vs optimum' per schedule name where the ILP can answer, and a line on where it cannot."""
    from .schedules import optimality, registry
    from .schedules.builtin.optimal import MAX_OPS_PER_RANK

    if args.offload != "off":
        return {}, "vs optimum: not computed with offload (the optimum is of the order without it)"
    small = [r for r in results if 3 * args.microbatches * r.schedule.chunks_per_rank <= MAX_OPS_PER_RANK]
    if not small:
        return {}, (f"vs optimum: not computed: the ILP (zb-optimal) takes at most {MAX_OPS_PER_RANK} ops per rank "
                    f"(3 x microbatches x chunks; here {3 * args.microbatches} or more)")
    try:
        import highspy  # noqa: F401
    except ImportError:
        return {}, "vs optimum: not computed: the ILP needs highspy (pip install 'primus_megatron[ilp]')"
    gaps = {r.schedule.name: "too large for the ILP" for r in results if r not in small}
    for chunks in sorted({r.schedule.chunks_per_rank for r in small}):
        group = [r for r in small if r.schedule.chunks_per_rank == chunks]
        costs = costs_for(registry.info(group[0].schedule.name))
        gaps.update((k, str(v)) for k, v in optimality.distances(group, costs, args.time_limit,
                                                                 post_validation=args.post_validation).items())
    what = "longest per-rank span" if args.post_validation else "makespan"
    return gaps, (f"vs optimum: {what} over the shortest order the ILP (zb-optimal) finds for the same placement "
                  "within the schedule's own peak memory, once --time-limit seconds per layout and memory; '>=' "
                  "where the solver did not prove its order optimal in time")


def cmd_compare(args: argparse.Namespace) -> int:
    from .schedules import ScheduleError, generate, registry, simulate

    if args.plot:
        _check_output("--plot", args.plot, (".png", ".svg"))
    costs_for = _compare_costs(args)
    one = costs_for(registry.info("1f1b"))
    try:
        base = simulate(generate("1f1b", args.pp, args.microbatches, costs=one, validate=False), one).max_peak_memory
    except ScheduleError:
        base = None
    rows, results, drawn, failures = [], [], [], []
    for name in registry.names():
        try:
            row, result, shown = _compare_row(name, costs_for(registry.info(name)), args, base)
        except ScheduleError as exc:
            failures.append(f"{name}: {exc}")
            rows.append({"name": name, "chunks": _chunks_label(registry.info(name)), "not_built": str(exc)})
            continue
        rows.append(row)
        results.append(result)
        drawn.append(shown)
    if not results:
        raise ScheduleError(f"no registered schedule can be built for these arguments ({failures[0]})")
    fastest = min(results, key=lambda r: r.makespan).schedule
    warn_few_microbatches(fastest.name, args.pp, args.microbatches, costs_for(registry.info(fastest.name)),
                          chunks=fastest.chunks_per_rank, label=f"even the fastest schedule here ({fastest.name})")
    gaps, gap_note = _optimum_gaps(args, results, costs_for)
    for row in rows:
        if "makespan" in row and gaps:
            row["vs_optimum"] = gaps.get(row["name"])
    outputs: list[tuple[str, bytes | str]] = []
    if args.plot:
        title = f"pp={args.pp}, {args.microbatches} microbatches"
        outputs.append((args.plot, _render_plot(drawn, args.plot, title)))
    _write_outputs(outputs)
    if args.json:
        print(json.dumps({"pp": args.pp, "microbatches": args.microbatches, "profile": args.profile,
                          "memory_limit": args.memory_limit, "post_validation": args.post_validation,
                          "offload": args.offload, "recv_policy": _recv_policy(args), "p2p_groups": args.p2p_groups,
                          "rocm_recv_stall": args.rocm_recv_stall, "schedules": rows,
                          "vs_optimum": gap_note}, indent=1))
    else:
        print(_compare_text(args, rows, bool(gaps)) + "\n\n" + gap_note + f"\n\nreceives posted {_recv_policy(args)}, "
              f"p2p groups {args.p2p_groups}: "
              "every schedule above passes the NCCL/RCCL hang check with them (lowered_makespan in --json"
              f"{_stall_text(args)})")
    return 0


def _compare_text(args: argparse.Namespace, rows: list[dict], gaps: bool) -> str:
    offloading = args.offload != "off"
    head = f"pp={args.pp}, microbatches={args.microbatches}" + (
        f", memory limit {_num(args.memory_limit)}" if args.memory_limit is not None else "") + (
        ", planned for post-validation (the longest per-rank span)" if args.post_validation else "") + (
        f"; costs from {args.profile} (seconds)" if args.profile else "")
    if offloading:
        head += (f", offload {args.offload} at {_num(args.offload_bandwidth)} activation units per time unit per lane "
                 f"(makespan and memory with offload; peak memory is what stays resident)")
    columns = ["schedule", "chunks", "makespan", "bubble sync", "bubble async", "max peak memory", "memory vs 1f1b"]
    columns += ["offloaded", "makespan without", "peak without"] if offloading else []
    columns += ["vs optimum"] if gaps else []
    cells = []
    for r in rows:
        if "not_built" in r:
            cells.append([r["name"], r["chunks"], f"not built: {r['not_built']}"])
            continue
        vs = f"{r['memory_vs_1f1b']:.2f}x" if r["memory_vs_1f1b"] else "n/a"
        cells.append([r["name"], str(r["chunks"]), _num(r["makespan"]), f"{r['bubble_sync']:.4f}",
                      f"{r['bubble_async']:.4f}", _num(r["max_peak_memory"]), vs]
                     + ([f"{r['offloaded_f']} + {r['offloaded_w']} W", _num(r["makespan_without"]),
                         _num(r["peak_without"])] if offloading else [])
                     + ([r.get("vs_optimum") or ""] if gaps else []))
    return head + "\n\n" + table(columns, cells, right=[False] + [True] * (len(columns) - 1))


def cmd_export(args: argparse.Namespace) -> int:
    from .schedules import export, generate

    if args.output:
        _check_output("--output", args.output)
    for given, option in ((args.recv_policy, "--recv-policy"), (args.p2p_groups, "--p2p-groups")):
        if given is not None and args.format != "json":
            raise UsageError(f"{option} needs --format json (torch's action strings carry the compute ops only)")
    costs = _costs(args)
    schedule = generate(args.schedule, args.pp, args.microbatches, costs=costs,
                        memory_limit=args.memory_limit, chunks=args.chunks, post_validation=args.post_validation)
    if args.format == "json":
        data = export.to_dict(schedule, costs)
        if args.recv_policy is not None or args.p2p_groups is not None:  # each rank's items as the runtime posts them
            from .schedules import validate

            data["recv_policy"] = policy = _recv_policy(args) if args.recv_policy is not None else "early"
            data["p2p_groups"] = groups = args.p2p_groups or "one"
            data["lowered"] = [[str(item) for item in items] for items in
                               validate(schedule, costs=costs, recv_policy=policy, p2p_groups=groups).ranks]
        text = json.dumps(data, indent=1) + "\n"
    else:
        text = "".join(" ".join(actions) + "\n" for actions in export.torch_actions(schedule))
    if args.output:
        _write_outputs([(args.output, text)])
    else:
        sys.stdout.write(text)
    return 0


def cmd_balance(args: argparse.Namespace) -> int:
    from .schedules import balance, info

    try:
        model = balance.load_profile(args.profile)
    except ValueError as exc:
        raise UsageError(f"--profile: {exc}") from None
    if args.schedule == "auto":
        return _balance_auto(args, model)
    name = info(args.schedule).name
    best, rows = balance.choose(name, args.pp, args.microbatches, model, args.num_layers,
                                memory_limit=args.memory_limit)
    print(f"{name}, pp={args.pp}, {args.microbatches} microbatches, {args.num_layers} layers; simulated from "
          f"{args.profile}:\n")
    print(balance.table(rows, best))
    print(f"\nrecommended: {balance.flags(best.split) or '(the even split: no option)'}")
    return 0


def _balance_auto(args: argparse.Namespace, model: Any) -> int:
    """balance --schedule auto: each schedule's fastest split, and the fastest of them (what training's
    --pipeline-schedule auto --pipeline-balance FILE chooses: the same schedules, the same search)."""
    from .schedules import ScheduleError, balance, registry

    usable = [n for n in registry.names() if registry.info(n).needs_extra != "ilp"]
    choices = balance.per_schedule(usable, args.pp, args.microbatches, model, args.num_layers,
                                   memory_limit=args.memory_limit)
    built = sorted((c for c in choices if c.best is not None), key=lambda c: c.best.iteration)
    if not built:
        raise ScheduleError(f"no registered schedule and layer split fits {args.num_layers} layers on {args.pp} "
                            f"pipeline ranks ({choices[0].note})")
    fastest = built[0]
    rows = [[c.name, _num(c.best.iteration), f"{c.best.iteration / fastest.best.iteration:.3f}",
             _num(c.best.peak_memory, 2), ",".join(map(str, c.best.layers)),
             balance.flags(c.best.split) or "(even)"] for c in built]
    rows += [[c.name, f"not fitted: {c.note}"] for c in choices if c.best is None]
    print(f"auto, pp={args.pp}, {args.microbatches} microbatches, {args.num_layers} layers; each schedule's fastest "
          f"layer split, simulated from {args.profile}:\n")
    print(table(["schedule", "iteration", "vs fastest", "peak mem", "layers per stage", "options"], rows,
                right=[False, True, True, True, False, False]))
    print(f"\nrecommended: {shlex.join(['--pipeline-schedule', fastest.name] + balance.flag_args(fastest.best.split))}")
    return 0



# ---------------------------------------------------------------- emulate

MAX_EMULATED_RANKS = 64  # forked processes on one machine (about 25 MiB of its own memory each)


def _paper_setting(name: str):
    """'t5-1.5B-p8-m32' / 't8-6.2B-p16-m48' -> (setting, per-chunk), else UsageError."""
    from .schedules import paper_settings as P

    tables = {"t5": (P.TABLE5_SETTINGS, False), "t8": (P.TABLE8_SETTINGS, True)}
    known = {f"{t}-{s.model}-p{s.pp}-m{s.microbatches}": (s, chunked)
             for t, (settings, chunked) in tables.items() for s in settings}
    if name not in known:
        raise UsageError(f"--paper-setting must be one of {', '.join(known)}, got {name!r}")
    return known[name]


def _emulate_costs(args: argparse.Namespace) -> tuple[Any, int, int, float]:
    """(costs, pp, microbatches, ms per cost unit) from exactly one cost source; UsageError otherwise."""
    from .schedules import ScheduleError

    cost_flags = _given_cost_flags(args)
    sources = [name for name, given in (("--cost-*", bool(cost_flags)), ("--pipeline-costs", args.pipeline_costs),
                                        ("--profile", args.profile), ("--paper-setting", args.paper_setting)) if given]
    if len(sources) > 1:
        raise UsageError(f"give one cost source, not {' and '.join(sources)}")
    pp, m, unit = args.pp, args.microbatches, args.time_unit
    if args.paper_setting:
        setting, chunked = _paper_setting(args.paper_setting)
        if (pp or setting.pp) != setting.pp or (m or setting.microbatches) != setting.microbatches:
            raise UsageError(f"--paper-setting {args.paper_setting} is pp={setting.pp}, {setting.microbatches} "
                             f"microbatches; leave --pp and --microbatches out or give those")
        mem_b, mem_w = args.mem_b, args.mem_w
        if mem_b is not None or mem_w is not None:
            raise UsageError("--paper-setting brings the paper's memory model; leave --mem-b and --mem-w out")
        # Table 8 gives one chunk's costs: a rank's share is twice them (F/B/W; comm per message)
        return setting.costs(share=2.0 if chunked else 1.0), setting.pp, setting.microbatches, unit or 1.0
    if pp is None or m is None:
        raise UsageError("--pp and --microbatches are required (or --paper-setting)")
    if args.profile:
        if args.schedule == "auto":
            raise UsageError("--schedule auto takes --cost-*, --pipeline-costs or --paper-setting, not --profile (a "
                             "profile's costs depend on the schedule's chunks: name a schedule, or let training's "
                             "--pipeline-schedule auto profile and choose)")
        from .schedules import info, registry

        costs = _profile_layout(args, pp)  # each schedule run takes its layout's
        try:
            costs(registry.resolve_chunks(info(args.schedule), args.chunks))
        except ScheduleError as exc:
            raise UsageError(f"--profile with --num-layers {costs.split.num_layers}: {exc}") from None
        return costs, pp, m, unit or 1000.0
    if args.pipeline_costs:
        from .megatron_lm.args import parse_costs

        try:
            return parse_costs(args.pipeline_costs), pp, m, unit or 1.0
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return _costs(args), pp, m, unit or 1.0


def _given_cost_flags(args: argparse.Namespace) -> list[str]:
    """The --cost-* options given other than at their defaults."""
    return [f"--cost-{k.replace('_', '-')}" for k in (*COST_FIELDS, "bw", "a2a", "mb_scale")
            if getattr(args, f"cost_{k}") != (None if k in ("bw", "mb_scale") else
                                               (0.0 if k in ("comm", "a2a") else 1.0))]


def _profile_layout(args: argparse.Namespace, pp: int):
    """--profile's costs for a pipeline of `pp` ranks over --num-layers (default: the profiled run's),
    as `balance.LayoutCosts`: each schedule takes its chunk layout's stage costs."""
    from .schedules import balance
    from .schedules.layer_split import LayerSplit

    try:
        model = balance.load_profile(args.profile)
        with open(args.profile, encoding="utf-8") as f:
            meta = json.load(f).get("meta", {})
    except ValueError as exc:
        raise UsageError(f"--profile: {exc}") from None
    layers = args.num_layers or meta.get("num_layers")
    if not layers:
        raise UsageError(f"--profile {args.profile!r} does not say its layer count; give --num-layers")
    return balance.LayoutCosts(model, LayerSplit(int(layers)), pp)


def _optimizer_spec(args: argparse.Namespace, pp: int) -> Optional[dict]:
    if args.optimizer_ms is None:
        if args.optimizer_post_validation:
            raise UsageError("--optimizer-post-validation needs --optimizer-ms")
        return None
    return {"step_s": args.optimizer_ms / 1000.0}


def _straggler_spec(text: Optional[str], pp: int) -> Optional[dict]:
    """--straggler RANK:FACTOR[@STEP], checked: {"rank", "factor", "from_step"} (emulation.launch.run's)."""
    if text is None:
        return None
    rank, _, rest = text.partition(":")
    factor, at, step = rest.partition("@")
    try:
        spec = {"rank": int(rank), "factor": float(factor), "from_step": int(step) if at else 1}
    except ValueError:
        spec = None
    if spec is None or not 0 <= spec["rank"] < pp or not 1.0 <= spec["factor"] < math.inf or spec["from_step"] < 1:
        raise UsageError(f"--straggler must be RANK:FACTOR[@STEP] with a pipeline rank in 0..{pp - 1}, a factor >= 1 "
                         f"and a step >= 1 (e.g. 3:1.5 or 3:1.5@20), got {text!r}")
    return spec


def _health_options(args: argparse.Namespace) -> dict:
    """--pipeline-health-*, checked, as get_forward_backward_func's keywords."""
    from .options import check_health, health_of

    health = health_of(args)
    problem = check_health(*health.values())
    if problem:
        raise UsageError(problem)
    return health


def _fault_spec(text: Optional[str], pp: int, m: int) -> Optional[dict]:
    """--fault ACTION:RANK:OP, checked: {"action", "rank", "kind", "mb"} (emulation.launch.run's `fault`)."""
    if text is None:
        return None
    action, rank, op = (text.split(":") + ["", ""])[:3]
    kind, mb = op[:1], op[1:]
    if action not in ("stall", "kill") or not rank.isdigit() or kind not in ("F", "B") or not mb.isdigit() \
            or int(rank) >= pp or int(mb) >= m or text.count(":") != 2:
        raise UsageError(f"--fault must be stall or kill, a pipeline rank in 0..{pp - 1} and an op F or B of a "
                         f"microbatch in 0..{m - 1}, e.g. stall:3:F2, got {text!r}")
    return {"action": action, "rank": int(rank), "kind": kind, "mb": int(mb)}


def _baselines(text: str) -> list[str]:
    from .emulation.baselines import BASELINES

    names = [t.strip() for t in text.split(",") if t.strip()]
    if names == ["all"]:
        return list(BASELINES)
    bad = [n for n in names if n not in BASELINES]
    if bad:
        raise UsageError(f"--baselines takes {', '.join(BASELINES)} or all (comma-separated), got {', '.join(bad)}")
    return names


def cmd_emulate(args: argparse.Namespace) -> int:
    """Everything is checked (costs, the plan, outputs) before the first rank starts."""
    from .emulation import command

    costs, pp, m, unit, elements = _emulate_inputs(args)
    baselines = _baselines(args.baselines)
    optimizer = _optimizer_spec(args, pp)
    _check_op_overhead(args)
    if args.rocm_recv_stall is not None and args.p2p_mode == "plain":
        raise UsageError("--rocm-recv-stall needs --p2p-mode strict or strict-lazy (the strict queue knows which "
                         "receives are pending; plain gloo p2p does not)")
    options = dataclasses.replace(_emulate_options(args), fault=_fault_spec(args.fault, pp, m),
                                  straggler=_straggler_spec(args.straggler, pp), health=_health_options(args))
    try:
        variants, results, report = command.emulate(options, costs, pp, m, unit, elements, baselines, optimizer)
    except command.EmulationFailed as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    _emulate_outputs(args, variants, results, report)
    return 0


def _emulate_options(args: argparse.Namespace) -> EmulateOptions:
    """What emulation reads of the parsed options (`emulation.command.EmulateOptions`)."""
    from .emulation.command import EmulateOptions

    return EmulateOptions(schedule=args.schedule, chunks=args.chunks, memory_limit=args.memory_limit,
                          post_validation=args.post_validation,
                          optimizer_post_validation=args.optimizer_post_validation,
                          op_overhead_ms=args.op_overhead, steps=args.steps, p2p_mode=args.p2p_mode,
                          p2p_timeout_s=args.p2p_timeout, text=args.format == "text",
                          recv_policy=_recv_policy(args), recv_stall=args.rocm_recv_stall or 1.0,
                          p2p_groups=args.p2p_groups)


def _emulate_inputs(args: argparse.Namespace) -> tuple:
    """(costs, pp, microbatches, ms per cost unit, fp32 elements per activation), checked."""
    from .emulation.chunks import MIN_ELEMENTS

    if args.timeline:
        _check_output("--timeline", args.timeline, (".json",))
    costs, pp, m, unit = _emulate_costs(args)
    if pp > MAX_EMULATED_RANKS:
        raise UsageError(f"--pp must be at most {MAX_EMULATED_RANKS} for emulation on one machine, got {pp}")
    elements = int(args.activation_kib * 1024) // 4
    if elements < MIN_ELEMENTS:
        raise UsageError(f"--activation-kib must be at least {MIN_ELEMENTS * 4 / 1024:g} ({MIN_ELEMENTS} fp32 values), "
                         f"got {args.activation_kib:g}")
    return costs, pp, m, unit, elements


def _check_op_overhead(args: argparse.Namespace) -> None:
    """--op-overhead only where the plan depends on the costs (auto, the cost-planned schedules)."""
    from .schedules.registry import info as schedule_info, names

    if args.schedule != "auto" and not schedule_info(args.schedule).uses_costs and args.op_overhead is not None:
        raise UsageError(f"--op-overhead is the host work per op that --schedule auto and the schedules planned "
                         f"on their costs ({', '.join(n for n in names() if schedule_info(n).uses_costs)}) "
                         f"charge every op; {args.schedule} is planned without costs")


def _emulate_outputs(args: argparse.Namespace, variants: list, results: list, report: dict) -> None:
    """--timeline (measured and simulated spans of every variant) and the report, as --format asks."""
    from .emulation import reporting

    if args.timeline:
        from .schedules.trace import chrome_trace_json

        timelines = {}
        for v, r in zip(variants, results):
            if r is not None:
                timelines[f"{v.label} (measured)"] = reporting.spans(r["timeline"])
                timelines[f"{v.label} (simulated)"] = reporting.spans(v.sim_timeline)
        _write_outputs([(args.timeline, chrome_trace_json(timelines, us_per_unit=1e6))])
    if args.format == "json":
        print(json.dumps(report, indent=1))
    else:
        print(reporting.report_text(report))


def cmd_postmortem(args: argparse.Namespace) -> int:
    from .postmortem_command import run

    return run(args)


def cmd_advise(args: argparse.Namespace) -> int:
    from .advise_command import run

    return run(args)


COMMANDS = {"list": cmd_list, "simulate": cmd_simulate, "compare": cmd_compare, "export": cmd_export,
            "balance": cmd_balance, "advise": cmd_advise, "emulate": cmd_emulate, "postmortem": cmd_postmortem}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of `primus-pipeline`; returns the exit status."""
    from .schedules.errors import ScheduleError

    debug = os.environ.get("PRIMUS_DEBUG", "") not in ("", "0")
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except (UsageError, ScheduleError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: one line, unless PRIMUS_DEBUG=1
        if debug:
            raise
        print(f"{PROG}: internal error: {type(exc).__name__}: {exc} (set PRIMUS_DEBUG=1 for the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
