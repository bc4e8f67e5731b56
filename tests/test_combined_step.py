"""--overlap-moe-expert-parallel-comm: accepted for schedules with overlapped F&B pairs (each pair
through megatron's combined step, runtime/combined.py; numbers: tests/test_production_matrix.py's
f-moe-ep2-bf16-a2a-overlap row), refused in one sentence for the others."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from primus_megatron import schedules as S
from primus_megatron.unsupported import refusal_for


def _refusal(schedule, pairs=None, **fields):
    info = S.info(schedule)
    return refusal_for(SimpleNamespace(overlap_moe_expert_parallel_comm=True, **fields), schedule=schedule,
                       splits_backward=info.splits_backward, v_placement=info.placement == S.V, uses_te=False,
                       pairs=pairs)


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "v-half"])
def test_refused_for_schedules_without_pairs_naming_those_with(schedule):
    why = _refusal(schedule)
    assert why is not None and why.count(". ") == 0, why
    assert why.startswith(f"--overlap-moe-expert-parallel-comm cannot be used with --pipeline-schedule {schedule}")
    assert "dualpipev" in why and "zbv" in why, why


def test_accepted_where_the_schedule_has_pairs():
    assert _refusal("dualpipev") is None
    assert _refusal("zbv") is None  # before planning: pairs when its costs have an all-to-all
    assert _refusal("zbv", pairs=True) is None
    assert "has none" in _refusal("zbv", pairs=False)  # planned without an all-to-all cost: no pairs


def test_delayed_weight_gradients_inside_the_plan_are_refused():
    why = _refusal("dualpipev", delay_wgrad_compute=True)
    assert why is not None and "--delay-wgrad-compute" in why and "backward_dw" in why, why


def test_a_pairs_halves_are_consecutive_items():
    from primus_megatron.runtime.combined import pair_halves

    sched = S.generate("dualpipev", 2, 4)
    lowered = S.lower(sched)
    for rank in range(2):
        halves = pair_halves(lowered.ranks[rank], sched.paired(rank))
        assert len(halves) == len(sched.paired(rank)) > 0
        for first, second in halves.items():
            items = lowered.ranks[rank]
            assert items[first].kind == S.F and items[second].kind in (S.B, S.BW) and second == first + 1


def test_a_forward_only_plan_is_not_refused_for_having_no_pairs():
    """Megatron-LM evaluates with the same runner (forward-only plans have no pairs, and their steps never
    call the combined step): the flag is the training plan's to meet."""
    import torch

    from primus_megatron.runtime.forward_backward import UnsupportedSetting, _refuse_unsupported

    config, chunks = SimpleNamespace(overlap_moe_expert_parallel_comm=True), [torch.nn.Linear(2, 2)]
    plain = S.generate("zbv", 2, 4)  # planned without an all-to-all cost: no pairs
    assert not plain.has_pairs
    _refuse_unsupported(config, chunks, plain, forward_only=True)
    with pytest.raises(UnsupportedSetting, match="has none"):
        _refuse_unsupported(config, chunks, plain)
