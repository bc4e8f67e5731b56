"""`primus-pipeline postmortem` (issue 61, item 3): the root of a stopped job from its ranks' reports.

Unit tests build reports by hand (the wait-for graph: chains, a dead rank, a missing report, a cycle
left by the aftermath, in every order); two emulated launches (pp 8 with a rank stalled inside an op,
pp 16 with a rank SIGKILLed mid-step) check that real reports name the root. Which ranks time out
first, and in which order they write, is left to the machine: only what holds under any order is
asserted."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest

from primus_megatron import cli
from primus_megatron.health import postmortem, summary
from primus_megatron.health.reports import Folder, read_folder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _report(rank, pp, *, peer=None, since=100.0, op=None, kind="timeout", t=110.0):
    """A report as health/flight.py writes it: `peer` the global rank waited on, `op` (kind, mb) it is inside."""
    waiting = None if peer is None else {"peer": peer, "peer_global": peer, "what": f"activation mb1 stage {peer}->{rank}",
                                         "send": False, "op": f"F1 (microbatch 1, chunk 0, stage {rank})", "since": since}
    inside = None if op is None else {"label": f"{op[0]}{op[1]} (microbatch {op[1]}, chunk 0, stage {rank})",
                                      "kind": op[0], "mb": op[1], "chunk": 0, "stage": rank, "since": since}
    return {"version": 1, "rank": rank, "pipeline_rank": rank, "pipeline_size": pp, "host": "h", "pid": 1,
            "kind": kind, "time": t, "message": "", "waiting": waiting, "op": inside,
            "stack": ["/x/chunks.py:10 in fault_point"], "steps": [[]]}


def _stalled_at_2():
    """pp 5: rank 2 stalled in F5; 0 -> 1 -> 2 and 4 -> 3 -> 2 wait."""
    return {0: _report(0, 5, peer=1), 1: _report(1, 5, peer=2), 2: _report(2, 5, op=("F", 5), kind="request"),
            3: _report(3, 5, peer=2), 4: _report(4, 5, peer=3)}


def test_every_chain_ends_at_the_stalled_rank_and_the_paragraph_names_its_op_and_microbatch():
    f = postmortem.analyse(Folder(reports=_stalled_at_2()))
    assert f.root == 2 and sorted(f.ends[2]) == [0, 1, 3, 4] and f.missing == [] and f.dropped == []
    assert f.state["status"] == "in-op" and f.state["op"]["mb"] == 5
    text = summary.paragraph(f, Folder(reports=_stalled_at_2()))
    assert "Rank 2 " in text and "F5 (microbatch 5" in text and "chunks.py:10 in fault_point" in text
    assert "0→1→2" in text and "4→3→2" in text and "Reports from 5 of 5 ranks." in text


def test_a_rank_that_left_no_report_is_the_dead_root_and_is_said_missing():
    reports = {r: _report(r, 4, peer=2) for r in (1, 3)}
    reports[0] = _report(0, 4, peer=1)
    folder = Folder(reports=reports)
    f = postmortem.analyse(folder)
    assert f.root == 2 and f.state == {"status": "died"} and f.missing == [2]
    text = summary.paragraph(f, folder)
    assert "it died" in text and "none from rank 2" in text and "rank 1 the receive of activation mb1" in text


def test_a_missing_report_nobody_waited_on_is_said_but_is_not_the_root():
    reports = _stalled_at_2()
    del reports[4]  # rank 3 still waits on 2: the chain and its root do not change
    folder = Folder(reports=reports)
    f = postmortem.analyse(folder, world=6)
    assert f.root == 2 and f.missing == [4, 5]
    assert "none from ranks 4, 5" in summary.paragraph(f, folder)


def test_a_crash_report_makes_the_crashed_rank_the_root():
    folder = Folder(reports={0: _report(0, 2, peer=1)},
                    crashes={1: 'Fatal Python error: Segmentation fault\n\n  File "/x/kernel.py", line 7 in run\n'})
    f = postmortem.analyse(folder)
    assert f.root == 1 and f.state["status"] == "crashed" and "kernel.py" in summary.paragraph(f, folder)


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
def test_the_aftermath_cycle_is_broken_at_the_later_wait_whatever_order_reports_come_in(order):
    """Rank 1 stalled in F2 while 2 waited on it (since 100) and 0 waited on it; once 2 gave up, 1 went on
    to wait on 2 (since 150): a cycle 1 <-> 2. The later wait is the aftermath: the root is 1."""
    made = {0: _report(0, 4, peer=1), 1: _report(1, 4, peer=2, since=150.0, op=("F", 2)),
            2: _report(2, 4, peer=1, since=100.0), 3: _report(3, 4, peer=2, since=101.0)}
    folder = Folder(reports={r: made[r] for r in order})
    f = postmortem.analyse(folder)
    assert f.root == 1 and f.dropped == [(1, 2)] and sorted(f.ends[1]) == [0, 2, 3]


def test_bad_folders_get_one_sentence_and_exit_2(tmp_path, capsys):
    assert cli.main(["postmortem", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "is not a folder" in err and err.count("\n") == 1 and "Traceback" not in err
    assert cli.main(["postmortem", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "holds no rank report" in err and err.count("\n") == 1


def test_json_output_and_the_picture(tmp_path, capsys):
    for r, rep in _stalled_at_2().items():
        (tmp_path / f"postmortem-rank{r}.json").write_text(json.dumps(rep))
    pic = tmp_path / "last.png"
    assert cli.main(["postmortem", str(tmp_path), "--format", "json", "--picture", str(pic)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["root"] == 2 and out["missing_reports"] == [] and out["root_state"]["op"]["kind"] == "F"
    assert pic.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_kill_usr1_writes_a_report_and_the_rank_goes_on(tmp_path):
    code = ("import os, signal; from primus_megatron.health import flight; flight.identify(2, 4, 7); "
            "os.kill(os.getpid(), signal.SIGUSR1); print('went on')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=ROOT, PRIMUS_HANG_REPORT_DIR=str(tmp_path)))
    assert run.returncode == 0 and run.stdout.strip() == "went on", run.stderr
    assert "Current thread" in run.stderr and "<string>" in run.stderr, run.stderr  # every thread's stack too
    rep = read_folder(str(tmp_path)).reports[7]
    assert rep["kind"] == "request" and rep["pipeline_rank"] == 2 and rep["pipeline_size"] == 4


# -- emulated devices: real reports from 8 and 16 ranks ---------------------------------------------

def _emulate_with_fault(tmp_path, monkeypatch, capsys, pp: int, fault: str) -> dict:
    monkeypatch.setenv("PRIMUS_HANG_REPORT_DIR", str(tmp_path))
    code = cli.main(["emulate", "--schedule", "zb-h1", "--pp", str(pp), "-m", str(pp), "--cost-f", "5",
                     "--cost-b", "5", "--cost-w", "5", "--p2p-timeout", "2", "--steps", "1", "--fault", fault])
    capsys.readouterr()
    assert code == 1  # the run fails, named (test_emulated.py checks its words)
    assert cli.main(["postmortem", str(tmp_path), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_rank_stalled_inside_an_op_is_the_root_of_8_ranks_reports(tmp_path, monkeypatch, capsys):
    out = _emulate_with_fault(tmp_path, monkeypatch, capsys, 8, "stall:3:F2")
    assert out["root"] == 3 and out["missing_reports"] == [] and len(out["reports"]) == 8
    assert out["root_state"]["status"] == "in-op" and out["root_state"]["op"]["mb"] == 2
    assert {2, 4} <= set(out["ends"]["3"])  # its neighbours waited on it (how far the others got depends on load)
    assert "F2 (microbatch 2, chunk 0, stage 3)" in out["paragraph"] and "fault_point" in out["paragraph"]


def test_a_rank_killed_mid_step_is_the_root_of_16_ranks_reports(tmp_path, monkeypatch, capsys):
    out = _emulate_with_fault(tmp_path, monkeypatch, capsys, 16, "kill:9:B3")
    assert out["root"] == 9 and out["root_state"]["status"] == "died" and out["missing_reports"] == [9]
    assert {8, 10} <= set(out["ends"]["9"]) and list(out["ends"]) == ["9"]
    assert "Rank 9 is the root" in out["paragraph"] and "none from rank 9" in out["paragraph"]


def test_fault_option_is_checked(capsys):
    assert cli.main(["emulate", "--schedule", "zb-h1", "--pp", "4", "-m", "4", "--cost-f", "1", "--cost-b", "1",
                     "--cost-w", "1", "--fault", "stall:4:F1"]) == 2
    err = capsys.readouterr().err
    assert "--fault must be stall or kill" in err and err.count("\n") == 1
