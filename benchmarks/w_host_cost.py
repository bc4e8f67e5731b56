"""The host cost of a W op at 128 experts: one call into autograd's engine per W op against one per
deferred closure (issue 56 item 3).

A loop of 256 small megatron ColumnParallelLinear layers (128 experts' fc1 and fc2, SequentialMLP's
shape: a linear layer per expert GEMM), their weight gradients deferred to W, with what megatron's
DDP gives each weight (main_grad when fused, a grad-ready hook on its accumulator). Per W op: the
engine calls and the host time, delivered as the runtime does now (`one per W op`) and as it did
before (`one per closure`: FLUSH_BYTES at 0 hands every closure's delivery over as it ends), both
from the same forward and B, interleaved, medians of `--reps`. The GEMMs are tiny (16 tokens per
expert), so the time is host work: what a GPU's W op of small expert GEMMs spends on the CPU.
"""
from __future__ import annotations

import argparse
import statistics
import time

from _common import add_markdown_options, command_block, command_line, publish, table
from dummy_grad_memory import init_one_process

TITLE = "## W op host cost at 128 experts (CPU, one process)"


def _experts(n: int, hidden: int, ffn: int, fused: bool) -> list:
    import torch
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear
    from megatron.core.transformer.transformer_config import TransformerConfig

    config = TransformerConfig(num_layers=1, hidden_size=hidden, num_attention_heads=1, use_cpu_initialization=True,
                               gradient_accumulation_fusion=fused)
    layers = []
    for _ in range(n):
        for i, o in ((hidden, ffn), (ffn, hidden)):
            layer = ColumnParallelLinear(i, o, config=config, init_method=torch.nn.init.normal_, bias=False,
                                         gather_output=True)
            w = layer.weight
            if fused:
                w.main_grad = torch.zeros_like(w, dtype=torch.float32)
                w.grad_added_to_main_grad = False

            def ddp_hook(*_, w=w):  # megatron DDP's hook, as far as the host cost goes
                if w.grad is not None and not getattr(w, "grad_added_to_main_grad", False) and fused:
                    w.main_grad.add_(w.grad)
                w.grad = None

            layer.kept = w.expand_as(w).grad_fn.next_functions[0][0]
            layer.kept.register_hook(ddp_hook)
            layers.append(layer)
    return layers


def _w_op(layers: list, tokens: int, per_closure: bool) -> tuple[float, int]:
    """(host seconds of one W op, its engine calls) after a forward and B of every expert."""
    import torch

    from primus_megatron.runtime import wgrad_store

    store = wgrad_store.get_store()
    with store.step(splitting=True):
        outs = []
        for fc1, fc2 in zip(layers[::2], layers[1::2]):
            x = torch.randn(tokens, 1, fc1.weight.shape[1], requires_grad=True)
            outs.append(fc2(torch.relu(fc1(x)[0]))[0])
        with store.capture("mb0"):
            torch.stack([o.square().sum() for o in outs]).sum().backward()
        saved, wgrad_store.FLUSH_BYTES = wgrad_store.FLUSH_BYTES, (0 if per_closure else wgrad_store.FLUSH_BYTES)
        store.reset_counters()
        try:
            start = time.perf_counter()
            store.run("mb0")
            took = time.perf_counter() - start
        finally:
            wgrad_store.FLUSH_BYTES = saved
    return took, store.engine_calls


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--experts", type=int, default=128)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--ffn", type=int, default=32)
    p.add_argument("--tokens", type=int, default=16, help="tokens per expert")
    p.add_argument("--reps", type=int, default=20)
    add_markdown_options(p)
    args = p.parse_args(argv)
    from primus_megatron.runtime import linear_hooks

    init_one_process()
    linear_hooks.install()
    rows = []
    for fused in (True, False):
        layers = _experts(args.experts, args.hidden, args.ffn, fused)
        times: dict = {True: [], False: []}
        calls: dict = {}
        for _ in range(args.reps):
            for per_closure in (True, False):  # interleaved: the machine's noise hits both alike
                t, c = _w_op(layers, args.tokens, per_closure)
                times[per_closure].append(t)
                calls[per_closure] = c
        before, after = statistics.median(times[True]), statistics.median(times[False])
        rows.append(["fused (main_grad)" if fused else "unfused (.grad)", calls[True], f"{1e3 * before:.2f}",
                     calls[False], f"{1e3 * after:.2f}", f"{after / before:.2f}"])
    text = "\n".join([
        command_block(command_line("benchmarks/w_host_cost.py", argv)),
        f"{args.experts} experts x (fc1, fc2) as megatron ColumnParallelLinear layers (hidden {args.hidden}, FFN "
        f"{args.ffn}, {args.tokens} tokens each), one W op holding all {2 * args.experts} deferred closures; "
        f"host time per W op, median of {args.reps} interleaved repetitions.\n",
        table(["weights", "engine calls (one per closure)", "ms", "engine calls (one per W op)", "ms",
               "time ratio"], rows)])
    publish(args, TITLE, text, "w_host_cost")


if __name__ == "__main__":
    main()
