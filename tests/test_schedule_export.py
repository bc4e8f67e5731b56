"""Export: the DESIGN.md JSON contract, round trips, and torch action strings."""
from __future__ import annotations

import json
import re

import pytest

from primus_megatron.schedules import Costs, generate, names, simulate
from primus_megatron.schedules.export import from_dict, to_dict, to_json, torch_actions
from primus_megatron.schedules.ir import B, BW, F, W, Pair, stage_of

HEURISTIC = [n for n in names() if n != "zb-optimal"]
CASES = [(2, 1), (3, 5), (4, 8)]
CONTRACT_KEYS = {"schedule", "pp", "microbatches", "chunks_per_rank", "placement", "ranks", "stats"}


@pytest.mark.parametrize("name", HEURISTIC)
def test_to_dict_contract(name):
    for p, m in CASES:
        s = generate(name, p, m)
        d = to_dict(s)
        assert CONTRACT_KEYS <= set(d)
        assert (d["schedule"], d["pp"], d["microbatches"], d["chunks_per_rank"], d["placement"]) == (
            s.name, p, m, s.chunks_per_rank, s.placement)
        assert len(d["ranks"]) == p
        for r, ops in enumerate(d["ranks"]):
            assert len(ops) == len(s.ranks[r])
            for o, op in zip(ops, s.ranks[r]):
                assert set(o) == {"op", "mb", "chunk", "stage"}
                assert (o["op"], o["mb"], o["chunk"]) == (op.kind, op.mb, op.chunk)
                assert o["op"] in (F, B, W, BW)
                assert o["stage"] == stage_of(s.placement, p, r, o["chunk"])
        assert d["stats"] == simulate(s).stats()
        assert json.loads(json.dumps(d)) == d  # plain JSON types only
        assert json.loads(to_json(s)) == d


def test_stats_follow_given_costs():
    s = generate("zb-h1", 4, 8)
    costs = Costs(f=2.0, b=2.0, w=1.0, comm=0.5)
    assert to_dict(s, costs)["stats"]["makespan"] == pytest.approx(simulate(s, costs).makespan)
    assert to_dict(s)["stats"]["makespan"] == pytest.approx(simulate(s).makespan)


@pytest.mark.parametrize("name", HEURISTIC)
def test_round_trip(name):
    for p, m in CASES:
        s = generate(name, p, m)
        back = from_dict(to_dict(s))
        assert back == s
        assert from_dict(json.loads(to_json(s))) == s
        assert back.ranks == s.ranks and back.placement == s.placement


ACTION = re.compile(r"^(\d+)(F|I|W|B)(\d+)$")
TORCH_KIND = {F: "F", B: "I", W: "W", BW: "B"}


@pytest.mark.parametrize("name", HEURISTIC)
def test_torch_actions_parse_back(name):
    for p, m in CASES:
        s = generate(name, p, m)
        acts = torch_actions(s)
        assert len(acts) == p
        for r, (strings, ops) in enumerate(zip(acts, s.ranks)):
            # an overlapped pair is one action of two: (F;B)OVERLAP_F_B
            texts = [t for text in strings for t in (text[1:text.index(")")].split(";")
                                                     if text.endswith("OVERLAP_F_B") else [text])]
            assert len(texts) == len(ops) and len(strings) == len(ops) - len(s.paired(r))
            for text, op in zip(texts, ops):
                stage, kind, mb = ACTION.match(text).groups()
                assert (int(stage), kind, int(mb)) == (s.stage(r, op), TORCH_KIND[op.kind], op.mb)


def test_torch_actions_parse_with_torch():
    ts = pytest.importorskip("torch.distributed.pipelining.schedules", reason="torch is not installed")
    ct = ts._ComputationType
    kind = {F: ct.FORWARD, B: ct.BACKWARD_INPUT, W: ct.BACKWARD_WEIGHT, BW: ct.FULL_BACKWARD}
    def action(r, item):
        if isinstance(item, Pair):  # torch's OVERLAP_F_B container of its two sub-actions
            return ts._Action(-1, ct.OVERLAP_F_B, None, (action(r, item.f), action(r, item.b)))
        return ts._Action(s.stage(r, item), kind[item.kind], item.mb)

    for name in ("zbv", "1f1b", "zb-h2", "interleaved-1f1b", "dualpipev"):
        s = generate(name, 3, 7)
        for r, strings in enumerate(torch_actions(s)):
            parsed = [ts._Action.from_str(x) for x in strings]
            assert parsed == [action(r, item) for item in s.items(r)]
            assert [str(a) for a in parsed] == strings
