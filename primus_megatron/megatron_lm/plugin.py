"""`install()`: run Megatron-LM's own pretrain() with a primus_megatron schedule.

With `--pipeline-schedule NAME` on the command line (added by
`extra_args_provider`), install() makes Megatron-LM's training:

* call our forward_backward_func (megatron.training.training's
  `get_forward_backward_func`, the name its train() and evaluate() use);
* build the model chunks with the schedule's placement (a wrapper around the
  model provider given to `get_model`: pre/post-process and layers by global
  stage, the tied embedding shared on rank 0 under V);
* under a schedule with W ops, route each chunk's TransformerEngine linear layers
  to the W ops (`te_wgrad.enable`, before megatron's DDP wraps the chunk) and build
  megatron's DistributedDataParallel around such a chunk with
  `delay_wgrad_compute=True` (`--transformer-impl transformer_engine`, Megatron-LM's
  default on GPUs);
* set the virtual pipeline size to the schedule's chunks per rank before
  Megatron-LM validates its arguments (unless given);
* under V, number layers by global stage everywhere megatron asks (also in
  checkpoint keys); answer megatron's per-chunk "first/last stage?" questions
  (`is_pipeline_first_stage(ignore_virtual=False, vp_stage=c)`, which
  pretrain_gpt's get_batch asks) by global stage, so rank 0's chunk 1 reads
  the labels; broadcast the whole batch to tensor-parallel peers on the rank
  holding both ends; and hand the loss dicts (and the MTP losses megatron-core
  tracks, runtime/mtp.py) to the last pipeline rank, where Megatron-LM's
  train_step, evaluate and logging read them.

With `--cpu` (or `--distributed-backend gloo` without CUDA) it first turns on CPU
mode (`compat.cpu.enable(training=True)`; gloo, local layers unless a TransformerEngine
that runs on CPU is installed, no FP8, userbuffers or CUDA graphs, no persistent layer norm,
no CUDA fusions, no DataLoader workers: megatron_lm/cpu_mode.py), so the same command line
dry-runs on CPU processes, after saying which of our refusals the GPU run of it would hit
that the switch to CPU hides; with
`--optimizer-post-validation` Megatron-LM's optimizer steps are post-validated
(megatron_lm/post_validation.py). Options that do not fit end the run before any
process group exists: one sentence on rank 0, exit status 2.

Idempotent; a no-op for runs without these options.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Optional, Union

from .. import schedules as S
from ..options import PipelineSpec, few_microbatches_warning
from .args import spec_of


class Plugin:
    """What install() set up for this process: CPU mode, the spec Megatron-LM's validated
    arguments give (after `auto` or `--pipeline-balance` chose), the one runner of that spec
    (training and evaluation), where a post-validated step waits, and the contexts entered
    for the rest of the run (an ExitStack; `finish()` closes it)."""

    def __init__(self, cpu_mode: bool) -> None:
        self.cpu_mode = cpu_mode  # finish() tears gloo down
        self.stack = contextlib.ExitStack()
        self.spec: Optional[PipelineSpec] = None
        self.validation: Optional[Callable] = None  # post_validation.install's source
        self.balanced_steps: Optional[Callable] = None  # balanced_data.install's maker, for --pipeline-balance-data
        self._runner = None

    def use(self, spec: Optional[PipelineSpec]) -> None:
        """The spec of the arguments Megatron-LM has just validated."""
        self.spec, self._runner = spec, None

    def runner(self):
        if self._runner is None:
            self._runner = forward_backward_func_for(self.spec, validation=self.validation)
        return self._runner

    def place_layers(self, pp: int, placement: str, chunks: int) -> None:
        """Every later layer-offset lookup (model build, checkpoint keys) follows `placement`."""
        from ..runtime.placement import layer_placement

        self.stack.enter_context(layer_placement(pp, placement, chunks))  # a no-op when already in effect


# The installed plugin. Megatron-LM calls our patches without a handle of ours, and
# finish() is called by the patched pretrain_gpt.py: the one install per process lives here.
_PLUGIN: Optional[Plugin] = None


def extra_args_provider(existing: Optional[Callable] = None) -> Callable:
    """An extra_args_provider for Megatron-LM's pretrain() that adds our group
    and chains `existing` (e.g. add_modelopt_args)."""
    from ..options import add_args

    def provider(parser):
        parser = add_args(parser, extra=existing)
        if not any("--cpu" in a.option_strings for a in parser._actions):
            parser.add_argument("--cpu", action="store_true",
                                help="run on CPU processes with gloo (primus_megatron.compat.cpu; a dry run of "
                                     "this command line without GPUs); also on when CUDA is absent and "
                                     "--distributed-backend gloo is given")
        if not any("--optimizer-post-validation" in a.option_strings for a in parser._actions):
            parser.add_argument("--optimizer-post-validation", action="store_true",
                                help="optimizer step without the global synchronisation before it: each "
                                     "pipeline rank steps optimistically and validates (rolls back or re-steps "
                                     "exactly) during the next step's first forwards; needs --pipeline-schedule")
        return parser

    return provider


def forward_backward_func_for(spec: PipelineSpec, *, validation: Optional[Callable] = None) -> Any:
    """Our runner for a spec of Megatron-LM's arguments (`args.spec_of`): losses handed to the
    last pipeline rank, where Megatron-LM reads them; `validation`: a post-validated step's."""
    from ..runtime import get_forward_backward_func

    return get_forward_backward_func(spec, losses_on_last_rank=True, log=_log0, validation=validation)


def _log0(text: str) -> None:
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_rank() == 0:
        print(text, flush=True)


def refuse_schedule_groups(pp_size=None, vp_size=None, schedule_pg_collection=None, **_ignored) -> None:
    """megatron-core 0.19 passes Megatron-LM's process groups to get_forward_backward_func; a
    multi-module collection selects megatron's bridge schedule, which ours does not replace (one
    sentence, raised on every rank before the first step). pp_size and vp_size are the model's own
    (the schedule's runner checks its chunks and pipeline group on its first call)."""
    from ..runtime.forward_backward import MULTI_MODULE, UnsupportedSetting, is_multi_module

    if is_multi_module(schedule_pg_collection):
        raise UnsupportedSetting(MULTI_MODULE)


def placed_provider(provider: Callable, entry: Union[S.registry.ScheduleInfo, PipelineSpec], pp: int, rank: int,
                    chunks: int) -> Callable:
    """Wrap a model provider so chunk `vp_stage` is built as global stage
    stage_of(placement, pp, rank, vp_stage), whatever pre/post flags megatron passes.
    `entry`: the schedule's registry entry or spec (its placement and whether it has W ops)."""
    from ..runtime import te_wgrad
    from ..runtime.placement import _tie_embeddings, _untie_group, layer_placement, patch_float16_module

    built: list = []
    n = pp * chunks
    w_ops = entry.splits_backward

    @functools.wraps(provider)
    def wrapper(pre_process=True, post_process=True, vp_stage=None, **kwargs):
        c = 0 if vp_stage is None else vp_stage
        stage = S.stage_of(entry.placement, pp, rank, c)
        # under V rank 0 holds both ends: no embedding-group all-reduce at construction (the
        # last pipeline rank holds neither end and would never join it)
        with layer_placement(pp, entry.placement, chunks), _untie_group(entry.placement):
            model = provider(pre_process=stage == 0, post_process=stage == n - 1,
                             **({"vp_stage": vp_stage} if vp_stage is not None else {}), **kwargs)
        model.pipeline_stage, model.pipeline_num_stages = stage, n
        if w_ops:  # TransformerEngine layers defer their weight GEMM into our W ops (no-op without TE);
            try:
                routed = te_wgrad.enable(model)  # before megatron's DDP wraps the chunk (see _install_ddp_delay)
            except te_wgrad.TESupportError as exc:  # a layer we cannot split (runtime/grouped_layouts.py)
                _refuse_built(str(exc))
            import torch.distributed as dist

            if routed and dist.is_initialized() and dist.get_rank() == 0:
                grouped = te_wgrad.grouped_layers(model)
                print(f"primus_megatron: model chunk {c} on rank 0: {routed} TransformerEngine layers defer their "
                      f"weight gradients to W ops, {grouped} of them grouped experts", flush=True)
        built.append(model)
        if entry.placement == S.V and rank == 0 and len(built) == chunks:
            _tie_embeddings(built)  # before megatron wraps the chunks for data parallelism
        patch_float16_module()  # fp16/bf16 casts at the global first/last stage
        return model

    return wrapper


def install() -> None:
    """Patch Megatron-LM's training entry points (see the module doc). Idempotent."""
    global _PLUGIN
    if _PLUGIN is not None:
        return
    from ..compat import cpu_training

    plugin = Plugin(cpu_training.requested())  # --cpu, or gloo without CUDA: before Megatron-LM asserts CUDA
    if plugin.cpu_mode:
        from ..compat import cpu

        cpu.enable(training=True)
    from megatron.training import training as mlm_training

    from . import post_validation

    plugin.validation = post_validation.install(mlm_training)  # only acts with --optimizer-post-validation
    _install_training(mlm_training, plugin)
    from . import balanced_data

    plugin.balanced_steps = balanced_data.install(mlm_training, _log0)  # keeps the train dataset it builds
    _install_validate_args(plugin)
    _install_stage_builder(plugin)  # core_v0.19.0 builds the model from its config container, not get_model
    _install_ddp_delay()
    _PLUGIN = plugin
    import atexit

    atexit.unregister(_say_unwritten_profile)  # once, however often a test resets the plugin
    atexit.register(_say_unwritten_profile)


def _say_unwritten_profile() -> None:
    """At exit, on rank 0: why --pipeline-profile-out was not written, if it was asked for and was
    not (the run ended before the profile window closed). At exit, because Megatron-LM ends a run
    either by returning from pretrain() or with sys.exit (--exit-interval, --exit-duration-in-mins,
    a signal), and finish() sees only the first."""
    import os

    runner = _PLUGIN._runner if _PLUGIN is not None else None
    note = runner.profile_not_written() if runner is not None else None
    if note and os.environ.get("RANK", "0") == "0":  # Megatron-LM's rank (its process group may be gone)
        print(note, flush=True)


def _install_training(mlm_training, plugin: Plugin) -> None:
    """Our runner and our model placement in Megatron-LM's train(), evaluate() and get_model."""
    original_fbf = mlm_training.get_forward_backward_func
    original_get_model = mlm_training.get_model

    def get_forward_backward_func(*a, **kw):
        # megatron-core 0.19: get_forward_backward_func(pp_size, vp_size, schedule_pg_collection)
        if plugin.spec is None:
            return original_fbf(*a, **kw)
        refuse_schedule_groups(*a, **kw)
        if plugin.spec.balance_data is not None:  # each replica its own packed microbatches and count
            from .balanced_data import wrap_runner

            return wrap_runner(plugin.runner(), plugin.balanced_steps)
        return plugin.runner()

    def get_model(model_provider_func, *a, **kw):
        spec = plugin.spec
        if spec is None:
            return original_get_model(model_provider_func, *a, **kw)
        from megatron.core import parallel_state as ps

        pp, rank = ps.get_pipeline_model_parallel_world_size(), ps.get_pipeline_model_parallel_rank()
        _place_stages(plugin, pp)
        return original_get_model(placed_provider(model_provider_func, spec, pp, rank, spec.chunks), *a, **kw)

    mlm_training.get_forward_backward_func = get_forward_backward_func
    mlm_training.get_model = get_model


def _place_stages(plugin: Plugin, pp: int) -> None:
    """Under V: layers numbered and stage questions answered by global stage from now on."""
    spec = plugin.spec
    if spec.placement == S.V:
        plugin.place_layers(pp, spec.placement, spec.chunks)
        _remap_stage_predicates(pp, spec.chunks, spec.placement)


# install() without extra_args_provider(): what a patch whose hunks went in one by one can leave
HALF_PATCHED = ("pretrain_gpt.py calls primus_megatron.megatron_lm.install() but its arguments lack our group "
                "(--pipeline-schedule): the patch is half-applied; restore pretrain_gpt.py and apply it with "
                "primus_megatron's patches/apply_patch.sh, which applies all of the checkout's patch or none")


def _install_validate_args(plugin: Plugin) -> None:
    """Our checks, `auto`'s choice and --pipeline-balance around Megatron-LM's validate_args.
    Megatron-LM core_v0.16.1 validates in initialize_megatron (its own import of the name),
    core_v0.19.0 in arguments.parse_and_validate_args: replace the name wherever it is bound."""
    import importlib

    homes = []
    for name in ("megatron.training.arguments", "megatron.training.initialize"):
        try:
            homes.append(importlib.import_module(name))
        except ImportError:
            continue
    original_validate = next(m.validate_args for m in homes if getattr(m, "validate_args", None) is not None)

    def validate_args(args, defaults={}):
        if not hasattr(args, "pipeline_schedule"):
            _refuse(HALF_PATCHED)  # install() ran but the script's parser never got our group
        _attention_backend_from_env(args)
        spec = _spec_before_validation(args, plugin.cpu_mode)
        if spec is not None:
            from ..compat.primus_engines import conflict

            _refuse(conflict())
        result = original_validate(args, defaults)
        from .args import checked

        problem, spec = checked(args, spec)  # with data_parallel_size known: the whole check
        _refuse(problem)
        plugin.use(spec)
        _say0(few_microbatches_warning(args, spec), "warning: ")
        return result

    for module in homes:
        if getattr(module, "validate_args", None) is original_validate:
            module.validate_args = validate_args


def _say0(text: Optional[str], prefix: str = "") -> None:
    """One line on rank 0 (Megatron-LM's RANK: no process group exists yet), if there is one."""
    import os

    if text and os.environ.get("RANK", "0") == "0":
        print(prefix + text, flush=True)


def _attention_backend_from_env(args) -> None:
    """--attention-backend left at auto while TransformerEngine's NVTE_*_ATTN variables ask for one
    backend (AMD's images: NVTE_FLASH_ATTN=0, NVTE_FUSED_ATTN=1): take that backend, or megatron-core
    asserts when the model is built (compat/attention_env.py)."""
    from ..compat.attention_env import AttentionEnvError, backend_for

    try:
        name = backend_for()
    except AttentionEnvError as exc:
        _refuse(str(exc))
        return
    backend = getattr(args, "attention_backend", None)
    if name is not None and getattr(backend, "name", None) == "auto" and name != "auto":
        args.attention_backend = type(backend)[name]


def _spec_before_validation(args, cpu_mode: bool) -> Optional[PipelineSpec]:
    """Before Megatron-LM validates: the options alone, the spec (with --pipeline-balance FILE
    or auto, chosen now: the model is built once), CPU mode's settings, the layer split, and the
    virtual pipeline size the schedule's chunks need (unless given or set by a layout)."""
    _refuse(_precheck(args))  # a bad name or chunk count: before anything reads them
    from .balanced_data import problem as balance_problem

    _refuse(balance_problem(args))  # before Megatron-LM's own checks of the --sft options
    spec = spec_of(args)
    if getattr(args, "pipeline_balance", None) is not None:
        spec = _balance_before_build(args, spec)  # the split (and with auto the schedule) from a saved profile
    elif spec is not None and spec.choose:
        spec = _choose_before_build(args, spec)
    if getattr(args, "optimizer_post_validation", False) and spec is None:
        _refuse("--optimizer-post-validation needs --pipeline-schedule (our executor validates the step "
                "during the next step's first forwards); add one, e.g. --pipeline-schedule zb-h1")
    if cpu_mode:  # first what the GPU run of these arguments would refuse, then the switch to CPU
        from .cpu_mode import say_cluster_refusals

        say_cluster_refusals(args, spec)
        _cpu_args(args)
    _refuse(_split_precheck(args, spec))  # before Megatron-LM's own assertions on the layer split
    if spec is not None and spec.chunks > 1 and args.num_virtual_stages_per_pipeline_rank is None \
            and args.num_layers_per_virtual_pipeline_stage is None \
            and getattr(args, "pipeline_model_parallel_layout", None) is None:  # a layout sets it
        args.num_virtual_stages_per_pipeline_rank = spec.chunks
    return spec


def _install_ddp_delay() -> None:
    """Megatron's DistributedDataParallel built around a chunk whose TransformerEngine layers
    placed_provider routed to our W ops (te_wgrad.enable) gets `delay_wgrad_compute=True`, so that
    it hooks those layers' grad-ready calls on the layer (run when the W op delivers) instead of
    on the parameter's accumulator (which TE's backward reaches in B).

    Megatron-LM cannot be asked for it: it copies --delay-wgrad-compute into both the DDP config
    and the TransformerConfig, which refuses it without MoE communication overlap (megatron-core
    transformer_config.py). Patched on the class, since Megatron-LM builds its DDP in several
    places (core_v0.16.1 get_model; core_v0.19.0 wrap_model_chunks_with_ddp and its model
    builders); the config given is not modified (a copy with the flag set). A chunk without
    routed layers is wrapped as given."""
    import dataclasses

    from megatron.core.distributed import distributed_data_parallel as ddp_module

    from ..runtime.te_wgrad import is_routed

    cls = ddp_module.DistributedDataParallel
    original = cls.__init__
    if getattr(original, "_primus_delay", False):
        return

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        names = ("config", "ddp_config", "module")
        given = dict(zip(names, args), **{k: kwargs[k] for k in names if k in kwargs})
        ddp_config, module = given.get("ddp_config"), given.get("module")
        if ddp_config is not None and module is not None and not ddp_config.delay_wgrad_compute \
                and any(is_routed(m) for m in module.modules()):
            ddp_config = dataclasses.replace(ddp_config, delay_wgrad_compute=True)
            if "ddp_config" in kwargs:
                kwargs["ddp_config"] = ddp_config
            else:
                args = (*args[:1], ddp_config, *args[2:])
        original(self, *args, **kwargs)

    __init__._primus_delay = True
    cls.__init__ = __init__


def finish() -> None:
    """Call after Megatron-LM's pretrain() has returned (not when it raised). In CPU mode,
    destroy the gloo process groups before the interpreter exits.

    Megatron-LM never destroys its process groups. When gloo's groups are left for the
    interpreter's exit, a run that finished now and then dies anyway: 'terminate called
    without an active exception', SIGABRT, while the interpreter collects garbage. A bare
    torchrun script with gloo subgroups shows this too; with the groups shut down first, it
    does not. This is only local work: no collective, nothing waits on
    another rank. After a failure it is skipped, because a worker thread may still be blocked
    on a dead peer, and torchrun stops the ranks then. GPU runs (NCCL) are left as
    Megatron-LM leaves them.
    """
    import torch.distributed as dist

    plugin = _PLUGIN
    if plugin is None:
        return
    plugin.stack.close()  # the layer placement entered for the run
    if not plugin.cpu_mode or not dist.is_available() or not dist.is_initialized():
        return
    try:
        from megatron.core import parallel_state
    except ImportError:
        parallel_state = None
    if parallel_state is not None:
        parallel_state.destroy_model_parallel()  # megatron's references to the subgroups
    dist.destroy_process_group()  # shuts every group down, the world group last


def _install_stage_builder(plugin: Plugin) -> None:
    """Megatron-LM core_v0.19.0's pretrain() builds the model chunks with its model builder
    (megatron.training.models: build_virtual_pipeline_stages calls the builder's
    build_model(pg_collection, pre_process=, post_process=, vp_stage=) per chunk), not through
    get_model and a model provider: place those chunks as placed_provider places a provider's.
    Absent in core_v0.16.1 (nothing to do there)."""
    try:
        from megatron.training.models import dist_utils
    except ImportError:
        return
    original = getattr(dist_utils, "build_virtual_pipeline_stages", None)
    if original is None or getattr(original, "_primus_placed", False):
        return

    def build_virtual_pipeline_stages(build_model_func, pg_collection, vp_size, *a, **kw):
        spec = plugin.spec
        if spec is None:
            return original(build_model_func, pg_collection, vp_size, *a, **kw)
        pp, rank = pg_collection.pp.size(), pg_collection.pp.rank()
        _place_stages(plugin, pp)
        placed = placed_provider(functools.partial(build_model_func, pg_collection), spec, pp, rank, spec.chunks)

        def build(pgs, pre_process=None, post_process=None, vp_stage=None):
            return placed(pre_process=pre_process, post_process=post_process, vp_stage=vp_stage)

        return original(build, pg_collection, vp_size, *a, **kw)

    build_virtual_pipeline_stages._primus_placed = True
    dist_utils.build_virtual_pipeline_stages = build_virtual_pipeline_stages


def _cpu_args(args) -> None:
    """CPU mode's arguments (megatron_lm/cpu_mode.py), said once; what it cannot run refused."""
    from . import cpu_mode

    _refuse(cpu_mode.problem(args))
    cpu_mode.apply(args)


def _microbatches(args, what: str) -> tuple[int, int]:
    """(pipeline size, microbatches per step) from Megatron-LM's arguments before its
    validate_args has derived the data-parallel size; refused in one sentence if unknown."""
    pp = args.pipeline_model_parallel_size
    tp, cp = args.tensor_model_parallel_size, getattr(args, "context_parallel_size", 1) or 1
    dp = max(1, args.world_size // (tp * pp * cp))
    mbs = args.micro_batch_size
    gbs = args.global_batch_size or (mbs or 1) * dp  # Megatron-LM's default
    if pp < 2:
        _refuse(f"{what} needs --pipeline-model-parallel-size >= 2, got {pp}")
    if not mbs or gbs % (mbs * dp):
        _refuse(f"{what} needs --global-batch-size divisible by --micro-batch-size x data-parallel size "
                f"({mbs} x {dp})")
    return pp, gbs // (mbs * dp)


def _balance_before_build(args, spec: Optional[PipelineSpec]) -> PipelineSpec:
    """--pipeline-balance FILE: the spec on the layer split (with --pipeline-schedule auto, the
    schedule too) chosen from a saved profile before Megatron-LM builds the model, which it
    does once (`auto` balancing, which measures first, is our script's); the split is written
    into Megatron-LM's arguments, which its get_model reads."""
    import os

    from ..schedules.balance import load_profile
    from .args import apply_balance

    if getattr(args, "mtp_num_layers", None):
        from ..options import BALANCE_WITH_MTP

        _refuse(BALANCE_WITH_MTP)  # before the balancer writes a layout without the MTP layers
    if args.pipeline_balance == "auto":
        _refuse("--pipeline-balance auto measures costs and then rebuilds the model, which Megatron-LM's loop does "
                "not allow: write a profile with --pipeline-profile-out FILE.json in one run and pass "
                "--pipeline-balance FILE.json in the next")
    if spec is None:
        _refuse("--pipeline-balance needs --pipeline-schedule (a registered name or auto)")
    pp, m = _microbatches(args, "--pipeline-balance")
    try:
        chosen, text = apply_balance(args, spec, load_profile(args.pipeline_balance), pp, m,
                                     source=args.pipeline_balance)
    except (ValueError, S.ScheduleError) as exc:
        _refuse(f"--pipeline-balance {args.pipeline_balance}: {exc}")
    if os.environ.get("RANK", "0") == "0":
        print(text, flush=True)
    return chosen


def _choose_before_build(args, spec: PipelineSpec) -> PipelineSpec:
    """`--pipeline-schedule auto` in Megatron-LM's loop: the model is built once,
    with the placement of the schedule chosen now, so the choice cannot wait for
    measured costs (examples/pretrain_gpt.py profiles first and may rebuild). The
    simulator ranks every registered schedule the layer split fits (even or
    uneven) under `--pipeline-costs` (default: equal F, B, W, no p2p cost) and
    `--pipeline-memory-limit`; the spec of the fastest, logged on rank 0."""
    import os

    from ..options import split_fits

    pp, m = _microbatches(args, "--pipeline-schedule auto")
    usable = [n for n in S.names() if split_fits(args, n)]  # the layer split (even or uneven) fits
    try:
        best, rows = S.auto.choose(pp, m, spec.costs or S.Costs(), spec.memory_limit,
                                   post_validation=spec.post_validation, candidates=usable)
    except S.ScheduleError as exc:
        _refuse(f"--pipeline-schedule auto: {exc}")
    if os.environ.get("RANK", "0") == "0":
        given = "--pipeline-costs " + args.pipeline_costs if args.pipeline_costs else "equal F, B, W costs"
        print(f"--pipeline-schedule auto, from {given} (Megatron-LM builds the model once, so costs are not measured "
              f"here):\n{S.auto.table(rows, best)}\nauto: chose {best}", flush=True)
    return spec.with_schedule(best)


def _precheck(args) -> Optional[str]:
    """check_schedule_args on the schedule group alone (no pipeline size, layers or batch yet)."""
    import argparse

    from .args import check_schedule_args

    group = {k: v for k, v in vars(args).items()
             if k.startswith("pipeline_") and k != "pipeline_model_parallel_size"}  # our group's options
    return check_schedule_args(argparse.Namespace(**group))


def _split_precheck(args, spec: Optional[PipelineSpec]) -> Optional[str]:
    """The layer split for the schedule (pp ranks x its chunks), in one sentence, or None."""
    if spec is None or spec.choose:
        return None
    from ..options import check_layer_split

    pp = getattr(args, "pipeline_model_parallel_size", None)
    if pp is None or pp < 2:
        return None  # check_schedule_args says what is wrong with the pipeline size
    return check_layer_split(args, pp, spec.chunks, f"--pipeline-schedule {spec.name}", w_ops=spec.splits_backward,
                             split=spec.split)


def _refuse_built(problem: str) -> None:
    """A layer of the built model that a schedule with W ops cannot split: found on the ranks that hold
    it (not necessarily rank 0), after process groups exist; each such rank says it in one line and
    exits 2, and torchrun stops the others."""
    _say_error(problem)
    raise SystemExit(2)


def _say_error(problem: str) -> None:
    """The one line a refusal prints, argparse's way: `<script>: error: <problem>` on stderr."""
    import os
    import sys

    print(f"{os.path.basename(sys.argv[0]) or 'megatron'}: error: {problem}", file=sys.stderr, flush=True)


def _refuse(problem: Optional[str]) -> None:
    """Megatron-LM validates arguments before creating process groups: a problem with the
    schedule options ends the run there, as one line on rank 0 and exit status 2."""
    if problem is None:
        return
    import os

    if os.environ.get("RANK", "0") == "0":
        _say_error(problem)
    elif os.environ.get("TORCHELASTIC_RUN_ID"):
        import time

        # torchrun's agent polls its workers every 0.1 s (--monitor-interval's default,
        # torch/distributed/run.py) and stops them all once one has failed: a rank exiting first
        # could take rank 0 down before it prints. So the other ranks wait for rank 0 (same
        # arguments, same check), whose exit makes torchrun stop them: the wait lasts as long as
        # rank 0 takes, bounded here in case rank 0 never gets there; no collective.
        time.sleep(REFUSE_GRACE_S)
    raise SystemExit(2)


REFUSE_GRACE_S = 30.0


def _remap_stage_predicates(pp: int, chunks: int, placement: str) -> None:
    """Per-chunk stage questions answered by global stage (see the module doc)."""
    import sys

    from megatron.core import parallel_state as ps

    if getattr(ps.is_pipeline_first_stage, "_primus_placement", None) == placement:
        return
    first, last = ps.is_pipeline_first_stage, ps.is_pipeline_last_stage
    n = pp * chunks

    def stage(vp_stage: int) -> int:
        return S.stage_of(placement, pp, ps.get_pipeline_model_parallel_rank(), vp_stage)

    def is_first(ignore_virtual: bool = True, vp_stage=None):
        if not ignore_virtual and vp_stage is not None:
            return stage(vp_stage) == 0
        return first(ignore_virtual=ignore_virtual, vp_stage=vp_stage)

    def is_last(ignore_virtual: bool = True, vp_stage=None):
        if not ignore_virtual and vp_stage is not None:
            return stage(vp_stage) == n - 1
        return last(ignore_virtual=ignore_virtual, vp_stage=vp_stage)

    is_first._primus_placement = is_last._primus_placement = placement
    ps.is_pipeline_first_stage, ps.is_pipeline_last_stage = is_first, is_last

    import importlib

    def holds_both_ends() -> bool:
        return ps.get_pipeline_model_parallel_rank() == S.owner_of(placement, pp, n - 1)[0] == S.owner_of(placement, pp, 0)[0]

    def wrap(original_batch):
        @functools.wraps(original_batch)
        def get_batch_on_this_tp_rank(*a, mtp_on_this_rank: bool = False, **kw):
            # The rank holding stage 0 and the loss stage needs every tensor on all its
            # tensor-parallel ranks; megatron's first-or-last broadcast keeps only one side
            # (core_v0.19.0 decides by its rank-wide first/last flags: the first wins).
            return original_batch(*a, mtp_on_this_rank=mtp_on_this_rank or holds_both_ends(), **kw)

        return get_batch_on_this_tp_rank

    # core_v0.16.1: megatron.training.utils.get_batch_on_this_tp_rank(data_iterator, mtp_on_this_rank);
    # core_v0.19.0: megatron.core.utils.get_batch_on_this_tp_rank(batch, ..., mtp_on_this_rank, ...)
    main = sys.modules.get("__main__")
    for home in ("megatron.training.utils", "megatron.core.utils"):
        module = importlib.import_module(home)
        original_batch = getattr(module, "get_batch_on_this_tp_rank", None)
        if original_batch is None:
            continue
        wrapped = wrap(original_batch)
        module.get_batch_on_this_tp_rank = wrapped
        if getattr(main, "get_batch_on_this_tp_rank", None) is original_batch:
            main.get_batch_on_this_tp_rank = wrapped  # pretrain_gpt imported it by name
