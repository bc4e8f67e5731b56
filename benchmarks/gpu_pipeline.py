"""The GPU benchmark's pipelined parts, pp=2: the host gap between ops (ours against megatron's 1F1B)
and activation offload's GPU path.

Both run the dense block's architecture (gpu_blocks.py; two layers per chunk: 8 layers, so one-chunk
schedules hold 4 per rank and V schedules 2 per chunk) on two pipeline ranks. On one GPU the ranks
share it, each a one-GPU node of its own (rank_launch.py, NCCL eager init); on CPU (the dry run)
they are forked gloo ranks (runtime/local_ranks.py).

**gap**: every variant (megatron's own 1F1B, our 1f1b, zb-h1, zbv; zb-h1 and zbv also with their
receives posted just in time, `--pipeline-recv-policy`: on ROCm a pending receive stalls compute,
PyTorch #172668, so the step times say which policy is faster there) runs the same microbatches on the
same weights (drawn per global parameter name, so every placement starts equal), one warm-up step,
then `steps` timed ones. The same instrument wraps megatron's `forward_step` and `backward_step`
(which megatron's schedule and our executor both call) and the weight-gradient store's `run` (our W
ops): per op an event pair on the current stream and the host's clock. Per rank and step:
- GPU busy: the sum of op spans; GPU gap: from one op's end to the next op's start on the stream
  (the GPU had no op of this rank to run: the host was late, or a receive had not arrived);
- host per op: the host's time inside the op (launching its kernels), and between ops (the
  schedule's own work: bookkeeping, posting p2p, any host synchronisation), per op;
- drain: after the host issued the step's last op, how long the GPU still ran (how far ahead of
  the GPU the host was; 0 when the host waits on the GPU).
Losses and every gradient are compared with megatron's 1F1B by per-parameter fingerprints (exact
bit sums of the gradient and its float64 norm) gathered by global name.

**offload**: zb-h1 and zbv each without offload, with `offload="all"` and with `"auto"` (memory
limit half the schedule's planned peak). The first step of an offloading run measures the copy
bandwidth (the runtime's start-up measurement); then `steps` timed steps. Per run: losses and
gradients against the run without offload (bitwise), the allocator's peak above the step's start
against the plan's resident peak, the step time, the bandwidth.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import statistics
import sys
import time
from functools import partial

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import gpu_blocks as G  # noqa: E402

PP = 2
NUM_LAYERS = 8
# megatron's 1F1B twice: with a fused attention whose backward is not deterministic (flash), its two
# runs differ as much as any other pair, which is the yardstick for ours against it
GAP_VARIANTS = ("megatron-1f1b", "megatron-1f1b again", "1f1b", "zb-h1", "zb-h1 just-in-time", "zbv",
                "zbv just-in-time")
JIT = " just-in-time"  # a gap variant with its receives posted just in time (`--pipeline-recv-policy`, issue 60)
OFFLOAD_SCHEDULES = ("zb-h1", "zbv")
OFFLOAD_MODES = ("off", "off again", "all", "auto")
AUTO_LIMIT_SHARE = 0.5  # auto's memory limit: this share of the schedule's planned peak without offload


# -- the instrument -----------------------------------------------------------------------------

class OpTrace:
    """Wraps megatron's forward_step / backward_step and the weight-gradient store's run: per op,
    (kind, host start, host end, start mark, end mark); marks are CUDA/HIP events on a GPU, the
    host's clock on CPU. Records only while `on`."""

    def __init__(self, device) -> None:
        import torch

        self.cuda = device.type == "cuda"
        self.torch = torch
        self.on = False
        self.records: list = []
        self._saved: list = []

    def mark(self):
        if self.cuda:
            event = self.torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def elapsed(self, a, b) -> float:
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a

    def _wrap(self, kind: str, fn):
        trace = self

        @functools.wraps(fn)  # the executor reads backward_step's signature (megatron 0.19 dropped model_type)
        def wrapped(*args, **kwargs):
            if not trace.on:
                return fn(*args, **kwargs)
            h0 = time.perf_counter()
            m0 = trace.mark()
            try:
                return fn(*args, **kwargs)
            finally:
                m1 = trace.mark()
                h1 = time.perf_counter()
                # the allocator's count as the op's kernels are issued (host order: the caching
                # allocator accounts at issue, not when the GPU gets there)
                mem = trace.torch.cuda.memory_allocated() if trace.cuda else 0
                trace.records.append((kind, h0, h1, m0, m1, mem))

        return wrapped

    def __enter__(self):
        from megatron.core.pipeline_parallel import schedules as m

        from primus_megatron.runtime.wgrad_store import WeightGradStore

        self._saved = [(m, "forward_step", m.forward_step), (m, "backward_step", m.backward_step),
                       (WeightGradStore, "run", WeightGradStore.run)]
        m.forward_step = self._wrap("F", m.forward_step)
        m.backward_step = self._wrap("B", m.backward_step)
        WeightGradStore.run = self._wrap("W", WeightGradStore.run)
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, fn in self._saved:
            setattr(owner, name, fn)

    def step_stats(self, host_start: float, host_issued: float, drain_s: float, step_s: float) -> dict:
        """This rank's numbers for the step just recorded (module doc)."""
        recs = self.records
        n = len(recs)
        spans = [self.elapsed(r[3], r[4]) for r in recs]
        gaps = [self.elapsed(recs[i][4], recs[i + 1][3]) for i in range(n - 1)]
        in_ops = sum(r[2] - r[1] for r in recs)
        kinds: dict = {}
        for r, span in zip(recs, spans):
            kinds.setdefault(r[0], []).append(span)
        return {"ops": n, "step_ms": 1e3 * step_s, "gpu_busy_ms": 1e3 * sum(spans),
                "gap_ms_total": 1e3 * sum(gaps), "gap_ms_median": 1e3 * statistics.median(gaps) if gaps else 0.0,
                "gap_ms_max": 1e3 * max(gaps, default=0.0),
                "host_in_op_ms": 1e3 * statistics.median([r[2] - r[1] for r in recs]) if recs else 0.0,
                "host_between_ms_per_op": 1e3 * ((host_issued - host_start) - in_ops) / max(1, n),
                "host_issue_ms": 1e3 * (host_issued - host_start), "drain_ms": 1e3 * drain_s,
                "op_ms": {k: 1e3 * statistics.median(v) for k, v in kinds.items()}}


# -- models, data, fingerprints --------------------------------------------------------------------

def build(block: dict, name: str, *, gpu: bool, attention: str):
    import primus_megatron as pm
    from primus_megatron import schedules as S

    chunks = S.info(name).chunks
    config = G.transformer_config(block, num_layers=NUM_LAYERS, pp=PP, chunks=chunks, gpu=gpu)
    model = pm.build_model(partial(G.provider, config, block, attention), schedule=name, num_layers=NUM_LAYERS)
    if gpu:
        import torch

        model = [c.to(torch.device("cuda", torch.cuda.current_device())) for c in model]
    G.init_weights_(model, seed=11, num_layers=NUM_LAYERS)
    return model


def fingerprints(model, chunk_elements: int = 1 << 26) -> dict:
    """global name -> (bit sum, position-weighted bit sum, float64 sum, float64 norm) of its gradient:
    the first two differ whenever a bit does (almost surely), the last two say by how much. Read in
    slices, so a vocabulary-sized gradient needs no int64 copy of itself."""
    import torch

    from primus_megatron.runtime.placement import named_global_parameters

    out = {}
    for chunk in model:
        for name, p in named_global_parameters(chunk):
            g = p.grad if p.grad is not None else getattr(p, "main_grad", None)
            if g is None:
                continue
            flat = g.detach().contiguous().view(-1)
            bits = flat.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()])
            plain = weighted = 0
            total = squares = 0.0
            for lo in range(0, flat.numel(), chunk_elements):
                part = bits[lo:lo + chunk_elements].to(torch.int64)
                weights = torch.arange(lo, lo + part.numel(), device=part.device, dtype=torch.int64) % 65521 + 1
                plain += int(part.sum())
                weighted += int((part * weights).sum())
                f64 = flat[lo:lo + chunk_elements].double()
                total += float(f64.sum())
                squares += float((f64 * f64).sum())
            out[name] = (plain, weighted, total, squares ** 0.5)
    return out


def gathered(value):
    import torch.distributed as dist

    box: list = [None] * dist.get_world_size()
    dist.all_gather_object(box, value)
    return box


def compare(mine: dict, ref: dict) -> dict:
    """Gradient fingerprints (merged over ranks) and losses against a reference run's."""
    names = sorted(set(mine["grads"]) | set(ref["grads"]))
    same = [n for n in names if n in mine["grads"] and n in ref["grads"] and
            mine["grads"][n][:2] == ref["grads"][n][:2]]
    worst = 0.0
    for n in names:
        if n in mine["grads"] and n in ref["grads"]:
            a, b = mine["grads"][n][3], ref["grads"][n][3]
            worst = max(worst, abs(a - b) / max(abs(b), 1e-30))
    loss_diff = max((abs(a - b) for a, b in zip(mine["losses"], ref["losses"])), default=None)
    return {"grads_bitwise": len(same) == len(names) and bool(names), "grads_compared": len(names),
            "grads_differing": len(names) - len(same), "grad_norm_max_rel_diff": worst,
            "losses_bitwise": mine["losses"] == ref["losses"] and bool(ref["losses"]),
            "loss_max_diff": loss_diff}


def _losses(store) -> list:
    return [float(v) for entry in store or [] for key, t in entry.items() if key == "lm loss"
            for v in t.detach().float().cpu().view(-1)[:1].tolist()]


# -- one variant ------------------------------------------------------------------------------------

def run_steps(fbf, model, batches: list, *, steps: int, trace: OpTrace, device, block: dict, warmup: int = 1,
              on_step=None, before_step=None) -> dict:
    """`warmup` + `steps` steps of `fbf`; per timed step this rank's stats, its losses and peak memory."""
    import torch
    import torch.distributed as dist

    gpu = device.type == "cuda"
    kw = dict(forward_step_func=G.forward_step, seq_length=block["seq"], micro_batch_size=block["mbs"],
              decoder_seq_length=block["seq"], num_microbatches=len(batches))
    per_step, losses, peaks = [], [], []
    for i in range(warmup + steps):
        for chunk in model:
            chunk.zero_grad(set_to_none=True)
        data = [iter(batches) for _ in model] if len(model) > 1 else iter(batches)
        dist.barrier()
        if gpu:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() if gpu else 0
        trace.records = []
        trace.on = i >= warmup
        if before_step is not None:
            before_step(i)
        start_mark = trace.mark()
        h0 = time.perf_counter()
        store = fbf(data_iterator=data, model=model if len(model) > 1 else model[0], **kw)
        h1 = time.perf_counter()
        end_mark = trace.mark()
        if gpu:
            torch.cuda.synchronize()
        drain = time.perf_counter() - h1
        trace.on = False
        if on_step is not None:
            on_step(i)
        if i >= warmup:
            per_step.append(trace.step_stats(h0, h1, drain if gpu else 0.0, trace.elapsed(start_mark, end_mark)))
            peaks.append((torch.cuda.max_memory_allocated() - base) if gpu else 0)
            losses = _losses(store)
    keys = [k for k in per_step[0] if k != "op_ms"]
    stats = {k: statistics.median(s[k] for s in per_step) for k in keys}
    stats["op_ms"] = per_step[len(per_step) // 2]["op_ms"]
    # the last step's allocator count after each op (MiB above the step's start): where a peak builds
    op_memory = [(r[0], round((r[5] - base) / 2**20)) for r in trace.records] if gpu else []
    return {"stats": stats, "losses": losses, "peak_bytes": max(peaks) if peaks else 0, "op_memory_mib": op_memory}


def gap_part(rank: int, case: dict, device, emit) -> None:
    import torch
    from megatron.core.pipeline_parallel import get_forward_backward_func as megatron_fbf

    import primus_megatron as pm

    gpu = device.type == "cuda"
    with OpTrace(device) as trace:
        for seq in case["seqs"]:
            block = {**G.blocks(case["dry_run"])["dense"], "seq": seq}
            batches = G.make_batches(block, case["microbatches"], device, seed=seq)
            models: dict = {}
            model = reference = None
            for name in case["variants"]:
                started = time.monotonic()
                megatron = name.startswith("megatron-1f1b")
                schedule = name[:-len(JIT)] if name.endswith(JIT) else name
                placement = "megatron-1f1b" if megatron or schedule in ("1f1b", "zb-h1") else schedule
                if placement not in models:
                    model = None
                    models.clear()  # one model alive at a time
                    if gpu:
                        torch.cuda.empty_cache()
                    models[placement] = build(block, "1f1b" if placement == "megatron-1f1b" else placement,
                                              gpu=gpu, attention=case["attention"])
                model = models[placement]
                fbf = megatron_fbf() if megatron else pm.get_forward_backward_func(
                    schedule, p2p_timeout_s=case["p2p_timeout_s"], losses_on_last_rank=True, record_timeline=False,
                    recv_policy="just-in-time" if name.endswith(JIT) else "early")
                res = run_steps(fbf, model, batches, steps=case["steps"], trace=trace, device=device, block=block)
                mine = {"grads": {k: v for part in gathered(fingerprints(model)) for k, v in part.items()},
                        "losses": [x for part in gathered(res["losses"]) for x in part]}
                per_rank = gathered({**res["stats"], "peak_gib": res["peak_bytes"] / 2**30})
                row = {"part": "gap", "variant": name, "seq": seq, "microbatches": case["microbatches"],
                       "ranks": per_rank, "wall_s": round(time.monotonic() - started, 1)}
                if reference is None and megatron:
                    reference = mine
                elif reference is not None:
                    row["vs_megatron_1f1b"] = compare(mine, reference)
                emit(row)


def offload_part(rank: int, case: dict, device, emit) -> None:
    import torch

    import primus_megatron as pm
    from primus_megatron import schedules as S
    from primus_megatron.runtime.offload_copies import copy_seconds

    gpu = device.type == "cuda"
    block = G.blocks(case["dry_run"])["dense"]
    batches = G.make_batches(block, case["microbatches"], device, seed=5)
    costs = None
    if case.get("costs"):  # the split part's measured costs of this block (--pipeline-costs form)
        from primus_megatron.megatron_lm.args import parse_costs

        costs = parse_costs(case["costs"])
    nbytes = 64 * 2**20 if gpu else 2**20
    seconds = copy_seconds(nbytes, device)
    emit({"part": "offload-copy", "bytes": nbytes, "gbps": nbytes / seconds / 1e9})
    with OpTrace(device) as trace:
        for name in case["schedules"]:
            model = build(block, name, gpu=gpu, attention=case["attention"])
            reference = None
            sched = S.generate(name, PP, case["microbatches"], costs=costs)
            planned_off = S.simulate(sched, costs).max_peak_memory
            for mode in case["modes"]:
                started = time.monotonic()
                options = dict(p2p_timeout_s=case["p2p_timeout_s"], losses_on_last_rank=True, costs=costs)
                if not mode.startswith("off"):
                    options["offload"] = mode
                if mode == "auto":
                    options["memory_limit"] = AUTO_LIMIT_SHARE * planned_off
                runner = pm.get_forward_backward_func(name, **options)
                res = run_steps(runner, model, batches, steps=case["steps"], trace=trace, device=device, block=block)
                key = (PP, case["microbatches"], False)
                plan = runner.planner.offload_plan(key)
                sched_run, _ = runner.plan(PP, case["microbatches"])
                simulated = S.offload.simulate_offload(sched_run, plan, costs) if plan is not None \
                    else S.simulate(sched_run, costs)
                mine = {"grads": {k: v for part in gathered(fingerprints(model)) for k, v in part.items()},
                        "losses": [x for part in gathered(res["losses"]) for x in part]}
                step = runner.last_step
                per_rank = gathered({"step_ms": res["stats"]["step_ms"], "peak_gib": res["peak_bytes"] / 2**30,
                                     "op_memory_mib": res["op_memory_mib"],
                                     "moved": getattr(step, "offloaded", 0),
                                     "moved_gib": getattr(step, "offloaded_bytes", 0) / 2**30,
                                     "moved_w": getattr(step, "offloaded_w", 0),
                                     "peak_host_gib": getattr(step, "peak_host_bytes", 0) / 2**30})
                row = {"part": "offload", "schedule": name, "mode": mode, "microbatches": case["microbatches"],
                       "costs": case.get("costs"),
                       "ranks": per_rank, "planned_peak": list(simulated.peak_memory),
                       "memory_limit": options.get("memory_limit"),
                       "bandwidth_units": runner.spec.offload_bandwidth,
                       "planned_keys": plan.count if plan is not None else 0,
                       "planned_w_shares": plan.count_w if plan is not None else 0,
                       "wall_s": round(time.monotonic() - started, 1)}
                if reference is None:
                    reference = mine
                else:
                    row["vs_off"] = compare(mine, reference)
                emit(row)
            del model
            if gpu:
                torch.cuda.empty_cache()


BUSY_SECONDS = 0.05  # offload check: the device's head start on every step (the host runs ahead)


def _scribbling(device):
    """Patch the offloader so that, as each F's (B's) storages go back to the allocator, the compute
    stream allocates a block of each one's size and fills it with 0xFF: a block reused before its copy
    out has run (a missing record_stream) would hand the copy garbage, and the gradients would differ.
    One piece per freed storage, all held at once: the caching allocator gives a request the smallest
    free block that fits in its pool (blocks up to 1 MB and larger ones are pools apart, and a block is
    split, never merged with another segment's), so a piece of a storage's size lands on that storage's
    block, where one request of the whole entry's size could land on none of them."""
    import torch

    from primus_megatron.runtime import offload as rt

    original = rt.ActivationOffload._copy_out

    def copy_out(self, key, entry, *rest):
        original(self, key, entry, *rest)
        junk = [torch.full((n,), 255, dtype=torch.uint8, device=device) for n in entry.freed_sizes]
        del junk

    rt.ActivationOffload._copy_out = copy_out
    return lambda: setattr(rt.ActivationOffload, "_copy_out", original)


def offload_check_part(rank: int, case: dict, device, emit) -> None:
    """Issue 46's one-GPU offload check, pp=2 (module doc of gpu_bench.py, part offload-check)."""
    import torch

    import primus_megatron as pm
    from primus_megatron import schedules as S
    from primus_megatron.runtime import offload_copies as C

    gpu = device.type == "cuda"
    block = G.blocks(case["dry_run"])["dense"]
    if case.get("check_seq"):  # 20 steps with everything offloaded: a shorter sequence than the other parts'
        block = {**block, "seq": case["check_seq"]}
    microbatches = case.get("check_microbatches") or case["microbatches"]
    batches = G.make_batches(block, microbatches, device, seed=7)
    steps = case["check_steps"]
    cycles = 0
    if gpu:  # cycles of torch.cuda._sleep that keep the device busy for BUSY_SECONDS
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(10 ** 6)
        end.record()
        end.synchronize()
        cycles = int(10 ** 6 * BUSY_SECONDS / max(start.elapsed_time(end) / 1e3, 1e-6))

    def busy(_step: int) -> None:
        if gpu:
            torch.cuda._sleep(cycles)

    restore = _scribbling(device)
    try:
        with OpTrace(device) as trace:
            for name in case["schedules"]:
                # megatron's local attention: its backward is deterministic, so the comparison can be bitwise
                # (flash attention's backward differs run to run, as the gap part's second megatron run shows)
                model = build(block, name, gpu=gpu, attention="local")
                sched = S.generate(name, PP, microbatches)
                planned_off = S.simulate(sched).max_peak_memory
                reference = None
                for mode in ("off", "all"):
                    started = time.monotonic()
                    options = dict(p2p_timeout_s=case["p2p_timeout_s"], losses_on_last_rank=True,
                                   profile_steps=(1, 1 + min(2, steps)))
                    if mode != "off":
                        options["offload"] = mode
                    runner = pm.get_forward_backward_func(name, **options)
                    streams, pinned = set(), []

                    def after(step: int) -> None:
                        copies = getattr(runner.last_step, "offload_copies", None)
                        if copies is not None and getattr(copies, "cuda", False):
                            streams.add((copies.d2h.cuda_stream, copies.h2d.cuda_stream))
                        if gpu and hasattr(torch.cuda, "host_memory_stats"):
                            pinned.append(torch.cuda.host_memory_stats().get("allocated_bytes.current", 0))

                    res = run_steps(runner, model, batches, steps=steps, trace=trace, device=device, block=block,
                                    on_step=after, before_step=busy)
                    step = runner.last_step
                    profile = runner.window.profile
                    mem_b = {f"{k}{stage}": statistics.median(v) for (k, stage), v in sorted(profile.memory.items())
                             if k == "B" and v} if profile is not None else {}
                    plan = runner.planner.offload_plan((PP, microbatches, False))
                    sched_run, _ = runner.plan(PP, microbatches)
                    planned = S.offload.simulate_offload(sched_run, plan).max_peak_memory if plan else planned_off
                    copy_rate = None
                    if step is not None and step.offload_copies is not None:
                        from primus_megatron.runtime.offload import lane_rate

                        copy_rate = lane_rate(step.copy_seconds)
                    nbytes = max(1, getattr(step, "offloaded_bytes", 0) // max(1, getattr(step, "offloaded", 1)))
                    alone = nbytes / C.copy_seconds(nbytes, device) if mode != "off" else None
                    mine = {"grads": {k: v for part in gathered(fingerprints(model)) for k, v in part.items()},
                            "losses": [x for part in gathered(res["losses"]) for x in part]}
                    per_rank = gathered({
                        "peak_gib": res["peak_bytes"] / 2**30,
                        "reserved_gib": (torch.cuda.max_memory_reserved() / 2**30) if gpu else 0.0,
                        "profiled_b_mib": {k: round(v / 2**20, 2) for k, v in mem_b.items()},
                        "stream_pairs": len(streams), "external_streams": bool(C._runtime_library()) if gpu else None,
                        "pinned_reported_mib": getattr(step, "peak_host_bytes", 0) / 2**20,
                        # what torch's host allocator holds after a step (cached blocks too), the most of any step
                        "pinned_held_mib": (max(pinned) / 2**20) if pinned else None,
                        "copy_gbps_in_run": None if copy_rate in (None, float("inf")) else copy_rate / 1e9,
                        "copy_gbps_alone": None if alone is None else alone / 1e9,
                        "kept_mib": getattr(step, "offload_kept_bytes", 0) / 2**20})
                    row = {"part": "offload-check", "schedule": name, "mode": mode, "steps": steps,
                           "busy_s": BUSY_SECONDS if gpu else 0.0, "planned_peak": planned,
                           "planned_peak_off": planned_off, "ranks": per_rank,
                           "wall_s": round(time.monotonic() - started, 1)}
                    if reference is None:
                        reference = (mine, per_rank)
                    else:
                        row["vs_off"] = compare(mine, reference[0])
                        row["profiled_b_equal"] = all(a["profiled_b_mib"] == b["profiled_b_mib"]
                                                      for a, b in zip(per_rank, reference[1]))
                        row["profiled_b_max_rel_diff"] = max(
                            (abs(a["profiled_b_mib"][k] - v) / max(abs(v), 1e-9) for a, b in zip(per_rank, reference[1])
                             for k, v in b["profiled_b_mib"].items() if k in a["profiled_b_mib"]), default=None)
                        row["peak_vs_off"] = [a["peak_gib"] / b["peak_gib"] if b["peak_gib"] else None
                                              for a, b in zip(per_rank, reference[1])]
                        row["planned_vs_off"] = planned / planned_off if planned_off else None
                    emit(row)
                del model
                if gpu:
                    torch.cuda.empty_cache()
    finally:
        restore()


PARTS = {"gap": gap_part, "offload": offload_part, "offload-check": offload_check_part}


def body(rank: int, case: dict) -> list:
    """One rank of a part (runtime/local_ranks.py's contract on CPU; `worker` on GPUs)."""
    import torch

    device = torch.device("cuda", torch.cuda.current_device()) if case["gpu"] else torch.device("cpu")
    if case.get("deterministic"):  # bitwise comparisons: flash attention's backward has a deterministic mode
        torch.use_deterministic_algorithms(True, warn_only=True)
    rows: list = []

    def emit(row: dict) -> None:
        rows.append(row)
        if rank == 0 and case.get("progress"):
            with open(case["progress"], "a") as f:
                f.write(json.dumps(row, default=str) + "\n")

    PARTS[case["part"]](rank, case, device, emit)
    return rows


def worker(case_file: str) -> int:
    """One rank of a GPU launch (rank_launch.py's one-GPU-node variables), NCCL eager init."""
    import faulthandler
    import signal

    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    faulthandler.register(signal.SIGUSR1, all_threads=True)
    with open(case_file) as f:
        case = json.load(f)
    timeout = datetime.timedelta(seconds=case["p2p_timeout_s"] * 2)
    if case["gpu"]:
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local), timeout=timeout)
    else:  # the tests: this launch path with gloo
        from primus_megatron.compat import cpu

        cpu.enable()
        dist.init_process_group("gloo", timeout=timeout)
    ps.initialize_model_parallel(1, PP)
    if case["gpu"]:  # megatron's layers fork its CUDA RNG tracker (pretrain_gpt seeds it at start-up)
        from megatron.core import tensor_parallel

        tensor_parallel.model_parallel_cuda_manual_seed(1234)
    try:
        body(dist.get_rank(), case)
    except Exception as exc:  # noqa: BLE001 (the launcher reports it; the peer is ended with this launch)
        import traceback

        print(f"gpu_pipeline worker rank {dist.get_rank()}: {type(exc).__name__}: {str(exc)[:800]}\n"
              f"{traceback.format_exc()[-4000:]}", file=sys.stderr, flush=True)
        os._exit(3)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def launch(case: dict, where: str, *, timeout_s: float, on_cpu: bool = False) -> tuple[list, str | None]:
    """Run a part on PP ranks: one-GPU nodes sharing the GPUs there are (rank_launch.py), or with
    `on_cpu` that same path over gloo. Returns (rows, None) or (rows so far, why it ended early)."""
    import rank_launch
    import torch

    os.makedirs(where, exist_ok=True)
    case_file, progress = os.path.join(where, "case.json"), os.path.join(where, "progress.jsonl")
    with open(case_file, "w") as f:
        json.dump({**case, "progress": progress}, f)
    open(progress, "w").close()
    env = dict(os.environ)
    if case.get("deterministic"):  # cuBLAS's deterministic workspace, read when CUDA starts
        env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    env["PYTHONPATH"] = os.pathsep.join([ROOT, HERE, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    gpus = max(1, torch.cuda.device_count()) if not on_cpu else 1
    job = rank_launch.Launch([os.path.abspath(__file__), "--worker", case_file], env, ROOT, PP,
                             os.path.join(where, "log.txt"), shared=True, gpus=gpus)
    deadline = time.monotonic() + timeout_s
    while (code := job.poll()) is None and time.monotonic() < deadline:
        time.sleep(0.5)
    why = None
    if code is None:
        job.stop_with_stacks()
        why = f"ran past its {timeout_s:.0f} s (every rank's stack in {', '.join(job.logs)})"
    elif code != 0:
        lines = [ln for ln in job.output().splitlines() if "gpu_pipeline worker rank" in ln or "Error" in ln]
        why = f"exit status {code}: {(lines[0] if lines else 'no error line')[:600]} (logs: {', '.join(job.logs)})"
    with open(progress) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return rows, why


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", required=True)
    return worker(parser.parse_args(argv).worker)


if __name__ == "__main__":
    sys.exit(main())
