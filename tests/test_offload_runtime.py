"""Activation offload at runtime (issue 32): with every F's saved activations, and what every B
keeps for its W, moved to the host pool and back (`--pipeline-offload all`), losses, every gradient after finalize_model_grads, the
optimizer's parameters after every step and the final model are bitwise those without offload, on
Megatron-LM's production configurations (test_production_matrix's, wired by matrix_harness), and
the host pool is empty when each step ends (the executor raises otherwise).

By default a representative subset runs (each production feature under a split-backward, a V and
a fused-backward schedule: about a minute on 2 cores); PRIMUS_OFFLOAD_MATRIX=full runs every
configuration under every schedule, PRIMUS_OFFLOAD_MATRIX=config,config... the named ones.
"""
from __future__ import annotations

import os

import pytest
import torch

import matrix_harness as H
import megatron_reference as ref
import test_production_matrix as M

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")

# megatron's own linear backward (1f1b) with fusion and overlapped reduce reads grad_added_to_main_grad off
# the saved weight, which saved-tensor hooks re-wrap (linear_hooks._WithParam)
EXTRA = {"c-fusion-overlap": ("dp2pp2", {"model": {"gradient_accumulation_fusion": True}, "ddp": M.OVERLAP})}
CONFIGS = {**M.CONFIGS, **EXTRA}
SUBSET = {
    "a-overlap-grad-sync": ["zb-h1"],
    "c-fusion-overlap": ["1f1b", "interleaved-1f1b"],
    "b-distopt-overlap-param-gather": ["zbv"],
    "c-fusion-bf16": ["v-half"],
    "d-tied-fusion-overlap": ["v-min"],
    "e-tp2-sp": ["zb-h2", "1f1b"],
    "f-moe-ep2": ["zb-auto", "dualpipev"],  # dualpipev: its pairs run as F then B (no combined step)
    # overlapped F&B pairs, each one call of megatron's combined step: the F half's activations recorded
    # inside it and moved as the pair ends, the B half's back before it starts
    "f-moe-ep2-bf16-a2a-overlap": ["dualpipev"],
}
FULL = {**{c: [s for s in M._schedules(c) if s not in H.ORACLES] for c in M.CONFIGS}, "c-fusion-overlap": M.OURS}
_ENV = os.environ.get("PRIMUS_OFFLOAD_MATRIX", "")
# "full": every configuration and schedule; a comma-separated list of configurations: those, every schedule
CHOSEN = FULL if _ENV == "full" else {c: FULL[c] for c in _ENV.split(",")} if _ENV else SUBSET
CASES = [(c, s) for c, schedules in CHOSEN.items() for s in schedules]


def _spec(name: str) -> dict:
    world, spec = CONFIGS[name]
    return {**M.BASE, **spec, "dp": M.WORLDS[world]["dp"], "seed": sum(map(ord, name))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(config, schedule, offload) -> per-rank results; one launch per world layout."""
    out = {}
    for world, layout in M.WORLDS.items():
        cases = [{"spec": {**_spec(c), "offload": mode}, "schedule": s, "config": c, "offload": mode}
                 for c, s in CASES if CONFIGS[c][0] == world for mode in ("off", "all")]
        if not cases:
            continue
        for case, res in zip(cases, H.run_world(layout, cases, str(tmp_path_factory.mktemp(world)))):
            out[(case["config"], case["schedule"], case["offload"])] = res
    return out


def _b_ops(schedule: str, pp: int, m: int, pp_rank: int) -> int:
    """B ops (each keeping a W share) of pipeline rank `pp_rank` in `schedule`'s order (zb-auto: none
    fused, so m per chunk as in every split schedule)."""
    if schedule in ("1f1b", "interleaved-1f1b"):
        return 0
    if schedule != "dualpipev":
        return m * (2 if schedule in ("zbv", "v-half", "v-min") else 1)
    from primus_megatron.schedules import B, generate

    return sum(op.kind == B for op in generate(schedule, pp, m).ranks[pp_rank])


def _same(a, b, where: str) -> None:
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), f"{where}: max |diff| {(a.double() - b.double()).abs().max().item():.3g}"
    elif isinstance(a, dict):
        assert isinstance(b, dict), where
        for k in a.keys() - {"offloaded", "offloaded_w", "offloaded_w_bytes", "peak_host_bytes",
                                 "seconds"}:  # (the run time differs)
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and a != a:
        assert b != b, where
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def test_offload_all_is_bitwise_the_run_without_it(runs, case):
    config, schedule = case
    plain, moved = runs[(config, schedule, "off")], runs[(config, schedule, "all")]
    for res in (plain, moved):
        if isinstance(res, dict):
            pytest.fail(f"{config} / {schedule}: the run raised:\n{res['error'][:6000]}", pytrace=False)
    for rank, (a, b) in enumerate(zip(plain, moved)):
        for it, record in enumerate(b["iterations"]):
            # every F that has a B was offloaded (m x chunks per rank), through the host pool, and with W
            # ops what every B kept for its W
            per_rank = _spec(config)["microbatches"] * (2 if schedule in (
                "zbv", "v-half", "v-min", "interleaved-1f1b", "dualpipev") else 1)
            assert record["offloaded"] == per_rank, (rank, it)
            with_w = schedule not in ("1f1b", "interleaved-1f1b")
            # every B (not BW) keeps a W share: all of them but dualpipev's, whose pairs take BW
            b_ops = _b_ops(schedule, M.WORLDS[CONFIGS[config][0]]["pp"], _spec(config)["microbatches"],
                           b["pp_rank"])
            assert record["offloaded_w"] == (b_ops if with_w else 0) and (b_ops > 0) == with_w, (rank, it)
            assert (record["offloaded_w_bytes"] > 0) == with_w, (rank, it)  # the layers' inputs and output grads
            if CONFIGS[config][1].get("a2a_overlap"):  # the pairs ran as one combined call, offloaded
                assert record["combined_pairs"] > 0 and a["iterations"][it]["combined_pairs"] > 0, (rank, it)
            assert record["peak_host_bytes"] > 0
            assert a["iterations"][it]["offloaded"] == a["iterations"][it]["offloaded_w"] == 0
        _same(a, b, f"{config}/{schedule} rank {rank}")
