"""Run one rank's lowered op list for one training (or evaluation) step.

F and B/BW ops call megatron-core's own `forward_step` / `backward_step`, so
loss scaling, returned loss dicts, timers, autocast and per-token losses are
exactly megatron's. B runs inside a weight-gradient capture; W runs what B
deferred. Activations crossing ranks use the Send/Recv items the lowering pass
placed; the V turn (stage p-1 -> p, both on the last rank) stays local.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch

from ..schedules import B, BW, F, W, Lowered, Message, Op, Recv, Send
from .linear_hooks import defer_te_wgrads, te_delayed_modules
from .p2p import P2P
from .wgrad_store import get_store


@dataclass
class OpRecord:
    """A measured op: same fields the planner's Span has, so plots take both."""

    rank: int
    op: Op
    stage: int
    start: float
    end: float


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


@dataclass
class StepResult:
    forward_data_store: list
    total_num_tokens: torch.Tensor
    timeline: list = field(default_factory=list)
    wgrads_deferred: int = 0
    wgrads_run: int = 0


def run_step(lowered: Lowered, rank: int, p2p: P2P, ctx: StepContext) -> StepResult:
    from megatron.core.pipeline_parallel.schedules import (
        backward_step,
        check_first_val_step,
        deallocate_output_tensor,
        forward_step,
    )

    sched = lowered.schedule
    n = sched.num_stages
    config = ctx.config
    store = get_store()
    store.reset_counters()
    device = next(ctx.model[0].parameters()).device
    dtype = config.pipeline_dtype or torch.float32
    te_modules = [te_delayed_modules(chunk) for chunk in ctx.model]

    saved: dict[tuple[int, int], tuple] = {}  # (mb, chunk) -> (input, output) awaiting backward
    produced: dict[Message, torch.Tensor] = {}  # tensors to send or hand over locally
    recvs: dict[Message, Any] = {}
    sent_outputs: dict[int, tuple[int, int]] = {}  # id(pending send) -> (mb, chunk) whose output it carries
    in_flight: dict[tuple[int, int], Any] = {}  # (mb, chunk) -> its output's pending send
    forward_data_store: list = []
    total_num_tokens = torch.zeros([], dtype=torch.int, device=device)
    timeline: list[OpRecord] = []
    t0 = time.perf_counter()

    no_sync = _GradSync(config, len(ctx.model), enabled=not ctx.forward_only)
    last_backward = _last_backward_index(lowered.ranks[rank], len(ctx.model)) if not ctx.forward_only else {}

    def data_for(chunk: int, mb: int):
        it = ctx.data_iterators[chunk]
        return it.view(mb) if isinstance(it, _MicrobatchTee) else it

    def incoming(msg: Message, op: Op) -> torch.Tensor:
        if msg in produced:  # same-rank hand-over (V turn)
            tensor = produced.pop(msg)
            handed = tensor.detach()  # keeps the storage even if the producer's output is freed below
            if msg.kind == F:
                deallocate_output_tensor(tensor, config.deallocate_pipeline_outputs)
            return handed
        return p2p.wait(recvs.pop(msg), op=f"{op} (microbatch {op.mb}, chunk {op.chunk}, stage {msg.dst_stage})")

    def release_sent(pending) -> None:
        key = sent_outputs.pop(id(pending), None)
        if key is not None:
            deallocate_output_tensor(saved_or_none(key), config.deallocate_pipeline_outputs)
            in_flight.pop(key, None)

    def saved_or_none(key):
        entry = saved.get(key)
        return entry[1] if entry is not None else None

    with no_sync.disabled():
        for index, item in enumerate(lowered.ranks[rank]):
            if isinstance(item, Recv):
                recvs[item.msg] = p2p.post_recv(ctx.tensor_shape, dtype, device, peer=item.peer, what=str(item.msg))
                continue
            if isinstance(item, Send):
                tensor = produced.pop(item.msg)
                pending = p2p.post_send(tensor, peer=item.peer, what=str(item.msg))
                if item.msg.kind == F:
                    key = (item.msg.mb, sched.owner(item.msg.src_stage)[1])
                    sent_outputs[id(pending)] = key
                    in_flight[key] = pending
                continue
            op, stage = item, sched.stage(rank, item)
            chunk = ctx.model[op.chunk]
            if op.kind == F:
                if stage == 0:
                    input_tensor = None
                else:
                    input_tensor = incoming(Message(F, op.mb, stage - 1, stage), op).requires_grad_(not ctx.forward_only)
                start = time.perf_counter()  # after the input arrived: waiting is idle time, not work
                output, num_tokens = forward_step(
                    ctx.forward_step_func, data_for(op.chunk, op.mb), chunk, ctx.num_microbatches, input_tensor,
                    forward_data_store, config, ctx.cp_group_size, collect_non_loss_data=ctx.collect_non_loss_data,
                    is_first_microbatch=check_first_val_step(ctx.first_val_step, ctx.forward_only, op.mb == 0),
                    current_microbatch=op.mb, vp_stage=op.chunk if len(ctx.model) > 1 else None,
                    is_last_stage=stage == n - 1)
                total_num_tokens += num_tokens
                if stage + 1 < n:
                    produced[Message(F, op.mb, stage, stage + 1)] = output
                if not ctx.forward_only:
                    saved[(op.mb, op.chunk)] = (input_tensor, output)
            elif op.kind in (B, BW):
                if index == last_backward.get(op.chunk):
                    no_sync.enable(op.chunk)  # let DDP reduce as the chunk's last gradients arrive
                grad = None if stage == n - 1 else incoming(Message(B, op.mb, stage + 1, stage), op)
                pending = in_flight.get((op.mb, op.chunk))
                if pending is not None:  # its output must be sent (and freed) before backward
                    p2p.finish_send(pending, op=str(op))
                    release_sent(pending)
                start = time.perf_counter()
                input_tensor, output = saved.pop((op.mb, op.chunk))
                capture = store.capture((op.mb, op.chunk)) if op.kind == B else contextlib.nullcontext()
                with capture:
                    input_grad = backward_step(input_tensor, output, grad, ctx.model_type, config)
                    if op.kind == B:
                        defer_te_wgrads(te_modules[op.chunk])
                if stage > 0:
                    produced[Message(B, op.mb, stage, stage - 1)] = input_grad
            else:  # W
                start = time.perf_counter()
                if index == last_backward.get(op.chunk):
                    no_sync.enable(op.chunk)
                store.run((op.mb, op.chunk), what=f"{op} on pipeline rank {rank}")
            if ctx.record_timeline:
                timeline.append(OpRecord(rank, op, stage, start - t0, time.perf_counter() - t0))
            for done in p2p.reap_sends():
                release_sent(done)
        for done in p2p.wait_all_sends():
            release_sent(done)
    if not ctx.forward_only:
        store.assert_empty()
    leftovers = [k for k in (*saved, *produced, *recvs)]
    assert not leftovers, f"pipeline rank {rank} ended the step with unconsumed tensors: {leftovers[:4]}"
    no_sync.finish(ctx.model)
    return StepResult(forward_data_store, total_num_tokens, timeline, store.deferred, store.ran)


def _last_backward_index(items, chunks: int) -> dict[int, int]:
    """Per chunk, the index of the op after which no more gradients reach it
    this step (the last microbatch's B or BW): DDP sync is re-enabled there."""
    last: dict[int, int] = {}
    final_mb: dict[int, int] = {}
    for i, item in enumerate(items):
        if isinstance(item, Op) and item.kind in (B, BW):
            if item.mb >= final_mb.get(item.chunk, -1):
                final_mb[item.chunk] = item.mb
                last[item.chunk] = i
    return last


class _GradSync:
    """Megatron's `no_sync_func` / `grad_sync_func` protocol, one context per
    chunk when the config gives a list, else one for the whole model."""

    def __init__(self, config, chunks: int, enabled: bool) -> None:
        self.config = config
        self.enabled = enabled
        func = config.no_sync_func
        self.per_chunk = isinstance(func, (list, tuple))
        self.funcs = list(func) if self.per_chunk else [func]
        self.stacks: list[Optional[contextlib.ExitStack]] = [None] * len(self.funcs)
        self.remaining = set(range(chunks))

    @contextlib.contextmanager
    def disabled(self):
        if self.enabled:
            for i, func in enumerate(self.funcs):
                if func is not None:
                    stack = contextlib.ExitStack()
                    stack.enter_context(func())
                    self.stacks[i] = stack
        try:
            yield
        finally:
            for i in range(len(self.stacks)):
                self._exit(i)

    def _exit(self, i: int) -> None:
        if self.stacks[i] is not None:
            self.stacks[i].close()
            self.stacks[i] = None

    def enable(self, chunk: int) -> None:
        self.remaining.discard(chunk)
        if self.per_chunk:
            self._exit(chunk)
        elif not self.remaining:
            self._exit(0)

    def finish(self, model) -> None:
        if self.enabled and self.config.grad_sync_func is not None:
            funcs = self.config.grad_sync_func
            for c, chunk in enumerate(model):
                (funcs[c] if isinstance(funcs, (list, tuple)) else funcs)(chunk.parameters())
