"""Post-training through Megatron-LM's own pretrain_gpt.py: `--sft` under our schedules, and balanced
minibatches (`--pipeline-balance-data off|sorted|lb-mini`, ODC's LB-Mini) in its loop.

The data is made here (tests/sft_data.py): a jsonl of conversations with long-tail lengths, some lines
two conversations (two documents of one sample), and a tiny character-level tokenizer, read through
the test-only `datasets` / `transformers` stand-ins (tests/sft_standin: megatron's NullTokenizer has no
tokenize_conversation, which SFTDataset calls). Everything else is Megatron-LM core_v0.19.0's: its
SFTTokenizer (nemotron-h-aligned prompts, system and user turns masked), SFTDataset (packing to
--seq-length, cu_seqlens), get_batch and the thd PackedSeqParams to TE's attention (the stand-in's).

On DP=2 x PP=2 with --overlap-grad-reduce and --use-distributed-optimizer, every run loading one saved
start (Megatron-LM seeds initialisation per pipeline rank, so V placements need it):

* with megatron's own counts, zb-h1, zbv and dualpipev log the very numbers megatron's own 1F1B logs;
* with --pipeline-balance-data, off (zb-h1), sorted (dualpipev) and lb-mini (zbv) place the same samples
  of each global batch differently (the plans the plugin logs differ, the replicas' microbatch counts
  too) and log the same losses and grad norms as each other and as megatron's own run, to the last
  printed digit but one (the sums run in another order: one unit of the last digit, as printed);
* core_v0.16.1 (the first leg): balancing is refused in one sentence naming what that checkout lacks;
  without --calculate-per-token-loss it is refused on both legs.
"""
from __future__ import annotations

import functools
import os
import re

import pytest

import expected_skips
import megatron_lm_harness as H
import sft_data

pytestmark = pytest.mark.megatron_lm

ITERS = 2
DP2PP2 = ["--pipeline-model-parallel-size", "2", "--global-batch-size", "16", "--micro-batch-size", "1",
          "--eval-iters", "0", "--eval-interval", "1000", "--untie-embeddings-and-output-weights",
          "--overlap-grad-reduce", "--use-distributed-optimizer"]  # 8 samples per replica and step
FIXED = ["--pipeline-profile-steps", "0"]
BALANCED = {"off": "zb-h1", "sorted": "dualpipev", "lb-mini": "zbv"}  # each mode under another schedule
PLAN = re.compile(r"--pipeline-balance-data (\S+): samples (\d+)\.\.(\d+), microbatches per replica \(([\d, ]+)\), "
                  r"tokens per replica \(([\d, ]+)\)")


def _needs_core_v019(tree: str) -> None:
    if os.path.basename(tree).endswith("core_v0.16.1"):
        pytest.skip(expected_skips.reason("megatron-core<0.19", "Megatron-LM's --sft runs here on core_v0.19.0: "
                                                                "core_v0.16.1's get_batch gives V's middle stages "
                                                                "no cu_seqlens, and the plugin refuses balancing "
                                                                "there (test_balancing_without_per_token_loss...)"))


@pytest.fixture(scope="module")
def sft(megatron_lm_tree, tmp_path_factory):
    """The module's runs: megatron's own (schedule None) or ours, balanced with a mode or not."""
    tree = megatron_lm_tree
    work = str(tmp_path_factory.mktemp("megatron-lm-sft"))
    data = sft_data.args(os.path.join(work, "data"))
    start = []

    def load() -> list:
        if not start:
            start.append(H.save_start(tree, 4, data + DP2PP2, os.path.join(work, "start"), te=True, sft=True))
        return ["--load", start[0], "--finetune"]

    @functools.lru_cache(maxsize=None)
    def run(schedule=None, mode=None):
        ours = ["--pipeline-schedule", schedule, *FIXED] if schedule else []
        balance = ["--pipeline-balance-data", mode] if mode else []
        return H.run(tree, 4, [*data, *DP2PP2, "--train-iters", str(ITERS), *load(), *ours, *balance], te=True,
                     sft=True)

    run.data = data
    return run


def _plans(result: H.Result) -> list:
    """(first sample, microbatches per replica, tokens per replica) of every step, as rank 0 logged them."""
    return [(int(m.group(2)), tuple(int(x) for x in m.group(4).split(",")), tuple(int(x) for x in m.group(5).split(",")))
            for m in PLAN.finditer(result.log)]


def _close(a: str, b: str) -> bool:
    """Equal as printed but for one unit of the last printed digit (another summation order)."""
    digits = len(a.split("E")[0].split(".")[1]) if "." in a else 0
    unit = 10.0 ** -digits * (10.0 ** int(a.split("E")[1]) if "E" in a else 1.0)
    return abs(float(a) - float(b)) <= unit * 1.01


# core_v0.16.1 cannot run --sft (the first leg skips it), so the second leg keeps every schedule here although
# its PRIMUS_TEST_SCHEDULES keeps one of each kind elsewhere: dualpipev would otherwise run on no leg
@pytest.mark.every_schedule_here
@pytest.mark.parametrize("schedule", ["zb-h1", "zbv", "dualpipev"])
def test_sft_schedules_train_exactly_as_megatron(sft, megatron_lm_tree, schedule):
    _needs_core_v019(megatron_lm_tree)
    own, ours = sft(), sft(schedule)
    assert sorted(own.losses) == list(range(1, ITERS + 1)), H.tail(own.log)
    assert H.arg(ours, "sft") == "True" and H.arg(ours, "transformer_impl") == "transformer_engine"
    assert ours.numbers() == own.numbers()
    assert own.losses[1] != own.losses[ITERS], "the loss did not change while training"
    assert not _plans(ours)  # megatron's counts: no balanced plan


def test_balanced_modes_give_megatron_gradients(sft, megatron_lm_tree):
    _needs_core_v019(megatron_lm_tree)
    own = sft()
    runs = {mode: sft(schedule, mode) for mode, schedule in BALANCED.items()}
    plans = {mode: _plans(result) for mode, result in runs.items()}
    for mode, result in runs.items():
        assert [p[0] for p in plans[mode]] == [16 * i for i in range(ITERS)], H.tail(result.log)
        for quantity in ("losses", "grad_norms"):
            mine, theirs = getattr(result, quantity), getattr(own, quantity)
            assert sorted(mine) == sorted(theirs) and all(_close(theirs[i], mine[i]) for i in theirs), \
                (mode, quantity, mine, theirs)
    # the same samples (the same tokens per step), placed differently by each mode
    assert len({tuple(sum(p[2]) for p in plans[m]) for m in plans}) == 1, plans
    assert len({tuple(p[2] for p in plans[m]) for m in plans}) == 3, plans
    assert any(len(set(p[1])) > 1 for m in plans for p in plans[m]), "no step ran different counts per replica"


def test_balancing_without_per_token_loss_gets_one_sentence(sft, megatron_lm_tree):
    """Exit 2 and one line before any process group; on core_v0.16.1 what that checkout lacks comes first.
    Refused before any data is read: the TE runs' import-once process (no SFT stand-ins) serves it."""
    data = [a for a in sft.data if a != "--calculate-per-token-loss"]
    result = H.run(megatron_lm_tree, 4, [*data, *DP2PP2, "--train-iters", "1", "--pipeline-schedule", "zb-h1",
                                         "--pipeline-balance-data", "lb-mini"], te=True, expect_ok=False)
    assert result.returncode == 2, H.tail(result.log)
    errors = [line for line in result.log.splitlines() if ": error: " in line]
    assert len(errors) == 1 and "Traceback" not in result.log, H.tail(result.log)
    if megatron_lm_tree.endswith("core_v0.16.1"):
        assert "needs Megatron-LM core_v0.19.0 or later" in errors[0], errors
    else:
        assert "--pipeline-balance-data in Megatron-LM's pretrain_gpt.py needs --calculate-per-token-loss" \
               in errors[0], errors


MASKING = ["--pipeline-model-parallel-size", "2", "--global-batch-size", "16", "--micro-batch-size", "1",
           "--eval-iters", "0", "--eval-interval", "1000", "--untie-embeddings-and-output-weights",
           "--overlap-grad-reduce", "--use-distributed-optimizer", "--dataloader-inter-document-masking",
           "--calculate-per-token-loss", "--train-iters", str(ITERS)]


def test_inter_document_masking_balances_pretraining_samples_as_megatron_trains_them(megatron_lm_tree):
    """Pretraining samples (mock data: documents of several lengths cut into --seq-length samples) under
    --dataloader-inter-document-masking: each sample its documents' cu_seqlens, so each is as long as the
    next and LB-Mini splits them by their documents' attention (balanced_data.documents); zb-h1 with
    lb-mini logs megatron's own 1F1B's numbers (to one unit of the last printed digit: other sums). Other
    placements are refused in one sentence (test_balanced_sft_packs.py): Megatron-LM builds that dataset
    for the first and last stage only."""
    _needs_core_v019(megatron_lm_tree)
    own = H.run(megatron_lm_tree, 4, MASKING, te=True)
    ours = H.run(megatron_lm_tree, 4, [*MASKING, "--pipeline-schedule", "zb-h1", *FIXED,
                                       "--pipeline-balance-data", "lb-mini"], te=True)
    assert H.arg(ours, "dataloader_inter_document_masking") == "True"
    plans = _plans(ours)
    assert [p[0] for p in plans] == [16 * i for i in range(ITERS)], H.tail(ours.log)
    assert all(sum(p[2]) == 16 * 32 and all(t % 32 == 0 for t in p[2]) for p in plans), plans  # one sample a pack
    for quantity in ("losses", "grad_norms"):
        mine, theirs = getattr(ours, quantity), getattr(own, quantity)
        assert sorted(mine) == sorted(theirs) == list(range(1, ITERS + 1)) and \
            all(_close(theirs[i], mine[i]) for i in theirs), (quantity, mine, theirs)
    assert own.losses[1] != own.losses[ITERS], "the loss did not change while training"
