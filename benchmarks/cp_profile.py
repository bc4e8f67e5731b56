"""Context parallelism: the profiled costs at CP=2 against CP=1, and what `zb-auto` and `auto` plan from them.

    python benchmarks/cp_profile.py            # prints the section and replaces it in docs/benchmarks/runtime-cpu.md
    python benchmarks/cp_profile.py --quick    # a smaller model and sequence (the full run: 35 s on 2 cores)

The model: megatron-core's GPTModel on its TransformerEngine spec (causal attention, no dropout;
learned absolute positions; RoPE under CP runs in CPU mode too, tests/test_production_matrix.py
k-cp2-llama-te), TE being the tests' CPU stand-in (tests/te_standin, TE v2.11's classes, its
context-parallel attention a p2p ring), put first on the ranks' import path. The same model and
global sequence run at CP=1 and CP=2, pp=2, `zb-h1`, each rank's microbatches sliced by megatron's
own `get_batch_on_this_cp_rank` (chunks r and 2 CP - 1 - r of the sequence). In bf16 at both CPs
(bf16 parameters and pipeline dtype, megatron's Float16Module, as Megatron-LM's `--bf16`): TE v2.11
has no context-parallel attention for fp32 (transformer_engine/pytorch/attention/dot_product_attention/
utils.py 436-465 and 756-760 leave no backend), and the stand-in refuses it as TE does.

Both settings run in one launch of four gloo ranks on this machine's cores: CP=1 as pp=2 x dp=2
(the second data-parallel pipeline does the same work; no gradient reduce is configured), CP=2 as
pp=2 x cp=2, megatron's parallel state made again between them. So the same four processes share
the cores in both settings and the times compare like for like; they are host-bound (one thread a
rank, ranks time-sharing the cores), and under CP the ring's exchanges add host time where on a GPU
they overlap the attention (TE's cp_stream). The settings alternate per repetition; cells are medians.

Memory is what the profiler counts on CPU (the storages autograd saved, per microbatch), as bytes:
the planner's per-stage units times the summary's `unit_bytes` (one microbatch's activations on an
average rank). The message is the activation the pipeline sends between stages (the runtime's
receive buffer, `_tensor_shape`), the comm time the profiler's one-way ping-pong of that message.

Planning: at pp=2 from each profile, `zb-auto` from the measured per-stage costs and `auto` from
them fitted per layer and re-placed for each candidate (as training's `--pipeline-schedule auto`
does; a backward run as one op is taken as B + W, no 1f1b profile being made), under the default
limit (pp units, 1F1B's) and under a fixed byte budget per rank: 1F1B's peak at CP=1 in bytes, which
at CP=2 is 1/(the unit's ratio) as many units: at least twice.
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

SECTION = "## Context parallelism: profiled costs at CP=2 against CP=1"
TE_STANDIN = os.path.join(C.ROOT, "tests", "te_standin")
PP, WORLD, CPS = 2, 4, (1, 2)
ACT_BYTES = 2  # bf16 activations between stages (pipeline_dtype)
FULL = {"num_layers": 4, "hidden": 256, "heads": 8, "seq": 512, "mbs": 1, "vocab": 1024, "m": 8, "steps": 3}
QUICK = {"num_layers": 4, "hidden": 128, "heads": 4, "seq": 256, "mbs": 1, "vocab": 512, "m": 4, "steps": 2}
KEYS = ("f", "b", "w", "mem_f", "mem_b", "mem_w")
NOTES = (
    "What it shows: the message between stages (the runtime's receive buffer, seq/CP tokens) and what B "
    "keeps for W (the linear layers' inputs and output gradients) halve exactly at CP=2: both are per token. "
    "F's activations, and so the planner's unit, fall to about 0.15: without CP the stand-in's attention is "
    "unfused and autograd saves its queries x keys scores (which B frees: hence mem_b's ratio), and bf16 does "
    "not shrink them (the softmax's output is fp32, 16-bit scores being softmaxed in fp32, and P V reads a bf16 "
    "copy), while its CP ring, as TE's, saves per-token q, k/v, out and softmax statistics and recomputes the "
    "blocks in backward (in fp32, before TE's dtype rule was kept, the ratio was about 0.3: the per-token part "
    "weighed twice as much); with TE's fused attention at both CPs (a GPU) the saved state is per token and the "
    "unit about half. The planner's memory is in units of each profile's own unit, so under the default "
    "limit (pp units) both CPs plan the same memory class at a fraction of the bytes; under one byte budget "
    "the CP=2 profile gives about 1/ratio as many units, and zb-auto and auto plan into them (more "
    "microbatches held for a shorter bubble, or a schedule CP=1 cannot afford). What CPU cannot show: times "
    "are the host wall time of four ranks sharing the cores with whatever else runs on the machine, so their "
    "ratios move between runs (0.45-0.85 for F so far), and at CP=2 they include the ring's exchanges as host "
    "time, where on a GPU TE overlaps them with the attention (cp_stream), and the stand-in's ring computes in "
    "fp32 (its bf16 inputs cast up) where CP=1's attention runs bf16 GEMMs; the one-way p2p time of these small "
    "messages is latency, not bandwidth, so it does not halve.")


def gpt_config(model: dict, cp: int) -> "TransformerConfig":  # noqa: F821
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    # attention_dropout 0: the stand-in's context-parallel attention refuses dropout; bf16: it refuses fp32
    return TransformerConfig(
        num_layers=model["num_layers"], hidden_size=model["hidden"], num_attention_heads=model["heads"],
        ffn_hidden_size=4 * model["hidden"], hidden_dropout=0.0, attention_dropout=0.0,
        use_cpu_initialization=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16, bf16=True,
        gradient_accumulation_fusion=False, bias_dropout_fusion=False, masked_softmax_fusion=False,
        pipeline_model_parallel_size=PP, context_parallel_size=cp, deallocate_pipeline_outputs=True)


def gpt_provider(config, model: dict, pre_process: bool = True, post_process: bool = True,
                 vp_stage=None) -> "GPTModel":  # noqa: F821
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    return GPTModel(config, get_gpt_layer_with_transformer_engine_spec(), vocab_size=model["vocab"],
                    max_sequence_length=model["seq"], pre_process=pre_process, post_process=post_process,
                    share_embeddings_and_output_weights=False, position_embedding_type="learned_absolute",
                    vp_stage=vp_stage)


def _init_parallel(cp: int, gloo_s: int) -> None:
    """Fresh megatron groups: pp=2 x cp, the rest data parallel."""
    from megatron.core import parallel_state as ps

    ps.destroy_model_parallel()
    ps.initialize_model_parallel(1, PP, context_parallel_size=cp, distributed_timeout_minutes=max(1, gloo_s // 60))


class MessageLog:
    """The pipeline's p2p messages in a step, in bytes: the receive buffers the runtime posts
    (its `_tensor_shape`) and the tensors it sends."""

    def __init__(self) -> None:
        self.recv, self.send = set(), set()

    def __enter__(self) -> "MessageLog":
        from primus_megatron.runtime.p2p import P2P

        self._saved = post = P2P.post
        log = self

        def logged(p2p, posts, **kw):  # every send and receive of a step is posted here
            for p in posts:
                (log.send if p.send else log.recv).add(p.tensor.numel() * p.tensor.element_size())
            return post(p2p, posts, **kw)

        P2P.post = logged
        return self

    def __exit__(self, *exc) -> None:
        from primus_megatron.runtime.p2p import P2P

        P2P.post = self._saved


def profile_one(model: dict, cp: int) -> dict:
    """One profiled run of zb-h1 at this cp: the measured costs, the summary, the messages."""
    import torch
    from megatron.core.utils import get_batch_on_this_cp_rank

    import primus_megatron as pm
    from primus_megatron.runtime.placement import init_by_global_name_

    from megatron.core.transformer.module import Float16Module

    torch.manual_seed(1234)
    config = gpt_config(model, cp)
    chunks = pm.build_model(partial(gpt_provider, config, model), schedule="zb-h1", num_layers=model["num_layers"])
    init_by_global_name_(chunks, seed=1234, std=0.02, num_layers=model["num_layers"])
    chunks = [Float16Module(config, c) for c in chunks]  # as Megatron-LM wraps a --bf16 model
    batches = RT.make_batches(model, model["m"], causal=False)
    if cp > 1:  # megatron-core 0.19 takes is_hybrid_cp (required); 0.16.1 has no such argument
        import inspect

        extra = {"is_hybrid_cp": False} if "is_hybrid_cp" in inspect.signature(
            get_batch_on_this_cp_rank).parameters else {}
        from megatron.core import parallel_state

        batches = [get_batch_on_this_cp_rank(b, cp_group=parallel_state.get_context_parallel_group(), **extra)
                   for b in batches]
    steps = model["steps"]
    runner = pm.get_forward_backward_func("zb-h1", p2p_timeout_s=300, profile_steps=(1, 1 + steps))
    with MessageLog() as messages:
        RT.run_steps(runner, chunks, batches, model, 1 + steps)  # the first step warms up
    costs, summary = runner.measured
    out = {k: list(getattr(costs, k)) for k in KEYS}
    out.update(comm=summary["comm"], unit_bytes=summary["unit_bytes"], recv=sorted(messages.recv),
               send=sorted(messages.send))
    return out


def profile_body(rank: int, case: dict) -> dict:
    import transformer_engine.pytorch as te

    assert te.__file__.startswith(TE_STANDIN), te.__file__  # megatron must have found the stand-in
    def run(cp: int) -> dict:
        _init_parallel(cp, case["gloo_timeout"])
        return profile_one(case["model"], cp)

    return C.runs_in_turn(CPS, case["reps"], run)


def run_profiles(model: dict, reps: int, *, timeout_s: float = 900) -> list:
    """Every rank's profiles: [rank][cp] -> one dict per repetition."""
    return C.run_ranks(profile_body, {"pp": PP, "model": model, "reps": reps}, WORLD, timeout_s=timeout_s,
                       sys_path=[TE_STANDIN, HERE])


def medians(runs: list) -> dict:
    """Per-stage medians over the repetitions (all-gathered costs: the same on every rank)."""
    out = {k: [statistics.median(r[k][s] for r in runs) for s in range(PP)] for k in KEYS}
    out.update({k: statistics.median(r[k] for r in runs) for k in ("comm", "unit_bytes")})
    out["message_bytes"] = max(max(r["recv"]) for r in runs)
    out["sent_bytes"] = max(max(r["send"]) for r in runs)
    return out


def costs_of(profile: dict) -> "S.Costs":  # noqa: F821
    """The measured per-stage Costs (seconds; memory in units of `unit_bytes`)."""
    from primus_megatron import schedules as S

    return S.Costs(f=profile["f"], b=profile["b"], w=profile["w"], comm=profile["comm"], mem_f=profile["mem_f"],
                   mem_b=profile["mem_b"], mem_w=profile["mem_w"])


def plan(name: str, profile: dict, num_layers: int, m: int, limit: float) -> dict:
    """`name` ("zb-auto" or "auto") planned at pp=2 from one profile: chosen schedule, its simulated
    makespan, bubble and peak activation memory (units and bytes)."""
    from primus_megatron import schedules as S
    from primus_megatron.schedules import balance
    from primus_megatron.schedules.layer_split import LayerSplit

    costs = costs_of(profile)
    chosen = name
    if name == "auto":  # as training's --pipeline-schedule auto: fitted per layer, re-placed per candidate
        split = LayerSplit(num_layers)
        fitted = balance.fit(costs, split, PP, 1)
        placed = lambda n: balance.retimed(costs, fitted, split, PP, S.info(n).chunks)  # noqa: E731
        usable = [n for n in S.names() if num_layers % (PP * S.info(n).chunks) == 0]
        chosen, _ = S.auto.choose(PP, m, placed, limit, candidates=usable)
        costs = placed(chosen)
    sched = S.generate(chosen, PP, m, costs=costs, memory_limit=limit if S.info(chosen).cost_driven else None)
    result = S.simulate(sched, costs)
    peak = result.max_peak_memory
    return {"chosen": chosen, "makespan": result.makespan, "bubble": 1.0 - sum(result.busy) / (PP * result.makespan),
            "peak": peak, "peak_bytes": peak * profile["unit_bytes"]}


def _row(label: str, one: float, two: float, digits: int = 2) -> list:
    ratio = two / one if one else float("nan")
    return [label, f"{one:.{digits}f}", f"{two:.{digits}f}", f"{ratio:.2f}"]


def measured_rows(prof: dict) -> list:
    """One row a quantity: CP=1, CP=2, CP2/CP1. Memory in KiB: units x unit_bytes."""
    one, two = prof[1], prof[2]
    rows = []
    for stage in range(PP):
        for key in ("f", "b", "w"):
            rows.append(_row(f"stage {stage} {key.upper()} ms", 1e3 * one[key][stage], 1e3 * two[key][stage]))
    for stage in range(PP):
        for key in ("mem_f", "mem_b", "mem_w"):
            kib = lambda p: p[key][stage] * p["unit_bytes"] / 1024  # noqa: E731
            rows.append(_row(f"stage {stage} {key} KiB", kib(one), kib(two), 1))
    rows.append(_row("unit_bytes (KiB, one microbatch on a rank)", one["unit_bytes"] / 1024,
                     two["unit_bytes"] / 1024, 1))
    rows.append(_row("p2p message KiB", one["message_bytes"] / 1024, two["message_bytes"] / 1024, 1))
    rows.append(_row("p2p comm ms (one way)", 1e3 * one["comm"], 1e3 * two["comm"], 3))
    return rows


def plan_rows(prof: dict, model: dict) -> list:
    """zb-auto and auto at each CP, under the default limit and under CP=1's 1F1B bytes."""
    budget = PP * prof[1]["unit_bytes"]  # 1F1B's peak at CP=1, in bytes
    rows = []
    for label, bytes_limit in (("pp units (default)", None), ("1F1B's bytes at CP=1", budget)):
        for name in ("zb-auto", "auto"):
            for cp in CPS:
                limit = float(PP) if bytes_limit is None else bytes_limit / prof[cp]["unit_bytes"]
                p = plan(name, prof[cp], model["num_layers"], model["m"], limit)
                rows.append([label, name, cp, f"{limit:.2f}", p["chosen"], f"{1e3 * p['makespan']:.1f}",
                             f"{p['bubble']:.3f}", f"{p['peak']:.2f}", f"{p['peak_bytes'] / 2**20:.2f}"])
    return rows


def report(res: list, model: dict, reps: int, elapsed: float, command: str) -> str:
    prof = {cp: medians(res[0][cp]) for cp in CPS}
    for cp in CPS:  # rank 2 is rank 0's pipeline peer at both CPs: the all-gathered costs agree
        assert [r["f"] for r in res[2][cp]] == [r["f"] for r in res[0][cp]]
    shape = ", ".join(f"{k} {v}" for k, v in model.items() if k not in ("m", "steps"))
    return C.section(
        command,
        f"{time.strftime('%Y-%m-%d')}, zb-h1 at pp=2, {model['m']} microbatches, {model['steps']} profiled "
        f"steps, {reps} repetition(s) per setting, {elapsed:.0f} s; 4 gloo ranks on {os.cpu_count()} cores "
        f"(CP=1: pp=2 x dp=2, CP=2: pp=2 x cp=2). Model: {shape}; bf16; TE stand-in. Medians over the "
        "repetitions; memory = the profile's units x unit_bytes.",
        C.table(["quantity", "CP=1", "CP=2", "CP2/CP1"], measured_rows(prof)),
        f"Planned at pp=2, m={model['m']} from each profile (simulated; peak activation memory per rank):",
        C.table(["memory limit", "planner", "CP", "limit (units)", "chosen", "makespan ms", "bubble",
                 "peak units", "peak MiB"], plan_rows(prof, model)),
        NOTES)


def main(argv: Optional[list] = None) -> int:
    parser = C.parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller model and sequence, one repetition")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per setting (default 2; --quick 1)")
    args = parser.parse_args(argv)
    model = QUICK if args.quick else FULL
    reps = args.reps or (1 if args.quick else 2)
    started = time.monotonic()
    res = run_profiles(model, reps, timeout_s=600 + 300 * reps)
    text = report(res, model, reps, time.monotonic() - started, C.command_line("benchmarks/cp_profile.py", argv))
    C.publish(args, SECTION, text, "cp_profile")
    return 0


if __name__ == "__main__":
    sys.exit(main())
