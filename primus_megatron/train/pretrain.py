"""`pretrain_gpt.py`'s training, once launch.py has checked the arguments: process groups ->
model, optimizer, data -> training iterations with Megatron-LM-style logs, evaluation through
the forward-only path, checkpoints and the executed-schedule picture."""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Optional

import torch
import torch.distributed as dist

from ..runtime.collectives import collective_device
from . import cpu_replay
from .loop import (NonFiniteLoss, check_loss, forward_step, gather_timeline, initialize, log0, measured_bubble,
                   post_losses, reduce_losses, write_timeline)


def forward_backward_func(args):
    """Ours for --pipeline-schedule, else megatron-core's own."""
    if args.pipeline_schedule is None:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        return get_forward_backward_func()
    from .. import schedules as S
    from ..megatron_lm.args import parse_costs
    from ..runtime import get_forward_backward_func

    costs = getattr(args, "pipeline_costs_measured", None)
    if costs is None and args.pipeline_costs:
        costs = parse_costs(args.pipeline_costs)
    # A cost-driven schedule given no costs measures them over the first steps and re-plans.
    measure = S.info(args.pipeline_schedule).uses_costs and costs is None and args.pipeline_profile_steps > 0
    profile = measure or args.pipeline_profile_out is not None
    return get_forward_backward_func(
        args.pipeline_schedule, chunks=args.pipeline_chunks if args.pipeline_chunks_resolved > 1 else None,
        memory_limit=args.pipeline_memory_limit, costs=costs, p2p_timeout_s=args.pipeline_p2p_timeout,
        profile_steps=(1, 1 + args.pipeline_profile_steps) if profile else None, replan=measure, log=log0,
        profile_out=args.pipeline_profile_out, post_validation=args.optimizer_post_validation,
        offload=args.pipeline_offload, offload_bandwidth=args.pipeline_offload_bandwidth)


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


def _format_log(iteration, args, elapsed_ms, lr, losses, loss_scale, grad_norm, skipped, tokens_per_s,
                bubble, extra: str) -> str:
    parts = [f" iteration {iteration:8d}/{args.train_iters:8d}",
             f"consumed samples: {iteration * args.global_batch_size:12d}",
             f"elapsed time per iteration (ms): {elapsed_ms:.1f}",
             f"learning rate: {lr:.6E}",
             f"global batch size: {args.global_batch_size:5d}"]
    parts += [f"{k}: {v:.6E}" for k, v in losses.items()]
    parts += [f"loss scale: {loss_scale:.1f}",
              f"grad norm: {grad_norm:.3f}" if grad_norm is not None else "grad norm: n/a",
              f"number of skipped iterations: {skipped:3d}",
              f"tokens/s: {tokens_per_s:.0f}"]
    if bubble is not None:
        parts.append(f"bubble (measured{', wall clock' if getattr(args, 'time_sharing', None) else ''}): {bubble:.3f}")
    if extra:
        parts.append(extra)
    return " | ".join(parts) + " |"


def train(args) -> dict:
    from megatron.core import parallel_state as ps

    from ..runtime.placement import init_by_global_name_
    from . import data as D
    from .model import build_model, build_optimizer, transformer_config
    from .tokenizer import build_tokenizer

    if args.cpu and not hasattr(args, "time_sharing"):  # (initialize() reads it before pinning ranks)
        from .loop import cpu_time_sharing

        args.time_sharing = cpu_time_sharing(int(os.environ.get("LOCAL_WORLD_SIZE") or dist.get_world_size()))
    tokenizer = build_tokenizer(args)
    vocab = D.padded_vocab(args, tokenizer)
    train_data, valid_data, _ = D.build_datasets(args, tokenizer)

    def make_model() -> list:  # the same initial weights whatever the schedule
        return build_model(args, transformer_config(args), vocab, init=lambda chunks: init_by_global_name_(
            chunks, seed=args.seed, std=args.init_method_std, num_layers=args.num_layers,
            tp_rank=ps.get_tensor_model_parallel_rank(), tp_size=args.tensor_model_parallel_size))

    from .. import schedules as S

    if getattr(args, "pipeline_balance_log", None):  # --pipeline-balance FILE: chosen when parsed
        log0(args.pipeline_balance_log)
    configure = lambda m: configure_hooks(args, m, None)  # noqa: E731  (profiling passes: no optimizer)
    if args.pipeline_balance == "auto":
        from .auto import PROVISIONAL, balance_split

        choose_too = args.pipeline_schedule == "auto"
        if choose_too:
            args.pipeline_schedule = PROVISIONAL
            args.pipeline_chunks_resolved = S.info(PROVISIONAL).chunks
        model = balance_split(args, make_model(), make_model, train_data, configure, choose_schedule_too=choose_too)
    elif args.pipeline_schedule == "auto":
        from .auto import PROVISIONAL, choose_schedule

        args.pipeline_schedule = PROVISIONAL
        model = choose_schedule(args, make_model(), make_model, train_data, configure)
    else:
        model = make_model()
    from . import determinism

    determinism.install(model, args.seed)  # dropout masks independent of the schedule
    optimizer, scheduler = build_optimizer(args, model)
    configure_hooks(args, model, optimizer)
    start_iter, consumed = 0, 0
    if args.load:
        from .checkpoint import load

        start_iter, consumed = load(args, model, optimizer, scheduler)
    dp_rank, dp_size = ps.get_data_parallel_rank(), ps.get_data_parallel_world_size()
    train_iter = D.batch_iterator(train_data, args.micro_batch_size, dp_rank, dp_size, start_sample=consumed)
    valid_iter = D.batch_iterator(valid_data, args.micro_batch_size, dp_rank, dp_size) if valid_data is not None else None
    # Only ranks that feed the model hold data; all ranks must agree whether to evaluate.
    has_valid = torch.tensor([int(valid_data is not None)], device=collective_device())
    dist.all_reduce(has_valid, op=dist.ReduceOp.MAX)
    fbf = forward_backward_func(args)
    planned = None
    if args.pipeline_schedule is not None:
        from .. import schedules as S

        plan = fbf.plan(args.pipeline_model_parallel_size, args.num_microbatches)[0]
        sim = S.simulate(plan)
        planned = (sim.bubble_sync, max(sim.peak_memory))
        log0(f"pipeline schedule {plan.name}: pp={plan.pp}, {plan.microbatches} microbatches, "
             f"{plan.chunks_per_rank} chunk(s)/rank ({plan.placement} placement); simulated bubble "
             f"{sim.bubble_sync:.3f} (sync) / {sim.bubble_async:.3f} (async), peak activation "
             f"{max(sim.peak_memory):g} microbatch(es) of a rank's layers")
    history, evals, norms = [], [], []
    skipped_total = 0
    post_validation = args.optimizer_post_validation
    if post_validation:
        from ..optim import PostValidationOptimizer

        optimizer = PostValidationOptimizer(optimizer, model, timeout_s=float(args.pipeline_p2p_timeout or 600))
    waiting: list = []  # iterations whose optimizer outcome is not known yet (post-validation)

    def settle(result) -> None:
        """The optimizer outcome of the oldest waiting iteration is known: check its
        losses (reduced meanwhile), schedule, log."""
        nonlocal skipped_total
        done, pending, elapsed, timeline = waiting.pop(0)
        losses = pending.wait()
        check_loss(args, losses, done, pending.flags)  # NaN/inf loss: stop, naming the iteration and stage
        history.append(losses.get("lm loss", float("nan")))
        ok, grad_norm, _ = result
        if ok:
            scheduler.step(increment=args.global_batch_size)
        else:
            skipped_total += 1
        norms.append(grad_norm)
        if done % args.log_interval == 0 or done == args.train_iters:
            bubble = measured_bubble(timeline) if timeline else None
            # ranks time-sharing cores: the replay and its plan from CPU times replace the plan's bubble
            # under the profiled wall-clock costs, which the time sharing distorts
            bubbles = cpu_replay.log_field(args, timeline) or (f"planned bubble: {planned[0]:.3f}" if planned else "")
            extra = " | ".join(filter(None, [bubbles, f"planned peak act: {planned[1]:g} mb" if planned else ""]))
            tokens = args.global_batch_size * args.seq_length / elapsed
            log0(_format_log(done, args, elapsed * 1e3, optimizer.param_groups[0]["lr"], losses,
                             optimizer.get_loss_scale().item(), grad_norm, skipped_total, tokens, bubble, extra))

    done = start_iter
    for iteration in range(start_iter, args.train_iters):
        determinism.set_iteration(iteration)
        t0 = time.perf_counter()
        if not post_validation:
            for chunk in model:
                chunk.zero_grad_buffer()
        optimizer.zero_grad()  # post-validation: after the pending step is validated
        store = fbf(forward_step_func=forward_step, data_iterator=train_iter,
                    model=model if len(model) > 1 else model[0], num_microbatches=args.num_microbatches,
                    seq_length=args.seq_length, micro_batch_size=args.micro_batch_size,
                    decoder_seq_length=args.seq_length, forward_only=False)
        if post_validation and waiting:
            settle(optimizer.last_result)  # validated during this step's first forwards
        if args.inject_nonfinite_grad and iteration + 1 == args.inject_nonfinite_grad[0] \
                and _holds_stage(args, args.inject_nonfinite_grad[1]):
            from ..optim import inject_nonfinite_gradient

            inject_nonfinite_gradient(model)
        t_step = time.perf_counter()
        result = optimizer.step()
        t_stepped = time.perf_counter()
        if getattr(args, "iteration_hook", None):  # benchmarks: per-iteration timings
            args.iteration_hook(iteration, getattr(fbf, "last_step", None), t_step, t_stepped)
        # post-validation: reduced while the next step runs, checked and logged when it is settled
        pending = post_losses(args, store)
        done = iteration + 1
        last = done == args.train_iters
        timeline = None
        if (done % args.log_interval == 0 or last) and args.pipeline_schedule is not None:
            timeline = gather_timeline(fbf)
        waiting.append((done, pending, time.perf_counter() - t0, timeline))
        if not post_validation:
            settle(result)
        if last and args.timeline and timeline and dist.get_rank() == 0:
            write_timeline(args, timeline, f"{args.pipeline_schedule}, pp={args.pipeline_model_parallel_size}, "
                           f"{args.num_microbatches} microbatches, iteration {done}",
                           plan=fbf.plan(args.pipeline_model_parallel_size, args.num_microbatches)[0])
        evaluate_now = has_valid.item() and args.eval_interval and (done % args.eval_interval == 0 or last)
        save_now = args.save and args.save_interval and done % args.save_interval == 0
        stop = args.exit_interval and done % args.exit_interval == 0
        if post_validation and (evaluate_now or save_now or stop or last):
            settle(optimizer.finish())  # these read the parameters: settle the step first
        if evaluate_now:
            evals.append(evaluate(args, fbf, model, valid_iter, done))
        if save_now:
            from .checkpoint import save

            save(args, model, optimizer.optimizer if post_validation else optimizer, scheduler, done,
                 done * args.global_batch_size)
        if stop:
            break
    if post_validation and waiting:
        settle(optimizer.finish())
    if args.save and (not args.save_interval or done % args.save_interval):
        from .checkpoint import save

        save(args, model, optimizer.optimizer if post_validation else optimizer, scheduler, done,
             done * args.global_batch_size)
    if post_validation:
        log0(f"post-validation: {optimizer.stats['steps']} steps, {optimizer.stats['optimistic']} taken "
             f"optimistically, {optimizer.stats['rollbacks']} rolled back, {optimizer.stats['redone']} redone")
    if getattr(args, "timeline_written", None):
        picture, trace = args.timeline_written
        log0(f"schedule of iteration {done}: {picture} (picture) and {trace} (Chrome trace: open it in "
             f"chrome://tracing or ui.perfetto.dev)")
        log0("reading it: one row per pipeline rank, boxes are ops (F forward, B input gradient, W weight "
             "gradient; the number is the microbatch, hatched boxes the rank's second chunk), white space is idle "
             f"time; {cpu_replay.panels(args)}")
    from ..schedules.balance import flags
    from ..schedules.layer_split import LayerSplit

    split = LayerSplit.from_args(args)
    return {"losses": history, "eval": evals, "start_iteration": start_iter, "grad_norms": norms,
            "layer_split": flags(split),
            "loss_scale": float(optimizer.get_loss_scale().item()), "skipped": skipped_total,
            "params": _param_digest(model) if getattr(args, "return_params", False) else None,
            "post_validation": dict(optimizer.stats) if post_validation else None,
            "timeline": [(r.op.kind, r.op.mb, r.op.chunk, r.start, r.end) for r in fbf.last_step.timeline]
            if getattr(args, "return_params", False) and getattr(fbf, "last_step", None) else None}


def _holds_stage(args, stage: int) -> bool:
    from megatron.core import parallel_state as ps

    from .. import schedules as S

    if args.pipeline_schedule is None:
        return ps.get_pipeline_model_parallel_rank() == stage
    entry = S.info(args.pipeline_schedule)
    return S.owner_of(entry.placement, args.pipeline_model_parallel_size, stage)[0] == \
        ps.get_pipeline_model_parallel_rank()


def _param_digest(model) -> dict:
    """{global name: parameter} of this rank (tests compare runs bitwise)."""
    from ..runtime.placement import named_global_parameters

    out = {}
    for chunk in model:
        for name, p in named_global_parameters(chunk):
            out[name] = p.detach().float().clone()
    return out


def evaluate(args, fbf, model, it, iteration: int) -> Optional[float]:
    """Forward-only passes over the next --eval-iters batches of the validation split
    (the iterator continues across evaluations, as in Megatron-LM)."""
    from .loop import forward_step as fs

    for chunk in model:
        chunk.eval()
    totals = []
    with torch.no_grad():
        for _ in range(args.eval_iters):
            store = fbf(forward_step_func=fs, data_iterator=it, model=model if len(model) > 1 else model[0],
                        num_microbatches=args.num_microbatches, seq_length=args.seq_length,
                        micro_batch_size=args.micro_batch_size, decoder_seq_length=args.seq_length,
                        forward_only=True)
            totals.append(reduce_losses(args, store).get("lm loss", float("nan")))
    for chunk in model:
        chunk.train()
    loss = sum(totals) / len(totals)
    log0("-" * 100)
    log0(f" validation loss at iteration {iteration} | lm loss value: {loss:.6E} | lm loss PPL: "
         f"{math.exp(min(loss, 20)):.6E} |")
    log0("-" * 100)
    return loss


def run(args: argparse.Namespace) -> int:
    """Train with checked arguments (launch.main parses them before torch is imported); the exit status."""
    initialize(args)
    try:
        train(args)
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
