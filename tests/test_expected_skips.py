"""Unexpected skips fail the session (tests/expected_skips.py, the hooks in tests/conftest.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import expected_skips

TESTS = os.path.dirname(os.path.abspath(__file__))


def test_a_skip_is_expected_only_under_a_declared_condition_that_holds(monkeypatch):
    monkeypatch.setitem(expected_skips.CONDITIONS, "always", ("always", lambda: True))
    monkeypatch.setitem(expected_skips.CONDITIONS, "never", ("never", lambda: False))
    assert expected_skips.unexpected_because(expected_skips.reason("always", "x")) is None
    assert expected_skips.unexpected_because("Skipped: " + expected_skips.reason("always", "x")) is None
    assert "does not hold" in expected_skips.unexpected_because(expected_skips.reason("never", "x"))
    assert "no expected-skip condition" in expected_skips.unexpected_because("megatron-core is not installed")
    assert "unknown condition" in expected_skips.unexpected_because("[expected when nowhere] x")
    with pytest.raises(KeyError, match="unknown expected-skip condition"):
        expected_skips.reason("nowhere", "x")


def _session(tmp_path, body: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                           "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path / "test_inner.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_session_with_an_unexpected_skip_fails_and_names_it(tmp_path):
    """What a broken megatron-core install looks like: modules skip themselves. The run fails."""
    run = _session(tmp_path, """
        import pytest
        pytestmark = pytest.mark.skipif(True, reason="megatron-core is not installed")
        def test_one():
            pass
    """)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "unexpected skips" in run.stdout and "test_inner.py::test_one: megatron-core is not installed" in run.stdout


def test_a_session_whose_skips_are_all_expected_passes(tmp_path):
    run = _session(tmp_path, """
        import pytest
        import expected_skips
        expected_skips.CONDITIONS["here"] = ("always here", lambda: True)
        def test_one():
            pytest.skip(expected_skips.reason("here", "not on this machine"))
        def test_two():
            pass
    """)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "expected skips: 1 when here" in run.stdout and "unexpected" not in run.stdout
