"""Runtime contract beyond plain parity: evaluation, megatron's config hooks and
loss conventions, gradient-accumulation fusion, per-chunk data iterators, tied
embeddings, freed pipeline outputs. Multi-process gloo, pp=2, one process group."""
from __future__ import annotations

import pytest
import torch

import megatron_reference as ref
import pipeline_harness as H
from primus_megatron import schedules as S

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")

RTOL, ATOL = 1e-5, 1e-7
OPTS = {"p2p_timeout_s": 60}
PP, M = 2, 3
SPLIT = ["zb-h1", "zb-h2", "zb-auto", "zbv", "v-half", "v-min"]

CASES = (
    [{"schedule": s, "microbatches": M, "forward_only": True, "options": OPTS} for s in S.names() if s != "zb-optimal"]
    + [{"schedule": s, "microbatches": M, "fusion": True, "config": {"gradient_accumulation_fusion": True},
        "options": OPTS} for s in ("1f1b", "zb-h1", "zbv", "v-min")]
    + [{"schedule": s, "microbatches": M, "list_iterators": True, "options": OPTS} for s in ("interleaved-1f1b", "zbv")]
    + [{"schedule": s, "microbatches": M, "tied": True, "options": OPTS} for s in ("1f1b", "zb-h1", "zbv", "v-half")]
    + [{"schedule": s, "microbatches": M, "config": {"deallocate_pipeline_outputs": True}, "options": OPTS}
       for s in ("zb-h1", "zbv")]
    + [{"schedule": s, "microbatches": M, "three_tuple": False, "options": OPTS} for s in ("zb-h2", "v-half")]
    + [{"schedule": s, "microbatches": M, "config": {"calculate_per_token_loss": True}, "options": OPTS}
       for s in ("megatron-1f1b", "zb-h1", "zbv")]
    + [{"schedule": s, "microbatches": M, "config": {"grad_scale_func": H.times_four}, "options": OPTS}
       for s in ("megatron-1f1b", "zb-auto", "v-min")]
)


@pytest.fixture(scope="module")
def results():
    per_rank = H.run_ranks({"body": H.cases_body, "pp": PP, "num_layers": 4, "cases": CASES}, PP, timeout_s=900)
    out = []
    for i in range(len(CASES)):
        rows = [r[i] for r in per_rank]
        for rank, row in enumerate(rows):
            assert "error" not in row, f"{CASES[i]} rank {rank}: {row['error']}"
        out.append(rows)
    return out


def _select(results, **match):
    picked = [(c, rows) for c, rows in zip(CASES, results) if all(c.get(k) == v for k, v in match.items())]
    assert picked, match
    return picked


def _losses(rows):
    return [x for row in rows for x in row["losses"]]


def _grads(rows):
    return ref.merge_grads([row["grads"] for row in rows])


def _close(a, b, what):
    torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL, msg=lambda m: f"{what}: {m}")


def _close_grads(actual, expected, what, scale=1.0):
    assert set(actual) == set(expected), what
    for name in expected:
        _close(actual[name], expected[name] * scale, f"{what} {name}")


def test_forward_only_returns_the_training_losses_for_every_schedule(results):
    for case, rows in _select(results, forward_only=True):
        _close(torch.tensor(_losses(rows)), torch.tensor(rows[0]["ref_losses"]), case["schedule"])
        assert all(not row["grads"] for row in rows), f"{case['schedule']}: evaluation produced gradients"


def test_gradient_accumulation_fusion_accumulates_into_main_grad(results):
    for case, rows in _select(results, fusion=True):
        _close_grads(_grads(rows), rows[0]["ref_grads"], f"{case['schedule']} fusion")


def test_one_data_iterator_per_chunk(results):
    for case, rows in _select(results, list_iterators=True):
        _close_grads(_grads(rows), rows[0]["ref_grads"], f"{case['schedule']} list iterators")


def test_tied_embeddings(results):
    for case, rows in _select(results, tied=True):
        grads = _grads(rows)
        _close_grads(grads, rows[0]["ref_grads"], f"{case['schedule']} tied")
        if S.info(case["schedule"]).placement == S.V:
            # rank 0 holds embedding and output layer: one shared Parameter, no copy elsewhere
            assert "embedding.word_embeddings.weight" in rows[0]["grads"]
            assert "embedding.word_embeddings.weight" not in rows[1]["grads"]


def test_deallocated_pipeline_outputs(results):
    for case, rows in _select(results, config={"deallocate_pipeline_outputs": True}):
        _close_grads(_grads(rows), rows[0]["ref_grads"], f"{case['schedule']} deallocate")


def test_the_oracles_run_megatrons_own_linear_layers(results):
    per_rank = [[rows[rank] for rows in results] for rank in range(PP)]
    megatron_runs = sum(c["schedule"] in H.MEGATRON_OWN for c in CASES)
    assert H.assert_oracles_ran_megatrons_own_linear(CASES, per_rank) == len(CASES) + PP * megatron_runs


def test_two_tuple_loss_func(results):
    for case, rows in _select(results, three_tuple=False):
        _close(torch.tensor(_losses(rows)), torch.tensor(rows[0]["ref_losses"]), case["schedule"])
        _close_grads(_grads(rows), rows[0]["ref_grads"], f"{case['schedule']} 2-tuple")


@pytest.mark.parametrize("hook", ["per_token", "grad_scale"])
def test_loss_scaling_equals_megatrons(results, hook):
    config = {"calculate_per_token_loss": True} if hook == "per_token" else {"grad_scale_func": H.times_four}
    picked = _select(results, config=config)
    megatron = [rows for c, rows in picked if c["schedule"] == "megatron-1f1b"][0]
    for case, rows in picked:
        if case["schedule"] == "megatron-1f1b":
            continue
        _close(torch.tensor(_losses(rows)), torch.tensor(_losses(megatron)), f"{case['schedule']} {hook} losses")
        _close_grads(_grads(rows), _grads(megatron), f"{case['schedule']} {hook}")
    if hook == "grad_scale":  # and the hook really scaled: 4x the reference gradients
        _close_grads(_grads(megatron), megatron[0]["ref_grads"], "megatron grad_scale", scale=4.0)
