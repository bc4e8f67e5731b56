"""LB-Mini in Megatron-LM's own pretrain_gpt.py --sft on CPU ranks (issue 58 item 4).

    python benchmarks/sft_balance_megatron_lm.py [--iters 6] [--repeats 1] [--layouts 2x2,2x4] [--json out/sft.json]

Needs Megatron-LM core_v0.19.0's loop, i.e. megatron-core 0.19 (the py312 virtualenv of `make
test-py312`), run from the repository root with PYTHONPATH=. (the tree is unpacked and patched as the
tests do it: tests/megatron_lm_harness.py). One run: DP2 x PP2 (4 ranks) and DP2 x PP4 (8 ranks), each
under zb-h1 and zbv, each with --pipeline-balance-data off, sorted and lb-mini, all from one SFT jsonl.

The data: one conversation a line, its token count drawn from the LongAlign-shaped long tail
(`balancing.longalign_batch`, scaled to --seq-length), tokenized by the tests' tiny character-level
tokenizer (tests/sft_standin, tests/sft_data.py), so a line of L tokens is exactly L tokens. The model:
8 layers, hidden 64, 4 heads, --seq-length 256, TE stand-in layers (thd attention, a sample attends to
itself only), fp32, global batch 16, micro batch 1 (packs), overlapped reduce and distributed optimizer.
samples/s: the global batch over Megatron-LM's logged `elapsed time per iteration`, averaged over the
iterations after the first two; with --repeats the modes take turns and each reports its median.
Simulated: the plan rank 0 logged for each step, made again here from the lines' token counts (checked:
the tokens per replica must equal the logged ones, column "plans reproduced"), each replica's packs as
factors a*s^2 + b*s of the simulator's unit ops (the plugin's own a = 1 / (6 hidden), b = 1), the step as
long as its slowest replica: what balancing buys where each rank has a device of its own.

What the measured numbers can and cannot say: the ranks are CPU processes that share this machine's
cores, so a replica that waits for the other costs only the CPU it does not use; on such a machine they
show what each mode costs in work (packing, microbatch count, the plan made on every rank from the whole
global batch), not the replicas' wait that balancing removes on accelerators, and they follow the host's
load (printed per run). In particular `sorted` and `lb-mini` pack at least pp microbatches per replica:
with these short samples (LongAlign's mean is a quarter of its maximum) that is more, emptier packs than
`off` packs, each padded to --seq-length, which costs work on shared cores and fills the pipeline on
devices of their own.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

SEQ, GBS = 256, 16
SCHEDULES = ("zb-h1", "zbv")
MODES = ("off", "sorted", "lb-mini")
MODEL = ["--num-layers", "8", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", str(SEQ),
         "--max-position-embeddings", str(SEQ), "--global-batch-size", str(GBS), "--micro-batch-size", "1",
         "--eval-iters", "0", "--eval-interval", "100000", "--untie-embeddings-and-output-weights",
         "--overlap-grad-reduce", "--use-distributed-optimizer", "--pipeline-profile-steps", "0"]


def write_data(folder: str, lines: int, seed: int = 58) -> tuple[list, list]:
    """The jsonl and tokenizer under `folder` (tests/sft_data.py's vocabulary, LongAlign-shaped lengths);
    Megatron-LM's options for them, and each line's token count."""
    import random

    import sft_data

    from primus_megatron.balancing import longalign_batch

    path, tokenizer = sft_data.write(folder, lines=1)  # the tokenizer; the jsonl is rewritten below
    overhead = _template_tokens(tokenizer)
    rng = random.Random(seed)
    lengths = longalign_batch(lines, SEQ, seed, min_len=overhead + 1)
    with open(path, "w") as f:
        for length in lengths:
            content = "".join(rng.choice("abcdefgh") for _ in range(length - overhead))
            messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q"},
                        {"role": "assistant", "content": content}]
            f.write(json.dumps({"messages": messages}) + "\n")
    return ["--sft", "--data-path", path, "--tokenizer-type", "SFTTokenizer", "--tokenizer-model", tokenizer,
            "--split", "100,0,0", "--calculate-per-token-loss", "--no-create-attention-mask-in-dataloader"], \
        list(lengths)


def _template_tokens(tokenizer: str) -> int:
    """Tokens a conversation adds around an assistant content of one character, less that character."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "sft_standin"))
    import transformers  # the tests' stand-in

    from megatron.core.tokenizers.text.libraries.sft_tokenizer import nemotron_h_aligned_custom_template

    tok = transformers.AutoTokenizer.from_pretrained(tokenizer)
    conversation = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q"},
                    {"role": "assistant", "content": "a"}]
    return len(tok.apply_chat_template(conversation, chat_template=nemotron_h_aligned_custom_template)) - 1


def logged_plans(result) -> list:
    """Per step (first sample, tokens per replica) as rank 0 logged the plugin's plan."""
    import re

    found = re.findall(r"--pipeline-balance-data \S+: samples (\d+)\.\.\d+, microbatches per replica \([\d, ]+\), "
                       r"tokens per replica \(([\d, ]+)\)", result.log)
    return [(int(first), tuple(int(x) for x in tokens.split(","))) for first, tokens in found]


def simulated(lengths: list, logged: list, mode: str, dp: int, pp: int, schedule: str, skip: int = 2) -> tuple:
    """(simulated step time summed over the timed steps, whether every step's plan was reproduced): the
    plugin's plan made again from the lines' token counts (a sample's length as the plugin sees it is its
    last loss-bearing token + 1: the offset to the line's count is found on the first step's tokens), each
    replica's microbatches' costs a*s^2 + b*s (the plugin's a = 1 / (6 hidden)) as factors of the
    simulator's unit ops, the step as long as its slowest replica (nothing else charged)."""
    from primus_megatron.balancing import SampleCost, plan_batch
    from primus_megatron.emulation.replicas import simulated_makespans

    cost = SampleCost(a=1.0 / (6 * 64), b=1.0)
    unit = cost.of(SEQ)  # a full pack of one sample: the factors' scale is the same in every mode

    def plan(first, delta):
        return plan_batch([min(SEQ, n + delta) for n in lengths[first:first + GBS]], dp, SEQ, mode, cost,
                          min_microbatches=pp)

    def tokens(p):
        return tuple(sum(p.lengths[i] for mb in r for i in mb) for r in p.replicas)

    delta = next((d for d in range(-3, 4) if logged and tokens(plan(logged[0][0], d)) == logged[0][1]), 0)
    total, exact = 0.0, bool(logged)
    for step, (first, logged_tokens) in enumerate(logged):
        p = plan(first, delta)
        exact = exact and tokens(p) == logged_tokens
        if step >= skip:
            factors = [tuple(c / unit for c in p.microbatch_costs(r, cost)) for r in range(dp)]
            total += max(simulated_makespans(schedule, pp, factors))
    return total, exact


def samples_per_second(result, skip: int = 2) -> float:
    import megatron_lm_harness as H

    times = []
    for line in result.log.splitlines():
        m = H._ITER.search(line)
        if m and int(m.group(1)) > skip:
            fields = dict((k.strip(), v.strip()) for k, v in H._FIELD.findall(m.group(3) + "|"))
            times.append(float(fields["elapsed time per iteration (ms)"]))
    return GBS * 1000.0 / statistics.mean(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=6, help="training iterations per run (the first 2 not timed)")
    parser.add_argument("--layouts", default="2x2,2x4", help="DPxPP layouts, comma-separated (default 2x2,2x4)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of each mode, the three modes taking turns (off, sorted, lb-mini, off, ...), so "
                             "that the host's drift falls on each alike; the median is reported")
    parser.add_argument("--json", default=None, help="also write the numbers here")
    args = parser.parse_args(argv)
    if args.iters < 3:
        parser.error(f"--iters must be at least 3 (the first 2 are not timed), got {args.iters}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    try:
        layouts = [tuple(int(x) for x in item.split("x")) for item in args.layouts.split(",")]
        assert all(len(t) == 2 and t[0] >= 2 and t[1] >= 2 for t in layouts)
    except (ValueError, AssertionError):
        parser.error(f"--layouts takes DPxPP items such as 2x2,2x4 (each at least 2), got {args.layouts!r}")
    import megatron_lm_harness as H

    if not H.matching_tag().startswith("core_v0.19"):
        parser.error("--sft balancing runs on Megatron-LM core_v0.19.0: run with megatron-core 0.19 (make setup-py312)")
    work = tempfile.mkdtemp(prefix="sft-balance-")
    tree = H.prepare(work)
    data, lengths = write_data(os.path.join(work, "data"), GBS * args.iters)
    rows = []
    for dp, pp in layouts:
        for schedule in SCHEDULES:
            row = {"layout": f"DP{dp} x PP{pp}", "schedule": schedule, "runs": {m: [] for m in MODES}}
            for _ in range(args.repeats):
                for mode in MODES:
                    started = time.monotonic()
                    result = H.run(tree, dp * pp, [*data, *MODEL, "--pipeline-model-parallel-size", str(pp),
                                                    "--train-iters", str(args.iters), "--pipeline-schedule", schedule,
                                                    "--pipeline-balance-data", mode], te=True, sft=True, timeout=900)
                    row["runs"][mode].append(samples_per_second(result))
                    row.setdefault("simulated", {})[mode], row.setdefault("reproduced", {})[mode] = simulated(
                        lengths, logged_plans(result), mode, dp, pp, schedule)
                    print(f"{row['layout']} {schedule} {mode}: {row['runs'][mode][-1]:.2f} samples/s "
                          f"({time.monotonic() - started:.0f} s, load {os.getloadavg()[0]:.1f})", flush=True)
            row.update({m: statistics.median(row["runs"][m]) for m in MODES})
            rows.append(row)
    print("\n| layout | schedule | off samples/s | sorted / off | lb-mini / off | simulated sorted / off | "
          "simulated lb-mini / off | plans reproduced |\n|---|---|---|---|---|---|---|---|")
    for row in rows:
        sim = row["simulated"]
        print(f"| {row['layout']} | {row['schedule']} | {row['off']:.2f} | {row['sorted'] / row['off']:.3f} | "
              f"{row['lb-mini'] / row['off']:.3f} | {sim['off'] / sim['sorted']:.3f} | {sim['off'] / sim['lb-mini']:.3f} | "
              f"{'yes' if all(row['reproduced'].values()) else 'no'} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
