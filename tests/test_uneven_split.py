"""Uneven layer splits under every placement.

megatron's first/last pipeline rank layer counts
(`num_layers_in_first/last_pipeline_stage`, Megatron-LM's
--decoder-first/last-pipeline-num-layers) and the embedding/loss accounting
(`account_for_embedding/loss_in_pipeline_split`):

* `schedules/layer_split.py` computes megatron-core's split in pure Python:
  equal to megatron's own `get_num_layers_to_build` /
  `get_transformer_layer_offset` for every (virtual stage, pipeline rank),
  and refusing (one sentence) whatever megatron refuses, crashes on or would
  build with a negative layer count;
* every schedule (loop and V placement) trains one step on an uneven split
  with the losses and every gradient of the non-pipelined reference and of
  megatron-core's own 1F1B on the same split (multi-process gloo, tiny
  GPTModel, fp32; one process group per pipeline size runs all its cases);
* every chunk holds the global layers of its global stage, so under V the
  embedding/loss accounting spares two layers of rank 0.

The refusals through both training entry points are rows of
tests/test_reliability_config.py.
"""
from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import megatron_reference as ref
import pipeline_harness as H
from primus_megatron import schedules as S
from primus_megatron.schedules.layer_split import (LayerSplit, SplitError, check, mtp_stage, rank_layers, stage_layers,
                                                  stage_ranges)

RTOL, ATOL = 1e-5, 1e-7
SCHEDULES = S.names()  # zb-optimal too (its integer program is small at these sizes)
OPTS = {"p2p_timeout_s": 60}


# -- the split itself, against megatron-core's functions -------------------------------------------

def _megatron_split(split: LayerSplit, pp: int, vp: int):
    """[(offset, count)] per global stage from megatron-core, or the exception it raises."""
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_config import TransformerConfig
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    try:
        config = TransformerConfig(
            num_layers=split.num_layers, hidden_size=8, num_attention_heads=2, pipeline_dtype=torch.float32,
            pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vp if vp > 1 else None,
            num_layers_in_first_pipeline_stage=split.first, num_layers_in_last_pipeline_stage=split.last,
            account_for_embedding_in_pipeline_split=split.embedding, account_for_loss_in_pipeline_split=split.loss)
        out = []
        for s in range(pp * vp):
            vp_stage = s // pp if vp > 1 else None
            out.append((get_transformer_layer_offset(config, vp_stage, s % pp),
                        get_num_layers_to_build(config, vp_stage, s % pp)))
    except (ValueError, AssertionError, ZeroDivisionError) as exc:
        return exc
    return out


def _splits(num_layers: int):
    yield LayerSplit(num_layers)
    for first, last in itertools.product([None, 1, 2, 4, 6], repeat=2):
        if first or last:
            yield LayerSplit(num_layers, first, last)
    yield LayerSplit(num_layers, embedding=True)
    yield LayerSplit(num_layers, loss=True)
    yield LayerSplit(num_layers, embedding=True, loss=True)
    yield LayerSplit(num_layers, first=2, loss=True)


@pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")
def test_split_is_megatron_cores_and_refused_where_megatron_cannot_build_it():
    import warnings

    warnings.filterwarnings("ignore")
    checked = refused = 0
    for pp, vp, num_layers in itertools.product([2, 3, 4], [1, 2], [3, 4, 6, 7, 8, 10, 12]):
        for split in _splits(num_layers):
            theirs = _megatron_split(split, pp, vp)
            if not isinstance(theirs, Exception) and any(count < 0 for _, count in theirs):
                theirs = ValueError("megatron-core builds a negative layer count")
            try:
                ours = stage_ranges(split, pp, vp)
            except SplitError as exc:
                assert isinstance(theirs, Exception), f"{split} pp={pp} vp={vp}: megatron builds {theirs}, we say {exc}"
                assert str(exc) and "\n" not in str(exc)
                refused += 1
                continue
            assert not isinstance(theirs, Exception), f"{split} pp={pp} vp={vp}: megatron: {theirs!r}, ours {ours}"
            assert [(r.start - 1, len(r)) for r in ours] == theirs, f"{split} pp={pp} vp={vp}"
            assert ours[-1].stop == num_layers + 1
            checked += 1
    assert checked > 250 and refused > 500, (checked, refused)  # both sides are exercised


@pytest.mark.parametrize("split, pp, chunks, needles", [
    (LayerSplit(8, first=2, embedding=True), 4, 1,
     ["--decoder-first-pipeline-num-layers cannot be combined with --account-for-embedding-in-pipeline-split"]),
    (LayerSplit(8, first=3), 4, 2, ["--decoder-first-pipeline-num-layers 3 must be a multiple of 2",
                                    "the 2 chunks per pipeline rank of --pipeline-schedule zbv"]),
    (LayerSplit(8, first=2, last=6), 2, 2, ["cannot both be given with 2 pipeline ranks x 2 chunks",
                                             "give only --decoder-first-pipeline-num-layers 2: the last rank holds "
                                             "the other 6 layers"]),
    (LayerSplit(8, first=6, last=4), 4, 1, ["--decoder-first-pipeline-num-layers 6 + "
                                            "--decoder-last-pipeline-num-layers 4 must be below --num-layers 8"]),
    (LayerSplit(8, first=4, last=4), 4, 1, ["leaves 0 layers for the 2 middle pipeline ranks",
                                            "must be a positive multiple of 2"]),
    (LayerSplit(8, first=2, last=4), 2, 1, ["must equal --num-layers 8 on 2 pipeline ranks"]),
    (LayerSplit(9, first=2, last=2), 4, 2, ["--num-layers 9 minus --decoder-first-pipeline-num-layers 2 + "
                                            "--decoder-last-pipeline-num-layers 2 leaves 5 layers for the 2 middle "
                                            "pipeline ranks x 2 chunks", "positive multiple of 4"]),
    (LayerSplit(8, first=2), 1, 1, ["--decoder-first-pipeline-num-layers needs --pipeline-model-parallel-size >= 2"]),
    (LayerSplit(8, last=0), 4, 1, ["--decoder-last-pipeline-num-layers must be >= 1, got 0"]),
    (LayerSplit(7, embedding=True, loss=True), 4, 2, ["--num-layers 7 plus the embedding and the loss", "make 9 "
                                                      "layers, which do not split into 8 equal stages (4 pipeline "
                                                      "ranks x 2 chunks); use --num-layers 6"]),
    (LayerSplit(12), 4, 2, ["--num-layers 12 does not split into 8 equal stages (4 pipeline ranks x 2 chunks) for "
                            "--pipeline-schedule zbv; use a multiple of 8, e.g. 16, or an uneven split"]),
])
def test_refusals_name_the_option_and_what_is_allowed(split, pp, chunks, needles):
    message = check(split, pp, chunks, "--pipeline-schedule zbv")
    assert message is not None and "\n" not in message
    for needle in needles:
        assert needle in message, (needle, message)


def _megatron_layout(text: str, num_layers: int, pp: int, mtp=None):
    """[(offset, count)] per global stage from megatron-core's own layout, or the exception it raises;
    with `mtp` (mtp_num_layers), also [MTP layers per global stage]."""
    from megatron.core import parallel_state as ps
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.transformer_config import TransformerConfig

    try:
        config = TransformerConfig(num_layers=num_layers, hidden_size=8, num_attention_heads=2,
                                   pipeline_dtype=torch.float32, pipeline_model_parallel_size=pp,
                                   pipeline_model_parallel_layout=text, mtp_num_layers=mtp)
        layout = config.pipeline_model_parallel_layout
        vp = layout.virtual_pipeline_model_parallel_size
        ps.set_virtual_pipeline_model_parallel_world_size(vp if vp > 1 else None)  # its lookups read it
        try:
            where = [(s // pp if vp > 1 else None, s % pp) for s in range(pp * vp)]
            split = [(layout.get_layer_offset(LayerType.decoder, *at), layout.get_num_layers_to_build(
                LayerType.decoder, *at)) for at in where]
            return split if mtp is None else (split, [layout.get_num_layers_to_build(LayerType.mtp, *at)
                                                      for at in where])
        finally:
            ps.set_virtual_pipeline_model_parallel_world_size(None)
    except (ValueError, AssertionError, NotImplementedError) as exc:
        return exc


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pp=st.sampled_from([2, 3, 4]), vp=st.sampled_from([1, 2]), data=st.data())
def test_a_layout_is_split_as_megatron_core_splits_it(pp, vp, data):
    """Random layouts, most of them valid (a count per stage, E first, L last), some
    with a stray E / L / m, an empty stage or a stage too many: where we accept one,
    megatron-core accepts it with the same layers per global stage; where megatron
    refuses one, so do we (in one sentence naming the option). With MTP layers (m, and
    megatron's mtp_num_layers) where we accept them megatron builds them in the same stage. We
    refuse more: MTP layers outside the last stage (megatron's standalone MTP stage), E / L not in
    the first / last stage, empty middle stages."""
    import warnings

    warnings.filterwarnings("ignore")
    n = pp * vp + data.draw(st.sampled_from([0, 0, 0, 0, -1, 1]), label="extra stages")
    counts = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n), label="counts")
    stages = [("t*%d" % c if c > 1 else "t" * c) for c in counts]
    stages[0], stages[-1] = "E" + stages[0], stages[-1] + "L"
    mutation = data.draw(st.sampled_from(["", "", "", "E_late", "L_early", "mtp", "mtp", "mtp_unset",
                                          "mtp_early"]), label="mutation")
    mtp = data.draw(st.sampled_from([1, 2]), label="mtp layers") if mutation in ("mtp", "mtp_early") else None
    if mutation == "E_late" and n > 1:
        stages[0], stages[1] = stages[0][1:], "E" + stages[1]
    elif mutation == "L_early" and n > 1:
        stages[-1], stages[-2] = stages[-1][:-1], stages[-2] + "L"
    elif mutation in ("mtp", "mtp_unset"):  # MTP layers before the loss (with --mtp-num-layers, or without)
        stages[-1] = stages[-1][:-1] + "m" * (mtp or 1) + "L"
    elif mutation == "mtp_early" and n > 1:  # in the stage before the loss's (megatron's standalone MTP)
        stages[-2] += "m" * mtp
    text = "|".join(stages)
    layers = max(1, sum(counts))
    theirs = _megatron_layout(text, layers, pp, mtp)
    split = LayerSplit(layers, layout=text, mtp=mtp)
    try:
        ours = stage_ranges(split, pp, vp)
    except SplitError as exc:
        assert str(exc).startswith("--pipeline-model-parallel-layout") and "\n" not in str(exc)
        return
    assert not isinstance(theirs, Exception), f"{text!r} pp={pp} vp={vp}: megatron: {theirs!r}, ours {ours}"
    if mtp is not None:  # the MTP layers in the stage megatron builds them in, all of them
        theirs, mtp_counts = theirs
        assert [mtp if s == mtp_stage(split, n) else 0 for s in range(n)] == mtp_counts, f"{text!r} pp={pp} vp={vp}"
    assert [(r.start - 1, len(r)) for r in ours] == theirs, f"{text!r} pp={pp} vp={vp}"


@pytest.mark.parametrize("text, pp, chunks, needles", [
    ("Et|ttt|ttt", 2, 2, ["has 3 stages; the pipeline has 4"]),
    ("Et|ttt|tttm|tL", 2, 2, ["has 1 MTP layers (m) but --mtp-num-layers is not given"]),
    ("t|Ettt|ttt|tL", 2, 2, ["must begin the first stage with the embedding E"]),
    ("Et|ttt|tttL|t", 2, 2, ["must end the last stage with the loss L"]),
    ("Et|tttt|tt|tL", 2, 2, ["holds 8 transformer layers (t) but --num-layers is 7"]),
    ("Etttt||tt|tL", 2, 2, ["leaves stage 1 without any layer"]),
    ("Et|t+t|t|tL", 2, 2, ["cannot be read: '+' is not a layer or a repeat"]),
])
def test_layout_refusals_name_the_option_and_what_is_allowed(text, pp, chunks, needles):
    message = check(LayerSplit(7, layout=text), pp, chunks, "--pipeline-schedule zbv")
    assert message is not None and "\n" not in message
    for needle in needles:
        assert needle in message, (needle, message)
    both = check(LayerSplit(7, first=2, layout="Et|t*3|t*2|tL"), 2, 2)
    assert "--pipeline-model-parallel-layout cannot be combined with --decoder-first-pipeline-num-layers" in both


@pytest.mark.parametrize("text, mtp, needles", [
    ("Et|ttt|tttm|tL", 1, ["places MTP layers (m) in stage 2, not in the last stage with the loss",
                           "one fixed shape", "(e.g. '...|tmL')"]),
    ("Et|ttt|ttt|mtL", 1, ["places a transformer layer (t) after an MTP layer (m)"]),
    ("Et|ttt|ttt|tmL", 2, ["has 1 MTP layers (m) but --mtp-num-layers is 2"]),
    ("Et|ttt|ttt|tL", 1, ["has 0 MTP layers (m) but --mtp-num-layers is 1", "'Ett|tt|tt|tmL'"]),
])
def test_mtp_layout_refusals_name_the_option_and_what_is_allowed(text, mtp, needles):
    """MTP layers in a layout: as many as --mtp-num-layers, after every transformer layer, in the last
    stage (megatron's standalone MTP stage before the loss's is refused: its activations are longer)."""
    message = check(LayerSplit(7, layout=text, mtp=mtp), 2, 2, "--pipeline-schedule zbv")
    assert message is not None and message.startswith("--pipeline-model-parallel-layout") and "\n" not in message
    for needle in needles:
        assert needle in message, (needle, message)
    accepted = LayerSplit(7, layout="Et|ttt|tt|t" + "m" * mtp + "L", mtp=mtp)
    assert check(accepted, 2, 2, "--pipeline-schedule zbv") is None and mtp_stage(accepted, 4) == 3
    assert mtp_stage(LayerSplit(8, mtp=mtp), 4) == 3 and mtp_stage(LayerSplit(8), 4) is None


def test_a_layout_lightens_rank_0_under_v_at_pp2():
    """What no megatron option can do at pp=2 under V: rank 0 with 2 of 8 layers."""
    split = LayerSplit(8, layout="Et|t*3|(t)*3|tL")
    assert stage_layers(split, 2, 2) == [1, 3, 3, 1]
    assert rank_layers(split, 2, 2, S.V) == [2, 6] and rank_layers(split, 2, 2, S.LOOP) == [4, 4]
    assert check(LayerSplit(8, layout="E|t*4|t*3|tL"), 2, 2, "zbv", w_ops=True)  # W needs a layer in stage 0
    assert check(LayerSplit(8, layout="E|t*4|t*3|tL"), 2, 2, "interleaved-1f1b", w_ops=False) is None


def test_an_embedding_alone_is_refused_only_for_schedules_with_w_ops():
    split = LayerSplit(3, embedding=True)  # (3 + 1) / 4 stages: stage 0 holds the embedding alone
    assert stage_layers(split, 2, 2) == [0, 1, 1, 1]
    assert check(split, 2, 2, "--pipeline-schedule interleaved-1f1b", w_ops=False) is None
    message = check(split, 2, 2, "--pipeline-schedule zbv", w_ops=True)
    assert "leaves the first stage with the embedding alone" in message and "--pipeline-schedule zbv" in message
    assert check(LayerSplit(3, loss=True), 2, 2, "--pipeline-schedule zbv", w_ops=True) is None  # the output layer defers


def test_under_v_the_embedding_and_loss_accounting_spares_rank_0():
    split = LayerSplit(14, embedding=True, loss=True)  # 16 / 8 stages: stages 0 and 7 hold one layer, others two
    assert stage_layers(split, 4, 2) == [1, 2, 2, 2, 2, 2, 2, 1]
    assert rank_layers(split, 4, 2, S.V) == [2, 4, 4, 4]  # rank 0: embedding, output layer, loss and 2 layers
    assert rank_layers(split, 4, 2, S.LOOP) == [3, 4, 4, 3]
    counts = LayerSplit(12, first=2, last=2)  # megatron: the first/last pipeline rank's layers, F/2 per chunk
    assert stage_layers(counts, 4, 2) == [1, 2, 2, 1, 1, 2, 2, 1]
    assert rank_layers(counts, 4, 2, S.LOOP) == [2, 4, 4, 2]
    assert rank_layers(counts, 4, 2, S.V) == [2, 4, 4, 2]  # V: rank 3 holds stages 3 and 4


# -- every schedule on uneven splits, against the reference and megatron's 1F1B --------------------

def _with_chunks(chunks: int) -> list[str]:
    return [n for n in SCHEDULES if S.registry.resolve_chunks(S.info(n), None) == chunks]


# name -> (num_layers, TransformerConfig fields, tied embeddings, schedules; None: every schedule)
SPLITS = {
    2: {
        "first": (6, dict(num_layers_in_first_pipeline_stage=2), False, None),
        "embedding+loss": (6, dict(account_for_embedding_in_pipeline_split=True,
                                   account_for_loss_in_pipeline_split=True), False, None),
        # stage 2pp-1 (rank 0's under V) holds the output layer alone; the embedding is tied
        "loss, last stage without layers, tied": (3, dict(account_for_loss_in_pipeline_split=True), True, None),
        # the first stage holds the embedding alone: schedules without W ops only
        "embedding, first stage without layers": (3, dict(account_for_embedding_in_pipeline_split=True), False,
                                                  ["1f1b", "interleaved-1f1b"]),
        # megatron's layout, stage by stage. Under V rank 0 holds stages 0 and 3 (2 layers besides the
        # embedding, output layer and loss), rank 1 stages 1 and 2 (6): what no first/last count or
        # accounting option can give at pp=2. Compared with megatron's interleaved 1F1B on the same layout.
        "layout, 2 chunks, tied": (8, dict(pipeline_model_parallel_layout="Et|t*3|(t)*3|tL"), True, _with_chunks(2)),
        "layout, 1 chunk": (6, dict(pipeline_model_parallel_layout="Ett|ttttL"), False, _with_chunks(1)),
        # multi-token prediction placed by the layout ('m' in the last stage, megatron's rule and ours): under V
        # rank 0's chunk 1, next to the embedding it reads
        "layout with MTP, 2 chunks": (8, dict(pipeline_model_parallel_layout="Et|t*3|(t)*3|tmL", mtp_num_layers=1),
                                      False, ["interleaved-zb", "zbv", "dualpipev"]),
        "layout with MTP, 1 chunk, tied": (6, dict(pipeline_model_parallel_layout="Ett|ttttmmL", mtp_num_layers=2),
                                           True, ["zb-h1"]),
    },
    3: {
        "first+last": (8, dict(num_layers_in_first_pipeline_stage=2, num_layers_in_last_pipeline_stage=2), False,
                       None),
        "embedding+loss": (10, dict(account_for_embedding_in_pipeline_split=True,
                                    account_for_loss_in_pipeline_split=True), True, None),
    },
}
MICROBATCHES = {2: 3, 3: 4}


def _cases(pp: int) -> list[dict]:
    cases = []
    for split, (layers, config, tied, names) in SPLITS[pp].items():
        common = {"split": split, "num_layers": layers, "config": config, "tied": tied,
                  "microbatches": MICROBATCHES[pp]}
        if "pipeline_model_parallel_layout" in config:
            common["microbatches"] = 4  # megatron's interleaved schedule wants a multiple of pp
        for name in names or SCHEDULES:
            cases.append(dict(common, schedule=name, options=OPTS))
        chunks = config["pipeline_model_parallel_layout"].count("|") // pp + 1 \
            if "pipeline_model_parallel_layout" in config else 1
        if chunks == 1:
            cases.append(dict(common, schedule="megatron-1f1b"))
        else:
            # its p2p as Megatron-LM sets it at pp=2 (as in test_runtime_parity.py)
            cases.append(dict(common, schedule="megatron-interleaved", list_iterators=True,
                              config=dict(config, overlap_p2p_comm=True, batch_p2p_comm=False)))
    return cases


@pytest.fixture(scope="module", params=sorted(SPLITS), ids=lambda pp: f"pp{pp}")
def world(request):
    pp = request.param
    cases = _cases(pp)
    per_rank = H.run_ranks({"body": H.cases_body, "pp": pp, "cases": cases}, pp, timeout_s=600)
    return pp, cases, per_rank


def _merged(per_rank, i):
    results = [r[i] for r in per_rank]
    for rank, res in enumerate(results):
        assert "error" not in res, f"rank {rank}: {res['error']}"
    return results, [x for res in results for x in res["losses"]], ref.merge_grads([res["grads"] for res in results])


def _assert_same(losses, grads, ref_losses, ref_grads, what):
    assert len(losses) == len(ref_losses), what
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=RTOL, atol=ATOL,
                               msg=lambda m: f"{what} losses: {m}")
    assert set(grads) == set(ref_grads), f"{what}: gradient names differ"
    for name, g in ref_grads.items():
        torch.testing.assert_close(grads[name], g, rtol=RTOL, atol=ATOL, msg=lambda m: f"{what} grad {name}: {m}")


def test_every_schedule_on_an_uneven_split_matches_the_reference_and_megatrons_1f1b(world):
    pp, cases, per_rank = world
    megatron = {c["split"]: i for i, c in enumerate(cases) if c["schedule"] in H.MEGATRON_OWN}
    for i, case in enumerate(cases):
        results, losses, grads = _merged(per_rank, i)
        what = f"{case['schedule']} pp={pp} split {case['split']!r}"
        _assert_same(losses, grads, results[0]["ref_losses"], results[0]["ref_grads"], what + " vs reference")
        if case["schedule"] not in H.MEGATRON_OWN:
            _, m_losses, m_grads = _merged(per_rank, megatron[case["split"]])
            _assert_same(losses, grads, m_losses, m_grads, what + f" vs {cases[megatron[case['split']]]['schedule']}")


def test_the_oracles_run_megatrons_own_linear_layers(world):
    pp, cases, per_rank = world
    megatron_runs = sum(c["schedule"] in H.MEGATRON_OWN for c in cases)
    assert H.assert_oracles_ran_megatrons_own_linear(cases, per_rank) == len(cases) + pp * megatron_runs


def test_every_chunk_holds_the_layers_of_its_global_stage(world):
    pp, cases, per_rank = world
    for i, case in enumerate(cases):
        layers, config, _, _ = SPLITS[pp][case["split"]]
        split = LayerSplit.from_config(type("C", (), dict(num_layers=layers, **config)))
        if case["schedule"] in H.MEGATRON_OWN:
            entry_placement, chunks = S.LOOP, 1 if case["schedule"] == "megatron-1f1b" else 2
        else:
            entry = S.info(case["schedule"])
            entry_placement, chunks = entry.placement, entry.chunks
        expected = stage_ranges(split, pp, chunks)
        for rank, res in enumerate(r[i] for r in per_rank):
            for chunk, held in enumerate(res["layers"]):
                stage = S.stage_of(entry_placement, pp, rank, chunk)
                if res["stages"][chunk] is not None:
                    assert res["stages"][chunk] == stage
                assert held == list(expected[stage]), f"{case['schedule']} {case['split']} rank {rank} chunk {chunk}"


# -- examples/pretrain_gpt.py end to end: every split trains the same model ------------------------

def _train_args(dataset, *extra):
    return ["--cpu", "--data-path", dataset, "--num-layers", "6", "--hidden-size", "32", "--num-attention-heads",
            "4", "--seq-length", "32", "--micro-batch-size", "2", "--global-batch-size", "8", "--lr", "2e-3",
            "--seed", "11", "--pipeline-model-parallel-size", "2", "--pipeline-p2p-timeout", "60",
            "--train-iters", "4", *extra]


ACCOUNTED = ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
# (label, options): layers per rank with pp=2 and 6 layers in brackets
TRAINING = [
    ("megatron even", []),                                                            # [3, 3]
    ("megatron first=2", ["--decoder-first-pipeline-num-layers", "2"]),               # [2, 4]
    ("zb-h1 last=2", ["--pipeline-schedule", "zb-h1", "--decoder-last-pipeline-num-layers", "2"]),  # [4, 2]
    ("v-half first=2", ["--pipeline-schedule", "v-half", "--decoder-first-pipeline-num-layers", "2"]),  # [3, 3]
    ("zbv accounted", ["--pipeline-schedule", "zbv", *ACCOUNTED]),                   # stages [1,2,2,1]: [2, 4]
    ("zbv layout", ["--pipeline-schedule", "zbv", "--pipeline-model-parallel-layout", "Et|t*3|t|tL"]),  # [2, 4]
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus_dataset):
    """pp=2, dropout 0.1, 4 iterations of every split above; the zbv run saves at
    iteration 2 and megatron's own 1F1B on the first=2 split resumes from it."""
    prefix = corpus_dataset  # built once per session (conftest.py)
    save = str(tmp_path_factory.mktemp("ckpt") / "zbv")
    runs = []
    for label, extra in TRAINING:
        runs.append(_train_args(prefix, *extra, *(["--save", save, "--save-interval", "2"] if label == "zbv accounted"
                                                  else [])))
    runs.append(_train_args(prefix, "--decoder-first-pipeline-num-layers", "2", "--load", save, "--ckpt-step", "2"))
    return H.run_ranks({"body": H.train_body, "pp": 2, "runs": runs}, 2, timeout_s=600)


@pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")
def test_pretrain_gpt_trains_the_same_model_on_every_split_and_resumes_across_splits(trained):
    first = trained[0]  # rank 0 sees the reduced losses
    even = first[0]
    assert len(even["losses"]) == 4 and even["losses"][-1] < even["losses"][0]
    for (label, _), run in zip(TRAINING, first):
        assert run["schedule"] == (None if label.startswith("megatron") else label.split()[0])
        torch.testing.assert_close(torch.tensor(run["losses"]), torch.tensor(even["losses"]), rtol=1e-5, atol=0,
                                   msg=lambda m: f"{label}: {m}")
    resumed = first[len(TRAINING)]
    assert resumed["start_iteration"] == 2
    torch.testing.assert_close(torch.tensor(resumed["losses"]), torch.tensor(even["losses"][2:]), rtol=1e-5, atol=0)


def test_auto_considers_the_schedules_the_split_fits(monkeypatch, capsys):
    """--pipeline-schedule auto (both entry points) chooses among the schedules the
    uneven split can be built for: here, a first rank of 1 layer rules out 2 chunks."""
    import argparse

    from primus_megatron.megatron_lm import plugin
    from primus_megatron.megatron_lm.args import spec_of
    from primus_megatron.options import split_fits

    args = argparse.Namespace(pipeline_schedule="auto", num_layers=8, pipeline_model_parallel_size=2,
                              tensor_model_parallel_size=1, world_size=2, micro_batch_size=1, global_batch_size=8,
                              pipeline_costs=None, pipeline_memory_limit=None, pipeline_chunks=None,
                              decoder_first_pipeline_num_layers=1)
    assert {n for n in S.names() if split_fits(args, n)} == {n for n in S.names() if S.info(n).chunks == 1}
    args.decoder_first_pipeline_num_layers = None
    args.account_for_embedding_in_pipeline_split = args.account_for_loss_in_pipeline_split = True
    args.num_layers = 6  # even: 6 layers do not split into 4 stages; accounted: stages of 1, 2, 2, 1 layers
    assert {n for n in S.names() if split_fits(args, n)} == set(S.names())
    args.account_for_embedding_in_pipeline_split = args.account_for_loss_in_pipeline_split = False
    args.decoder_first_pipeline_num_layers = 1
    args.num_layers = 8
    monkeypatch.setenv("RANK", "0")
    chosen = plugin._choose_before_build(args, spec_of(args))  # Megatron-LM's loop: chosen before the model is built
    assert chosen.chunks == 1 and not chosen.choose and args.pipeline_schedule == "auto"
    assert f"auto: chose {chosen.name}" in capsys.readouterr().out
