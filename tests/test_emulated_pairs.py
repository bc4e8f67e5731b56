"""Overlapped F&B pairs on emulated devices (issue 39 item 6) and megatron's combined 1F1B as our schedule.

On emulated chunks a pair runs as two ops whose waits sum to the pair's time (`StageCosts.pair_duration`:
the F half its compute, the B half the rest), an op outside a pair waits its whole time (all-to-all
included), each with its microbatch's factor. megatron's combined 1F1B (`--overlap-moe-expert-parallel-comm`)
is its interleaved order with one warm-up forward more and every steady-state F&B step combined; its order
here is checked against megatron-core's own table and warm-up count. No timing is asserted: what a rank
waits is what it asked for (the emulated op times), compared with the simulator's busy time.
"""
from __future__ import annotations

import types

import pytest

from primus_megatron import emulation as E
from primus_megatron import schedules as S
from primus_megatron.schedules import BW, F, Op, Pair
from primus_megatron.schedules.builtin.interleaved import combined_1f1b

COSTS = S.Costs(f=1.5, b=2.5, w=1.0, a2a=0.6, mb_scale=(1.0, 1.2, 0.8, 1.1, 0.9, 1.0, 1.3, 0.7))


@pytest.mark.parametrize("sched", [S.generate("dualpipev", 4, 8, costs=COSTS), S.generate("zbv", 4, 8, costs=COSTS),
                                   combined_1f1b(4, 8)], ids=lambda s: s.name)
def test_a_pairs_two_waits_sum_to_the_pairs_time_and_a_lone_op_waits_its_whole_time(sched):
    from primus_megatron.emulation.chunks import pair_waits, stage_times

    assert sched.has_pairs
    sc = COSTS.resolve(4, sched.chunks_per_rank, sched.placement, 8)
    times = stage_times(COSTS, 4, sched.chunks_per_rank, sched.placement, scale=1.0, microbatches=8)
    for r in range(sched.pp):
        for item in sched.items(r):
            if isinstance(item, Pair):
                fs, bs = sched.stage(r, item.f), sched.stage(r, item.b)
                f_wait, b_wait = pair_waits(times[fs], item.f.mb, times[bs], item.b.mb, item.b.kind)
                assert f_wait + b_wait == pytest.approx(sc.pair_duration(fs, item.b.kind, bs, item.f.mb, item.b.mb))
                assert f_wait == pytest.approx(sc.duration(F, fs, item.f.mb) - sc.a2a[fs] * COSTS.mb_scale[item.f.mb])
            else:
                stage = sched.stage(r, item)
                assert times[stage].of(item.kind.lower(), item.mb) == pytest.approx(sc.duration(item.kind, stage,
                                                                                                item.mb))


def _megatron_order(pp: int, m: int, chunks: int, rank: int) -> list:
    """Rank `rank`'s combined 1F1B items from megatron-core's own helpers: its schedule table and its warm-up
    count with overlap_moe_expert_parallel_comm (schedules.py get_schedule_table, get_pp_rank_microbatches);
    forward k + warm-up and backward k of each steady-state step combined (schedules.py:1717-1734)."""
    from megatron.core.pipeline_parallel.schedules import get_pp_rank_microbatches, get_schedule_table

    group = types.SimpleNamespace(size=lambda: pp, rank=lambda: rank)
    comm = types.SimpleNamespace(pp_group=group, virtual_pipeline_model_parallel_size=chunks)
    total, _, warmup, remaining = get_pp_rank_microbatches(m, chunks, pp, overlap_moe_expert_parallel_comm=True,
                                                           p2p_communicator=comm)
    table = get_schedule_table(m, chunks, pp)

    def fwd(k):
        return Op(F, table[k][0], table[k][1])

    def bwd(k):
        return Op(BW, table[k][0], chunks - 1 - table[k][1])  # get_model_chunk_id(k, forward=False)

    return ([fwd(k) for k in range(warmup)] + [Pair(fwd(k + warmup), bwd(k)) for k in range(remaining)]
            + [bwd(k) for k in range(remaining, total)])


@pytest.mark.parametrize("pp, m, chunks", [(2, 4, 2), (4, 8, 2), (3, 6, 3), (4, 4, 2)])
def test_megatron_combined_1f1b_as_our_schedule_is_valid_and_pairs_what_megatron_combines(pp, m, chunks):
    sched = combined_1f1b(pp, m, chunks=chunks)
    S.validate(sched, costs=COSTS if m == 8 else None)
    for r in range(pp):
        assert sched.items(r) == _megatron_order(pp, m, chunks, r)
    plain = S.generate("interleaved-1f1b", pp, m, chunks=chunks)  # its order but the one warm-up forward
    assert sorted(map(str, sched.ranks[0])) == sorted(map(str, plain.ranks[0]))


@pytest.fixture(scope="module")
def pair_runs():
    """dualpipev, zbv with pairs, megatron's combined 1F1B as our schedule and our interleaved 1F1B (its
    order without pairs) on two forked ranks (one launch), 1 ms per cost unit."""
    from primus_megatron.emulation.baselines import baseline_variant

    pp, m, costs = 2, 4, S.Costs(f=1.5, b=2.5, w=1.0, a2a=0.6, mb_scale=(1.0, 1.2, 0.8, 1.1))
    ours = [E.make_variant(n, S.generate(n, pp, m, costs=costs), costs, scale=1e-3)
            for n in ("dualpipev", "zbv", "interleaved-1f1b")]
    variants = ours + [baseline_variant(E.MEGATRON_COMBINED, ours[0].schedule, pp, m, costs, chunks=2, scale=1e-3)]
    results, _ = E.run(variants, pp, m, elements=64, steps=1, warmup=1, p2p_timeout_s=60)
    return variants, results


def test_each_rank_waits_what_the_simulator_counts_pairs_and_lone_ops_alike(pair_runs):
    variants, results = pair_runs
    assert [v.schedule.has_pairs for v in variants] == [True, True, False, True]
    for v, r in zip(variants, results):
        assert r["busy"] == pytest.approx(v.simulated["busy"], rel=1e-9), v.label


def test_pairs_run_apart_give_the_same_gradients(pair_runs):
    import torch

    variants, results = pair_runs
    grads = {v.label: [c["grad"] for rank in r["records"] for c in rank["steps"][-1]["chunks"]]
             for v, r in zip(variants, results)}
    for label, ref in (("zbv", "dualpipev"), (E.MEGATRON_COMBINED, "interleaved-1f1b")):  # same placement
        for g, want in zip(grads[label], grads[ref]):
            torch.testing.assert_close(g, want, rtol=1e-6, atol=1e-7)


def test_a_pairs_f_half_waiting_for_its_b_halfs_gradient_is_a_hop_not_host_work():
    """Rank 0 runs the pair (F2, B0) as two ops: its F half waits for the gradient rank 1's B0 sends, so
    the gap before it is that message's hop, not the executor's work between ops."""
    rank0 = [("F", 0, 0, 0, 0, 10), ("F", 1, 0, 0, 11, 21), ("F", 2, 0, 0, 42, 47), ("B", 0, 0, 0, 48, 58)]
    rank1 = [("F", 0, 0, 1, 12, 22), ("B", 0, 0, 1, 24, 40)]
    partners = [{("F", 2, 0): ("B", 0, 0)}, {}]
    assert E.host_gaps([rank0, rank1], partners) == pytest.approx((2.0, 4 / 3))
    assert E.host_gaps([rank0, rank1]) == pytest.approx((2.0, 25 / 4))  # read as host work without the pair
