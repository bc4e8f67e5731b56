"""Runtime benchmark on CPU: iteration time and activation memory of our schedules
against megatron-core's own 1F1B and torch.distributed.pipelining's ZBV.

    python benchmarks/runtime_throughput.py            # writes docs/benchmarks/runtime-cpu.md's runtime section
    python benchmarks/runtime_throughput.py --quick    # fewer repetitions, m in {4, 8}

pp=2 gloo ranks, each pinned to its own core (one thread each). One
megatron-core GPTModel configuration (local layer spec, fp32, dropout 0,
untied embeddings), the same weights in every variant (initialised from each
parameter's global name), the same microbatches:

(a) overhead: our `1f1b` vs megatron-core's 1F1B
    (`megatron.core.pipeline_parallel.get_forward_backward_func()`, CPU mode),
    both on the same model object; megatron's runs with megatron's own linear
    function (our weight-gradient hooks uninstalled), and once more with the
    hooks installed, to separate the hooks' cost from the executor's;
(b) gain: `zb-h1`, `zb-h2`, `zbv`, `zb-auto` vs megatron's 1F1B at m = 4, 8,
    16, next to the simulator's makespan ratio vs `1f1b` from costs measured on
    this run (zb-h1 profiled: per-stage F, B, W and p2p latency);
(b2) where measured and simulated part: each timed step simulated again from
    its own executed ops' durations, the span of its ops against that, and each
    rank's busy time per microbatch against the fitted costs;
(c) our `zbv` vs torch's `ScheduleZBVZeroBubble` on the same megatron chunks
    (see `TorchStageModule`);
(d) peak activation memory per rank of every registered schedule (zb-optimal
    excluded) measured by the runtime profiler at pp=2 and pp=4, next to the
    simulator's unit prediction.

Timing: every variant runs one iteration (the forward_backward call only,
after a barrier; iteration time = the slowest rank's) in turn, A B C ... A B
C ..., the order rotated every repetition; ratios are taken within a
repetition and reported as median [25th-75th percentile].

Only time and memory are measured here: that the variants compute the same is
tested (tests/test_runtime_parity.py, tests/test_production_matrix.py).
"""
from __future__ import annotations

import os
import sys
import time
from functools import partial

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

SECTION = "## Runtime: throughput and memory (CPU, pp=2, one core per rank)"
MODEL = dict(num_layers=8, hidden=192, heads=4, seq=128, mbs=2, vocab=1024)
ZB = ("zb-h1", "zb-h2", "zbv", "zb-auto")
LOOP_OURS = ("1f1b", "zb-h1", "zb-h2", "zb-auto")
MEMORY_EXCLUDED = ("zb-optimal",)


# -- model, data, forward step (run inside the ranks) -------------------------------------------

def gpt_config(model: dict, pp: int, chunks: int):
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(
        num_layers=model["num_layers"], hidden_size=model["hidden"], num_attention_heads=model["heads"],
        ffn_hidden_size=4 * model["hidden"], hidden_dropout=0.0, attention_dropout=0.0,
        use_cpu_initialization=True, params_dtype=torch.float32, pipeline_dtype=torch.float32, bf16=False,
        fp16=False, gradient_accumulation_fusion=False, bias_dropout_fusion=False, masked_softmax_fusion=False,
        pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=chunks if chunks > 1 else None,
        deallocate_pipeline_outputs=True, **_attention_backend())


def _attention_backend() -> dict:
    """The backend TransformerEngine's NVTE_*_ATTN variables agree with (AMD's images set them;
    megatron's default auto asserts otherwise): primus_megatron/compat/attention_env.py."""
    from primus_megatron.compat.attention_env import config_fields

    return config_fields()


def gpt_provider(config, model: dict, pre_process=True, post_process=True, vp_stage=None):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    return GPTModel(config, get_gpt_layer_local_spec(), vocab_size=model["vocab"], max_sequence_length=model["seq"],
                    pre_process=pre_process, post_process=post_process, share_embeddings_and_output_weights=False,
                    position_embedding_type="learned_absolute", vp_stage=vp_stage)


def build(model: dict, schedule: str, pp: int):
    """This rank's chunks for `schedule`, weights drawn from each parameter's global name."""
    import primus_megatron as pm
    from primus_megatron import schedules as S
    from primus_megatron.runtime.placement import init_by_global_name_

    chunks = S.info(schedule).chunks
    config = gpt_config(model, pp, chunks)
    chunks_ = pm.build_model(partial(gpt_provider, config, model), schedule=schedule, num_layers=model["num_layers"])
    init_by_global_name_(chunks_, seed=1234, std=0.02, num_layers=model["num_layers"])
    return chunks_


def make_batches(model: dict, count: int, seed: int = 0, *, causal: bool = True) -> list:
    """Whole-sequence microbatches; `causal=False`: no attention mask (TE's causal attention builds its own)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    s, b = model["seq"], model["mbs"]
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1).view(1, 1, s, s) if causal else None
    out = []
    for _ in range(count):
        tokens = torch.randint(0, model["vocab"], (b, s + 1), generator=gen)
        out.append({"tokens": tokens[:, :-1].contiguous(), "labels": tokens[:, 1:].contiguous(),
                    "loss_mask": torch.ones(b, s), "position_ids": torch.arange(s).repeat(b, 1),
                    "attention_mask": mask})
    return out


def loss_func(loss_mask, output_tensor):
    import torch

    losses = output_tensor.float().reshape(-1)
    mask = loss_mask.reshape(-1).float()
    loss = torch.sum(losses * mask)
    num_tokens = mask.sum().to(torch.int)
    return loss, num_tokens, {"lm loss": torch.cat([loss.detach().view(1), num_tokens.float().view(1)])}


def forward_step(data_iterator, model):
    batch = next(data_iterator)
    output = model(batch["tokens"], batch["position_ids"], batch["attention_mask"], labels=batch["labels"])
    return output, partial(loss_func, batch["loss_mask"])


def zero_grads(model) -> None:
    for chunk in model:
        chunk.zero_grad(set_to_none=True)


def run_steps(runner, chunks: list, batches: list, model: dict, steps: int) -> None:
    """`steps` training steps of `runner` (a forward-backward function) on one model chunk, gradients zeroed
    before each, the same `model["m"]` microbatches every step."""
    for _ in range(steps):
        zero_grads(chunks)
        runner(forward_step_func=forward_step, data_iterator=iter(batches), model=chunks[0],
               num_microbatches=model["m"], seq_length=model["seq"], micro_batch_size=model["mbs"],
               decoder_seq_length=model["seq"], forward_only=False)


class linear_impl:
    """Within the context, megatron's parallel linear layers call `fn`
    (megatron looks the module-level name up at every forward)."""

    def __init__(self, fn) -> None:
        self.fn = fn

    def __enter__(self):
        from megatron.core.tensor_parallel import layers

        self.saved = layers.linear_with_grad_accumulation_and_async_allreduce
        layers.linear_with_grad_accumulation_and_async_allreduce = self.fn

    def __exit__(self, *exc):
        from megatron.core.tensor_parallel import layers

        layers.linear_with_grad_accumulation_and_async_allreduce = self.saved


def aten_linear(input, weight, bias, gradient_accumulation_fusion, allreduce_dgrad, sequence_parallel,
                grad_output_buffer=None, wgrad_deferral_limit=0, async_grad_allreduce=None, tp_group=None):
    """megatron's linear at tp=1 without fusion, as one aten op: its autograd node
    computes only the gradients a backward call asks for (torch's I/W split
    relies on that; megatron's autograd.Function always computes both)."""
    import torch.nn.functional as F

    assert not gradient_accumulation_fusion and not sequence_parallel and not allreduce_dgrad
    return F.linear(input, weight, bias)


def torch_stage_module_class():
    import torch

    class TorchStageModule(torch.nn.Module):
        """One of our zbv chunks (a megatron GPTModel) as a torch pipelining stage:
        the first stage takes token ids, middle stages the hidden states (megatron's
        set_input_tensor), the last returns the logits [b, s, v]; torch's loss_fn
        applies megatron's own cross-entropy (GPTModel.compute_language_model_loss)."""

        def __init__(self, gpt, model: dict) -> None:
            super().__init__()
            self.gpt = gpt
            s, b = model["seq"], model["mbs"]
            self.register_buffer("mask", torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1).view(1, 1, s, s),
                                 persistent=False)
            self.register_buffer("positions", torch.arange(s).repeat(b, 1), persistent=False)

        def forward(self, x):
            if self.gpt.pre_process:
                return self.gpt(x, self.positions, self.mask)
            self.gpt.set_input_tensor(x)
            return self.gpt(None, None, self.mask)

    return TorchStageModule


def torch_zbv_schedules(t_model, model: dict, ms, pp: int, rank: int) -> dict:
    """{m: torch ScheduleZBVZeroBubble} over stages wrapping t_model's two chunks."""
    import torch
    from torch.distributed.pipelining import PipelineStage, ScheduleZBVZeroBubble

    Stage = torch_stage_module_class()
    n = 2 * pp
    last = t_model[1] if rank == 0 else None

    def loss_fn(output, target):
        return last.compute_language_model_loss(target, output.transpose(0, 1).contiguous()).float().mean()

    mods = [Stage(chunk, model) for chunk in t_model]
    s, b, h, v = model["seq"], model["mbs"], model["hidden"], model["vocab"]
    out = {}
    for m in ms:
        stages = []
        for c, mod in enumerate(mods):
            index = rank if c == 0 else n - 1 - rank
            # example tensors (static shapes); float ones require grad, as the real ones do
            inp = torch.zeros(b, s, dtype=torch.long) if index == 0 else torch.zeros(s, b, h, requires_grad=True)
            outp = torch.zeros(b, s, v, requires_grad=True) if index == n - 1 else torch.zeros(s, b, h, requires_grad=True)
            stages.append(PipelineStage(mod, index, n, torch.device("cpu"), input_args=(inp,), output_args=(outp,)))
        out[m] = ScheduleZBVZeroBubble(stages, m, loss_fn=loss_fn)
    return out


# -- (a)-(c): timing body ------------------------------------------------------------------------

def throughput_body(rank: int, case: dict) -> dict:
    import torch
    import torch.distributed as dist
    from megatron.core.pipeline_parallel import get_forward_backward_func as megatron_fbf
    from megatron.core.tensor_parallel import layers

    import primus_megatron as pm
    from primus_megatron.runtime import linear_hooks
    from primus_megatron.runtime.profiler import per_rank_costs

    model_cfg, ms, pp = case["model"], case["microbatches"], case["pp"]
    linear_hooks.uninstall()  # (nothing is installed yet in a fresh rank)
    megatron_linear = layers.linear_with_grad_accumulation_and_async_allreduce
    assert megatron_linear is not linear_hooks.deferrable_linear
    seq, mbs = model_cfg["seq"], model_cfg["mbs"]
    loop_model = build(model_cfg, "1f1b", pp)  # megatron's own split: the model every loop schedule runs
    v_model = build(model_cfg, "zbv", pp)
    t_model = build(model_cfg, "zbv", pp)  # torch's copy (same weights)
    batches = make_batches(model_cfg, max(ms))
    timeout = case.get("p2p_timeout_s", 120)

    mcore = megatron_fbf()
    runners = {name: pm.get_forward_backward_func(name, p2p_timeout_s=timeout) for name in ("1f1b", "zb-h1", "zb-h2")}
    runners["zbv"] = pm.get_forward_backward_func("zbv", p2p_timeout_s=timeout)
    kw = dict(forward_step_func=forward_step, seq_length=seq, micro_batch_size=mbs, decoder_seq_length=seq,
              forward_only=False)

    def run_megatron(m: int):
        with linear_impl(megatron_linear):
            return mcore(data_iterator=iter(batches[:m]), model=loop_model, num_microbatches=m, **kw)

    def run_megatron_hooked(m: int):
        with linear_impl(linear_hooks.deferrable_linear):
            return mcore(data_iterator=iter(batches[:m]), model=loop_model, num_microbatches=m, **kw)

    def run_ours(name: str, m: int):
        model = v_model if name == "zbv" else loop_model
        with linear_impl(linear_hooks.deferrable_linear):
            return runners[name](data_iterator=iter(batches[:m]), model=model if len(model) > 1 else model[0],
                                 num_microbatches=m, **kw)

    torch_scheds = torch_zbv_schedules(t_model, model_cfg, ms, pp, rank)
    tokens = torch.cat([bt["tokens"] for bt in batches])
    labels = torch.cat([bt["labels"] for bt in batches])

    def run_torch(m: int, impl=aten_linear) -> None:
        with linear_impl(impl):
            if rank == 0:
                torch_scheds[m].step(tokens[:m * mbs], target=labels[:m * mbs])
            else:
                torch_scheds[m].step()

    # 1. measured costs (zb-h1 profiled for three steps at the middle microbatch count) -> zb-auto, simulator
    m_prof = sorted(ms)[len(ms) // 2]
    prof = pm.get_forward_backward_func("zb-h1", p2p_timeout_s=timeout, profile_steps=(1, 4))
    with linear_impl(linear_hooks.deferrable_linear):
        for _ in range(4):
            zero_grads(loop_model)
            prof(data_iterator=iter(batches[:m_prof]), model=loop_model[0], num_microbatches=m_prof, **kw)
    costs, summary = prof.measured
    shares = per_rank_costs(costs, prof.plan(pp, m_prof)[0])
    # ... and 1f1b the same way: a backward run as one op, which costs less than B + W apart
    prof = pm.get_forward_backward_func("1f1b", p2p_timeout_s=timeout, profile_steps=(1, 4))
    with linear_impl(linear_hooks.deferrable_linear):
        for _ in range(4):
            zero_grads(loop_model)
            prof(data_iterator=iter(batches[:m_prof]), model=loop_model[0], num_microbatches=m_prof, **kw)
    unsplit = prof.measured[0]
    runners["zb-auto"] = pm.get_forward_backward_func("zb-auto", costs=shares, p2p_timeout_s=timeout)

    variants = {"megatron-1f1b": run_megatron, "megatron-1f1b (A/A)": run_megatron,
                "megatron-1f1b+hooks": run_megatron_hooked,
                **{name: partial(run_ours, name) for name in ("1f1b", "zb-h1", "zb-h2", "zbv", "zb-auto")},
                "torch-zbv": run_torch}
    models = {"zbv": v_model, "torch-zbv": t_model}

    # 2. warm-up, then interleaved timing
    for m in ms:
        for name, fn in variants.items():
            for _ in range(case["warmup"]):
                zero_grads(models.get(name, loop_model))
                fn(m)
    times = {(name, m): [] for name in variants for m in ms}
    busy = {(name, m): [] for name in variants for m in ms}
    timelines = {(name, m): [] for name in runners for m in ms}  # per repetition: the executed ops
    extra = {("torch-zbv (megatron linear)", m): [] for m in case["extra_ms"]}
    names = list(variants)
    load = []
    for rep in range(case["reps"]):
        load.append(C.load())
        for m in ms:
            jobs = [(name, variants[name]) for name in C.in_turn(names, rep)]
            if m in case["extra_ms"]:
                jobs.append(("torch-zbv (megatron linear)", partial(run_torch, impl=megatron_linear)))
            for name, fn in jobs:
                zero_grads(models.get(name, loop_model))
                dist.barrier()
                seconds, _ = C.timed(lambda: fn(m))
                (times if (name, m) in times else extra)[(name, m)].append(seconds)
                runner = runners.get(name)
                if runner is not None and runner.last_step is not None:
                    busy[(name, m)].append(sum(r.end - r.start for r in runner.last_step.timeline))
                    timelines[(name, m)].append([r for r in runner.last_step.timeline if r.stage >= 0])
    times.update(extra)
    return {"times": times, "busy": busy, "timelines": timelines, "costs": shares, "unsplit": unsplit, "summary": summary,
            "m_prof": m_prof, "load": load}


# -- (d): memory body -----------------------------------------------------------------------------

def memory_body(rank: int, case: dict) -> dict:
    import primus_megatron as pm
    from primus_megatron import schedules as S

    model_cfg, pp, m = case["model"], case["pp"], case["m"]
    batches = make_batches(model_cfg, m)
    out = {}
    for name in case["schedules"]:
        model = build(model_cfg, name, pp)
        runner = pm.get_forward_backward_func(name, profile_steps=(1, 2), p2p_timeout_s=120)
        for _ in range(2):
            zero_grads(model)
            runner(forward_step_func=forward_step, data_iterator=iter(batches), model=model if len(model) > 1 else model[0],
                   num_microbatches=m, seq_length=model_cfg["seq"], micro_batch_size=model_cfg["mbs"],
                   decoder_seq_length=model_cfg["seq"])
        costs, summary = runner.measured
        plan = runner.plan(pp, m)[0]
        out[name] = {"measured": runner.last_step.peak_activation_bytes,
                     "from_measured": S.simulate(plan, costs).peak_memory[rank] * summary["unit_bytes"],
                     "unit": S.simulate(S.generate(name, pp, m)).peak_memory[rank]}
        del model, runner
    return out


# -- report -----------------------------------------------------------------------------------------

def simulate_ratios(costs, unsplit, ms, names, pp: int, num_layers: int) -> dict:
    """The simulator's makespan / its 1f1b's, each schedule on its own stages: per-layer and head
    costs fitted to the profiled loop stages (`balance.fit`), so under V the head is on rank 0,
    and a BW op timed as 1f1b's profile measured it; its sync bubble; and each rank's F + B + W
    (or F + BW) for one microbatch under those costs."""
    from dataclasses import replace

    from primus_megatron import schedules as S
    from primus_megatron.schedules import balance
    from primus_megatron.schedules.layer_split import LayerSplit

    split = LayerSplit(num_layers=num_layers)
    fitted = replace(balance.fit(costs, split, pp, 1), fused=balance.fused_ratio(unsplit, costs))
    out = {}
    for m in ms:
        loop = balance.stage_costs(fitted, split, pp, 1)
        base = S.simulate(S.generate("1f1b", pp, m, costs=loop), loop).makespan
        for name in ("1f1b", *names):
            own = balance.stage_costs(fitted, split, pp, S.info(name).chunks)
            plan = S.generate(name, pp, m, costs=own)
            r = S.simulate(plan, own)
            work = [0.0] * pp  # F + B + W of one microbatch, per rank
            for stage in range(plan.num_stages):
                back = own.b[stage] + own.w[stage] if plan.splits_backward or own.bw is None else own.bw[stage]
                work[plan.owner(stage)[0]] += own.f[stage] + back
            out[(name, m)] = (r.makespan / base, r.bubble_sync, work, fitted.fused)
    return out


def own_op_simulation(res: list, plans: dict, comm: float) -> dict:
    """For every timed step of our schedules: the simulator's makespan for the plan that ran under
    that step's own op durations (median per kind and stage), and the step's span from its first op's start to its last op's
    end (both ranks; perf_counter is one clock for all processes on Linux)."""
    from dataclasses import replace

    from primus_megatron import schedules as S
    from primus_megatron.train.timeline import costs_from_timeline

    out = {}
    for key, plan in plans.items():
        sims, spans = [], []
        for per_rank in zip(*(r["timelines"][key] for r in res)):
            costs = replace(costs_from_timeline(list(per_rank), plan.num_stages), comm=comm)  # p2p as profiled
            sims.append(S.simulate(plan, costs).makespan)
            ops = [op for rank_ops in per_rank for op in rank_ops]
            spans.append(max(op.end for op in ops) - min(op.start for op in ops))
        out[key] = (sims, spans)
    return out


def report(res: list, mem: dict, opts: dict, elapsed: float, command: str) -> str:
    ms = opts["microbatches"]
    times = {}
    for key in res[0]["times"]:
        per_rank = [r["times"][key] for r in res]
        times[key] = [max(vals) for vals in zip(*per_rank)]  # the slowest rank's time, per repetition
    base = "megatron-1f1b"

    def ratios(name, m, ref=base):
        return [a / b for a, b in zip(times[(name, m)], times[(ref, m)])]

    def best(name, m, ref=base):
        return f"{min(times[(name, m)]) / min(times[(ref, m)]):.3f}"

    costs, summary, m_prof = res[0]["costs"], res[0]["summary"], res[0]["m_prof"]
    sim = simulate_ratios(costs, res[0]["unsplit"], ms, ZB, 2, opts["model"]["num_layers"])
    model = opts["model"]
    lines = [C.command_block(command)]
    lines.append(
        f"megatron-core GPTModel, local layer spec, fp32, {model['num_layers']} layers, hidden {model['hidden']}, "
        f"{model['heads']} heads, FFN {4 * model['hidden']}, vocabulary {model['vocab']} (untied embeddings), "
        f"sequence {model['seq']}, micro batch {model['mbs']}, dropout 0; weights drawn from each parameter's global "
        f"name (`init_by_global_name_`), identical in every variant; the same microbatches. pp=2 gloo ranks, rank r "
        f"pinned to core r, one thread each; no data parallelism, no optimizer step: the timed region is the "
        f"forward_backward call (after a barrier; iteration time = the slower rank's). Variants run in turn, A B C "
        f"... A B C ..., the order rotated each repetition, {opts['reps']} repetitions after {opts['warmup']} "
        f"warm-up iteration(s) each; ratios are taken within a repetition and shown as median [25th-75th "
        f"percentile], times as median (min-max). `megatron-1f1b (A/A)` is megatron's 1F1B run a second time as "
        f"its own variant: its ratio to the first is this machine's noise floor; `best`: ratio of the two variants' "
        f"fastest iterations. {elapsed:.0f} s in all; the machine is shared (1-minute load average during the timed "
        f"repetitions: median {C.median(res[0]['load']):.1f}, {min(res[0]['load']):.1f}-{max(res[0]['load']):.1f}, "
        f"on 2 cores).\n")
    lines.append("Timed, not checked here: that the variants compute the same is tested (our schedules against "
                 "megatron's 1F1B and a non-pipelined model: tests/test_runtime_parity.py, "
                 "tests/test_production_matrix.py).\n")

    lines.append("### (a) Runtime overhead: our `1f1b` vs megatron-core's 1F1B\n")
    lines.append("Same model object, same data. megatron's 1F1B runs with megatron's own linear function; "
                 "`megatron+hooks` is megatron's 1F1B with our weight-gradient hooks installed (megatron's linear "
                 "autograd function behind one more autograd.Function; outside a B op it runs megatron's backward), "
                 "which separates the hooks' cost from the executor's. Target: our `1f1b` / megatron <= 1.03.\n")
    lines.append(C.table(
        ["m", "megatron 1F1B (ms)", "our 1f1b (ms)", "our 1f1b / megatron", "best", "A/A: megatron / megatron",
         "megatron+hooks / megatron", "our 1f1b / megatron+hooks"],
        [[m, C.ms_cell(times[(base, m)]), C.ms_cell(times[("1f1b", m)]), C.ratio_cell(ratios("1f1b", m)),
          best("1f1b", m), C.ratio_cell(ratios("megatron-1f1b (A/A)", m)),
          C.ratio_cell(ratios("megatron-1f1b+hooks", m)), C.ratio_cell(ratios("1f1b", m, "megatron-1f1b+hooks"))]
         for m in ms]))
    lines.append("")

    lines.append("### (b) Gain: zero-bubble schedules vs megatron-core's 1F1B\n")
    fmt = lambda xs: ", ".join(f"{1e3 * x:.1f}" for x in xs)  # noqa: E731
    lines.append(f"Measured costs (our `zb-h1` profiled over 3 steps at m={m_prof}, per stage, ms): F [{fmt(summary['f'])}], "
                 f"B [{fmt(summary['b'])}], W [{fmt(summary['w'])}], p2p one-way {1e3 * summary['comm']:.2f}. "
                 f"`simulated`: the simulator's makespan under those costs (each schedule on its own stages: per-layer "
                 f"and head costs fitted to the two measured stages, `balance.fit`, so under V the head is on rank 0; "
                 f"a backward run as one op, as `1f1b` runs it, takes {sim[(ZB[0], ms[0])][3]:.3f} x B + W, as our "
                 f"`1f1b` profiled the same way measured it) "
                 f"/ its `1f1b` makespan, and its sync bubble. `zb-auto` is planned from "
                 f"the same costs. `busy`: per rank, the sum of the executed ops' durations in our runtime's timeline "
                 f"(median over repetitions), i.e. compute without waiting.\n")
    rows = []
    for m in ms:
        for n in ("1f1b",) + ZB:
            busy = " / ".join(f"{C.median(r['busy'][(n, m)]) * 1e3:.0f}" for r in res)
            rows.append([m, f"`{n}`", C.ms_cell(times[(n, m)]), C.ratio_cell(ratios(n, m)), best(n, m),
                         C.ratio_cell(ratios(n, m, "1f1b")) if n != "1f1b" else "1", f"{sim[(n, m)][0]:.3f}",
                         f"{sim[(n, m)][1]:.3f}", busy])
    lines.append(C.table(["m", "schedule", "iteration (ms)", "/ megatron 1F1B", "best", "/ our 1f1b",
                          "simulated / 1f1b", "simulated bubble", "busy rank 0 / 1 (ms)"], rows))
    lines.append("")

    lines.append("### (b2) Where the measured time goes: each schedule's own op durations\n")
    lines.append("Per repetition, from our runtime's timeline of the step that was timed: `own ops`: the simulator's "
                 "makespan for the plan that ran, under that step's own per-stage op durations (median per kind and "
                 "stage; both ranks) and the measured p2p latency, / the same for our `1f1b` in the same repetition. "
                 "Where it is far from `simulated` (the loop profile's fitted costs), the ops themselves cost "
                 "otherwise under this schedule than the loop profile predicts. `span / own ops`: the step's span "
                 "(first op's start to last op's end, over both ranks) / that simulated makespan: time between ops the "
                 "simulator does not predict (p2p, the executor's own work). `iteration / span`: the forward_backward "
                 "call / its ops' span (work before the first op and after the last). Medians [25th-75th percentile]. "
                 "`ops per microbatch`: a rank's busy time / m, and in parentheses its F + B + W (`1f1b`: F + BW) "
                 "for one microbatch under the fitted costs the `simulated` column uses.\n")
    from primus_megatron import schedules as S

    plans = {(n, m): S.generate(n, 2, m, costs=costs if n == "zb-auto" else None) for n in ("1f1b",) + ZB for m in ms}
    own = own_op_simulation(res, plans, summary["comm"])
    rows = []
    for m in ms:
        for n in ("1f1b",) + ZB:
            sims, spans = own[(n, m)]
            rows.append([m, f"`{n}`", C.ratio_cell(ratios(n, m, "1f1b")) if n != "1f1b" else "1",
                         f"{sim[(n, m)][0]:.3f}",
                         C.ratio_cell([a / b for a, b in zip(sims, own[("1f1b", m)][0])]) if n != "1f1b" else "1",
                         C.ratio_cell([a / b for a, b in zip(spans, sims)]),
                         C.ratio_cell([a / b for a, b in zip(times[(n, m)], spans)]),
                         " / ".join(f"{1e3 * C.median(r['busy'][(n, m)]) / m:.1f} ({1e3 * x:.1f})"
                                    for r, x in zip(res, sim[(n, m)][2]))])
    lines.append(C.table(["m", "schedule", "measured / our 1f1b", "simulated / 1f1b", "own ops / 1f1b's own ops",
                          "span / own ops", "iteration / span", "ops per microbatch, rank 0 / 1 (ms): measured (fitted)"],
                         rows))
    lines.append("")

    lines.append("### (c) Our `zbv` vs torch.distributed.pipelining's `ScheduleZBVZeroBubble`\n")
    lines.append(
        "torch's stages (`PipelineStage`, static shapes) wrap a second copy of our zbv chunks (the same megatron "
        "GPTModel chunks built by `build_model(..., schedule=\"zbv\")`, same weights): chunk 0 and chunk 1 of rank r "
        "are torch's stages r and 3 - r; the first stage takes the token ids, middle stages feed the hidden states "
        "through megatron's `set_input_tensor`, the last returns the logits and torch's `loss_fn` applies megatron's "
        "own cross-entropy (`GPTModel.compute_language_model_loss`, after one extra transpose copy of the logits) "
        "and averages over tokens; torch scales the gradients by 1/m at the end, ours divides the loss by m. In "
        "torch's runs the megatron linear layers call a plain `F.linear` (one aten op; same values): torch's I/W "
        "split asks autograd for the input gradient only in I and for the weight gradient only in W, and megatron's "
        "own linear autograd.Function always computes both, which charges torch every linear-layer GEMM of the "
        "backward twice (last column, m = 8 only). Ours runs with its own hooks, as always.\n")
    aten = "torch-zbv (megatron linear)"
    lines.append(C.table(
        ["m", "torch ZBV (ms)", "our zbv (ms)", "our zbv / torch ZBV", "best",
         "torch ZBV, megatron's linear function (ms)"],
        [[m, C.ms_cell(times[("torch-zbv", m)]), C.ms_cell(times[("zbv", m)]),
          C.ratio_cell(ratios("zbv", m, "torch-zbv")), best("zbv", m, "torch-zbv"),
          C.ms_cell(times[(aten, m)]) if (aten, m) in times else "-"] for m in ms]))
    lines.append("")

    if mem:
        lines.append("### (d) Peak activation memory per rank\n")
        lines.append(
            f"Measured by the runtime profiler (`get_forward_backward_func(name, profile_steps=(1, 2))`, "
            f"`runner.last_step.peak_activation_bytes`: bytes of the tensors autograd saved in F plus what the "
            f"deferred weight-gradient closures hold) on the same model, m = {opts['memory_m']}; pp=4 runs 4 ranks "
            f"on 2 cores (memory does not depend on timing). Cells: MiB per rank; the largest rank's peak / 1F1B's "
            f"largest, measured and as the simulator predicts with unit costs (F adds 1, W frees it; every stage "
            f"alike); `sim from measured`: the simulator's per-rank peak from the measured per-op bytes vs the "
            f"measured peak, worst rank.\n")
        for pp, per_rank in sorted(mem.items()):
            lines.append(f"pp={pp}:\n")
            base_meas = max(r["1f1b"]["measured"] for r in per_rank)
            base_unit = max(r["1f1b"]["unit"] for r in per_rank)
            rows = []
            for name in per_rank[0]:
                meas = [r[name]["measured"] for r in per_rank]
                unit = max(r[name]["unit"] for r in per_rank)
                agree = max(abs(r[name]["from_measured"] / r[name]["measured"] - 1) for r in per_rank)
                rows.append([f"`{name}`", *(f"{x / 2**20:.1f}" for x in meas), f"{max(meas) / base_meas:.3f}",
                             f"{unit / base_unit:.3f}", f"within {100 * agree:.1f}%"])
            lines.append(C.table(["schedule", *(f"rank {r} (MiB)" for r in range(pp)), "max / 1F1B max, measured",
                                  "max / 1F1B max, simulated (unit)", "sim from measured"], rows))
            lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = C.parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="3 repetitions, m in {4, 8}")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions per variant (default 20; quick 3)")
    parser.add_argument("--skip-memory", action="store_true", help="(debugging) skip part (d)")
    parser.add_argument("--tiny", action="store_true", help="(debugging) a tiny model")
    args = parser.parse_args(argv)

    ms = (4, 8) if args.quick else (4, 8, 16)
    model = dict(MODEL, hidden=64, seq=32) if args.tiny else dict(MODEL)
    opts = {"model": model, "microbatches": ms, "reps": args.reps or (3 if args.quick else 20),
            "warmup": 1 if args.quick else 2, "memory_m": 8}
    started = time.monotonic()
    print(f"runtime_throughput: pp=2, m in {ms}, {opts['reps']} repetitions", flush=True)
    case = {"pp": 2, "model": opts["model"], "microbatches": ms, "reps": opts["reps"], "warmup": opts["warmup"],
            "extra_ms": (8,)}
    n_variants = 10
    budget = 120 + 4.0 * (opts["reps"] + opts["warmup"] + 2) * n_variants * sum(ms) / 8
    res = C.run_ranks(throughput_body, case, 2, timeout_s=budget)
    print(f"  timing done ({time.monotonic() - started:.0f} s)", flush=True)
    mem = {}
    if not args.skip_memory:
        from primus_megatron import schedules as S

        names = [n for n in S.names() if n not in MEMORY_EXCLUDED]
        for pp in (2, 4):
            mem[pp] = C.run_ranks(memory_body, {"pp": pp, "model": opts["model"], "m": opts["memory_m"],
                                                "schedules": names}, pp, timeout_s=900, pin=pp == 2)
            print(f"  memory pp={pp} done ({time.monotonic() - started:.0f} s)", flush=True)
    elapsed = time.monotonic() - started
    text = report(res, mem, opts, elapsed, C.command_line("benchmarks/runtime_throughput.py", argv))
    C.publish(args, SECTION, text, "runtime_throughput")
    return 0


if __name__ == "__main__":
    sys.exit(main())
