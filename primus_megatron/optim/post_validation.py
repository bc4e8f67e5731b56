"""Post-validation optimizer step: no global synchronisation before the step.

Megatron's optimizer step first agrees globally on two numbers, whether any
gradient is non-finite (an all-reduce MAX) and the gradient norm (an all-reduce
SUM of squares, for clipping), and every pipeline rank waits for the slowest one.
Here each rank instead:

1. prepares its gradients locally (copy to main grads, unscale, local inf/nan
   flag, local sum of squares) and starts both all-reduces *without waiting*;
2. steps optimistically, assuming the check will pass and no clipping applies,
   after a snapshot of what the step changes; it skips the optimistic step when
   its own numbers already decide (a local non-finite gradient, or a local norm
   alone above the clip threshold: the global norm can only be larger), except
   under the distributed optimizer, whose step is a data-parallel collective;
3. goes on with the next iteration. The runner of the next step takes the validation
   (`take_validation`, given to it as `validation=`); its executor runs the step's prefix
   (the rank's leading forward ops, `schedules.prefix`) and then calls
   `validate()`: the all-reduces have long completed, and
   * all fine: nothing to do;
   * a non-finite gradient anywhere: roll back (as the synchronous path skips
     the step), lower the fp16 loss scale as megatron does;
   * norm above the threshold: roll back, clip with the global norm, step again;
   and in the two latter cases every rank redoes its prefix (its forwards used
   the wrong parameters).

The values agree bitwise with megatron's synchronous `step()`: the reductions
are the same collectives over the same local values, clipping and the step are
megatron's own functions, and a rollback restores a snapshot.

Memory: the snapshot holds, per parameter the inner optimizer updates, a copy of
the main (fp32) parameter and of every optimizer state tensor (Adam: exp_avg,
exp_avg_sq, step), i.e. 12 bytes per parameter for fp32 Adam; it is taken only
when a rollback can be needed. With clipping off (--clip-grad 0) and no loss
scaler (fp32, or bf16 without --loss-scale) nothing can fail validation, so no
snapshot is taken at all and post-validation costs no memory.

megatron-core 0.16.1, `optimizer/`: `ChainedOptimizer.step`
(`optimizer.py:1308`) = `prepare_grads` (1233: FP32Optimizer's, 922, only
points `.grad` at `main_grad`; the mixed-precision one, 524, copies to main
grads and, with a grad scaler, unscales and checks for inf/nan, 496-521,
all-reducing `found_inf` MAX over the grad-stats group, then updates the
scaler, 553), `get_grad_norm` (1270; local squares all-reduced SUM,
`clip_grads.py:130`), clipping (`clip_grad_by_total_norm_fp32`), the optional
`count_zeros` (1289) and `step_with_ready_grads` (1242; the distributed
optimizer's all-gathers parameters unless overlapped,
`distrib_optimizer.py:2598-2619`). The grad-stats group is the model-parallel
group, or the whole distributed-optimizer instance (`__init__.py:459-466`).
`DynamicGradScaler.update` (`grad_scaler.py:108-130`) halves the scale on
every non-finite step once its hysteresis is used up and doubles it after
`growth_interval` clean steps.
"""
from __future__ import annotations

import datetime
import math
from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist

from ..runtime.p2p import PipelineTimeout


def must_redo(grad_norm: float, clip: float) -> bool:
    """Whether the global gradient norm undoes an optimistic step: it is clipped (megatron's
    `clip_grad_by_total_norm_fp32` scales where clip / (norm + 1e-6) < 1), or it is not a number.
    Megatron does not clip a NaN norm (the comparison is false), so the redone step equals its
    synchronous one; it counts here because a rank whose own norm already exceeded the clip did
    not step optimistically (`step`), and every rank must take the same branch: with a NaN norm
    the plain comparison would have them differ (some redo their prefix, some not: a hang)."""
    if clip <= 0:
        return False
    coefficient = clip / (grad_norm + 1.0e-6)
    return coefficient < 1.0 or math.isnan(coefficient)


class PostValidationOptimizer:
    """Wrap a megatron optimizer (what `get_megatron_optimizer` returns, or any
    MegatronOptimizer) for post-validated steps. Attribute access falls through
    to the wrapped optimizer (param_groups, scale_loss, get_loss_scale,
    state_dict, sharded_state_dict, ...)."""

    def __init__(self, optimizer: Any, model_chunks: Sequence[torch.nn.Module] = (), *,
                 timeout_s: float = 600.0) -> None:
        self.optimizer = optimizer
        self.timeout_s = timeout_s  # for the gradient checks of the other ranks
        self.model_chunks = list(model_chunks)
        self.subs = list(getattr(optimizer, "chained_optimizers", [optimizer]))
        grouped = _separate_norm_groups(self.subs)
        if grouped:
            raise ValueError(
                f"post-validation cannot step parameters that megatron clips by a gradient norm of their own "
                f"(grad_norm_group {', '.join(sorted(grouped))}, e.g. multi-token prediction layers): their norm is "
                f"a second global reduction the optimistic step does not check; drop --optimizer-post-validation")
        self._pending: Optional[_Pending] = None
        self._handover: Optional[Callable[[], bool]] = None  # the validation the next step runs
        self._zero_requested = False
        self.last_result: Optional[tuple] = None  # (update_successful, grad_norm, num_zeros) of the last validated step
        self.stats = {"steps": 0, "optimistic": 0, "rollbacks": 0, "redone": 0}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["optimizer"], name)

    # -- the training loop's calls -------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Deferred while a step awaits validation: a clipped re-step needs these gradients."""
        if self._pending is not None:
            self._zero_requested = True
        else:
            self._zero_now()

    def _zero_now(self) -> None:
        for chunk in self.model_chunks:
            if hasattr(chunk, "zero_grad_buffer"):
                chunk.zero_grad_buffer()
        self.optimizer.zero_grad()

    @torch.no_grad()
    def step(self) -> tuple:
        """Start the step without global synchronisation. Returns (None, None, None):
        the outcome is known after `validate()` (see `last_result`)."""
        if self._pending is not None:
            self.finish()
        self.stats["steps"] += 1
        found_local = any([self._prepare(sub) for sub in self.subs])
        total_sq = self._local_norm_sq()
        local_norm = float(total_sq.item()) ** 0.5  # read before the all-reduce overwrites it
        works = [dist.all_reduce(sub.found_inf, op=dist.ReduceOp.MAX, group=sub.get_grad_stats_parallel_group(),
                                 async_op=True) for sub in self.subs if getattr(sub, "grad_scaler", None)]
        works.append(dist.all_reduce(total_sq, op=dist.ReduceOp.SUM, group=self.subs[0].get_grad_stats_parallel_group(),
                                     async_op=True))
        clip = self.optimizer.config.clip_grad
        # A distributed optimizer's step all-gathers parameters over its data-parallel group, whose
        # ranks see different gradient shards: they must all take the same branch, so none skips
        # the optimistic step on its local numbers (a failed check rolls it back instead).
        sharded = any(type(sub).__name__ == "DistributedOptimizer" for sub in self.subs)
        decided = not sharded and (found_local or (clip > 0 and clip / (local_norm + 1.0e-6) < 1.0))
        can_fail = clip > 0 or any(getattr(sub, "grad_scaler", None) for sub in self.subs)
        snapshot = None
        if not decided:
            snapshot = _Snapshot(self.subs) if can_fail else None
            self.optimizer.step_with_ready_grads()
            self.stats["optimistic"] += 1
        self._pending = _Pending(works, total_sq, stepped=not decided, snapshot=snapshot)
        self._handover = self.validate
        return None, None, None

    def take_validation(self) -> Optional[Callable[[], bool]]:
        """The pending step's validation, once (the runner of the next step calls this: pass it
        as `get_forward_backward_func(..., validation=optimizer.take_validation)`), or None."""
        validate, self._handover = self._handover, None
        return validate

    @torch.no_grad()
    def validate(self) -> bool:
        """Settle the pending step; True if it changed the parameters again
        (the caller redoes what it computed with the optimistic ones)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return False
        for work in pending.works:
            try:
                work.wait(timeout=datetime.timedelta(seconds=self.timeout_s))
            except Exception as exc:
                raise PipelineTimeout(
                    f"rank {dist.get_rank()} waited up to {self.timeout_s:g} s for the other ranks' gradient checks "
                    f"(non-finite flag, norm) of the step under post-validation; at least one rank died, hangs or "
                    f"is elsewhere in its program [{type(exc).__name__}]") from exc
        found = False
        for sub in self.subs:
            if getattr(sub, "grad_scaler", None):
                sub_found = sub.found_inf.item() > 0
                sub.grad_scaler.update(sub_found)  # as megatron's prepare_grads does
                found |= sub_found
        # Whether the next step's prefix is redone must be the same on every rank, so it
        # follows the global outcome: any failed check means some rank's parameters (and
        # so the activations it sent) were not the validated ones.
        changed = False
        if found:
            result = (False, None, None)
            if pending.stepped:
                pending.snapshot.restore(self.subs, self.model_chunks)
                self.stats["rollbacks"] += 1
            changed = True
        else:
            grad_norm = pending.total_sq.item() ** 0.5  # get_grad_norm_fp32's last line
            clipped = must_redo(grad_norm, self.optimizer.config.clip_grad)
            if clipped or not pending.stepped:
                if pending.stepped:
                    pending.snapshot.restore(self.subs, self.model_chunks)
                    self.stats["rollbacks"] += 1
                self._clip(grad_norm)
                self.optimizer.step_with_ready_grads()
                changed = True
            result = (True, grad_norm, None)
        if changed:
            self.stats["redone"] += 1
        self.last_result = result
        if self._zero_requested:
            self._zero_requested = False
            self._zero_now()
        return changed

    def finish(self) -> Optional[tuple]:
        """Validate now if a step is pending (before evaluation, checkpoints, the end)."""
        if self._pending is not None:
            self._handover = None
            self.validate()
        return self.last_result

    # -- megatron internals, local parts only --------------------------------------------------
    def _prepare(self, sub) -> bool:
        """Local part of megatron's prepare_grads: main grads, unscale, local inf flag."""
        if getattr(sub, "is_stub_optimizer", False):
            return False
        if not hasattr(sub, "_copy_model_grads_to_main_grads"):
            sub.prepare_grads()  # FP32Optimizer: param.grad = param.main_grad, nothing global
            return False
        sub._copy_model_grads_to_main_grads()
        if not getattr(sub, "grad_scaler", None):
            return False
        # megatron's _unscale_main_grads_and_check_for_nan without its all-reduce
        grads = sub._collect_main_grad_data_for_unscaling()
        sub.found_inf.fill_(0.0)
        torch._amp_foreach_non_finite_check_and_unscale_(grads, sub.found_inf, sub.grad_scaler.inv_scale)
        return sub.found_inf.item() > 0

    def _local_norm_sq(self) -> torch.Tensor:
        """get_grad_norm_fp32 up to its all-reduce: the local sum of squares."""
        from megatron.core.optimizer import clip_grads

        grads = []
        for sub in self.subs:
            grads += _grads_for_norm(sub)
        if grads:
            overflow = torch.zeros(1, dtype=torch.int, device=grads[0].device)
            norm, _ = clip_grads.multi_tensor_applier(clip_grads.l2_norm_impl, overflow, [grads], False)
        else:
            device = next(iter(self.model_chunks[0].parameters())).device if self.model_chunks else "cpu"
            norm = torch.zeros(1, dtype=torch.float, device=device)
        return norm ** 2.0

    def _clip(self, grad_norm: float) -> None:
        from megatron.core.optimizer import clip_grads

        for sub in self.subs:
            if getattr(sub, "is_stub_optimizer", False) or sub.config.clip_grad <= 0:
                continue
            params = sub.get_parameters()
            if params:
                clip_grads.clip_grad_by_total_norm_fp32(
                    params, max_norm=sub.config.clip_grad, total_norm=grad_norm,
                    use_decoupled_grad=sub.config.use_precision_aware_optimizer_no_fp8_or_ds_fp8)


def _grads_for_norm(sub) -> list:
    """The gradients megatron's clip_grad_norm takes the (main) norm of: megatron-core 0.19's
    get_grads_for_grad_norm() (separate groups left out), 0.16.1's get_main_grads_for_grad_norm()."""
    getter = getattr(sub, "get_grads_for_grad_norm", None)
    if getter is None:
        getter = sub.get_main_grads_for_grad_norm
    return getter()


def _separate_norm_groups(subs) -> set:
    """Separate gradient-norm groups (megatron-core 0.19: parameters tagged `grad_norm_group`, each
    clipped by its own norm) present among the optimizers' parameters; empty on 0.16.1."""
    try:
        from megatron.core.optimizer.optimizer import SEPARATE_GRAD_NORM_GROUPS
    except ImportError:
        return set()
    found = set()
    for sub in subs:
        if getattr(sub, "is_stub_optimizer", False) or not hasattr(sub, "get_parameters"):
            continue
        for p in sub.get_parameters():
            group = getattr(p, "grad_norm_group", None)
            if group in SEPARATE_GRAD_NORM_GROUPS:
                found.add(group)
    return found


def inject_nonfinite_gradient(model_chunks: Sequence[torch.nn.Module]) -> bool:
    """Fault injection (testing aid): put a NaN into this rank's first gradient,
    as an overflow would. Call after the backward passes, before the optimizer
    step; returns whether this rank had a gradient to poison."""
    for chunk in model_chunks:
        for p in chunk.parameters():
            grad = getattr(p, "main_grad", None)
            if grad is None:
                grad = p.grad
            if grad is not None:
                grad.view(-1)[0] = float("nan")
                return True
    return False


class _Pending:
    def __init__(self, works, total_sq, *, stepped: bool, snapshot) -> None:
        self.works, self.total_sq, self.stepped, self.snapshot = works, total_sq, stepped, snapshot


class _Snapshot:
    """What an optimizer step changes: the inner optimizer's parameters (main
    params; model params for fp32) and its state tensors."""

    def __init__(self, subs) -> None:
        self.saved = []
        for sub in subs:
            inner = getattr(sub, "optimizer", None)
            if inner is None:
                continue
            params = [p for group in inner.param_groups for p in group["params"]]
            state = {id(p): {k: (v.detach().clone() if torch.is_tensor(v) else v)
                             for k, v in inner.state[p].items()} for p in params if p in inner.state}
            self.saved.append((inner, params, [p.detach().clone() for p in params], state))

    @torch.no_grad()
    def restore(self, subs, model_chunks) -> None:
        distributed = any(type(sub).__name__ == "DistributedOptimizer" for sub in subs)
        if distributed:
            # Gathers of the optimistic parameters may still be in flight (overlap_param_gather starts
            # them in the next step's first forwards): a forced sync first waits for those, so none
            # reads the shards while they are restored; the second gathers the restored values.
            for chunk in model_chunks:
                chunk.start_param_sync(force_sync=True)
        for inner, params, values, state in self.saved:
            for p, v in zip(params, values):
                p.copy_(v)
                if id(p) in state:
                    inner.state[p] = {k: (t.clone() if torch.is_tensor(t) else t) for k, t in state[id(p)].items()}
                else:
                    inner.state.pop(p, None)
        for sub in subs:
            if hasattr(sub, "_copy_main_params_to_model_params") and not getattr(sub, "is_stub_optimizer", False):
                sub._copy_main_params_to_model_params()
        if distributed:
            for chunk in model_chunks:
                chunk.start_param_sync(force_sync=True)  # every dp rank's full parameters again
