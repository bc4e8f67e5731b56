"""Deferred weight gradients: closures queued during B, run by W.

While a step of a schedule with W ops runs, `splitting` is set: hooked layers
build their forward so that their backward can be split. During a B op the
executor opens `capture((mb, chunk))`; those layers then compute only the
input gradient and `defer` a closure that computes the weight gradient. The
W op for the same key runs the closures. A W whose key has nothing queued is
an error: the split would silently be a no-op. The executor empties the store
when a step starts and when one fails, so nothing crosses steps.
"""
from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Callable, Hashable, Iterator, Optional


class WeightGradStoreError(RuntimeError):
    pass


class WeightGradStore:
    def __init__(self) -> None:
        self._queues: dict[Hashable, list[Callable[[], None]]] = defaultdict(list)
        self._key: Optional[Hashable] = None
        self.deferred = 0  # closures queued since the last reset_counters()
        self.ran = 0  # closures run since the last reset_counters()
        self.held: list | None = None  # when a list: tensors kept for W are appended (profiling)
        self.splitting = False  # a step with W ops is running (set by the executor)

    @property
    def capturing(self) -> bool:
        return self._key is not None

    @property
    def current_key(self) -> Optional[Hashable]:
        """The key a capture defers under (None outside one)."""
        return self._key

    @contextlib.contextmanager
    def capture(self, key: Hashable) -> Iterator[None]:
        """Within this context, hooked layers defer their weight gradient under `key`."""
        if self._key is not None:
            raise WeightGradStoreError(f"nested weight-gradient capture: {key} inside {self._key}")
        self._key = key
        try:
            yield
        finally:
            self._key = None

    def defer(self, fn: Callable[[], None], tensors: tuple = ()) -> None:
        """Queue `fn` under the capture's key; `tensors` are what it keeps alive
        until it runs (for activation-memory accounting)."""
        self._queues[self._key].append(fn)
        self.deferred += 1
        if self.held is not None:
            self.held.extend(tensors)

    def pending(self, key: Hashable) -> int:
        return len(self._queues.get(key, ()))

    def run(self, key: Hashable, *, what: str = "") -> int:
        """Run every closure queued under `key`; returns how many ran."""
        fns = self._queues.pop(key, None)
        if not fns:
            raise WeightGradStoreError(
                f"W {what or key} found no deferred weight gradient: its B deferred nothing. Only "
                "megatron-core's ColumnParallelLinear/RowParallelLinear and TransformerEngine's Linear/"
                "LayerNormLinear (TE 2.7 or newer, routed by primus_megatron.build_model) can defer; build the "
                "model from those, or use a schedule without W ops (1f1b, interleaved-1f1b)")
        for fn in fns:
            fn()
        self.ran += len(fns)
        return len(fns)

    def assert_empty(self) -> None:
        left = {k: len(v) for k, v in self._queues.items() if v}
        if left:
            raise WeightGradStoreError(f"weight gradients never computed at the end of the step: {left}")

    def clear(self) -> None:
        self._queues.clear()
        self._key = None

    def reset_counters(self) -> None:
        self.deferred = self.ran = 0


_STORE = WeightGradStore()


def get_store() -> WeightGradStore:
    """The process-wide store used by the hooked layers and the executor."""
    return _STORE
