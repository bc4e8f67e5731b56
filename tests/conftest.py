"""Shared test setup: the repository on sys.path and a bounded hypothesis profile."""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # hypothesis is a test extra; the planner tests that need it import it themselves
    pass
else:
    # Bounded and deterministic so the planner suite stays well under two minutes on 2 cores.
    settings.register_profile("planner", max_examples=20, deadline=None, derandomize=True,
                              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    settings.register_profile("explore", max_examples=400, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "planner"))


import pytest  # noqa: E402


def pytest_configure(config):
    """A misspelt PRIMUS_TEST_SCHEDULES stops the run with one line, before any module is collected."""
    import schedule_subset

    try:
        schedule_subset.chosen()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_collection_modifyitems(config, items):
    """PRIMUS_TEST_SCHEDULES (tests/schedule_subset.py): cases of other schedules are deselected
    (reported as deselected, never as passed or skipped)."""
    import schedule_subset

    limit = schedule_subset.chosen()
    if limit is None:
        return
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        (keep if schedule_subset.item_kept(params, limit) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def megatron_lm_tree(tmp_path_factory):
    """One patched Megatron-LM tree (the tag matching the installed megatron-core: core_v0.16.1 or
    core_v0.19.0) for every test that runs its pretrain_gpt.py:
    unpacked from ../shared/megatron-lm (or copied from MEGATRON_LM_PATH) once per session. Its
    absence fails those tests with what to do; it never skips them."""
    import megatron_lm_harness as H

    try:
        return H.prepare(str(tmp_path_factory.mktemp("megatron-lm")))
    except H.MegatronLMUnavailable as exc:
        pytest.fail(str(exc))
