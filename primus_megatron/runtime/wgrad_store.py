"""Deferred weight gradients: closures queued during B, run by W.

The executor runs each step inside `step(splitting=...)`: for a training step
of a schedule with W ops, `splitting` is true while it is open, and hooked
layers build their forward so that their backward can be split. During a B op
the executor opens `capture((mb, chunk))`; those layers then compute only the
input gradient and `defer` a closure that computes the weight gradient (a
profiled B also passes `held`, a list that receives the tensors the closures
keep). The W op for the same key runs the closures. A W whose key has nothing
queued is an error: the split would silently be a no-op. `step` empties the
store when it opens and when the step fails, so nothing crosses steps.

A closure deferred with `args` keeps no tensor of its own: the store holds its
arguments until W calls `fn(*args)`, so between B and W they can be moved to
host memory and back (`arguments(key)`: activation offload of what B keeps for
W, `runtime.offload`).

The store is process-wide (`get_store`): megatron's linear layers and
TransformerEngine's wgrad store reach it from inside autograd, where nothing
can be passed to them.
"""
from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Callable, Hashable, Iterable, Iterator, Optional


class WeightGradStoreError(RuntimeError):
    pass


class WeightGradStore:
    # fixed attributes: setting the old `splitting`/`held` flags by hand raises instead of doing nothing
    __slots__ = ("_queues", "_key", "_held", "_splitting", "deferred", "ran")

    def __init__(self) -> None:
        self._queues: dict[Hashable, list[tuple[Callable, Optional[list]]]] = defaultdict(list)  # (fn, args)
        self._key: Optional[Hashable] = None
        self._held: Optional[list] = None  # the open capture's `held`
        self._splitting = False
        self.deferred = 0  # closures queued since the last reset_counters()
        self.ran = 0  # closures run since the last reset_counters()

    @property
    def splitting(self) -> bool:
        """True inside `step(splitting=True)`: hooked layers' forwards can be split."""
        return self._splitting

    @contextlib.contextmanager
    def step(self, *, splitting: bool) -> Iterator[None]:
        """One step: the store starts empty and is emptied if the step raises; with
        `splitting` (a training step of a schedule with W ops) hooked layers build
        forwards whose backward can be split while it is open."""
        if self._splitting:
            raise WeightGradStoreError("a weight-gradient step opened inside another")
        self.clear()
        self._splitting = bool(splitting)
        try:
            yield
        except BaseException:
            self.clear()
            raise
        finally:
            self._splitting = False

    @property
    def capturing(self) -> bool:
        return self._key is not None

    @property
    def current_key(self) -> Optional[Hashable]:
        """The key a capture defers under (None outside one)."""
        return self._key

    @contextlib.contextmanager
    def capture(self, key: Hashable, *, held: Optional[list] = None) -> Iterator[None]:
        """Within this context, hooked layers defer their weight gradient under `key`; the
        tensors each deferred closure keeps alive are appended to `held` when given
        (measured activation memory)."""
        if self._key is not None:
            raise WeightGradStoreError(f"nested weight-gradient capture: {key} inside {self._key}")
        self._key, self._held = key, held
        try:
            yield
        finally:
            self._key = self._held = None

    def defer(self, fn: Callable[..., None], tensors: tuple = (), *, args: Optional[Iterable] = None) -> None:
        """Queue `fn` under the capture's key; `tensors` are what it keeps alive
        until it runs (for activation-memory accounting). With `args`, W runs
        `fn(*args)` and the store holds them meanwhile (module doc); else `fn()`."""
        self._queues[self._key].append((fn, None if args is None else list(args)))
        self.deferred += 1
        if self._held is not None:
            self._held.extend(tensors)

    def pending(self, key: Hashable) -> int:
        return len(self._queues.get(key, ()))

    def arguments(self, key: Hashable) -> list[list]:
        """The argument lists the store holds for `key`'s closures (module doc), to be changed in place:
        whatever each holds when W runs is what its closure is called with."""
        return [args for _, args in self._queues.get(key, ()) if args is not None]

    def run(self, key: Hashable, *, what: str = "") -> int:
        """Run every closure queued under `key`; returns how many ran."""
        fns = self._queues.pop(key, None)
        if not fns:
            raise WeightGradStoreError(
                f"W {what or key} found no deferred weight gradient: its B deferred nothing. Only "
                "megatron-core's ColumnParallelLinear/RowParallelLinear and TransformerEngine's Linear/"
                "LayerNormLinear (TE 2.7 or newer, routed by primus_megatron.build_model) can defer; build the "
                "model from those, or use a schedule without W ops (1f1b, interleaved-1f1b)")
        for fn, args in fns:
            if args is None:
                fn()
            else:
                fn(*args)
                args.clear()  # what the closure was given goes as it returns
        self.ran += len(fns)
        return len(fns)

    def assert_empty(self) -> None:
        left = {k: len(v) for k, v in self._queues.items() if v}
        if left:
            raise WeightGradStoreError(f"weight gradients never computed at the end of the step: {left}")

    def clear(self) -> None:
        self._queues.clear()
        self._key = self._held = None

    def reset_counters(self) -> None:
        self.deferred = self.ran = 0


_STORE = WeightGradStore()


def get_store() -> WeightGradStore:
    """The process-wide store used by the hooked layers and the executor."""
    return _STORE
