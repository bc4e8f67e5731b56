"""`get_forward_backward_func(schedule)`: a drop-in for megatron-core's forward_backward_func.

megatron-core 0.16.1 (`pipeline_parallel/schedules.py`): `get_forward_backward_func`
(45) picks no pipelining (518), interleaved (828) or 1F1B (1972); all three take
the same keyword-only arguments and no others, return one loss dict per
microbatch on the last stage and an empty list elsewhere, and call
`config.finalize_model_grads_func` once after the last backward unless
`forward_only` (680, 1919, 2311).
"""
from __future__ import annotations

import datetime
import hashlib
from math import inf
from typing import Any, Callable, Optional, Union

import torch
import torch.distributed as dist

from .. import schedules as S
from . import offload as activation_offload
from .collectives import collective_device
from .executor import StepContext, StepResult, _MicrobatchTee, _Replay, run_step
from .pending import take_pending
from .linear_hooks import install
from .p2p import DEFAULT_TIMEOUT_S, P2P, PipelineTimeout, resolve_mode


def forward_only_schedule(schedule: S.Schedule) -> S.Schedule:
    """The same order with the backward ops removed (evaluation)."""
    only = schedule.with_ranks([[op for op in ops if op.kind == S.F] for ops in schedule.ranks])
    only.meta["forward_only"] = True
    return only


class ScheduleMismatch(RuntimeError):
    """Pipeline ranks are about to run different schedules."""


def check_same_schedule(sched: S.Schedule, group, rank: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """All ranks of the pipeline compare a fingerprint of the schedule before any
    p2p: ranks that disagree would otherwise hang (or silently mix tensors)."""
    mine = schedule_fingerprint(sched)
    value = torch.tensor([int(mine, 16) & ((1 << 62) - 1)], dtype=torch.long, device=collective_device(group))
    values = [torch.zeros_like(value) for _ in range(dist.get_world_size(group))]
    work = dist.all_gather(values, value, group=group, async_op=True)
    try:
        work.wait(timeout=datetime.timedelta(seconds=timeout_s))
    except Exception as exc:
        raise PipelineTimeout(
            f"pipeline rank {rank} (global {dist.get_rank()}) waited {timeout_s:g} s before its first pipeline op for "
            f"every pipeline rank to compare schedule fingerprints; at least one rank never started the step (it "
            f"died, hangs or is elsewhere in its program) [{type(exc).__name__}]") from exc
    if len({int(v) for v in values}) == 1:
        return
    described: list = [None] * len(values)
    dist.all_gather_object(described, f"{sched.name} (pp={sched.pp}, {sched.microbatches} microbatches, "
                                      f"fingerprint {mine})", group=group)
    listing = "; ".join(f"pipeline rank {r}: {d}" for r, d in enumerate(described))
    raise ScheduleMismatch(f"pipeline ranks would run schedules that differ ({listing}); every rank must be given the "
                           f"same --pipeline-schedule, microbatch count, memory limit and costs")


class PipelineRunner:
    """Callable with megatron-core's forward_backward_func keywords.

    The schedule is generated for each (pipeline size, microbatch count) on
    first use, validated (order, memory, hang-freedom) and lowered once, then
    reused. `last_step` keeps the measured timeline of the latest call.
    """

    def __init__(self, schedule: Union[str, S.Schedule], *, costs: Optional[S.Costs] = None,
                 memory_limit: Optional[float] = None, chunks: Optional[int] = None,
                 p2p_timeout_s: float = DEFAULT_TIMEOUT_S, record_timeline: bool = True,
                 losses_on_last_rank: bool = False, profile_steps: Optional[tuple[int, int]] = None,
                 replan: bool = False, log: Optional[Callable[[str], None]] = None,
                 profile_out: Optional[str] = None, post_validation: bool = False,
                 p2p_mode: Optional[str] = None, offload: str = "off",
                 offload_bandwidth: Optional[float] = None) -> None:
        if isinstance(schedule, S.Schedule):
            S.validate(schedule)
            self.name = schedule.name
            self._fixed: Optional[S.Schedule] = schedule
            self.chunks = schedule.chunks_per_rank
        else:
            entry = S.info(schedule)  # unknown names fail here, before any process group is touched
            self.name = entry.name
            self._fixed = None
            self.chunks = S.registry.resolve_chunks(entry, chunks)
        self.costs = costs
        self.memory_limit = memory_limit
        # Activation offload (schedules.offload): the plan decides which F's saved activations go to host and
        # when they come back; the bandwidth is in the cost model's units (activation shares per time unit).
        # Left out, measured at start-up (offload.measured_bandwidth): the first step plans copies as free.
        if offload not in S.offload.MODES:
            raise ValueError(f"offload must be one of {', '.join(S.offload.MODES)}, got {offload!r}")
        self.offload = offload
        self.offload_bandwidth = None if offload_bandwidth is None else S.offload.check_bandwidth(offload_bandwidth)
        self._offload_plans: dict = {}
        # The run steps its optimizer with post-validation (no barrier between iterations): a
        # schedule that searches minimises the longest per-rank span, not the makespan.
        self.post_validation = post_validation
        self.p2p_timeout_s = p2p_timeout_s
        # how gloo (CPU) runs carry p2p: strict (as NCCL orders it; the default), strict-lazy or plain
        self.p2p_mode = resolve_mode(p2p_mode)
        self.record_timeline = record_timeline
        self.losses_on_last_rank = losses_on_last_rank
        # Measured costs: training steps [start, end) are profiled; afterwards a
        # cost-driven schedule is re-planned from them (all ranks at the same step).
        self.profile_steps = profile_steps
        self.profile_out = profile_out  # where the cost model fitted to the measurements goes (rank 0)
        self.replan = replan
        self.log = log or (lambda text: None)
        self.training_steps = 0
        self.profile = None
        self.measured: Optional[tuple[S.Costs, dict]] = None
        self._cache: dict[tuple, tuple[S.Schedule, S.Lowered]] = {}
        self._unchecked: set = set()  # plans whose fingerprint the ranks have not compared yet
        self._prefixes: dict = {}
        self.last_step: Optional[StepResult] = None
        install()

    # -- planning -----------------------------------------------------------------------------
    def plan(self, pp: int, num_microbatches: int, *, forward_only: bool = False) -> tuple[S.Schedule, S.Lowered]:
        key = (pp, num_microbatches, forward_only)
        if key not in self._cache:
            if self._fixed is not None:
                sched = self._fixed
                if (sched.pp, sched.microbatches) != (pp, num_microbatches):
                    raise ValueError(f"schedule {sched.name!r} was built for pp={sched.pp} and {sched.microbatches} "
                                     f"microbatches, but the step has pp={pp} and {num_microbatches}")
            else:
                # with offload the memory limit bounds what stays resident: the offload plan meets it
                sched = S.generate(self.name, pp, num_microbatches, costs=self.costs,
                                   memory_limit=self.memory_limit if self.offload == "off" else None,
                                   chunks=self.chunks, post_validation=self.post_validation)
            if forward_only:
                sched = forward_only_schedule(sched)
            elif self.offload != "off":
                self._offload_plans[key] = S.offload.choose(sched, self.offload, costs=self.costs,
                                                            bandwidth=self.offload_bandwidth or inf,
                                                            memory_limit=self.memory_limit).plan
            self._cache[key] = (sched, S.validate(sched))
            self._unchecked.add(key)
        return self._cache[key]

    def _finish_profile(self, sched: S.Schedule, group, rank: int, shape, dtype, device, config=None) -> None:
        """The profiled window is over: gather the measured costs (every rank gets
        the same) and re-plan a cost-driven schedule from them."""
        from .profiler import measure_p2p, measured_costs

        self.profile.comm.append(measure_p2p(group, rank, shape, dtype, device))
        costs, summary = measured_costs(self.profile, sched, group, rank)
        self.measured = (costs, summary)
        if self.profile_out and dist.get_rank() == 0 and config is not None:
            self._save_profile(costs, sched, config)
        ms = lambda xs: ", ".join(f"{1e3 * x:.2f}" for x in xs)  # noqa: E731
        self.log(f"measured per-stage costs (ms) over {self.profile.steps} steps: F [{ms(summary['f'])}] "
                 f"B [{ms(summary['b'])}] W [{ms(summary['w'])}] p2p {1e3 * summary['comm']:.3f}; one microbatch's "
                 f"activations on a rank: {summary['unit_bytes'] / 2**20:.2f} MiB")
        if self.replan and self._fixed is None and S.info(self.name).uses_costs:
            self._replan(sched, costs)

    def _replan(self, sched: S.Schedule, costs: S.Costs) -> None:
        """Plan again from the measured costs. A cost-driven schedule takes the new plan (its search
        honours the memory limit); one chosen for its memory class (zbv, v-half, v-min) takes it only
        if it simulates no slower under the measured costs at no more peak activation memory."""
        key = (sched.pp, sched.microbatches, False)
        old = self._cache.get(key)
        self.costs = costs
        self._cache.clear()
        self._prefixes.clear()
        new, _ = self.plan(sched.pp, sched.microbatches)
        if old is None:
            return
        before, after = S.simulate(old[0], costs), S.simulate(new, costs)
        # the iteration the run has: the makespan, or each rank's span without the optimizer barrier
        period = (lambda r: max(r.span)) if self.post_validation else (lambda r: r.makespan)
        slower = period(after) > period(before) * (1 + 1e-9)
        bigger = max(after.peak_memory) > max(before.peak_memory) + 1e-9
        if not S.info(self.name).cost_driven and (slower or bigger):
            self._cache = {key: old}
            self.log(f"kept the running {self.name} plan after measuring costs at step {self.training_steps}: a "
                     f"re-plan simulates {1e3 * period(after):.1f} ms at peak activation "
                     f"{max(after.peak_memory):.2f} units against {1e3 * period(before):.1f} ms at "
                     f"{max(before.peak_memory):.2f}")
            return
        self.log(f"re-planned {self.name} from the measured costs at step {self.training_steps}: simulated "
                 f"iteration {1e3 * period(before):.1f} ms -> {1e3 * period(after):.1f} ms, peak activation "
                 f"{max(before.peak_memory):.2f} -> {max(after.peak_memory):.2f} units")

    def _save_profile(self, costs: S.Costs, sched: S.Schedule, config) -> None:
        """Per-layer, embedding and head costs fitted to this run's per-stage
        measurements, for `primus-pipeline balance` or `--pipeline-balance FILE`."""
        from ..schedules import balance
        from ..schedules.layer_split import LayerSplit

        split = LayerSplit.from_config(config)
        model = balance.fit(costs, split, sched.pp, sched.chunks_per_rank)
        balance.save_profile(self.profile_out, model, meta={
            "schedule": sched.name, "pp": sched.pp, "microbatches": sched.microbatches, "num_layers": split.num_layers,
            "split": balance.flags(split) or "even", "units": "seconds", "hidden_size": config.hidden_size})
        self.log(f"profile written to {self.profile_out}: per layer F {1e3 * model.layer.f:.2f} B "
                 f"{1e3 * model.layer.b:.2f} W {1e3 * model.layer.w:.2f} ms, head (output layer and loss) F "
                 f"{1e3 * model.head.f:.2f} B {1e3 * model.head.b:.2f} W {1e3 * model.head.w:.2f} ms; "
                 f"`primus-pipeline balance --profile {self.profile_out} ...` gives the split for any schedule")

    # -- megatron's interface ----------------------------------------------------------------
    def __call__(self, *, forward_step_func, data_iterator, model, num_microbatches: int, seq_length: int,
                 micro_batch_size: int, decoder_seq_length: Optional[int] = None, forward_only: bool = False,
                 collect_non_loss_data: bool = False, first_val_step: Optional[bool] = None,
                 adjust_tensor_shapes_fn: Optional[Callable] = None, p2p_communicator: Any = None,
                 pg_collection: Any = None, force_all_reduce: Optional[bool] = False, **_ignored):
        from megatron.core import parallel_state
        from megatron.core.utils import get_model_config, get_model_type

        chunks = list(model) if isinstance(model, (list, tuple)) else [model]
        if len(chunks) != self.chunks:
            raise ValueError(f"pipeline schedule {self.name!r} runs {self.chunks} model chunk(s) per rank but got "
                             f"{len(chunks)}; build the model with primus_megatron.build_model(provider, schedule="
                             f"{self.name!r})")
        config = get_model_config(chunks[0])
        _refuse_foreign_groups(pg_collection, p2p_communicator)
        if pg_collection is not None and getattr(pg_collection, "pp", None) is not None:
            group = pg_collection.pp
        elif p2p_communicator is not None and getattr(p2p_communicator, "pp_group", None) is not None:
            group = p2p_communicator.pp_group
        else:
            group = parallel_state.get_pipeline_model_parallel_group()
        pp, rank = dist.get_world_size(group), dist.get_rank(group)
        _check_communicator_stages(p2p_communicator, pp, rank)
        if pp < 2:
            raise ValueError(f"pipeline schedule {self.name!r} needs a pipeline of at least 2 ranks, got {pp}")
        sched, lowered = self.plan(pp, num_microbatches, forward_only=forward_only)
        key = (pp, num_microbatches, forward_only)
        if key in self._unchecked:
            _refuse_unsupported(config, chunks, sched, "off" if forward_only else self.offload)
            if sched.placement == S.V:
                _solo_group()  # made by every rank before its first op, never within a step
            check_same_schedule(sched, group, rank, self.p2p_timeout_s)
            self._unchecked.discard(key)

        if pg_collection is not None and getattr(pg_collection, "cp", None) is not None:
            cp = dist.get_world_size(pg_collection.cp)
            tp = dist.get_world_size(pg_collection.tp) if getattr(pg_collection, "tp", None) is not None else 1
        else:
            cp = parallel_state.get_context_parallel_world_size()
            tp = parallel_state.get_tensor_model_parallel_world_size()
        seq = seq_length // cp
        if config.sequence_parallel:
            seq //= tp
        shape = [seq, micro_batch_size, config.hidden_size]
        if adjust_tensor_shapes_fn is not None:
            recv, send = adjust_tensor_shapes_fn([shape], [shape])
            if recv[0] != send[0]:
                raise ValueError("adjust_tensor_shapes_fn must keep one tensor shape per pipeline edge")
            shape = list(recv[0])

        if isinstance(data_iterator, (list, tuple)):
            if len(data_iterator) != len(chunks):
                raise ValueError(f"data_iterator is a list of {len(data_iterator)}, expected one per model chunk "
                                 f"({len(chunks)})")
            iterators = list(data_iterator)
        elif len(chunks) > 1 and data_iterator is not None:
            iterators = [_MicrobatchTee(data_iterator)] * len(chunks)
        else:
            iterators = [data_iterator] * len(chunks)

        profiling = (not forward_only and self.profile_steps is not None
                     and self.profile_steps[0] <= self.training_steps < self.profile_steps[1])
        if profiling and self.profile is None:
            from .profiler import Profile

            self.profile = Profile()
        ctx = StepContext(forward_step_func=forward_step_func, data_iterators=iterators, model=chunks,
                          num_microbatches=num_microbatches, config=config, model_type=get_model_type(chunks[0]),
                          tensor_shape=tuple(shape), forward_only=forward_only,
                          collect_non_loss_data=collect_non_loss_data, first_val_step=first_val_step,
                          cp_group_size=cp, record_timeline=self.record_timeline,
                          profile=self.profile if profiling else None,
                          offload_plan=self._offload_plans.get(key))
        p2p = P2P(group, rank, self.p2p_timeout_s, self.p2p_mode)
        validate = take_pending()
        if validate is not None and forward_only:
            validate()  # evaluation reads the parameters right away: settle the previous step first
            validate = None
        prefix = None
        if validate is not None:
            from ..schedules.prefix import prefixes

            prefix = self._prefixes.get(key) or self._prefixes.setdefault(key, prefixes(lowered))
            ctx.data_iterators = [_Replay(it) if it is not None and not isinstance(it, _MicrobatchTee) else it
                                  for it in ctx.data_iterators]
        grad_ctx = torch.no_grad() if forward_only else torch.enable_grad()
        with grad_ctx:
            result = run_step(lowered, rank, p2p, ctx, validate=validate, prefix=prefix)
        self.last_step = result
        if self.offload != "off" and self.offload_bandwidth is None and not forward_only:  # measured at start-up
            self.offload_bandwidth = activation_offload.measured_bandwidth(result, sched, self.costs, rank,
                                                                           next(chunks[0].parameters()).device, group)
            self._offload_plans = {k: S.offload.choose(self._cache[k][0], self.offload, costs=self.costs,
                                                       bandwidth=self.offload_bandwidth,
                                                       memory_limit=self.memory_limit).plan for k in self._offload_plans}
            self.log(f"offload bandwidth measured: {self.offload_bandwidth:.3g} activation units per time unit")
        if not forward_only:
            self.training_steps += 1
            if profiling and self.training_steps == self.profile_steps[1]:
                self._finish_profile(sched, group, rank, shape, config.pipeline_dtype or torch.float32,
                                     next(chunks[0].parameters()).device, config)

        if not forward_only and config.finalize_model_grads_func is not None:
            num_tokens = None
            if config.calculate_per_token_loss:
                # megatron broadcasts the count from the last pipeline rank; under V the
                # loss lives on rank 0, so give every rank the total first.
                num_tokens = result.total_num_tokens.clone()
                dist.all_reduce(num_tokens, group=group)
            config.finalize_model_grads_func(chunks, num_tokens,
                                             pg_collection=_finalize_groups(sched, pg_collection),
                                             force_all_reduce=force_all_reduce)
        if self.losses_on_last_rank:
            return _move_losses_to_last_rank(sched, result.forward_data_store, p2p, rank,
                                             next(chunks[0].parameters()).device)
        return result.forward_data_store


class UnsupportedSetting(ValueError):
    """A megatron setting the engine does not honour (one sentence, raised on every rank
    before any of them waits on another)."""


def uses_transformer_engine(chunks: list) -> bool:
    """Whether a chunk holds a TransformerEngine module. megatron's wrappers (TELinear,
    TELayerNormColumnParallelLinear, ... in megatron.core.extensions.transformer_engine)
    subclass TE's classes: look at every class a module derives from, not only its own."""
    return any(cls.__module__.startswith("transformer_engine")
               for c in chunks for m in c.modules() for cls in type(m).__mro__)


def _refuse_unsupported(config: Any, chunks: list, sched: S.Schedule, offload: str = "off") -> None:
    from .unsupported import refusal_for

    uses_te = uses_transformer_engine(chunks)
    ddp_configs = tuple(c.ddp_config for c in chunks if getattr(c, "ddp_config", None) is not None)
    problem = refusal_for(config, schedule=sched.name, splits_backward=sched.splits_backward,
                          v_placement=sched.placement == S.V, uses_te=uses_te, also=ddp_configs, offload=offload)
    if problem:  # named as Megatron-LM's option; the config field is the same name with underscores
        raise UnsupportedSetting(problem)


def is_multi_module(pg_collection: Any = None, p2p_communicator: Any = None) -> bool:
    """Whether megatron-core (0.19+) was handed its multi-module pipeline (several models, e.g. a
    vision encoder and a language model, on grids of their own, joined by a bridge schedule)."""
    try:
        from megatron.core.process_groups_config import MultiModuleProcessGroupCollection
    except ImportError:  # megatron-core 0.16.1 has no multi-module pipelines
        MultiModuleProcessGroupCollection = ()
    try:
        from megatron.core.pipeline_parallel.multimodule_communicator import MultiModulePipelineCommunicator
    except ImportError:
        MultiModulePipelineCommunicator = ()
    return ((bool(MultiModuleProcessGroupCollection) and isinstance(pg_collection, MultiModuleProcessGroupCollection))
            or (bool(MultiModulePipelineCommunicator)
                and isinstance(p2p_communicator, MultiModulePipelineCommunicator)))


MULTI_MODULE = ("megatron's multi-module pipeline (a MultiModuleProcessGroupCollection or "
                "MultiModulePipelineCommunicator: several models on grids of their own, joined by megatron's bridge "
                "schedule) cannot run with a primus_megatron schedule, which pipelines one model over one pipeline "
                "group; use megatron's own forward_backward_func for it")


def _refuse_foreign_groups(pg_collection: Any, p2p_communicator: Any) -> None:
    if is_multi_module(pg_collection, p2p_communicator):
        raise UnsupportedSetting(MULTI_MODULE)


def _check_communicator_stages(p2p_communicator: Any, pp: int, rank: int) -> None:
    """megatron-core 0.19's P2PCommunicator answers stage questions (total_stages, current_stage,
    is_pp_first_stage, is_pp_last_stage) from its group; the schedule places stages itself, so the
    communicator must describe the same pipeline group (its stage answers then need no honouring)."""
    if p2p_communicator is None:
        return
    total = getattr(p2p_communicator, "total_stages", None)
    current = getattr(p2p_communicator, "current_stage", None)
    if (total is not None and total != pp) or (current is not None and current != rank):
        raise UnsupportedSetting(
            f"the p2p_communicator describes pipeline stage {current} of {total}, but this rank is pipeline rank "
            f"{rank} of {pp} in the group the schedule runs on; pass a communicator of that pipeline group (or none)")


def _move_losses_to_last_rank(sched: S.Schedule, store: list, p2p: P2P, rank: int, device) -> list:
    """Megatron-LM reads the loss dicts on the last pipeline rank; under V they
    are computed on rank 0. Hand them over (a few numbers per microbatch)."""
    from .loss_handover import receive_losses, send_losses

    holder = sched.owner(sched.num_stages - 1)[0]
    last = sched.pp - 1
    if holder == last:
        return store
    if rank == holder:
        send_losses(p2p, store, to=last, device=device)
        return []
    if rank == last:
        return receive_losses(p2p, source=holder, device=device)
    return store


def _finalize_groups(sched: S.Schedule, pg_collection: Any) -> Any:
    """Process groups for megatron's finalize_model_grads. Under V placement the
    embedding and the output layer both live on pipeline rank 0 (one shared
    Parameter when tied), so the first/last-stage embedding all-reduce is off."""
    if sched.placement != S.V:
        return pg_collection
    import copy

    from megatron.core.process_groups_config import ProcessGroupCollection

    groups = copy.copy(pg_collection) if pg_collection is not None else ProcessGroupCollection.use_mpu_process_groups()
    groups.embd = groups.pos_embd = _solo_group()  # size 1: megatron skips the all-reduce
    return groups


_SOLO = {}


def _solo_group():
    """A process group of this rank alone (None would make megatron fall back to
    parallel_state's first/last-stage embedding group). Every rank makes its own
    at the same point (the first step under V), so the ranks' group counts, from
    which torch names later groups, stay equal."""
    rank = dist.get_rank()
    if rank not in _SOLO:
        _SOLO[rank] = dist.new_group(ranks=[rank], use_local_synchronization=True)
    return _SOLO[rank]


def get_forward_backward_func(schedule: Union[str, S.Schedule] = "zb-h1", **options) -> PipelineRunner:
    """A function with megatron-core's forward_backward_func signature running `schedule`.

    `schedule` is a registered name (see `primus-pipeline list`) or a Schedule;
    options: costs, memory_limit, chunks, p2p_timeout_s, record_timeline, p2p_mode (how CPU runs carry p2p:
    "strict", the default, executes it as NCCL would; "plain" posts it to gloo as it is), offload
    ("off", "all" or "auto": activation offload, `schedules.offload`), offload_bandwidth.
    """
    return PipelineRunner(schedule, **options)


def schedule_fingerprint(schedule: S.Schedule) -> str:
    """A short hash of the exact op lists (ranks must agree on it before any p2p)."""
    text = repr((schedule.name, schedule.pp, schedule.microbatches, schedule.chunks_per_rank, schedule.placement,
                 schedule.ranks))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
