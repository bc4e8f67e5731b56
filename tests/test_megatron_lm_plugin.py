"""The Megatron-LM integration: argument group, install() and the patch.

Unit tests run against megatron-core alone (a stand-in `megatron.training`
package). The patch test takes Megatron-LM at tag core_v0.16.1 from MEGATRON_LM_PATH
or the shared snapshot (as tests/test_megatron_lm_e2e.py does; MEGATRON_LM_PYTHON
names another interpreter with Megatron-LM's dependencies).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import types

import pytest

import megatron_reference as ref
from primus_megatron import schedules as S
from primus_megatron.megatron_lm import add_args, extra_args_provider, placed_provider
from primus_megatron.megatron_lm.args import check_schedule_args

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_add_args_parses_every_registered_schedule_and_is_idempotent():
    parser = add_args(add_args(argparse.ArgumentParser()))
    assert sum("--pipeline-schedule" in a.option_strings for a in parser._actions) == 1
    help_text = parser.format_help()
    for name in S.names(aliases=True):
        args = parser.parse_args(["--pipeline-schedule", name, "--pipeline-memory-limit", "4"])
        assert args.pipeline_schedule == name and args.pipeline_memory_limit == 4.0
        assert check_schedule_args(args) is None
        assert name in help_text
    assert parser.parse_args([]).pipeline_schedule is None


def test_extra_args_provider_composes_with_an_existing_one():
    def existing(parser):
        parser.add_argument("--modelopt-flag", type=int, default=0)
        return parser

    parser = extra_args_provider(existing)(argparse.ArgumentParser())
    args = parser.parse_args(["--modelopt-flag", "3", "--pipeline-schedule", "zbv"])
    assert args.modelopt_flag == 3 and args.pipeline_schedule == "zbv"


@pytest.mark.parametrize("argv, needle", [
    (["--pipeline-schedule", "zbvv"], "did you mean 'zbv'"),
    (["--pipeline-schedule", "zbv", "--pipeline-chunks", "3"], "exactly 2 chunk"),
    (["--pipeline-schedule", "zb-h1", "--pipeline-p2p-timeout", "0"], "--pipeline-p2p-timeout"),
    (["--pipeline-schedule", "zb-auto", "--pipeline-costs", "1,2"], "--pipeline-costs"),
    # what balanced data needs of Megatron-LM's other options is judged on its whole namespace
    # (test_balanced_sft_packs.py); the group's own values are judged here
    (["--pipeline-schedule", "zb-h1", "--pipeline-balance-data", "lb-mini", "--pipeline-balance-cost", "x"],
     "--pipeline-balance-cost must be A,B"),
    (["--pipeline-schedule", "zb-h1", "--pipeline-balance-cost", "1,2"], "--pipeline-balance-cost needs --pipeline-balance-data"),
])
def test_bad_schedule_arguments_get_one_sentence(argv, needle):
    args = add_args(argparse.ArgumentParser()).parse_args(argv)
    message = check_schedule_args(args)
    assert message is not None and needle in message and "\n" not in message


@pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")
@pytest.mark.parametrize("name, rank, expected", [
    ("zbv", 0, [(True, False, 0), (False, True, 7)]),      # rank 0 holds both ends of the V
    ("zbv", 3, [(False, False, 3), (False, False, 4)]),    # the turn of the V
    ("interleaved-zb", 0, [(True, False, 0), (False, False, 4)]),
    ("interleaved-zb", 3, [(False, False, 3), (False, True, 7)]),
])
def test_placed_provider_builds_chunks_by_global_stage(name, rank, expected):
    """Megatron-LM calls the provider with its loop placement's pre/post flags;
    the wrapper builds global stage stage_of(placement, pp, rank, vp_stage), with
    megatron's layer offsets following the placement during the build."""
    from megatron.core.transformer import transformer_layer

    config = ref.tiny_gpt_config(16, pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=2)
    calls = []

    def provider(pre_process=True, post_process=True, vp_stage=None, config=None, pg_collection=None):
        offset = transformer_layer.get_transformer_layer_offset(config, vp_stage, rank)
        calls.append((pre_process, post_process, offset))
        return types.SimpleNamespace()

    wrapped = placed_provider(provider, S.info(name), 4, rank, 2)
    for c in range(2):
        # megatron's own flags would be loop-placement ones; the wrapper ignores them
        wrapped(pre_process=False, post_process=False, vp_stage=c, config=config, pg_collection=None)
    assert [(pre, post) for pre, post, _ in calls] == [(pre, post) for pre, post, _ in expected]
    assert [off for *_, off in calls] == [2 * stage for *_, stage in expected]  # 2 layers per stage
    assert transformer_layer.get_transformer_layer_offset(config, 1, rank) == (1 * 4 + rank) * 2  # restored


def test_a_built_layer_a_w_schedule_cannot_split_ends_the_run_in_one_line(monkeypatch, capsys):
    """A refusal only the built model shows (a grouped-expert layout our W ops cannot split,
    runtime/grouped_layouts.py) reaches Megatron-LM's user as one line and exit status 2 from the rank
    that holds the layer, not as a traceback."""
    from primus_megatron.runtime import te_wgrad

    def refuse(model, **_):
        raise te_wgrad.TESupportError("TransformerEngine layer experts.linear_fc1 (GroupedLinearV2) is stacked")

    monkeypatch.setattr(te_wgrad, "enable", refuse)
    monkeypatch.setattr(sys, "argv", ["pretrain_gpt.py"])
    wrapped = placed_provider(lambda **kw: types.SimpleNamespace(), S.info("zb-h1"), 2, 1, 1)
    with pytest.raises(SystemExit) as info:
        wrapped(pre_process=False, post_process=True)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err == "pretrain_gpt.py: error: TransformerEngine layer experts.linear_fc1 (GroupedLinearV2) is stacked\n"


@pytest.fixture
def fake_megatron_training(monkeypatch):
    """A stand-in megatron.training with the names install() patches."""
    import primus_megatron.megatron_lm.plugin as plugin

    args = argparse.Namespace(pipeline_schedule=None, pipeline_chunks=None, pipeline_memory_limit=None,
                              pipeline_costs=None, pipeline_p2p_timeout=600.0, pipeline_profile_steps=3,
                              pipeline_profile_out=None, pipeline_balance=None,
                              num_virtual_stages_per_pipeline_rank=None, num_layers_per_virtual_pipeline_stage=None)
    pkg = types.ModuleType("megatron.training")
    pkg.__path__ = []
    pkg.get_args = lambda: args
    training = types.ModuleType("megatron.training.training")
    training.get_forward_backward_func = lambda *a, **k: "megatron's own"
    training.get_model = lambda provider, *a, **k: ("megatron's get_model", provider)
    initialize = types.ModuleType("megatron.training.initialize")
    seen = []
    initialize.validate_args = lambda a, defaults={}: seen.append(a.num_virtual_stages_per_pipeline_rank)
    utils = types.ModuleType("megatron.training.utils")
    pkg.training, pkg.initialize, pkg.utils = training, initialize, utils
    for name, mod in (("megatron.training", pkg), ("megatron.training.training", training),
                      ("megatron.training.initialize", initialize), ("megatron.training.utils", utils)):
        monkeypatch.setitem(sys.modules, name, mod)
    import megatron

    monkeypatch.setattr(megatron, "training", pkg, raising=False)
    monkeypatch.setattr(plugin, "_PLUGIN", None)
    return args, training, initialize, seen


@pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")
def test_install_is_a_no_op_without_a_schedule_and_idempotent(fake_megatron_training):
    from primus_megatron import megatron_lm
    from primus_megatron.runtime import PipelineRunner

    args, training, initialize, seen = fake_megatron_training
    megatron_lm.install()
    patched = training.get_forward_backward_func
    megatron_lm.install()  # twice: nothing wrapped twice
    assert training.get_forward_backward_func is patched
    assert training.get_forward_backward_func() == "megatron's own"
    assert training.get_model("provider")[1] == "provider"  # untouched provider without a schedule
    initialize.validate_args(args)
    assert seen == [None]

    args.pipeline_schedule = "zbv"
    initialize.validate_args(args)
    assert seen[-1] == 2  # the V needs two virtual stages per rank
    runner = training.get_forward_backward_func()
    assert isinstance(runner, PipelineRunner) and runner.name == "zbv" and runner.chunks == 2
    assert runner.losses_on_last_rank  # Megatron-LM reads losses on the last pipeline rank
    assert training.get_forward_backward_func() is runner  # one runner: train() and every evaluate()
    args.pipeline_schedule, args.num_virtual_stages_per_pipeline_rank = "zb-h1", None
    initialize.validate_args(args)
    assert seen[-1] is None


@pytest.mark.parametrize("schedule", ["zbv", "v-half", "zb-auto"])
def test_a_schedule_that_uses_costs_measures_them_unless_given_or_deterministic(fake_megatron_training, schedule):
    """Re-planned from costs measured over --pipeline-profile-steps; not with --pipeline-costs (planned
    from those), nor under Megatron-LM's --deterministic-mode (a measured plan can differ between launches)."""
    from primus_megatron import megatron_lm

    args, training, initialize, _ = fake_megatron_training
    megatron_lm.install()
    args.pipeline_schedule = schedule
    initialize.validate_args(args)
    runner = training.get_forward_backward_func()
    assert runner.spec.replan and runner.spec.profile_window == (1, 4)
    args.pipeline_costs = "1,2,1,0.05"
    initialize.validate_args(args)
    runner = training.get_forward_backward_func()
    assert not runner.spec.replan and runner.spec.profile_window is None and runner.costs.b == 2
    args.pipeline_costs, args.deterministic_mode = None, True
    initialize.validate_args(args)
    runner = training.get_forward_backward_func()
    assert not runner.spec.replan and runner.spec.profile_window is None and runner.costs is None


def test_patch_applies_to_megatron_lm_and_its_arguments_parse(tmp_path):
    """The patch applies to Megatron-LM at the tag matching the installed megatron-core
    (MEGATRON_LM_PATH, else the shared snapshot: tests/megatron_lm_harness.py) and its argument
    parsing takes our group."""
    import megatron_lm_harness as H

    try:
        work = H.prepare(str(tmp_path))  # unpacked or copied, then patches/apply_patch.sh
    except H.MegatronLMUnavailable as exc:
        pytest.fail(str(exc))
    python = os.environ.get("MEGATRON_LM_PYTHON", sys.executable)
    script = r'''
import os, sys
os.environ.update(WORLD_SIZE="8", RANK="0", CUDA_DEVICE_MAX_CONNECTIONS="1")
import ast; ast.parse(open("pretrain_gpt.py").read())
from primus_megatron import megatron_lm as primus
primus.install()
import megatron.training.utils as u, megatron.training.arguments as a
u.get_device_arch_version = a.get_device_arch_version = lambda: 9  # validate_args asks the GPU; none here
from megatron.training import initialize
argv = ["pretrain_gpt.py", "--num-layers", "16", "--hidden-size", "256", "--num-attention-heads", "4",
            "--seq-length", "128", "--max-position-embeddings", "128", "--micro-batch-size", "1",
            "--global-batch-size", "16", "--pipeline-model-parallel-size", "4", "--tensor-model-parallel-size", "2",
            "--train-iters", "10", "--lr", "1e-4", "--mock-data", "--tokenizer-type", "NullTokenizer",
            "--vocab-size", "128", "--pipeline-schedule"]
for schedule in sys.argv[1:]:  # one interpreter for all (importing Megatron-LM takes ~8 s)
    sys.argv = argv + [schedule]
    args = a.parse_args(primus.extra_args_provider(None))
    # core_v0.16.1 validates from initialize (its own import), core_v0.19.0 from arguments
    (getattr(initialize, "validate_args", None) or a.validate_args)(args, {})
    print("RESULT", args.pipeline_schedule, args.virtual_pipeline_model_parallel_size)
'''
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(work), ROOT]))
    expected = {"zbv": "2", "zb-h1": "None", "v-min": "2"}
    out = subprocess.run([python, "-W", "ignore", "-c", script, *expected], cwd=work, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = [line.split()[1:] for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert got == [[schedule, vp] for schedule, vp in expected.items()], out.stdout[-2000:]


def _finish_body(rank: int, case: dict):
    import torch.distributed as dist
    from megatron.core import parallel_state

    from primus_megatron.megatron_lm import finish, plugin

    seen = []
    for cpu_mode in (False, True):  # a GPU run first: it must leave the groups alone
        plugin._PLUGIN = plugin.Plugin(cpu_mode)
        finish()
        seen.append((dist.is_initialized(), parallel_state.model_parallel_is_initialized()))
    return seen


@pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")
def test_finish_shuts_gloo_down_in_cpu_mode_only():
    """pretrain_gpt.py calls finish() after pretrain(): in CPU mode every gloo group and
    megatron's references to them are gone before the interpreter exits (left to the exit,
    gloo aborts a finished rank now and then); GPU runs are left as Megatron-LM leaves them."""
    from primus_megatron.runtime.local_ranks import run_ranks

    results = run_ranks(_finish_body, {"pp": 2}, 2, timeout_s=120)
    assert results == [[(True, True), (False, False)]] * 2


@pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")
def test_the_runner_takes_the_pending_validation_of_megatron_lms_post_validated_optimizer(fake_megatron_training,
                                                                                        monkeypatch):
    """--optimizer-post-validation: the optimizer Megatron-LM sets up is wrapped, and the runner's
    validation source hands over its pending validation (once), nothing before it is set up."""
    from primus_megatron import megatron_lm
    from primus_megatron.megatron_lm import post_validation

    class Wrapped:
        def __init__(self, optimizer, model, scheduler, args):
            self.pending = [f"validate {optimizer}"]

        def take_validation(self):
            return self.pending.pop() if self.pending else None

    monkeypatch.setattr(post_validation, "MegatronLMPostValidation", Wrapped)
    args, training, initialize, _ = fake_megatron_training
    training.setup_model_and_optimizer = lambda *a, **k: (["chunk"], "adam", "scheduler")
    training.train_step = training.training_log = lambda *a, **k: None
    megatron_lm.install()
    args.pipeline_schedule, args.optimizer_post_validation = "zb-h1", True
    initialize.validate_args(args)
    runner = training.get_forward_backward_func()
    assert runner.validation() is None  # no optimizer yet
    _, optimizer, _ = training.setup_model_and_optimizer()
    assert isinstance(optimizer, Wrapped)
    assert runner.validation() == "validate adam" and runner.validation() is None


@pytest.mark.parametrize("precision", ["--bf16", "--fp16", None])
def test_cpu_mode_turns_off_the_softmax_kernel_and_the_data_loader_workers_in_one_line(precision, capsys,
                                                                                       monkeypatch):
    """A dry run of a GPU command line keeps Megatron-LM's defaults: masked-softmax fusion on (with
    16-bit inputs megatron's softmax imports the CUDA-only scaled_masked_softmax_cuda; in fp32 it never
    does, so fp32 runs keep the option) and 2 DataLoader workers (forked from a rank running gloo's
    threads: turned to 0). Said once, on rank 0, naming Megatron-LM's options."""
    from primus_megatron.megatron_lm.plugin import _cpu_args

    monkeypatch.setenv("RANK", "0")
    args = argparse.Namespace(transformer_impl="transformer_engine", position_embedding_type="learned_absolute",
                              masked_softmax_fusion=True, num_workers=2, distributed_backend="nccl",
                              no_persist_layer_norm=False, fp16=precision == "--fp16", bf16=precision == "--bf16")
    _cpu_args(args)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("CPU mode: "), lines
    assert args.num_workers == 0 and "--num-workers 0 (was 2: DataLoader workers forked" in lines[0]
    assert args.masked_softmax_fusion is (precision is None)
    assert ("--no-masked-softmax-fusion" in lines[0]) is (precision is not None)
    assert args.transformer_impl == "local" and args.distributed_backend == "gloo" and args.cpu is True

    args.num_workers, args.masked_softmax_fusion = 0, False  # what the user gave: nothing to say about either
    _cpu_args(args)
    assert capsys.readouterr().out == ""


@pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")
def test_install_without_our_argument_group_is_a_half_applied_patch(fake_megatron_training, capsys, monkeypatch):
    """pretrain_gpt.py calling install() but parsing without our extra_args_provider (a patch applied
    hunk by hunk, one failing): refused in one sentence at validation, exit status 2, naming the cure."""
    from primus_megatron import megatron_lm

    args, _, initialize, seen = fake_megatron_training
    monkeypatch.setenv("RANK", "0")
    megatron_lm.install()
    del args.pipeline_schedule
    with pytest.raises(SystemExit) as exc:
        initialize.validate_args(args)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and seen == [] and err.count("\n") == 1, err
    assert "half-applied" in err and "patches/apply_patch.sh" in err
