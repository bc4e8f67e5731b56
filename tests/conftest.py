"""Shared test setup: the repository on sys.path, a bounded hypothesis profile, and a session
that fails on a skip tests/expected_skips.py does not expect."""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# One bf16 arithmetic on every x86 CPU the suite runs on: torch sends CPU bf16 GEMMs to oneDNN, which on
# a CPU with AMX (Sapphire Rapids and later) takes AMX kernels that round otherwise than its AVX-512 ones.
# The bitwise comparisons (our schedules against megatron's) hold either way; the tolerances against a
# non-pipelined reference were measured with AVX-512, and the bf16 expert-parallel matrix row's reference
# (its experts over both replicas' tokens at once) drifts with AMX: iteration 1 up to 30% of a gradient's
# largest value (a token's top-2 experts flip), against <= 2.3e-2 with AVX-512 (Xeon with AMX, 2026-11-29).
# Set before any oneDNN kernel is made here; every rank, fork server and launched run inherits it.
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")

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
    (reported as deselected, never as passed or skipped), but not those of a test marked
    `every_schedule_here` (one only this leg can run); so is the placeholder of a matrix test whose
    rows PRIMUS_TEST_MATRIX_ROWS left out."""
    import schedule_subset

    placeholders = [item for item in items if item.get_closest_marker("no_row_selected")]
    if placeholders:  # a parametrization PRIMUS_TEST_MATRIX_ROWS left empty (test_production_matrix.py)
        config.hook.pytest_deselected(items=placeholders)
        items[:] = [item for item in items if not item.get_closest_marker("no_row_selected")]
    limit = schedule_subset.chosen()
    if limit is None:
        return
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        # a test that only this leg runs keeps every schedule: thinning it would leave a schedule unrun anywhere
        kept = item.get_closest_marker("every_schedule_here") or schedule_subset.item_kept(params, limit)
        (keep if kept else drop).append(item)
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


@pytest.fixture(scope="session")
def megatron_lm_te_pp2(megatron_lm_tree, tmp_path_factory):
    """pretrain_gpt.py with TE layers at pp=2 from one start shared by the session's test modules
    (megatron_lm_harness.TEPipelineRuns): called with a schedule (None: megatron's own) and an FP8 recipe."""
    import megatron_lm_harness as H

    return H.TEPipelineRuns(megatron_lm_tree, str(tmp_path_factory.mktemp("megatron-lm-te")))


@pytest.fixture(scope="session")
def megatron_lm_moe_runs(megatron_lm_tree, tmp_path_factory):
    """pretrain_gpt.py's MoE recipe with TE grouped experts on DP=2 x PP=2 x EP=2 from one start shared by the
    session's test modules (megatron_lm_harness.MoEPipelineRuns): called as megatron_lm_te_pp2."""
    import megatron_lm_harness as H

    return H.MoEPipelineRuns(megatron_lm_tree, str(tmp_path_factory.mktemp("megatron-lm-moe-runs")))


# -- unexpected skips fail the session (tests/expected_skips.py) ----------------------------------

_SKIPS: list = []  # (node id, reason) of every skip in this session


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


_GOLDEN: dict = {}  # outcome -> count, for tests marked `golden`


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        _SKIPS.append((report.nodeid, _skip_reason(report)))
    if "golden" in report.keywords and (report.when == "call" or report.outcome != "passed"):
        _GOLDEN[report.outcome] = _GOLDEN.get(report.outcome, 0) + 1


def pytest_collectreport(report):
    if report.skipped:  # a module that skipped itself at import (pytest.importorskip, allow_module_level)
        _SKIPS.append((report.nodeid, _skip_reason(report)))


def _unexpected_skips() -> list:
    import expected_skips

    out = []
    for nodeid, reason in _SKIPS:
        why = expected_skips.unexpected_because(reason)
        if why is not None:
            out.append((nodeid, reason, why))
    return out


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    """A skip not declared expected (or whose condition does not hold here) fails the run."""
    if _unexpected_skips() and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    import collections

    import expected_skips

    if _GOLDEN:  # the planner's change detectors (tests/test_schedule_golden.py), apart from the rest
        failed = _GOLDEN.get("failed", 0)
        terminalreporter.write_line(
            "golden (change detectors of the planner's output): " + ", ".join(
                f"{n} {outcome}" for outcome, n in sorted(_GOLDEN.items()))
            + (" -- a golden failure is a change of behaviour: intended? regenerate (tests/test_schedule_golden.py)"
               if failed else ""), red=bool(failed))
    if not _SKIPS:
        return
    unexpected = _unexpected_skips()
    expected = collections.Counter(expected_skips.condition_of(r) for n, r in _SKIPS
                                   if (n, r) not in {(u[0], u[1]) for u in unexpected})
    if expected:
        terminalreporter.write_line("expected skips: " + ", ".join(
            f"{count} when {condition}" for condition, count in sorted(expected.items())))
    if unexpected:
        terminalreporter.section("unexpected skips (the session fails: tests/expected_skips.py)", red=True)
        for nodeid, reason, why in unexpected:
            terminalreporter.write_line(f"{nodeid}: {reason}  [{why}]", red=True)


@pytest.fixture(scope="session")
def corpus_dataset(tmp_path_factory) -> str:
    """The packaged corpus as an indexed dataset (its prefix), built once per session for the test modules
    that train on it (5 to 6 s of CPU a build; it was built once per module)."""
    from primus_megatron.train.data import build_corpus_dataset

    prefix = str(tmp_path_factory.mktemp("data") / "corpus_text_document")
    build_corpus_dataset(prefix)
    return prefix
