"""Soak test: every schedule for hundreds of training iterations on CPU, watching for leaks.

    python benchmarks/soak.py            # 300 iterations per schedule, writes docs/benchmarks/runtime-cpu.md's "## Soak"
    python benchmarks/soak.py --quick    # 60 iterations per schedule

Two gloo ranks (pp=2) train a tiny GPT (4 layers, hidden 32, 4 microbatches of
2 x 16 tokens) with examples/pretrain_gpt.py's stack (megatron-core GPTModel,
megatron DDP and optimizer, primus_megatron's forward_backward_func), one
schedule after another in the same processes. After every iteration each rank
checks that
  * the weight-gradient store is empty (every deferred W ran),
  * the p2p layer holds no pending send;
and it records its resident memory (psutil, else /proc/self/statm) every
iteration and, every --sample-every iterations, the number of live torch
tensors created since the loop began (gc; the setup is frozen out). A schedule passes when, comparing the mean of the first window
(after --warmup iterations) with the mean of the last window (each --window
iterations), RSS grew by at most --rss-tolerance-mib and the tensor count by
at most --tensor-tolerance, on both ranks. Exit status 1 if any schedule fails.
"""
from __future__ import annotations

import gc
import os
import sys
import time
from typing import Optional


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402  (puts the repository first on the import path)

SECTION = "## Soak"
_LEAKED: list = []
WORLD = 2
NUM_LAYERS, HIDDEN, HEADS, SEQ, MICRO_BATCH, MICROBATCHES, VOCAB = 4, 32, 4, 16, 2, 4, 128


def rss_bytes() -> int:
    try:
        import psutil

        return psutil.Process().memory_info().rss
    except ImportError:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def live_tensors() -> int:
    """Live torch tensors among the objects created since gc.freeze() (the soak loop's start):
    the model, optimizer and process state are frozen before, so counting stays fast."""
    import torch

    gc.collect()
    return sum(1 for obj in gc.get_objects() if isinstance(obj, torch.Tensor))


def batches(seed: int):
    """Endless synthetic microbatches with the keys examples/pretrain_gpt.py's forward_step reads."""
    import torch

    g = torch.Generator().manual_seed(seed)
    while True:
        tokens = torch.randint(0, VOCAB, (MICRO_BATCH, SEQ + 1), generator=g)
        yield {"tokens": tokens[:, :-1], "labels": tokens[:, 1:], "loss_mask": torch.ones(MICRO_BATCH, SEQ),
               "attention_mask": None, "position_ids": torch.arange(SEQ).repeat(MICRO_BATCH, 1)}


def soak_one(schedule: str, opts: dict) -> dict:
    """Train `schedule` for opts['iterations'] iterations; per-iteration measurements of this rank."""
    import torch

    from primus_megatron.runtime import p2p as p2p_module
    from primus_megatron.runtime.wgrad_store import get_store
    from primus_megatron.train import determinism, pretrain
    from primus_megatron.train.arguments import parse_run
    from primus_megatron.train.forward_step import TrainingSteps
    from primus_megatron.train.model import build_model, build_optimizer, transformer_config

    args, spec = parse_run(["--cpu", "--mock-data", "--num-layers", str(NUM_LAYERS), "--hidden-size", str(HIDDEN),
                  "--num-attention-heads", str(HEADS), "--seq-length", str(SEQ), "--micro-batch-size",
                  str(MICRO_BATCH), "--global-batch-size", str(MICRO_BATCH * MICROBATCHES), "--lr", "1e-3",
                  "--pipeline-model-parallel-size", str(WORLD), "--pipeline-schedule", schedule,
                  "--pipeline-p2p-timeout", "120"], world_size=WORLD)
    model = build_model(args, spec, transformer_config(args, spec), VOCAB)
    steps = TrainingSteps(args, spec)
    forward_step = steps.forward_step
    determinism.install(model, args.seed, lambda: steps.iteration)
    optimizer, scheduler = build_optimizer(args, model)
    pretrain.configure_hooks(args, model, optimizer)
    fbf = pretrain.forward_backward_func(spec)
    data = batches(seed=7)
    store = get_store()

    created: list = []  # the P2P objects of the current step (the runtime makes one per step)
    original_init = p2p_module.P2P.__init__

    def recording_init(self, *a, **k):
        original_init(self, *a, **k)
        created.append(self)

    p2p_module.P2P.__init__ = recording_init
    rss, tensors, store_left, sends_left, seconds = [], [], 0, 0, []
    gc.collect()
    gc.freeze()  # everything built so far: not counted, not scanned
    try:
        for iteration in range(opts["iterations"]):
            steps.iteration = iteration
            created.clear()
            start = time.perf_counter()
            for chunk in model:
                chunk.zero_grad_buffer()
            optimizer.zero_grad()
            fbf(forward_step_func=forward_step, data_iterator=data, model=model if len(model) > 1 else model[0],
                num_microbatches=args.num_microbatches, seq_length=SEQ, micro_batch_size=MICRO_BATCH,
                decoder_seq_length=SEQ, forward_only=False)
            optimizer.step()
            scheduler.step(increment=args.global_batch_size)
            seconds.append(time.perf_counter() - start)
            if opts.get("inject_leak"):
                _LEAKED.append(torch.zeros(MICRO_BATCH * SEQ * HIDDEN))  # --inject-leak: 4 KiB kept per iteration
            store_left = max(store_left, sum(len(v) for v in store._queues.values()) + int(store.capturing))
            sends_left = max(sends_left, sum(len(p.sends) for p in created))
            rss.append(rss_bytes())
            if iteration % opts["sample_every"] == 0 or iteration == opts["iterations"] - 1:
                tensors.append((iteration, live_tensors()))
    finally:
        p2p_module.P2P.__init__ = original_init
        gc.unfreeze()
    del model, optimizer, scheduler, fbf
    gc.collect()
    return {"rss": rss, "tensors": tensors, "store_left": store_left, "sends_left": sends_left,
            "step_s": sorted(seconds)[len(seconds) // 2]}


def soak_body(rank: int, case: dict) -> dict:
    """Every schedule in turn, in the same processes: name -> this rank's soak_one result."""
    results = {}
    for name in case["schedules"]:
        results[name] = value = soak_one(name, case["opts"])
        if rank == 0:
            print(f"  {name}: done ({len(value['rss'])} iterations, {1e3 * value['step_s']:.0f} ms/step on "
                  f"rank {rank})", flush=True)
    return results


def run(schedules: list, opts: dict, timeout_s: float) -> dict:
    """name -> rank -> soak_one result."""
    case = {"pp": WORLD, "schedules": schedules, "opts": opts}
    try:
        per_rank = C.run_ranks(soak_body, case, WORLD, timeout_s=timeout_s, pin=False)
    except (RuntimeError, TimeoutError) as exc:
        raise SystemExit(f"soak: {exc}") from None
    return {name: {rank: res[name] for rank, res in enumerate(per_rank)} for name in schedules}


def options_error(opts: dict) -> Optional[str]:
    """One sentence on what is wrong with the soak options, or None."""
    for name in ("iterations", "window", "sample_every"):
        if opts[name] < 1:
            return f"--{name.replace('_', '-')} must be at least 1, got {opts[name]}"
    if opts["warmup"] < 0:
        return f"--warmup must be at least 0, got {opts['warmup']}"
    if opts["warmup"] + 2 * opts["window"] > opts["iterations"]:
        return (f"--warmup {opts['warmup']} + 2 x --window {opts['window']} exceeds {opts['iterations']} iterations")
    if opts["sample_every"] > opts["window"]:
        # a window without a tensor count could not be compared
        return f"--sample-every {opts['sample_every']} must be at most --window {opts['window']}"
    return None


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def judge(per_rank: dict, opts: dict) -> dict:
    """Growth between the first and the last window, worst rank first."""
    warm, window = opts["warmup"], opts["window"]
    rows = []
    for rank, res in sorted(per_rank.items()):
        rss = res["rss"]
        first, last = rss[warm:warm + window], rss[-window:]
        t_first = [n for i, n in res["tensors"] if warm <= i < warm + window]
        t_last = [n for i, n in res["tensors"] if i >= len(rss) - window]
        rows.append({"rank": rank, "iterations": len(rss), "rss_start": _mean(first) / 2 ** 20,
                     "rss_end": _mean(last) / 2 ** 20, "rss_growth": (_mean(last) - _mean(first)) / 2 ** 20,
                     "tensors_start": _mean(t_first), "tensors_end": _mean(t_last),
                     "tensor_growth": _mean(t_last) - _mean(t_first), "store_left": res["store_left"],
                     "sends_left": res["sends_left"], "step_ms": 1e3 * res["step_s"]})
    worst = max(rows, key=lambda r: (r["rss_growth"], r["tensor_growth"]))
    worst_t = max(rows, key=lambda r: r["tensor_growth"])  # the tensor columns show the rank the verdict reads
    worst = dict(worst, store_left=max(r["store_left"] for r in rows), sends_left=max(r["sends_left"] for r in rows),
                 tensors_start=worst_t["tensors_start"], tensors_end=worst_t["tensors_end"],
                 tensor_growth=worst_t["tensor_growth"])
    worst["ok"] = (worst["rss_growth"] <= opts["rss_tolerance_mib"] and worst["tensor_growth"] <= opts["tensor_tolerance"]
                   and worst["store_left"] == 0 and worst["sends_left"] == 0)
    return worst


def table(rows: list) -> str:
    return C.table(["schedule", "iterations", "ms/step", "RSS start (MiB)", "RSS end (MiB)", "RSS growth (MiB)",
                    "tensors start", "tensors end", "W store left", "p2p sends left", "verdict"],
                   [[f"`{name}`", r["iterations"], f"{r['step_ms']:.0f}", f"{r['rss_start']:.1f}",
                     f"{r['rss_end']:.1f}", f"{r['rss_growth']:+.2f}", f"{r['tensors_start']:.0f}",
                     f"{r['tensors_end']:.0f}", r["store_left"], r["sends_left"], "ok" if r["ok"] else "LEAK?"]
                    for name, r in rows])


def main(argv=None) -> int:
    parser = C.parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="60 iterations per schedule (windows of 15)")
    parser.add_argument("--iterations", type=int, default=None, help="iterations per schedule (default 300)")
    parser.add_argument("--schedules", default=None, help="comma-separated names (default: every registered one)")
    parser.add_argument("--warmup", type=int, default=None, help="iterations before the first window (default 10%%)")
    parser.add_argument("--window", type=int, default=None, help="iterations per window (default 25%%)")
    parser.add_argument("--sample-every", type=int, default=None, help="count live tensors every N iterations")
    parser.add_argument("--rss-tolerance-mib", type=float, default=4.0,
                        help="allowed RSS growth, mean of the last window minus the first (default 4 MiB)")
    parser.add_argument("--tensor-tolerance", type=float, default=0.0,
                        help="allowed growth of the live tensor count between the windows (default 0)")
    parser.add_argument("--inject-leak", action="store_true",
                        help="keep one small tensor per iteration alive, to see the check fail (implies --no-markdown)")
    args = parser.parse_args(argv)

    from primus_megatron import schedules as S

    iterations = args.iterations or (60 if args.quick else 300)
    opts = {"iterations": iterations, "warmup": args.warmup if args.warmup is not None else iterations // 10,
            "window": args.window or max(5, iterations // 4),
            "sample_every": args.sample_every or max(1, iterations // 30),
            "rss_tolerance_mib": args.rss_tolerance_mib, "tensor_tolerance": args.tensor_tolerance,
            "inject_leak": args.inject_leak}
    args.no_markdown = args.no_markdown or args.inject_leak
    problem = options_error(opts)
    if problem:
        parser.error(problem)
    if args.schedules:
        names = [S.info(n).name for n in args.schedules.split(",")]
    else:
        names = [n for n in S.names() if not S.info(n).needs_extra or _importable(S.info(n).needs_extra)]
    print(f"soak: {len(names)} schedules x {iterations} iterations on {WORLD} CPU ranks (pp={WORLD})", flush=True)
    started = time.monotonic()
    results = run(names, opts, timeout_s=60 + 2.0 * iterations * len(names))
    rows = [(name, judge(results[name], opts)) for name in names]
    elapsed = time.monotonic() - started
    body = C.section(
        C.command_line("benchmarks/soak.py", argv),
        f"pp={WORLD} CPU ranks (gloo), a {NUM_LAYERS}-layer GPT (hidden {HIDDEN}, {MICROBATCHES} "
        f"microbatches of {MICRO_BATCH} x {SEQ} tokens), megatron DDP and Adam, {iterations} iterations per "
        f"schedule in the same two processes, {elapsed:.0f} s on this machine. After every iteration: "
        f"deferred weight gradients left in the store and p2p sends still pending (both must be 0). "
        f"Growth = mean of the last {opts['window']} iterations minus the mean of the first "
        f"{opts['window']} after {opts['warmup']} warm-up iterations, worst of the two ranks; live tensors "
        f"created since the loop began counted (gc) every {opts['sample_every']} iterations. The RSS "
        f"growth of the first schedule run in the processes includes the allocator's warm-up. A schedule passes "
        f"with RSS growth <= {opts['rss_tolerance_mib']:g} MiB and tensor-count growth <= "
        f"{opts['tensor_tolerance']:g}.",
        table(rows))
    C.publish(args, SECTION, body, "soak")
    print(f"soak: {elapsed:.0f} s")
    return 0 if all(r["ok"] for _, r in rows) else 1


def _importable(extra: str) -> bool:
    module = {"ilp": "highspy"}.get(extra, extra)
    try:
        __import__(module)
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
