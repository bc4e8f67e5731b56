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

A W op hands autograd what its closures made in one call into autograd's engine: a closure
`deliver`s a gradient for a parameter (or an empty one, which only fires the parameter's
accumulator hooks: megatron DDP's grad-ready hook after a fused accumulation into `main_grad`)
and queues with `after_delivery` what must follow it (a TE layer's DDP hooks, a dummy `.grad`
taken back); `run` makes the engine call and runs those after its last closure. Per closure,
the engine's start-up and a Python hop cost more than a small GEMM does on a GPU (128 experts make
256 closures a layer). With gradient-accumulation fusion (Megatron-LM's default) a delivery is
empty and a W op makes one call; unfused weight gradients wait for the call outside DDP's buffers,
so once a closure leaves `FLUSH_BYTES` of them waiting they are handed over as it ends (a W op
holds at most that much more than one layer's gradient). Outside `run` (a full backward's final
callback) delivery is immediate. `engine_calls` counts the calls.

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

import torch


# Unfused weight gradients a W op may leave waiting for its engine call before a closure's end hands
# them over (module doc): 128 Qwen3-30B-A3B-sized experts' fc1 and fc2 in bf16 are 1.2 GB, five calls.
FLUSH_BYTES = 256 * 2**20


class WeightGradStoreError(RuntimeError):
    pass


class WeightGradStore:
    # fixed attributes: setting the old `splitting`/`held` flags by hand raises instead of doing nothing
    __slots__ = ("_queues", "_key", "_held", "_splitting", "_delivery", "deferred", "ran", "engine_calls")

    def __init__(self) -> None:
        self._queues: dict[Hashable, list[tuple[Callable, Optional[list]]]] = defaultdict(list)  # (fn, args)
        self._key: Optional[Hashable] = None
        self._held: Optional[list] = None  # the open capture's `held`
        self._splitting = False
        self.deferred = 0  # closures queued since the last reset_counters()
        self.ran = 0  # closures run since the last reset_counters()
        self._delivery: Optional[_Delivery] = None  # open while `run` runs closures
        self.engine_calls = 0  # calls into autograd's engine by `deliver`, since the last reset_counters()

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
        if self._delivery is not None:
            raise WeightGradStoreError(f"W {what or key} ran inside another W's closures")
        self._delivery = _Delivery()
        try:
            for fn, args in fns:
                if args is None:
                    fn()
                else:
                    fn(*args)
                    args.clear()  # what the closure was given goes as it returns
                if self._delivery.bytes >= FLUSH_BYTES:
                    self._flush()
            self._flush()
        finally:
            self._delivery = None
        self.ran += len(fns)
        return len(fns)

    def deliver(self, param: torch.Tensor, grad: Optional[torch.Tensor] = None) -> None:
        """Accumulate `grad` into `param` through its autograd accumulator (its hooks fire), or with
        `grad` None only fire the hooks; inside `run` with the other deliveries of the W op (module
        doc)."""
        with torch.enable_grad():  # the hooks-only root is a graph node: made with grad mode on
            root, g = (param, grad.to(param.dtype)) if grad is not None else (_ReachAccumulator.apply(param), None)
        if g is None:
            g = root.new_empty(0)
        if self._delivery is None:
            self._engine([root], [g])
            return
        self._delivery.roots.append(root)
        self._delivery.grads.append(g)
        self._delivery.bytes += g.numel() * g.element_size()

    def after_delivery(self, fn: Callable[[], None]) -> None:
        """Run `fn` once the gradients delivered before it are in (at once outside `run`)."""
        if self._delivery is None:
            fn()
        else:
            self._delivery.after.append(fn)

    def _flush(self) -> None:
        d = self._delivery
        roots, grads, after = d.roots, d.grads, d.after
        d.roots, d.grads, d.after, d.bytes = [], [], [], 0
        if roots:
            self._engine(roots, grads)
        for fn in after:
            fn()

    def _engine(self, roots: list, grads: list) -> None:
        with torch.enable_grad():
            torch.autograd.backward(roots, grads)
        self.engine_calls += 1

    def assert_empty(self) -> None:
        left = {k: len(v) for k, v in self._queues.items() if v}
        if left:
            raise WeightGradStoreError(f"weight gradients never computed at the end of the step: {left}")

    def clear(self) -> None:
        self._queues.clear()
        self._key = self._held = None

    def reset_counters(self) -> None:
        self.deferred = self.ran = self.engine_calls = 0


class _Delivery:
    """What a running W op's closures delivered and not yet handed to the engine."""

    __slots__ = ("roots", "grads", "after", "bytes")

    def __init__(self) -> None:
        self.roots: list = []
        self.grads: list = []
        self.after: list = []
        self.bytes = 0  # of the gradients among them


class _ReachAccumulator(torch.autograd.Function):
    """An empty output whose backward reaches the parameter's AccumulateGrad node with no gradient:
    the node's hooks (megatron DDP's grad-ready hook) fire, `.grad` is left as it is."""

    @staticmethod
    def forward(ctx, param):
        return param.new_empty(0)

    @staticmethod
    def backward(ctx, _):
        return None


_STORE = WeightGradStore()


def get_store() -> WeightGradStore:
    """The process-wide store used by the hooked layers and the executor."""
    return _STORE
