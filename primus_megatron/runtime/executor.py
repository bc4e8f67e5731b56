"""Run one rank's lowered op list for one training (or evaluation) step.

F and B/BW ops call megatron-core's own `forward_step` / `backward_step`, so
loss scaling, returned loss dicts, timers, autocast and per-token losses are
exactly megatron's. B runs inside a weight-gradient capture; W runs what B
deferred. What each op takes and gives comes from the lowering
(`Lowered.op_io`): activations and gradients crossing ranks travel by the
Send/Recv items it placed; the V turn (stage p-1 -> p, both on the last rank)
is handed over locally.

megatron-core 0.16.1, `pipeline_parallel/schedules.py`: `forward_step` (311)
calls `forward_step_func(data_iterator, model)`; on the last stage its loss
function's 3-tuple `(loss, num_tokens, reported)` is divided in place by
num_tokens and num_microbatches unless `calculate_per_token_loss`, a 2-tuple
`(loss, reported)` multiplied by the context-parallel size and divided by
num_microbatches (`forward_step_calc_loss`, 218-270; a reported value sharing
the loss's storage is divided too). `backward_step` (446) applies
`config.grad_scale_func` to the last stage's loss (478) and uses
`custom_backward` when `deallocate_pipeline_outputs` (487);
`deallocate_output_tensor` (154) frees a sent output's data only then.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist

from ..health import flight
from ..schedules import B, BW, F, W, Batch, Lowered, Message, Op, Recv, Send
from ..schedules.lowering import OpIO
from . import offload as activation_offload
from . import te_wgrad
from .combined import combined_step, half_of_pair, loss_on, pair_halves
from .fp8_state import DelayedScalingSnapshot
from .grad_sync import GradSync
from .p2p import P2P, Post
from .wgrad_store import get_store


@dataclass
class OpRecord:
    """A measured op: same fields the planner's Span has, so plots take both. On a GPU the marks
    are CUDA/HIP events (profiler.EventClock), read into seconds only when asked for, after the
    step: recording one never waits."""

    rank: int
    op: Op
    stage: int
    start_mark: Any
    end_mark: Any
    clock: Any = None  # None: the marks are seconds
    # "" alone; an overlapped pair's: "whole" (one call: the pair's time), "dup" (its other half, the same
    # time again) or "half" (a pair run as two ops: each half's own time)
    pair: str = ""

    @property
    def start(self) -> float:
        return self.start_mark if self.clock is None else self.clock.seconds(self.start_mark)

    @property
    def end(self) -> float:
        return self.end_mark if self.clock is None else self.clock.seconds(self.end_mark)


class _MicrobatchTee:
    """One data iterator shared by several chunks: each (chunk, microbatch)
    gets the microbatch-th item, fetched once."""

    def __init__(self, iterator) -> None:
        self.iterator = iterator
        self.items: list = []

    def get(self, index: int):
        while len(self.items) <= index:
            self.items.append(next(self.iterator))
        return self.items[index]

    def view(self, mb: int):
        tee = self

        class View:
            def __init__(self) -> None:
                self.next_index = mb

            def __iter__(self):
                return self

            def __next__(self):
                item = tee.get(self.next_index)
                self.next_index += 1
                return item

        return View()


@dataclass
class StepContext:
    """What one call of forward_backward_func needs besides the schedule."""

    forward_step_func: Callable
    data_iterators: list  # per chunk: an iterator, a _MicrobatchTee or None
    model: Sequence[torch.nn.Module]
    num_microbatches: int
    config: Any
    model_type: Any
    tensor_shape: tuple
    forward_only: bool = False
    collect_non_loss_data: bool = False
    first_val_step: Optional[bool] = None
    cp_group_size: int = 1
    record_timeline: bool = True
    profile: Any = None  # a profiler.Profile to fill (measured costs), or None
    offload_plan: Any = None  # a schedules.offload.OffloadPlan: activations to move to host and back, or None
    # emulated devices: seconds per time unit of the offload plan's copy times (the copies then take
    # that long on emulated lanes); None: the copies take their own time
    emulated_copy_seconds: Optional[float] = None


@dataclass
class StepResult:
    forward_data_store: list
    total_num_tokens: torch.Tensor
    timeline: list = field(default_factory=list)
    wgrads_deferred: int = 0
    wgrads_run: int = 0
    peak_activation_bytes: Optional[float] = None  # measured when profiling
    offloaded: int = 0  # F ops whose saved activations went to host and back
    peak_host_bytes: int = 0  # the host pool's peak (it is empty when the step ends)
    offloaded_bytes: int = 0  # what the offloaded F ops saved, in all
    copies: list = field(default_factory=list)  # emulated lanes: (lane, key, start, end) of each copy
    offloaded_w: int = 0  # B ops whose W share (what they kept for W) went to host and back
    offloaded_w_bytes: int = 0  # what those W shares held, in all
    offload_copies: Any = None  # the step's offload_copies object: `.seconds()` times its copies (bandwidth)
    peak_offload_device_bytes: int = 0  # the most offload's reload buffers held on the device at once
    pinned_held_bytes: Optional[int] = None  # on a GPU: pinned bytes torch's host allocator holds after the step
    offload_kept_bytes: int = 0  # planned storages left on the device: something else kept them alive
    combined_pairs: int = 0  # overlapped F&B pairs run as one call of megatron's combined step
    marks: tuple = ()  # (start, end) clock marks of the whole step on this rank (in-flight health's period)
    clock: Any = None  # the clock of `marks`

    @property
    def period(self) -> float:
        """Seconds from the step's start to its end on this rank (waits on a GPU's events)."""
        return self.clock.elapsed(*self.marks)

    @property
    def copy_seconds(self) -> list:
        """(direction, bytes, seconds) of each copy the step's offload made (waits for them on a GPU)."""
        return self.offload_copies.seconds() if self.offload_copies is not None else []


class _Replay:
    """A data iterator whose items of this step can be served again (a step
    restarted after a failed post-validation re-reads the same microbatches)."""

    def __init__(self, iterator) -> None:
        self.iterator = iterator
        self.items: list = []
        self.position = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.position == len(self.items):
            self.items.append(next(self.iterator))
        self.position += 1
        return self.items[self.position - 1]

    def rewind(self) -> None:
        self.position = 0


@functools.lru_cache(maxsize=None)
def backward_takes_model_type(backward_step: Callable) -> bool:
    """megatron's backward_step(input, output, output_grad, model_type, config) before 0.19;
    (input, output, output_grad, config) since."""
    return "model_type" in inspect.signature(backward_step).parameters


class _Step:
    """The state of one rank's step; `execute` runs one lowered item."""

    def __init__(self, lowered: Lowered, rank: int, p2p: P2P, ctx: StepContext) -> None:
        from megatron.core.pipeline_parallel import schedules as mschedules

        self.m = mschedules
        self.lowered, self.rank, self.p2p, self.ctx = lowered, rank, p2p, ctx
        self.sched = lowered.schedule
        self.n = self.sched.num_stages
        # what each op takes and gives, as the lowering placed it: per item, and per message its ops
        self.io: tuple[Optional[OpIO], ...] = lowered.op_io(rank)
        self.maker = {io.gives: io for io in self.io if io is not None and io.gives is not None}
        self.taker = {io.takes: io for io in self.io if io is not None and io.takes is not None}
        self.config = ctx.config
        self.store = get_store()
        self.device = next(ctx.model[0].parameters()).device
        self.dtype = self.config.pipeline_dtype or torch.float32
        # TE layers: routed so their backward queues the weight gradient in our store (B) or runs it as that
        # backward ends (BW); refused with a reason when they cannot deliver it where the schedule expects
        te_wgrad.prepare_step(ctx.model, splitting=not ctx.forward_only and self.sched.splits_backward)
        self.sync = GradSync(self.config, ctx.model, lowered.ranks[rank], enabled=not ctx.forward_only)
        self.timeline: list[OpRecord] = []
        from .profiler import clock_for

        self.clock = clock_for(self.device)  # events on a GPU: the ops' GPU time, no host waits
        self._durations: list = []  # (kind, stage, start mark, end mark) of a profiled step
        # --overlap-moe-expert-parallel-comm: every F and B through megatron's combined step, a pair's halves
        # in one call (runtime/combined.py); None: megatron's forward_step / backward_step
        self.combined = combined_step(self.config, ctx.model, ctx.forward_only)
        self.pair_of = halves = pair_halves(lowered.ranks[rank], self.sched.paired(rank))
        self.pairs = halves if self.combined else {}
        # a pair run as two ops (F then B): each knows it is a half and the B half's kind (combined.RunningHalf)
        b_kinds = {second: lowered.ranks[rank][second].kind for second in halves.values()}
        self.halves = {**{first: ("F", b_kinds[second]) for first, second in halves.items()},
                       **{second: ("B", kind) for second, kind in b_kinds.items()}}
        self.limit = len(lowered.ranks[rank])  # a pair runs as one only with both halves before this item
        self.memory = None
        if ctx.profile is not None:
            from .profiler import OpMemory

            self.memory = OpMemory(self.device, params=[p for chunk in ctx.model for p in chunk.parameters()],
                                   chunks=ctx.model)
        self.reset()

    def reset(self) -> None:
        if getattr(self, "offload", None) is not None:
            self.offload.clear()
        self.offload = None if self.ctx.forward_only else activation_offload.for_rank(
            self.ctx.offload_plan, self.rank, self.device, [p for chunk in self.ctx.model for p in chunk.parameters()],
            emulated_copy_seconds=self.ctx.emulated_copy_seconds)
        self.saved: dict[tuple[int, int], tuple] = {}  # (mb, chunk) -> (input, output) awaiting backward
        self.produced: dict[Message, torch.Tensor] = {}  # tensors to send or hand over locally
        self.recvs: dict[Message, Any] = {}
        self.sent_outputs: dict[int, tuple[int, int]] = {}  # id(pending send) -> (mb, chunk) of the output
        self.in_flight: dict[tuple[int, int], Any] = {}  # (mb, chunk) -> its output's pending send
        self.forward_data_store: list = []
        self.ran_in_pair: set = set()  # item indices of pairs' second halves, run with their first
        self.f_half_out = None  # (op, output): a pair's F half run as an op, moved to host after its B half
        self.combined_pairs = 0
        self.total_num_tokens = torch.zeros([], dtype=torch.int, device=self.device)
        self.store.reset_counters()

    # -- helpers ---------------------------------------------------------------------------
    def data_for(self, chunk: int, mb: int):
        it = self.ctx.data_iterators[chunk]
        return it.view(mb) if isinstance(it, _MicrobatchTee) else it

    def incoming(self, io: OpIO) -> torch.Tensor:
        """The message `io`'s op takes: handed over on this rank (the V turn) or received."""
        msg = io.takes
        if io.takes_from < 0:
            tensor = self.produced.pop(msg)
            handed = tensor.detach()  # keeps the storage even if the producer's output is freed below
            if msg.kind == F:
                self.m.deallocate_output_tensor(tensor, self.config.deallocate_pipeline_outputs)
            return handed
        return self.p2p.wait(self.recvs.pop(msg), op=io.label())

    def release_sent(self, pending) -> None:
        key = self.sent_outputs.pop(id(pending), None)
        if key is not None:
            entry = self.saved.get(key)
            self.m.deallocate_output_tensor(entry[1] if entry is not None else None,
                                            self.config.deallocate_pipeline_outputs)
            self.in_flight.pop(key, None)

    def post(self, items, *, batched: bool) -> None:
        """Post Send/Recv items: one alone, or a Batch's together (one batch_isend_irecv)."""
        posts = []
        for item in items:
            if isinstance(item, Recv):
                buf = torch.empty(self.ctx.tensor_shape, dtype=self.dtype, device=self.device)
                posts.append(Post(False, buf, item.peer, str(item.msg), self.taker[item.msg].label()))
            else:
                tensor = self.produced.pop(item.msg).contiguous()
                posts.append(Post(True, tensor, item.peer, str(item.msg), self.maker[item.msg].label()))
        for item, pending in zip(items, self.p2p.post(posts, batched=batched)):
            if isinstance(item, Recv):
                self.recvs[item.msg] = pending
            elif item.msg.kind == F:  # an activation: its F's output, freed once sent
                op = self.maker[item.msg].op
                key = (op.mb, op.chunk)
                self.sent_outputs[id(pending)] = key
                self.in_flight[key] = pending

    def _start(self):
        return self.clock.mark()

    def _end(self):
        return self.clock.mark()

    # -- one item --------------------------------------------------------------------------
    def execute(self, index: int, item) -> None:
        ctx = self.ctx
        if isinstance(item, (Send, Recv)):
            self.post((item,), batched=False)
            return
        if isinstance(item, Batch):
            self.post(item.items, batched=True)
            return
        if index in self.ran_in_pair:
            return
        second = self.pairs.get(index)
        if second is not None and second < self.limit and not self.memory:
            self._execute_pair(index, second)
            return
        io = self.io[index]
        op, key = item, (item.mb, item.chunk)
        self.sync.before(index)
        if self.offload:
            self.offload.before(op)  # the reloads the plan issues as this op starts
        if self.pair_of.get(index, self.limit) < self.limit:  # not across a post-validation prefix's end
            self._await_second_half(self.pair_of[index])
        flight.op_started(io)  # what a postmortem report says this rank was doing
        with half_of_pair(*self.halves.get(index, (None, None))):
            if op.kind == F:
                start, output = self._forward(io)
            elif op.kind in (B, BW):
                start, mem_delta = self._backward(io)
            else:  # W
                start = self._start()
                if self.memory:
                    self.memory.begin()
                self.store.run(key, what=f"{op} on pipeline rank {self.rank}")
                mem_delta = self.memory.weight(key) if self.memory else None
        end = self._end()
        flight.op_ended()
        if self.memory and op.kind == F:  # counted outside the op's time
            self.memory.forward_done(key, output)
            mem_delta = self.memory.forward_bytes(key)
        if self.offload:  # to host: an F's saved tensors (after the profiler's graph walk), what a B keeps for W
            moved = self._moved_output(io, output) if op.kind == F else None
            if self.pair_of.get(index, self.limit) < self.limit:
                # the F half of a pair run as two ops: its activations go out as the pair ends, after its B
                # half, where the plan times the copy
                self.f_half_out = (op, moved)
            else:
                if self.f_half_out is not None and self.halves.get(index, (None,))[0] == "B":
                    self.offload.after(*self.f_half_out)  # first on the lane, as planned
                    self.f_half_out = None
                self.offload.after(op, output=moved)
        self.sync.after(index)
        if ctx.record_timeline:
            self.timeline.append(OpRecord(self.rank, op, io.stage, start, end, self._clock_or_none(),
                                          "half" if index in self.halves else ""))
        if ctx.profile is not None:
            self._durations.append((op.kind, io.stage, start, end))  # read after the step (events)
            ctx.profile.memory[(op.kind, io.stage)].append(mem_delta)
        for done in self.p2p.reap_sends():
            self.release_sent(done)

    def _moved_output(self, io: OpIO, output):
        """An F's output, for offload to move with its saved tensors though the executor holds it: only where
        megatron frees its data once sent (deallocate_pipeline_outputs); handed over locally (the V turn) or
        kept, it stays (None)."""
        return output if io.gives_to >= 0 and self.config.deallocate_pipeline_outputs else None

    def _await_second_half(self, second: int) -> None:
        """A pair run as two ops starts as a pair does, with both halves' inputs there: the B half's
        received gradient (its emulated latency, if any, inside the B) and its reloaded activations are
        waited for before the F half."""
        io = self.io[second]
        if io.takes is not None and io.takes_from >= 0:
            self.p2p.wait(self.recvs[io.takes], op=io.label())
        if self.offload:
            self.offload.before(io.op)  # reloads a given plan names at the B half: as the pair starts
            self.offload.ready((io.op.mb, io.op.chunk))

    def _execute_pair(self, first: int, second: int) -> None:
        """An overlapped pair (F, then a B or BW) as one call of megatron's combined step; both
        halves are recorded with the pair's time. With offload the pair issues both halves' reloads as
        it starts, its B half's activations are back before the call, the F half's saved tensors are
        recorded inside it (`ActivationOffload.forward` leaves what the B half's backward saves alone)
        and go out as it ends, with the B half's W share. A profiled step (whose memory is measured op
        by op) runs the halves apart."""
        f_io, b_io = self.io[first], self.io[second]
        f_op, b_op = f_io.op, b_io.op
        self.sync.before(first)
        self.sync.before(second)
        if self.offload:
            self.offload.before(f_op)
            self.offload.before(b_op)
        input_tensor = self._forward_input(f_io)
        b_inputs = self._backward_input(b_io)
        start = self._start()
        flight.op_started(f_io)
        saving = (self.offload.forward((f_op.mb, f_op.chunk), keep=input_tensor) if self.offload
                  else contextlib.nullcontext())
        with self._wgrad_capture(b_op), saving:
            output, num_tokens, input_grad = self._combined(f_io, input_tensor, b_io, b_inputs)
        self._backward_ran(b_op)
        self._forward_done(f_io, input_tensor, output, num_tokens)
        self._backward_done(b_io, input_grad)
        end = self._end()
        flight.op_ended()
        if self.offload:
            self.offload.after(f_op, output=self._moved_output(f_io, output))
            self.offload.after(b_op)
        self.ran_in_pair.add(second)
        self.combined_pairs += 1
        for index, io, tag in ((first, f_io, "whole"), (second, b_io, "dup")):
            self.sync.after(index)
            if self.ctx.record_timeline:
                self.timeline.append(OpRecord(self.rank, io.op, io.stage, start, end, self._clock_or_none(), tag))
        for done in self.p2p.reap_sends():
            self.release_sent(done)

    def _combined(self, f_io: Optional[OpIO], f_input, b_io: Optional[OpIO] = None, b_inputs=(None, None, None)):
        """megatron's combined_forward_backward_step for an F, a B/BW, or both: (output, num_tokens, input grad)."""
        ctx, f = self.ctx, (f_io.op if f_io is not None else None)
        b_input, b_output, b_grad = b_inputs
        with loss_on(f_io is not None and f_io.stage == self.n - 1, ctx.cp_group_size):
            return self.combined(
                ctx.forward_step_func, self.data_for(f.chunk, f.mb) if f else None, ctx.model[f.chunk] if f else None,
                ctx.num_microbatches, f_input, self.forward_data_store,
                ctx.model[b_io.op.chunk] if b_io is not None else None, b_input, b_output, b_grad, self.config,
                f_model_chunk_id=f.chunk if f and len(ctx.model) > 1 else None,
                collect_non_loss_data=ctx.collect_non_loss_data,
                is_first_microbatch=bool(f) and self.m.check_first_val_step(ctx.first_val_step, ctx.forward_only,
                                                                            f.mb == 0),
                current_microbatch=f.mb if f else None)

    def _forward_input(self, io: OpIO):
        if io.takes is None:
            return None
        return self.incoming(io).requires_grad_(not self.ctx.forward_only)

    def _forward_done(self, io: OpIO, input_tensor, output, num_tokens) -> None:
        self.total_num_tokens += num_tokens
        if io.gives is not None:
            self.produced[io.gives] = output
        if not self.ctx.forward_only:
            self.saved[(io.op.mb, io.op.chunk)] = (input_tensor, output)

    def _forward(self, io: OpIO):
        """An F op: megatron's forward_step on the input it takes; returns (start mark, output)."""
        ctx, op = self.ctx, io.op
        key = (op.mb, op.chunk)
        input_tensor = self._forward_input(io)
        start = self._start()  # after the input arrived: waiting is idle time, not work
        with self.memory.forward(key) if self.memory else contextlib.nullcontext(), \
                self.offload.forward(key, keep=input_tensor) if self.offload else contextlib.nullcontext():
            if self.combined is not None:
                output, num_tokens, _ = self._combined(io, input_tensor)
                self._forward_done(io, input_tensor, output, num_tokens)
                return start, output
            output, num_tokens = self.m.forward_step(
                ctx.forward_step_func, self.data_for(op.chunk, op.mb), ctx.model[op.chunk], ctx.num_microbatches,
                input_tensor, self.forward_data_store, self.config, ctx.cp_group_size,
                collect_non_loss_data=ctx.collect_non_loss_data,
                is_first_microbatch=self.m.check_first_val_step(ctx.first_val_step, ctx.forward_only, op.mb == 0),
                current_microbatch=op.mb, vp_stage=op.chunk if len(ctx.model) > 1 else None,
                is_last_stage=io.stage == self.n - 1)
        self._forward_done(io, input_tensor, output, num_tokens)
        return start, output

    def _backward_input(self, io: OpIO) -> tuple:
        """(input, output) the op's F saved and the gradient it takes; its output's send finished first."""
        key = (io.op.mb, io.op.chunk)
        grad = None if io.takes is None else self.incoming(io)
        pending = self.in_flight.get(key)
        if pending is not None:  # its output must be sent (and freed) before backward
            self.p2p.finish_send(pending, op=str(io.op))
            self.release_sent(pending)
        if self.offload:
            self.offload.ready(key)  # the B's stream waits for its reload
        input_tensor, output = self.saved.pop(key)
        return input_tensor, output, grad

    def _whole(self, op: Op) -> bool:
        # a BW in a step whose linear layers defer their weight gradients (a schedule that mixes BW with
        # B + W, as DualPipeV does): captured like a B's and run at once, inside the op
        return op.kind == BW and self.sched.splits_backward

    def _wgrad_capture(self, op: Op, held: Optional[list] = None):
        """Our store takes the op's weight gradients (a B's for its W, a splitting step's BW's at its end)."""
        if op.kind == B or self._whole(op):
            return self.store.capture((op.mb, op.chunk), held=held)
        return contextlib.nullcontext()

    def _backward_ran(self, op: Op) -> None:
        if self._whole(op):
            self.store.run((op.mb, op.chunk), what=f"{op} on pipeline rank {self.rank}")
        if self.offload:
            self.offload.release((op.mb, op.chunk))

    def _backward_done(self, io: OpIO, input_grad) -> None:
        if io.gives is not None:
            self.produced[io.gives] = input_grad

    def _backward(self, io: OpIO):
        """A B op (its weight gradient deferred to W) or a BW op: megatron's backward_step on the
        gradient it takes; returns (start mark, measured memory change or None)."""
        ctx, op = self.ctx, io.op
        key = (op.mb, op.chunk)
        input_tensor, output, grad = self._backward_input(io)
        start = self._start()
        held = [] if self.memory else None  # what the deferred W keeps alive, for measured memory
        if self.memory:
            self.memory.begin()
        with self._wgrad_capture(op, held):
            if self.combined is not None:
                input_grad = self._combined(None, None, io, (input_tensor, output, grad))[2]
            elif backward_takes_model_type(self.m.backward_step):
                input_grad = self.m.backward_step(input_tensor, output, grad, ctx.model_type, self.config)
            else:  # megatron-core 0.19 dropped model_type
                input_grad = self.m.backward_step(input_tensor, output, grad, self.config)
        self._backward_ran(op)
        mem_delta = self.memory.backward(key, held, full=op.kind == BW) if self.memory else None
        self._backward_done(io, input_grad)
        return start, mem_delta

    def _clock_or_none(self):
        return None if self.clock.kind == "host" else self.clock

    def finish(self) -> StepResult:
        for done in self.p2p.wait_all_sends():
            self.release_sent(done)
        if not self.ctx.forward_only:
            self.store.assert_empty()
        if self.offload:
            self.offload.assert_empty()
        leftovers = [k for k in (*self.saved, *self.produced, *self.recvs)]
        assert not leftovers, f"pipeline rank {self.rank} ended the step with unconsumed tensors: {leftovers[:4]}"
        if self.ctx.profile is not None:
            for kind, stage, start, end in self._durations:
                self.ctx.profile.durations[(kind, stage)].append(self.clock.elapsed(start, end))
            self._durations = []
            self.ctx.profile.steps += 1
        return StepResult(self.forward_data_store, self.total_num_tokens, self.timeline, self.store.deferred,
                          self.store.ran, self.memory.peak if self.memory else None,
                          self.offload.moved if self.offload else 0,
                          self.offload.peak_host_bytes if self.offload else 0,
                          self.offload.moved_bytes if self.offload else 0,
                          list(self.offload.lanes.copies) if self.offload and self.offload.lanes else [],
                          self.offload.moved_w if self.offload else 0,
                          self.offload.moved_w_bytes if self.offload else 0,
                          self.offload.copies if self.offload else None,
                          self.offload.peak_device_bytes if self.offload else 0,
                          self.offload.copies.held_bytes if self.offload else None,
                          self.offload.kept_bytes if self.offload else 0, self.combined_pairs)

    def drain(self, batch: Optional[Batch]) -> None:
        """After a failed validation: receive what peers sent during their prefixes (one batch,
        `Prefixes.drain_batch`, which is what the prefix's hang check proved), drop everything
        of the abandoned attempt."""
        if batch is not None:
            self.post(batch.items, batched=True)
        for msg, pending in list(self.recvs.items()):
            self.p2p.wait(pending, op=f"drain after a failed post-validation ({msg})")
        self.p2p.wait_all_sends(op="drain after a failed post-validation")
        self.reset()


def run_step(lowered: Lowered, rank: int, p2p: P2P, ctx: StepContext, *, validate=None, prefix=None) -> StepResult:
    """Run this rank's items. With `validate` (a pending post-validation of the
    previous optimizer step), first run only the prefix (`schedules.prefix`),
    then call validate(); True means the step it validated was redone
    differently, so the prefix is drained, dropped and the step restarted."""
    splitting = not ctx.forward_only and lowered.schedule.splits_backward
    # the store starts empty (nothing of an earlier step that raised may run in this step's W ops)
    with get_store().step(splitting=splitting):
        step = _Step(lowered, rank, p2p, ctx)
        flight.identify(rank, lowered.schedule.pp, dist.get_rank())
        flight.step_started(step.timeline)
        begin = step.clock.mark()
        try:
            with step.sync.step():
                result = _run_items(step, lowered.ranks[rank], ctx, validate, prefix)
            result.marks, result.clock = (begin, step.clock.mark()), step.clock
            return result
        except BaseException:
            if step.offload is not None:
                step.offload.clear()  # a failed step keeps nothing on host or device
            raise


def _run_items(step: "_Step", items, ctx: StepContext, validate, prefix) -> StepResult:
    """The items of one step, with the post-validation prefix first when one is pending."""
    rank = step.rank
    start = 0
    if validate is not None:
        scaling = DelayedScalingSnapshot(ctx.model)  # what the prefix's FP8 casts move (fp8_state.py)
        end = prefix.ends[rank]
        step.limit = end  # a pair across the prefix's end runs as two ops (validation may zero gradients between)
        for index in range(end):
            step.execute(index, items[index])
        step.limit = len(items)
        t = step.clock.mark()
        redo = validate()
        step.sync.resume()  # validate() may zero DDP's buffers, which leaves DDP's no_sync mode
        if ctx.record_timeline:
            step.timeline.append(OpRecord(rank, Op("VALIDATE", -1, 0), -1, t, step.clock.mark(), step._clock_or_none()))
        if redo:
            step.drain(prefix.drain_batch(step.lowered, rank))
            scaling.restore()
            for it in ctx.data_iterators:
                if isinstance(it, _Replay):
                    it.rewind()
        else:
            start = end
    for index in range(start, len(items)):
        step.execute(index, items[index])
    result = step.finish()
    return result
