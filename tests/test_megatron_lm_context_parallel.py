"""Megatron-LM's own pretrain_gpt.py on CPU (`--cpu`) with context parallelism (issue 41 item 3):
CP=2 x PP=2 on 4 ranks, TransformerEngine layers (the test-only stand-in, tests/te_standin, whose
attention runs TE's context-parallel ring), under our zb-h1 and zbv against Megatron's own 1F1B on
the same command line, and zb-h1 with TE's all-to-all exchange (`--cp-comm-type a2a`). In bf16
(`--bf16`): TE v2.11 has no context-parallel attention for fp32 inputs (transformer_engine/pytorch/
attention/dot_product_attention/utils.py 436-465 and 756-760 leave no backend), and the stand-in
refuses fp32 under CP as TE does.

What this adds to the production matrix's CP rows (which go through our API): Megatron-LM's whole
loop with CP, i.e. pretrain_gpt's get_batch (each CP rank's two sequence chunks), its loss_func
(the loss summed over the CP group), finalize_model_grads (gradients reduced over DP x CP), and our
plugin's argument handling (microbatches per step from the world less TP x PP x CP).

What must hold: every number Megatron-LM logs (lm loss and grad norm of every iteration, the
validation and test losses) is identical, as printed, to Megatron's own 1F1B's with the same
`--cp-comm-type`; the runs had context_parallel_size 2 and data_parallel_size 1 (Megatron-LM's
argument dump). `--attention-dropout 0.0`: the stand-in refuses attention dropout under CP in
training (TE's ring draws it per chunk, which CPU cannot reproduce). Every run starts from one
shared checkpoint (initialisation depends on the placement: zbv's V puts one layer per stage).
Untied embeddings keep zbv's numbers exact (see CP2PP2).

The numbers alone cannot tell CP=2 from DP=2 (the same global batch, the same mean loss: without
`--context-parallel-size` our run printed the same numbers), hence the layout check; an error in the
stand-in's ring would be on both sides, which tests/test_te_standin_context_parallel.py checks against
attention on the whole sequence. Seven runs of 4 ranks (a start checkpoint, then megatron's 1F1B and
ours per exchange): about 45 s (60 s of CPU) with megatron-core 0.16.1, 70 s of CPU with 0.19.
"""
from __future__ import annotations

import functools

import pytest

import megatron_lm_harness as H

pytestmark = pytest.mark.megatron_lm

ITERS = 3
# 4 microbatches per step (DP=1); the harness's sequence of 32 tokens splits into 2 x CP chunks of 8
CP2PP2 = ["--pipeline-model-parallel-size", "2", "--context-parallel-size", "2", "--global-batch-size", "8",
          "--attention-dropout", "0.0", "--eval-interval", str(ITERS), "--untie-embeddings-and-output-weights",
          "--bf16"]  # TE has no context-parallel attention in fp32
# untied: with tied embeddings zbv puts both copies on rank 0, which sums their gradients in another order
# relative to the CP reduce than 1F1B's embedding group (a few fp32 ulps, test_production_matrix.py's 1e-6;
# here the last printed digit of one loss); untied, every comparison is exact
FIXED = ["--pipeline-profile-steps", "0"]  # equal-cost plans: the numbers cannot depend on a measured plan
A2A = ["--cp-comm-type", "a2a"]
CASES = [("p2p", "zb-h1"), ("p2p", "zbv"), ("a2a", "zb-h1")]


@pytest.fixture(scope="module")
def runs(megatron_lm_tree, tmp_path_factory):
    tree, work = megatron_lm_tree, tmp_path_factory.mktemp("megatron-lm-cp")

    @functools.lru_cache(maxsize=None)
    def start() -> str:
        """One iteration of Megatron's own schedule, saved: every run loads it."""
        path = str(work / "start")
        H.run(tree, 4, CP2PP2 + ["--train-iters", "1", "--eval-interval", "1000", "--save", path,
                                 "--save-interval", "1"], te=True)
        return path

    @functools.lru_cache(maxsize=None)
    def run(comm: str, schedule):
        argv = CP2PP2 + (A2A if comm == "a2a" else []) + ["--train-iters", str(ITERS), "--load", start(),
                                                          "--finetune"]
        return H.run(tree, 4, argv + (["--pipeline-schedule", schedule, *FIXED] if schedule else []), te=True)

    return run


@pytest.mark.parametrize("comm, schedule", CASES, ids=[f"{c}-{s}" for c, s in CASES])
def test_context_parallel_trains_exactly_as_megatron(runs, comm, schedule):
    own, ours = runs(comm, None), runs(comm, schedule)
    assert sorted(ours.losses) == list(range(1, ITERS + 1)), H.tail(ours.log)
    assert {w for _, w in ours.validation} >= {"validation set", "test set"}, H.tail(ours.log)
    assert ours.numbers() == own.numbers()
    assert len({ours.losses[1], ours.losses[ITERS]}) == 2, "the loss did not change while training"
    for result in (ours, own):  # the layout Megatron-LM was given, as it parsed it
        assert H.arg(result, "context_parallel_size") == "2" and H.arg(result, "data_parallel_size") == "1"
        assert H.arg(result, "pipeline_model_parallel_size") == "2"
        assert H.arg(result, "transformer_impl") == "transformer_engine" and H.arg(result, "bf16") == "True"
        assert H.arg(result, "cp_comm_type") == f"['{comm}']"  # one type for every layer
    assert H.arg(ours, "pipeline_schedule") == schedule
