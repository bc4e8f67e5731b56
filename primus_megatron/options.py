"""Pipeline options: the `--pipeline-*` argument group both entry points share (our
examples/pretrain_gpt.py and Megatron-LM's pretrain_gpt.py through
`megatron_lm.extra_args_provider`), their checks, and the one `PipelineSpec` built from them.

The spec is built once from the parsed arguments and handed down: model building, the
runner, checkpoints and the training loop read it, never the arguments' schedule name.
`--pipeline-schedule auto` and `--pipeline-balance` produce a new spec (`choose`, `balanced`);
nothing is written back into the arguments. Pure Python (no torch)."""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from .schedules import V, layer_split, names, registry
from .schedules.costs import Costs
from .schedules.layer_split import LayerSplit
from .schedules.p2p_groups import P2P_GROUPS
from .schedules.registry import ScheduleInfo

if TYPE_CHECKING:
    from .schedules.ir import Schedule
    from .schedules.offload import OffloadPlan

DEFAULT_P2P_TIMEOUT_S = 600.0
# --pipeline-balance-data: how a global batch of variable-length samples is split over the replicas
# and packed (primus_megatron.balancing.plan_batch)
BALANCE_DATA_MODES = ("off", "sorted", "lb-mini")
# --pipeline-schedule auto in our script: the schedule that runs while costs are measured (loop
# placement, one chunk, W ops: it measures F, B and W apart)
PROVISIONAL = "zb-h1"
# --pipeline-recv-policy: where each receive is posted (schedules/just_in_time.py); auto resolves
RECV_POLICY_CHOICES = ("early", "just-in-time", "auto")
# --pipeline-p2p-groups: one process group for the step's p2p, or one per direction (schedules/p2p_groups.py)
P2P_GROUPS_CHOICES = P2P_GROUPS


@dataclass(frozen=True)
class PipelineSpec:
    """What the pipeline runs: a registry entry (placement, chunks, whether it has W ops, whether
    it uses costs) and the options that shape its plan and its run.

    `choose`: `--pipeline-schedule auto` not chosen yet; `entry` is then the provisional
    schedule that measures costs (`with_schedule` makes the chosen spec). `split`: the layer
    split `--pipeline-balance` chose (None: the arguments' own)."""

    entry: ScheduleInfo
    chunks: int
    costs: Optional[Costs] = None
    memory_limit: Optional[float] = None
    profile_steps: int = 3  # steps measured (--pipeline-profile-steps)
    profile_window: Optional[tuple[int, int]] = None  # training steps [start, end) the runner measures
    replan: bool = False  # plan again from the measured costs at the window's end
    profile_out: Optional[str] = None
    balance: Optional[str] = None  # --pipeline-balance: auto or a profile file
    split: Optional[LayerSplit] = None
    post_validation: bool = False
    offload: str = "off"
    offload_bandwidth: Optional[float] = None
    # a plan chosen elsewhere for the run's (pp, microbatches), e.g. once for every rank: used as it is
    offload_plan: Any = field(default=None, compare=False, repr=False)
    p2p_timeout_s: float = DEFAULT_P2P_TIMEOUT_S
    p2p_mode: Optional[str] = None  # how CPU (gloo) runs carry p2p: runtime.p2p.resolve_mode
    recv_policy: str = "early"  # where receives are posted, resolved (`resolve_recv_policy`)
    p2p_groups: str = "one"  # the process groups carrying the step's p2p: one, or per-direction
    # --pipeline-balance-data: packed variable-length data, each data-parallel replica with its own
    # microbatch count (None: every replica runs the same count, megatron's plain split)
    balance_data: Optional[str] = None
    choose: bool = False
    deterministic: bool = False  # no plan from measured costs (Megatron-LM's --deterministic-mode)
    note: Optional[str] = None  # what --pipeline-balance chose from a profile, logged at start-up
    # in-flight health (health/inflight.py): every `health_interval` training steps (0: off), a rank over
    # `health_threshold` x its plan for `health_patience` intervals in a row is warned about
    health_interval: int = 100
    health_threshold: float = 1.15
    health_patience: int = 3
    health_json: Optional[str] = None  # the JSON lines' file (None: the log)
    health_replan: bool = False  # a schedule planned from costs re-plans on a lasting drift (runtime/drift.py)
    # The (Schedule, Lowered) the option checks generated and validated for the run's pipeline size
    # and microbatch count: the runner's first plan, not made again.
    checked_plan: Optional[tuple] = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def placement(self) -> str:
        return self.entry.placement

    @property
    def splits_backward(self) -> bool:
        return self.entry.splits_backward

    @property
    def measures(self) -> bool:
        """A schedule that plans from costs, given none: measured over the first steps, then re-planned."""
        return (self.entry.uses_costs and self.costs is None and self.profile_steps > 0
                and not self.deterministic)

    def num_stages(self, pp: int) -> int:
        return pp * self.chunks

    def loss_rank(self, pp: int) -> int:
        """The pipeline rank holding the last stage (the loss): rank 0 under V."""
        return registry_owner(self.placement, pp, self.num_stages(pp) - 1)

    def stage_rank(self, pp: int, stage: int) -> int:
        return registry_owner(self.placement, pp, stage)

    def with_schedule(self, name: str, *, costs: Optional[Costs] = None) -> "PipelineSpec":
        """The spec for schedule `name` (auto's choice), planned from `costs` if given."""
        entry = registry.info(name)
        chosen = dataclasses.replace(self, entry=entry, chunks=entry.chunks, choose=False,
                                     costs=costs if costs is not None else self.costs, checked_plan=None)
        return dataclasses.replace(chosen, **_profiling(chosen))

    def balanced(self, split: LayerSplit, name: Optional[str] = None) -> "PipelineSpec":
        """The spec on the layer split `--pipeline-balance` chose (with auto: and its schedule)."""
        spec = self.with_schedule(name) if name is not None else self
        return dataclasses.replace(spec, split=split)

    def layer_split(self, args: argparse.Namespace) -> Optional[LayerSplit]:
        """The layer split the model is built on: balance's choice, else the arguments'."""
        return self.split if self.split is not None else LayerSplit.from_args(args)


def registry_owner(placement: str, pp: int, stage: int) -> int:
    from .schedules import owner_of

    return owner_of(placement, pp, stage)[0]


def _profiling(spec: PipelineSpec) -> dict:
    measure = spec.measures
    window = (1, 1 + spec.profile_steps) if measure or spec.profile_out is not None else None
    return {"profile_window": window, "replan": measure}


def from_options(schedule: Union[str, "Schedule"], *, chunks: Optional[int] = None, costs: Optional[Costs] = None,
                 memory_limit: Optional[float] = None, profile_steps: Optional[tuple[int, int]] = None,
                 replan: bool = False, profile_out: Optional[str] = None, post_validation: bool = False,
                 offload: Union[str, "OffloadPlan"] = "off", offload_bandwidth: Optional[float] = None,
                 p2p_timeout_s: float = DEFAULT_P2P_TIMEOUT_S, p2p_mode: Optional[str] = None,
                 balance_data: Optional[str] = None, recv_policy: str = "early", health_interval: int = 100,
                 health_threshold: float = 1.15, health_patience: int = 3,
                 health_json: Optional[str] = None, health_replan: bool = False, p2p_groups: str = "one") -> PipelineSpec:
    """The spec of the keyword API (`get_forward_backward_func(name, costs=..., ...)`): `profile_steps`
    is the window of training steps measured. Unknown names and chunk counts fail in one sentence.
    A Schedule (run as given) brings its own entry: its name's, or one describing it. `offload` is a
    mode, or an OffloadPlan chosen elsewhere (`schedules.offload.choose(...).plan`) that every step of
    its (pp, microbatches) runs as it is: its mode and bandwidth are the spec's. `balance_data`
    (off, sorted, lb-mini): data-parallel replicas may run different microbatch counts. `recv_policy`:
    early, just-in-time or auto (`resolve_recv_policy`). `health_*`: in-flight health (`PipelineSpec`).
    `p2p_groups`: one or per-direction (a process group for the messages towards each neighbour
    direction, `schedules.p2p_groups`)."""
    plan = None
    problem = check_health(health_interval, health_threshold, health_patience, health_json)
    if problem:
        raise ValueError(problem)
    recv_policy = resolve_recv_policy(recv_policy)
    if p2p_groups not in P2P_GROUPS_CHOICES:
        raise ValueError(f"p2p_groups must be one of {', '.join(P2P_GROUPS_CHOICES)}, got {p2p_groups!r}")
    if balance_data is not None and balance_data not in BALANCE_DATA_MODES:
        raise ValueError(f"balance_data must be one of {', '.join(BALANCE_DATA_MODES)}, got {balance_data!r}")
    if not isinstance(offload, str):
        if offload_bandwidth is not None:
            raise ValueError("offload_bandwidth: an offload plan carries its own bandwidth; leave it out")
        from .schedules.offload import ALL, MODES, OffloadPlan, check_bandwidth

        if not isinstance(offload, OffloadPlan):
            raise ValueError(f"offload must be one of {', '.join(MODES)} or an OffloadPlan, got "
                             f"{type(offload).__name__}")
        plan, offload_bandwidth = offload, check_bandwidth(offload.bandwidth)
        # a hand-made plan (make_plan's "custom") offloads: the settings refused with offload stay refused
        offload = plan.mode if plan.mode in MODES else ALL
    if isinstance(schedule, str):
        entry = registry.info(schedule)
    else:
        entry = _entry_of(schedule)
        chunks = schedule.chunks_per_rank
    window = tuple(profile_steps) if profile_steps is not None else None
    return PipelineSpec(entry, registry.resolve_chunks(entry, chunks), costs=costs, memory_limit=memory_limit,
                        profile_steps=(window[1] - window[0]) if window else 0, profile_window=window,
                        replan=replan, profile_out=profile_out, post_validation=post_validation, offload=offload,
                        offload_bandwidth=offload_bandwidth, offload_plan=plan, p2p_timeout_s=p2p_timeout_s,
                        p2p_mode=p2p_mode, balance_data=balance_data, recv_policy=recv_policy,
                        health_interval=health_interval, health_threshold=health_threshold,
                        health_patience=health_patience, health_json=health_json, health_replan=health_replan,
                        p2p_groups=p2p_groups)


def resolve_recv_policy(policy: str) -> str:
    """early or just-in-time: `auto` is just-in-time on a ROCm build of torch (a pending receive
    stalls compute there, PyTorch #172668), early elsewhere. Pure Python: torch's version file is
    read, not imported, unless torch is imported already."""
    if policy not in RECV_POLICY_CHOICES:
        raise ValueError(f"recv_policy must be one of {', '.join(RECV_POLICY_CHOICES)}, got {policy!r}")
    if policy != "auto":
        return policy
    return "just-in-time" if torch_is_rocm() else "early"


def torch_is_rocm() -> bool:
    """True for a ROCm (HIP) build of torch: `torch.version.hip` is set."""
    import sys

    if "torch" in sys.modules:
        return bool(getattr(getattr(sys.modules["torch"], "version", None), "hip", None))
    import ast
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return False
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py"), encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError):
        return False
    for node in tree.body:  # `hip: Optional[str] = '6.4...'` or `hip = None`
        target = node.target if isinstance(node, ast.AnnAssign) else (node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id == "hip" and isinstance(node.value, ast.Constant):
            return bool(node.value.value)
    return False


def _entry_of(schedule: "Schedule") -> ScheduleInfo:
    try:
        entry = registry.info(schedule.name)
    except ValueError:
        entry = None
    if entry is None or (entry.placement, entry.splits_backward) != (schedule.placement, schedule.splits_backward):
        entry = ScheduleInfo(schedule.name, None, schedule.placement, schedule.chunks_per_rank, "", "",
                             variable_chunks=True, splits_backward=schedule.splits_backward)
    return entry


def from_args(args: argparse.Namespace, *, deterministic: bool = False) -> Optional[PipelineSpec]:
    """The spec of checked arguments (`check_options` passed), or None without --pipeline-schedule
    (megatron's own schedule). `auto` gives a spec that still has to `choose`."""
    name = getattr(args, "pipeline_schedule", None)
    if name is None:
        return None
    choose = name == "auto"
    entry = registry.info(PROVISIONAL if choose else name)
    given = getattr(args, "pipeline_costs", None)
    spec = PipelineSpec(
        entry, registry.resolve_chunks(entry, None if choose else getattr(args, "pipeline_chunks", None)),
        costs=parse_costs(given) if given else None, memory_limit=getattr(args, "pipeline_memory_limit", None),
        profile_steps=getattr(args, "pipeline_profile_steps", 3),
        profile_out=getattr(args, "pipeline_profile_out", None), balance=getattr(args, "pipeline_balance", None),
        post_validation=bool(getattr(args, "optimizer_post_validation", False)),
        offload=getattr(args, "pipeline_offload", "off") or "off",
        offload_bandwidth=getattr(args, "pipeline_offload_bandwidth", None),
        p2p_timeout_s=getattr(args, "pipeline_p2p_timeout", DEFAULT_P2P_TIMEOUT_S), choose=choose,
        deterministic=deterministic, balance_data=getattr(args, "pipeline_balance_data", None),
        recv_policy=resolve_recv_policy(getattr(args, "pipeline_recv_policy", "early") or "early"),
        p2p_groups=getattr(args, "pipeline_p2p_groups", "one") or "one", **health_of(args))
    profiling = _profiling(spec)
    # a drift re-plan prices the plan in measured seconds: only a run that measures its own costs may
    # (--pipeline-costs are in units of their own; --pipeline-profile-steps 0 turns measuring off)
    return dataclasses.replace(spec, **profiling, health_replan=spec.health_replan and profiling["replan"])


def health_of(args: argparse.Namespace) -> dict:
    """The in-flight health options of parsed arguments, as PipelineSpec's fields."""
    return {"health_interval": getattr(args, "pipeline_health_interval", 100),
            "health_threshold": getattr(args, "pipeline_health_threshold", 1.15),
            "health_patience": getattr(args, "pipeline_health_patience", 3),
            "health_json": getattr(args, "pipeline_health_json", None),
            "health_replan": getattr(args, "pipeline_health_replan", "on") == "on"}


def check_health(interval, threshold, patience, json_path, replan: bool = True) -> Optional[str]:
    from .health.inflight import check

    return check(interval, threshold, patience, json_path)


def add_health_args(parser, *, replan: str = "on") -> None:
    """The in-flight health options (both training entry points and `primus-pipeline emulate`, whose
    plans are fixed unless `--pipeline-health-replan on`)."""
    parser.add_argument("--pipeline-health-interval", type=int, default=100, metavar="N",
                        help="every N training steps, gather each pipeline rank's op times and idle time (one small "
                             "collective) and log on the first pipeline rank the measured bubble and op times against "
                             "the plan's and the slowest rank by its excess (docs/health.md); 0: off; default 100")
    parser.add_argument("--pipeline-health-threshold", type=float, default=1.15, metavar="X",
                        help="a rank slower than X times its plan is named; for --pipeline-health-patience intervals "
                             "in a row, warned about (default 1.15)")
    parser.add_argument("--pipeline-health-patience", type=int, default=3, metavar="K",
                        help="intervals in a row a rank must stay over the threshold before the warning (default 3)")
    parser.add_argument("--pipeline-health-json", default=None, metavar="FILE",
                        help="append each interval's figures as one JSON line to FILE (default: the log)")
    parser.add_argument("--pipeline-health-replan", choices=("on", "off"), default=replan,
                        help="a schedule planned from costs (zb-auto, the V schedules, auto's choice) is planned "
                             "again from the measured per-rank costs when a rank stays over the threshold for "
                             f"--pipeline-health-patience intervals, job-wide, at a step boundary (default {replan})")


# -- the argument group ------------------------------------------------------------------------------

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
                            "back before their B, and what a B keeps for its W after the B and back before the W, "
                            "planned with the schedule (all: every F and every W share; auto: the fastest plan "
                            "within --pipeline-memory-limit, which then bounds what stays on the device, taking "
                            "those whose lifespan hides the copies first); default off")
    group.add_argument("--pipeline-offload-bandwidth", type=float, default=None, metavar="X",
                       help="each direction's host copy bandwidth for the offload plan, in activation units (a "
                            "rank's activations of one microbatch) per unit of --pipeline-costs' F time; default: measured "
                            "at start-up (the first step's copies are planned as free)")
    group.add_argument("--pipeline-chunks", type=int, default=None, metavar="V",
                       help="model chunks per rank for schedules with a variable count (interleaved-1f1b)")
    group.add_argument("--pipeline-recv-policy", choices=RECV_POLICY_CHOICES, default="early",
                       help="where each p2p receive is posted: early (default: as soon as the one global message "
                            "order allows), just-in-time (right before the op that consumes it, where the hang check "
                            "allows: on ROCm a pending receive stalls compute, PyTorch #172668), or auto "
                            "(just-in-time on a ROCm build of torch, early elsewhere); docs/megatron-core.md")
    group.add_argument("--pipeline-p2p-groups", choices=P2P_GROUPS_CHOICES, default="one",
                       help="process groups for the pipeline's sends and receives: one (default: the pipeline's "
                            "group), or per-direction (a second group, made once at start-up, carries what is sent "
                            "towards a lower pipeline rank, so a V schedule's traffic both ways between two ranks "
                            "never queues behind itself; one more communicator per rank); docs/megatron-core.md")
    group.add_argument("--pipeline-p2p-timeout", type=float, default=DEFAULT_P2P_TIMEOUT_S, metavar="SECONDS",
                       help="how long a rank waits for a pipeline peer before failing with a diagnosis")
    group.add_argument("--pipeline-costs", default=None, metavar="F,B,W[,COMM[,BW]][,mem-b=X][,mem-w=Y]",
                       help="relative op costs for the schedules that use them (zb-auto, zbv, v-half, v-min) and "
                            "for auto; BW: a backward run as one op, as 1f1b runs it (default B + W; usually less); "
                            "mem-b / mem-w: activation memory a B / W adds in units of what an F adds (they sum to "
                            "-1; one gives the other; default 0 and -1, W frees everything; measured runs have B free "
                            "all but what the weight gradient keeps, e.g. mem-w=-0.37); COMM and BW may be named too "
                            "(comm=, bw=); a2a=A: the all-to-all part of each F and B; mb-scale=S0:S1:...: one factor per "
                            "microbatch on its op times (packed variable-length data; as many as the microbatches); "
                            "default: measured over the first --pipeline-profile-steps steps, then re-planned")
    group.add_argument("--pipeline-profile-out", default=None, metavar="FILE.json",
                       help="measure per-stage costs over the first --pipeline-profile-steps steps and write the "
                            "fitted per-layer, embedding and head costs there (for `primus-pipeline balance` and "
                            "--pipeline-balance FILE)")
    group.add_argument("--pipeline-balance", default=None, metavar="auto|FILE.json",
                       help="choose the layer split (first/last pipeline rank layer counts, embedding/loss "
                            "accounting) that runs the schedule fastest by simulation: from a profile written by "
                            "--pipeline-profile-out, or `auto` (examples/pretrain_gpt.py only: measured in the first "
                            "steps, then the model is rebuilt on the chosen split)")
    group.add_argument("--pipeline-balance-data", choices=BALANCE_DATA_MODES, default=None,
                       help="post-training data of long-tail lengths (examples/pretrain_gpt.py; Megatron-LM's "
                            "pretrain_gpt.py with --sft and --calculate-per-token-loss): each global batch "
                            "of samples is split over the data-parallel replicas and packed into microbatches of "
                            "--seq-length tokens, each replica running its own microbatch count, the loss "
                            "normalised by the global token count (off: megatron's contiguous split, packed in "
                            "order; sorted: dealt by cost, heaviest first; lb-mini: ODC's Karmarkar-Karp split "
                            "balancing a*s^2 + b*s); default: fixed-length samples, every replica the same count")
    group.add_argument("--pipeline-balance-cost", default=None, metavar="A,B",
                       help="per-sample cost a*s^2 + b*s the --pipeline-balance-data split balances (default: the "
                            "model's FLOP ratio, a = 1 / (6 x hidden size), b = 1)")
    group.add_argument("--pipeline-profile-steps", type=int, default=3, metavar="N",
                       help="steps whose F/B/W/p2p times and activation memory are measured (for zb-auto's "
                            "and the V schedules' re-planning and --pipeline-schedule auto); 0 disables")
    add_health_args(group)
    return parser


# -- checks: one sentence naming the option, or None -------------------------------------------------

def check_options(args: argparse.Namespace, *, split_chosen: bool = False, packed_thd: bool = False) -> Optional[str]:
    """The group's own values (no pipeline size, layers or batch needed). `split_chosen`:
    --pipeline-balance has already chosen the split (its options are then its own); `packed_thd`:
    the caller's forward step passes packed microbatches to attention as thd (check_balance_data)."""
    name = getattr(args, "pipeline_schedule", None)
    problem = check_balance_data(args, packed_thd=packed_thd) or check_health(*health_of(args).values())
    if name is None or problem:
        return problem
    steps = getattr(args, "pipeline_profile_steps", 3)
    if steps < 0:
        return f"--pipeline-profile-steps must be >= 0, got {steps}"
    problem = check_balance_args(args, steps, split_chosen=split_chosen)
    if problem:
        return problem
    if name != "auto":
        try:
            entry = registry.info(name)
        except ValueError as exc:
            return f"--pipeline-schedule: {exc}"
        try:
            registry.resolve_chunks(entry, getattr(args, "pipeline_chunks", None))
        except ValueError as exc:
            return f"--pipeline-chunks: {exc}"
    return _check_numbers(args)


def check_balance_data(args: argparse.Namespace, *, packed_thd: bool = False) -> Optional[str]:
    """--pipeline-balance-data and --pipeline-balance-cost against what packed, per-replica data can
    run with (train/balanced_data.py, runtime/replica_counts.py). `packed_thd`: the forward step
    passes each pack's cu_seqlens to attention (Megatron-LM's --sft path), so TE layers can run."""
    mode, cost = getattr(args, "pipeline_balance_data", None), getattr(args, "pipeline_balance_cost", None)
    if mode is None:
        return "--pipeline-balance-cost needs --pipeline-balance-data" if cost else None
    if cost is not None:
        try:
            a, b = (float(x) for x in cost.split(","))
        except ValueError:
            a = b = math.nan
        if not (math.isfinite(a) and math.isfinite(b) and a >= 0 and b >= 0 and a + b > 0):
            return f"--pipeline-balance-cost must be A,B: two numbers >= 0, not both 0, got {cost!r}"
    refusals = (
        (getattr(args, "micro_batch_size", 1) not in (None, 1),
         f"--micro-batch-size must be 1 (a packed microbatch holds as many samples as fit in --seq-length "
         f"tokens), got {getattr(args, 'micro_batch_size', None)}"),
        ((getattr(args, "expert_model_parallel_size", 1) or 1) > 1,
         "--expert-model-parallel-size must be 1: expert-parallel ranks of different replicas exchange tokens "
         "inside every forward and backward, so they must run the same microbatches"),
        ((getattr(args, "context_parallel_size", 1) or 1) > 1,
         "--context-parallel-size must be 1: slicing packed samples over a context-parallel group needs the thd "
         "format with cu_seqlens, which this data path does not build"),
        (uses_te(args) and not packed_thd,
         "TransformerEngine layers are not supported: TE's causal attention ignores the per-sample mask a packed "
         "microbatch carries (it needs the thd format, PackedSeqParams over the pack's cu_seqlens, which this "
         "script's forward step does not pass; megatron-core API callers can: docs/balanced-data.md); use "
         "--transformer-impl local"),
        (getattr(args, "pipeline_schedule", None) == "auto" or getattr(args, "pipeline_balance", None) == "auto",
         "--pipeline-schedule auto and --pipeline-balance auto profile steps of one fixed microbatch count; name a "
         "schedule and a layer split"),
    )
    for bad, why in refusals:
        if bad:
            return f"--pipeline-balance-data {mode}: {why}"
    return None


def _check_numbers(args: argparse.Namespace) -> Optional[str]:
    """Options every schedule reads, auto's choice included."""
    timeout = getattr(args, "pipeline_p2p_timeout", DEFAULT_P2P_TIMEOUT_S)
    if not (timeout > 0 and math.isfinite(timeout)):
        return f"--pipeline-p2p-timeout must be a positive number of seconds, got {timeout:g}"
    limit = getattr(args, "pipeline_memory_limit", None)
    if limit is not None and not limit > 0:
        return f"--pipeline-memory-limit must be a positive number of activation units, got {limit:g}"
    bandwidth = getattr(args, "pipeline_offload_bandwidth", None)
    if bandwidth is not None and not (bandwidth > 0 and not math.isnan(bandwidth)):
        return (f"--pipeline-offload-bandwidth must be a positive number of activation units per time unit, got "
                f"{bandwidth:g}")
    if getattr(args, "pipeline_costs", None):
        try:
            parse_costs(args.pipeline_costs)
        except ValueError as exc:
            return str(exc)
    return None


def check_schedule(args: argparse.Namespace, spec: Optional[PipelineSpec], *,
                   te_support: Optional[Callable[[str], Optional[str]]] = None) -> Optional[str]:
    """`spec` against the rest of the arguments, where the namespace has them: the pipeline
    size, the layer split, the options that cannot combine with deferred weight gradients, and
    the schedule itself for the microbatch count (global batch / micro batch / data parallel)
    and memory limit. `te_support(schedule)`: Megatron-LM's TransformerEngine probe."""
    return checked(args, spec, te_support=te_support)[0]


def checked(args: argparse.Namespace, spec: Optional[PipelineSpec], *,
            te_support: Optional[Callable[[str], Optional[str]]] = None) -> tuple[Optional[str], Optional[PipelineSpec]]:
    """`check_schedule`'s sentence (or None), and the spec carrying the plan the check made
    (`checked_plan`) where the arguments give the pipeline size and microbatch count."""
    if spec is None:
        return None, None
    problem = _check_spec(args, spec, te_support)
    if problem:
        return problem, spec
    pp, microbatches = getattr(args, "pipeline_model_parallel_size", None), num_microbatches(args)
    if spec.choose or pp is None or microbatches is None:
        return None, spec
    from .schedules import ScheduleError, generate, validate

    limit = spec.memory_limit if spec.offload == "off" else None  # with offload the offload plan meets it
    try:  # the schedule itself: microbatch count, memory limit (pure Python, fast)
        sched = generate(spec.name, pp, microbatches, costs=spec.costs, memory_limit=limit, chunks=spec.chunks,
                         post_validation=spec.post_validation, validate=False)
        lowered = validate(sched, costs=spec.costs, memory_limit=limit, recv_policy=spec.recv_policy,
                           p2p_groups=spec.p2p_groups)
    except ScheduleError as exc:
        return (f"--pipeline-schedule {spec.name} with {microbatches} microbatches (global batch / micro batch "
                f"/ data parallel) on {pp} pipeline ranks: {exc}"), spec
    return None, dataclasses.replace(spec, checked_plan=(sched, lowered))


def _check_spec(args: argparse.Namespace, spec: PipelineSpec,
                te_support: Optional[Callable[[str], Optional[str]]]) -> Optional[str]:
    """check_schedule but the schedule's own generation."""
    pp = getattr(args, "pipeline_model_parallel_size", None)
    split = spec.layer_split(args)
    if spec.choose:
        if spec.profile_steps < 1:
            return "--pipeline-schedule auto measures costs first: --pipeline-profile-steps must be >= 1"
        if pp is not None and pp < 2:
            return f"--pipeline-schedule auto needs --pipeline-model-parallel-size >= 2, got {pp}"
        # profiled with a 1-chunk schedule that has W ops; the candidates are those the split fits
        return (check_layer_split(args, pp, 1, "--pipeline-schedule auto", w_ops=True, split=split)
                or (te_support("auto") if te_support and uses_te(args) else None))
    if pp is not None and pp < 2:
        return (f"--pipeline-schedule {spec.name} needs --pipeline-model-parallel-size >= 2, got {pp}; "
                f"drop --pipeline-schedule to train without pipelining")
    return (check_layer_split(args, pp, spec.chunks, f"--pipeline-schedule {spec.name}",
                              w_ops=spec.splits_backward, split=split)
            or check_deferred_wgrad_args(args, spec, te_support))


def check_deferred_wgrad_args(args: argparse.Namespace, spec: PipelineSpec,
                              te_support: Optional[Callable[[str], Optional[str]]] = None) -> Optional[str]:
    """Options that cannot combine with the schedule's deferred weight gradients (or its
    placement), with what to do instead, and a TransformerEngine that cannot defer them; None
    if fine. A schedule without W ops never touches TE's weight-gradient store: any TE runs it."""
    from .unsupported import first_refusal  # below the runtime: the table depends on arguments only

    problem = first_refusal(deferred_wgrad_setting(args, spec))
    if problem or not spec.splits_backward or te_support is None or not uses_te(args):
        return problem
    return te_support(spec.name)


def deferred_wgrad_setting(args: argparse.Namespace, spec: PipelineSpec):
    """The refusal table's Setting (primus_megatron/unsupported.py) of the arguments under `spec`."""
    from .unsupported import setting_of

    return setting_of(args, schedule=spec.name, splits_backward=spec.splits_backward, v_placement=spec.placement == V,
                      uses_te=uses_te(args), offload=spec.offload)


def uses_te(args: argparse.Namespace) -> bool:
    """Megatron-LM builds TransformerEngine layers (its default --transformer-impl); our
    examples/pretrain_gpt.py has no such option and builds megatron-core's local layers."""
    return getattr(args, "transformer_impl", "local") == "transformer_engine"


VIRTUAL_SIZE_ARGS = ("num_virtual_stages_per_pipeline_rank", "num_layers_per_virtual_pipeline_stage")


def check_layer_split(args: argparse.Namespace, pp: Optional[int], chunks: int, what: Optional[str], *,
                      w_ops: bool = False, split: Optional[LayerSplit] = None) -> Optional[str]:
    """The layer split (`split`, else the arguments': --num-layers, --decoder-first/last-pipeline-num-layers,
    --account-for-embedding/loss-in-pipeline-split, and Megatron-LM's --pipeline-model-parallel-layout)
    for `pp` ranks x `chunks`, in one sentence, or None. megatron-core's split
    (schedules/layer_split.py), the same global stages under every placement
    (a layout's stages too: its stage count must be the schedule's)."""
    if getattr(args, "pipeline_model_parallel_layout", None):
        for dest in VIRTUAL_SIZE_ARGS:
            if getattr(args, dest, None) is not None:
                return (f"--pipeline-model-parallel-layout sets the virtual pipeline size itself (its stages / "
                        f"pipeline ranks): drop --{dest.replace('_', '-')}")
    return layer_split.check(split if split is not None else LayerSplit.from_args(args), pp, chunks, what,
                             w_ops=w_ops)


def split_fits(args: argparse.Namespace, name: str) -> bool:
    """Whether the arguments' layer split (even or uneven) can be built for schedule `name`
    (the candidates of --pipeline-schedule auto)."""
    entry = registry.info(name)
    return check_layer_split(args, getattr(args, "pipeline_model_parallel_size", None), entry.chunks, name,
                             w_ops=entry.splits_backward) is None


BALANCE_CHOOSES = (("decoder_first_pipeline_num_layers", "--decoder-first-pipeline-num-layers"),
                   ("decoder_last_pipeline_num_layers", "--decoder-last-pipeline-num-layers"),
                   ("account_for_embedding_in_pipeline_split", "--account-for-embedding-in-pipeline-split"),
                   ("account_for_loss_in_pipeline_split", "--account-for-loss-in-pipeline-split"),
                   ("pipeline_model_parallel_layout", "--pipeline-model-parallel-layout"))


# the balancer's stage costs count transformer layers, the embedding and the loss, and its layouts hold no 'm'
BALANCE_WITH_MTP = ("--pipeline-balance cannot be used with --mtp-num-layers: its cost model leaves out the MTP layers "
                    "on the last stage and the layouts it writes place none; give the layer split yourself (e.g. "
                    "--pipeline-model-parallel-layout with the m in the last stage, before L)")


def check_balance_args(args: argparse.Namespace, steps: int, *, split_chosen: bool = False) -> Optional[str]:
    """--pipeline-profile-out and --pipeline-balance, or None."""
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
    if getattr(args, "mtp_num_layers", None):
        return BALANCE_WITH_MTP
    given = [opt for key, opt in BALANCE_CHOOSES if getattr(args, key, None) not in (None, False)]
    if given and not split_chosen:
        return f"--pipeline-balance chooses the layer split itself: drop {given[0]}"
    if balance == "auto":
        return None if steps >= 1 else "--pipeline-balance auto measures costs first: --pipeline-profile-steps must be >= 1"
    from .schedules.balance import load_profile

    try:
        load_profile(balance)
    except ValueError as exc:
        return f"--pipeline-balance must be auto or a profile file: {exc}"
    return None


def num_microbatches(args: argparse.Namespace) -> Optional[int]:
    gbs, mbs = getattr(args, "global_batch_size", None), getattr(args, "micro_batch_size", None)
    dp = getattr(args, "data_parallel_size", None)
    if not gbs or not mbs or not dp or gbs % (mbs * dp):
        return None  # not known yet (or refused by the caller's own batch check)
    return gbs // (mbs * dp)


def few_microbatches_warning(args: argparse.Namespace, spec: Optional[PipelineSpec]) -> Optional[str]:
    """Fewer microbatches per step than pipeline ranks, under the spec's schedule (megatron's own without
    one: 1F1B, interleaved with a virtual pipeline size): the bubble it costs, in one sentence, or None."""
    from .schedules.few_microbatches import few_microbatches

    pp, m = getattr(args, "pipeline_model_parallel_size", None) or 1, num_microbatches(args)
    if m is None or pp < 2:
        return None
    vp = getattr(args, "virtual_pipeline_model_parallel_size", None) or 1
    name, chunks = (spec.name, spec.chunks) if spec is not None else ("interleaved-1f1b", vp) if vp > 1 else ("1f1b", 1)
    return few_microbatches(name, pp, m, costs=spec.costs if spec is not None else None, chunks=chunks,
                            fix="raise --global-batch-size or lower --micro-batch-size (microbatches per step: global "
                                "batch / (micro batch x data-parallel size))")


def spec_for_run(args: argparse.Namespace) -> tuple[Optional[str], Optional[PipelineSpec]]:
    """One pass over a fully parsed command line (pipeline size, layers and microbatch count
    known; our training script's): the group's own values, the spec, its split from a saved
    profile (--pipeline-balance FILE), the spec against the rest of the arguments and the
    schedule itself; without a schedule, megatron's own layer split. (problem or None, spec)."""
    problem = check_options(args)
    if problem:
        return problem, None
    spec = from_args(args)
    if spec is not None and spec.balance not in (None, "auto"):
        problem, spec = _balanced_from_profile(args, spec)
        if problem:
            return problem, spec
    problem, spec = checked(args, spec)  # the spec then carries the plan the check made
    if problem or spec is not None:
        return problem, spec
    return check_layer_split(args, args.pipeline_model_parallel_size, 1, None), None


def _balanced_from_profile(args: argparse.Namespace, spec: PipelineSpec) -> tuple[Optional[str], PipelineSpec]:
    """--pipeline-balance FILE: the spec on the split (with auto, the schedule too) chosen now from
    the saved profile, before anything is built; its table goes to the spec's note (logged at start)."""
    from .schedules import ScheduleError
    from .schedules.balance import load_profile

    try:
        chosen, text = apply_balance(spec, load_profile(spec.balance), args.pipeline_model_parallel_size,
                                     num_microbatches(args), args.num_layers, source=spec.balance)
    except (ScheduleError, ValueError) as exc:
        return f"--pipeline-balance {spec.balance}: {exc}", spec
    return None, dataclasses.replace(chosen, note=text)


# -- --pipeline-balance ------------------------------------------------------------------------------

def apply_balance(spec: PipelineSpec, model, pp: int, microbatches: int, num_layers: int, *,
                  source: str) -> tuple[PipelineSpec, str]:
    """The spec on the layer split (and, for `--pipeline-schedule auto`, the schedule) that runs
    fastest under the cost model `model` (schedules.balance.ModelCosts), and what to log.
    Raises ScheduleError when nothing fits."""
    from .schedules import balance

    if spec.choose:
        usable = [n for n in names() if registry.info(n).needs_extra != "ilp"]
        name, best, rows = balance.choose_schedule_and_split(usable, pp, microbatches, model, num_layers,
                                                             memory_limit=spec.memory_limit,
                                                             post_validation=spec.post_validation)
        chosen = spec.balanced(best.split, name)
    else:
        name = spec.name
        best, rows = balance.choose(name, pp, microbatches, model, num_layers, memory_limit=spec.memory_limit,
                                    post_validation=spec.post_validation)
        chosen = spec.balanced(best.split)
    even = next((c for c in rows if not balance.flags(c.split)), None)
    gain = f"; simulated iteration {best.iteration / even.iteration:.3f}x the even split's" \
        if even is not None and even.iteration else ""
    return chosen, (f"--pipeline-balance ({source}): {name} on layer split {list(best.layers)} "
                    f"({balance.flags(best.split) or 'the even split'}){gain}, peak activation "
                    f"{best.peak_memory:.2f}\n{balance.table(rows, best)}")


SPLIT_ARGS = {"first": "decoder_first_pipeline_num_layers", "last": "decoder_last_pipeline_num_layers",
              "embedding": "account_for_embedding_in_pipeline_split", "loss": "account_for_loss_in_pipeline_split",
              "layout": "pipeline_model_parallel_layout"}


def split_arguments(split: LayerSplit) -> dict:
    """Megatron-LM's argument values (dest -> value) for a layer split."""
    return {dest: bool(getattr(split, key)) if key in ("embedding", "loss") else getattr(split, key)
            for key, dest in SPLIT_ARGS.items()}


# -- --pipeline-costs --------------------------------------------------------------------------------

COST_NAMES = ("comm", "bw", "mem-b", "mem-w", "a2a", "mb-scale")  # the named entries of --pipeline-costs


def parse_costs(text: str) -> Costs:
    """'F,B,W[,COMM[,BW]][,mem-b=X][,mem-w=Y][,a2a=A][,mb-scale=S0:S1:...]' -> schedules.Costs (BW: a
    backward run as one op, default B + W; mem-b / mem-w: the memory model, `schedules.costs.memory_model`;
    a2a: the all-to-all part of each F and B, which an overlapped pair hides; mb-scale: one factor per
    microbatch on its op times, colon-separated, `schedules.costs`). Positional
    numbers first, then `name=value` entries (comm and bw may be named instead). One-sentence
    ValueError naming --pipeline-costs otherwise."""
    from .schedules import ScheduleError
    from .schedules.costs import memory_model

    form = (f"--pipeline-costs must be F,B,W[,COMM[,BW]] numbers, got {text!r} (named entries may follow: "
            f"{', '.join(n + '=X' for n in COST_NAMES)})")
    positional, named = [], {}
    for part in (p.strip() for p in text.split(",")):
        key, eq, value = part.partition("=")
        try:
            number = tuple(map(float, value.split(":"))) if eq and key.strip() == "mb-scale" else \
                float(value if eq else part)
        except ValueError:
            raise ValueError(form) from None
        if not all(map(math.isfinite, number if isinstance(number, tuple) else (number,))):
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
                     mem_b=mem_b, mem_w=mem_w, a2a=named.get("a2a", 0.0), mb_scale=named.get("mb-scale"))
    except ScheduleError as exc:
        raise ValueError(f"--pipeline-costs: {exc}") from None
