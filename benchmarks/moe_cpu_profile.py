"""A small MoE GPT with grouped experts profiled on CPU: F, B and W per stage with the experts'
weight gradients in B (before issue 38) and in W, and what those measured costs give at pp=8.

    python benchmarks/moe_cpu_profile.py            # prints the section and replaces it in docs/benchmarks/moe-and-pairs.md

The model: megatron-core's GPTModel on its TransformerEngine spec with grouped experts
(TEGroupedMLP over TE's GroupedLinear, `--moe-grouped-gemm`), Qwen3-MoE's shape in small:
hidden 256, 8 heads with 2 query groups (GQA), 4 layers, 8 routed experts (top 2) of FFN 256
with SwiGLU, no shared expert, the aux loss, no linear biases; sequence 256, micro batch 2,
vocabulary 1024. TransformerEngine does not install here: its layers are the tests' stand-in
(tests/te_standin, TE v2.11's classes; the GEMMs are the same products in torch), put first on
the ranks' import path.

Two gloo ranks (pp=2), each pinned to a core, run `zb-h1` with m=8 and profile steps 1-3
(`profile_steps`, what `--pipeline-profile-out` writes). "experts' W in B" builds the same model
with TE's GroupedLinear left out of the layers our hook splits, as before issue 38 (their
weight-gradient GEMMs run inside B); "in W" is today's runtime. The variants alternate, each
repetition a fresh model and runner; cells are medians over the repetitions.

`held for W` is what B keeps alive for W in units of F's activations (the profile's
mem_f + mem_b, the planner's -mem_w): with the experts' W in W, the permuted expert inputs and
their gradient outputs stay until W.

The last table feeds the measured per-stage means (F-normalised, memory as measured) to the
simulator at pp=8: the bubble and peak memory of each schedule, the experts' W in B and in W.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from functools import partial

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common as C  # noqa: E402

SECTION = "## MoE GPT with grouped experts profiled on CPU (pp=2, the experts' W in B and in W)"
TE_STANDIN = os.path.join(C.ROOT, "tests", "te_standin")
MODEL = {"num_layers": 4, "hidden": 256, "heads": 8, "groups": 2, "experts": 8, "topk": 2, "expert_ffn": 256,
         "seq": 256, "mbs": 2, "vocab": 1024}
VARIANTS = ("experts' W in B", "experts' W in W")
M = 8
SIM_SCHEDULES = ("1f1b", "interleaved-1f1b", "zb-h1", "zbv", "v-half")


def moe_config(model: dict, pp: int):
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(
        num_layers=model["num_layers"], hidden_size=model["hidden"], num_attention_heads=model["heads"],
        num_query_groups=model["groups"], ffn_hidden_size=4 * model["hidden"], hidden_dropout=0.0,
        attention_dropout=0.0, add_bias_linear=False, gated_linear_unit=True, activation_func=F.silu,
        num_moe_experts=model["experts"], moe_router_topk=model["topk"], moe_ffn_hidden_size=model["expert_ffn"],
        moe_grouped_gemm=True, moe_token_dispatcher_type="alltoall", moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=1e-2, use_cpu_initialization=True, params_dtype=torch.float32,
        pipeline_dtype=torch.float32, bf16=False, gradient_accumulation_fusion=False, bias_dropout_fusion=False,
        masked_softmax_fusion=False, pipeline_model_parallel_size=pp, deallocate_pipeline_outputs=True)


def moe_provider(config, model: dict, pre_process=True, post_process=True, vp_stage=None):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    spec = get_gpt_layer_with_transformer_engine_spec(num_experts=model["experts"], moe_grouped_gemm=True)
    return GPTModel(config, spec, vocab_size=model["vocab"], max_sequence_length=model["seq"],
                    pre_process=pre_process, post_process=post_process, share_embeddings_and_output_weights=False,
                    position_embedding_type="rope", vp_stage=vp_stage)


@contextlib.contextmanager
def grouped_experts_in_b():
    """TE's GroupedLinear left out of the classes our hook splits (runtime.te_wgrad), as before
    issue 38: the grouped experts compute their weight gradients in B."""
    from primus_megatron.runtime import te_wgrad

    original = te_wgrad._te_classes

    def without_grouped():
        import transformer_engine.pytorch as te

        base, split = original()
        return base, tuple(c for c in split if c is not te.GroupedLinear)

    te_wgrad._te_classes = without_grouped
    try:
        yield
    finally:
        te_wgrad._te_classes = original


def profile_body(rank: int, case: dict) -> dict:
    import torch

    import primus_megatron as pm
    import runtime_throughput as RT
    from primus_megatron.runtime import te_wgrad
    from primus_megatron.runtime.placement import init_by_global_name_

    import transformer_engine.pytorch as te
    assert te.__file__.startswith(TE_STANDIN), te.__file__
    model_cfg, pp = case["model"], case["pp"]
    batches = RT.make_batches(model_cfg, M)
    seq, mbs = model_cfg["seq"], model_cfg["mbs"]
    kw = dict(forward_step_func=RT.forward_step, seq_length=seq, micro_batch_size=mbs, decoder_seq_length=seq,
              forward_only=False, num_microbatches=M)
    out = {v: [] for v in VARIANTS}
    grouped = {}
    for rep in range(case["reps"]):
        for variant in C.in_turn(VARIANTS, rep):
            scope = grouped_experts_in_b() if variant == VARIANTS[0] else contextlib.nullcontext()
            with scope:
                torch.manual_seed(1234)
                config = moe_config(model_cfg, pp)
                chunks = pm.build_model(partial(moe_provider, config, model_cfg), schedule="zb-h1",
                                        num_layers=model_cfg["num_layers"])
                init_by_global_name_(chunks, seed=1234, std=0.02, num_layers=model_cfg["num_layers"])
                grouped[variant] = sum(te_wgrad.grouped_layers(c) for c in chunks)
                runner = pm.get_forward_backward_func("zb-h1", p2p_timeout_s=300, profile_steps=(1, 4))
                for _ in range(4):
                    RT.zero_grads(chunks)
                    runner(data_iterator=iter(batches), model=chunks[0], **kw)
            costs, summary = runner.measured
            out[variant].append({"f": list(costs.f), "b": list(costs.b), "w": list(costs.w),
                                 "mem_f": list(costs.mem_f), "mem_b": list(costs.mem_b)})
    routed = {v: sum(te_wgrad.is_routed(m) for c in chunks for m in c.modules()) for v in VARIANTS[-1:]}
    return {"profiles": out, "grouped_layers": grouped, "routed": routed}


def _median_stage(runs: list, key: str, stage: int) -> float:
    return statistics.median(r[key][stage] for r in runs)


def measured_rows(profiles: dict, pp: int) -> list:
    rows = []
    for variant in VARIANTS:
        runs = profiles[variant]
        for stage in range(pp):
            f, b, w = (_median_stage(runs, k, stage) for k in ("f", "b", "w"))
            held = _median_stage(runs, "mem_f", stage) + _median_stage(runs, "mem_b", stage)
            rows.append([variant, stage, f"{1e3 * f:.1f}", f"{1e3 * b:.1f}", f"{1e3 * w:.1f}",
                         f"{w / (b + w):.2f}", f"{held:.2f}"])
    return rows


def stage_means(profiles: dict, variant: str, pp: int):
    """F-normalised means over the stages (the model's layers are alike; stage 0 adds the
    embedding, the last the output layer and loss)."""
    from primus_megatron import schedules as S

    runs = profiles[variant]
    mean = {k: statistics.mean(_median_stage(runs, k, s) for s in range(pp)) for k in ("f", "b", "w", "mem_f", "mem_b")}
    mem_f = mean["mem_f"]
    return S.Costs(f=1.0, b=mean["b"] / mean["f"], w=mean["w"] / mean["f"], mem_f=1.0,
                   mem_b=mean["mem_b"] / mem_f, mem_w=-(mem_f + mean["mem_b"]) / mem_f)


def simulated_rows(profiles: dict, pp: int, sim_pp: int = 8) -> list:
    import moe_layers

    rows = []
    for m in (2 * sim_pp, 4 * sim_pp):
        for name in SIM_SCHEDULES:
            cells = []
            for variant in VARIANTS:
                bubble, peak = moe_layers.simulate(name, sim_pp, m, stage_means(profiles, variant, pp))
                cells.append(f"{bubble:.3f} / {peak:.2f}")
            rows.append([sim_pp, m, name, *cells])
    return rows


def report(res: list, reps: int, elapsed: float, command: str) -> str:
    pp = len(res)
    profiles = res[0]["profiles"]
    for r in res[1:]:  # every rank measured its own stage; the all-gathered costs agree
        assert r["profiles"][VARIANTS[1]][0]["f"] == profiles[VARIANTS[1]][0]["f"]
    grouped = res[0]["grouped_layers"]
    return C.section(
        command,
        f"{time.strftime('%Y-%m-%d')}, {reps} repetitions per variant, {elapsed:.0f} s. Model: "
        + ", ".join(f"{k} {v}" for k, v in MODEL.items())
        + f"; {grouped[VARIANTS[1]]} grouped expert layers on rank 0. Times in ms per microbatch "
          "(medians); W share = W / (B + W); held for W in units of the stage's F activations.",
        C.table(["variant", "stage", "F ms", "B ms", "W ms", "W share", "held for W"], measured_rows(profiles, pp)),
        "Simulated from these measured costs (per-stage means, F-normalised) at pp=8: bubble / peak "
        "memory (units of one rank's activations of one microbatch).",
        C.table(["pp", "m", "schedule", VARIANTS[0], VARIANTS[1]], simulated_rows(profiles, pp)))


def main(argv=None) -> int:
    parser = C.parser(__doc__)
    parser.add_argument("--reps", type=int, default=5, help="repetitions per variant (default 5)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    res = C.run_ranks(profile_body, {"pp": 2, "model": MODEL, "reps": args.reps}, 2,
                      timeout_s=300 + 120 * args.reps, sys_path=[TE_STANDIN, HERE])
    text = report(res, args.reps, time.monotonic() - started,
                  C.command_line("benchmarks/moe_cpu_profile.py", argv))
    C.publish(args, SECTION, text, "moe_cpu_profile")
    return 0


if __name__ == "__main__":
    sys.exit(main())
