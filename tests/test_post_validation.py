"""--optimizer-post-validation gives bitwise the synchronous optimizer step.

10 iterations of a small GPT (pp=2, gloo) under zb-h2 and zbv in fp32, bf16 and
fp16, with a clip threshold that some iterations exceed (clipped re-steps after
a rollback) and a non-finite gradient injected on one stage at one iteration
(every rank rolls back, fp16 lowers its loss scale, the iteration is skipped):
losses, gradient norms, skipped iterations, loss scale and every parameter
equal the synchronous path's exactly. Also the distributed optimizer over data
parallel 2 x pipeline 2 on 4 processes, and the validation point: after the
rank's first ops of the next iteration, never between iterations.

The iteration counts are the fewest that keep every assertion's evidence: optimistic steps, rollbacks
and redone steps in every case (the test asserts each), the injected non-finite gradient (iteration 9
in bf16, 6 in fp16) and a falling loss; more iterations repeat the same step."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import megatron_reference as ref
import pipeline_harness as H
from schedule_subset import under_test

from primus_megatron.optim.post_validation import must_redo

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")

ITERS = 10


def argv(pp, *extra):
    return ["--cpu", "--mock-data", "--vocab-size", "64", "--num-layers", "4", "--hidden-size", "32",
            "--num-attention-heads", "4", "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "8",
            "--lr", "3e-3", "--seed", "3", "--pipeline-model-parallel-size", str(pp), "--train-iters", str(ITERS),
            "--clip-grad", "1.6", "--pipeline-p2p-timeout", "60",
            # given costs: zbv's plan is cost-aware from the first step and the same in both runs (a plan from
            # measured costs can differ between launches, and with it the order in which the tied embedding's
            # two gradient contributions add up)
            "--pipeline-costs", "1,2,1,0.05", *extra]


PRECISIONS = {
    "fp32": [],
    "bf16": ["--bf16", "--loss-scale", "1024", "--inject-nonfinite-grad", "9:0"],
    "fp16": ["--fp16", "--inject-nonfinite-grad", "6:1"],
}
CASES = [(s, p) for s in under_test(("zb-h2", "zbv")) for p in PRECISIONS]


@pytest.fixture(scope="module")
def pp2():
    runs = []
    for schedule, precision in CASES:
        base = argv(2, "--pipeline-schedule", schedule, *PRECISIONS[precision])
        runs += [base, base + ["--optimizer-post-validation"]]
    results = H.run_ranks({"body": H.train_body, "pp": 2, "runs": runs, "return_params": True}, 2, timeout_s=1200)
    return {case: (results[0][2 * i], results[0][2 * i + 1], results[1][2 * i], results[1][2 * i + 1])
            for i, case in enumerate(CASES)}


def _assert_bitwise(sync, pv, what):
    assert pv["losses"] == sync["losses"], what
    assert pv["grad_norms"] == sync["grad_norms"], what
    assert pv["skipped"] == sync["skipped"] and pv["loss_scale"] == sync["loss_scale"], what
    assert set(pv["params"]) == set(sync["params"]) and sync["params"]
    for name, value in sync["params"].items():
        assert torch.equal(pv["params"][name], value), f"{what}: {name}"


@pytest.mark.parametrize("schedule, precision", CASES)
def test_post_validation_equals_the_synchronous_step_bitwise(pp2, schedule, precision):
    sync0, pv0, sync1, pv1 = pp2[(schedule, precision)]
    _assert_bitwise(sync0, pv0, f"{schedule} {precision} rank 0")
    _assert_bitwise(sync1, pv1, f"{schedule} {precision} rank 1")
    stats = pv0["post_validation"]
    assert stats["steps"] == ITERS
    assert stats["optimistic"] >= 1, "some steps must be taken optimistically"
    assert stats["rollbacks"] >= 1 and stats["redone"] >= 1, "the clip threshold must force rollbacks"
    assert None not in sync0["grad_norms"] or precision != "fp32"
    if precision != "fp32":  # the injected non-finite gradient was skipped on every rank
        assert sync0["skipped"] == 1 and pv0["skipped"] == 1
        assert sync0["grad_norms"].count(None) == 1
    assert sync0["losses"][-1] < sync0["losses"][0]


def test_validation_happens_after_the_next_iterations_first_ops(pp2):
    """No rank waits on a global collective between iterations: the check of the
    previous step runs after this rank's first forwards of the next one."""
    for rank_result in pp2[("zbv", "fp32")][1::2]:
        ops = rank_result["timeline"]
        kinds = [k for k, *_ in ops]
        assert "VALIDATE" in kinds
        first = kinds.index("VALIDATE")
        assert first >= 1 and all(k == "F" for k in kinds[:first])


def test_distributed_optimizer_data_parallel_2_x_pipeline_2():
    runs = []
    # with overlapped gradient reduce too: the validation zeroes DDP's buffers in the middle of a step
    for precision in (["--clip-grad", "1.6"], ["--bf16", "--clip-grad", "1.6"], ["--clip-grad", "1.6",
                                                                                "--overlap-grad-reduce"]):
        base = argv(2, "--pipeline-schedule", "zbv", "--use-distributed-optimizer", "--global-batch-size", "16",
                    "--train-iters", "4", *precision)
        runs += [base, base + ["--optimizer-post-validation"]]
    results = H.run_ranks({"body": H.train_body, "pp": 2, "runs": runs, "return_params": True}, 4, timeout_s=1200)
    for rank, per_rank in enumerate(results):
        for i in range(0, len(runs), 2):
            _assert_bitwise(per_rank[i], per_rank[i + 1], f"dp2 x pp2 run {i // 2} rank {rank}")
        assert per_rank[1]["post_validation"]["rollbacks"] >= 1
        assert per_rank[5]["post_validation"]["rollbacks"] >= 1


# -- the redo decision is the same on every rank ------------------------------------------------

_SQ = st.one_of(st.floats(min_value=0.0, max_value=1e30), st.just(math.inf), st.just(math.nan))


@settings(max_examples=300, deadline=None)
@given(local_sq=st.lists(_SQ, min_size=2, max_size=8), clip=st.sampled_from([0.0, 1.0, 1.6, 1e6]))
def test_every_rank_redoes_its_prefix_or_none_does(local_sq, clip):
    """A rank skips its optimistic step when its own gradients already exceed the clip
    (`PostValidationOptimizer.step`); after the norm's all-reduce each rank redoes its prefix
    if the global norm undoes the step or it did not step. Any rank's NaN makes the global norm
    NaN, which megatron's clip comparison lets through: the decision must still be the same on
    every rank (found at pp=32, where one rank redid and its neighbours did not, and they hung)."""
    stepped = [not (clip > 0 and clip / (sq ** 0.5 + 1.0e-6) < 1.0) for sq in local_sq]
    global_norm = math.fsum(local_sq) ** 0.5 if not any(math.isnan(x) for x in local_sq) else math.nan
    redo = [must_redo(global_norm, clip) or not s for s in stepped]
    assert len(set(redo)) == 1, (local_sq, clip, stepped, redo)
