"""A layer split balanced from measured costs (schedules/balance.py): the fitted
cost model, the choice among megatron's splits, profile files, the
`primus-pipeline balance` command and `--pipeline-balance` in training.

Coverage (2026-11-29, the suite's CPU budget): the training test no longer also trains each chosen split
given by hand (two of its seven runs): the split is checked against the flags `choose` prints, and training
from those flags given by hand (first/last counts, and a layout under zbv) is test_uneven_split.py's
training test, against megatron's own schedule."""
from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import sys

import pytest

from primus_megatron.schedules import balance as B
from primus_megatron.schedules import ScheduleError, info, names
from primus_megatron.schedules.layer_split import LayerSplit, check, stage_layers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# One choice computed once for the module: several tests read the same (schedule, size, costs) one
# (the choice is a pure function of its arguments; the tests only read what it returns).
choose = functools.lru_cache(maxsize=None)(B.choose)
HEAVY_HEAD = B.ModelCosts(layer=B.Part(1.0, 1.0, 1.0), embedding=B.Part(0.2, 0.3, 0.0), head=B.Part(3.0, 3.0, 3.0),
                          comm=0.05)


@pytest.mark.parametrize("pp, chunks, split", [
    (2, 2, LayerSplit(8)),                        # V or interleaved: 4 stages, three kinds of stage
    (3, 1, LayerSplit(9)),
    (4, 1, LayerSplit(14, first=2, last=4)),
    (2, 2, LayerSplit(7, loss=True)),
])
def test_fit_recovers_the_cost_model_from_per_stage_costs(pp, chunks, split):
    measured = B.stage_costs(HEAVY_HEAD, split, pp, chunks)
    fitted = B.fit(measured, split, pp, chunks)
    for part in ("layer", "embedding", "head"):
        for k in ("f", "b", "w"):
            assert getattr(getattr(fitted, part), k) == pytest.approx(getattr(getattr(HEAVY_HEAD, part), k), abs=1e-9)
    assert fitted.comm == pytest.approx(HEAVY_HEAD.comm)


def test_fit_on_two_kinds_of_stage_takes_the_embedding_as_free():
    model = B.ModelCosts(layer=B.Part(1.0, 2.0, 1.0), head=B.Part(4.0, 1.0, 2.0))  # embedding free
    split = LayerSplit(8)
    fitted = B.fit(B.stage_costs(model, split, 2, 1), split, 2, 1)
    assert fitted.layer == pytest.approx(model.layer) and fitted.head == pytest.approx(model.head)
    assert fitted.embedding == B.Part(0.0, 0.0, 0.0)


@pytest.mark.parametrize("num_layers, pp, chunks, w_ops", [(16, 4, 2, True), (16, 4, 1, True), (15, 4, 2, True),
                                                           (8, 2, 1, False), (6, 3, 1, True)])
def test_candidates_are_the_distinct_splits_megatron_builds(num_layers, pp, chunks, w_ops):
    splits = B.candidates(num_layers, pp, chunks, w_ops=w_ops)
    layouts = [tuple(stage_layers(s, pp, chunks)) for s in splits]
    assert len(set(layouts)) == len(layouts) and splits
    assert all(check(s, pp, chunks, w_ops=w_ops) is None for s in splits)
    assert all(sum(layout) == num_layers for layout in layouts)
    if num_layers % (pp * chunks) == 0:
        assert LayerSplit(num_layers) in splits


@pytest.mark.parametrize("name", ["zb-h1", "zb-h2", "1f1b", "zb-auto", "zbv", "v-half"])
def test_the_choice_is_the_fastest_candidate_and_never_slower_than_even(name):
    pp, layers = (4, 16) if info(name).chunks == 2 else (4, 12)
    best, rows = choose(name, pp, 8, HEAVY_HEAD, layers)
    timed = [c for c in rows if c.iteration is not None]
    assert best.iteration == min(c.iteration for c in timed)
    even = next(c for c in rows if not B.flags(c.split))
    assert best.iteration <= even.iteration


def test_a_heavy_head_moves_layers_off_the_last_stage_and_equal_parts_keep_the_even_split():
    best, _ = choose("zb-h1", 4, 8, HEAVY_HEAD, 12)
    layers = stage_layers(best.split, 4, 1)
    assert layers[-1] < 3 and B.flags(best.split)
    plain = B.ModelCosts(layer=B.Part(1.0, 1.0, 1.0))  # no embedding or head cost
    best, _ = choose("zb-h1", 4, 8, plain, 12)
    assert B.flags(best.split) == ""


def test_a_memory_limit_excludes_splits_that_exceed_it():
    best, rows = choose("zbv", 4, 8, HEAVY_HEAD, 16)
    assert best.peak_memory > 4  # unbounded, the fastest split here keeps more activations
    capped, rows = choose("zbv", 4, 8, HEAVY_HEAD, 16, memory_limit=4.0)
    assert capped.peak_memory <= 4.0 and any(c.note for c in rows)


def test_profile_round_trip_and_bad_files(tmp_path):
    path = str(tmp_path / "p.json")
    B.save_profile(path, HEAVY_HEAD, meta={"pp": 4})
    assert B.load_profile(path) == HEAVY_HEAD
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ScheduleError, match="is not a primus-pipeline-profile/1 file"):
        B.load_profile(str(bad))
    with pytest.raises(ScheduleError, match="does not exist"):
        B.load_profile(str(tmp_path / "missing.json"))


def _cli(*argv):
    return subprocess.run([sys.executable, "-m", "primus_megatron.cli", *argv], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)


def test_cli_balance_prints_the_recommended_options(tmp_path):
    path = str(tmp_path / "p.json")
    B.save_profile(path, HEAVY_HEAD)
    out = _cli("balance", "--profile", path, "--schedule", "zb-h1", "--pp", "4", "-m", "8", "--num-layers", "12")
    assert out.returncode == 0, out.stderr
    best, _ = choose("zb-h1", 4, 8, HEAVY_HEAD, 12)
    assert f"recommended: {B.flags(best.split)}" in out.stdout and "<- chosen" in out.stdout
    bad = _cli("balance", "--profile", str(tmp_path / "none.json"), "--schedule", "zb-h1", "--pp", "4", "-m", "8",
               "--num-layers", "12")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--profile" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_cli_balance_auto_recommends_the_fastest_schedule_and_split(tmp_path):
    """--schedule auto (which training takes): every schedule's own fastest split, the fastest of all
    recommended with its --pipeline-schedule, each row's time the one `choose` finds for it."""
    path = str(tmp_path / "p.json")
    B.save_profile(path, HEAVY_HEAD)
    out = _cli("balance", "--profile", path, "--schedule", "auto", "--pp", "4", "-m", "8", "--num-layers", "8")
    assert out.returncode == 0, out.stderr
    usable = [n for n in names() if info(n).needs_extra != "ilp"]
    found = {n: choose(n, 4, 8, HEAVY_HEAD, 8)[0] for n in usable}
    listed = {line.split()[0]: float(line.split()[1]) for line in out.stdout.splitlines()
              if line.split() and line.split()[0] in found}
    assert listed.keys() == found.keys()
    for name, best in found.items():
        assert listed[name] == pytest.approx(best.iteration, rel=1e-3), name
    name = min(usable, key=lambda n: found[n].iteration)  # the first of the fastest, as training's auto takes
    best = found[name]
    line = shlex.join(["--pipeline-schedule", name] + B.flag_args(best.split))
    assert f"recommended: {line}" in out.stdout


def test_under_v_at_pp2_only_a_layout_balances_and_it_is_chosen():
    """At pp=2 under V, rank 0 holds the embedding, the head and stages 0 and 3;
    megatron's first/last counts act on both ranks at once and the accounting
    needs layers + 2 to split into 4 stages (8 + 2 does not), so only a layout
    lightens rank 0, and the choice takes it."""
    best, rows = choose("zbv", 2, 16, HEAVY_HEAD, 8)
    assert best.split.layout and B.flags(best.split).startswith("--pipeline-model-parallel-layout '")
    options = [c for c in rows if c.iteration is not None and not c.split.layout]
    assert options and best.iteration < 0.9 * min(c.iteration for c in options)
    layers = stage_layers(best.split, 2, 2)
    assert layers[0] + layers[3] < layers[1] + layers[2]  # rank 0 (stages 0 and 3) holds fewer layers
    assert len({c.layers for c in rows}) == len(rows) == 35  # every layout of 8 layers in 4 stages, once


def test_a_chosen_layout_is_set_in_megatron_lms_arguments_in_place_of_the_virtual_size():
    """apply_balance (--pipeline-balance FILE) sets the layout; Megatron-LM takes the
    virtual pipeline size from it and refuses it next to --num-virtual-stages-per-pipeline-rank."""
    import argparse

    from primus_megatron import options
    from primus_megatron.megatron_lm.args import apply_balance
    from primus_megatron.options import check_layer_split

    args = argparse.Namespace(pipeline_schedule="zbv", num_layers=8, pipeline_model_parallel_size=2,
                              num_virtual_stages_per_pipeline_rank=2, num_layers_per_virtual_pipeline_stage=None,
                              decoder_first_pipeline_num_layers=None, decoder_last_pipeline_num_layers=None,
                              account_for_embedding_in_pipeline_split=False, account_for_loss_in_pipeline_split=False,
                              pipeline_model_parallel_layout=None, pipeline_memory_limit=None)
    assert check_layer_split(args, 2, 2, "zbv") is None
    spec, log = apply_balance(args, options.from_args(args), HEAVY_HEAD, 2, 16, source="test")
    best, _ = choose("zbv", 2, 16, HEAVY_HEAD, 8)
    assert args.pipeline_model_parallel_layout == best.split.layout and best.split.layout in log
    assert spec.name == "zbv" and spec.split == best.split
    assert args.num_virtual_stages_per_pipeline_rank is None
    assert check_layer_split(args, 2, 2, "zbv", w_ops=True) is None
    args.num_virtual_stages_per_pipeline_rank = 2
    assert "drop --num-virtual-stages-per-pipeline-rank" in check_layer_split(args, 2, 2, "zbv")


@pytest.mark.parametrize("name, pp, layers", [("zbv", 4, 16), ("v-half", 4, 16), ("zb-h1", 8, 32)])
def test_beyond_every_layout_the_balanced_ones_are_tried(name, pp, layers):
    """Too many layouts to try them all: those that even out the ranks' work are
    candidates, every one a valid split, and the choice gains over the best
    first/last or accounting option where the head is heavy."""
    chunks = info(name).chunks
    balanced = B.balanced_layouts(layers, pp, chunks, info(name).placement, HEAVY_HEAD)
    assert balanced and all(sum(c) == layers and min(c) >= 1 and len(c) == pp * chunks for c in balanced)
    best, rows = choose(name, pp, 16, HEAVY_HEAD, layers)
    options = [c for c in rows if c.iteration is not None and not c.split.layout]
    assert best.iteration <= min(c.iteration for c in options)
    if chunks == 2:  # under V / with 2 chunks megatron's options cannot balance rank 0's two ends
        assert best.split.layout and best.iteration < 0.95 * min(c.iteration for c in options)


def test_training_takes_the_split_from_a_profile_and_trains_the_same_model(tmp_path):
    """--pipeline-balance FILE chooses the split at start, the one `choose` recommends; the losses are those
    of the even split (the model is the same)."""
    import megatron_reference as ref
    import pipeline_harness as H

    if not ref.environment_ok():
        pytest.skip("megatron-core is not installed")
    path = str(tmp_path / "p.json")
    B.save_profile(path, HEAVY_HEAD)
    base = ["--cpu", "--mock-data", "--vocab-size", "64", "--num-layers", "8", "--hidden-size", "32",
            "--num-attention-heads", "4", "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "8",
            "--lr", "3e-3", "--seed", "5", "--pipeline-model-parallel-size", "2", "--train-iters", "2",
            "--pipeline-p2p-timeout", "60"]
    runs, chosen = [], []
    for name in ("zb-h1", "zbv"):  # first/last counts; a layout (V at pp=2)
        best, _ = choose(name, 2, 4, HEAVY_HEAD, 8)
        assert B.flags(best.split)  # the heavy head makes an uneven split win
        chosen.append(B.flags(best.split))
        one = base + ["--pipeline-schedule", name]
        runs += [one + ["--pipeline-balance", path], one]
    assert "--pipeline-model-parallel-layout" in chosen[1]
    # measured at start, schedule and split chosen together (zb-h1 profiled, then 1f1b for its BW)
    runs.append(base + ["--pipeline-schedule", "auto", "--pipeline-balance", "auto", "--pipeline-profile-steps", "1"])
    results = H.run_ranks({"body": H.train_body, "pp": 2, "runs": runs}, 2, timeout_s=600)
    for i, flags in enumerate(chosen):
        balanced, even = results[0][2 * i:2 * i + 2]
        assert balanced["layer_split"] == flags != even["layer_split"]
        assert balanced["losses"] == even["losses"]
    both = results[0][-1]
    assert both["schedule"] in names() and both["schedule"] != "auto"
    assert both["losses"] == pytest.approx(results[0][1]["losses"], rel=1e-5)  # the same model, any split


def test_costs_measured_on_loop_stages_are_re_placed_for_v():
    """`auto` profiles a loop schedule; timed for V from the fitted model, the head counts on
    rank 0 (with the embedding), where per-rank shares would leave it on the last rank."""
    from primus_megatron import schedules as S
    from primus_megatron.schedules.ir import B as BWD, F, V, W, owner_of

    split, pp = LayerSplit(16), 4
    measured = B.stage_costs(HEAVY_HEAD, split, pp, 1)  # one loop stage per rank: also the per-rank shares
    placed = B.retimed(measured, B.fit(measured, split, pp, 1), split, pp, 2)
    want = B.stage_costs(HEAVY_HEAD, split, pp, 2)
    assert all(getattr(placed, k) == pytest.approx(getattr(want, k)) for k in "fbw")
    assert (placed.mem_f, placed.comm) == (measured.mem_f, measured.comm)  # memory and p2p as measured

    def rank_totals(costs):
        sc = costs.resolve(pp, 2, V)
        return [[sum(sc.time[k][s] for s in range(2 * pp) if owner_of(V, pp, s)[0] == r) for r in range(pp)]
                for k in (F, BWD, W)]
    layers = 16 / pp
    for k, kind in enumerate("fbw"):
        own = rank_totals(placed)[k]
        per = [layers * getattr(HEAVY_HEAD.layer, kind)] * pp
        per[0] += getattr(HEAVY_HEAD.embedding, kind) + getattr(HEAVY_HEAD.head, kind)
        assert own == pytest.approx(per)
        assert rank_totals(measured)[k][pp - 1] > rank_totals(measured)[k][0]  # the shares: head on the last rank
    # `auto` ranks each candidate under its own costs
    best, rows = S.auto.choose(pp, 8, lambda name: B.stage_costs(HEAVY_HEAD, split, pp, info(name).chunks))
    for row in rows:
        if row.iteration is not None:
            own = B.stage_costs(HEAVY_HEAD, split, pp, row.chunks)
            limit = float(pp) if info(row.name).cost_driven else None
            assert row.iteration == S.simulate(S.generate(row.name, pp, 8, costs=own, memory_limit=limit), own).makespan
