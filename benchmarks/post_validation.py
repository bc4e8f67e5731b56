"""Post-validation optimizer step on CPU: iteration time and per-rank idle at the
iteration boundary with and without --optimizer-post-validation.

    python benchmarks/post_validation.py            # writes docs/benchmarks/post-validation.md's post-validation section
    python benchmarks/post_validation.py --quick    # one round of shorter runs

pp=2 gloo ranks, each pinned to its own core, train examples/pretrain_gpt.py's
stack (`primus_megatron.train.pretrain.train` with a parsed argument namespace:
megatron-core GPTModel, megatron DDP and Adam, mock data) under `zb-h2` and
`zbv`, each with the synchronous optimizer step and with post-validation
(--clip-grad 0, fp32: nothing can fail validation, so no rollbacks and no
snapshot). A `pretrain.Probe(on_iteration=...)` gets every step's executed timeline (absolute
perf_counter times) and the optimizer step's start and end; the loop's
`TrainingSteps.post_losses` (which starts the per-iteration loss all-reduce without waiting)
and megatron's `finalize_model_grads` are wrapped here (not changed) to time them. Per rank and iteration boundary i -> i+1:

    gap       = first op start of i+1 - last op end of i
    boundary idle = gap - optimizer step time   (the definition asked for)
    and the parts of the gap: before the step, finalize_model_grads, the
    optimizer step, post_losses (posting the loop's per-iteration loss
    all-reduce; it is waited for when the iteration is settled: at once with
    the sync step, after the next step's pipeline work under post-validation),
    after it until the first op.

Configurations run in turn (A B C D A B C D ...), `--rounds` times; medians
over the boundaries of all rounds (the first `--skip` iterations of each run
and the last boundary excluded). Next to them: the measured bubble
(1 - busy / (pp x iteration time)) and the simulator's sync and async bubble
for the same schedule, from the op durations measured in these runs (comm 0)
and from equal costs.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

SECTION = "## Post-validation optimizer step (CPU, pp=2, one core per rank)"
PP, MICROBATCHES = 2, 8
MODEL = ["--num-layers", "8", "--hidden-size", "192", "--num-attention-heads", "4", "--seq-length", "128",
         "--micro-batch-size", "2", "--vocab-size", "1024", "--make-vocab-size-divisible-by", "128",
         "--hidden-dropout", "0", "--attention-dropout", "0"]
UNTIE = ["--untie-embeddings-and-output-weights"]
# (label, schedule, post-validation, extra arguments)
CONFIGS = [
    ("zb-h2, sync step", "zb-h2", False, UNTIE),
    ("zb-h2, post-validation", "zb-h2", True, UNTIE),
    ("zbv, sync step", "zbv", False, UNTIE),
    ("zbv, post-validation", "zbv", True, UNTIE),
    ("zb-h2, tied embeddings, post-validation", "zb-h2", True, []),
]


def argv_for(config, iters: int) -> list:
    _, schedule, pv, extra = config
    argv = ["--cpu", "--mock-data", *MODEL, "--global-batch-size", str(2 * MICROBATCHES), "--train-iters", str(iters),
            "--lr", "1e-4", "--lr-decay-style", "constant", "--clip-grad", "0", "--seed", "1234",
            "--pipeline-model-parallel-size", str(PP), "--pipeline-schedule", schedule,
            "--pipeline-p2p-timeout", "120", "--log-interval", str(10 * iters), *extra]
    return argv + (["--optimizer-post-validation"] if pv else [])


class _Timed:
    """Wrap a function; remember (start, end) of every call."""

    def __init__(self, fn) -> None:
        self.fn, self.calls = fn, []

    def __call__(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.calls.append((t0, time.perf_counter()))


def pv_body(rank: int, case: dict) -> list:
    import megatron.core.distributed as mdist

    from primus_megatron.train import pretrain
    from primus_megatron.train.arguments import parse_run
    from primus_megatron.train.forward_step import TrainingSteps

    reduce_timer = _Timed(TrainingSteps.post_losses)
    TrainingSteps.post_losses = lambda steps, store: reduce_timer(steps, store)  # the loop calls it every iteration
    finalize_timer = _Timed(mdist.finalize_model_grads)
    mdist.finalize_model_grads = finalize_timer  # configure_hooks imports it from here at every train()
    out = []
    configs = case["configs"]
    for rnd in range(case["rounds"]):
        order = C.in_turn(configs, rnd)
        for config in order:
            args, spec = parse_run(argv_for(config, case["iters"]), world_size=PP)
            records = []

            def hook(iteration, step, t_step, t_stepped, records=records):
                ops = [r for r in step.timeline if r.op.kind != "VALIDATE"]
                validate = [r.end - r.start for r in step.timeline if r.op.kind == "VALIDATE"]
                records.append({"first": min(r.start for r in ops), "last": max(r.end for r in ops),
                                "busy": sum(r.end - r.start for r in ops), "validate": sum(validate),
                                "t_step": t_step, "t_stepped": t_stepped,
                                "ops": [(r.op.kind, r.stage, r.end - r.start) for r in ops]})

            reduce_timer.calls.clear()
            finalize_timer.calls.clear()
            result = pretrain.train(args, spec, probe=pretrain.Probe(on_iteration=hook))
            out.append({"label": config[0], "round": rnd, "records": records, "reduce": list(reduce_timer.calls),
                        "finalize": list(finalize_timer.calls), "stats": result["post_validation"],
                        "losses": result["losses"]})
    return out


def boundaries(run: dict, skip: int) -> list:
    """Per boundary i -> i+1 of one run on one rank: the gap and its parts (seconds)."""
    recs, red, fin = run["records"], run["reduce"], run["finalize"]
    rows = []
    for i in range(skip, len(recs) - 1):
        a, b = recs[i], recs[i + 1]
        gap = b["first"] - a["last"]
        opt = a["t_stepped"] - a["t_step"]
        reduce = red[i][1] - red[i][0]
        finalize = fin[i][1] - fin[i][0]
        rows.append({"gap": gap, "opt": opt, "idle": gap - opt, "finalize": finalize,
                     "pre": a["t_step"] - a["last"] - finalize, "reduce": reduce, "post": b["first"] - red[i][1],
                     "period": b["t_step"] - a["t_step"], "busy": a["busy"], "validate": b["validate"]})
    return rows


def measured_costs(runs: list, schedule: str):
    """Per-stage median F, B, W durations (seconds) from the executed timelines of `runs` (all ranks)."""
    from primus_megatron import schedules as S

    chunks = S.info(schedule).chunks
    n = PP * chunks
    durations = {}
    for run in runs:
        for rec in run["records"][1:]:
            for kind, stage, d in rec["ops"]:
                durations.setdefault((kind, stage), []).append(d)
    values = {k: [C.median(durations.get((k, s), [float("nan")])) for s in range(n)] for k in ("F", "B", "W")}
    return S.Costs(f=values["F"], b=values["B"], w=values["W"], comm=0.0)


def report(results: list, opts: dict, elapsed: float, command: str) -> str:
    from primus_megatron import schedules as S

    labels = [c[0] for c in CONFIGS]
    by_label = {label: [[run for run in per_rank if run["label"] == label] for per_rank in results] for label in labels}
    lines = [C.command_block(command)]
    lines.append(
        f"pp={PP} gloo ranks, rank r pinned to core r, one thread each; `primus_megatron.train.pretrain.train` "
        f"(examples/pretrain_gpt.py's loop: megatron-core GPTModel, megatron DDP and Adam, mock data) with "
        f"{' '.join(MODEL)} (untied embeddings unless said), {MICROBATCHES} microbatches per iteration, --clip-grad "
        f"0, fp32. Each configuration trains {opts['iters']} iterations per run, configurations in turn (A B C D E "
        f"A B C D E ...), {opts['rounds']} round(s); the first {opts['skip']} iterations of each run are skipped; "
        f"medians over the remaining boundaries of all rounds. Per rank and boundary i -> i+1: `gap` = first op "
        f"start of i+1 - last op end of i; `idle` = gap - optimizer step (the boundary idle asked for); the gap "
        f"in order: `pre` = after the last op until the optimizer step (waiting for the last sends, the "
        f"executor's end of step) without `finalize` = megatron's finalize_model_grads; `opt` = optimizer.step() "
        f"(megatron's step with its global grad-norm all-reduce, or the optimistic local step); `post_losses` = "
        f"posting the training loop's per-iteration loss all-reduce over the world, waited for when the iteration "
        f"is settled (primus_megatron/train/pretrain.py); `post` = from there to the first op of i+1 (zeroing gradients, the next "
        f"step's set-up and, on a rank whose first op needs an activation, waiting for it). `VALIDATE`: the "
        f"post-validation check inside the next step. Times in ms. {elapsed:.0f} s in all on a shared machine (2 cores).\n")
    table_rows, verdict = [], {}
    for label in labels:
        per_rank = by_label[label]
        periods = [row["period"] for run in per_rank[0] for row in boundaries(run, opts["skip"])]
        stats = per_rank[0][0]["stats"]
        pv = "-"
        if stats is not None:
            total = {k: sum(run["stats"][k] for run in per_rank[0]) for k in stats}
            pv = f"{total['optimistic']}/{total['steps']} / {total['rollbacks']} / {total['redone']}"
        for rank, runs in enumerate(per_rank):
            rows = [row for run in runs for row in boundaries(run, opts["skip"])]
            med = {k: 1e3 * C.median([r[k] for r in rows]) for k in rows[0]}
            verdict[(label, rank)] = med
            table_rows.append([label if rank == 0 else "", C.ms_cell(periods) if rank == 0 else "", rank,
                               *(f"{med[k]:.1f}" for k in ("gap", "opt", "idle", "pre", "finalize", "reduce",
                                                           "post", "validate")),
                               pv if rank == 0 else ""])
    lines.append(C.table(["configuration", "iteration (ms)", "rank", "gap", "opt", "idle = gap - opt", "pre",
                          "finalize", "post_losses", "post", "VALIDATE", "optimistic / rolled back / redone"],
                         table_rows))
    lines.append("")

    lines.append("Iteration time per schedule, ratio of each round's medians to the sync step's in the same round: "
                 "median (min-max over rounds).\n")
    rows = []
    for schedule in ("zb-h2", "zbv"):
        sync, pv = f"{schedule}, sync step", f"{schedule}, post-validation"

        def per_round(label):
            return [C.median([row["period"] for row in boundaries(run, opts["skip"])]) for run in by_label[label][0]]

        def ratio(label):
            rs = [a / b for a, b in zip(per_round(label), per_round(sync))]
            return f"{C.median(rs):.3f} ({min(rs):.3f}-{max(rs):.3f})"

        cell = lambda label: C.ms_cell([row["period"] for run in by_label[label][0]  # noqa: E731
                                        for row in boundaries(run, opts["skip"])])
        rows.append([f"`{schedule}`", cell(sync), cell(pv), ratio(pv)])
    lines.append(C.table(["schedule", "sync step (ms)", "post-validation (ms)", "/ sync"], rows))
    lines.append("")

    lines.append("Bubbles: `measured` = 1 - (busy rank 0 + busy rank 1) / (2 x iteration time), medians; simulated "
                 "for the same schedule (pp=2, m=8) from the op durations measured in these runs (per stage, comm 0) "
                 "and from equal costs (f = b = w = 1), `sync` with a barrier between iterations and `async` without "
                 "(what post-validation allows).\n")
    rows = []
    for label, schedule, pv, _ in CONFIGS:
        per_rank = by_label[label]
        rows0 = [row for run in per_rank[0] for row in boundaries(run, opts["skip"])]
        rows1 = [row for run in per_rank[1] for row in boundaries(run, opts["skip"])]
        bubble = [1 - (a["busy"] + b["busy"]) / (PP * a["period"]) for a, b in zip(rows0, rows1)]
        costs = measured_costs([run for runs in per_rank for run in runs], schedule)
        sm = S.simulate(S.generate(schedule, PP, MICROBATCHES), costs)
        se = S.simulate(S.generate(schedule, PP, MICROBATCHES))
        rows.append([label, f"{C.median(bubble):.3f}", f"{sm.bubble_sync:.3f} / {sm.bubble_async:.3f}",
                     f"{se.bubble_sync:.3f} / {se.bubble_async:.3f}"])
    lines.append(C.table(["configuration", "measured bubble", "simulated sync / async (measured costs)",
                          "simulated sync / async (equal costs)"], rows))
    lines.append("")

    return "\n".join(lines), verdict


def main(argv=None) -> int:
    parser = C.parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="one round of 8 iterations per configuration")
    parser.add_argument("--rounds", type=int, default=None, help="rounds over the configurations (default 3; quick 1)")
    parser.add_argument("--iters", type=int, default=None, help="iterations per run (default 14; quick 8)")
    args = parser.parse_args(argv)
    opts = {"rounds": args.rounds or (1 if args.quick else 3), "iters": args.iters or (8 if args.quick else 14),
            "skip": 2}
    started = time.monotonic()
    print(f"post_validation: {len(CONFIGS)} configurations x {opts['rounds']} round(s) x {opts['iters']} iterations",
          flush=True)
    case = {"pp": PP, "configs": CONFIGS, "rounds": opts["rounds"], "iters": opts["iters"]}
    budget = 120 + 10.0 * len(CONFIGS) * opts["rounds"] * (opts["iters"] + 5)
    results = C.run_ranks(pv_body, case, PP, timeout_s=budget)
    elapsed = time.monotonic() - started
    text, _ = report(results, opts, elapsed, C.command_line("benchmarks/post_validation.py", argv))
    C.publish(args, SECTION, text, "post_validation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
