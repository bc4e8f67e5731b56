"""`pretrain_gpt.py`'s training, once launch.py has checked the arguments: process groups ->
model, optimizer, data -> training iterations with Megatron-LM-style logs, evaluation through
the forward-only path, checkpoints and the executed-schedule picture."""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.distributed as dist

from ..options import PipelineSpec, few_microbatches_warning
from ..runtime.collectives import collective_device
from .forward_step import NonFiniteLoss, TrainingSteps
from .setup import cpu_time_sharing, initialize, log0, model_parallel_groups, wrapped
from . import cpu_replay
from .timeline import BUBBLE_MEANING, gather_timeline, write_timeline


@dataclass
class Probe:
    """How tests and benchmarks look inside a run (the command line never sets one).

    `on_iteration(iteration, last_step, t_step, t_stepped)`: after each optimizer step, with the
    runner's StepResult and the step's perf_counter start and end. `keep_params`: the result
    carries this rank's parameters by global name and the last step's executed op records."""

    on_iteration: Optional[Callable] = None
    keep_params: bool = False


def forward_backward_func(spec: Optional[PipelineSpec], validation=None):
    """Ours for a spec (`validation`: the post-validated optimizer's `take_validation`), else
    megatron-core's own."""
    if spec is None:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        return get_forward_backward_func()
    from ..runtime import get_forward_backward_func

    return get_forward_backward_func(spec, log=log0, validation=validation)


def configure_hooks(args, model, optimizer) -> None:
    """The config hooks Megatron-LM installs for its schedules."""
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.utils import get_model_config

    config = get_model_config(model[0])
    config.grad_scale_func = optimizer.scale_loss if optimizer is not None else None
    no_sync = [m.no_sync for m in model]
    config.no_sync_func = no_sync if len(model) > 1 else no_sync[0]
    if args.overlap_grad_reduce:
        sync = [m.start_grad_sync for m in model]
        config.grad_sync_func = sync if len(model) > 1 else sync[0]
    config.finalize_model_grads_func = finalize_model_grads


def _format_log(iteration: int, args, elapsed_ms: float, lr: float, losses: dict, loss_scale: float,
                grad_norm: Optional[float], skipped: int, bubble: Optional[float], extra: str) -> str:
    """One iteration in Megatron-LM's `name: value |` fields, short enough for a terminal (about 100
    columns): the loss scale and the skipped steps only where they can move (fp16, a skipped step)."""
    width = len(str(args.train_iters))
    parts = [f" iteration {iteration:{width}d}/{args.train_iters}", f"{elapsed_ms:.0f} ms", f"lr: {lr:.2E}"]
    parts += [f"{k}: {v:.6E}" for k, v in losses.items()]
    parts.append(f"grad norm: {grad_norm:.3f}" if grad_norm is not None else "grad norm: n/a")
    if args.fp16 or skipped:
        parts += [f"loss scale: {loss_scale:.1f}", f"skipped iterations: {skipped}"]
    if bubble is not None:
        parts.append(f"bubble: {100 * bubble:.1f}%")
    if extra:
        parts.append(extra)
    return " | ".join(parts)


def train(args: argparse.Namespace, spec: Optional[PipelineSpec], *, probe: Optional[Probe] = None,
          time_sharing: Optional[tuple[int, int]] = None) -> dict:
    """Train with checked arguments and their spec (`arguments.parse_run`); the run's losses,
    evaluations, grad norms and what it chose. `time_sharing`: `setup.initialize`'s answer."""
    if args.cpu and time_sharing is None:
        time_sharing = cpu_time_sharing(int(os.environ.get("LOCAL_WORLD_SIZE") or dist.get_world_size()))
    model_parallel_groups(args)  # no-op after setup.initialize; a caller's own groups must match the arguments
    steps = TrainingSteps(args, spec)
    spec, model, train_data, valid_data = _build(args, spec, steps)
    run = _Run(args, spec, model, steps, probe or Probe(), time_sharing)
    run.start(train_data, valid_data)
    for iteration in range(run.start_iter, args.train_iters):
        if run.iterate(iteration):
            break
    return run.finish()


def _build(args: argparse.Namespace, spec: Optional[PipelineSpec], steps: TrainingSteps):
    """Data and the model; `auto` and `--pipeline-balance auto` profile first and choose the
    spec (rebuilding the model if they choose another placement or split). Returns
    (spec, model, train_data, valid_data)."""
    from megatron.core import parallel_state as ps

    from ..runtime.placement import init_by_global_name_
    from . import data as D
    from . import determinism
    from .model import build_model, transformer_config
    from .tokenizer import build_tokenizer

    tokenizer = build_tokenizer(args)
    vocab = D.padded_vocab(args, tokenizer)
    train_data, valid_data, _ = D.build_datasets(args, tokenizer)

    def make_model(spec: Optional[PipelineSpec]) -> list:  # the same initial weights whatever the schedule
        return build_model(args, spec, transformer_config(args, spec), vocab, init=lambda chunks: init_by_global_name_(
            chunks, seed=args.seed, std=args.init_method_std, num_layers=args.num_layers,
            tp_rank=ps.get_tensor_model_parallel_rank(), tp_size=args.tensor_model_parallel_size))

    if spec is not None and spec.note:  # --pipeline-balance FILE: chosen when parsed
        log0(spec.note)
    configure = lambda m: configure_hooks(args, m, None)  # noqa: E731  (profiling passes: no optimizer)
    if spec is not None and spec.balance == "auto":
        from .auto import balance_split

        spec, model = balance_split(args, spec, make_model(spec), make_model, train_data, configure, steps)
    elif spec is not None and spec.choose:
        from .auto import choose_schedule

        spec, model = choose_schedule(args, spec, make_model(spec), make_model, train_data, configure, steps)
    else:
        model = make_model(spec)
    steps.follow(spec)
    determinism.install(model, args.seed, lambda: steps.iteration)  # dropout masks independent of the schedule
    return spec, model, train_data, valid_data


class _Run:
    """The training iterations of one run: the step, post-validation's delayed outcomes,
    logging, evaluation, checkpoints, the timeline picture."""

    def __init__(self, args, spec: Optional[PipelineSpec], model: list, steps: TrainingSteps, probe: Probe,
                 time_sharing) -> None:
        self.args, self.spec, self.model, self.steps, self.probe = args, spec, model, steps, probe
        self.time_sharing = time_sharing
        self.post_validation = args.optimizer_post_validation
        self.history, self.evals, self.norms = [], [], []
        self.skipped_total = 0
        self.waiting: list = []  # iterations whose optimizer outcome is not known yet (post-validation)
        self.timeline_written = None
        self.done = 0

    def start(self, train_data, valid_data) -> None:
        """Optimizer, checkpoint, data iterators, the runner and its planned schedule."""
        from megatron.core import parallel_state as ps

        from . import data as D
        from .model import build_optimizer

        args, model = self.args, self.model
        optimizer, self.scheduler = build_optimizer(args, model)
        configure_hooks(args, model, optimizer)
        self.start_iter, consumed = 0, 0
        if args.load:
            from .checkpoint import load

            self.start_iter, consumed = load(args, self.spec, model, optimizer, self.scheduler)
        self.done = self.start_iter
        dp_rank, dp_size = ps.get_data_parallel_rank(), ps.get_data_parallel_world_size()
        self.train_iter = D.batch_iterator(train_data, args.micro_batch_size, dp_rank, dp_size, start_sample=consumed)
        self.balanced = None
        self.valid_iter = D.batch_iterator(valid_data, args.micro_batch_size, dp_rank, dp_size) \
            if valid_data is not None else None
        # Only ranks that feed the model hold data; all ranks must agree whether to evaluate.
        has_valid = torch.tensor([int(valid_data is not None)], device=collective_device())
        dist.all_reduce(has_valid, op=dist.ReduceOp.MAX)
        self.has_valid = bool(has_valid.item())
        if self.post_validation:
            from ..optim import PostValidationOptimizer

            optimizer = PostValidationOptimizer(optimizer, model, timeout_s=float(args.pipeline_p2p_timeout or 600))
        self.optimizer = optimizer
        self.fbf = forward_backward_func(self.spec, optimizer.take_validation if self.post_validation else None)
        if args.pipeline_balance_data is not None:  # packed long-tail batches, a count per replica and step
            from .balanced_data import BalancedBatches, schedule_order

            order = schedule_order(self.fbf, args.pipeline_model_parallel_size) if self.spec is not None else None
            self.balanced = BalancedBatches(train_data, args, dp_rank, dp_size, start_sample=consumed, order=order)
        if self.spec is not None:
            self._log_plan()
        warning = few_microbatches_warning(args, self.spec) if self.balanced is None else None  # packed: counts vary
        if warning:
            log0(wrapped(f"warning: {warning}"))

    def _log_plan(self) -> None:
        """The plan before any op ran, and what the iteration lines' bubble is."""
        from .. import schedules as S

        args, spec = self.args, self.spec
        plan = self.fbf.plan(args.pipeline_model_parallel_size, args.num_microbatches)[0]
        sim = S.simulate(plan)
        costs = "--pipeline-costs" if spec.costs is not None else "equal F, B and W costs"
        idle = sim.bubble_async if spec.post_validation else sim.bubble_sync
        log0(f"pipeline schedule {plan.name}: pp={plan.pp}, {plan.microbatches} microbatches, {plan.chunks_per_rank} "
             f"chunk(s) per rank ({plan.placement} placement)")
        log0(wrapped(f"  simulated with {costs}: bubble {100 * idle:.1f}%, peak memory {max(sim.peak_memory):g} "
                     f"microbatches' activations"))
        if self.time_sharing:
            ranks, cores = self.time_sharing
            measured = (f"in the order each iteration ran, each op taking the CPU time it used ({ranks} ranks "
                        f"time-share {cores} core{'s' * (cores != 1)} here: on the wall clock the idle time would "
                        f"mostly be the operating system switching between them)")
        else:
            measured = "as each iteration ran (measured)"
        log0(wrapped(f"bubble in the iteration lines: the share of the ranks' time idle, {measured}"))

    def _step(self, iteration: int):
        """One forward-backward step and the optimizer step; (loss dicts, the step's outcome)."""
        args, model = self.args, self.model
        if not self.post_validation:
            for chunk in model:
                chunk.zero_grad_buffer()
        self.optimizer.zero_grad()  # post-validation: after the pending step is validated
        count, data = args.num_microbatches, self.train_iter
        if self.balanced is not None:
            count, data = self.balanced.step(iteration)
        store = self.fbf(forward_step_func=self.steps.forward_step, data_iterator=data,
                         model=model if len(model) > 1 else model[0], num_microbatches=count,
                         seq_length=args.seq_length, micro_batch_size=args.micro_batch_size,
                         decoder_seq_length=args.seq_length, forward_only=False)
        if self.post_validation and self.waiting:
            self._settle(self.optimizer.last_result)  # validated during this step's first forwards
        if args.inject_nonfinite_grad and iteration + 1 == args.inject_nonfinite_grad[0] \
                and self._holds_stage(args.inject_nonfinite_grad[1]):
            from ..optim import inject_nonfinite_gradient

            inject_nonfinite_gradient(model)
        t_step = time.perf_counter()
        result = self.optimizer.step()
        if self.probe.on_iteration is not None:
            self.probe.on_iteration(iteration, getattr(self.fbf, "last_step", None), t_step, time.perf_counter())
        return store, result

    def iterate(self, iteration: int) -> bool:
        """Iteration `iteration` (0-based); True when --exit-interval stops the run."""
        args = self.args
        self.steps.iteration = iteration
        t0 = time.perf_counter()
        store, result = self._step(iteration)
        # post-validation: reduced while the next step runs, checked and logged when it is settled
        pending = self.steps.post_losses(store)
        done = self.done = iteration + 1
        last = done == args.train_iters
        timeline = None
        if (done % args.log_interval == 0 or last) and self.spec is not None:
            timeline = gather_timeline(self.fbf)
        self.waiting.append((done, pending, time.perf_counter() - t0, timeline))
        if not self.post_validation:
            self._settle(result)
        if last and args.timeline and timeline and dist.get_rank() == 0:
            self.timeline_written = write_timeline(
                args.timeline, timeline, f"{self.spec.name}, pp={args.pipeline_model_parallel_size}, "
                f"{args.num_microbatches} microbatches, iteration {done}",
                plan=self.fbf.plan(args.pipeline_model_parallel_size, args.num_microbatches)[0],
                time_sharing=self.time_sharing)
        return self._after(done, last)

    def _after(self, done: int, last: bool) -> bool:
        """Evaluation, checkpoint, --exit-interval after iteration `done`; True to stop."""
        args = self.args
        evaluate_now = self.has_valid and args.eval_interval and (done % args.eval_interval == 0 or last)
        save_now = args.save and args.save_interval and done % args.save_interval == 0
        stop = bool(args.exit_interval and done % args.exit_interval == 0)
        if self.post_validation and (evaluate_now or save_now or stop or last):
            self._settle(self.optimizer.finish())  # these read the parameters: settle the step first
        if evaluate_now:
            self.evals.append(evaluate(args, self.fbf, self.model, self.valid_iter, done, self.steps))
        if save_now:
            self._save()
        return stop

    def _save(self) -> None:
        from .checkpoint import save

        optimizer = self.optimizer.optimizer if self.post_validation else self.optimizer
        save(self.args, self.spec, self.model, optimizer, self.scheduler, self.done,
             self.done * self.args.global_batch_size)

    def _settle(self, result) -> None:
        """The optimizer outcome of the oldest waiting iteration is known: check its
        losses (reduced meanwhile), schedule, log."""
        args = self.args
        done, pending, elapsed, timeline = self.waiting.pop(0)
        losses = pending.wait()
        self.steps.check_loss(losses, done, pending.flags)  # NaN/inf loss: stop, naming the iteration and stage
        self.history.append(losses.get("lm loss", float("nan")))
        ok, grad_norm, _ = result
        if ok:
            self.scheduler.step(increment=args.global_batch_size)
        else:
            self.skipped_total += 1
        self.norms.append(grad_norm)
        if done % args.log_interval == 0 or done == args.train_iters:
            # the iteration as it ran: where ranks time-share cores, replayed from each op's CPU time (the
            # picture's panel of that name: the same figure for the last iteration)
            bubble = cpu_replay.bubble(cpu_replay.as_it_ran(timeline, self.time_sharing)[0]) if timeline else None
            extra = ""
            if self.balanced is not None and done - 1 in self.balanced.summaries:  # packed: the tokens trained
                counts, trained = self.balanced.summaries[done - 1]
                extra = (f"tokens/s: {trained / elapsed:.0f} | samples/s: {args.global_batch_size / elapsed:.1f} | "
                         f"microbatches per replica: {'/'.join(map(str, counts))}")
            log0(_format_log(done, args, elapsed * 1e3, self.optimizer.param_groups[0]["lr"], losses,
                             self.optimizer.get_loss_scale().item(), grad_norm, self.skipped_total, bubble, extra))

    def _holds_stage(self, stage: int) -> bool:
        from megatron.core import parallel_state as ps

        rank = ps.get_pipeline_model_parallel_rank()
        if self.spec is None:
            return rank == stage
        return self.spec.stage_rank(self.args.pipeline_model_parallel_size, stage) == rank

    def finish(self) -> dict:
        """Settle, save, report; the run's result."""
        args, optimizer = self.args, self.optimizer
        if self.post_validation and self.waiting:
            self._settle(optimizer.finish())
        if args.save and (not args.save_interval or self.done % args.save_interval):
            self._save()
        note = self.fbf.profile_not_written() if self.spec is not None else None
        if note:
            log0(note)  # the run ended before the profile window closed
        if self.post_validation:
            log0(f"post-validation: {optimizer.stats['steps']} steps, {optimizer.stats['optimistic']} taken "
                 f"optimistically, {optimizer.stats['rollbacks']} rolled back, {optimizer.stats['redone']} redone")
        if self.timeline_written:
            drawn = self.timeline_written
            log0(f"schedule of iteration {self.done}, one line per panel of its picture:")
            for line in drawn.panels:
                log0(wrapped(f"  {line}"))
            log0(wrapped(f"{BUBBLE_MEANING}; in the picture, one row per pipeline rank, boxes are ops (F forward, "
                         f"B input gradient, W weight gradient), the number in a box its microbatch, hatched boxes "
                         f"the rank's second chunk, white space idle time"))
            log0(wrapped(f"picture: {drawn.picture}"))
            log0(wrapped(f"Chrome trace: {drawn.trace} (chrome://tracing or ui.perfetto.dev)"))
        return self._result()

    def _result(self) -> dict:
        from ..schedules.balance import flags

        keep = self.probe.keep_params
        last_step = getattr(self.fbf, "last_step", None)
        split = self.spec.layer_split(self.args) if self.spec is not None else None
        from ..schedules.layer_split import LayerSplit

        return {"losses": self.history, "eval": self.evals, "start_iteration": self.start_iter,
                "grad_norms": self.norms, "layer_split": flags(split or LayerSplit.from_args(self.args)),
                "loss_scale": float(self.optimizer.get_loss_scale().item()), "skipped": self.skipped_total,
                "schedule": self.spec.name if self.spec is not None else None,
                "planned_costs": self.spec.costs if self.spec is not None else None,
                "params": _param_digest(self.model) if keep else None,
                "post_validation": dict(self.optimizer.stats) if self.post_validation else None,
                "timeline": [(r.op.kind, r.op.mb, r.op.chunk, r.start, r.end) for r in last_step.timeline]
                if keep and last_step else None}


def _param_digest(model) -> dict:
    """{global name: parameter} of this rank (tests compare runs bitwise)."""
    from ..runtime.placement import named_global_parameters

    out = {}
    for chunk in model:
        for name, p in named_global_parameters(chunk):
            out[name] = p.detach().float().clone()
    return out


def evaluate(args, fbf, model, it, iteration: int, steps: TrainingSteps) -> Optional[float]:
    """Forward-only passes over the next --eval-iters batches of the validation split
    (the iterator continues across evaluations, as in Megatron-LM)."""
    for chunk in model:
        chunk.eval()
    totals = []
    with torch.no_grad():
        for _ in range(args.eval_iters):
            store = fbf(forward_step_func=steps.forward_step, data_iterator=it,
                        model=model if len(model) > 1 else model[0], num_microbatches=args.num_microbatches,
                        seq_length=args.seq_length, micro_batch_size=args.micro_batch_size,
                        decoder_seq_length=args.seq_length, forward_only=True)
            totals.append(steps.reduce_losses(store).get("lm loss", float("nan")))
    for chunk in model:
        chunk.train()
    loss = sum(totals) / len(totals)
    log0("-" * 100)
    log0(f" validation loss at iteration {iteration} | lm loss value: {loss:.6E} | lm loss PPL: "
         f"{math.exp(min(loss, 20)):.6E} |")
    log0("-" * 100)
    return loss


def run(args: argparse.Namespace, spec: Optional[PipelineSpec]) -> int:
    """Train with checked arguments (launch.main parses them before torch is imported); the exit status."""
    time_sharing = initialize(args)
    try:
        train(args, spec, time_sharing=time_sharing)
    except RuntimeError as exc:  # a diagnosis of ours (p2p timeout, schedule mismatch, NaN loss, checkpoint): no traceback
        if not type(exc).__module__.startswith("primus_megatron.") or os.environ.get("PRIMUS_DEBUG", "") not in ("", "0"):
            raise
        if not isinstance(exc, NonFiniteLoss) or dist.get_rank() == 0:  # every rank's own diagnosis; the NaN once
            print(f"pretrain_gpt.py: error (rank {dist.get_rank()}): {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0
