"""W-time with gradient-accumulation fusion vs megatron's own backward (CPU).

    python benchmarks/wgrad_fusion.py            # writes docs/benchmarks/runtime-cpu.md's section
    python benchmarks/wgrad_fusion.py --reps 3   # fewer repetitions

pp=2 gloo ranks pinned one per core, the model of runtime_throughput.py,
Megatron-LM's default wiring (megatron DDP, overlapped and aligned gradient
reduce, gradient-accumulation fusion through compat.cpu's version of apex's
kernel), fp32 and bf16 (Float16Module, fp32 gradient buffers). Per
repetition, in turn: one step of megatron-core's 1F1B, timing every
`backward_step` it makes, and one step of our `zb-h1`, timing its B and W ops
from the executed timeline. Reported per microbatch and stage, median over
repetitions: megatron's backward, our B, our W, and (B + W) / megatron's
backward; the split costs what the two extra passes over the closures and
the W GEMMs issued on their own cost.
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from functools import partial

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402
import runtime_throughput as R  # noqa: E402

SECTION = "## W time with gradient-accumulation fusion (CPU, pp=2, one core per rank)"
M = 8  # microbatches per step
READING = (
    "W accumulates through the kernel megatron's own fused backward calls (apex's on GPU, compat.cpu's on CPU) "
    "with no weight-sized temporary; B + W against megatron's one backward shows what the split itself costs "
    "(a second pass over the layers' closures, the GEMMs issued apart). Run-to-run spread on this shared 2-core "
    "machine is about 5 %, so ratios within 0.95-1.05 are no measurable difference.")


def _wire(model, config) -> None:
    from megatron.core.distributed import finalize_model_grads

    no_sync = [m.no_sync for m in model]
    sync = [m.start_grad_sync for m in model]
    config.no_sync_func = no_sync if len(model) > 1 else no_sync[0]
    config.grad_sync_func = sync if len(model) > 1 else sync[0]
    config.finalize_model_grads_func = finalize_model_grads


def _ddp(chunks, config, bf16: bool) -> list:
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.transformer.module import Float16Module

    if bf16:
        chunks = [Float16Module(config, c) for c in chunks]
    ddp = DistributedDataParallelConfig(overlap_grad_reduce=True, grad_reduce_in_fp32=True)
    model = [DistributedDataParallel(config, ddp, c, disable_bucketing=i > 0) for i, c in enumerate(chunks)]
    _wire(model, config)
    return model


def body(rank: int, case: dict) -> dict:
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.pipeline_parallel import schedules as mschedules

    import primus_megatron as pm

    model_spec, bf16 = R.MODEL, case["bf16"]

    def config_for():
        config = R.gpt_config(model_spec, 2, 1)
        config.gradient_accumulation_fusion = True
        if bf16:
            config.bf16, config.params_dtype, config.pipeline_dtype = True, torch.bfloat16, torch.bfloat16
        return config

    # megatron's own: chunks as Megatron-LM builds them for its 1F1B
    mconfig = config_for()
    mchunk = R.gpt_provider(mconfig, model_spec, pre_process=ps.is_pipeline_first_stage(),
                            post_process=ps.is_pipeline_last_stage())
    from primus_megatron.runtime.placement import init_by_global_name_

    init_by_global_name_([mchunk], seed=1234, std=0.02, num_layers=model_spec["num_layers"])
    megatron_model = _ddp([mchunk], mconfig, bf16)
    megatron_fbf = get_forward_backward_func()

    oconfig = config_for()
    ours = pm.build_model(partial(R.gpt_provider, oconfig, model_spec), schedule="zb-h1")
    init_by_global_name_(ours, seed=1234, std=0.02, num_layers=model_spec["num_layers"])
    our_model = _ddp(ours, oconfig, bf16)
    our_fbf = pm.get_forward_backward_func("zb-h1", p2p_timeout_s=120)

    timed: list[float] = []
    original_backward = mschedules.backward_step

    def timed_backward(*args, **kwargs):
        start = time.perf_counter()
        out = original_backward(*args, **kwargs)
        timed.append(time.perf_counter() - start)
        return out

    batches = R.make_batches(model_spec, M, seed=1)
    rows = {"megatron": [], "B": [], "W": []}

    def step(fbf, model):
        for m in model:
            m.zero_grad_buffer()
        torch.distributed.barrier()
        fbf(forward_step_func=R.forward_step, data_iterator=iter(batches), model=model[0], num_microbatches=M,
            seq_length=model_spec["seq"], micro_batch_size=model_spec["mbs"])

    for rep in range(case["reps"] + 1):  # the first repetition warms up
        mschedules.backward_step = timed_backward
        try:
            timed.clear()
            step(megatron_fbf, megatron_model)
        finally:
            mschedules.backward_step = original_backward
        step(our_fbf, our_model)
        if rep == 0:
            continue
        rows["megatron"].append(statistics.median(timed))
        for kind in ("B", "W"):
            rows[kind].append(statistics.median(r.end - r.start for r in our_fbf.last_step.timeline
                                                if r.op.kind == kind))
    return {k: statistics.median(v) for k, v in rows.items()}


def main(argv=None) -> int:
    parser = C.parser(__doc__)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--no-write", action="store_true", help="the same as --no-markdown (older name)")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error(f"--reps must be >= 1, got {args.reps}")
    args.no_markdown = args.no_markdown or args.no_write
    rows = []
    for bf16 in (False, True):
        per_rank = C.run_ranks(body, {"pp": 2, "bf16": bf16, "reps": args.reps}, 2, timeout_s=1800)
        for rank, res in enumerate(per_rank):
            rows.append(["bf16" if bf16 else "fp32", rank, f"{1e3 * res['megatron']:.2f}", f"{1e3 * res['B']:.2f}",
                         f"{1e3 * res['W']:.2f}", f"{(res['B'] + res['W']) / res['megatron']:.3f}"])
    text = C.section(
        C.command_line("benchmarks/wgrad_fusion.py", argv),
        f"Run on {time.strftime('%Y-%m-%d')}. "
        f"{R.MODEL['num_layers']}-layer GPT, hidden {R.MODEL['hidden']}, sequence {R.MODEL['seq']}, micro "
        f"batch {R.MODEL['mbs']}, {M} microbatches, megatron DDP with overlapped aligned gradient reduce and "
        f"gradient-accumulation fusion (compat.cpu's kernel), pp=2 ranks pinned one per core. Per microbatch "
        f"and stage, median of {args.reps} interleaved repetitions: megatron-core 1F1B's `backward_step`, our "
        f"zb-h1's B and W ops on the same model and weights.",
        C.table(["precision", "stage", "megatron backward (ms)", "our B (ms)", "our W (ms)", "(B + W) / backward"],
                rows),
        READING)
    C.publish(args, SECTION, text, "wgrad_fusion")
    return 0


if __name__ == "__main__":
    sys.exit(main())
