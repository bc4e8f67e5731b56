"""torch.distributed.pipelining's stages on emulated chunks: the torch baselines' runtime side.

torch's `ScheduleInterleavedZeroBubble`, `ScheduleZBVZeroBubble` and `ScheduleDualPipeV`
split a backward without our weight-gradient store: `stage_backward_input` runs
`autograd.grad(outputs, stage inputs, retain_graph=True)` with pre-hooks that save the
gradient reaching each node shared by the input and the weight paths, and
`stage_backward_weight` later runs `autograd.grad(those nodes, weights)` from the saved
gradients (torch 2.13, pipelining/_backward.py). So the same node's backward runs twice,
once per pass, each time asked for a different output; and a first stage runs nothing in its
I and a full backward in its W (stage.py, `backward_one_chunk` / `backward_weight_one_chunk`).
(schedules.py's `_merge_bw`, which would run an I directly followed by its W as one backward, is
not called by its runtime.)

`TorchEmulatedStage` is an emulated chunk built for that: one custom autograd node computes
the chunk's small linear mix (a real weight gradient to compare) and, in its backward, asks
the engine which of its inputs this pass will use (`torch._C._will_engine_execute_node` on
its input's and its weight's nodes, both non-leaf so the query is allowed under
`autograd.grad`): the input only is torch's I (waits B), the weight only is its W (waits W),
both is a full backward (waits BW). F waits in the forward; p2p latency is emulated with the
same send stamps as `emulation.chunks`, on the tensors torch sends.
"""
from __future__ import annotations

import warnings
from typing import Any, Optional

import torch

from .baselines import SCHEDULES
from .chunks import LINEAR_WIDTH, OpLog, StageTimes, TimedWaits, _Arrive, _Clock

class _SplitWork(torch.autograd.Function):
    """F's wait and the chunk's linear mix; its backward computes, and waits for, only what the
    engine's current pass uses (module doc)."""

    @staticmethod
    def forward(ctx, x, weight, stage):
        ctx.stage = stage
        ctx.save_for_backward(x, weight)
        stage._work(stage.times.f, "F")
        out = x.clone()
        head = x[..., :LINEAR_WIDTH]
        out[..., :LINEAR_WIDTH] = (head + head @ weight.t()) * 0.5  # as EmulatedChunk: the mean keeps sizes
        stage.clock.stamp(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        stage = ctx.stage
        x, weight = ctx.saved_tensors

        def used(i: int) -> bool:
            node = ctx.next_functions[i][0]
            return bool(ctx.needs_input_grad[i] and node is not None and torch._C._will_engine_execute_node(node))

        need_x, need_w = used(0), used(1)
        if need_x and not stage.post_process:
            stage._arrive(grad, stage.times.comm_grad_in)  # the first pass to see this gradient
        if need_x and need_w:
            stage._work(stage.times.bw, "BW")
            stage.log.w_in_backward += 1
        elif need_x:
            stage._work(stage.times.b, "B")
        elif need_w:
            stage._work(stage.times.w, "W")
            stage.log.w_runs[stage.stage] = stage.log.w_runs.get(stage.stage, 0) + 1
        head = grad[..., :LINEAR_WIDTH] * 0.5
        dx = None
        if need_x:
            dx = grad.clone()
            dx[..., :LINEAR_WIDTH] = head + head @ weight
        dw = head.reshape(-1, LINEAR_WIDTH).t() @ x[..., :LINEAR_WIDTH].reshape(-1, LINEAR_WIDTH) if need_w else None
        return dx, dw, None


class TorchEmulatedStage(torch.nn.Module, TimedWaits):
    """One stage of torch's pipeline (module doc). The first stage scales its input by a
    one-element parameter (as an embedding: its full backward reaches the mix's input path)."""

    def __init__(self, stage: int, num_stages: int, times: StageTimes, *, epoch: float) -> None:
        super().__init__()
        self.stage, self.num_stages, self.times = stage, num_stages, times
        self.pre_process, self.post_process = stage == 0, stage == num_stages - 1
        self.clock = _Clock(epoch)
        self.log = OpLog()
        self.weight = torch.nn.Parameter(torch.eye(LINEAR_WIDTH))
        self.embed = torch.nn.Parameter(torch.ones(1)) if self.pre_process else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * self.embed if self.pre_process else _Arrive.apply(x, self)
        return _SplitWork.apply(x, self.weight.view_as(self.weight), self)


def loss_fn(output: torch.Tensor, target: Any) -> torch.Tensor:
    """The emulated loss (emulation.chunks.loss_func's): torch divides gradients by the microbatch
    count itself (`scale_grads`), as megatron divides the loss."""
    return output[..., :LINEAR_WIDTH].float().mean()


class TorchRunner:
    """One rank's torch pipeline over emulated stages: `step()` runs one iteration."""

    def __init__(self, label: str, rank: int, pp: int, microbatches: int, times: list, *, epoch: float,
                 elements: int) -> None:
        from torch.distributed.pipelining import PipelineStage
        from torch.distributed.pipelining import schedules as ts

        from ..schedules import ir

        cls_name, placement, chunks = SCHEDULES[label]
        n = pp * chunks
        self.m, self.elements = microbatches, elements
        self.modules = [TorchEmulatedStage(ir.stage_of(placement, pp, rank, c), n,
                                           times[ir.stage_of(placement, pp, rank, c)], epoch=epoch)
                        for c in range(chunks)]
        # static shapes, gradients included (torch's static mode receives a gradient only where given); an
        # activation's example requires grad (torch's metadata then makes received activations require it)
        act, grad = torch.zeros(1, 1, elements, requires_grad=True), torch.zeros(1, 1, elements)
        stages = [PipelineStage(mod, mod.stage, n, torch.device("cpu"),
                                input_args=(torch.ones(1, 1, elements),) if mod.pre_process else (act,),
                                output_args=(act,), output_grads=(grad,),
                                input_grads=None if mod.pre_process else (grad,))
                  for mod in self.modules]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.schedule = getattr(ts, cls_name)(stages, microbatches, loss_fn=loss_fn)
        self.first = any(mod.pre_process for mod in self.modules)
        self.last = any(mod.post_process for mod in self.modules)

    @property
    def chunks(self) -> list:
        return self.modules

    def step(self) -> list:
        """One iteration; the losses on the rank of the last stage, else []."""
        args = (torch.ones(self.m, 1, self.elements),) if self.first else ()
        kwargs: dict = {}
        losses: Optional[list] = [] if self.last else None
        if self.last:
            kwargs = {"target": torch.zeros(self.m, 1, self.elements), "losses": losses}
        self.schedule.step(*args, **kwargs)
        return [{"lm loss": loss.detach()} for loss in (losses or [])]
