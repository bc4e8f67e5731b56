"""examples/pretrain_gpt.py: the same run under each kind of schedule, evaluation,
the executed-schedule picture, checkpoints that resume under another schedule
and pipeline size, and arguments refused before anything starts.

Coverage (2026-11-29, the suite's CPU budget): the training loop's tests run one schedule of each kind
the runtime executes differently, not every registered one: 1f1b (one backward op), zb-h1 (deferred W),
interleaved-zb (two chunks on the loop placement), zbv (V placement) and dualpipev (overlapped F&B
pairs); the Llama-style and MoE models the same kinds less the ones their options do not touch (one V
schedule, not two or three). Every schedule stays checked against megatron's own 1F1B in
test_runtime_parity.py (to its tolerance, 1e-5 relative) and the production matrix (bitwise); what these add (dropout masks, evaluation, the
optimizer, the model options) goes through the same runtime path for every schedule of a kind."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import megatron_reference as ref
import pipeline_harness as H
from primus_megatron import schedules as S
from schedule_subset import under_test

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "pretrain_gpt.py")


@pytest.fixture(scope="module")
def dataset(corpus_dataset):
    return corpus_dataset  # built once per session (conftest.py)


def model_args(dataset, pp, *extra):
    return ["--cpu", "--data-path", dataset, "--num-layers", "8", "--hidden-size", "32", "--num-attention-heads", "4",
            "--seq-length", "32", "--micro-batch-size", "2", "--global-batch-size", "8", "--lr", "2e-3",
            "--seed", "11", "--pipeline-model-parallel-size", str(pp), "--pipeline-p2p-timeout", "60", *extra]


EVERY = under_test(["1f1b", "zb-h1", "interleaved-zb", "zbv", "dualpipev"])  # one of each kind (module doc)


@pytest.fixture(scope="module")
def every_schedule(dataset, tmp_path_factory):
    """pp=2, 3 iterations with dropout 0.1 and an evaluation, under each kind of
    schedule and under megatron-core's own 1F1B (no --pipeline-schedule)."""
    timeline = str(tmp_path_factory.mktemp("timeline") / "zbv.png")
    runs = [model_args(dataset, 2, "--train-iters", "3", "--eval-interval", "3", "--eval-iters", "1",
                       "--pipeline-schedule", s, *(["--timeline", timeline] if s == "zbv" else []))
            for s in EVERY]
    # auto profiles one step (not the default three) of each schedule it measures: what the test reads is
    # that it chose, on every rank alike, from measured costs, and trained megatron's losses after it
    runs.append(model_args(dataset, 2, "--train-iters", "3", "--eval-interval", "3", "--eval-iters", "1",
                           "--pipeline-schedule", "auto", "--pipeline-profile-steps", "1"))
    runs.append(model_args(dataset, 2, "--train-iters", "3", "--eval-interval", "3", "--eval-iters", "1"))
    results = H.run_ranks({"body": H.train_body, "pp": 2, "runs": runs}, 2, timeout_s=900)
    return results, timeline


def test_each_kind_of_schedule_trains_identically(every_schedule):
    results, _ = every_schedule
    megatron = results[0][-1]  # rank 0 sees the reduced losses
    assert len(megatron["losses"]) == 3 and all(x == x for x in megatron["losses"])
    for name, run in zip(EVERY + ["auto"], results[0][:-1]):
        torch.testing.assert_close(torch.tensor(run["losses"]), torch.tensor(megatron["losses"]), rtol=1e-5, atol=0,
                                   msg=lambda m: f"{name}: {m}")
        torch.testing.assert_close(torch.tensor(run["eval"]), torch.tensor(megatron["eval"]), rtol=1e-5, atol=0,
                                   msg=lambda m: f"{name} evaluation: {m}")
    assert megatron["losses"][-1] < megatron["losses"][0], "the loss goes down"


# a Llama/Qwen-style model (issue 43): RoPE, SwiGLU, RMSNorm, grouped-query attention, no biases, untied
LLAMA = ["--position-embedding-type", "rope", "--swiglu", "--ffn-hidden-size", "64", "--normalization", "RMSNorm",
         "--group-query-attention", "--num-query-groups", "2", "--disable-bias-linear",
         "--untie-embeddings-and-output-weights", "--qk-layernorm"]
LLAMA_SCHEDULES = under_test(["zb-h1", "zbv", "interleaved-1f1b"])


@pytest.fixture(scope="module")
def llama_runs(dataset):
    runs = [model_args(dataset, 2, "--train-iters", "3", "--eval-interval", "3", "--eval-iters", "1", *LLAMA,
                       "--pipeline-schedule", s) for s in LLAMA_SCHEDULES]
    runs.append(model_args(dataset, 2, "--train-iters", "3", "--eval-interval", "3", "--eval-iters", "1", *LLAMA))
    return H.run_ranks({"body": H.train_body, "pp": 2, "runs": runs}, 2, timeout_s=900)


def test_llama_style_model_trains_identically_under_every_schedule(llama_runs):
    """The same model options as Megatron-LM (names and defaults): losses and evaluation equal
    megatron's own 1F1B under loop and V placements (RoPE per chunk, both ends on rank 0 under V)."""
    megatron = llama_runs[0][-1]
    assert len(megatron["losses"]) == 3 and megatron["losses"][-1] < megatron["losses"][0], megatron["losses"]
    for name, run in zip(LLAMA_SCHEDULES, llama_runs[0][:-1]):
        torch.testing.assert_close(torch.tensor(run["losses"]), torch.tensor(megatron["losses"]), rtol=1e-5, atol=0,
                                   msg=lambda m: f"{name}: {m}")
        torch.testing.assert_close(torch.tensor(run["eval"]), torch.tensor(megatron["eval"]), rtol=1e-5, atol=0,
                                   msg=lambda m: f"{name} evaluation: {m}")


# a DeepSeek/Qwen-MoE-style model on local layers: routed experts (top 2 of 4, expert parallel over the 2
# data-parallel ranks) and a shared expert, the aux loss, with the Llama-style attention and norms
MOE = ["--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "32",
       "--moe-shared-expert-intermediate-size", "48", "--moe-aux-loss-coeff", "1e-2",
       "--moe-token-dispatcher-type", "alltoall", "--expert-model-parallel-size", "2"]
MOE_SCHEDULES = under_test(["zb-h1", "zbv"])


def test_moe_model_trains_identically_under_every_schedule(dataset):
    """4 ranks (pp=2 x dp=2, the experts split over dp): losses and evaluation equal megatron's own
    1F1B's, the experts' weight gradients deferred to W like every other linear layer's."""
    runs = [model_args(dataset, 2, "--train-iters", "3", "--eval-interval", "3", "--eval-iters", "1", "--global-batch-size",
                       "16", *LLAMA, *MOE, "--pipeline-schedule", s) for s in MOE_SCHEDULES]
    runs.append(model_args(dataset, 2, "--train-iters", "3", "--eval-interval", "3", "--eval-iters", "1",
                           "--global-batch-size", "16", *LLAMA, *MOE))
    results = H.run_ranks({"body": H.train_body, "pp": 2, "runs": runs, "return_params": True}, 4, timeout_s=900)
    megatron = results[0][-1]
    assert len(megatron["losses"]) == 3 and megatron["losses"][-1] < megatron["losses"][0], megatron["losses"]
    names = set(megatron["params"])  # rank 0: data-parallel rank 0, expert-parallel rank 0
    for part in ("mlp.router.weight", "mlp.experts.local_experts.1.linear_fc1.weight", "mlp.shared_experts.linear_fc2"):
        assert any(part in n for n in names), f"no {part} among {sorted(names)}"
    assert not any("local_experts.2." in n for n in names), f"expert parallelism did not split the experts: {sorted(names)}"
    # the other expert-parallel rank's experts carry their global index (each expert its own initial weights)
    assert any(".local_experts.3." in n for rank in results for n in rank[-1]["params"])
    for name, run in zip(MOE_SCHEDULES, results[0][:-1]):
        torch.testing.assert_close(torch.tensor(run["losses"]), torch.tensor(megatron["losses"]), rtol=1e-5, atol=0,
                                   msg=lambda m: f"{name}: {m}")
        torch.testing.assert_close(torch.tensor(run["eval"]), torch.tensor(megatron["eval"]), rtol=1e-5, atol=0,
                                   msg=lambda m: f"{name} evaluation: {m}")


def test_auto_trains_with_one_registered_schedule_on_every_rank(every_schedule):
    results, _ = every_schedule
    chosen = {per_rank[len(EVERY)]["schedule"] for per_rank in results}
    # resolved to a registered schedule (with PRIMUS_TEST_SCHEDULES, maybe one not run here), the same everywhere
    assert len(chosen) == 1 and chosen <= set(S.names()) - {"auto"}, chosen
    # it also profiled 1f1b on the same stages: the costs it chose on time a BW op as measured
    costs = results[0][len(EVERY)]["planned_costs"]
    assert costs.bw is not None and costs.bw != pytest.approx([b + w for b, w in zip(costs.b, costs.w)])


def test_timeline_picture_and_trace_are_written(every_schedule):
    _, timeline = every_schedule
    with open(timeline, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    import json

    with open(timeline[:-4] + ".json") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    assert events, "the trace has the executed ops"
    kinds = {e["name"][0] for e in events}
    assert {"F", "B", "W"} <= kinds


def _logged_panels(log: str) -> list:
    """The log's line per picture panel (after 'schedule of iteration N, one line per panel ...'), each
    with its continued lines joined."""
    lines = log.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("schedule of iteration "))
    panels = []
    for line in lines[start + 1:]:
        if line.startswith("    "):
            panels[-1] += " " + line.strip()
        elif line.startswith("  "):
            panels.append(line.strip())
        else:
            return panels
    return panels


@pytest.mark.parametrize("one_core", [True, False], ids=["ranks-share-a-core", "a-core-each"])
def test_demo_picture_shows_plan_over_measurement(dataset, tmp_path, one_core):
    """The picture of the executed iteration: the plan simulated from the run's op times, what ran (where
    ranks time-share a core, replayed from each op's CPU time, which no wait for a core can lengthen: it
    ends no later than the wall clock) and 1F1B from the same op times, on one time axis in ms, each
    title one bubble figure; where ranks time-share a core, the wall clock below on an axis of its own
    with a note saying why. The log says the same numbers, one panel per line, in lines of at most 100
    columns. A step of 1 microbatch on 2 pipeline ranks warns once of its bubble."""
    import re

    if not one_core and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 cores for one core per rank")
    picture = str(tmp_path / "demo.svg")
    runs = [model_args(dataset, 2, "--train-iters", "2", "--pipeline-schedule", "zbv", "--timeline", picture)]
    if one_core:  # one more short run on the same ranks: one microbatch per step
        runs.append(model_args(dataset, 2, "--train-iters", "1", "--global-batch-size", "2", "--pipeline-schedule",
                               "zbv"))
    logs = [r["log"] for r in H.run_ranks({"body": H.train_body, "pp": 2, "runs": runs, "one_core": one_core,
                                           "capture_log": True}, 2, timeout_s=600)[0]]
    svg = open(picture, encoding="utf-8").read()
    titles = re.findall(r">([^<>]*: [0-9]+ ms, bubble [0-9.]+%[^<>]*)<", svg)
    what = "op CPU times" if one_core else "op times"
    assert len(titles) == (4 if one_core else 3), titles
    assert titles[0].startswith(f"zbv as planned from this run's {what}: "), titles
    assert titles[1].startswith("zbv as it ran" + (", each op taking the CPU time it used" if one_core else ":"))
    assert titles[2].startswith(f"1F1B (megatron's) from the same {what}: "), titles
    ms = [float(re.search(r": ([0-9]+) ms, bubble", t).group(1)) for t in titles]
    gain = float(re.search(r"zbv's plan ([0-9.]+)x as fast$", titles[2]).group(1))
    assert gain == pytest.approx(ms[2] / ms[0], rel=0.02), (gain, ms)  # whole ms in the titles
    assert all(t.count("bubble") == 1 for t in titles)
    assert ("time (ms), an axis of its own" in svg) == one_core
    assert ("gaps are mostly the operating system switching between ranks" in svg) == one_core
    if one_core:
        assert titles[3].startswith("as it ran on the wall clock, 2 ranks time-sharing 1 core: "), titles
        assert 0 < ms[1] <= ms[3], titles
    assert _logged_panels(logs[0]) == titles and f"picture: {picture}" in logs[0]
    long = [line for line in logs[0].splitlines() if len(line) > 100 and " " in line.strip()]
    assert not long, long
    warned = [line for line in "".join(logs).splitlines() if line.startswith("warning: ")]
    assert len(warned) == int(one_core) and all(w.startswith("warning: 1 microbatch per step on 2 pipeline ranks: "
                                                             "zbv leaves the ranks idle") for w in warned), warned


def test_checkpoint_saved_under_one_schedule_resumes_under_another(dataset, tmp_path):
    """1f1b on 4 pipeline ranks saves at iteration 2; zbv on 2 ranks resumes from
    it: iterations 3 and 4 give the uninterrupted run's losses."""
    save = str(tmp_path / "ckpt")
    first = H.run_ranks({"body": H.train_body, "pp": 4, "no_subprocesses": True, "runs": [
        model_args(dataset, 4, "--train-iters", "4", "--pipeline-schedule", "1f1b", "--save", save,
                   "--save-interval", "2")]}, 4, timeout_s=900)
    assert sorted(os.listdir(save)) == ["iter_0000002", "iter_0000004", "latest_checkpointed_iteration.txt"]
    # resumed with fewer steps left than the profile window needs (issue 55): no profile, and the run says why
    profile = str(tmp_path / "never.json")
    resumed = H.run_ranks({"body": H.train_body, "pp": 2, "capture_log": True, "runs": [
        model_args(dataset, 2, "--train-iters", "4", "--pipeline-schedule", "zbv", "--load", save,
                   "--ckpt-step", "2", "--pipeline-profile-out", profile, "--pipeline-profile-steps", "3")]}, 2,
        timeout_s=900)
    uninterrupted = first[0][0]["losses"]
    again = resumed[0][0]
    assert again["start_iteration"] == 2
    torch.testing.assert_close(torch.tensor(again["losses"]), torch.tensor(uninterrupted[2:]), rtol=1e-5, atol=0)
    said = [line for line in again["log"].splitlines() if line.startswith(f"--pipeline-profile-out {profile}")]
    assert len(said) == 1 and "needs 4 training steps" in said[0] and "this run ran 2;" in said[0], again["log"]
    assert not os.path.exists(profile) and "was not written" not in resumed[1][0]["log"]  # rank 0 says it


# post-training data (issue 40): long-tail samples packed per replica, each replica its own count
BALANCED = under_test(["zb-h1", "zbv"])


def test_balanced_data_trains_as_megatrons_own_schedule(dataset):
    """DP=2 x PP=2, --pipeline-balance-data: our schedules log megatron's own 1F1B's losses on the
    same packed batches, and the loss (normalised by the global token count) does not depend on how
    the batch was split: LB-Mini, sorted and megatron's plain split train the same losses (dropout off:
    its masks follow the microbatch a token lands in)."""
    common = ["--micro-batch-size", "1", "--global-batch-size", "16", "--train-iters", "3", "--hidden-dropout", "0",
              "--attention-dropout", "0"]
    runs = [model_args(dataset, 2, *common, "--pipeline-balance-data", "lb-mini")]  # megatron's 1F1B
    runs += [model_args(dataset, 2, *common, "--pipeline-balance-data", "lb-mini", "--pipeline-schedule", s)
             for s in BALANCED]
    runs += [model_args(dataset, 2, *common, "--pipeline-balance-data", mode, "--pipeline-schedule", "zb-h1")
             for mode in ("off", "sorted")]
    # post-validation: each replica validates the previous step after a prefix of its own count's plan
    runs.append(model_args(dataset, 2, *common, "--pipeline-balance-data", "lb-mini", "--pipeline-schedule", "zbv",
                           "--optimizer-post-validation"))
    results = H.run_ranks({"body": H.train_body, "pp": 2, "runs": runs}, 4, timeout_s=900)
    megatron, *ours = results[0]
    assert megatron["losses"][-1] < megatron["losses"][0], "the loss goes down"
    names = BALANCED + ["zb-h1 off", "zb-h1 sorted", "zbv post-validated"]
    for name, run in zip(names, ours):
        torch.testing.assert_close(torch.tensor(run["losses"]), torch.tensor(megatron["losses"]), rtol=1e-5, atol=0,
                                   msg=lambda m: f"{name}: {m}")


PER_TOKEN = under_test(["zb-h1", "zbv"])


def test_per_token_loss_normalises_as_megatrons_own_schedule(dataset):
    """--calculate-per-token-loss (Megatron-LM's name, which Llama recipes pass): the gradient is the
    sum over the global batch's loss tokens divided by their count, not each microbatch's mean
    averaged. With --eod-mask-loss, microbatches hold different loss-token counts, so the two differ:
    iteration 1's loss (Σ loss / Σ tokens either way, same weights) is the same, its gradient is not.
    Our schedules train megatron's own 1F1B's per-token run."""
    common = ["--train-iters", "2", "--hidden-dropout", "0", "--attention-dropout", "0", "--eod-mask-loss",
              "--seq-length", "64"]
    assert len(set(_first_loss_token_counts(model_args(dataset, 2, *common)))) > 1, "equal counts: nothing to show"
    runs = [model_args(dataset, 2, *common, "--calculate-per-token-loss")]  # megatron's 1F1B
    runs += [model_args(dataset, 2, *common, "--calculate-per-token-loss", "--pipeline-schedule", s)
             for s in PER_TOKEN]
    runs.append(model_args(dataset, 2, *common))  # megatron's 1F1B, each microbatch's mean
    megatron, *ours, per_microbatch = H.run_ranks({"body": H.train_body, "pp": 2, "runs": runs}, 2,
                                                  timeout_s=900)[0]
    assert megatron["losses"][-1] < megatron["losses"][0], "the loss goes down"
    for name, run in zip(PER_TOKEN, ours):
        for key in ("losses", "grad_norms"):
            torch.testing.assert_close(torch.tensor(run[key]), torch.tensor(megatron[key]), rtol=1e-5, atol=0,
                                       msg=lambda m: f"{name} {key}: {m}")
    # the same reported loss, another gradient: microbatches of 126 to 128 tokens weigh up to 1/128 apart
    # (measured 1.3e-4 relative on the norm); rounding alone moves a float32 norm by about 1e-7 (with equal
    # counts of 128 tokens the two normalisations are bitwise equal: they divide by powers of two)
    torch.testing.assert_close(per_microbatch["losses"][0], megatron["losses"][0], rtol=1e-6, atol=0)
    gap = abs(per_microbatch["grad_norms"][0] - megatron["grad_norms"][0]) / megatron["grad_norms"][0]
    assert gap > 1e-5, (per_microbatch["grad_norms"], megatron["grad_norms"])


def _first_loss_token_counts(argv) -> list:
    """The loss tokens of each microbatch of the first global batch the arguments train on."""
    from primus_megatron.train import data as D
    from primus_megatron.train.arguments import parse_run
    from primus_megatron.train.tokenizer import build_tokenizer

    args, _ = parse_run(argv, world_size=2)
    train, _, _ = D.build_datasets(args, build_tokenizer(args))
    mbs = args.micro_batch_size
    return [sum(int(train[i]["loss_mask"].sum()) for i in range(j, j + mbs))
            for j in range(0, args.global_batch_size, mbs)]


@pytest.mark.parametrize("argv, needle", [
    (["--pipeline-schedule", "zbvv"], "did you mean 'zbv'"),
    (["--pipeline-schedule", "zbv", "--pipeline-model-parallel-size", "1"], "--pipeline-model-parallel-size >= 2"),
    (["--pipeline-schedule", "zbv", "--num-layers", "6"], "--num-layers 6 does not split into 8"),
    (["--micro-batch-size", "4", "--global-batch-size", "6"], "--global-batch-size 6 must be divisible"),
    (["--pipeline-schedule", "zb-auto", "--pipeline-memory-limit", "0.5"], "memory limit"),
    (["--bf16", "--fp16"], "--bf16 and --fp16"),
    (["--data-path", "/nonexistent/prefix"], "/nonexistent/prefix.bin does not exist; --data-path takes the prefix of a Megatron indexed dataset"),
    (["--swiglu", "--hidden-size", "16"], "give --ffn-hidden-size"),
    (["--group-query-attention", "--num-query-groups", "3"], "--num-query-groups 3 must divide"),
    (["--normalization", "BatchNorm"], "--normalization: invalid choice"),
    (["--pipeline-schedule", "zbv", "--pipeline-p2p-groups", "two"], "--pipeline-p2p-groups: invalid choice: 'two'"),
    (["--moe-grouped-gemm", "--num-experts", "4"], "--moe-grouped-gemm needs TransformerEngine's grouped experts"),
    (["--multi-latent-attention"], "--multi-latent-attention needs TransformerEngine's attention"),
    (["--num-experts", "4", "--expert-model-parallel-size", "3"], "--num-experts 4 must be divisible by"),
    (["--num-experts", "4", "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"],
     "needs --sequence-parallel and --disable-bias-linear"),
    (["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--num-attention-heads", "12",
      "--hidden-size", "96", "--group-query-attention", "--num-query-groups", "3"],
     "--num-query-groups 3 must be a multiple or a divisor of --tensor-model-parallel-size 2"),
    (["--pipeline-balance-data", "lb-mini", "--micro-batch-size", "2"],
     "--pipeline-balance-data lb-mini: --micro-batch-size must be 1"),
    (["--pipeline-balance-cost", "1,0"], "--pipeline-balance-cost needs --pipeline-balance-data"),
])
def test_bad_arguments_exit_2_with_one_sentence(dataset, argv, needle):
    base = ["--cpu", "--data-path", dataset, "--num-layers", "8", "--pipeline-model-parallel-size", "4",
            "--micro-batch-size", "1", "--global-batch-size", "8"]
    env = dict(os.environ, WORLD_SIZE="4", RANK="0", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, SCRIPT, *base, *argv], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("pretrain_gpt.py: error: "), out.stderr
    assert needle in lines[0]
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_distributed_optimizer_checkpoint_resumes_under_another_placement(dataset, tmp_path):
    """Data parallel 2 x pipeline 2 with the distributed optimizer: zb-h1 (loop placement)
    saves at iteration 2, its optimizer state in the model's layout; zbv (V placement:
    other layers on each rank, so other optimizer shards) resumes from it and gives the
    uninterrupted run's losses for iterations 3 and 4. (Another data-parallel size would
    draw other dropout masks, so the losses would differ for that reason alone.)"""
    save = str(tmp_path / "ckpt")
    first = H.run_ranks({"body": H.train_body, "pp": 2, "no_subprocesses": True, "runs": [
        model_args(dataset, 2, "--train-iters", "4", "--pipeline-schedule", "zb-h1", "--use-distributed-optimizer",
                   "--save", save, "--save-interval", "2")]}, 4, timeout_s=900)
    assert "iter_0000002" in os.listdir(save)
    resumed = H.run_ranks({"body": H.train_body, "pp": 2, "no_subprocesses": True, "runs": [
        model_args(dataset, 2, "--train-iters", "4", "--pipeline-schedule", "zbv", "--use-distributed-optimizer",
                   "--load", save, "--ckpt-step", "2")]}, 4, timeout_s=900)
    again = resumed[0][0]
    assert again["start_iteration"] == 2
    torch.testing.assert_close(torch.tensor(again["losses"]), torch.tensor(first[0][0]["losses"][2:]),
                               rtol=1e-5, atol=0)
