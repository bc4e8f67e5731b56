"""examples/pretrain_gpt.py's forward step (Megatron-LM's pretrain_gpt.forward_step) and what
rides on it: the NaN/inf loss check naming the first stage whose output was not finite, the
fault-injection testing aids, and the reduction of the reported losses."""
from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
from functools import partial
from typing import Optional

import torch
import torch.distributed as dist

from ..options import PipelineSpec
from ..runtime.p2p import PipelineTimeout


class NonFiniteLoss(RuntimeError):
    """The reduced training loss is NaN or inf (Megatron-LM stops there too)."""


class TrainingSteps:
    """One run's forward step and loss handling. `forward_step` is megatron's
    forward_step_func; `iteration` (the loop's 0-based index, the log numbers it + 1) is set by
    the loop before each step.

    Checks: --check-for-nan-in-loss (`nan_check`); testing aids --inject-nan-loss-at,
    --inject-kill-at, --inject-kill-rank. Per training iteration it counts this rank's forward
    ops and keeps, per pipeline stage, a lazily evaluated "some output was not finite" flag (a
    tensor: no device sync on the healthy path)."""

    def __init__(self, args: argparse.Namespace, spec: Optional[PipelineSpec]) -> None:
        self.pp = args.pipeline_model_parallel_size
        self.nan_check = getattr(args, "check_for_nan_in_loss", True)
        self.follow(spec)
        self.nan_loss_at = getattr(args, "inject_nan_loss_at", None)
        self.kill_at = getattr(args, "inject_kill_at", None)
        self.kill_rank = getattr(args, "inject_kill_rank", None)
        self.timeout_s = float(getattr(args, "pipeline_p2p_timeout", None) or 600)
        # packed microbatches (--pipeline-balance-data): every stage's attention needs the batch's
        # per-sample mask, not only the first's and the last's (middle stages would attend across samples)
        self.packed = getattr(args, "pipeline_balance_data", None) is not None
        self.iteration = 0
        self._forwards: tuple[Optional[int], int] = (None, 0)  # (iteration, forward ops run in it)
        self._flags: dict = {}
        self._loss_names: list = []  # every rank's view of the loss keys, learnt once

    def follow(self, spec: Optional[PipelineSpec]) -> None:
        """The spec whose stages run (auto's choice replaces the provisional one)."""
        self.last_stage = self.pp * (spec.chunks if spec is not None else 1) - 1
        self.loss_rank = spec.loss_rank(self.pp) if spec is not None else self.pp - 1  # pipeline rank of the loss

    # -- megatron's forward_step_func -----------------------------------------------------------
    def forward_step(self, data_iterator, model):
        """Reads the microbatch only where it is needed: tokens on the chunk with
        the first stage, labels on the chunk with the last (both on rank 0 under V), the attention
        mask of packed microbatches on every chunk."""
        from megatron.core.utils import get_attr_wrapped_model

        pre = get_attr_wrapped_model(model, "pre_process")
        post = get_attr_wrapped_model(model, "post_process")
        batch = next(data_iterator) if (pre or post or self.packed) else None
        tokens = batch["tokens"] if pre else None
        position_ids = batch["position_ids"] if pre else None
        attention_mask = batch.get("attention_mask") if batch is not None else None
        labels = batch["labels"] if post else None
        self._before_forward()
        output = model(tokens, position_ids, attention_mask, labels=labels)
        if self.nan_check and _training() and isinstance(output, torch.Tensor):
            self._note_nonfinite(_stage_of(model), output)
        return output, partial(self.loss_func, batch["loss_mask"] if post else None)

    def loss_func(self, loss_mask: torch.Tensor, output_tensor: torch.Tensor):
        losses = output_tensor.float().view(-1)
        mask = loss_mask.view(-1).float()
        loss = torch.sum(losses * mask)
        if _training() and self.nan_loss_at == self.iteration + 1:
            loss = loss * float("nan")  # --inject-nan-loss-at (testing aid)
        if self.nan_check and _training():
            self._note_nonfinite(self.last_stage, loss)
        num_tokens = mask.sum().clone().detach().to(torch.int)
        report = torch.cat([loss.clone().detach().view(1), num_tokens.float().view(1)])
        return loss, num_tokens, {"lm loss": report}

    def _before_forward(self) -> None:
        if not _training():
            return
        seen, count = self._forwards
        if seen != self.iteration:
            seen, count, self._flags = self.iteration, 0, {}
        self._forwards = (seen, count + 1)
        if self.kill_at == self.iteration + 1 and count + 1 == 2 and \
                self.kill_rank in (None, dist.get_rank() if dist.is_initialized() else 0):
            import signal

            sys.stdout.flush()
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)  # --inject-kill-at (testing aid): die as kill -9 would

    def _note_nonfinite(self, stage: int, tensor: torch.Tensor) -> None:
        bad = ~torch.isfinite(tensor.detach()).all()
        flags = self._flags
        flags[stage] = flags[stage] | bad if stage in flags else bad

    # -- after a step -----------------------------------------------------------------------------
    def check_loss(self, losses: dict, iteration: int, flags: dict) -> None:
        """After a training step (every rank, with the reduced losses and the
        step's flags from `post_losses`): raise NonFiniteLoss naming the iteration
        and the first pipeline stage (and the global rank holding it) whose output
        or loss was NaN/inf."""
        if not self.nan_check or all(math.isfinite(v) for v in losses.values()):
            return
        world, rank = dist.get_world_size(), dist.get_rank()
        last = self.last_stage
        stages = sorted(s for s, flag in flags.items() if bool(flag))
        # the earliest stage in pipeline order, then the lowest global rank; else the loss stage's holder
        # (a loss can be NaN with finite outputs everywhere, e.g. with no loss tokens)
        mine = stages[0] * world + rank if stages else (last + 1) * world + (rank if self.loss_holder() else world)
        from ..runtime.collectives import collective_device

        value = torch.tensor([mine], dtype=torch.long, device=collective_device())
        dist.all_reduce(value, op=dist.ReduceOp.MIN)
        stage, holder = divmod(int(value.item()), world)
        where = f"pipeline stage {min(stage, last)}, rank {holder}" if stage <= last + 1 else f"pipeline stage {last}"
        raise NonFiniteLoss(f"NaN/inf loss at iteration {iteration} (computed on {where})")

    def loss_holder(self) -> bool:
        """Does this rank hold the last pipeline stage (and is it tp rank 0)?"""
        from megatron.core import parallel_state as ps

        return (ps.get_pipeline_model_parallel_rank() == self.loss_rank
                and ps.get_tensor_model_parallel_rank() == 0)

    def loss_names(self, store: list) -> list[str]:
        mine = sorted(store[0]) if store and self.loss_holder() else []
        if not self._loss_names:
            seen: list = [None] * dist.get_world_size()
            dist.all_gather_object(seen, mine)  # once per run: ranks without the loss stage learn the names
            self._loss_names.extend(sorted({k for names in seen for k in names}) or ["lm loss"])
        if mine and mine != self._loss_names:
            raise ValueError(f"the loss function reported {mine} after reporting {self._loss_names}; its keys must "
                             f"not change")
        return self._loss_names

    def post_losses(self, store: list) -> "PendingLosses":
        """Start reducing a training step's losses; `wait()` gives them on every rank."""
        flags, self._flags = self._flags, {}
        return PendingLosses(self, store, flags, what=f"losses of iteration {self.iteration + 1}")

    def reduce_losses(self, store: list) -> dict[str, float]:
        """Token-weighted mean of every reported loss over microbatches and data-parallel
        ranks, available on every rank."""
        return PendingLosses(self, store, what="evaluation losses").wait()


def _training() -> bool:
    return torch.is_grad_enabled()  # evaluation runs under torch.no_grad()


def _stage_of(model) -> int:
    inner = model
    while not hasattr(inner, "pipeline_stage") and hasattr(inner, "module"):
        inner = inner.module
    stage = getattr(inner, "pipeline_stage", None)
    if stage is None:  # megatron's own schedules: one chunk per rank
        from megatron.core import parallel_state as ps

        stage = ps.get_pipeline_model_parallel_rank()
    return stage


class PendingLosses:
    """A loss reduction in flight: posting it costs no synchronisation, so
    under post-validation the pipeline ranks do not meet at every iteration."""

    def __init__(self, steps: TrainingSteps, store: list, flags: Optional[dict] = None, what: str = "losses") -> None:
        from ..runtime.collectives import collective_device

        self.what, self.timeout_s = what, steps.timeout_s
        self.names = steps.loss_names(store)
        totals = torch.zeros(2 * len(self.names), dtype=torch.float64)
        if steps.loss_holder():
            for i, key in enumerate(self.names):
                for item in store:
                    value = item[key].detach().double().view(-1).cpu()
                    totals[2 * i] += value[0]
                    totals[2 * i + 1] += value[1] if value.numel() > 1 else 1.0
        self.totals = totals.to(collective_device())
        self.flags = flags  # the iteration's non-finite flags, for check_loss
        # loss holders of every dp replica contribute; the others add zeros
        self.work = dist.all_reduce(self.totals, async_op=True)

    def wait(self) -> dict[str, float]:
        """Token-weighted mean of every reported loss over microbatches and data-parallel ranks."""
        try:
            self.work.wait(timeout=datetime.timedelta(seconds=self.timeout_s))
        except Exception as exc:
            raise PipelineTimeout(
                f"rank {dist.get_rank()} waited up to {self.timeout_s:g} s for every rank's {self.what}; at least one "
                f"rank died, hangs or is elsewhere in its program [{type(exc).__name__}]") from exc
        t = self.totals.cpu()
        return {k: float(t[2 * i] / t[2 * i + 1]) if t[2 * i + 1] > 0 else float("nan")
                for i, k in enumerate(self.names)}
