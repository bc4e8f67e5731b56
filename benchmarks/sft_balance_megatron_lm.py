"""LB-Mini in Megatron-LM's own pretrain_gpt.py --sft on CPU ranks (issue 58 item 4).

    python benchmarks/sft_balance_megatron_lm.py [--iters 6] [--json out/sft.json]

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
iterations after the first two.

What the numbers can and cannot say: the ranks are CPU processes that share this machine's cores, so a
replica that waits for the other costs only the CPU it does not use; on such a machine the table shows
what each mode costs in work (packing, microbatch count, the plan made on every rank from the whole
global batch), not the replicas' wait that balancing removes on accelerators (docs/benchmarks/
balanced-data.md measures that on emulated devices). In particular `sorted` and `lb-mini` pack at least
pp microbatches per replica: with these short samples (LongAlign's mean is a quarter of its maximum) that
is more, emptier packs than `off` packs, each padded to --seq-length, which costs work on shared cores
and fills the pipeline on devices of their own. Run on 2026-11-29 on the 2-core host at load 70-140,
every configuration ran to the end (DP2 x PP4 included: packs reach the middle stages' attention); its
samples/s were not kept (they followed the host's load).
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
LAYOUTS = ((2, 2), (2, 4))  # (dp, pp)
SCHEDULES = ("zb-h1", "zbv")
MODES = ("off", "sorted", "lb-mini")
MODEL = ["--num-layers", "8", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", str(SEQ),
         "--max-position-embeddings", str(SEQ), "--global-batch-size", str(GBS), "--micro-batch-size", "1",
         "--eval-iters", "0", "--eval-interval", "100000", "--untie-embeddings-and-output-weights",
         "--overlap-grad-reduce", "--use-distributed-optimizer", "--pipeline-profile-steps", "0"]


def write_data(folder: str, lines: int, seed: int = 58) -> list:
    """The jsonl and tokenizer under `folder` (tests/sft_data.py's vocabulary, LongAlign-shaped lengths);
    Megatron-LM's options for them."""
    import random

    import sft_data

    from primus_megatron.balancing import longalign_batch

    path, tokenizer = sft_data.write(folder, lines=1)  # the tokenizer; the jsonl is rewritten below
    overhead = _template_tokens(tokenizer)
    rng = random.Random(seed)
    with open(path, "w") as f:
        for length in longalign_batch(lines, SEQ, seed, min_len=overhead + 1):
            content = "".join(rng.choice("abcdefgh ") for _ in range(length - overhead)).strip() or "a"
            messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q"},
                        {"role": "assistant", "content": content}]
            f.write(json.dumps({"messages": messages}) + "\n")
    return ["--sft", "--data-path", path, "--tokenizer-type", "SFTTokenizer", "--tokenizer-model", tokenizer,
        "--split", "100,0,0", "--calculate-per-token-loss", "--no-create-attention-mask-in-dataloader"]


def _template_tokens(tokenizer: str) -> int:
    """Tokens a conversation adds around an assistant content of one character, less that character."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "sft_standin"))
    import transformers  # the tests' stand-in

    from megatron.core.tokenizers.text.libraries.sft_tokenizer import nemotron_h_aligned_custom_template

    tok = transformers.AutoTokenizer.from_pretrained(tokenizer)
    conversation = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q"},
                    {"role": "assistant", "content": "a"}]
    return len(tok.apply_chat_template(conversation, chat_template=nemotron_h_aligned_custom_template)) - 1


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
    parser.add_argument("--json", default=None, help="also write the numbers here")
    args = parser.parse_args(argv)
    if args.iters < 3:
        parser.error(f"--iters must be at least 3 (the first 2 are not timed), got {args.iters}")
    import megatron_lm_harness as H

    if not H.matching_tag().startswith("core_v0.19"):
        parser.error("--sft balancing runs on Megatron-LM core_v0.19.0: run with megatron-core 0.19 (make setup-py312)")
    work = tempfile.mkdtemp(prefix="sft-balance-")
    tree = H.prepare(work)
    data = write_data(os.path.join(work, "data"), GBS * args.iters)
    rows = []
    for dp, pp in LAYOUTS:
        for schedule in SCHEDULES:
            row = {"layout": f"DP{dp} x PP{pp}", "schedule": schedule}
            for mode in MODES:
                started = time.monotonic()
                result = H.run(tree, dp * pp, [*data, *MODEL, "--pipeline-model-parallel-size", str(pp),
                                                "--train-iters", str(args.iters), "--pipeline-schedule", schedule,
                                                "--pipeline-balance-data", mode], te=True, sft=True, timeout=900)
                row[mode] = samples_per_second(result)
                print(f"{row['layout']} {schedule} {mode}: {row[mode]:.2f} samples/s "
                      f"({time.monotonic() - started:.0f} s)", flush=True)
            rows.append(row)
    print("\n| layout | schedule | off samples/s | sorted / off | lb-mini / off |\n|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['layout']} | {row['schedule']} | {row['off']:.2f} | {row['sorted'] / row['off']:.3f} | "
              f"{row['lb-mini'] / row['off']:.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
