"""`primus-pipeline`: what each command prints and writes (errors: test_reliability_config.py)."""
from __future__ import annotations

import json

import pytest

from primus_megatron import cli, schedules as S


def run(capsys, *argv: str) -> str:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def rows(text: str) -> dict[str, list[str]]:
    """Table rows of the output, by their first cell."""
    return {line.split()[0]: line.split()[1:] for line in text.splitlines()
            if line.split() and line.split()[0] in S.names(aliases=True)}


def test_list_shows_every_registered_name_and_alias(capsys):
    table = rows(run(capsys, "list"))
    assert set(table) == set(S.names(aliases=True))
    for name in S.names():
        assert table[name][1] == S.info(name).placement


def test_compare_has_one_row_per_schedule_with_the_simulators_numbers(capsys, tmp_path):
    # m = pp = 4: every schedule builds and is checked against the simulator at any size; at 6 microbatches
    # the 'vs optimum' column (not read here: test_compare_shows_each_schedules_distance_...) solved ILPs of
    # 18 and 36 ops per rank and the picture held half as many boxes again, twice this test's CPU.
    picture = tmp_path / "all.png"
    out = run(capsys, "compare", "--pp", "4", "--microbatches", "4", "--cost-comm", "0.1", "--plot", str(picture),
              "--time-limit", "0.5")
    table = rows(out)
    assert set(table) == set(S.names())
    costs = S.Costs(comm=0.1)
    for name in S.names():
        if name == "zb-optimal":
            continue
        expected = S.simulate(S.generate(name, 4, 4, costs=costs), costs)
        makespan, sync, asyn = (float(x) for x in table[name][1:4])
        assert makespan == pytest.approx(expected.makespan, rel=1e-3), name
        assert sync == pytest.approx(expected.bubble_sync, abs=1e-4), name
        assert asyn == pytest.approx(expected.bubble_async, abs=1e-4), name
    # the solver's order is at least as short as every heuristic's at 1f1b memory or less
    assert float(table["zb-optimal"][1]) <= float(table["zb-auto"][1]) + 1e-6
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_and_export_agree_with_the_planner(capsys, tmp_path):
    out = run(capsys, "simulate", "--schedule", "zbv", "--pp", "4", "-m", "8")
    assert f"{S.simulate(S.generate('zbv', 4, 8)).makespan:g}" in out
    path = tmp_path / "zbv.json"
    run(capsys, "export", "--schedule", "zbv", "--pp", "4", "-m", "8", "--output", str(path))
    exported = json.loads(path.read_text())
    assert exported == json.loads(json.dumps(S.export.to_dict(S.generate("zbv", 4, 8), S.Costs())))


@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon"])
def test_compare_time_limit_must_be_positive(capsys, value):
    assert cli.main(["compare", "--pp", "2", "-m", "2", "--time-limit", value]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--time-limit" in err and "positive number of seconds" in err


def test_compare_shows_each_schedules_distance_to_the_ilp_optimum_at_its_own_memory(capsys):
    pytest.importorskip("highspy")
    out = run(capsys, "compare", "--pp", "2", "-m", "2", "--cost-b", "2", "--time-limit", "20")
    table = {name: " ".join(cells[6:]) for name, cells in rows(out).items()}
    makespan = {name: float(cells[1]) for name, cells in rows(out).items()}
    # zb-h1, zb-auto and zb-optimal share a layout and peak memory with 1f1b: one solve,
    # proven at this size, whose optimum is zb-optimal's own makespan.
    for name in ("1f1b", "zb-h1", "zb-auto", "zb-optimal"):
        expected = makespan[name] / makespan["zb-optimal"] - 1.0
        assert table[name] == f"{expected:+.1%}", (name, table[name])
    assert table["1f1b"] != "+0.0%"  # 1F1B's bubble is not optimal at its own memory
    for name, text in table.items():  # proven or a lower bound, never below the optimum
        assert text.startswith("+") or text.startswith(">= +"), (name, text)


def test_compare_says_where_the_ilp_does_not_apply(capsys):
    """3 x 16 ops per rank is past the ILP's 36 for every schedule: no column, one line saying why (and
    no solve); at m=8 the one-chunk schedules (24 ops) get a distance and the two-chunk ones (48) say so."""
    out = run(capsys, "compare", "--pp", "4", "-m", "16", "--time-limit", "1")
    table = rows(out)
    assert "not built" in " ".join(table.pop("zb-optimal"))  # its own size limit
    assert "vs optimum" not in out.splitlines()[2] and all(len(cells) == 6 for cells in table.values())
    assert "vs optimum: not computed: the ILP (zb-optimal) takes at most 36 ops per rank" in out
    pytest.importorskip("highspy")
    mixed = rows(run(capsys, "compare", "--pp", "4", "-m", "8", "--time-limit", "1"))
    for name, cells in mixed.items():
        two_chunks = S.info(name).chunks == 2
        assert (" ".join(cells[6:]) == "too large for the ILP") == two_chunks, (name, cells)


def test_compare_with_a_profile_runs_each_schedule_on_its_own_layouts_costs(capsys):
    """--profile: each schedule simulated on the stage costs of its own chunk layout (the V schedules with
    the head on rank 0), the layers split evenly; --json carries the same numbers as the planner."""
    from primus_megatron.schedules import balance
    from primus_megatron.schedules.layer_split import LayerSplit

    path = "benchmarks/gpu_reports/h200-llama3-8b-like.profile.json"
    # --time-limit 0.5: the ILP (zb-optimal's row, the 'vs optimum' column) is not what this test reads;
    # the default 10 s per solve was half of its CPU
    data = json.loads(run(capsys, "compare", "--profile", path, "--pp", "4", "-m", "8", "--num-layers", "16",
                          "--time-limit", "0.5", "--json"))
    layout = balance.LayoutCosts(balance.load_profile(path), LayerSplit(16), 4)
    by = {r["name"]: r for r in data["schedules"]}
    for name in ("1f1b", "interleaved-1f1b", "zb-h1", "zbv"):
        costs = layout(S.info(name).chunks)
        expected = S.simulate(S.generate(name, 4, 8, costs=costs), costs)
        assert by[name]["makespan"] == pytest.approx(expected.makespan), name
        assert by[name]["max_peak_memory"] == pytest.approx(expected.max_peak_memory), name
    assert by["zbv"]["makespan"] < by["1f1b"]["makespan"]
    assert "not_built" in by["zb-optimal"] or "makespan" in by["zb-optimal"]
    code = cli.main(["compare", "--profile", path, "--pp", "4", "-m", "8", "--cost-w", "2"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "--profile" in err and "--cost-w" in err


def test_the_memory_model_and_the_objective_reach_simulate_and_export(capsys):
    """--mem-w alone gives --mem-b (they sum to -1); --post-validation plans for the run's
    objective: the same orders and numbers as the planner given the same Costs and flag. At the
    paper's 1.5B, p=8, m=32 costs and twice 1F1B's memory that is its ZB-2p, 0.0039."""
    argv = ["--schedule", "zb-auto", "--pp", "8", "-m", "32", "--cost-f", "18.513", "--cost-b", "18.086",
            "--cost-w", "9.331", "--cost-comm", "0.626", "--mem-w", "-0.3664", "--memory-limit", "16"]
    costs = S.Costs(f=18.513, b=18.086, w=9.331, comm=0.626, mem_b=-0.6336, mem_w=-0.3664)
    for post in (False, True):
        extra = ["--post-validation"] if post else []
        planned = S.generate("zb-auto", 8, 32, costs=costs, memory_limit=16, post_validation=post)
        result = S.simulate(planned, costs)
        exported = json.loads(run(capsys, "export", *argv, *extra))
        assert [[(o["op"], o["mb"]) for o in row] for row in exported["ranks"]] == \
            [[(op.kind, op.mb) for op in row] for row in planned.ranks]
        assert exported["stats"]["peak_memory"] == [round(x, 6) for x in result.peak_memory]
        out = run(capsys, "simulate", *argv, *extra)
        summary = next(line.split() for line in out.splitlines() if line.split() and line.split()[0][0].isdigit())
        assert float(summary[2]) == pytest.approx(result.bubble_async, abs=1e-4)
        assert ("post-validation" in out.splitlines()[0]) == post
    assert result.bubble_async <= 0.0039 + 0.002  # the last: post-validation


def test_mem_b_alone_sets_mem_w():
    args = cli.build_parser().parse_args(["simulate", "--schedule", "zb-auto", "--pp", "4", "-m", "8",
                                          "--mem-b", "-0.75"])
    costs = cli._costs(args)
    assert (costs.mem_b, costs.mem_w) == (-0.75, -0.25)
    default = cli._costs(cli.build_parser().parse_args(["simulate", "--schedule", "zb-auto", "--pp", "4", "-m", "8"]))
    assert (default.mem_b, default.mem_w) == (0.0, -1.0)  # today's model unless asked


def test_pipeline_costs_carry_the_memory_model():
    from primus_megatron.options import parse_costs

    assert parse_costs("1,2,1,mem-w=-0.4") == S.Costs(f=1, b=2, w=1, mem_b=-0.6, mem_w=-0.4)
    assert parse_costs("1,2,1,comm=0.1,mem-b=-0.6,mem-w=-0.4") == \
        S.Costs(f=1, b=2, w=1, comm=0.1, mem_b=-0.6, mem_w=-0.4)
    assert parse_costs("1,2,1,0.1,2.5") == S.Costs(f=1, b=2, w=1, comm=0.1, bw=2.5)
    for bad, needle in (("1,2,1,mem-b=-0.5,mem-w=-0.3", "mem-b and mem-w must sum to -1"),
                        ("1,2,1,mem-w=0.2", "mem-w must be <= 0"),
                        ("1,2,1,size=3", "named entries may follow"),
                        ("1,2,1,mem-w=-0.4,0.1", "named entries may follow"),
                        ("1,2,1,0.1,comm=0.2", "gives comm twice")):
        with pytest.raises(ValueError, match="--pipeline-costs") as info:
            parse_costs(bad)
        assert needle in str(info.value), (bad, str(info.value))


def test_compare_under_post_validation_plans_and_measures_the_span(capsys):
    """compare --post-validation: every schedule planned for the run's objective, and the distance
    to the optimum in the longest per-rank span (the ILP solved for it): zb-optimal is the
    reference, so its own distance is +0.0%."""
    pytest.importorskip("highspy")
    argv = ["--pp", "2", "-m", "2", "--cost-b", "1.5", "--cost-w", "0.5", "--mem-w", "-0.4", "--memory-limit", "3",
            "--time-limit", "5", "--post-validation"]
    out = run(capsys, "compare", *argv)
    assert "planned for post-validation" in out.splitlines()[0] and "vs optimum: longest per-rank span" in out
    table = rows(out)
    costs = S.Costs(b=1.5, w=0.5, mem_b=-0.6, mem_w=-0.4)
    auto = S.simulate(S.generate("zb-auto", 2, 2, costs=costs, memory_limit=3, post_validation=True), costs)
    assert float(table["zb-auto"][3]) == pytest.approx(auto.bubble_async, abs=1e-4)
    assert " ".join(table["zb-optimal"][6:]) == "+0.0%"


def test_simulate_json_with_offload_carries_what_the_text_report_says(capsys):
    """The JSON export of `simulate --offload` has the offload outcome (issue 42): makespan, resident
    peaks, reload waits and every copy to host with the op that issues its reload, the same numbers
    as the text report and the offload planner."""
    from primus_megatron.schedules import offload

    argv = ["simulate", "--schedule", "zb-h1", "--pp", "8", "-m", "24", "--offload", "auto", "--memory-limit", "4",
            "--offload-bandwidth", "2"]
    data = json.loads(run(capsys, *argv, "--json"))
    text = run(capsys, *argv)
    schedule = S.generate("zb-h1", 8, 24)
    moved = offload.choose(schedule, "auto", bandwidth=2.0, memory_limit=4.0)
    got = data["offload"]
    assert got["mode"] == "auto" and got["bandwidth"] == 2.0
    assert got["max_resident_peak"] == moved.max_peak_memory <= 4 < max(data["stats"]["peak_memory"]) == \
        got["max_peak_without"]
    assert [r["resident_peak"] for r in got["ranks"]] == [round(x, 6) for x in moved.peak_memory]
    assert [r["reload_wait"] for r in got["ranks"]] == [round(x, 6) for x in moved.stall]
    to_host = [(r, e["mb"], e["chunk"]) + (("W",) if e["what"] == "w_share" else ())
               for r, rank in enumerate(got["ranks"]) for e in rank["to_host"]]
    assert sorted(to_host) == sorted((r, *key) for r, keys in enumerate(moved.plan.reload_at) for key in keys)
    shares = sum(e["what"] == "w_share" for rank in got["ranks"] for e in rank["to_host"])
    assert f"{len(to_host) - shares} of the F ops' activations and {shares} W shares" in text
    assert f"max resident peak {got['max_resident_peak']:g}" in text
    assert "offload" not in json.loads(run(capsys, "simulate", "--schedule", "zb-h1", "--pp", "8", "-m", "24",
                                           "--json"))


def test_list_states_v_half_and_v_min_memory_as_the_simulator_finds_it(capsys):
    """`list`'s memory column for the V schedules, ceil(p/k)+1 microbatches' worth, is the simulated
    peak at p=8 (compare's 'max peak memory') and bounds it at other sizes; the ratio its description
    gives for p=8 is compare's 'memory vs 1f1b'."""
    import math
    import re

    table = rows(run(capsys, "list"))
    compared = rows(run(capsys, "compare", "--pp", "8", "--microbatches", "24", "--time-limit", "0.5"))
    for name, k, at8 in (("v-half", 2, "0.62x"), ("v-min", 3, "0.50x")):
        assert table[name][2] == f"ceil(p/{k})+1"
        assert f"{at8} of 1F1B's at p=8" in " ".join(table[name][3:])
        for p in (4, 8, 16):
            peak = S.simulate(S.generate(name, p, 3 * p, costs=S.Costs()), S.Costs()).max_peak_memory
            assert peak <= math.ceil(p / k) + 1 + 1e-9
            if p == 8:
                assert peak == math.ceil(p / k) + 1
        row = compared[name]  # chunks, makespan, bubbles (sync, async), max peak memory, memory vs 1f1b
        assert re.fullmatch(r"\d\.\d\dx", row[5]) and row[5] == at8 and float(row[4]) == math.ceil(8 / k) + 1


def test_fewer_microbatches_than_pipeline_ranks_warn_once_with_the_bubble_they_cost(capsys):
    """simulate, compare and advise: one line on stderr (stdout stays the table or JSON) with the simulator's
    bubble at this count and at pp microbatches; none at m = pp."""
    def warning(*argv: str) -> list:
        assert cli.main(list(argv)) == 0
        out = capsys.readouterr()
        if "--json" in argv:
            json.loads(out.out)
        return [line for line in out.err.splitlines() if line.strip()], out.out

    idle = [S.simulate(S.generate("zbv", 4, m)).bubble_sync for m in (2, 4)]
    said, _ = warning("simulate", "--schedule", "zbv", "--pp", "4", "-m", "2")
    assert said == [f"primus-pipeline: warning: 2 microbatches per step on 4 pipeline ranks: zbv leaves the ranks "
                    f"idle {100 * idle[0]:.0f}% of each step (simulated bubble; {100 * idle[1]:.0f}% with 4, as many "
                    f"microbatches as ranks); raise --microbatches to --pp or more"], said
    assert idle[0] > idle[1] and warning("simulate", "--schedule", "zbv", "--pp", "4", "-m", "4")[0] == []
    said, out = warning("compare", "--pp", "4", "-m", "2", "--json")
    fastest = min((r for r in json.loads(out)["schedules"] if "makespan" in r), key=lambda r: r["makespan"])
    assert len(said) == 1 and f"even the fastest schedule here ({fastest['name']}) leaves the ranks idle " \
        f"{100 * fastest['bubble_sync']:.0f}% of each step" in said[0], said
    said, out = warning("advise", "--model", "llama3-8b", "--pp", "8", "--microbatches", "4", "--json")
    first = json.loads(out)["schedules"][0]["name"]
    assert len(said) == 1 and f"4 microbatches per step on 8 pipeline ranks: even the fastest schedule ({first})" \
        in said[0], said


def test_recv_policy_reaches_simulate_and_export_and_a_bad_value_is_one_sentence(capsys):
    """--recv-policy (issue 60): simulate reports the lowered makespan under that policy, the
    queue run of validate's lowering (never below the op-level makespan: p2p only adds waits);
    export --format json carries each rank's items as posted; a bad value exits 2 in one line."""
    from primus_megatron.schedules.rendezvous import run_p2p

    sched = S.generate("zbv", 4, 8)
    sc = S.UNIT.resolve(4, sched.chunks_per_rank, sched.placement, 8)
    for policy in ("early", "just-in-time"):
        assert cli.main(["simulate", "--schedule", "zbv", "--pp", "4", "-m", "8", "--json", "--recv-policy", policy]) == 0
        data = json.loads(capsys.readouterr().out)
        want = run_p2p(S.validate(sched, recv_policy=policy), sc).makespan
        assert data["recv_policy"] == policy and data["lowered_makespan"] == pytest.approx(want)
        assert want >= S.simulate(sched).makespan - 1e-9
    assert cli.main(["export", "--schedule", "1f1b", "--pp", "2", "-m", "3", "--recv-policy", "just-in-time"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lowered"] == [[str(x) for x in items]
                               for items in S.validate(S.generate("1f1b", 2, 3), recv_policy="just-in-time").ranks]
    for argv in (["simulate", "--schedule", "zbv", "--pp", "4", "-m", "8", "--pipeline-recv-policy", "late"],
                 ["export", "--schedule", "1f1b", "--pp", "2", "-m", "2", "--format", "torch", "--recv-policy", "early"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "--recv-policy" in err and "Traceback" not in err, err


def test_p2p_groups_reach_simulate_export_and_the_entry_points_and_a_bad_value_is_one_sentence(capsys):
    """--p2p-groups / --pipeline-p2p-groups (issue 60): simulate's lowered makespan is the queue run
    under that layout (two queues per rank: never slower than one, p2p only loses waits); export
    carries it with the items; the entry points' option lands in the spec (default one); a bad
    value exits 2 in one line naming the option."""
    import argparse

    from primus_megatron import options
    from primus_megatron.schedules.rendezvous import run_p2p

    sched = S.generate("zbv", 4, 8)
    sc = S.UNIT.resolve(4, sched.chunks_per_rank, sched.placement, 8)
    spans = {}
    for groups in ("one", "per-direction"):
        assert cli.main(["simulate", "--schedule", "zbv", "--pp", "4", "-m", "8", "--json", "--p2p-groups", groups]) == 0
        data = json.loads(capsys.readouterr().out)
        spans[groups] = run_p2p(S.validate(sched, p2p_groups=groups), sc).makespan
        assert data["p2p_groups"] == groups and data["lowered_makespan"] == pytest.approx(spans[groups])
    assert spans["per-direction"] <= spans["one"] + 1e-9
    assert cli.main(["export", "--schedule", "zbv", "--pp", "2", "-m", "4", "--pipeline-p2p-groups", "per-direction"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["p2p_groups"] == "per-direction" and data["recv_policy"] == "early"
    assert data["lowered"] == [[str(x) for x in items] for items in S.validate(S.generate("zbv", 2, 4)).ranks]
    for argv in (["simulate", "--schedule", "zbv", "--pp", "4", "-m", "8", "--pipeline-p2p-groups", "two"],
                 ["export", "--schedule", "1f1b", "--pp", "2", "-m", "2", "--format", "torch", "--p2p-groups", "one"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "--p2p-groups" in err and "Traceback" not in err, err
    parser = options.add_args(argparse.ArgumentParser())
    assert options.from_args(parser.parse_args(["--pipeline-schedule", "zbv"])).p2p_groups == "one"
    args = parser.parse_args(["--pipeline-schedule", "zbv", "--pipeline-p2p-groups", "per-direction"])
    assert options.from_args(args).p2p_groups == "per-direction"
    with pytest.raises(ValueError, match="p2p_groups must be one of one, per-direction, got 'both'"):
        options.from_options("zbv", p2p_groups="both")


def test_recv_policy_auto_follows_the_torch_build(monkeypatch):
    """auto is just-in-time on a ROCm build of torch (torch.version.hip set), early elsewhere;
    both entry points' --pipeline-recv-policy lands in the spec resolved."""
    import argparse
    import sys
    import types

    from primus_megatron import options

    fake = types.SimpleNamespace(version=types.SimpleNamespace(hip=None))
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert options.resolve_recv_policy("auto") == "early"
    fake.version.hip = "6.4.43482"
    assert options.resolve_recv_policy("auto") == "just-in-time"
    assert options.resolve_recv_policy("early") == "early"
    with pytest.raises(ValueError, match="recv_policy must be one of early, just-in-time, auto"):
        options.resolve_recv_policy("late")
    parser = options.add_args(argparse.ArgumentParser())
    args = parser.parse_args(["--pipeline-schedule", "zbv", "--pipeline-recv-policy", "auto"])
    assert options.from_args(args).recv_policy == "just-in-time"
    args = parser.parse_args(["--pipeline-schedule", "zbv", "--pipeline-recv-policy", "early"])
    assert options.from_args(args).recv_policy == "early"
    # the default is early, on ROCm too: just-in-time is asked for by name or by auto
    assert options.from_args(parser.parse_args(["--pipeline-schedule", "zbv"])).recv_policy == "early"


def test_ranks_that_post_receives_by_different_policies_have_different_fingerprints():
    """The job-wide fingerprint comparison before the first op catches ranks whose `auto` resolved
    differently (mixed torch builds): their p2p orders differ and would hang. The early policy keeps
    the fingerprint it had before there were policies."""
    from primus_megatron import schedules as S
    from primus_megatron.runtime.planner import schedule_fingerprint

    sched = S.generate("zbv", 4, 8)
    assert schedule_fingerprint(sched) == schedule_fingerprint(sched, "early")
    assert schedule_fingerprint(sched, "just-in-time") != schedule_fingerprint(sched, "early")
    # and ranks that would post a message on different process groups (--pipeline-p2p-groups)
    assert schedule_fingerprint(sched, "early", "one") == schedule_fingerprint(sched)
    assert schedule_fingerprint(sched, "early", "per-direction") != schedule_fingerprint(sched)
