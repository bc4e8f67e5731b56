"""Test-only: the ways splitting a backward into B and W can go wrong under FP8, each made on
purpose in the ranks of one Megatron-LM launch (megatron_lm_harness.run(rank_setup=("fp8_breakages",
"install", name))), so that test_megatron_lm_fp8.py shows its comparison with megatron's own 1F1B
catches it. Nothing here is imported by the product.

Each breakage hits one microbatch of every step (`MB`, the second: not the first, whose W overwrites
main_grad, nor the last), on every pipeline rank and chunk, under the delayed recipe, where TE keeps
state between a microbatch's B and its W (scales moved by the amax reductions of the microbatches in
between; under current scaling a re-cast of the same values is the same cast):

* `freed`: the quantized tensors B handed to W (TE's `wgrad_store.put([input, grad_output], ...)`:
  the column-wise FP8 input and the FP8 grad_output) freed after B, their memory reused before W
  reads it (here: zeroed);
* `requantized`: W casts them again (dequantized, then quantized with the scale TE holds at W time)
  instead of reading what B saved; the amax is left as it was, so only the re-cast shows;
* `bwd-amax-never`: the microbatch's backward amaxes never reach a reduction (its B's reduction,
  which TE runs as the backward of the chunk's first FP8 module ends, dropped and the recorded amaxes
  cleared);
* `bwd-amax-twice`: its backward amaxes reduced twice: still recorded after its reduction, so the
  next reduction counts them again. (Calling the reduction twice in a row changes nothing: TE's update
  keeps history and scale for an amax of zero, and the first reduction leaves zeros: delayed_scaling.cu
  ``kernel_bulk``. A microbatch's amax counts twice only when it is still recorded at the next one.);
* `weight-refreshed`: the layer's cached FP8 weight (`is_first_microbatch`'s workspace, cast once per
  step by the first microbatch's forward) re-cast between the microbatch's B and its W, with the
  weight scale TE holds then: the GEMMs after it read another FP8 weight than megatron's 1F1B does.

Each prints `fp8 breakage <name> made` the first time it acts in a rank, so a test knows it ran.
"""
from __future__ import annotations

import torch

MB = 1  # the microbatch broken in every step


def _made(name: str, done: set = set()) -> None:  # noqa: B006 - once per process, on purpose
    if name not in done:
        done.add(name)
        print(f"fp8 breakage {name} made", flush=True)


def _current_mb():
    from primus_megatron.runtime.wgrad_store import get_store

    key = get_store().current_key
    return None if key is None else key[0]


def _quantized(items) -> list:
    from transformer_engine.pytorch.tensor.storage.float8_tensor_storage import Float8TensorStorage

    out = []
    for x in items:
        out.extend(_quantized(x) if isinstance(x, (list, tuple)) else [x] if isinstance(x, Float8TensorStorage) else [])
    return out


def _freed() -> None:
    from primus_megatron.runtime import te_wgrad

    put = te_wgrad.DeferringWgradStore.put

    def freed_put(self, tensor_list, func):
        mb = _current_mb()
        put(self, tensor_list, func)
        if mb == MB:
            for q in _quantized(tensor_list):
                for data in (q._data, q._transpose):
                    if data is not None:
                        data.view(torch.uint8).zero_()
            _made("freed")

    te_wgrad.DeferringWgradStore.put = freed_put


def _recast(q, quantizer=None):
    """`q` dequantized and cast again with its quantizer's scale now, its amax left as it was."""
    quantizer = (quantizer or q._quantizer).copy()
    amax = quantizer.amax.clone() if hasattr(quantizer, "amax") else None
    quantizer.internal = True
    quantizer.set_usage(rowwise=q._data is not None, columnwise=q._transpose is not None)
    fresh = quantizer(q.dequantize(dtype=torch.float32))
    if amax is not None:
        quantizer.amax.copy_(amax)
    return fresh


def _w_of(mb_of_work: dict, before) -> None:
    """Wrap te_wgrad's W work: `before(work, given)` -> given, for the works B made for microbatch MB."""
    from primus_megatron.runtime import te_wgrad

    init, call = te_wgrad._Work.__init__, te_wgrad._Work.__call__

    def tagged_init(self, layer, tensors, gemm):
        init(self, layer, tensors, gemm)
        mb_of_work[id(gemm)] = _current_mb()

    def broken_call(self, *given):
        if self.gemm is not None and mb_of_work.pop(id(self.gemm), None) == MB:
            given = before(self, list(given))
        return call(self, *given)

    te_wgrad._Work.__init__, te_wgrad._Work.__call__ = tagged_init, broken_call


def _requantized() -> None:
    def recast(work, given):
        from transformer_engine.pytorch.tensor.storage.float8_tensor_storage import Float8TensorStorage

        _made("requantized")
        return [_recast(x) if isinstance(x, Float8TensorStorage) else x for x in given]

    _w_of({}, recast)


def _weight_refreshed() -> None:
    def refresh(work, given):
        layer = work.layer
        cached = getattr(layer, "_fp8_workspaces", {}).get("weight")
        if getattr(layer, "fp8", False) and cached is not None:
            with torch.no_grad():
                layer.quantizers["scaling_fwd"][1].update_quantized(layer.weight, cached)  # TE: weight quantizer 1
            _made("weight-refreshed")
        return given

    _w_of({}, refresh)


def _backward_amaxes():
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager as M

    return [a for key, buf in M.global_amax_buffer.items() if key.startswith("backward") for a in buf]


def _bwd_amax(twice: bool) -> None:
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager as M

    reduce = M.reduce_and_update_fp8_tensors.__func__

    def broken(cls, forward: bool = True) -> None:
        if forward or _current_mb() != MB:
            return reduce(cls, forward)
        amaxes = _backward_amaxes()
        if twice:
            recorded = [a.clone() for a in amaxes]
            reduce(cls, forward)
            for a, r in zip(amaxes, recorded):
                a.copy_(r)  # still there at the next reduction
        else:
            for a in amaxes:
                a.zero_()
        _made("bwd-amax-twice" if twice else "bwd-amax-never")

    M.reduce_and_update_fp8_tensors = classmethod(broken)


BREAKAGES = {
    "freed": _freed,
    "requantized": _requantized,
    "bwd-amax-never": lambda: _bwd_amax(twice=False),
    "bwd-amax-twice": lambda: _bwd_amax(twice=True),
    "weight-refreshed": _weight_refreshed,
}


def install(name: str) -> None:
    """Break the runtime's B/W split under FP8 in this process (a rank), as `name` says."""
    BREAKAGES[name]()
