"""Megatron's data-parallel hooks during one rank's step, for any op order.

Megatron-LM wires its DistributedDataParallel into the schedules through the
model config: `no_sync_func` (DDP counts a gradient as ready only outside
it), `grad_sync_func` (start a chunk's reduce now; set when gradient reduce
is overlapped and aligned, Megatron-LM's default) and `param_sync_func`
(start a chunk's parameter all-gather; distributed optimizer with overlapped,
aligned gathers). Megatron's own schedules place these calls for their fixed
orders. Here they follow from the rank's op list:

* A parameter's gradient is final after its chunk's last B/BW (biases, norms,
  embeddings) or its last W (weights of the hooked linear layers). With
  `grad_sync_func`, chunk c's reduce starts right after the later of the two
  (and after the borrowing chunk's, when a chunk uses another's weight: the
  tied embedding under V). Without it, DDP's own hooks start each bucket once
  all its parameters were registered; DDP counts registrations only outside
  `no_sync`, so sync is enabled exactly during the ops that are the last of
  their kind (B/BW or W) for a chunk. Each parameter is then registered once
  per source (once, or twice for the tied embedding under V) whatever the
  schedule, so DDP's first-step count stays valid when the schedule changes
  (a re-plan, `auto`), and a bucket starts after the last W that feeds it.
* Parameter gathers start for the first two chunks (in order of their first
  forward) when the step starts, and for each later chunk when the one
  before it runs its first forward, as megatron's interleaved schedule does;
  with one chunk, DDP's forward hooks start them, as in megatron's 1F1B.

megatron-core 0.16.1, `distributed/`: DDP puts its grad-ready hook on each
parameter's gradient accumulator (`distributed_data_parallel.py:328-345`, kept
alive in `grad_accs`, so a W that later feeds the same accumulator fires it);
the hook (420-447) adds `.grad` to `main_grad` unless `grad_added_to_main_grad`,
empties `.grad` and, with overlapped reduce, calls `register_grad_ready`
(`param_and_grad_buffer.py:539-561`). That counts only outside `no_sync`
(451); the first step records each parameter's count, kept by `reset()` at the
next `zero_grad_buffer()` (200-208), and from then on a bucket starts its reduce
when every count is reached again; `finish_grad_sync` (507-536) starts it in the
first step and asserts it was started afterwards (531): every parameter must be
registered the same number of times outside `no_sync` in every step. Reduces
are issued in readiness order, so every data-parallel rank must complete its
buckets in the same order. Megatron's 1F1B leaves `no_sync` for the last
backward (`pipeline_parallel/schedules.py:2248,2277`) and calls
`grad_sync_func` at the end (2296-2298); the interleaved schedule calls it per
chunk after the chunk's last backward (1280-1289) and turns `grad_sync_func` /
`param_sync_func` into per-chunk lists for good (950, 953).
"""
from __future__ import annotations

import contextlib
from typing import Any, Optional, Sequence

import torch

from ..schedules import B, BW, F, W, Op


def _unwrap(module: torch.nn.Module) -> torch.nn.Module:
    while hasattr(module, "module"):
        module = module.module
    return module


def _per_chunk(func: Any, chunks: int) -> list:
    if func is None:
        return [None] * chunks
    return list(func) if isinstance(func, (list, tuple)) else [func] * chunks


class GradSync:
    """Calls megatron's DDP hooks for one step of `items` (this rank's lowered list)."""

    def __init__(self, config: Any, model: Sequence[torch.nn.Module], items: Sequence, *, enabled: bool) -> None:
        self.model = model
        self.enabled = enabled
        no_sync = config.no_sync_func
        self.no_sync_funcs = [f for f in (no_sync if isinstance(no_sync, (list, tuple)) else [no_sync]) if f]
        self.grad_sync = _per_chunk(config.grad_sync_func, len(model)) if enabled else [None] * len(model)
        param_sync = config.param_sync_func if enabled and len(model) > 1 else None
        self.param_sync = _per_chunk(param_sync, len(model))
        self._contexts: list = []

        last_backward: dict[int, int] = {}
        last_w: dict[int, int] = {}
        first_f: dict[int, int] = {}
        for i, item in enumerate(items):
            if isinstance(item, Op):
                if item.kind in (B, BW):
                    last_backward[item.chunk] = i
                elif item.kind == W:
                    last_w[item.chunk] = i
                elif item.kind == F:
                    first_f.setdefault(item.chunk, i)
        # ops during which DDP may register gradients (the hook path; with grad_sync_func
        # DDP never registers: its hooks would start the reduces a second time)
        hooks = not any(f is not None for f in self.grad_sync)
        self.window = set(last_backward.values()) | set(last_w.values()) if hooks else set()
        final = {c: max(last_backward.get(c, -1), last_w.get(c, -1)) for c in range(len(model))}
        for c, chunk in enumerate(model):
            owner = getattr(_unwrap(chunk), "primus_borrows_weight_of_chunk", None)
            if owner is not None:
                final[owner] = max(final[owner], final[c])
        self.sync_after: dict[int, list[int]] = {}
        for c, i in final.items():
            if self.grad_sync[c] is not None and i >= 0:
                self.sync_after.setdefault(i, []).append(c)
        self.synced: set[int] = set()
        # parameter gathers: chunk order of first forward; chunk k+1 starts at chunk k's first F
        self.gather_order = sorted(first_f, key=first_f.get)
        self.gather_after = {first_f[self.gather_order[k - 1]]: self.gather_order[k]
                             for k in range(2, len(self.gather_order))}

    # -- no_sync contexts ----------------------------------------------------------------------
    def _enter(self) -> None:
        for func in self.no_sync_funcs:
            ctx = func()
            ctx.__enter__()
            self._contexts.append(ctx)

    def _exit(self) -> None:
        while self._contexts:
            self._contexts.pop().__exit__(None, None, None)

    @contextlib.contextmanager
    def step(self):
        """The whole step: gradients are not synchronised except where this class says."""
        if self.enabled:
            self._enter()
            for c in self.gather_order[:2]:
                self._start_gather(c)
        try:
            yield
            if self.enabled:
                for c, func in enumerate(self.grad_sync):  # chunks that never had their final op
                    if func is not None and c not in self.synced:
                        self._start_reduce(c)
        finally:
            self._exit()

    def resume(self) -> None:
        """Back to this step's no_sync state after something outside the step touched
        DDP (post-validation zeroes the gradient buffers mid-step, which re-enables
        DDP's registration; its hooks would then start reduces a second time)."""
        if self.enabled:
            self._exit()
            self._enter()

    # -- per op ----------------------------------------------------------------------------------
    def before(self, index: int) -> None:
        if self.enabled and index in self.window:
            self._exit()  # DDP registers this op's gradients (last of their kind for a chunk)

    def after(self, index: int) -> None:
        if not self.enabled:
            return
        if index in self.window and not self._contexts:
            self._enter()
        for c in self.sync_after.get(index, ()):
            self._start_reduce(c)
        nxt = self.gather_after.get(index)
        if nxt is not None:
            self._start_gather(nxt)

    def _start_reduce(self, c: int) -> None:
        self.grad_sync[c](self.model[c].parameters())
        self.synced.add(c)

    def _start_gather(self, c: int) -> None:
        func: Optional[Any] = self.param_sync[c]
        if func is not None:
            func(self.model[c].parameters())
