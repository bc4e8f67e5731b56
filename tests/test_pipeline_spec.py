"""The PipelineSpec (primus_megatron/options.py): built once from the arguments, handed down,
never written back; each plan generated and validated once."""
from __future__ import annotations

import argparse

import pytest

import megatron_reference as ref
from primus_megatron import options
from primus_megatron import schedules as S

BASE = ["--cpu", "--mock-data", "--num-layers", "8", "--pipeline-model-parallel-size", "2", "--micro-batch-size", "1",
        "--global-batch-size", "8"]


def _parse(argv):
    from primus_megatron.train.arguments import build_parser, validated

    raw = build_parser().parse_args(BASE + argv)
    before = dict(vars(raw))
    args, spec = validated(raw, world_size=2)
    return before, args, spec


def _pipeline_options(values: dict) -> dict:
    return {k: v for k, v in values.items() if k.startswith("pipeline_") or k.startswith("decoder_")
            or k.startswith("account_for_")}


@pytest.mark.parametrize("argv", [["--pipeline-schedule", "zerobubble"], ["--pipeline-schedule", "auto"],
                                  ["--pipeline-schedule", "zbv", "--pipeline-costs", "1,2,1"]])
def test_the_spec_is_built_from_the_arguments_and_nothing_is_written_back(argv):
    before, args, spec = _parse(argv)
    assert _pipeline_options(vars(args)) == _pipeline_options(before)
    assert not {k for k in vars(args) if k not in before} - {"data_parallel_size", "num_microbatches"}
    name = argv[1]
    if name == "auto":
        assert spec.choose and spec.name == options.PROVISIONAL and spec.checked_plan is None
    else:
        assert not spec.choose and spec.entry is S.info(name) and spec.chunks == S.info(name).chunks
        assert spec.checked_plan[0].ranks == S.generate(spec.name, 2, 8, costs=spec.costs).ranks


def test_balancing_from_a_profile_gives_a_new_spec_on_the_chosen_split(tmp_path):
    from primus_megatron.schedules import balance as B
    from primus_megatron.schedules.layer_split import LayerSplit

    heavy_head = B.ModelCosts(layer=B.Part(1.0, 1.0, 1.0), embedding=B.Part(0.2, 0.3, 0.0), head=B.Part(3.0, 3.0, 3.0),
                              comm=0.05)
    path = str(tmp_path / "p.json")
    B.save_profile(path, heavy_head)
    before, args, spec = _parse(["--pipeline-schedule", "zb-h1", "--pipeline-balance", path])
    best, _ = B.choose("zb-h1", 2, 8, heavy_head, 8)
    assert spec.split == best.split and B.flags(spec.split) and spec.note.startswith("--pipeline-balance")
    assert _pipeline_options(vars(args)) == _pipeline_options(before)  # the arguments keep the even split
    assert LayerSplit.from_args(args) == LayerSplit(8) != spec.layer_split(args)
    chosen = spec.with_schedule("zbv")
    assert (chosen.name, chosen.chunks, chosen.split, spec.name) == ("zbv", 2, spec.split, "zb-h1")


def test_splits_backward_comes_from_the_registry_entry():
    for name in S.names():
        assert options.from_options(name).splits_backward == S.info(name).splits_backward
    spec = options.from_args(argparse.Namespace(pipeline_schedule="zbv", pipeline_costs=None))
    assert spec.splits_backward and spec.placement == S.V and spec.measures and spec.profile_window == (1, 4)


needs_megatron = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")


@needs_megatron
@pytest.mark.parametrize("name", ["zb-h1", "zbv", "zb-auto"])
def test_each_plan_is_generated_and_validated_once(monkeypatch, name):
    from primus_megatron.runtime import get_forward_backward_func

    calls = {"generate": 0, "validate": 0}
    generate, validate = S.generate, S.validate

    def counted(fn, key):
        def wrapper(*a, **k):
            calls[key] += 1
            return fn(*a, **k)
        return wrapper

    from primus_megatron.schedules import validation

    monkeypatch.setattr(S, "generate", counted(generate, "generate"))
    checked = counted(validate, "validate")
    monkeypatch.setattr(S, "validate", checked)
    monkeypatch.setattr(validation, "validate", checked)  # what generate(validate=True) would call
    runner = get_forward_backward_func(name)
    sched, _ = runner.plan(4, 8)
    assert runner.plan(4, 8)[0] is sched and calls == {"generate": 1, "validate": 1}
    runner.plan(4, 8, forward_only=True)  # evaluation: the same order without backward ops, validated once
    assert calls == {"generate": 2, "validate": 2}


@needs_megatron
def test_the_runner_takes_the_plan_the_option_checks_made(monkeypatch):
    from primus_megatron.runtime import get_forward_backward_func

    _, args, spec = _parse(["--pipeline-schedule", "zbv", "--pipeline-costs", "1,2,1"])
    monkeypatch.setattr(S, "generate", lambda *a, **k: pytest.fail("planned again"))
    runner = get_forward_backward_func(spec)
    assert runner.plan(2, args.num_microbatches)[0] is spec.checked_plan[0]
