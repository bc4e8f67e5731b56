"""`get_forward_backward_func(schedule)`: a drop-in for megatron-core's forward_backward_func.

megatron-core 0.16.1 (`pipeline_parallel/schedules.py`): `get_forward_backward_func`
(45) picks no pipelining (518), interleaved (828) or 1F1B (1972); all three take
the same keyword-only arguments and no others, return one loss dict per
microbatch on the last stage and an empty list elsewhere, and call
`config.finalize_model_grads_func` once after the last backward unless
`forward_only` (680, 1919, 2311).

`PipelineRunner` is the adapter from those keywords to one step of the executor; its plans
come from a `Planner` (runtime/planner.py) and its measured costs from a `ProfilingWindow`
(runtime/profile_window.py).
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Union

import torch
import torch.distributed as dist

from .. import schedules as S
from ..options import PipelineSpec, from_options
from .executor import StepContext, StepResult, _MicrobatchTee, _Replay, run_step
from .drift import may_replan, replan_on_drift
from .health import HealthGather
from . import mtp
from .linear_hooks import install
from .p2p import P2P, resolve_mode
from .p2p_groups import direction_groups
from .planner import FINGERPRINT_TIMEOUT_FLOOR_S, Planner, ScheduleMismatch, check_same_schedule  # noqa: F401  (ScheduleMismatch: runtime/__init__)
from .profile_window import ProfilingWindow
from .replica_counts import check_step

# What the post-validation optimizer hands the runner at each step: its pending validation (a
# function returning True when the validated step changed the parameters), or None.
ValidationSource = Callable[[], Optional[Callable[[], bool]]]


class PipelineRunner:
    """Callable with megatron-core's forward_backward_func keywords, running one spec.

    The schedule is planned for each (pipeline size, microbatch count) on first use and
    reused. `last_step` keeps the measured timeline of the latest call. `validation`: where a
    post-validated optimizer step waits to be validated (`PostValidationOptimizer.take_validation`);
    the executor runs it after this step's prefix.
    """

    def __init__(self, spec: PipelineSpec, *, fixed: Optional[S.Schedule] = None, record_timeline: bool = True,
                 losses_on_last_rank: bool = False, log: Optional[Callable[[str], None]] = None,
                 validation: Optional[ValidationSource] = None,
                 emulated_copy_seconds: Optional[float] = None) -> None:
        self.log = log or (lambda text: None)
        self.planner = Planner(spec, fixed=fixed, log=self.log)  # `fixed`: run this Schedule, as given
        if spec.offload not in S.offload.MODES:
            raise ValueError(f"offload must be one of {', '.join(S.offload.MODES)}, got {spec.offload!r}")
        S.offload.check_bandwidth(1.0 if spec.offload_bandwidth is None else spec.offload_bandwidth)
        # how gloo (CPU) runs carry p2p: strict (as NCCL orders it; the default), strict-lazy or plain
        self.p2p_mode = resolve_mode(spec.p2p_mode)
        self.window = ProfilingWindow(spec.profile_window, profile_out=spec.profile_out, log=self.log)
        # in-flight health: every --pipeline-health-interval training steps (runtime/health.py); printed by
        # each pipeline's first rank itself, not through `log` (global rank 0's), so a straggler in any
        # data-parallel replica's pipeline is named
        self.health = HealthGather(spec.health_interval, threshold=spec.health_threshold,
                                   patience=spec.health_patience, json_path=spec.health_json)
        self.record_timeline = record_timeline
        self.losses_on_last_rank = losses_on_last_rank
        self.validation = validation
        self.emulated_copy_seconds = emulated_copy_seconds  # emulated devices: offload copies take planned time
        self.last_step: Optional[StepResult] = None
        self._solo = None  # this rank's one-rank group (V placement), made at the first V step
        self._pairs_logged = False
        self._offload_logged = False
        self._counts_checked: set = set()  # training microbatch counts planned and checked so far (said from the second)
        install()

    # -- what the spec and the plans say ------------------------------------------------------------
    @property
    def spec(self) -> PipelineSpec:
        return self.planner.spec

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def chunks(self) -> int:
        return self.spec.chunks

    @property
    def costs(self) -> Optional[S.Costs]:
        return self.spec.costs

    @property
    def post_validation(self) -> bool:
        return self.spec.post_validation

    @property
    def measured(self) -> Optional[tuple[S.Costs, dict]]:
        return self.window.measured

    def profile_not_written(self) -> Optional[str]:
        """For the run's end: why --pipeline-profile-out was not written, or None (ProfilingWindow.unwritten)."""
        return self.window.unwritten()

    def plan(self, pp: int, num_microbatches: int, *, forward_only: bool = False) -> tuple[S.Schedule, S.Lowered]:
        return self.planner.plan(pp, num_microbatches, forward_only=forward_only)

    # -- megatron's interface ----------------------------------------------------------------
    def __call__(self, *, forward_step_func, data_iterator, model, num_microbatches: int, seq_length: int,
                 micro_batch_size: int, decoder_seq_length: Optional[int] = None, forward_only: bool = False,
                 collect_non_loss_data: bool = False, first_val_step: Optional[bool] = None,
                 adjust_tensor_shapes_fn: Optional[Callable] = None, p2p_communicator: Any = None,
                 pg_collection: Any = None, force_all_reduce: Optional[bool] = False, **_ignored):
        from megatron.core.utils import get_model_config, get_model_type

        chunks = self._chunks(model)
        config = get_model_config(chunks[0])
        group, pp, rank = _pipeline_group(pg_collection, p2p_communicator, self.name)
        key = (pp, num_microbatches, forward_only)
        sched, lowered = self.plan(pp, num_microbatches, forward_only=forward_only)
        if self.spec.balance_data is not None:
            # replicas run counts of their own: compared every step, on every rank before any rank's
            # first-use check (a pipeline that disagreed there would leave the other replicas waiting)
            check_step(sched, _data_parallel_rank(pg_collection), rank, self.spec.p2p_timeout_s)
        if self.planner.owes_check(key):
            self._first_use(key, sched, config, chunks, group, rank)
        cp, shape = _tensor_shape(pg_collection, config, seq_length, micro_batch_size, adjust_tensor_shapes_fn)
        profile = self.window.open_for(forward_only)
        ctx = StepContext(forward_step_func=forward_step_func, data_iterators=_iterators(data_iterator, chunks),
                          model=chunks, num_microbatches=num_microbatches, config=config,
                          model_type=get_model_type(chunks[0]), tensor_shape=tuple(shape), forward_only=forward_only,
                          collect_non_loss_data=collect_non_loss_data, first_val_step=first_val_step,
                          cp_group_size=cp, record_timeline=self.record_timeline, profile=profile,
                          offload_plan=self.planner.offload_plan(key),
                          emulated_copy_seconds=self.emulated_copy_seconds)
        # per-direction: the twin group is made at the first step, after the fingerprints agree (a rank
        # with the other layout would never join its creation), before any p2p (runtime/p2p_groups.py)
        groups = direction_groups(group, self.spec.p2p_groups) if self.spec.p2p_groups != "one" else ()
        p2p = P2P(group, rank, self.spec.p2p_timeout_s, self.p2p_mode, groups=groups)
        result = self._run(key, lowered, rank, p2p, ctx, forward_only)
        self._log_pairs(sched, result, rank)
        self._log_offload(sched, result, rank)
        if not forward_only and self.planner.offload_bandwidth_unknown:  # the first step that offloaded
            self._measure_offload_bandwidth(sched, result, rank, group, chunks)
        if self.window.step_done(forward_only, profile is not None):
            self._close_window(sched, group, rank, shape, config, chunks)
        if self.health.step_done(result, sched, self.spec.costs, group, rank, forward_only) \
                and may_replan(self.spec, self.planner):
            replan_on_drift(self.health, self.planner, sched, self.log)
        if not forward_only and config.finalize_model_grads_func is not None:
            self._finalize(sched, result, chunks, config, group, pg_collection, force_all_reduce)
        if self.losses_on_last_rank:
            device = next(chunks[0].parameters()).device
            store = _move_losses_to_last_rank(sched, result.forward_data_store, p2p, rank, device)
            if not forward_only and getattr(config, "mtp_num_layers", None):  # and the MTP losses' sums
                mtp.hand_over_tracker(p2p, rank, sched.owner(sched.num_stages - 1)[0], sched.pp - 1, device)
            return store
        return result.forward_data_store

    def _log_offload(self, sched: S.Schedule, result: StepResult, rank: int) -> None:
        """Once, after the first step that moved activations: what this rank's offload moved."""
        if (result.offloaded or result.offloaded_w) and not self._offload_logged:
            self._offload_logged = True
            self.log(f"primus_megatron: {sched.name}: --pipeline-offload {self.spec.offload} moved {result.offloaded} "
                     f"F ops' activations and {result.offloaded_w} W shares to host and back on pipeline rank {rank} "
                     f"({(result.offloaded_bytes + result.offloaded_w_bytes) / 2 ** 20:.1f} MiB)")

    def _log_pairs(self, sched: S.Schedule, result: StepResult, rank: int) -> None:
        """Once, after the first step that ran any: its pairs through megatron's combined step."""
        if result.combined_pairs and not self._pairs_logged:
            self._pairs_logged = True
            self.log(f"primus_megatron: {sched.name}: {result.combined_pairs} overlapped F&B pairs ran on pipeline rank "
                     f"{rank}, each as one call of megatron-core's combined_forward_backward_step "
                     f"(--overlap-moe-expert-parallel-comm)")

    def _chunks(self, model) -> list:
        chunks = list(model) if isinstance(model, (list, tuple)) else [model]
        if len(chunks) != self.chunks:
            raise ValueError(f"pipeline schedule {self.name!r} runs {self.chunks} model chunk(s) per rank but got "
                             f"{len(chunks)}; build the model with primus_megatron.build_model(provider, schedule="
                             f"{self.name!r})")
        return chunks

    def _first_use(self, key, sched: S.Schedule, config, chunks: list, group, rank: int) -> None:
        """Before a plan's first step: refuse what it cannot honour, and compare fingerprints."""
        _refuse_unsupported(config, chunks, sched, "off" if key[2] else self.spec.offload, forward_only=key[2])
        if sched.placement == S.V:
            self._solo_group()  # made by every rank before its first op, never within a step
        check_same_schedule(sched, group, rank, max(self.spec.p2p_timeout_s, FINGERPRINT_TIMEOUT_FLOOR_S),
                            pipeline_only=self.spec.balance_data is not None, recv_policy=self.spec.recv_policy,
                            p2p_groups=self.spec.p2p_groups)
        self.planner.checked(key)
        if not key[2]:  # a count changing between steps (batch-size ramp-up, balanced data): each new one once
            if self._counts_checked:
                self.log(f"primus_megatron: {sched.name}: microbatch count {key[1]} (pp {key[0]}) planned and checked "
                         f"before its first step")
            self._counts_checked.add(key[1])

    def _run(self, key, lowered: S.Lowered, rank: int, p2p: P2P, ctx: StepContext, forward_only: bool) -> StepResult:
        validate = self.validation() if self.validation is not None else None
        if validate is not None and forward_only:
            validate()  # evaluation reads the parameters right away: settle the previous step first
            validate = None
        prefix = None
        if validate is not None:
            prefix = self.planner.prefixes(key, lowered)
            ctx.data_iterators = [_Replay(it) if it is not None and not isinstance(it, _MicrobatchTee) else it
                                  for it in ctx.data_iterators]
        with torch.no_grad() if forward_only else torch.enable_grad():
            result = run_step(lowered, rank, p2p, ctx, validate=validate, prefix=prefix)
        self.last_step = result
        return result

    def _measure_offload_bandwidth(self, sched: S.Schedule, result: StepResult, rank: int, group,
                                   chunks: list) -> None:
        """--pipeline-offload-bandwidth left out: the first step planned copies as free; time this
        rank's copies against that step's F times (every rank gets the slowest) and plan with it."""
        from .offload import measured_bandwidth

        bandwidth = measured_bandwidth(result, sched, self.spec.costs, rank, next(chunks[0].parameters()).device,
                                       group)
        self.planner.use_offload_bandwidth(bandwidth)
        self.log(f"offload bandwidth measured: {bandwidth:.3g} activation units per time unit")

    def _close_window(self, sched: S.Schedule, group, rank: int, shape, config, chunks: list) -> None:
        """The profiled window is over: measured costs on every rank; a schedule that plans from
        costs is planned again from them (all ranks at the same step)."""
        costs = self.window.finish(sched, group, rank, shape, config.pipeline_dtype or torch.float32,
                                   next(chunks[0].parameters()).device, config)
        if self.spec.replan and self.planner._fixed is None and self.spec.entry.uses_costs:
            self.planner.replan(sched, costs, self.window.training_steps)

    def _finalize(self, sched: S.Schedule, result: StepResult, chunks: list, config, group, pg_collection,
                  force_all_reduce) -> None:
        num_tokens = None
        if config.calculate_per_token_loss:
            # megatron broadcasts the count from the last pipeline rank; under V the
            # loss lives on rank 0, so give every rank the total first.
            num_tokens = result.total_num_tokens.clone()
            dist.all_reduce(num_tokens, group=group)
        config.finalize_model_grads_func(chunks, num_tokens, pg_collection=self._finalize_groups(sched, pg_collection),
                                         force_all_reduce=force_all_reduce)

    def _finalize_groups(self, sched: S.Schedule, pg_collection: Any) -> Any:
        """Process groups for megatron's finalize_model_grads. Under V placement the
        embedding and the output layer both live on pipeline rank 0 (one shared
        Parameter when tied), so the first/last-stage embedding all-reduce is off."""
        if sched.placement != S.V:
            return pg_collection
        import copy

        from megatron.core.process_groups_config import ProcessGroupCollection

        groups = copy.copy(pg_collection) if pg_collection is not None else ProcessGroupCollection.use_mpu_process_groups()
        groups.embd = groups.pos_embd = self._solo_group()  # size 1: megatron skips the all-reduce
        return groups

    def _solo_group(self):
        """A process group of this rank alone (None would make megatron fall back to
        parallel_state's first/last-stage embedding group). Every rank makes its own
        at the same point (its runner's first step under V), so the ranks' group counts,
        from which torch names later groups, stay equal."""
        if self._solo is None:
            self._solo = dist.new_group(ranks=[dist.get_rank()], use_local_synchronization=True)
        return self._solo


def _pipeline_group(pg_collection: Any, p2p_communicator: Any, name: str) -> tuple[Any, int, int]:
    """(group, size, rank) of the pipeline the step runs on: megatron's pg_collection or
    communicator if given, else parallel_state's."""
    from megatron.core import parallel_state

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
        raise ValueError(f"pipeline schedule {name!r} needs a pipeline of at least 2 ranks, got {pp}")
    return group, pp, rank


def _data_parallel_rank(pg_collection: Any) -> int:
    """This rank's data-parallel replica (megatron's pg_collection if given, else parallel_state's)."""
    if pg_collection is not None and getattr(pg_collection, "dp", None) is not None:
        return dist.get_rank(pg_collection.dp)
    from megatron.core import parallel_state

    return parallel_state.get_data_parallel_rank()


def _tensor_shape(pg_collection: Any, config, seq_length: int, micro_batch_size: int,
                  adjust_tensor_shapes_fn: Optional[Callable]) -> tuple[int, list]:
    """(context-parallel size, the activation shape sent between stages)."""
    from megatron.core import parallel_state

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
    return cp, shape


def _iterators(data_iterator, chunks: list) -> list:
    """One data iterator per chunk: megatron's list, or one shared by every chunk."""
    if isinstance(data_iterator, (list, tuple)):
        if len(data_iterator) != len(chunks):
            raise ValueError(f"data_iterator is a list of {len(data_iterator)}, expected one per model chunk "
                             f"({len(chunks)})")
        return list(data_iterator)
    if len(chunks) > 1 and data_iterator is not None:
        return [_MicrobatchTee(data_iterator)] * len(chunks)
    return [data_iterator] * len(chunks)


class UnsupportedSetting(ValueError):
    """A megatron setting the engine does not honour (one sentence, raised on every rank
    before any of them waits on another)."""


def uses_transformer_engine(chunks: list) -> bool:
    """Whether a chunk holds a TransformerEngine module. megatron's wrappers (TELinear,
    TELayerNormColumnParallelLinear, ... in megatron.core.extensions.transformer_engine)
    subclass TE's classes: look at every class a module derives from, not only its own."""
    return any(cls.__module__.startswith("transformer_engine")
               for c in chunks for m in c.modules() for cls in type(m).__mro__)


def _refuse_unsupported(config: Any, chunks: list, sched: S.Schedule, offload: str = "off",
                        forward_only: bool = False) -> None:
    from ..compat.primus_engines import conflict
    from ..unsupported import log_fp8_basis_once, refusal_for

    clash = conflict()  # AMD Primus patches in its before_train phase, after Megatron-LM's validate_args
    if clash:
        raise UnsupportedSetting(clash)

    uses_te = uses_transformer_engine(chunks)
    ddp_configs = tuple(c.ddp_config for c in chunks if getattr(c, "ddp_config", None) is not None)
    problem = refusal_for(config, schedule=sched.name, splits_backward=sched.splits_backward,
                          v_placement=sched.placement == S.V, uses_te=uses_te, also=ddp_configs, offload=offload,
                          # a forward-only plan has no pairs, and no step of it runs megatron's combined step
                          # (combined.combined_step): --overlap-moe-expert-parallel-comm is the training plan's to meet
                          pairs=sched.has_pairs or forward_only)
    if problem:  # named as Megatron-LM's option; the config field is the same name with underscores
        raise UnsupportedSetting(problem)
    if getattr(config, "fp8", None) and sched.splits_backward and uses_te:
        log_fp8_basis_once(str(getattr(config, "fp8_recipe", None) or "delayed"))


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


def get_forward_backward_func(schedule: Union[str, S.Schedule, PipelineSpec] = "zb-h1", *,
                              record_timeline: bool = True, losses_on_last_rank: bool = False,
                              log: Optional[Callable[[str], None]] = None,
                              validation: Optional[ValidationSource] = None, **options) -> PipelineRunner:
    """A function with megatron-core's forward_backward_func signature running `schedule`.

    `schedule` is a PipelineSpec, a registered name (see `primus-pipeline list`) or a Schedule;
    with a name, options build the spec: costs, memory_limit, chunks, p2p_timeout_s, p2p_mode (how
    CPU runs carry p2p: "strict", the default, executes it as NCCL would; "plain" posts it to gloo
    as it is), offload ("off", "all" or "auto": activation offload, `schedules.offload`),
    offload_bandwidth, profile_steps (the window of training steps measured), replan, profile_out,
    post_validation, balance_data (off, sorted or lb-mini: data-parallel replicas run microbatch
    counts of their own, `runtime.replica_counts`), recv_policy (early, just-in-time or auto: where
    each receive is posted, `schedules.just_in_time`), p2p_groups (one or per-direction: a process group
    per direction for the step's p2p, `runtime.p2p_groups`). `validation`: see PipelineRunner.
    `losses_on_last_rank`: the loss dicts (and after a training step the MTP losses megatron-core's
    MTPLossLoggingHelper tracked, `runtime.mtp.hand_over_tracker`) are returned on the last pipeline
    rank, as Megatron-LM reads them, wherever the placement computed them.
    """
    if isinstance(schedule, PipelineSpec):
        if options:
            raise TypeError(f"get_forward_backward_func: a PipelineSpec carries its own options, got "
                            f"{', '.join(sorted(options))}")
        spec, fixed = schedule, None
    elif isinstance(schedule, S.Schedule):
        spec, fixed = from_options(schedule, **options), schedule
    else:
        spec, fixed = from_options(schedule, **options), None
    return PipelineRunner(spec, fixed=fixed, record_timeline=record_timeline, losses_on_last_rank=losses_on_last_rank,
                          log=log, validation=validation)
