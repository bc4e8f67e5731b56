"""`--optimizer-post-validation` in Megatron-LM's own training loop.

Megatron-LM's train_step zeroes the gradient buffers, runs forward_backward_func,
calls `optimizer.step()` and, if the update succeeded, steps the learning-rate
scheduler; train() then logs the iteration with the step's grad norm. Under
post-validation the step's outcome is known only during the next step's first
forwards (primus_megatron.optim.PostValidationOptimizer, validated by our
executor), so here:

* `step()` starts the optimistic step and answers "successful" (Megatron-LM goes
  on); at the iterations after which Megatron-LM reads the parameters or ends
  (evaluation, checkpoint, exit, the last iteration) it settles the step at once
  and answers with the real outcome;
* the gradient buffers are not zeroed while a step awaits validation (a clipped
  re-step needs its gradients; they are zeroed right after it);
* the scheduler's step for an unsettled step waits for the outcome (a clipped
  re-step uses the step's own learning rate) and is dropped if the step is skipped;
* the iteration's log line waits too: it is printed when the outcome is known
  (after the next train_step) with the step's grad norm, skipped count, loss scale
  and learning rate, so the lines equal those of the synchronous step.

Megatron-LM's train_step still all-reduces the success flag and the grad norm over
the model-parallel group after every step (its own code); those collectives are
not removed here.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from ..optim import PostValidationOptimizer


class MegatronLMPostValidation(PostValidationOptimizer):
    """Megatron-LM's optimizer under post-validation (see the module doc)."""

    # training_log's positional arguments that depend on the step's outcome (core_v0.16.1)
    _LR, _LOSS_SCALE, _SKIPPED, _GRAD_NORM, _REPORT_MEMORY = 2, 4, 6, 7, 5

    def __init__(self, optimizer: Any, model: list, scheduler: Any, args: Any) -> None:
        super().__init__(optimizer, model, timeout_s=float(getattr(args, "pipeline_p2p_timeout", 600.0) or 600.0))
        self.args = args
        self._scheduler_step = scheduler.step
        self._held_increment = 0
        self._next_log_waits = False          # the next training_log call is for an unsettled step
        self._waiting: Optional[list] = None  # that call's arguments, until its step is settled
        self._ready: list = []                # settled calls, printed after the current train_step
        scheduler.step = self._step_scheduler
        for chunk in model:
            chunk.zero_grad_buffer = self._deferred_zero(chunk.zero_grad_buffer)

    def _deferred_zero(self, zero):
        def zero_grad_buffer(*args, **kwargs):
            if self._pending is None:
                return zero(*args, **kwargs)
            self._zero_requested = True  # validate() zeroes after settling
            return None

        return zero_grad_buffer

    def _step_scheduler(self, increment, *args, **kwargs):
        if self._pending is not None:
            self._held_increment += increment
            return None
        return self._scheduler_step(increment, *args, **kwargs)

    def _settles_now(self, iteration: int) -> bool:
        """Megatron-LM reads the parameters (or stops) after this iteration."""
        a = self.args

        def every(n):
            return bool(n) and iteration % n == 0

        return (iteration >= a.train_iters or every(a.eval_interval) or (bool(a.save) and every(a.save_interval))
                or every(getattr(a, "exit_interval", None)))

    def step(self) -> tuple:
        iteration = getattr(self.args, "curr_iteration", 0) + 1  # the iteration this step completes
        super().step()
        if self._settles_now(iteration):
            result = self.finish()
            if iteration >= self.args.train_iters and torch.distributed.get_rank() == 0:
                st = self.stats
                print(f"post-validation: {st['steps']} steps, {st['optimistic']} taken optimistically, "
                      f"{st['rollbacks']} rolled back, {st['redone']} redone", flush=True)
            return result
        self._next_log_waits = True
        return True, None, None  # optimistic; this iteration's log line waits for the outcome

    def validate(self) -> bool:
        had = self._pending is not None
        changed = super().validate()
        if not had:
            return changed
        ok, grad_norm = self.last_result[0], self.last_result[1]
        held, self._held_increment = self._held_increment, 0
        if ok and held:
            self._scheduler_step(increment=held)
        if self._waiting is not None:
            from megatron.core.optimizer_param_scheduler import get_canonical_lr_for_logging

            call = self._waiting
            call[self._LR] = get_canonical_lr_for_logging(self.optimizer.param_groups)
            call[self._LOSS_SCALE] = self.optimizer.get_loss_scale().item()
            call[self._SKIPPED] = 0 if ok else 1
            call[self._GRAD_NORM] = grad_norm
            self._ready.append(call)
            self._waiting = None
        return changed

    # -- Megatron-LM's training_log, around the train loop -----------------------------------------
    def log(self, training_log, args: tuple, kwargs: dict):
        """training_log(*args, **kwargs) now, or once this iteration's step is settled."""
        self.flush(training_log)
        if self._next_log_waits and len(args) > self._GRAD_NORM:
            self._next_log_waits = False
            self._waiting = [*args, kwargs]
            return args[self._REPORT_MEMORY]
        self._next_log_waits = False
        return training_log(*args, **kwargs)

    def flush(self, training_log) -> None:
        """Print the settled waiting log lines (after a train_step: before the next line)."""
        ready, self._ready = self._ready, []
        for call in ready:
            training_log(*call[:-1], **call[-1])


def install(mlm_training) -> Callable[[], Optional[Callable[[], bool]]]:
    """Wrap Megatron-LM's setup_model_and_optimizer, train_step and training_log (idempotent).
    Returns the runner's validation source: the pending validation of the post-validated
    optimizer Megatron-LM set up, or None."""
    current: dict = {}

    def validation() -> Optional[Callable[[], bool]]:
        return current["optimizer"].take_validation() if "optimizer" in current else None

    names = ("setup_model_and_optimizer", "train_step", "training_log")
    if not all(hasattr(mlm_training, n) for n in names):
        return validation  # not Megatron-LM's training module (a stand-in in unit tests)
    if getattr(mlm_training.setup_model_and_optimizer, "_primus_post_validation", False):
        return mlm_training.setup_model_and_optimizer._primus_post_validation
    from megatron.training import get_args

    setup, train_step, training_log = (mlm_training.setup_model_and_optimizer, mlm_training.train_step,
                                       mlm_training.training_log)

    def setup_model_and_optimizer(*a, **kw):
        model, optimizer, scheduler = setup(*a, **kw)
        args = get_args()
        if getattr(args, "optimizer_post_validation", False) and getattr(args, "pipeline_schedule", None):
            optimizer = MegatronLMPostValidation(optimizer, model, scheduler, args)
            current["optimizer"] = optimizer
        return model, optimizer, scheduler

    def wrapped_train_step(*a, **kw):
        result = train_step(*a, **kw)
        if "optimizer" in current:
            current["optimizer"].flush(training_log)  # the previous iteration's line, now settled
        return result

    def wrapped_training_log(*a, **kw):
        if "optimizer" in current:
            return current["optimizer"].log(training_log, a, kw)
        return training_log(*a, **kw)

    setup_model_and_optimizer._primus_post_validation = validation
    mlm_training.setup_model_and_optimizer = setup_model_and_optimizer
    mlm_training.train_step = wrapped_train_step
    mlm_training.training_log = wrapped_training_log
    return validation
