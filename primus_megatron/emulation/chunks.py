"""Emulated model chunks: ops that take a given time instead of computing.

An `EmulatedChunk` stands where a GPTModel chunk stands: megatron-core's
`forward_step` / `backward_step` drive it (`set_input_tensor`, `.config`, the
`forward_step_func(data_iterator, model)` contract), and every other part of a
step is real: the executor, our p2p (activations and gradients are real tensors
of the configured size), the weight-gradient store, megatron's own schedules.

Per virtual stage, F, B and W take given times (`StageTimes`, seconds; with per-microbatch
factors, `costs.mb_scale`, those times the factor of the op's microbatch) as a timed
wait (`time.sleep` to a deadline: a waiting rank needs no core, so 8 to 32 ranks
share two). The weight gradient is deferred through the mechanism real layers use:
the chunk holds a small megatron-core `ColumnParallelLinear`, whose backward
`linear_hooks.deferrable_linear` splits in a step with W ops, and the chunk's own
backward queues its W wait in the same store under the same (microbatch, chunk)
key. So a W op runs the layer's weight-gradient closure and the W wait, once; a
schedule whose W finds nothing deferred fails as with real layers; a BW op (a
backward not split: 1F1B, megatron's schedules) waits its own time (`bw`, B + W
unless given); and the linear's parameter gets a real gradient for
post-validation and for comparing schedules. A chunk learns which microbatch its forward runs
from megatron's `forward_step(..., current_microbatch=...)` (our executor and megatron's schedules
pass the op's microbatch; `set_current_microbatch` writes it into each of `model.decoder.layers`,
here one `_CurrentMicrobatch`), and its backward and W wait that microbatch's times too.
(torch's pipelining baselines, `torch_stages`, take the stage's times: they say no microbatch.)

An overlapped pair (`ir.Pair`) runs on emulated chunks as two ops, F then B (they build no schedule plan
for megatron's combined step); the executor says which half runs (`runtime.combined.running_half`), and
the two halves wait, together, the pair's time `StageCosts.pair_duration`: the F half its compute part
(F less its all-to-all, `StageTimes.a2a`), the B half the rest, which is the B's compute plus what of each
all-to-all the other half's compute cannot hide (`pair_waits`). The split is a choice: any split with that
sum runs the same, as the pair starts with both inputs there (the executor waits for the B half's input
before the F half) and its F half's output leaves after the B half (the lowering posts nothing between the
halves), as the simulator's pair. An op outside a pair waits its whole time, all-to-all included.

p2p latency (`comm` of the producing stage, the simulator's model) is emulated
with a time stamp written into the last two elements of every activation and
gradient a stage sends: the consumer waits until stamp + comm before it works.
A stamp is the shared CLOCK_MONOTONIC (`time.monotonic`, one clock for every
process of the host) minus an epoch the launcher gives all ranks, as whole
seconds and the fraction (two fp32 values: exact to well below a microsecond).
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import torch

from ..runtime import strict_p2p
from ..runtime.combined import running_half
from ..runtime.deadline import wait_until
from ..runtime.wgrad_store import get_store

LINEAR_WIDTH = 4  # features of the small linear layer whose weight gradient is deferred
STAMP = 2  # trailing elements of a message that carry its send time
MIN_ELEMENTS = LINEAR_WIDTH + STAMP


@dataclass(frozen=True)
class StageTimes:
    """One virtual stage's op times in seconds; `comm_in` / `comm_grad_in`: latency of the
    activation / gradient arriving from another rank (0 when the neighbour stage is on
    this rank, or absent)."""

    f: float
    b: float
    w: float
    bw: float
    comm_in: float = 0.0
    comm_grad_in: float = 0.0
    mb_scale: tuple = ()  # per microbatch, the factor on f, b, w and bw (`costs.mb_scale`; empty: none)
    a2a: float = 0.0  # the all-to-all part of an F and of a B or BW (`costs.a2a`), hidden only in a pair
    recv_stall: float = 1.0  # ROCm's pending-receive stall: the factor on a wait starting under one (`TimedWaits`)

    def of(self, kind: str, mb: Optional[int]) -> float:
        """Seconds of op `kind` ("f", "b", "w", "bw" or "a2a") of microbatch `mb`: its factor applied."""
        base = getattr(self, kind)
        if not self.mb_scale:
            return base
        if mb is None:
            raise RuntimeError("emulated ops with per-microbatch costs need to know their microbatch: megatron's "
                               "forward_step did not pass current_microbatch")
        return base * self.mb_scale[mb]

    def compute(self, kind: str, mb: Optional[int]) -> float:
        """Seconds of op `kind` of microbatch `mb` less its all-to-all: what it computes."""
        return self.of(kind, mb) - self.of("a2a", mb)


def pair_waits(f_times: StageTimes, f_mb: Optional[int], b_times: StageTimes, b_mb: Optional[int],
               b_kind: str) -> tuple[float, float]:
    """(F half's wait, B half's wait) of a pair run as two ops (module doc): the F's compute f - a, and
    (b - a') + max(0, a - (b - a')) + max(0, a' - (f - a)), b the B's or BW's time; together
    `StageCosts.pair_duration`, each time and all-to-all with its microbatch's factor."""
    a_f, a_b = f_times.of("a2a", f_mb), b_times.of("a2a", b_mb)
    compute_f, compute_b = f_times.compute("f", f_mb), b_times.compute("bw" if b_kind == "BW" else "b", b_mb)
    return compute_f, compute_b + max(0.0, a_f - compute_b) + max(0.0, a_b - compute_f)


def stage_times(costs, pp: int, chunks: int, placement: str, *, scale: float,
                microbatches: Optional[int] = None) -> list[StageTimes]:
    """Per virtual stage `StageTimes` of the planner's `Costs` (time unit x `scale` = seconds), with
    its per-microbatch factors (one per microbatch of a step of `microbatches`, `Costs.resolve`)."""
    from ..schedules.ir import BW, B, F, W, owner_of

    sc = costs.resolve(pp, chunks, placement, microbatches)
    n = pp * chunks
    rank = [owner_of(placement, pp, s)[0] for s in range(n)]
    out = []
    for s in range(n):
        comm_in = sc.comm[s - 1] if s > 0 and rank[s - 1] != rank[s] else 0.0
        comm_grad = sc.comm[s + 1] if s + 1 < n and rank[s + 1] != rank[s] else 0.0
        out.append(StageTimes(f=scale * sc.duration(F, s), b=scale * sc.duration(B, s), w=scale * sc.duration(W, s),
                              bw=scale * sc.duration(BW, s), comm_in=scale * comm_in, comm_grad_in=scale * comm_grad,
                              mb_scale=sc.mb_scale or (), a2a=scale * sc.a2a[s] if sc.a2a else 0.0))
    return out


def tighten_timer_slack() -> None:
    """Linux wakes a sleeping thread up to its timer slack late (50 us by default); 1 ns keeps
    emulated op times exact to the scheduler's wake-up. Best effort: other systems keep theirs."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK (linux/prctl.h), 1 ns
    except (OSError, AttributeError):
        pass


@dataclass
class OpLog:
    """What a chunk's emulated ops did: counted per (kind, microbatch key) and timed."""

    w_runs: dict = field(default_factory=dict)  # store key -> how many W waits ran under it
    w_in_backward: int = 0  # backwards that waited W themselves (not split: BW)
    deferred: int = 0  # W waits queued in the store
    comm_wait: float = 0.0  # seconds spent waiting for emulated p2p latency
    emulated: float = 0.0  # seconds of emulated op time waited
    spans: list = field(default_factory=list)  # (kind, start, end) of every emulated wait, time.monotonic()
    requested: list = field(default_factory=list)  # (kind, seconds asked for) of every emulated wait
    stalled: int = 0  # waits charged ROCm's receive stall (`TimedWaits`)

    def reset(self) -> None:
        self.w_runs.clear()
        self.w_in_backward = self.deferred = self.stalled = 0
        self.comm_wait = self.emulated = 0.0
        self.spans = []
        self.requested = []


class _Clock:
    def __init__(self, epoch: float) -> None:
        self.epoch = epoch

    def stamp(self, tensor: torch.Tensor) -> None:
        t = time.monotonic() - self.epoch
        whole = float(int(t))
        flat = tensor.view(-1)
        flat[-2] = whole
        flat[-1] = t - whole

    def sent_at(self, tensor: torch.Tensor) -> float:
        flat = tensor.detach().reshape(-1)
        return self.epoch + float(flat[-2]) + float(flat[-1])


class _Arrive(torch.autograd.Function):
    """First in the forward: waits for the input's emulated latency. Its backward (last in the
    backward) stamps the input gradient's send time."""

    @staticmethod
    def forward(ctx, x, chunk):
        ctx.chunk = chunk
        chunk._arrive(x, chunk.times.comm_in)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        ctx.chunk.clock.stamp(grad)
        return grad, None


class _Work(torch.autograd.Function):
    """Last in the forward: F's emulated time, then the output's send stamp. Its backward
    (first in the backward) waits for the gradient's latency, then B's time, and queues W's
    in the weight-gradient store (a B op of a step with W ops), or waits B and W at once (BW)."""

    @staticmethod
    def forward(ctx, y, chunk, mb):
        ctx.chunk, ctx.mb = chunk, mb
        chunk.fault_point("F", mb)
        pair = running_half()
        if pair.half == "F":  # a pair's F half: its compute; the B half waits the rest (module doc)
            pair.carry["f"] = (chunk.times, mb)
            chunk._work(chunk.times.compute("f", mb), "F")
        else:
            chunk._work(chunk.times.of("f", mb), "F")
        out = y.clone()
        chunk.clock.stamp(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        chunk, mb = ctx.chunk, ctx.mb
        if not chunk.post_process:
            chunk._arrive(grad, chunk.times.comm_grad_in)
        chunk.fault_point("B", mb)
        store = get_store()
        split = store.capturing and store.splitting
        pair = running_half()
        if pair.half == "B" and "f" in pair.carry:  # a pair's B half: the pair's time less the F half's wait
            b_wait = pair_waits(*pair.carry["f"], chunk.times, mb, pair.b_kind)[1]
            if split and pair.b_kind == "BW":  # a BW of a splitting step waits its W as its own wait below
                b_wait = max(0.0, b_wait - chunk.times.of("w", mb))
        else:
            b_wait = chunk.times.of("b" if split else "bw", mb)
        if split:
            chunk._work(b_wait, "B")
            key = store.current_key
            w = chunk.times.of("w", mb)

            def weight_gradient() -> None:
                chunk._work(w, "W")
                chunk.log.w_runs[key] = chunk.log.w_runs.get(key, 0) + 1

            store.defer(weight_gradient)
            chunk.log.deferred += 1
        else:
            chunk._work(b_wait, "BW")
            chunk.log.w_in_backward += 1
        return grad, None, None


class _CurrentMicrobatch:
    """Where megatron's forward_step tells a chunk its microbatch: `set_current_microbatch` sets
    `current_microbatch` on each of `model.decoder.layers` (this object is its own one layer)."""

    def __init__(self) -> None:
        self.layers = (self,)
        self.current_microbatch: Optional[int] = None


class TimedWaits:
    """The emulated waits of a chunk that has `clock` (a `_Clock`), `log` (an `OpLog`) and `times`.

    ROCm's stall (PyTorch #172668), the simulator's model (schedules/rendezvous.py): a wait that
    starts while this rank's strict p2p queue holds a receive not completed waits `times.recv_stall`
    times as long. Only the strict queue knows its pending receives: under plain gloo p2p, and for
    megatron's own schedules (their p2p waits before compute), nothing is charged."""

    clock: "_Clock"
    log: OpLog
    times: StageTimes

    def _arrive(self, tensor: torch.Tensor, latency: float) -> None:
        if latency <= 0:
            return
        start = time.monotonic()
        wait_until(self.clock.sent_at(tensor) + latency)
        self.log.comm_wait += time.monotonic() - start

    fault: Optional[tuple] = None  # (action, kind, mb): `emulate --fault`, once
    slowdown: float = 1.0  # `emulate --straggler`: the factor on every op's time of this rank

    def fault_point(self, kind: str, mb: Optional[int]) -> None:
        """An injected fault as op `kind` of microbatch `mb` starts: `kill` ends the process at once
        (SIGKILL: no report, no word), `stall` never ends the op (a hung kernel, a lost GPU)."""
        if self.fault is None or self.fault[1:] != (kind, mb):
            return
        action, self.fault = self.fault[0], None
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        while True:  # a signal's handler (SIGUSR1: a postmortem report) runs, then the stall goes on
            time.sleep(3600)

    def _work(self, seconds: float, kind: str) -> None:
        seconds *= self.slowdown
        if self.times.recv_stall != 1.0 and strict_p2p.pending_receives():
            seconds *= self.times.recv_stall
            self.log.stalled += 1
        start = time.monotonic()
        wait_until(start + seconds)
        self.log.emulated += seconds
        self.log.spans.append((kind, start, time.monotonic()))
        self.log.requested.append((kind, seconds))


class EmulatedChunk(torch.nn.Module, TimedWaits):
    """One virtual stage of an emulated model (module doc). `config` is a megatron-core
    TransformerConfig (what `get_model_config` and the schedules read); its hidden_size is
    the number of fp32 elements of one microbatch's activation (with sequence length and
    microbatch size 1)."""

    def __init__(self, config: Any, stage: int, num_stages: int, times: StageTimes, *, epoch: float,
                 vp_stage: Optional[int] = None) -> None:
        super().__init__()
        from megatron.core.enums import ModelType
        from megatron.core.tensor_parallel import ColumnParallelLinear

        if config.hidden_size < MIN_ELEMENTS:
            raise ValueError(f"an emulated activation needs at least {MIN_ELEMENTS} elements, got "
                             f"{config.hidden_size}")
        self.config = config
        self.model_type = ModelType.encoder_or_decoder
        self.stage, self.num_stages, self.vp_stage = stage, num_stages, vp_stage
        self.pre_process, self.post_process = stage == 0, stage == num_stages - 1
        self.times = times
        self.clock = _Clock(epoch)
        self.log = OpLog()
        self.input_tensor: Optional[torch.Tensor] = None
        self.decoder = _CurrentMicrobatch()  # the microbatch megatron's forward_step runs (module doc)
        self.linear = ColumnParallelLinear(LINEAR_WIDTH, LINEAR_WIDTH, config=config,
                                           init_method=torch.nn.init.eye_, bias=False, gather_output=False,
                                           skip_bias_add=True)

    # -- what megatron calls ---------------------------------------------------------------
    def set_input_tensor(self, input_tensor) -> None:
        if isinstance(input_tensor, (list, tuple)):
            input_tensor = input_tensor[0]
        self.input_tensor = input_tensor

    def forward(self, shape: Sequence[int]) -> torch.Tensor:
        """One microbatch through this stage; `shape` is the activation's [seq, batch, hidden]."""
        if self.pre_process:  # as an embedding's output: a tensor the backward reaches (the linear's B splits)
            x = torch.ones(shape, dtype=torch.float32, requires_grad=True)
        else:
            if self.input_tensor is None:
                raise RuntimeError(f"emulated stage {self.stage} ran its forward without an input tensor")
            x = _Arrive.apply(self.input_tensor, self)
        head, rest = x[..., :LINEAR_WIDTH], x[..., LINEAR_WIDTH:]
        mixed, _ = self.linear(head)
        # the mean, not the sum: with the identity-initialised weight a stage passes its input on
        # unchanged, so activations and gradients keep their size through 32 stages (a sum doubled
        # them per stage: a gradient norm of 1e10 at pp=32, clipped and redone every step)
        y = torch.cat([(head + mixed) * 0.5, rest], dim=-1)
        return _Work.apply(y, self, self.decoder.current_microbatch)


def loss_func(output: torch.Tensor):
    """megatron's loss-function contract (the 2-tuple form): a scalar and the reported dict."""
    loss = output[..., :LINEAR_WIDTH].float().mean()
    return loss, {"lm loss": loss.detach()}


def forward_step_func(shape: Sequence[int]):
    """A megatron `forward_step_func` for emulated chunks with activations of `shape`."""
    def step(data_iterator, model):
        return model(shape), loss_func

    return step


def emulated_config(*, pp: int, chunks: int, elements: int, **overrides):
    """The megatron-core TransformerConfig emulated chunks carry: fp32, CPU-initialised, one
    head, hidden_size = activation elements, one layer per virtual stage."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    kwargs = dict(num_layers=pp * chunks, hidden_size=elements, num_attention_heads=1, ffn_hidden_size=elements,
                  use_cpu_initialization=True, params_dtype=torch.float32, pipeline_dtype=torch.float32,
                  bf16=False, fp16=False, gradient_accumulation_fusion=False, hidden_dropout=0.0,
                  attention_dropout=0.0, pipeline_model_parallel_size=pp,
                  virtual_pipeline_model_parallel_size=chunks if chunks > 1 else None)
    kwargs.update(overrides)
    return TransformerConfig(**kwargs)
