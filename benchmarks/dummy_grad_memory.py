"""Bytes held after a step by the dummy gradients of a large output layer (CPU).

    python benchmarks/dummy_grad_memory.py                     # this tree, and fa0dc23 for "before"
    python benchmarks/dummy_grad_memory.py --before REV         # compare with another revision

When a W has put a weight's gradient into `main_grad`, megatron's DDP hook
still wants a `.grad` of the weight's shape to look at (runtime/dummy_grad.py).
Until this change primus_megatron cached one full-size zero tensor per weight
shape for it (`linear_hooks._DUMMIES`, `te_wgrad._ZEROS`), kept for the whole
run. This measures what stays alive after one step, per path, for an output
layer of vocabulary x hidden in bf16 with fp32 main_grad (megatron's usual
wiring), on the revision given by --before and on this tree:

* megatron-core's ColumnParallelLinear with gradient-accumulation fusion
  (B, then W; the W hands DDP the dummy);
* a TransformerEngine Linear (tests/te_standin, TE v2.11's behaviour) with
  fuse_wgrad_accumulation under megatron's DDP with overlapped reduce, in
  B0 B1 W0 W1 order (the second W finds .grad emptied by the first W's hook
  and needs the placeholder).

"Held" = storage bytes of tensors alive after the step (gc) that were not
alive before it, split into TransformerEngine's own `get_dummy_wgrad` cache
(which megatron and TE keep in any case) and everything else (ours). Each
revision runs in a subprocess of its own (one gloo rank, one thread).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STANDIN = os.path.join(ROOT, "tests", "te_standin")
SECTION = "## Memory held by dummy gradients (CPU, one rank)"


def _live_storages() -> dict:
    import gc

    import torch

    gc.collect()
    out = {}
    for obj in gc.get_objects():
        try:
            if torch.is_tensor(obj) and obj.device.type == "cpu" and not obj.is_meta:
                storage = obj.untyped_storage()
                out[storage.data_ptr()] = storage.nbytes()
        except Exception:  # noqa: BLE001 - odd tensor subclasses: not ours to count
            continue
    return out


def _held(before: dict, te_cache: dict) -> tuple[int, int]:
    """(ours, TE's get_dummy_wgrad) bytes alive now that were not before."""
    te_ptrs = {t.untyped_storage().data_ptr() for t in te_cache.values()}
    ours = theirs = 0
    for ptr, nbytes in _live_storages().items():
        if ptr in before or ptr == 0:
            continue
        if ptr in te_ptrs:
            theirs += nbytes
        else:
            ours += nbytes
    return ours, theirs


def init_one_process() -> None:
    """A world of one gloo rank with megatron's parallel state (tp = pp = 1), CPU mode, one thread."""
    import datetime

    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state

    from primus_megatron.compat import cpu

    cpu.enable()
    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=120)
    store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True, timeout=timeout)  # a world of one: its own store
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=timeout)
    parallel_state.initialize_model_parallel(1, 1)


def _config(**kw):
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(num_layers=1, hidden_size=kw.pop("hidden"), num_attention_heads=1,
                             use_cpu_initialization=True, params_dtype=torch.bfloat16, bf16=True,
                             pipeline_dtype=torch.bfloat16, **kw)


def _megatron_linear(vocab: int, hidden: int, tokens: int) -> tuple[int, int]:
    import torch
    from megatron.core.tensor_parallel import ColumnParallelLinear

    from primus_megatron.runtime import linear_hooks
    from primus_megatron.runtime.wgrad_store import get_store

    linear_hooks.install()
    config = _config(hidden=hidden, gradient_accumulation_fusion=True)
    layer = ColumnParallelLinear(hidden, vocab, config=config, init_method=torch.nn.init.zeros_, bias=False,
                                 gather_output=False)
    weight = layer.weight
    weight.main_grad = torch.zeros(weight.shape, dtype=torch.float32)
    weight.grad_added_to_main_grad = False  # what megatron's DDP sets on every parameter
    x = torch.randn(tokens, 1, hidden, dtype=torch.bfloat16, requires_grad=True)
    before = _live_storages()
    store = get_store()
    with _splitting_step(store):
        out, _ = layer(x)
        with store.capture((0, 0)):
            out.float().sum().backward()
        store.run((0, 0))
    del out
    x.grad = None
    return _held(before, {})


@contextlib.contextmanager
def _splitting_step(store):
    """A step of a schedule with W ops, in the store API of the revision measured: `step(splitting=True)`
    since 5eb7ac8; before it (fa0dc23, the default --before) the caller set `store.splitting` by hand."""
    if not hasattr(store, "step"):
        store.clear()
        store.splitting = True
        try:
            yield
        finally:
            store.splitting = False
        return
    with store.step(splitting=True):
        yield


def _te_linear(vocab: int, hidden: int, tokens: int) -> tuple[int, int]:
    import torch

    import megatron.core.distributed  # noqa: F401 - megatron-core before the stand-in (tests/test_te_wgrad.py)
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

    from primus_megatron.runtime import te_wgrad
    from primus_megatron.runtime.wgrad_store import get_store

    sys.path.insert(0, STANDIN)
    import transformer_engine.pytorch as te
    from transformer_engine.pytorch.module import base as te_base

    layer = te.Linear(hidden, vocab, bias=False, params_dtype=torch.bfloat16, fuse_wgrad_accumulation=True,
                      init_method=torch.nn.init.zeros_)
    te_wgrad.enable(layer)
    ddp = DistributedDataParallel(_config(hidden=hidden, gradient_accumulation_fusion=True),
                                  DistributedDataParallelConfig(overlap_grad_reduce=True, delay_wgrad_compute=True,
                                                                grad_reduce_in_fp32=True), layer)
    te_wgrad.prepare_step([ddp], splitting=True)
    xs = [torch.randn(tokens, hidden, dtype=torch.bfloat16, requires_grad=True) for _ in range(2)]
    before = _live_storages()
    store = get_store()
    store.clear()
    ddp.zero_grad_buffer()
    outs = [ddp(x) for x in xs]
    for mb in (0, 1):
        with ddp.no_sync(), store.capture((mb, 0)):
            outs[mb].float().sum().backward()
    with ddp.no_sync():
        store.run((0, 0))
    store.run((1, 0))
    ddp.finish_grad_sync()
    del outs
    for x in xs:
        x.grad = None
    return _held(before, te_base._dummy_wgrads)


def measure(vocab: int, hidden: int, tokens: int) -> dict:
    init_one_process()
    ours_m, _ = _megatron_linear(vocab, hidden, tokens)
    ours_t, te_own = _te_linear(vocab, hidden, tokens)
    return {"megatron": ours_m, "te": ours_t, "te_own": te_own}


def _run_revision(tree: str, args) -> dict:
    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    cmd = [sys.executable, os.path.abspath(__file__), "--measure", "--vocab", str(args.vocab),
           "--hidden", str(args.hidden), "--tokens", str(args.tokens)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode:
        raise SystemExit(f"measuring {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2 ** 20:.1f} MiB" if nbytes >= 2 ** 20 else f"{nbytes} B"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vocab", type=int, default=131072)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--tokens", type=int, default=8, help="sequence x micro batch of each microbatch")
    p.add_argument("--before", default="fa0dc23", help="revision measured as 'before' (git archive of it)")
    p.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--markdown", default=os.path.join(ROOT, "docs", "benchmarks", "runtime-cpu.md"),
                   help="file whose section this benchmark replaces (default: docs/benchmarks/runtime-cpu.md)")
    p.add_argument("--no-markdown", action="store_true", help="print only; do not touch the markdown file")
    args = p.parse_args()
    if args.measure:  # in a subprocess whose PYTHONPATH names the tree measured: _common would put ours first
        print(json.dumps(measure(args.vocab, args.hidden, args.tokens)))
        return
    sys.path.insert(0, HERE)
    import _common as C
    with tempfile.TemporaryDirectory() as old:
        subprocess.run(f"git -C {ROOT} archive {args.before} primus_megatron | tar -x -C {old}", shell=True,
                       check=True)
        before = _run_revision(old, args)
    after = _run_revision(ROOT, args)
    weight = args.vocab * args.hidden * 2  # bf16
    rows = [["megatron ColumnParallelLinear, fused (B, W)", _mib(before["megatron"]), _mib(after["megatron"])],
            ["TE Linear, fused, megatron DDP (B0 B1 W0 W1)", _mib(before["te"]), _mib(after["te"])],
            ["TE's own get_dummy_wgrad cache (not ours)", _mib(before["te_own"]), _mib(after["te_own"])]]
    argv = [a for a in sys.argv[1:] if a not in ("--no-markdown",) and not a.startswith("--markdown")]
    text = "\n".join([
        C.command_block(C.command_line("benchmarks/dummy_grad_memory.py", argv)),
        f"Output layer {args.vocab} x {args.hidden} in bf16 (one weight: {_mib(weight)}), fp32 main_grad, "
        f"{args.tokens} tokens per microbatch. Bytes of tensors alive after one step that were not alive "
        f"before it; 'before' is revision {args.before}, 'after' this tree.", "",
        C.table(["path", f"held before ({args.before})", "held after"], rows), "",
        f"A cache entry is one weight: at vocabulary 128k x hidden 8192 in bf16 that is "
        f"{_mib(131072 * 8192 * 2)} per path and rank before; after, nothing stays (the one-element zero view "
        f"lives only while the hook runs).",
    ])
    C.publish(args, SECTION, text + "\n", "dummy_grad_memory")


if __name__ == "__main__":
    main()
