"""Megatron-LM's own pretrain_gpt.py with --pipeline-schedule, trained on CPU ranks.

Megatron-LM at tag core_v0.16.1 (the shared snapshot, or MEGATRON_LM_PATH) is patched
with patches/ and run with `--cpu` (gloo), mock data, a tiny GPT and dropout 0
(tests/megatron_lm_harness.py: ranks forked from one process that imported pretrain_gpt.py;
the bf16 dry run under torchrun, and training under srun + torchrun in test_slurm.py). Every run
starts from one shared checkpoint (Megatron-LM's initialisation seeds each pipeline rank
differently, so weights would otherwise depend on the placement) loaded with --finetune, and
the numbers Megatron-LM logs (lm loss and grad norm of every iteration, skipped iterations,
validation losses) must be identical, as printed, to those of Megatron's own schedule:

* pp=2, tied embeddings, gradient-accumulation fusion on (Megatron-LM's default; on
  CPU through compat.cpu's stand-in for apex's kernel): one schedule of each kind,
  zb-auto, and `auto` (chosen before the model is built);
* DP=2 x PP=2 with --overlap-grad-reduce, --use-distributed-optimizer and
  --overlap-param-gather (untied embeddings: V with overlapped reduce needs them), zbv
  re-planned from the costs measured at iteration 2;
* a checkpoint saved under 1f1b resumed under zbv, and back (too few steps left for
  --pipeline-profile-out: said at the end);
* --optimizer-post-validation (steps rolled back and redone): the same lines;
* a bad schedule option: one sentence, exit status 2 (first CI leg only: our plugin refuses it in
  Megatron-LM's argument checks before megatron-core builds anything; Makefile PY312_DESELECT);
* a user's bf16 dry run under torchrun with Megatron-LM's defaults (masked-softmax fusion,
  --num-workers 2): zb-h1 against megatron's own 1F1B, also bf16 (forked ranks with torchrun's
  environment on the second CI leg: PRIMUS_TEST_TORCHRUN=0, tests/megatron_lm_harness.py).

Runs take 3-10 s each once pretrain_gpt.py is imported (15-30 s under torchrun, mostly
imports); `-m "not megatron_lm"` leaves them out.
"""
from __future__ import annotations

import functools
import math
import os
import re

import pytest

import megatron_lm_harness as H

pytestmark = pytest.mark.megatron_lm

ITERS = 4
PP2 = ["--pipeline-model-parallel-size", "2", "--global-batch-size", "8", "--train-iters", str(ITERS),
       "--eval-interval", "2"]  # 4 microbatches
DP2PP2 = ["--pipeline-model-parallel-size", "2", "--global-batch-size", "16", "--train-iters", "3",
          "--eval-interval", "3", "--untie-embeddings-and-output-weights", "--overlap-grad-reduce",
          "--use-distributed-optimizer", "--overlap-param-gather"]  # 4 microbatches per data-parallel rank
# One schedule of each kind Megatron-LM's loop meets (one backward op; a split backward with
# deferred W; V placement), the cost-driven one re-planned mid-run, and `auto`. zb-h2, v-half and
# v-min take the same paths through Megatron-LM (only the op order differs), and every schedule's
# order is checked against megatron-core's 1F1B in test_runtime_parity.py / test_production_matrix.py.
SCHEDULES = ["1f1b", "zb-h1", "zbv", "zb-auto", "auto"]
# zb-auto: profiled at iteration 2, planned again from the measured costs for iterations 3 and 4. zbv keeps
# its equal-cost plan here: a plan from measured costs differs between launches, and with tied embeddings
# (rank 0 holds both) the last printed digit can follow it (docs/schedules.md); zbv re-plans in the DP2xPP2 runs (untied)
FIXED_ZBV = ["--pipeline-profile-steps", "0"]
EXTRA = {"zb-auto": ["--pipeline-profile-steps", "1"], "zbv": FIXED_ZBV}
# Megatron-LM's batch-size ramp-up (sample-based training): global batch 4, 6, then 8 of micro batch 2, i.e.
# 2, 3, 4, 4 microbatches over the 4 iterations of 26 samples. core_v0.16.1: --rampup-batch-size START INCREMENT
# SAMPLES (8 samples over 2 increments); core_v0.19.0 ignores that option (deprecated: megatron-core's
# num_microbatches_calculator) for --step-batch-size-schedule, thresholds in tokens of --seq-length 32 (4 samples:
# 128 tokens, 10 samples: 320), which replaces --global-batch-size
RAMPUP = ["--pipeline-model-parallel-size", "2", "--train-samples", "26", "--eval-interval", "2"]
RAMPUP_BY_TAG = {"core_v0.16.1": ["--global-batch-size", "8", "--rampup-batch-size", "4", "2", "8"],
                 "core_v0.19.0": ["--step-batch-size-schedule", "0:4 128:6 320:8"]}
RAMPUP_COUNTS = [2, 3, 4, 4]
REPLANNED = re.compile(r"^(re-planned \S+ from the measured costs|kept the running \S+ plan)", re.M)
SAVES_AT = 2  # the runs resumed from save at this iteration


@pytest.fixture(scope="module")
def tree(megatron_lm_tree):
    return megatron_lm_tree  # one unpack per session (conftest.py)


@pytest.fixture(scope="module")
def runs(tree, tmp_path_factory):
    """Runs by configuration, each made once per module (tests share them)."""
    work = tmp_path_factory.mktemp("megatron-lm-runs")

    @functools.lru_cache(maxsize=None)
    def start(untied: bool) -> str:
        """The shared starting checkpoint: one iteration of Megatron's own schedule, saved."""
        path = str(work / ("start-untied" if untied else "start-tied"))
        H.run(tree, 2, ["--pipeline-model-parallel-size", "2", "--global-batch-size", "8", "--train-iters", "1",
                        "--eval-interval", "1000", "--save", path, "--save-interval", "1"]
              + (["--untie-embeddings-and-output-weights"] if untied else []))
        return path

    @functools.lru_cache(maxsize=None)
    def pp2(schedule):
        args = PP2 + ["--load", start(False), "--finetune"]
        if schedule in ("1f1b", "zbv"):  # resumed from, under the other schedule
            args += ["--save", str(work / f"pp2-{schedule}"), "--save-interval", str(SAVES_AT)]
        if schedule is None:  # Megatron's own schedule; CPU mode from gloo without CUDA (no --cpu)
            return H.run(tree, 2, args + ["--distributed-backend", "gloo"], cpu_flag=False)
        return H.run(tree, 2, args + ["--pipeline-schedule", schedule] + EXTRA.get(schedule, []))

    @functools.lru_cache(maxsize=None)
    def dp2pp2(schedule):
        args = DP2PP2 + ["--load", start(True), "--finetune"]
        # ours re-planned from the costs measured at iteration 2 (untied: the numbers cannot depend on the plan)
        return H.run(tree, 4, args + (["--pipeline-schedule", schedule, "--pipeline-profile-steps", "1"]
                                      if schedule else []))

    @functools.lru_cache(maxsize=None)
    def rampup(schedule, *extra):
        args = RAMPUP + RAMPUP_BY_TAG[H.matching_tag()] + ["--load", start(False), "--finetune"]
        return H.run(tree, 2, args + (["--pipeline-schedule", schedule, *extra] if schedule else []))

    class Runs:
        pass

    r = Runs()
    r.start, r.pp2, r.dp2pp2, r.rampup, r.work = start, pp2, dp2pp2, rampup, work
    return r


def _check_trained(result: H.Result, iterations: int) -> None:
    assert sorted(result.losses) == list(range(1, iterations + 1)), H.tail(result.log)
    assert all(v is not None for v in result.grad_norms.values()), result.grad_norms
    assert len({result.losses[1], result.losses[iterations]}) == 2, "the loss did not change while training"
    assert ("validation set" in {w for _, w in result.validation}) and ("test set" in {w for _, w in result.validation})


def _arg(result: H.Result, name: str) -> str:
    m = re.search(rf"^\s+{name} \.+ (\S+)", result.log, re.M)
    assert m, f"{name} not in Megatron-LM's argument dump"
    return m.group(1)


def test_megatron_own_schedule_on_cpu(runs):
    """The baseline: Megatron-LM's loop with its own 1F1B, CPU mode chosen by gloo without CUDA."""
    own = runs.pp2(None)
    _check_trained(own, ITERS)
    assert _arg(own, "gradient_accumulation_fusion") == "True"  # kept on: compat.cpu's kernel stand-in
    assert _arg(own, "pipeline_schedule") == "None"
    assert sorted(own.validation) == [(2, ""), (4, ""), (4, "test set"), (4, "validation set")]


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_pp2_schedule_trains_exactly_as_megatron(runs, schedule):
    """pp=2, tied embeddings (under V both ends on rank 0), fusion on: identical numbers."""
    own, ours = runs.pp2(None), runs.pp2(schedule)
    _check_trained(ours, ITERS)
    # the arguments keep what the user gave: the choice lives in the run's PipelineSpec, not in args
    assert _arg(ours, "pipeline_schedule") == schedule
    if schedule == "auto":  # chosen before the model is built (equal costs here), then trained as that one
        chosen = re.search(r"^auto: chose (\S+)$", ours.log, re.M)
        assert chosen and chosen.group(1) != "auto", H.tail(ours.log)
        schedule = chosen.group(1)
        assert ours.numbers() == runs.pp2(schedule).numbers(), "auto did not train exactly as the schedule it chose"
    if schedule in ("zbv", "v-half", "v-min"):
        assert _arg(ours, "virtual_pipeline_model_parallel_size") == "2"
    if schedule in SCHEDULES:
        assert ours.numbers() == own.numbers()
    else:  # auto's choice with several chunks per rank in the loop layout (interleaved-zb at equal costs): the
        # gradient norm for clipping is summed over a rank's chunks in their order, about one float32 rounding
        # step from 1F1B's (tests/test_production_matrix.py measures <= 9e-8 relative), and the clipped update
        # can move the last printed digit of a later loss; every gradient itself is compared bitwise there
        _assert_close(ours.numbers(), own.numbers(), rel=1e-6)
    if schedule == "zb-auto":
        assert REPLANNED.search(ours.log), H.tail(ours.log)


def _assert_close(got: dict, want: dict, *, rel: float) -> None:
    """Megatron-LM's logged numbers equal in everything but the value, each value within `rel`."""
    assert got.keys() == want.keys() and got["validation"].keys() == want["validation"].keys(), (got, want)
    pairs = [(k, g, w) for k in ("lm loss", "grad norm", "skipped") for g, w in zip(got[k], want[k], strict=True)]
    pairs += [(k, got["validation"][k], want["validation"][k]) for k in want["validation"]]
    for what, g, w in pairs:
        if g == w:
            continue
        g, w = (float(str(x).split()[-1]) for x in (g, w))
        assert abs(g - w) <= rel * abs(w), f"{what}: {g} vs megatron's {w}"


# a V schedule (rank 0 holds both ends; the harder case for DDP's buckets and the gathers); every
# schedule with these settings against megatron's 1F1B in test_production_matrix.py
@pytest.mark.parametrize("schedule", [None, "zbv"])
def test_dp2_pp2_overlap_distributed_optimizer_fusion(runs, schedule):
    """DP=2 x PP=2: overlapped grad reduce, distributed optimizer, overlapped param
    gather and gradient-accumulation fusion, as Megatron-LM users run it."""
    ours = runs.dp2pp2(schedule)
    _check_trained(ours, 3)
    for name in ("overlap_grad_reduce", "use_distributed_optimizer", "overlap_param_gather",
                 "gradient_accumulation_fusion"):
        assert _arg(ours, name) == "True", name
    assert _arg(ours, "data_parallel_size") == "2"
    if schedule is not None:
        assert ours.numbers() == runs.dp2pp2(None).numbers()
        assert REPLANNED.search(ours.log), H.tail(ours.log)  # profiled with DDP's overlapped reduce and fusion on


@pytest.mark.parametrize("saved_under, resumed_under", [("1f1b", "zbv"), ("zbv", "1f1b")])
def test_resume_across_schedules(runs, tree, saved_under, resumed_under):
    """A checkpoint Megatron-LM saved under one schedule (iteration 2) resumed under the
    other: iterations 3 and 4 as in the uninterrupted run (grad norms, i.e. the parameters
    after steps 2 and 3; validation and test losses after step 4; the losses).

    Megatron-LM's first log line after a resume that is not the resumed iteration itself
    averages the loss over the iterations since the resume (its own schedule does the same):
    iteration 4's logged loss is the mean of iterations 3 and 4. The resumed run asks for a
    profile it has too few steps left to measure: it writes none and says why at its end."""
    uninterrupted = runs.pp2(saved_under)
    # fewer steps left than the profile window needs (1 warm-up + 2 measured): no profile, said at the end
    profile = str(runs.work / f"never-{saved_under}-{resumed_under}.json")
    resumed = H.run(tree, 2, PP2 + ["--load", str(runs.work / f"pp2-{saved_under}"), "--ckpt-step", str(SAVES_AT),
                                    "--pipeline-schedule", resumed_under, "--pipeline-profile-out", profile,
                                    "--pipeline-profile-steps", "2"])
    assert f"successfully loaded checkpoint from {runs.work / f'pp2-{saved_under}'}" in resumed.log
    said = [line for line in resumed.log.splitlines() if line.startswith(f"--pipeline-profile-out {profile}")]
    assert len(said) == 1 and "was not written: the profile needs 3 training steps" in said[0] \
        and "this run ran 2;" in said[0], H.tail(resumed.log)
    assert not os.path.exists(profile)
    assert sorted(resumed.losses) == list(range(SAVES_AT + 1, ITERS + 1)), H.tail(resumed.log)
    after = range(SAVES_AT + 1, ITERS + 1)
    got, want = resumed.numbers(after), uninterrupted.numbers(after)
    assert got["grad norm"] == want["grad norm"] and got["skipped"] == want["skipped"]
    assert got["validation"] == want["validation"] and len(got["validation"]) == 3
    l3, l4 = (float(x) for x in want["lm loss"])
    assert got["lm loss"][0] == want["lm loss"][0]
    assert float(got["lm loss"][1]) == pytest.approx((l3 + l4) / 2, abs=2e-6)


def test_post_validation_trains_as_the_synchronous_step(runs, tree):
    """--optimizer-post-validation in Megatron-LM's loop (zbv, clipping at 1.0 so that steps
    are rolled back and redone): the same log lines as the synchronous step."""
    sync = runs.pp2("zbv")
    post = H.run(tree, 2, PP2 + ["--load", runs.start(False), "--finetune", "--pipeline-schedule", "zbv",
                                 "--optimizer-post-validation", *FIXED_ZBV])
    m = re.search(r"post-validation: (\d+) steps, (\d+) taken optimistically, (\d+) rolled back, (\d+) redone",
                  post.log)
    assert m, H.tail(post.log)
    steps, optimistic, rolled_back, redone = map(int, m.groups())
    assert steps == ITERS and optimistic >= 1 and rolled_back >= 1 and redone >= 1, m.group(0)
    assert post.numbers() == sync.numbers()


@pytest.mark.parametrize("schedule, extra", [("zb-h1", ("--optimizer-post-validation", *FIXED_ZBV)),
                                             ("zbv", tuple(FIXED_ZBV)), ("zb-auto", ("--pipeline-profile-steps", "1"))])
def test_a_microbatch_count_that_changes_every_step(runs, schedule, extra):
    """--rampup-batch-size: megatron's get_num_microbatches() changes between steps (2, 3, 4, 4). Each schedule logs
    megatron's own 1F1B's numbers; each new count is planned and checked once before its first step (said from the
    second count on); the post-validated step (zb-h1) and the profile window with its re-plan (zb-auto, profiled at
    iteration 2, a count of 3) run across the changes."""
    own, ours = runs.rampup(None), runs.rampup(schedule, *extra)
    assert sorted(own.losses) == list(range(1, len(RAMPUP_COUNTS) + 1)), H.tail(own.log)
    batches = [int(b) for b in re.findall(r"iteration\s+\d+/\s*\d+ \|.*?global batch size:\s+(\d+) \|", own.log)]
    assert batches == [2 * m for m in RAMPUP_COUNTS], batches  # megatron's own counts change (micro batch 2)
    assert ours.numbers() == own.numbers()
    said = [int(n) for n in re.findall(rf"primus_megatron: {schedule}: microbatch count (\d+) \(pp 2\) planned and "
                                       r"checked before its first step", ours.log)]
    if schedule == "zb-auto":  # the re-plan checks the plans of the counts met so far anew
        assert REPLANNED.search(ours.log) and set(said) == set(RAMPUP_COUNTS[1:]), (said, H.tail(ours.log))
    else:
        assert said == sorted(set(RAMPUP_COUNTS[1:])), (said, H.tail(ours.log))
    if "--optimizer-post-validation" in extra:
        m = re.search(r"post-validation: (\d+) steps", ours.log)
        assert m and int(m.group(1)) == len(RAMPUP_COUNTS), H.tail(ours.log)


def test_a_bad_schedule_option_gets_one_sentence(tree):
    """End to end once (every refusal in-process through the same patched validate_args:
    test_reliability_config.py); one process is enough: the options are refused before
    Megatron-LM checks the world size. A rank forked with torchrun's environment, not torchrun (until
    2026-11-29: torchrun and its rank importing Megatron-LM for one sentence, about 15 s of CPU): what
    torchrun adds is its own report of a failed rank, torch's, with exit status 1 for argparse's 2; a
    user's torchrun launch of pretrain_gpt.py is the bf16 dry run below and test_slurm.py's."""
    needle = "did you mean 'zbv'"
    result = H.run(tree, 1, ["--pipeline-model-parallel-size", "2", "--global-batch-size", "8", "--train-iters", "1",
                             "--pipeline-schedule", "zbvv"], expect_ok=False, timeout=180)
    assert result.returncode == 2, H.tail(result.log)  # argparse's status
    errors = [line for line in result.log.splitlines() if line.startswith("pretrain_gpt.py: error:")]
    assert len(errors) == 1 and needle in errors[0], H.tail(result.log)
    assert 'pretrain_gpt.py", line' not in result.log and "megatron/training" not in result.log  # no traceback


def test_a_bf16_dry_run_through_torchrun_keeps_megatron_defaults(tree):
    """A user's dry run of a GPU command line (issue 55): `torchrun pretrain_gpt.py --cpu --bf16` with
    local layers and Megatron-LM's defaults (masked-softmax fusion on, --num-workers 2, persistent
    layer norm) trains under zb-h1 as megatron's own 1F1B does. zb-h1 places stages as 1F1B does, so
    Megatron-LM initialises the same weights: no shared checkpoint. CPU mode turns off the softmax
    kernel (CUDA only: the first bf16 forward died importing it) and the DataLoader workers
    (megatron_lm/cpu_mode.py WORKERS_WHY), in one log line."""
    args = PP2 + ["--bf16"]
    own = H.run(tree, 2, args + ["--distributed-backend", "gloo"], cpu_flag=False, megatron_defaults=True)
    ours = H.run(tree, 2, args + ["--pipeline-schedule", "zb-h1"], launcher="torchrun", megatron_defaults=True)
    _check_trained(ours, ITERS)
    said = [line for line in ours.log.splitlines() if line.startswith("CPU mode:")]
    assert len(said) == 1, said
    assert "--no-masked-softmax-fusion" in said[0] and "--num-workers 0 (was 2:" in said[0], said[0]
    for name, value in (("bf16", "True"), ("masked_softmax_fusion", "False"), ("num_workers", "0"),
                        ("transformer_impl", "local")):
        assert _arg(ours, name) == value, name
    losses = [float(ours.losses[i]) for i in range(1, ITERS + 1)]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0], losses
    assert ours.numbers() == own.numbers()


def test_a_dry_run_says_what_the_gpu_run_would_refuse_and_trains_on(tree):
    """Issue 59: `pretrain_gpt.py --cpu` of a command line the GPU run refuses under zbv (TransformerEngine
    layers, Megatron-LM's default, with the blockwise FP8 recipe and TP communication overlap) and of one
    microbatch per step on 2 pipeline ranks. The dry run says each refusal once, on one line, switches both
    off (they need a GPU), warns once of the bubble one microbatch costs, and trains: no traceback."""
    said = "dry run (--cpu): the GPU run would refuse this command line: "
    result = H.run(tree, 2, ["--pipeline-model-parallel-size", "2", "--global-batch-size", "2", "--train-iters", "2",
                             "--eval-interval", "2", "--pipeline-schedule", "zbv", *FIXED_ZBV, "--transformer-impl",
                             "transformer_engine", "--fp8-format", "hybrid", "--fp8-recipe", "blockwise",
                             "--tp-comm-overlap"])
    lines = result.log.splitlines()
    refused = [line[len(said):] for line in lines if line.startswith(said)]
    assert [r.split(" cannot be used with --pipeline-schedule zbv: ")[0] for r in refused] == [
        "--fp8-format hybrid", "--tp-comm-overlap"], H.tail(result.log)
    assert "blockwise FP8 recipe" in refused[0]
    warned = [line for line in lines if line.startswith("warning: ")]
    assert len(warned) == 1 and warned[0].startswith("warning: 1 microbatch per step on 2 pipeline ranks: zbv leaves "
                                                     "the ranks idle"), warned
    for name, value in (("transformer_impl", "local"), ("fp8", "None"), ("tp_comm_overlap", "False")):
        assert _arg(result, name) == value, name
    losses = [float(result.losses[i]) for i in (1, 2)]
    assert all(math.isfinite(x) for x in losses), losses
    assert "Traceback" not in result.log
