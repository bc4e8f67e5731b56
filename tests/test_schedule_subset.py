"""PRIMUS_TEST_SCHEDULES limits the schedules a run exercises (the second CI leg): what stays."""
from __future__ import annotations

import pytest

import schedule_subset


def test_unset_keeps_everything(monkeypatch):
    monkeypatch.delenv(schedule_subset.ENV, raising=False)
    assert schedule_subset.chosen() is None
    assert schedule_subset.under_test(["zb-h2", "v-min", None]) == ["zb-h2", "v-min", None]


def test_set_keeps_the_named_schedules_and_everything_that_is_not_ours(monkeypatch):
    monkeypatch.setenv(schedule_subset.ENV, "zb-h1, zbv")
    assert schedule_subset.under_test(["1f1b", "zb-h1", "zb-h2", "zbv", "v-min", "auto", "megatron-1f1b", None]) \
        == ["zb-h1", "zbv", "auto", "megatron-1f1b", None]
    assert schedule_subset.item_kept({"case": ("a-overlap-grad-sync", "zbv"), "precision": "bf16"})
    assert not schedule_subset.item_kept({"case": ("a-overlap-grad-sync", "v-half")})
    assert not schedule_subset.item_kept({"schedule": "zb-h2", "precision": "fp32"})
    assert schedule_subset.item_kept({"schedule": None})


def test_a_misspelt_name_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(schedule_subset.ENV, "zb-h1,zbvv")
    with pytest.raises(ValueError, match="PRIMUS_TEST_SCHEDULES names zbvv; registered schedules: 1f1b"):
        schedule_subset.chosen()
