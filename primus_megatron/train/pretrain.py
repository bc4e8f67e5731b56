"""`pretrain_gpt.py`'s main: arguments -> process groups -> model, optimizer,
data -> training iterations with Megatron-LM-style logs, evaluation through
the forward-only path, checkpoints and the executed-schedule picture."""
from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Optional, Sequence

import torch
import torch.distributed as dist

from .arguments import ConfigError, parse
from .loop import (forward_step, gather_timeline, initialize, log0, measured_bubble, reduce_losses,
                   write_timeline)


def forward_backward_func(args):
    """Ours for --pipeline-schedule, else megatron-core's own."""
    if args.pipeline_schedule is None:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        return get_forward_backward_func()
    from ..megatron_lm.args import parse_costs
    from ..runtime import get_forward_backward_func

    return get_forward_backward_func(
        args.pipeline_schedule, chunks=args.pipeline_chunks, memory_limit=args.pipeline_memory_limit,
        costs=parse_costs(args.pipeline_costs) if args.pipeline_costs else None,
        p2p_timeout_s=args.pipeline_p2p_timeout)


def configure_hooks(args, model, optimizer) -> None:
    """The config hooks Megatron-LM installs for its schedules."""
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.utils import get_model_config

    config = get_model_config(model[0])
    config.grad_scale_func = optimizer.scale_loss
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
        parts.append(f"bubble (measured): {bubble:.3f}")
    if extra:
        parts.append(extra)
    return " | ".join(parts) + " |"


def train(args) -> dict:
    from megatron.core import parallel_state as ps

    from ..runtime.placement import init_by_global_name_
    from . import data as D
    from .model import build_model, build_optimizer, transformer_config
    from .tokenizer import build_tokenizer

    tokenizer = build_tokenizer(args)
    vocab = D.padded_vocab(args, tokenizer)
    config = transformer_config(args)
    model = build_model(args, config, vocab, init=lambda chunks: init_by_global_name_(
        chunks, seed=args.seed, std=args.init_method_std, num_layers=args.num_layers,
        tp_rank=ps.get_tensor_model_parallel_rank(), tp_size=args.tensor_model_parallel_size))
    from . import determinism

    determinism.install(model, args.seed)  # dropout masks independent of the schedule
    optimizer, scheduler = build_optimizer(args, model)
    configure_hooks(args, model, optimizer)
    start_iter, consumed = 0, 0
    if args.load:
        from .checkpoint import load

        start_iter, consumed = load(args, model, optimizer, scheduler)
    train_data, valid_data, _ = D.build_datasets(args, tokenizer)
    dp_rank, dp_size = ps.get_data_parallel_rank(), ps.get_data_parallel_world_size()
    train_iter = D.batch_iterator(train_data, args.micro_batch_size, dp_rank, dp_size, start_sample=consumed)
    valid_iter = D.batch_iterator(valid_data, args.micro_batch_size, dp_rank, dp_size) if valid_data is not None else None
    # Only ranks that feed the model hold data; all ranks must agree whether to evaluate.
    has_valid = torch.tensor([int(valid_data is not None)])
    dist.all_reduce(has_valid, op=dist.ReduceOp.MAX)
    fbf = forward_backward_func(args)
    planned = None
    if args.pipeline_schedule is not None:
        from .. import schedules as S

        plan = S.generate(args.pipeline_schedule, args.pipeline_model_parallel_size, args.num_microbatches,
                          memory_limit=args.pipeline_memory_limit, chunks=args.pipeline_chunks)
        sim = S.simulate(plan)
        planned = (sim.bubble_sync, max(sim.peak_memory))
        log0(f"pipeline schedule {plan.name}: pp={plan.pp}, {plan.microbatches} microbatches, "
             f"{plan.chunks_per_rank} chunk(s)/rank ({plan.placement} placement); simulated bubble "
             f"{sim.bubble_sync:.3f} (sync) / {sim.bubble_async:.3f} (async), peak activation "
             f"{max(sim.peak_memory):g} microbatch(es) of a rank's layers")
    history, evals = [], []
    skipped_total = 0
    log_every = args.log_interval
    for iteration in range(start_iter, args.train_iters):
        determinism.set_iteration(iteration)
        t0 = time.perf_counter()
        for chunk in model:
            chunk.zero_grad_buffer()
        optimizer.zero_grad()
        store = fbf(forward_step_func=forward_step, data_iterator=train_iter,
                    model=model if len(model) > 1 else model[0], num_microbatches=args.num_microbatches,
                    seq_length=args.seq_length, micro_batch_size=args.micro_batch_size,
                    decoder_seq_length=args.seq_length, forward_only=False)
        ok, grad_norm, _ = optimizer.step()
        if ok:
            scheduler.step(increment=args.global_batch_size)
        else:
            skipped_total += 1
        losses = reduce_losses(args, store)
        elapsed = time.perf_counter() - t0
        done = iteration + 1
        history.append(losses.get("lm loss", float("nan")))
        last = done == args.train_iters
        if done % log_every == 0 or last:
            timeline = gather_timeline(fbf) if args.pipeline_schedule is not None else None
            bubble = measured_bubble(timeline) if timeline else None
            extra = f"planned bubble: {planned[0]:.3f} | planned peak act: {planned[1]:g} mb" if planned else ""
            tokens = args.global_batch_size * args.seq_length / elapsed
            log0(_format_log(done, args, elapsed * 1e3, optimizer.param_groups[0]["lr"], losses,
                             optimizer.get_loss_scale().item(), grad_norm, skipped_total, tokens, bubble, extra))
            if last and args.timeline and timeline and dist.get_rank() == 0:
                write_timeline(args, timeline, f"{args.pipeline_schedule}, pp={args.pipeline_model_parallel_size}, "
                               f"{args.num_microbatches} microbatches, iteration {done} (measured)")
        if has_valid.item() and args.eval_interval and (done % args.eval_interval == 0 or last):
            evals.append(evaluate(args, fbf, model, valid_iter, done))
        if args.save and args.save_interval and done % args.save_interval == 0:
            from .checkpoint import save

            save(args, model, optimizer, scheduler, done, done * args.global_batch_size)
        if args.exit_interval and done % args.exit_interval == 0:
            break
    if args.save and (not args.save_interval or done % args.save_interval):
        from .checkpoint import save

        save(args, model, optimizer, scheduler, done, done * args.global_batch_size)
    return {"losses": history, "eval": evals, "start_iteration": start_iter}


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


def _launch_environment() -> None:
    """A plain `python pretrain_gpt.py` is a world of one; more ranks need a launcher."""
    import os

    if "MASTER_ADDR" in os.environ:
        return
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError("WORLD_SIZE is set but MASTER_ADDR is not: launch with torchrun (or srun + torchrun)")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        args = parse(argv)
        _launch_environment()
    except ConfigError as exc:
        import os

        if os.environ.get("RANK", "0") == "0":
            print(f"pretrain_gpt.py: error: {exc}", file=sys.stderr)
        return 2
    initialize(args)
    try:
        train(args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0
