"""FP8 profiled on CPU: a small TE GPT in bf16 and in FP8 (delayed scaling), its measured F, B, W and what
each keeps, and the bubble and peak memory the planner gets from those costs at pp 8 and 16.

    python benchmarks/fp8_profile.py            # prints the section and replaces it in docs/benchmarks/fp8.md
    python benchmarks/fp8_profile.py --quick    # a smaller model, one repetition

The model: megatron-core's GPTModel on its TransformerEngine spec (causal attention, no dropout, learned
absolute positions, untied embeddings), bf16 parameters and pipeline dtype in megatron's Float16Module (as
Megatron-LM's `--bf16`); "FP8" adds `--fp8-format hybrid --fp8-recipe delayed` (E4M3 forward, E5M2
gradients). TransformerEngine does not install here: its layers are the tests' stand-in (tests/te_standin,
TE v2.11's classes), put first on the ranks' import path and answering as a Hopper (`emulate_fp8_device`),
so its FP8 is real: float8 casts with TE's scales and amax histories, GEMMs on the float8 data
(`torch._scaled_mm`), the FP8 weights cached across a step's microbatches (megatron's `is_first_microbatch`).

Two gloo ranks (pp=2), each pinned to a core, run `zb-h1`, one warm-up step then profiled steps (what
`--pipeline-profile-out` writes: runtime/profiler.py); bf16 and FP8 alternate, each repetition a fresh
model and runner; cells are medians over the repetitions. Memory is what the profiler counts on CPU, in
bytes per microbatch (the profile's units times its unit_bytes): mem_f what autograd saved in F (TE's
quantized tensors by their buffers, the cached FP8 weights left out: they outlive the microbatch), mem_b
what B adds (what it keeps for W less what it frees), held for W = -mem_w. tests/test_te_wgrad.py checks
those counts against the allocator's own on the same stand-in layers.

The planner's rows: per-stage means of each variant's profile as one rank's costs (times relative to that
variant's F, memory in units of bf16's F activations of a microbatch, so the peaks compare), simulated at
pp 8 and 16 with 2 pp microbatches: the bubble (idle share of the step) and the largest and smallest peak
activation memory of a rank. Times are CPU times of torch GEMMs and of the stand-in's casts in Python: they
say nothing of FP8's speed on a GPU (docs/benchmarks/fp8.md).
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from functools import partial
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common as C  # noqa: E402
import runtime_throughput as RT  # noqa: E402  (its microbatches, loss and forward step: megatron's contract)
from cp_profile import gpt_provider  # noqa: E402  (the same TE-spec GPTModel)

SECTION = "## FP8 (delayed scaling) against bf16, profiled on CPU"
TE_STANDIN = os.path.join(C.ROOT, "tests", "te_standin")
PP = 2
VARIANTS = ("bf16", "fp8")
FULL = {"num_layers": 4, "hidden": 256, "heads": 8, "seq": 256, "mbs": 2, "vocab": 1024, "m": 8, "steps": 2}
QUICK = {"num_layers": 2, "hidden": 64, "heads": 4, "seq": 64, "mbs": 1, "vocab": 256, "m": 4, "steps": 1}
KEYS = ("f", "b", "w", "mem_f", "mem_b", "mem_w")
SIM_PPS = (8, 16)
SIM_SCHEDULES = ("1f1b", "zb-h1", "zbv", "v-half")


def gpt_config(model: dict, fp8: bool):
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    extra = {"fp8": "hybrid", "fp8_recipe": "delayed"} if fp8 else {}
    return TransformerConfig(
        num_layers=model["num_layers"], hidden_size=model["hidden"], num_attention_heads=model["heads"],
        ffn_hidden_size=4 * model["hidden"], hidden_dropout=0.0, attention_dropout=0.0,
        use_cpu_initialization=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16, bf16=True,
        gradient_accumulation_fusion=False, bias_dropout_fusion=False, masked_softmax_fusion=False,
        pipeline_model_parallel_size=PP, deallocate_pipeline_outputs=True, **extra)


def profile_one(model: dict, variant: str) -> dict:
    """One profiled run of zb-h1: the measured per-stage costs (all-gathered: the same on both ranks)."""
    import torch
    from megatron.core.transformer.module import Float16Module
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager

    import primus_megatron as pm
    from primus_megatron.runtime.placement import init_by_global_name_

    FP8GlobalStateManager.reset()  # the other variant's amax buffers
    torch.manual_seed(1234)
    config = gpt_config(model, variant == "fp8")
    chunks = pm.build_model(partial(gpt_provider, config, model), schedule="zb-h1", num_layers=model["num_layers"])
    init_by_global_name_(chunks, seed=1234, std=0.02, num_layers=model["num_layers"])
    chunks = [Float16Module(config, c) for c in chunks]  # as Megatron-LM wraps a --bf16 model
    batches = RT.make_batches(model, model["m"], causal=False)
    steps = model["steps"]
    runner = pm.get_forward_backward_func("zb-h1", p2p_timeout_s=300, profile_steps=(1, 1 + steps))
    RT.run_steps(runner, chunks, batches, model, 1 + steps)  # the first warms up: the FP8 weights' cache, the amaxes
    costs, summary = runner.measured
    out = {k: list(getattr(costs, k)) for k in KEYS}
    out["unit_bytes"] = summary["unit_bytes"]
    out["fp8_modules"] = sum(bool(getattr(m, "fp8", False)) for c in chunks for m in c.modules())
    return out


def profile_body(rank: int, case: dict) -> dict:
    import transformer_engine.pytorch as te
    from transformer_engine.pytorch.quantization import emulate_fp8_device

    assert te.__file__.startswith(TE_STANDIN), te.__file__  # megatron must have found the stand-in
    with emulate_fp8_device("sm90"):  # the stand-in answers as a Hopper: FP8 runs, for real
        return C.runs_in_turn(VARIANTS, case["reps"], partial(profile_one, case["model"]))


def medians(runs: list) -> dict:
    """Per-stage medians over the repetitions; memory in bytes per microbatch (units x unit_bytes)."""
    out = {k: [statistics.median(r[k][s] for r in runs) for s in range(PP)] for k in ("f", "b", "w")}
    for k in ("mem_f", "mem_b", "mem_w"):
        out[k] = [statistics.median(r[k][s] * r["unit_bytes"] for r in runs) for s in range(PP)]
    out["fp8_modules"] = runs[0]["fp8_modules"]
    return out


def rank_costs(prof: dict, unit_bytes: float):
    """One rank's costs from the stages' means: times relative to this variant's F, memory in `unit_bytes`."""
    from primus_megatron import schedules as S

    mean = {k: statistics.mean(prof[k]) for k in KEYS}
    return S.Costs(f=1.0, b=mean["b"] / mean["f"], w=mean["w"] / mean["f"], mem_f=mean["mem_f"] / unit_bytes,
                   mem_b=mean["mem_b"] / unit_bytes, mem_w=-(mean["mem_f"] + mean["mem_b"]) / unit_bytes)


def simulate(name: str, pp: int, m: int, costs) -> dict:
    """Bubble and the largest and smallest per-rank peak activation memory of `name` under `costs`."""
    from primus_megatron import schedules as S

    result = S.simulate(S.generate(name, pp, m, costs=costs), costs)
    peaks = list(result.peak_memory)
    return {"bubble": max(0.0, 1.0 - sum(result.busy) / (pp * result.makespan)), "peak": max(peaks),
            "low": min(peaks)}


def measured_rows(prof: dict) -> list:
    """One row a quantity and stage: bf16, FP8, FP8/bf16 (times in ms, memory in KiB per microbatch)."""
    rows = []
    for stage in range(PP):
        for key, label, scale in (("f", "F ms", 1e3), ("b", "B ms", 1e3), ("w", "W ms", 1e3),
                                  ("mem_f", "mem_f KiB", 1 / 1024), ("mem_b", "mem_b KiB", 1 / 1024),
                                  ("mem_w", "held for W KiB (-mem_w)", -1 / 1024)):
            one, two = (prof[v][key][stage] * scale for v in VARIANTS)
            rows.append([stage, label, f"{one:.1f}", f"{two:.1f}", f"{two / one:.2f}" if one else "n/a"])
    return rows


def simulated_rows(prof: dict) -> list:
    unit = statistics.mean(prof["bf16"]["mem_f"])  # bf16's F activations of one microbatch on a rank
    costs = {v: rank_costs(prof[v], unit) for v in VARIANTS}
    rows = []
    for pp in SIM_PPS:
        for name in SIM_SCHEDULES:
            cells = {v: simulate(name, pp, 2 * pp, costs[v]) for v in VARIANTS}
            rows.append([pp, 2 * pp, name, *(f"{cells[v]['bubble']:.3f}" for v in VARIANTS),
                         *(f"{cells[v]['peak']:.2f} / {cells[v]['low']:.2f}" for v in VARIANTS),
                         f"{cells['fp8']['peak'] / cells['bf16']['peak']:.2f}"])
    return rows


def agreed_medians(res: list) -> dict:
    """{variant: medians} of rank 0's profiles, which rank 1's equal (the costs are all-gathered)."""
    if any([r["f"] for r in res[1][v]] != [r["f"] for r in res[0][v]] for v in VARIANTS):
        raise RuntimeError("the ranks' measured costs differ: they are all-gathered, so they must agree")
    return {v: medians(res[0][v]) for v in VARIANTS}


def report(res: list, model: dict, reps: int, elapsed: float, command: str) -> str:
    prof = agreed_medians(res)
    shape = ", ".join(f"{k} {v}" for k, v in model.items() if k not in ("m", "steps"))
    return C.section(
        command,
        f"{C.taken()}, zb-h1 at pp=2, {model['m']} microbatches, {model['steps']} profiled step(s), {reps} "
        f"repetition(s) per variant, {elapsed:.0f} s, load {C.load():.1f} on {os.cpu_count()} cores. Model: "
        f"{shape}; bf16 parameters; TE stand-in answering as a Hopper, its modules in FP8 on rank 0: "
        f"{prof['fp8']['fp8_modules']} in the FP8 run, {prof['bf16']['fp8_modules']} in the bf16 run. Medians over "
        "the repetitions; memory in KiB per microbatch.",
        C.table(["stage", "quantity", "bf16", "FP8", "FP8 / bf16"], measured_rows(prof)),
        "The planner from these costs (per-stage means as one rank's; times relative to each variant's F, "
        "memory in units of bf16's F activations of one microbatch), m = 2 pp: bubble, and the largest / "
        "smallest per-rank peak activation memory.",
        C.table(["pp", "m", "schedule", "bubble bf16", "bubble FP8", "peak bf16 (max / min)",
                 "peak FP8 (max / min)", "FP8 / bf16 peak"], simulated_rows(prof)))


def main(argv: Optional[list] = None) -> int:
    parser = C.parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="a smaller model, one repetition")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per variant (default 3; --quick 1)")
    args = parser.parse_args(argv)
    if args.reps is not None and args.reps < 1:
        parser.error("--reps must be a positive number of repetitions")
    model = QUICK if args.quick else FULL
    reps = args.reps or (1 if args.quick else 3)
    started = time.monotonic()
    res = C.run_ranks(profile_body, {"pp": PP, "model": model, "reps": reps}, PP, timeout_s=600 + 300 * reps,
                      sys_path=[TE_STANDIN, HERE])  # [rank][variant] -> one profile a repetition
    text = report(res, model, reps, time.monotonic() - started, C.command_line("benchmarks/fp8_profile.py", argv))
    C.publish(args, SECTION, text, "fp8_profile")
    return 0


if __name__ == "__main__":
    sys.exit(main())
