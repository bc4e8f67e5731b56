"""Layer splits on CPU: every zero-bubble schedule on the even split and on the split
`--pipeline-balance` picks, against megatron-core's 1F1B on its best even or uneven split.

    python benchmarks/layer_splits.py --reps 6      # writes docs/benchmarks/runtime-cpu.md's layer-split section

pp=2 gloo ranks, each pinned to its own core (one thread each); the model of
`runtime_throughput.py`, once per vocabulary (by default 1024, and 8192, where the
output layer and the loss cost about as much as three transformer layers).
Per vocabulary, in the ranks:

1. profile `zb-h1` on the even split for three steps (m = 8) and fit per-layer,
   embedding and head costs (`schedules.balance.fit`, what `--pipeline-balance auto` does);
2. per microbatch count m: megatron's split for its 1F1B is the fastest the simulator
   finds among every split megatron-core builds (`balance.choose("1f1b", ...)`: megatron's
   1F1B and our `1f1b` have the same order), and each zero-bubble schedule's balanced
   split likewise (`balance.choose(name, ...)`; `zb-auto` planned from the fitted costs
   of its split);
3. time megatron's 1F1B on the even split and on its chosen split, and every
   schedule on the even and on its balanced split, interleaved (A B C ... A B C ...,
   the order rotated every repetition).

The reference of every ratio is megatron's 1F1B on whichever of its two splits has
the lower median time in this run ("megatron best"). `simulated` is the simulator's
iteration time of the same schedule and split from the fitted costs, over its
prediction for the reference: where it and the measured ratio differ, the runtime
does something the plan does not model.
"""
from __future__ import annotations

import os
import sys
import time
from functools import partial

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402
import runtime_throughput as RT  # noqa: E402

SECTION = "## Layer splits: even and balanced (CPU, pp=2, one core per rank)"
ZB = ("zb-h1", "zb-h2", "zbv", "zb-auto")
PROFILE_M = 8


def build_split(model: dict, schedule: str, pp: int, split):
    """This rank's chunks for `schedule` on `split` (megatron's options in the config)."""
    import primus_megatron as pm
    from primus_megatron import schedules as S
    from primus_megatron.runtime.placement import init_by_global_name_
    from primus_megatron.schedules.layer_split import CONFIG

    config = RT.gpt_config(model, pp, S.info(schedule).chunks)
    for field in ("first", "last", "embedding", "loss"):
        setattr(config, CONFIG[field], getattr(split, field))
    if split.layout:  # as TransformerConfig would have parsed it
        from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

        config.pipeline_model_parallel_layout = PipelineParallelLayerLayout(split.layout, pp)
    chunks = pm.build_model(partial(RT.gpt_provider, config, model), schedule=schedule, config=config)
    init_by_global_name_(chunks, seed=1234, std=0.02, num_layers=model["num_layers"])
    return chunks


def fitted_costs(model_cfg: dict, pp: int, batches: list, kw: dict, timeout: float):
    """Per-layer, embedding and head costs fitted to zb-h1's measured per-stage costs on the even split."""
    import primus_megatron as pm
    from primus_megatron.runtime import linear_hooks
    from primus_megatron.schedules import balance
    from primus_megatron.schedules.layer_split import LayerSplit

    even = LayerSplit(model_cfg["num_layers"])
    model = build_split(model_cfg, "1f1b", pp, even)
    prof = pm.get_forward_backward_func("zb-h1", p2p_timeout_s=timeout, profile_steps=(1, 4))
    with RT.linear_impl(linear_hooks.deferrable_linear):
        for _ in range(4):
            RT.zero_grads(model)
            prof(data_iterator=iter(batches[:PROFILE_M]), model=model[0], num_microbatches=PROFILE_M, **kw)
    costs, summary = prof.measured
    return balance.fit(costs, even, pp, 1), summary


def plan_variants(fitted, model_cfg: dict, ms, pp: int) -> dict:
    """{m: {variant label: (schedule, split, simulated iteration)}}: megatron's 1F1B on the
    even and its chosen split, every zero-bubble schedule on the even and its balanced split."""
    from primus_megatron.schedules import balance
    from primus_megatron.schedules.layer_split import LayerSplit

    layers = model_cfg["num_layers"]
    even = LayerSplit(layers)
    out = {}
    for m in ms:
        rows = {}
        for name in ("1f1b",) + ZB:
            label = "megatron-1f1b" if name == "1f1b" else name  # megatron's 1F1B: our 1f1b's order
            rows[f"{label} even"] = (label, even, balance.evaluate(name, pp, m, fitted, even).iteration)
            chosen, _ = balance.choose(name, pp, m, fitted, layers)
            if chosen.split != even:  # the same split is not run twice
                rows[f"{label} balanced"] = (label, chosen.split, chosen.iteration)
        out[m] = rows
    return out


def splits_body(rank: int, case: dict) -> dict:
    import torch.distributed as dist
    from megatron.core.pipeline_parallel import get_forward_backward_func as megatron_fbf
    from megatron.core.tensor_parallel import layers as mlayers

    import primus_megatron as pm
    from primus_megatron import schedules as S
    from primus_megatron.runtime import linear_hooks
    from primus_megatron.schedules import balance

    model_cfg, ms, pp = case["model"], case["microbatches"], case["pp"]
    megatron_linear = mlayers.linear_with_grad_accumulation_and_async_allreduce
    timeout = case.get("p2p_timeout_s", 120)
    seq, mbs = model_cfg["seq"], model_cfg["mbs"]
    batches = RT.make_batches(model_cfg, max(*ms, PROFILE_M))
    kw = dict(forward_step_func=RT.forward_step, seq_length=seq, micro_batch_size=mbs, decoder_seq_length=seq,
              forward_only=False)
    fitted, summary = fitted_costs(model_cfg, pp, batches, kw, timeout)
    plans = plan_variants(fitted, model_cfg, ms, pp)

    models, runners = {}, {}

    def model_for(name: str, split):
        placement_kind = "zbv" if S.info(name if name != "megatron-1f1b" else "1f1b").chunks == 2 else "1f1b"
        key = (placement_kind, split)
        if key not in models:
            models[key] = build_split(model_cfg, placement_kind, pp, split)
        return models[key]

    def runner_for(name: str, split):
        key = (name, split if name == "zb-auto" else None)
        if key not in runners:
            costs = balance.stage_costs(fitted, split, pp, 1) if name == "zb-auto" else None
            runners[key] = (megatron_fbf() if name == "megatron-1f1b"
                            else pm.get_forward_backward_func(name, costs=costs, p2p_timeout_s=timeout))
        return runners[key]

    def variant(name: str, split, m: int):
        model, runner = model_for(name, split), runner_for(name, split)
        impl = megatron_linear if name == "megatron-1f1b" else linear_hooks.deferrable_linear
        arg = model if name == "megatron-1f1b" or len(model) > 1 else model[0]
        with RT.linear_impl(impl):
            runner(data_iterator=iter(batches[:m]), model=arg, num_microbatches=m, **kw)
        return model, runner

    for m in ms:  # warm-up
        for _ in range(case["warmup"]):
            for name, split, _ in plans[m].values():
                RT.zero_grads(model_for(name, split))
                variant(name, split, m)
    times = {(label, m): [] for m in ms for label in plans[m]}
    busy = {key: [] for key in times}
    load = []
    for rep in range(case["reps"]):
        load.append(C.load())
        for m in ms:
            for label in C.in_turn(list(plans[m]), rep):
                name, split, _ = plans[m][label]
                RT.zero_grads(model_for(name, split))
                dist.barrier()
                seconds, (_, runner) = C.timed(lambda: variant(name, split, m))
                times[(label, m)].append(seconds)
                if getattr(runner, "last_step", None) is not None:
                    busy[(label, m)].append(sum(r.end - r.start for r in runner.last_step.timeline))
    plans_out = {m: {label: (name, balance.flags(split) or "even", sim) for label, (name, split, sim) in rows.items()}
                 for m, rows in plans.items()}
    return {"times": times, "busy": busy, "plans": plans_out, "summary": summary, "load": load,
            "fitted": fitted}


def report_vocab(res: list, vocab: int, ms) -> str:
    times = {}
    for key in res[0]["times"]:
        times[key] = [max(vals) for vals in zip(*(r["times"][key] for r in res))]  # the slower rank, per repetition
    fitted, plans = res[0]["fitted"], res[0]["plans"]
    head = fitted.head
    layer = fitted.layer
    lines = [f"### Vocabulary {vocab}\n",
             f"Fitted costs (ms per microbatch, F/B/W): one layer {1e3 * layer.f:.1f}/{1e3 * layer.b:.1f}/"
             f"{1e3 * layer.w:.1f}, output layer and loss {1e3 * head.f:.1f}/{1e3 * head.b:.1f}/{1e3 * head.w:.1f} "
             f"(about {(head.f + head.b + head.w) / max(1e-9, layer.f + layer.b + layer.w):.1f} layers); the "
             f"embedding's share is not separable at pp=2 and counted as free.\n"]
    rows = []
    for m in ms:
        ref = min((k for k in (("megatron-1f1b even", m), ("megatron-1f1b balanced", m)) if k in times),
                  key=lambda k: C.median(times[k]))
        sim_ref = plans[m][ref[0]][2]
        for label, (name, flags, sim) in plans[m].items():
            ratio = [a / b for a, b in zip(times[(label, m)], times[ref])]
            busy = " / ".join(f"{C.median(r['busy'][(label, m)]) * 1e3:.0f}" if r["busy"][(label, m)] else "-"
                              for r in res)
            if label.endswith(" even") and f"{name} balanced" not in plans[m]:
                flags += " (also the balanced split)"
            rows.append([m, f"`{name}`", flags + (" (ref)" if (label, m) == ref else ""), C.ms_cell(times[(label, m)]),
                         C.ratio_cell(ratio), f"{sim / sim_ref:.3f}" if sim and sim_ref else "-", busy])
    lines.append(C.table(["m", "schedule", "split", "iteration (ms)", "/ megatron best", "simulated / megatron best",
                          "busy rank 0 / 1 (ms)"], rows))
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = C.parser(__doc__)
    parser.add_argument("--reps", type=int, default=6, help="timed repetitions per variant (default 6)")
    parser.add_argument("--vocab", type=int, nargs="+", default=[1024, 8192], help="vocabulary sizes (default 1024 8192)")
    parser.add_argument("--microbatches", type=int, nargs="+", default=[4, 8, 16], help="m values (default 4 8 16)")
    parser.add_argument("--tiny", action="store_true", help="(debugging) a tiny model")
    args = parser.parse_args(argv)
    if args.reps < 1 or any(v < 2 for v in args.vocab) or any(m < 2 for m in args.microbatches):
        parser.error("--reps must be >= 1, every --vocab and --microbatches >= 2")
    ms = tuple(args.microbatches)
    started = time.monotonic()
    parts, loads = [], []
    for vocab in args.vocab:
        model = dict(RT.MODEL, vocab=vocab, **(dict(hidden=64, seq=32) if args.tiny else {}))
        case = {"pp": 2, "model": model, "microbatches": ms, "reps": args.reps, "warmup": 1}
        budget = 300 + 12.0 * (args.reps + 2) * sum(ms) / 8 * max(1.0, vocab / 4096)
        res = C.run_ranks(splits_body, case, 2, timeout_s=budget)
        print(f"layer_splits: vocabulary {vocab} done ({time.monotonic() - started:.0f} s)", flush=True)
        parts.append(report_vocab(res, vocab, ms))
        loads += res[0]["load"]
    model = RT.MODEL
    intro = (f"megatron-core GPTModel as in the runtime section ({model['num_layers']} layers, hidden {model['hidden']}, "
             f"sequence {model['seq']}, micro batch {model['mbs']}, fp32, local spec, untied embeddings), pp=2, rank r "
             f"pinned to core r; {args.reps} repetitions after one warm-up iteration each; ratios within a repetition, "
             f"median [25th-75th percentile]. `split`: megatron's options for the split run (`even`: none). The "
             f"reference (`(ref)`) is megatron's 1F1B on the faster of the even split and the split the simulator "
             f"picks for it. {time.monotonic() - started:.0f} s in all; 1-minute load average during the timed "
             f"repetitions: median {C.median(loads):.1f} on 2 cores.")
    text = C.section(C.command_line("benchmarks/layer_splits.py", argv), C.method(__doc__), intro, *parts)
    C.publish(args, SECTION, text, "layer_splits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
