"""Every schedule computes what a non-pipelined model computes.

Multi-process gloo on CPU, megatron-core GPTModel (local spec, fp32, dropout
0). For each registered schedule, pipeline sizes 2, 3 and 4, and microbatch
counts below, equal to and above the pipeline size (including counts not
divisible by it): losses and every parameter gradient must equal a
single-process reference with the same weights and microbatches, and
megatron-core's own 1F1B on the same setup. megatron-core's own interleaved
schedule must equal the reference too (compat.cpu runs it on gloo): at pp=2
with Megatron-LM's p2p settings for it (overlapped, unbatched), at pp=4
batched. Tolerance: rtol 1e-5, atol 1e-7
(the runs are in fact bitwise equal today; the tolerance leaves room for
reduction-order changes of future kernels).

One process group per pipeline size runs all its cases (start-up dominates).

Coverage (2026-11-29, the suite's CPU budget): multi-token prediction, a model feature, runs one schedule
of each kind the runtime executes differently (1f1b's one backward op, zb-h1's deferred W, interleaved-zb's
two loop chunks, zbv's V placement, dualpipev's overlapped pairs), not every schedule: the orders
themselves are each checked against the reference and megatron's 1F1B without MTP here.
"""
from __future__ import annotations

import pytest
import torch

import megatron_reference as ref
import pipeline_harness as H
from primus_megatron import schedules as S
from schedule_subset import under_test

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")

RTOL, ATOL = 1e-5, 1e-7
SCHEDULES = under_test(n for n in S.names() if n != "zb-optimal")
OPTS = {"p2p_timeout_s": 60}


def _layers(pp: int) -> int:
    return 2 * pp  # 2 chunks per rank, one layer each (for 1-chunk schedules: 2 layers per rank)


def _cases(pp: int, counts: list[int]) -> list[dict]:
    cases = []
    for name in SCHEDULES:
        for m in counts:
            cases.append({"schedule": name, "microbatches": m, "options": OPTS})
    if pp <= 4:  # the ILP stays small enough here
        cases.append({"schedule": "zb-optimal", "microbatches": 2, "options": OPTS})
    if pp == 4:  # the V schedules planned from unequal costs: their W sit elsewhere (test below)
        for name in under_test(V_COST_AWARE):
            cases.append({"schedule": name, "microbatches": 6, "options": {**OPTS, "costs": UNEQUAL}})
        for name in under_test(["zbv", "dualpipev"]):  # planned with an all-to-all to hide: overlapped pairs
            cases.append({"schedule": name, "microbatches": 8, "options": {**OPTS, "costs": ALL_TO_ALL}})
        if under_test(["zb-auto"]):  # the paper's automatic schedule: its memory model, 2p, post-validation
            cases.append({"schedule": "zb-auto", "microbatches": 6, "options": {**OPTS, **PAPER_AUTO}})
    for name in under_test(JUST_IN_TIME.get(pp, ())):  # receives posted just in time (issue 60)
        cases.append({"schedule": name, "microbatches": counts[-1], "options": {**OPTS, "recv_policy": "just-in-time"}})
    for name in under_test(PER_DIRECTION.get(pp, ())):  # a process group per direction (issue 60)
        cases.append({"schedule": name, "microbatches": counts[-1], "options": {**OPTS, "p2p_groups": "per-direction"}})
    for m in counts[-2:]:
        cases.append({"schedule": "megatron-1f1b", "microbatches": m})
    if pp == 2:  # multi-token prediction (megatron's MTP block on the loss stage), against megatron's 1F1B
        for config, tied, names in MTP_CASES:
            cases += [{"schedule": name, "microbatches": MTP_M, "options": OPTS, "config": config, "tied": tied}
                      for name in under_test(names)]
            cases.append({"schedule": "megatron-1f1b", "microbatches": MTP_M, "config": config, "tied": tied})
    if pp in MEGATRON_INTERLEAVED:
        cases.append({"schedule": "megatron-interleaved", "microbatches": 4, "list_iterators": True,
                      "config": MEGATRON_INTERLEAVED[pp]})
    return cases


COUNTS = {2: [1, 2, 3, 5], 3: [2, 4], 4: [2, 4, 6]}
# --pipeline-recv-policy just-in-time, at each pp's largest count (against the reference and megatron's 1F1B
# like every case): the loop, interleaved, V and DualPipeV (pairs) placements
JUST_IN_TIME = {2: ("zb-h1", "interleaved-1f1b", "zbv", "dualpipev"), 4: ("zb-h1", "interleaved-1f1b", "zbv")}
# --pipeline-p2p-groups per-direction at pp=2's largest count: the loop placement, and the V placements, whose two
# ranks exchange both ways (against the reference, megatron's 1F1B, and bitwise the same schedule on one group)
PER_DIRECTION = {2: ("zb-h1", "zbv", "dualpipev")}
# MTP at pp=2 (m = 2 pp, dualpipev's least): one MTP layer under each kind of schedule, untied; tied, and two
# layers with a loss scaling factor other than megatron's default (0.1), under one schedule of each placement
# (and dualpipev, whose pairs hold the loss stage's F and B)
MTP_M = 4
MTP_CASES = [({"mtp_num_layers": 1}, False, ["1f1b", "zb-h1", "interleaved-zb", "zbv", "dualpipev"]),
             ({"mtp_num_layers": 1}, True, ["zb-h1", "interleaved-zb", "zbv", "dualpipev"]),
             ({"mtp_num_layers": 2, "mtp_loss_scaling_factor": 0.3}, False, ["zb-h1", "zbv"])]
V_COST_AWARE = ("zbv", "v-half", "v-min")
UNEQUAL = S.Costs(f=1.0, b=2.0, w=1.0, comm=0.05)
ALL_TO_ALL = S.Costs(f=1.0, b=1.0, w=1.0, a2a=0.5)  # half of each F and B an expert all-to-all
# zb-auto at twice 1F1B's memory under the paper's memory model (B frees all but the weight
# gradient's 40%), planned for post-validation: the paper heuristic's order (test below)
PAPER_AUTO = {"costs": S.Costs(f=1.0, b=1.2, w=0.7, comm=0.05, mem_b=-0.6, mem_w=-0.4), "memory_limit": 8.0,
              "post_validation": True}
# pp -> megatron's interleaved schedule's p2p transport (its data comes as one iterator per chunk)
MEGATRON_INTERLEAVED = {2: {"overlap_p2p_comm": True, "batch_p2p_comm": False},
                        4: {"overlap_p2p_comm": False, "batch_p2p_comm": True}}


@pytest.fixture(scope="module", params=sorted(COUNTS), ids=lambda pp: f"pp{pp}")
def world(request):
    pp = request.param
    cases = _cases(pp, COUNTS[pp])
    per_rank = H.run_ranks({"body": H.cases_body, "pp": pp, "num_layers": _layers(pp), "cases": cases}, pp,
                           timeout_s=900)
    return pp, cases, per_rank


def _merged(per_rank, i):
    results = [r[i] for r in per_rank]
    for rank, res in enumerate(results):
        assert "error" not in res, f"rank {rank}: {res['error']}"
    losses = [x for res in results for x in res["losses"]]
    grads = ref.merge_grads([res["grads"] for res in results])
    return results, losses, grads


def _assert_same(actual_losses, actual_grads, ref_losses, ref_grads, what):
    assert len(actual_losses) == len(ref_losses), f"{what}: {len(actual_losses)} losses, expected {len(ref_losses)}"
    torch.testing.assert_close(torch.tensor(actual_losses), torch.tensor(ref_losses), rtol=RTOL, atol=ATOL,
                               msg=lambda m: f"{what} losses: {m}")
    assert set(actual_grads) == set(ref_grads), f"{what}: gradient names differ: " \
        f"missing {sorted(set(ref_grads) - set(actual_grads))[:3]}, extra {sorted(set(actual_grads) - set(ref_grads))[:3]}"
    for name, g in ref_grads.items():
        torch.testing.assert_close(actual_grads[name], g, rtol=RTOL, atol=ATOL, msg=lambda m: f"{what} grad {name}: {m}")


def test_every_schedule_matches_the_non_pipelined_reference(world):
    pp, cases, per_rank = world
    checked = 0
    for i, case in enumerate(cases):
        results, losses, grads = _merged(per_rank, i)
        what = f"{case['schedule']} pp={pp} m={case['microbatches']}"
        _assert_same(losses, grads, results[0]["ref_losses"], results[0]["ref_grads"], what)
        checked += 1
    assert checked == len(cases)


def _model_key(case: dict) -> tuple:
    """What the model and the data of a case are (microbatches, model options, tied): cases of the same
    key compare with each other."""
    return case["microbatches"], repr(sorted(case.get("config", {}).items())), case.get("tied", False)


def test_every_schedule_matches_megatrons_own_1f1b(world):
    pp, cases, per_rank = world
    megatron = {_model_key(c): i for i, c in enumerate(cases) if c["schedule"] == "megatron-1f1b"}
    assert megatron
    for i, case in enumerate(cases):
        if case["schedule"] in H.MEGATRON_OWN or _model_key(case) not in megatron:
            continue
        _, losses, grads = _merged(per_rank, i)
        _, m_losses, m_grads = _merged(per_rank, megatron[_model_key(case)])
        _assert_same(losses, grads, m_losses, m_grads, f"{case['schedule']} vs megatron 1F1B pp={pp}")


def test_the_oracles_run_megatrons_own_linear_layers(world):
    """The reference and megatron's own schedules run in the same processes as our schedules,
    which install their linear hook process-wide: the harness takes it out for them."""
    pp, cases, per_rank = world
    megatron_runs = sum(c["schedule"] in H.MEGATRON_OWN for c in cases)
    assert H.assert_oracles_ran_megatrons_own_linear(cases, per_rank) == len(cases) + pp * megatron_runs


def test_layers_keep_their_global_numbers_under_every_placement(world):
    pp, cases, per_rank = world
    for i, case in enumerate(cases):
        if case["schedule"] in H.MEGATRON_OWN:
            continue
        entry = S.info(case["schedule"])
        per_stage = _layers(pp) // (pp * entry.chunks)
        for rank, res in enumerate(r[i] for r in per_rank):
            for chunk, (layers, stage) in enumerate(zip(res["layers"], res["stages"])):
                assert stage == S.stage_of(entry.placement, pp, rank, chunk)
                assert layers == list(range(stage * per_stage + 1, (stage + 1) * per_stage + 1)), \
                    f"{case['schedule']} rank {rank} chunk {chunk}"


def test_weight_gradients_really_deferred_and_store_empties(world):
    pp, cases, per_rank = world
    for i, case in enumerate(cases):
        if case["schedule"] in H.MEGATRON_OWN:
            continue
        splits = any(op.kind == S.W for ops in S.generate(case["schedule"], pp, case["microbatches"]).ranks
                     for op in ops)
        # the output layer runs once more per MTP layer (each MTP depth's logits) on the loss stage's rank
        reuse = case.get("config", {}).get("mtp_num_layers") or 0
        loss_rank = S.owner_of(S.info(case["schedule"]).placement, pp, pp * S.info(case["schedule"]).chunks - 1)[0]
        for rank, res in enumerate(r[i] for r in per_rank):
            calls = res["linear_layers"] + (reuse if rank == loss_rank else 0)
            expected = calls * case["microbatches"] if splits else 0
            assert res["wgrads_deferred"] == expected, f"{case['schedule']} rank {rank}"
            assert res["wgrads_run"] == expected, f"{case['schedule']} rank {rank}"


def test_executed_order_is_the_planned_order(world):
    pp, cases, per_rank = world
    for i, case in enumerate(cases):
        if case["schedule"] in H.MEGATRON_OWN + ("zb-optimal",):
            continue
        options = case.get("options", {})
        planned = S.generate(case["schedule"], pp, case["microbatches"], costs=options.get("costs"),
                             memory_limit=options.get("memory_limit"),
                             post_validation=options.get("post_validation", False))
        for rank, res in enumerate(r[i] for r in per_rank):
            assert res["timeline"] == [(op.kind, op.mb, op.chunk) for op in planned.ranks[rank]]


def test_just_in_time_receives_ran_a_lowering_of_their_own(world):
    """The just-in-time cases (checked against the reference and megatron's 1F1B with every case above)
    posted their receives otherwise than the early policy would: the runtime ran the lowering the
    policy asks for, so their equality says something."""
    pp, cases, per_rank = world
    ran = [c for c in cases if c.get("options", {}).get("recv_policy") == "just-in-time"]
    assert [c["schedule"] for c in ran] == list(under_test(JUST_IN_TIME.get(pp, ())))
    for case in ran:
        sched = S.generate(case["schedule"], pp, case["microbatches"])
        early, late = S.lower(sched), S.lower(sched, recv_policy="just-in-time")
        assert early.ranks != late.ranks, case["schedule"]


def test_a_group_per_direction_changes_no_number_and_carries_traffic(world):
    """The per-direction cases (checked against the reference and megatron's 1F1B with every case above)
    computed bitwise what the same schedule computed on one group, and on every rank the twin group
    carried some of the step's p2p (what is sent towards the lower rank)."""
    pp, cases, per_rank = world
    ran = [i for i, c in enumerate(cases) if c.get("options", {}).get("p2p_groups") == "per-direction"]
    assert [cases[i]["schedule"] for i in ran] == list(under_test(PER_DIRECTION.get(pp, ())))
    for i in ran:
        name, m = cases[i]["schedule"], cases[i]["microbatches"]
        one = next(j for j, c in enumerate(cases) if (c["schedule"], c["microbatches"], c.get("options")) == (name, m, OPTS))
        results, losses, grads = _merged(per_rank, i)
        _, one_losses, one_grads = _merged(per_rank, one)
        assert losses == one_losses, name  # floats: equal means bitwise (none is NaN: the reference checks them)
        assert grads.keys() == one_grads.keys() and all(torch.equal(grads[k], one_grads[k]) for k in grads), name
        assert all(r["twin_posts"] > 0 for r in results), (name, [r["twin_posts"] for r in results])


def test_cost_aware_v_orders_ran_and_differ_from_the_equal_cost_patterns(world):
    pp, cases, per_rank = world
    ran = [(i, c) for i, c in enumerate(cases) if c.get("options", {}).get("costs") is UNEQUAL
           and c["schedule"] in V_COST_AWARE]
    assert len(ran) == (len(under_test(V_COST_AWARE)) if pp == 4 else 0)
    for i, case in ran:  # losses and gradients: checked with every case above
        pattern = S.generate(case["schedule"], pp, case["microbatches"])
        executed = [r[i]["timeline"] for r in per_rank]
        assert executed != [[(op.kind, op.mb, op.chunk) for op in row] for row in pattern.ranks], case["schedule"]


def test_the_papers_automatic_schedule_ran(world):
    """The zb-auto case planned under the paper's memory model at 2p for post-validation ran (its
    losses and gradients are checked with every case above; its executed order against the plan):
    it is the paper heuristic's order, none of zb-auto's default, zb-h1's or zb-h2's, and the
    validator and the post-validation prefix accept it."""
    from primus_megatron.schedules.auto_heuristic import KNOBS, paper_order
    from primus_megatron.schedules.prefix import prefixes

    pp, cases, per_rank = world
    ran = [(i, c) for i, c in enumerate(cases) if c["schedule"] == "zb-auto" and "post_validation" in c["options"]]
    assert len(ran) == (1 if pp == 4 and under_test(["zb-auto"]) else 0)
    for i, case in ran:
        costs, m = PAPER_AUTO["costs"], case["microbatches"]
        planned = S.generate("zb-auto", pp, m, costs=costs, memory_limit=8.0, post_validation=True)
        executed = [r[i]["timeline"] for r in per_rank]
        assert executed == [[(op.kind, op.mb, op.chunk) for op in row] for row in planned.ranks]
        sc = costs.resolve(pp, 1, S.LOOP)
        assert any(paper_order(pp, m, sc, 8.0, k).ranks == [list(r) for r in planned.ranks] for k in KNOBS)
        for other in (S.generate("zb-auto", pp, m), S.generate("zb-h1", pp, m), S.generate("zb-h2", pp, m)):
            assert planned.ranks != other.ranks, other.name
        assert len(prefixes(S.validate(planned, costs=costs, memory_limit=8.0)).ends) == pp


def test_orders_with_overlapped_pairs_ran(world):
    """zbv and dualpipev planned with an all-to-all to hide have overlapped pairs (run as F then B on CPU:
    each pair's halves adjacent, nothing posted between them); their losses and gradients are checked with
    every case above, their executed order against the plan."""
    pp, cases, per_rank = world
    ran = [(i, c) for i, c in enumerate(cases) if c.get("options", {}).get("costs") is ALL_TO_ALL]
    assert len(ran) == (len(under_test(["zbv", "dualpipev"])) if pp == 4 else 0)
    for i, case in ran:
        planned = S.generate(case["schedule"], pp, case["microbatches"], costs=ALL_TO_ALL)
        assert planned.has_pairs, case["schedule"]
        for rank, res in enumerate(r[i] for r in per_rank):
            assert res["timeline"] == [(op.kind, op.mb, op.chunk) for op in planned.ranks[rank]]


def _mtp_cases(cases: list) -> list:
    return [(i, c) for i, c in enumerate(cases) if c.get("config", {}).get("mtp_num_layers")]


def _mtp_losses(per_rank, i) -> list:
    """The MTP losses megatron's block tracked in a case, from the one rank that holds the block."""
    found = [r[i]["mtp_losses"] for r in per_rank if r[i]["mtp_losses"]]
    assert len(found) == 1, f"MTP losses tracked on {len(found)} ranks, expected the loss stage's only"
    return found[0]


def test_mtp_trains_as_under_megatrons_1f1b(world):
    """Multi-token prediction (megatron's MultiTokenPredictionBlock after the last transformer layer, each
    depth's loss through the shared output layer, scaled by mtp_loss_scaling_factor / mtp_num_layers and
    backpropagated through MTPLossAutoScaler with megatron's 1 / microbatches): the main losses and the
    MTP losses (as megatron's MTPLossLoggingHelper tracks them) of each kind of schedule, loop- and V-placed,
    bitwise megatron's own 1F1B on the same weights and microbatches and within the parity tolerance of
    the non-pipelined reference; every gradient bitwise megatron's 1F1B except, under V, the embedding and
    output weights, whose uses (chunk 0's embedding, the MTP chunk's embedding and output layer) add into
    one gradient in op order where megatron sums two copies' gradients, and a tied embedding under a split
    backward, whose output-layer share arrives in W after the embedding's own in B (megatron adds them
    within one backward): those to the parity tolerance (test_every_schedule_matches_megatrons_own_1f1b)."""
    pp, cases, per_rank = world
    ran = _mtp_cases(cases)
    assert len(ran) == (sum(len(under_test(names)) + 1 for _, _, names in MTP_CASES) if pp == 2 else 0)
    megatron = {_model_key(c): i for i, c in ran if c["schedule"] == "megatron-1f1b"}
    for i, case in ran:
        if case["schedule"] in H.MEGATRON_OWN:
            continue
        what = f"{case['schedule']} {case['config']} tied={case['tied']}"
        _, losses, grads = _merged(per_rank, i)
        _, m_losses, m_grads = _merged(per_rank, megatron[_model_key(case)])
        mtp, m_mtp, r_mtp = _mtp_losses(per_rank, i), _mtp_losses(per_rank, megatron[_model_key(case)]), \
            per_rank[0][i]["ref_mtp_losses"]
        assert len(mtp) == case["config"]["mtp_num_layers"], what
        assert losses == m_losses and mtp == m_mtp, f"{what}: losses {losses} / MTP {mtp}, megatron {m_losses} / {m_mtp}"
        torch.testing.assert_close(torch.tensor(mtp), torch.tensor(r_mtp), rtol=RTOL, atol=ATOL,
                                   msg=lambda m: f"{what} MTP losses against the reference: {m}")
        assert any(name.startswith("mtp.layers.") for name in grads), what
        shared = H.EMBEDDING_NAMES if S.info(case["schedule"]).placement == S.V else \
            H.EMBEDDING_NAMES[:1] if case["tied"] else ()
        for name, g in m_grads.items():
            if name not in shared:
                assert torch.equal(grads[name], g), f"{what}: gradient {name} is not megatron's 1F1B's bit for bit"


def test_mtp_block_sits_on_the_loss_stage_and_reads_one_embedding_under_v(world):
    """Where MTP lives: on the loss stage's chunk (megatron's get_mtp_num_layers_to_build answered by
    global stage). Under V that is rank 0's chunk 1, whose MTP layers read chunk 0's embedding: rank 0
    holds the word and position embeddings (and the untied output layer) once each, no other rank holds
    any, so each has one gradient. Under loop placement the last rank keeps megatron's own copy of the
    embedding next to the MTP block (megatron's 1F1B: the same)."""
    pp, cases, per_rank = world
    for i, case in _mtp_cases(cases):
        name = case["schedule"]
        placement = S.V if name not in H.MEGATRON_OWN and S.info(name).placement == S.V else S.LOOP
        chunks = 1 if name in H.MEGATRON_OWN else S.info(name).chunks
        holder, chunk = S.owner_of(placement, pp, pp * chunks - 1)
        what = f"{name} tied={case['tied']}"
        for rank, res in enumerate(r[i] for r in per_rank):
            held = [(c, n, idx) for kind, c, n, idx in res["embeddings"] if kind == "holds"]
            reads = [(c, idx) for kind, c, n, idx in res["embeddings"] if kind == "reads"]
            assert [c for c, _ in reads] == ([chunk] if rank == holder else []), f"{what} rank {rank}: {reads}"
            names = sorted(n for _, n, _ in held)
            word, position, output = H.EMBEDDING_NAMES
            if placement == S.V:
                expected = [word, position] + ([] if case["tied"] else [output]) if rank == 0 else []
            else:
                # megatron's MTP stage keeps a copy of the embedding; with tied weights its output layer's
                # own weight (named as the embedding it is tied to) is never used: the layer reads the copy
                expected = {0: [word, position], holder: [word, position, word if case["tied"] else output]}.get(
                    rank, [])
            expected = sorted(expected)
            assert names == expected, f"{what} rank {rank}: holds {names}, expected {expected}"
            if rank == holder:  # the first word embedding the rank holds: chunk 0's under V, the copy under loop
                first = next(idx for c, n, idx in held if n == word)
                assert reads[0][1] == first, f"{what}: the MTP block reads Parameter {reads[0][1]}, not {first}"
