"""Configuration errors are caught before anything starts, at every entry point.

One table of bad configurations, each run against
  (a) examples/pretrain_gpt.py as a subprocess (WORLD_SIZE set, no launcher):
      exit status 2, one line `pretrain_gpt.py: error: ...` naming the option
      and what is allowed, no traceback, nothing on stdout, nothing written
      (no checkpoint, timeline or data cache);
  (b) the planner CLI `python -m primus_megatron.cli simulate|compare ...`
      where the case applies: exit status 2, one line;
  (c) Megatron-LM's entry point at unit level: `check_schedule_args` on a
      parser built with `primus_megatron.megatron_lm.add_args` (plus the
      Megatron-LM options the case needs, as Megatron-LM's parser has them).
Then the accepted neighbours of each refusal, and bounded property-based
fuzzing of both argument parsers (never an unexpected exception).
"""
from __future__ import annotations

import argparse
import atexit
import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import pytest

from primus_megatron import schedules as S
from primus_megatron.megatron_lm import add_args
from primus_megatron.megatron_lm import args as mlm_args
from primus_megatron.megatron_lm.args import check_schedule_args

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "pretrain_gpt.py")
NO_W = "a schedule without W (1f1b, interleaved-1f1b)"
WORLD = 4

# Each case: the options added to a valid pretrain_gpt.py command line (pp=4, 8 layers, 8 microbatches,
# world of 4), the text its one-line error must contain, the planner CLI's argv and text (None: the
# case has no planner option), and Megatron-LM's parsed options with the text check_schedule_args must
# return (None: Megatron-LM validates that itself).
CASES = {
    "unknown schedule": dict(
        argv=["--pipeline-schedule", "zb-v"],
        needles=["--pipeline-schedule", "unknown pipeline schedule 'zb-v'", "did you mean 'zbv'?",
                 *S.names(aliases=True)],
        cli=["simulate", "--schedule", "zb-v", "--pp", "4", "--microbatches", "8"],
        cli_needles=["unknown pipeline schedule 'zb-v'", "did you mean 'zbv'?", *S.names(aliases=True)],
        megatron=dict(pipeline_schedule="zb-v"),
        megatron_needles=["unknown pipeline schedule 'zb-v'", "did you mean 'zbv'?", *S.names(aliases=True)]),
    "pipeline size below 2": dict(
        argv=["--pipeline-schedule", "zb-h1", "--pipeline-model-parallel-size", "1"],
        needles=["--pipeline-schedule zb-h1 needs --pipeline-model-parallel-size >= 2, got 1",
                 "drop --pipeline-schedule"],
        cli=["simulate", "--schedule", "zb-h1", "--pp", "1", "--microbatches", "8"],
        cli_needles=["--pp", "must be an integer >= 2, got 1"],
        megatron=dict(pipeline_schedule="zb-h1", pipeline_model_parallel_size=1),
        megatron_needles=["needs --pipeline-model-parallel-size >= 2, got 1"]),
    "V layers do not split into 2 x pp": dict(
        argv=["--pipeline-schedule", "zbv", "--num-layers", "12"],
        needles=["--num-layers 12 does not split into 8 equal stages (4 pipeline ranks x 2 chunks)",
                 "use a multiple of 8, e.g. 16"],
        cli=None,
        megatron=dict(pipeline_schedule="v-half", pipeline_model_parallel_size=4, num_layers=12),
        megatron_needles=["--num-layers 12 does not split into 8 equal stages (4 pipeline ranks x 2 chunks)",
                          "use a multiple of 8"]),
    # uneven layer splits (megatron's options; the same global stages under loop and V placement)
    "first/last counts with the embedding accounting": dict(
        split=True,
        argv=["--pipeline-schedule", "zb-h1", "--decoder-first-pipeline-num-layers", "2",
              "--account-for-embedding-in-pipeline-split"],
        needles=["--decoder-first-pipeline-num-layers cannot be combined with "
                 "--account-for-embedding-in-pipeline-split"],
        cli=None,
        megatron=dict(pipeline_schedule="zbv", decoder_last_pipeline_num_layers=2,
                      account_for_loss_in_pipeline_split=True),
        megatron_needles=["--decoder-last-pipeline-num-layers cannot be combined with "
                          "--account-for-loss-in-pipeline-split"]),
    "first rank's layers not a multiple of the chunks": dict(
        split=True,
        argv=["--pipeline-schedule", "zbv", "--decoder-first-pipeline-num-layers", "1"],
        needles=["--decoder-first-pipeline-num-layers 1 must be a multiple of 2",
                 "each of the 2 chunks per pipeline rank of --pipeline-schedule zbv"],
        cli=None,
        megatron=dict(pipeline_schedule="v-half", decoder_last_pipeline_num_layers=3, num_layers=11),
        megatron_needles=["--decoder-last-pipeline-num-layers 3 must be a multiple of 2",
                          "--pipeline-schedule v-half"]),
    "first and last counts on 2 ranks x 2 chunks": dict(
        split=True,
        argv=["--pipeline-schedule", "zbv", "--pipeline-model-parallel-size", "2",
              "--decoder-first-pipeline-num-layers", "2", "--decoder-last-pipeline-num-layers", "6"],
        needles=["--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers cannot both be given "
                 "with 2 pipeline ranks x 2 chunks", "give only --decoder-first-pipeline-num-layers 2: the last rank "
                 "holds the other 6 layers"],
        cli=None,
        megatron=dict(pipeline_schedule="interleaved-zb", pipeline_model_parallel_size=2,
                      decoder_first_pipeline_num_layers=4, decoder_last_pipeline_num_layers=4),
        megatron_needles=["cannot both be given with 2 pipeline ranks x 2 chunks",
                          "give only --decoder-first-pipeline-num-layers 4"]),
    "middle ranks' layers do not split": dict(
        split=True,
        argv=["--pipeline-schedule", "zb-h1", "--decoder-first-pipeline-num-layers", "1",
              "--decoder-last-pipeline-num-layers", "2"],
        needles=["--num-layers 8 minus --decoder-first-pipeline-num-layers 1 + --decoder-last-pipeline-num-layers 2 "
                 "leaves 5 layers for the 2 middle pipeline ranks; they must be a positive multiple of 2"],
        cli=None,
        megatron=dict(pipeline_schedule="zb-h2", decoder_first_pipeline_num_layers=6,
                      decoder_last_pipeline_num_layers=4),
        megatron_needles=["--decoder-first-pipeline-num-layers 6 + --decoder-last-pipeline-num-layers 4 must be "
                          "below --num-layers 8 on 4 pipeline ranks"]),
    "embedding and loss accounting does not split": dict(
        split=True,
        argv=["--pipeline-schedule", "zbv", "--account-for-embedding-in-pipeline-split",
              "--account-for-loss-in-pipeline-split"],
        needles=["--num-layers 8 plus the embedding and the loss", "make 10 layers, which do not split into 8 "
                 "equal stages (4 pipeline ranks x 2 chunks); use --num-layers 6"],
        cli=None,
        megatron=dict(pipeline_schedule="v-min", account_for_loss_in_pipeline_split=True),
        megatron_needles=["--num-layers 8 plus the loss (--account-for-loss-in-pipeline-split) make 9 layers",
                          "use --num-layers 7"]),
    "embedding alone in a stage with W ops": dict(
        split=True,
        argv=["--pipeline-schedule", "zbv", "--num-layers", "7", "--account-for-embedding-in-pipeline-split"],
        needles=["--num-layers 7 with --account-for-embedding-in-pipeline-split leaves the first stage with the "
                 "embedding alone", "--pipeline-schedule zbv needs a weight gradient to defer to W in every stage",
                 f"or use {NO_W}"],
        cli=None,
        megatron=dict(pipeline_schedule="zb-h1", num_layers=3, account_for_embedding_in_pipeline_split=True),
        megatron_needles=["leaves the first stage with the embedding alone", "--pipeline-schedule zb-h1"]),
    "uneven split without pipeline parallelism": dict(
        argv=["--pipeline-model-parallel-size", "1", "--decoder-first-pipeline-num-layers", "2"],
        needles=["--decoder-first-pipeline-num-layers needs --pipeline-model-parallel-size >= 2, got 1"],
        cli=None, megatron=None),
    "megatron layout of another stage count": dict(
        split=True,
        argv=["--pipeline-schedule", "zbv", "--pipeline-model-parallel-layout", "Et|tt|tt|ttL"],
        needles=["--pipeline-model-parallel-layout 'Et|tt|tt|ttL' has 4 stages; the pipeline has 8 (pipeline ranks "
                 "x chunks per rank): give 8 stages separated by '|'"],
        cli=None,
        megatron=dict(pipeline_schedule="zb-h1", pipeline_model_parallel_layout="Et|tt|tt|t|t|tt|tt|tL"),
        megatron_needles=["--pipeline-model-parallel-layout 'Et|tt|tt|t|t|tt|tt|tL' has 8 stages; the pipeline has 4 "
                          "(pipeline ranks x chunks per rank)"]),
    "megatron layout with the loss outside the last stage": dict(
        split=True,
        argv=["--pipeline-schedule", "zb-h1", "--pipeline-model-parallel-layout", "Ett|tt|ttL|tt"],
        needles=["--pipeline-model-parallel-layout 'Ett|tt|ttL|tt' must end the last stage with the loss L (once)"],
        cli=None,
        # megatron's standalone MTP stage (m before the loss stage): activations (1 + m) x sequence long
        megatron=dict(pipeline_schedule="zbv", pipeline_model_parallel_layout="Et|tt|t|t|t|tt|ttm|L",
                      mtp_num_layers=1),
        megatron_needles=["--pipeline-model-parallel-layout 'Et|tt|t|t|t|tt|ttm|L' places MTP layers (m) in stage 6, "
                          "not in the last stage with the loss", "put every m in the last stage"]),
    "balance with MTP": dict(
        split=True, argv=None, cli=None,
        megatron=dict(pipeline_schedule="zbv", pipeline_balance="auto", mtp_num_layers=1),
        megatron_needles=["--pipeline-balance cannot be used with --mtp-num-layers", "leaves out the MTP layers",
                          "--pipeline-model-parallel-layout with the m in the last stage"]),
    "megatron layout with MTP layers and no --mtp-num-layers": dict(
        split=True, argv=None, cli=None,
        megatron=dict(pipeline_schedule="zbv", pipeline_model_parallel_layout="Et|tt|t|t|t|tt|tt|tmL"),
        megatron_needles=["has 1 MTP layers (m) but --mtp-num-layers is not given"]),
    "megatron layout with a virtual pipeline size": dict(
        split=True, argv=None, cli=None,
        megatron=dict(pipeline_schedule="zbv", pipeline_model_parallel_layout="Et|t|t|t|t|t|t|tL",
                      num_virtual_stages_per_pipeline_rank=2),
        megatron_needles=["--pipeline-model-parallel-layout sets the virtual pipeline size itself (its stages / "
                          "pipeline ranks): drop --num-virtual-stages-per-pipeline-rank"]),
    "global batch not divisible": dict(
        argv=["--pipeline-schedule", "zb-h1", "--micro-batch-size", "3", "--global-batch-size", "8"],
        needles=["--global-batch-size 8 must be divisible by --micro-batch-size 3 x data-parallel size 1"],
        cli=["simulate", "--schedule", "zb-h1", "--pp", "4", "--microbatches", "0"],
        cli_needles=["--microbatches", "must be an integer >= 1, got 0"],
        megatron=None),
    "memory limit below zb-auto's minimum": dict(
        argv=["--pipeline-schedule", "zb-auto", "--pipeline-memory-limit", "0.5"],
        needles=["--pipeline-schedule zb-auto with 8 microbatches", "memory limit 0.5 is below one microbatch's "
                 "activations"],
        cli=["simulate", "--schedule", "zb-auto", "--pp", "4", "--microbatches", "8", "--memory-limit", "0.5"],
        cli_needles=["memory limit 0.5 is below one microbatch's activations"],
        megatron=dict(pipeline_schedule="zb-auto", pipeline_memory_limit=0.5, pipeline_model_parallel_size=4,
                      global_batch_size=8, micro_batch_size=1, data_parallel_size=1),
        megatron_needles=["memory limit 0.5 is below one microbatch's activations"]),
    "memory limit below v-min's": dict(
        argv=["--pipeline-schedule", "v-min", "--pipeline-memory-limit", "1"],
        needles=["--pipeline-schedule v-min", "memory limit 1 is too small for v-min", "needs at least 2"],
        cli=["compare", "--pp", "4", "--microbatches", "16", "--memory-limit", "0.25"],
        cli_needles=["no registered schedule can be built for these arguments", "memory limit of 0.25"],
        megatron=dict(pipeline_schedule="v-min", pipeline_memory_limit=1.0, pipeline_model_parallel_size=4,
                      global_batch_size=16, micro_batch_size=2, data_parallel_size=1),
        megatron_needles=["memory limit 1 is too small for v-min", "needs at least 2"]),
    "full recompute with W ops": dict(
        argv=["--pipeline-schedule", "zb-h1", "--recompute-granularity", "full", "--recompute-method", "uniform",
              "--recompute-num-layers", "1", "--hidden-dropout", "0", "--attention-dropout", "0"],
        needles=["--recompute-granularity full cannot be used with --pipeline-schedule zb-h1",
                 "use --recompute-granularity selective or a schedule without W ops (1f1b, interleaved-1f1b)"],
        cli=None,
        megatron=dict(pipeline_schedule="zbv", recompute_granularity="full"),
        megatron_needles=["--recompute-granularity full cannot be used with --pipeline-schedule zbv",
                          "use --recompute-granularity selective"]),
    "offload bandwidth not positive": dict(
        argv=["--pipeline-schedule", "zb-h1", "--pipeline-offload", "all", "--pipeline-offload-bandwidth", "0"],
        needles=["--pipeline-offload-bandwidth must be a positive number of activation units per time unit, got 0"],
        cli=["simulate", "--schedule", "zb-h1", "--pp", "4", "--microbatches", "8", "--offload", "all",
             "--offload-bandwidth", "0"],
        cli_needles=["--offload-bandwidth", "must be a positive number of activation units per time unit"],
        megatron=dict(pipeline_schedule="zb-h1", pipeline_offload="all", pipeline_offload_bandwidth=0.0),
        megatron_needles=["--pipeline-offload-bandwidth must be a positive number"]),
    "offload with recompute into freed storage": dict(
        argv=None, cli=None,
        megatron=dict(pipeline_schedule="zbv", pipeline_offload="auto", recompute_granularity="selective",
                      recompute_modules=["core_attn", "layernorm"]),
        megatron_needles=["--recompute-modules core_attn,layernorm cannot be used with --pipeline-offload auto",
                          "recomputes into that same storage", "drop --pipeline-offload"]),
    "offload with megatron's cpu offloading": dict(
        argv=None, cli=None,
        megatron=dict(pipeline_schedule="1f1b", pipeline_offload="all", cpu_offloading=True),
        megatron_needles=["--cpu-offloading cannot be used with --pipeline-offload all",
                          "saved-tensor hooks of its own"]),
    # offload moves FP8's quantized tensors where the CPU stand-in reproduces TE 2.11's (issue 54 item 5; here no TE
    # is installed: test_offload_in_fp8_is_accepted_where_the_stand_in_reproduces_it pretends 2.11)
    "offload with fp8 on a TransformerEngine not reproduced": dict(
        argv=None, cli=None,
        megatron=dict(pipeline_schedule="1f1b", pipeline_offload="all", fp8="hybrid"),
        megatron_needles=["--fp8-format hybrid cannot be used with --pipeline-offload all",
                          "not FP8 on another TransformerEngine version", "install TransformerEngine 2.11",
                          "without --pipeline-offload"]),
    "offload with an fp8 recipe not reproduced": dict(
        argv=None, cli=None,
        megatron=dict(pipeline_schedule="1f1b", pipeline_offload="all", fp8="hybrid", fp8_recipe="mxfp8"),
        megatron_needles=["--fp8-format hybrid cannot be used with --pipeline-offload all",
                          "not the mxfp8 FP8 recipe (its E8M0 scales per 32-element block)",
                          "use --fp8-recipe delayed or tensorwise", "without --pipeline-offload"]),
    "offload with fp4": dict(
        argv=None, cli=None,
        megatron=dict(pipeline_schedule="1f1b", pipeline_offload="auto", fp4="e2m1"),
        megatron_needles=["--fp4-format e2m1 cannot be used with --pipeline-offload auto",
                          "not the nvfp4 FP4 recipe", "without --pipeline-offload"]),
    # megatron settings the engine does not honour (Megatron-LM options only; primus_megatron/unsupported.py)
    **{f"megatron setting {field}": dict(
        argv=None, cli=None, megatron=dict(pipeline_schedule=schedule, **values),
        megatron_needles=[f"--{field.replace('_', '-')}", f"cannot be used with --pipeline-schedule {schedule}",
                          why, "drop --pipeline-schedule"])
       for field, schedule, values, why in [
           ("defer_embedding_wgrad_compute", "1f1b", dict(defer_embedding_wgrad_compute=True),
            "finish_embedding_wgrad_compute"),
           ("variable_seq_lengths", "zb-h1", dict(variable_seq_lengths=True), "fixed-shape activations"),
           ("context_parallel_size", "zb-h2", dict(context_parallel_size=2, transformer_impl="local"),
            "needs TransformerEngine attention"),
           ("overlap_moe_expert_parallel_comm", "v-half", dict(overlap_moe_expert_parallel_comm=True),
            "has none; use dualpipev"),
           ("hybrid_context_parallel", "zbv", dict(hybrid_context_parallel=True), "without pipelining"),
           ("cp_comm_type", "zb-h1", dict(context_parallel_size=4, cp_comm_type="a2a+p2p", bf16=True,
                                          hierarchical_context_parallel_sizes=[2, 2],
                                          transformer_impl="transformer_engine"), "hierarchical a2a+p2p"),
           ("fine_grained_activation_offloading", "zb-auto", dict(fine_grained_activation_offloading=True),
            "offload and reload points"),
           ("cuda_graph_impl", "interleaved-1f1b", dict(cuda_graph_impl="local"), "CUDA graphs capture"),
           ("use_transformer_engine_op_fuser", "zbv", dict(use_transformer_engine_op_fuser=True,
                                                           transformer_impl="transformer_engine"),
            "compute their weight gradients outside the TE layers"),
           # issue 57 item 3: megatron-core 0.19's layouts our W ops cannot split, named before the op fuser (which
           # megatron requires with the single grouped weight) and the mxfp8 recipe (which the output layer needs)
           ("moe_single_grouped_weight", "zbv", dict(moe_single_grouped_weight=True, moe_grouped_gemm=True,
                                                     use_transformer_engine_op_fuser=True,
                                                     transformer_impl="transformer_engine"),
            "one TransformerEngine grouped weight (GroupedLinear single_grouped_weight"),
           ("moe_single_grouped_bias", "zb-h1", dict(moe_single_grouped_bias=True, moe_grouped_gemm=True,
                                                     add_bias_linear=True, transformer_impl="transformer_engine"),
            "one TransformerEngine grouped bias (GroupedLinear single_grouped_bias"),
           ("fp8_output_proj", "dualpipev", dict(fp8_output_proj=True, fp8="e4m3", fp8_recipe="mxfp8",
                                                 transformer_impl="transformer_engine"),
            "megatron-core 0.19's TELMHeadColumnParallelLinear, an MXFP8"),
           ("moe_grouped_gemm", "zb-h1", dict(moe_grouped_gemm=True, transformer_impl="local"),
            "use SequentialMLP"),
           ("tp_comm_overlap", "zb-h1", dict(tp_comm_overlap=True, transformer_impl="transformer_engine"),
            "refuses a delayed weight gradient (bulk wgrad overlap"),
       ]},
    # TE v2.11 has no fp32 context-parallel attention: refused at start-up, not at the first forward
    "megatron setting context_parallel_size in fp32": dict(
        argv=None, cli=None, megatron=dict(pipeline_schedule="zbv", context_parallel_size=2,
                                           transformer_impl="transformer_engine"),
        megatron_needles=["--context-parallel-size", "cannot be used with --pipeline-schedule zbv",
                          "no context-parallel attention in fp32", "add --bf16 or --fp16"]),
    "FP8 with W ops": dict(  # examples/pretrain_gpt.py builds local layers: no FP8 at all
        argv=["--pipeline-schedule", "zb-h2", "--fp8-format", "hybrid"],
        needles=["--fp8-format hybrid is not supported by examples/pretrain_gpt.py",
                 "use Megatron-LM's pretrain_gpt.py with primus_megatron.megatron_lm"],
        cli=None,
        megatron=dict(pipeline_schedule="zb-h2", fp8="e4m3", transformer_impl="transformer_engine"),
        megatron_needles=["--fp8-format e4m3 cannot be used with --pipeline-schedule zb-h2",
                          "not yet verified on a GPU for this TransformerEngine", "FP8_VERIFIED_TE_VERSIONS",
                          "use a schedule without W ops (1f1b, interleaved-1f1b)"]),
    "FP4 with W ops": dict(
        argv=None, cli=None,
        megatron=dict(pipeline_schedule="zbv", fp4="e2m1", transformer_impl="transformer_engine"),
        megatron_needles=["--fp4-format e2m1 cannot be used with --pipeline-schedule zbv",
                          "does not reproduce the nvfp4 FP4 recipe", "neither reproduced nor verified on a GPU"]),
    "TransformerEngine that cannot defer weight gradients": dict(
        argv=None, cli=None,
        megatron=dict(pipeline_schedule="v-half", transformer_impl="transformer_engine"),
        megatron_needles=["TransformerEngine 2.6.0 cannot defer weight gradients to the W ops of --pipeline-schedule "
                          "v-half", "upgrade TransformerEngine to 2.7 or newer", f"or use {NO_W}"]),
    "costs not F,B,W under auto": dict(
        argv=["--pipeline-schedule", "auto", "--pipeline-costs", "1,2"],
        needles=["--pipeline-costs must be F,B,W[,COMM[,BW]] numbers, got '1,2'"],
        cli=None,
        megatron=dict(pipeline_schedule="auto", pipeline_costs="1,2"),
        megatron_needles=["--pipeline-costs must be F,B,W[,COMM[,BW]] numbers, got '1,2'"]),
    "a memory model whose B and W do not free what F adds": dict(
        argv=["--pipeline-schedule", "zb-auto", "--pipeline-costs", "1,2,1,mem-b=-0.5,mem-w=-0.3"],
        needles=["--pipeline-costs: mem-b and mem-w must sum to -1", "got -0.5 and -0.3"],
        cli=["simulate", "--schedule", "zb-auto", "--pp", "4", "--microbatches", "8", "--mem-b", "-0.5",
             "--mem-w", "-0.3"],
        cli_needles=["--mem-b and --mem-w must sum to -1", "got -0.5 and -0.3"],
        megatron=dict(pipeline_schedule="zb-auto", pipeline_costs="1,2,1,mem-b=-0.5,mem-w=-0.3"),
        megatron_needles=["--pipeline-costs: mem-b and mem-w must sum to -1"]),
    "a W that adds memory": dict(
        argv=["--pipeline-schedule", "zb-auto", "--pipeline-costs", "1,2,1,mem-w=0.5"],
        needles=["--pipeline-costs: mem-w must be <= 0", "got 0.5"],
        cli=["export", "--schedule", "zb-auto", "--pp", "4", "--microbatches", "8", "--mem-w", "0.5"],
        cli_needles=["--mem-w must be <= 0", "got 0.5"],
        megatron=dict(pipeline_schedule="zb-auto", pipeline_costs="1,2,1,mem-w=0.5"),
        megatron_needles=["--pipeline-costs: mem-w must be <= 0"]),
    "post-validation without a schedule": dict(
        argv=["--optimizer-post-validation"],
        needles=["--optimizer-post-validation needs --pipeline-schedule"],
        cli=None,
        megatron=dict(optimizer_post_validation=True),
        megatron_needles=["--optimizer-post-validation needs --pipeline-schedule", "e.g. --pipeline-schedule zb-h1"],
        validate_args_only=True),  # Megatron-LM's option: refused where the patched validate_args runs
    "p2p timeout not positive": dict(
        argv=["--pipeline-schedule", "zbv", "--pipeline-p2p-timeout", "0"],
        needles=["--pipeline-p2p-timeout must be a positive number of seconds, got 0"],
        cli=None,
        megatron=dict(pipeline_schedule="zbv", pipeline_p2p_timeout=float("nan")),
        megatron_needles=["--pipeline-p2p-timeout must be a positive number of seconds, got nan"]),
}



def _run_pretrain(tmp: str, argv: list) -> tuple[subprocess.CompletedProcess, list]:
    """pretrain_gpt.py with every output option pointing into `tmp` (its working directory)."""
    data = os.path.join(tmp, "data")
    os.makedirs(data)
    for ext in (".bin", ".idx"):  # the options check only that the dataset exists
        open(os.path.join(data, "text_document" + ext), "wb").close()
    base = ["--cpu", "--data-path", os.path.join(data, "text_document"), "--num-layers", "8",
            "--pipeline-model-parallel-size", "4", "--micro-batch-size", "1", "--global-batch-size", "8",
            "--save", os.path.join(tmp, "ckpt"), "--save-interval", "1", "--load", os.path.join(tmp, "ckpt"),
            "--timeline", os.path.join(tmp, "timeline.png"), "--data-cache-path", os.path.join(tmp, "cache")]
    env = dict(os.environ, WORLD_SIZE=str(WORLD), RANK="0", PYTHONPATH=ROOT)
    env.pop("MASTER_ADDR", None)
    out = subprocess.run([sys.executable, SCRIPT, *base, *argv], capture_output=True, text=True, env=env, cwd=tmp,
                         timeout=120)
    written = sorted(os.path.relpath(os.path.join(d, f), tmp) for d, dirs, files in os.walk(tmp) for f in files + dirs)
    return out, written


@pytest.fixture(scope="module")
def pretrain_results(tmp_path_factory):
    """Every case's pretrain_gpt.py subprocess, two at a time (each imports torch)."""
    jobs = {name: str(tmp_path_factory.mktemp(re.sub(r"\W+", "_", name))) for name, c in CASES.items() if c["argv"]}
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(_run_pretrain, tmp, CASES[name]["argv"]) for name, tmp in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


def _one_line(stderr: str, prefix: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith(prefix), stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c["argv"]])
def test_pretrain_gpt_refuses_before_anything_starts(name, pretrain_results):
    out, written = pretrain_results[name]
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    line = _one_line(out.stderr, "pretrain_gpt.py: error: ")
    for needle in CASES[name]["needles"]:
        assert needle in line, (needle, line)
    assert out.stdout == ""
    assert written == ["data", "data/text_document.bin", "data/text_document.idx"], written


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c["cli"]])
def test_planner_cli_refuses_with_one_line(name):
    env = dict(os.environ, PYTHONPATH=ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-m", "primus_megatron.cli", *CASES[name]["cli"]], capture_output=True,
                             text=True, env=env, cwd=tmp, timeout=60)
        assert os.listdir(tmp) == []
    assert out.returncode == 2, out.stderr
    line = _one_line(out.stderr, "primus-pipeline: error: ")
    for needle in CASES[name]["cli_needles"]:
        assert needle in line, (needle, line)
    assert out.stdout == ""


def megatron_lm_args(**values) -> argparse.Namespace:
    """Megatron-LM's parsed arguments for the options these checks read (defaults as Megatron-LM's
    parser and validate_args leave them), with our group added by add_args, then `values`."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-layers", type=int, default=None)
    parser.add_argument("--pipeline-model-parallel-size", type=int, default=1)
    parser.add_argument("--micro-batch-size", type=int, default=None)
    parser.add_argument("--global-batch-size", type=int, default=None)
    parser.add_argument("--recompute-granularity", choices=["full", "selective"], default=None)
    parser.add_argument("--overlap-grad-reduce", action="store_true")
    parser.add_argument("--untie-embeddings-and-output-weights", action="store_true")
    parser.add_argument("--fp8-format", default=None, choices=["e4m3", "hybrid"], dest="fp8")
    args = add_args(parser).parse_args([])
    # validate_args fills these before our check runs
    args.pipeline_model_parallel_size, args.num_layers = 4, 8
    vars(args).update(values)
    return args


def _pretend_transformer_engine_2_6(name: str, monkeypatch) -> None:
    """For the case of that name: what te_wgrad finds in TE 2.6 (its WeightGradStore and
    delay_wgrad_compute, no DDP layer hooks; tests/test_te_wgrad.py checks the finding itself
    against the stand-in made into 2.6)."""
    from primus_megatron.runtime import te_wgrad

    if name == "TransformerEngine that cannot defer weight gradients":
        monkeypatch.setattr(te_wgrad, "missing_api", lambda: ("register_wgrad_accumulation_and_reduce_hooks", "2.7"))
        monkeypatch.setattr(te_wgrad, "te_version", lambda: "2.6.0")
        monkeypatch.setattr(te_wgrad, "te_importable", lambda: True)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c["megatron"] and not c.get("validate_args_only")])
def test_megatron_lm_check_names_the_problem(name, monkeypatch):
    _pretend_transformer_engine_2_6(name, monkeypatch)
    message = check_schedule_args(megatron_lm_args(**CASES[name]["megatron"]))
    assert message is not None and "\n" not in message
    for needle in CASES[name]["megatron_needles"]:
        assert needle in message, (needle, message)


@pytest.fixture
def megatron_lm_installed(monkeypatch):
    """install() on a stand-in megatron.training whose validate_args fills data_parallel_size."""
    import types

    import primus_megatron.megatron_lm.plugin as plugin

    pkg = types.ModuleType("megatron.training")
    pkg.__path__ = []
    training = types.ModuleType("megatron.training.training")
    training.get_forward_backward_func = lambda *a, **k: None
    training.get_model = lambda provider, *a, **k: None
    initialize = types.ModuleType("megatron.training.initialize")
    calls = []

    def validate_args(args, defaults={}):
        calls.append(args.pipeline_schedule)
        args.data_parallel_size = 1
        return args

    initialize.validate_args = validate_args
    pkg.training, pkg.initialize, pkg.utils = training, initialize, types.ModuleType("megatron.training.utils")
    for name, mod in (("megatron.training", pkg), ("megatron.training.training", training),
                      ("megatron.training.initialize", initialize), ("megatron.training.utils", pkg.utils)):
        monkeypatch.setitem(sys.modules, name, mod)
    megatron = pytest.importorskip("megatron")
    monkeypatch.setattr(megatron, "training", pkg, raising=False)
    monkeypatch.setattr(plugin, "_PLUGIN", None)
    monkeypatch.setenv("RANK", "0")
    plugin.install()
    return initialize, calls


@pytest.mark.parametrize("name", ["unknown schedule", "V layers do not split into 2 x pp",
                                  "memory limit below v-min's", "full recompute with W ops",
                                  "costs not F,B,W under auto", "post-validation without a schedule",
                                  "FP8 with W ops", "TransformerEngine that cannot defer weight gradients",
                                  *[n for n, c in CASES.items() if c.get("split") and c["megatron"]]])
def test_megatron_lm_validate_args_refuses_with_one_line_and_status_2(name, megatron_lm_installed, capsys,
                                                                      monkeypatch):
    initialize, calls = megatron_lm_installed
    _pretend_transformer_engine_2_6(name, monkeypatch)
    args = megatron_lm_args(**{"num_virtual_stages_per_pipeline_rank": None,
                               "num_layers_per_virtual_pipeline_stage": None, **CASES[name]["megatron"]})
    with pytest.raises(SystemExit) as exc:
        initialize.validate_args(args, {})
    assert exc.value.code == 2
    line = _one_line(capsys.readouterr().err, os.path.basename(sys.argv[0]) + ": error: ")
    for needle in CASES[name]["megatron_needles"]:
        assert needle in line, (needle, line)
    # the schedule's name and the layer split are checked before Megatron-LM's own validate_args
    split = name == "V layers do not split into 2 x pp" or CASES[name].get("split")
    before = name in ("unknown schedule", "costs not F,B,W under auto", "post-validation without a schedule")
    assert calls == ([] if before or split else [args.pipeline_schedule])


def test_megatron_lm_validate_args_accepts_a_good_configuration(megatron_lm_installed):
    initialize, calls = megatron_lm_installed
    args = megatron_lm_args(pipeline_schedule="zbv", num_virtual_stages_per_pipeline_rank=None,
                            num_layers_per_virtual_pipeline_stage=None, global_batch_size=8, micro_batch_size=1)
    assert initialize.validate_args(args, {}) is args
    assert args.num_virtual_stages_per_pipeline_rank == 2 and calls == ["zbv"]


# -- the CPU dry run predicts the GPU run's refusals (issue 59) -------------------------------------

# What CPU mode turns off (megatron_lm/cpu_mode.py) and our table refuses with TE layers under zbv
GPU_ONLY = dict(pipeline_schedule="zbv", transformer_impl="transformer_engine", fp8="hybrid", fp8_recipe="blockwise",
                tp_comm_overlap=True, cuda_graph_impl="local")
DRY_RUN_SAYS = "dry run (--cpu): the GPU run would refuse this command line: "


def _validate_args_argv(**values) -> argparse.Namespace:
    return megatron_lm_args(**{"num_virtual_stages_per_pipeline_rank": None,
                               "num_layers_per_virtual_pipeline_stage": None, "global_batch_size": 8,
                               "micro_batch_size": 1, **values})


def _said(out: str) -> list:
    return [line[len(DRY_RUN_SAYS):] for line in out.splitlines() if line.startswith(DRY_RUN_SAYS)]


def test_a_cpu_dry_run_says_what_the_gpu_run_would_refuse_and_goes_on(megatron_lm_installed, capsys, monkeypatch):
    """The GPU run of TE layers with FP8's blockwise recipe, TP communication overlap and CUDA graphs under
    zbv stops at its first refusal; `--cpu` turns all three off (they need a GPU), so judged after that switch
    it would pass them all. It judges the command line as the GPU run sees it first: one line per refused
    option, the first the GPU run's own sentence, then the switch, and Megatron-LM's validation goes on."""
    import primus_megatron.megatron_lm.plugin as plugin
    from primus_megatron.unsupported import installed_te_version

    initialize, calls = megatron_lm_installed
    prog = os.path.basename(sys.argv[0]) + ": error: "
    with pytest.raises(SystemExit) as exc:  # the GPU run
        initialize.validate_args(_validate_args_argv(**GPU_ONLY), {})
    assert exc.value.code == 2
    gpu = _one_line(capsys.readouterr().err, prog)[len(prog):]
    monkeypatch.setattr(plugin._PLUGIN, "cpu_mode", True)
    args = _validate_args_argv(**GPU_ONLY)
    assert initialize.validate_args(args, {}) is args and calls == ["zbv", "zbv"]  # validated, not refused
    out = capsys.readouterr()
    said = _said(out.out)
    options = ["--fp8-format hybrid", "--tp-comm-overlap", "--cuda-graph-impl local"]  # the table's order
    assert len(said) == 3 and all(line.startswith(f"{o} cannot be used with --pipeline-schedule zbv: ")
                                  for o, line in zip(options, said)), said
    assert said[0].startswith(gpu) and "blockwise FP8 recipe" in said[0]
    here = installed_te_version()  # the FP8 rules depend on the TransformerEngine installed where they are judged
    assert (f"TransformerEngine installed here, {here};" if here else "no TransformerEngine installed here") in said[0]
    switched = [line for line in out.out.splitlines() if line.startswith("CPU mode: ")]
    assert len(switched) == 1 and all(f in switched[0] for f in (
        "--transformer-impl local", "no --fp8-format", "no --tp-comm-overlap", "--cuda-graph-impl none")), switched
    assert (args.transformer_impl, args.fp8, args.tp_comm_overlap, args.cuda_graph_impl) == ("local", None, False,
                                                                                            "none")
    assert out.err == ""


def test_a_cpu_dry_run_refuses_what_cpu_mode_leaves_on_as_the_gpu_run_does(megatron_lm_installed, capsys,
                                                                            monkeypatch):
    """--tp-comm-overlap is said (CPU mode turns it off); full recompute with W ops is refused on CPU too:
    the dry run ends there with the GPU run's sentence and status 2, not said twice."""
    import primus_megatron.megatron_lm.plugin as plugin

    initialize, _ = megatron_lm_installed
    monkeypatch.setattr(plugin._PLUGIN, "cpu_mode", True)
    with pytest.raises(SystemExit) as exc:
        initialize.validate_args(_validate_args_argv(pipeline_schedule="zbv", transformer_impl="transformer_engine",
                                                     tp_comm_overlap=True, recompute_granularity="full"), {})
    assert exc.value.code == 2
    out = capsys.readouterr()
    said = _said(out.out)
    assert len(said) == 1 and said[0].startswith("--tp-comm-overlap cannot be used"), said
    assert "--recompute-granularity full cannot be used with --pipeline-schedule zbv" in _one_line(
        out.err, os.path.basename(sys.argv[0]) + ": error: ")


@pytest.mark.parametrize("schedule, own", [("zbv", None), (None, "1f1b")])
def test_megatron_lm_warns_once_when_a_step_has_fewer_microbatches_than_pipeline_ranks(schedule, own,
                                                                                      megatron_lm_installed, capsys):
    """2 microbatches per step on 4 pipeline ranks: one line with the simulator's bubble at 2 and at 4 (the
    warning is the same under megatron's own 1F1B); none at 4 microbatches."""
    initialize, _ = megatron_lm_installed
    name = schedule or own
    idle = [S.simulate(S.generate(name, 4, m)).bubble_sync for m in (2, 4)]
    initialize.validate_args(_validate_args_argv(pipeline_schedule=schedule, global_batch_size=2), {})
    warned = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning: ")]
    assert warned == [f"warning: 2 microbatches per step on 4 pipeline ranks: {name} leaves the ranks idle "
                      f"{100 * idle[0]:.0f}% of each step (simulated bubble; {100 * idle[1]:.0f}% with 4, as many "
                      f"microbatches as ranks); raise --global-batch-size or lower --micro-batch-size (microbatches "
                      f"per step: global batch / (micro batch x data-parallel size))"], warned
    assert idle[0] > idle[1]
    initialize.validate_args(_validate_args_argv(pipeline_schedule=schedule, global_batch_size=4), {})
    assert "warning: " not in capsys.readouterr().out


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c["argv"]])
def test_the_cpu_dry_run_of_pretrain_gpt_refuses_what_its_gpu_run_refuses(name, tmp_path):
    """examples/pretrain_gpt.py builds megatron-core's local layers on GPUs too, and checks every option before
    anything starts, --cpu or not: the dry run's sentence is the GPU run's, for every refusal of the table."""
    from primus_megatron.train.arguments import ConfigError, parse_run

    data = tmp_path / "text_document"
    for ext in (".bin", ".idx"):
        open(str(data) + ext, "wb").close()
    argv = ["--data-path", str(data), "--num-layers", "8", "--pipeline-model-parallel-size", "4", "--micro-batch-size",
            "1", "--global-batch-size", "8", *CASES[name]["argv"]]

    def refusal(*cpu: str) -> str:
        with pytest.raises(ConfigError) as exc:
            parse_run([*cpu, *argv], world_size=WORLD)
        return str(exc.value)

    assert refusal("--cpu") == refusal()


# -- what is accepted next to each refusal ---------------------------------------------------------

def _parse(argv, world=WORLD):
    from primus_megatron.train.arguments import parse

    return parse(["--cpu", "--mock-data", "--num-layers", "8", "--pipeline-model-parallel-size", "4",
                  "--micro-batch-size", "1", "--global-batch-size", "8", *argv], world_size=world)


@pytest.mark.parametrize("argv", [
    ["--pipeline-schedule", "zb-h1", "--recompute-granularity", "selective"],
    ["--pipeline-schedule", "zbv", "--recompute-granularity", "selective"],
    ["--pipeline-schedule", "1f1b", "--recompute-granularity", "full", "--recompute-method", "uniform",
     "--recompute-num-layers", "1", "--hidden-dropout", "0", "--attention-dropout", "0"],
    ["--pipeline-schedule", "interleaved-1f1b", "--recompute-granularity", "full", "--recompute-method", "block",
     "--recompute-num-layers", "1", "--hidden-dropout", "0", "--attention-dropout", "0"],
    ["--pipeline-schedule", "zbv", "--overlap-grad-reduce", "--untie-embeddings-and-output-weights"],
    ["--pipeline-schedule", "zbv", "--overlap-grad-reduce"],  # tied: chunk 0's reduce waits for chunk 1's W
    ["--pipeline-schedule", "zb-h1", "--overlap-grad-reduce"],
    ["--pipeline-schedule", "zb-auto", "--pipeline-memory-limit", "1"],
    ["--pipeline-schedule", "v-min", "--pipeline-memory-limit", "2"],
    ["--pipeline-schedule", "zbv", "--num-layers", "16"],
    # uneven splits
    ["--pipeline-schedule", "zbv", "--num-layers", "14", "--account-for-embedding-in-pipeline-split",
     "--account-for-loss-in-pipeline-split"],
    ["--pipeline-schedule", "v-half", "--num-layers", "12", "--decoder-first-pipeline-num-layers", "2",
     "--decoder-last-pipeline-num-layers", "2"],
    ["--pipeline-schedule", "zbv", "--pipeline-model-parallel-size", "2", "--decoder-first-pipeline-num-layers", "2"],
    ["--pipeline-schedule", "zb-h1", "--num-layers", "10", "--decoder-first-pipeline-num-layers", "1",
     "--decoder-last-pipeline-num-layers", "3"],
    ["--pipeline-schedule", "1f1b", "--num-layers", "3", "--account-for-embedding-in-pipeline-split"],
    ["--pipeline-schedule", "zbv", "--num-layers", "7", "--account-for-loss-in-pipeline-split"],
    ["--pipeline-schedule", "auto", "--num-layers", "7", "--account-for-embedding-in-pipeline-split"],
    ["--num-layers", "6", "--decoder-first-pipeline-num-layers", "3"],  # megatron's own schedule
    ["--pipeline-schedule", "zbv", "--pipeline-model-parallel-layout", "Et|t|t|t|t|t|t|tL"],  # V: any layout
    ["--pipeline-schedule", "zb-h1", "--pipeline-model-parallel-layout", "Ett|ttt|ttt|L"],  # loss alone, last stage
])
def test_the_neighbours_of_each_refusal_are_accepted(argv):
    args = _parse(argv)
    assert args.pipeline_schedule is not None or "--pipeline-schedule" not in argv


@pytest.mark.parametrize("values", [
    # MTP under every placement (under V on rank 0's last chunk, next to the embedding it reads); with a layout
    # its m in the last stage
    *(dict(pipeline_schedule=name, mtp_num_layers=1) for name in ("zb-h1", "zbv", "dualpipev", "v-min")),
    dict(pipeline_schedule="zbv", mtp_num_layers=2, pipeline_model_parallel_layout="Et|t|t|t|t|t|t|tmmL"),
    dict(pipeline_schedule="zbv", context_parallel_size=2, transformer_impl="transformer_engine", bf16=True),
    dict(pipeline_schedule="zbv", context_parallel_size=2, transformer_impl="transformer_engine", fp16=True),
    *(dict(pipeline_schedule="zbv", context_parallel_size=2, cp_comm_type=kind, transformer_impl="transformer_engine",
           bf16=True) for kind in ("p2p", "a2a", "all_gather")),  # the exchanges the production matrix runs
    # a2a+p2p with one level of size 1 is TE's plain p2p or a2a (context_parallel.py 3996-4001)
    dict(pipeline_schedule="zbv", context_parallel_size=2, cp_comm_type="a2a+p2p",
         hierarchical_context_parallel_sizes=[1, 2], transformer_impl="transformer_engine", bf16=True),
    dict(pipeline_schedule="zbv", moe_grouped_gemm=True, transformer_impl="transformer_engine"),
    dict(pipeline_schedule="1f1b", moe_grouped_gemm=True, transformer_impl="local"),  # no W ops to defer
    # megatron-core 0.19's single grouped expert parameters: without W ops TE's own backward runs them
    dict(pipeline_schedule="1f1b", moe_grouped_gemm=True, moe_single_grouped_bias=True, add_bias_linear=True,
         transformer_impl="transformer_engine"),
    dict(pipeline_schedule="zbv", moe_grouped_gemm=True, moe_single_grouped_weight=False, moe_single_grouped_bias=False,
         fp8_output_proj=False, transformer_impl="transformer_engine"),
    dict(pipeline_schedule="zbv", num_layers=14, account_for_embedding_in_pipeline_split=True,
         account_for_loss_in_pipeline_split=True),
    dict(pipeline_schedule="interleaved-zb", num_layers=12, decoder_first_pipeline_num_layers=2,
         decoder_last_pipeline_num_layers=2),
    dict(pipeline_schedule="zb-h1", pipeline_model_parallel_layout="Ett|tt|tt|ttL"),  # a layout of 4 stages
    dict(pipeline_schedule="zbv", pipeline_model_parallel_layout="Et|t|t|t|t|t|t|tL"),  # and of 8 under V
    dict(pipeline_schedule="zbv", cuda_graph_impl="none", defer_embedding_wgrad_compute=False,
         variable_seq_lengths=False, overlap_moe_expert_parallel_comm=False, fine_grained_activation_offloading=False),
])
def test_megatron_lm_neighbours_of_the_unsupported_settings_are_accepted(values):
    assert check_schedule_args(megatron_lm_args(**values)) is None


def test_sequence_parallel_without_tensor_parallelism_is_turned_off():
    assert _parse(["--pipeline-schedule", "zb-h1", "--sequence-parallel"]).sequence_parallel is False


def test_megatron_lm_fp8_with_w_is_accepted_for_a_verified_transformer_engine(monkeypatch):
    """The FP8 refusal is data: a TransformerEngine version the GPU check verified is accepted."""
    from primus_megatron import unsupported

    args = megatron_lm_args(pipeline_schedule="zbv", fp8="hybrid", transformer_impl="transformer_engine")
    assert "not yet verified" in check_schedule_args(args)
    # TE 2.11 with the recipes the CPU stand-in reproduces (issue 54): accepted, other recipes refused by name
    monkeypatch.setattr(unsupported, "installed_te_version", lambda: "2.11.0")
    assert check_schedule_args(args) is None
    assert "the blockwise FP8 recipe" in check_schedule_args(
        megatron_lm_args(pipeline_schedule="zbv", fp8="hybrid", fp8_recipe="blockwise", transformer_impl="transformer_engine"))
    monkeypatch.setattr(unsupported, "installed_te_version", lambda: "2.12.0")
    assert "not yet verified" in check_schedule_args(args)
    monkeypatch.setattr(unsupported, "FP8_VERIFIED_TE_VERSIONS", frozenset({("2.12.0", "cuda")}))
    monkeypatch.setattr(unsupported, "te_platform", lambda: "cuda")
    assert check_schedule_args(args) is None
    assert unsupported.FP8_VERIFIED_TE_VERSIONS  # (the monkeypatch: today's set is empty, see below)
    # issue 45 item 10: ROCm's TransformerEngine reports upstream's version; verified on NVIDIA says nothing of it
    monkeypatch.setattr(unsupported, "te_platform", lambda: "rocm-gfx942")
    assert "not yet verified" in check_schedule_args(args)
    # and on ROCm by GPU target: MI300's FNUZ FP8 formats are not MI355's OCP ones
    monkeypatch.setattr(unsupported, "FP8_VERIFIED_TE_VERSIONS", frozenset({("2.12.0", "rocm-gfx950")}))
    assert "not yet verified" in check_schedule_args(args)
    monkeypatch.setattr(unsupported, "te_platform", lambda: "rocm-gfx950")
    assert check_schedule_args(args) is None


@pytest.mark.parametrize("values, needle", [
    (dict(fp8="hybrid", fp8_recipe="blockwise"), "the blockwise FP8 recipe (its 1x128 and 128x128 block scales)"),
    (dict(fp8="hybrid", fp8_recipe="mxfp8"), "the mxfp8 FP8 recipe (its E8M0 scales per 32-element block)"),
    (dict(fp8="e4m3", fp8_recipe="custom"), "the custom FP8 recipe (the quantizers of its --fp8-quantizer-factory)"),
    (dict(fp4="e2m1"), "the nvfp4 FP4 recipe (its E2M1 values with an E4M3 scale per 16-element block and a "
                       "per-tensor scale)"),
    (dict(fp4="e2m1", fp4_recipe="custom"), "the custom FP4 recipe (the quantizers of its --fp4-quantizer-factory)"),
])
def test_megatron_lm_recipes_not_reproduced_are_refused_by_name(monkeypatch, values, needle):
    """On the TransformerEngine the CPU stand-in reproduces (2.11), each FP8 / FP4 recipe it does not is refused
    with W ops in one sentence naming the recipe and why (issue 54); the reproduced ones, grouped experts
    included, are accepted."""
    from primus_megatron import unsupported

    monkeypatch.setattr(unsupported, "installed_te_version", lambda: "2.11.0")
    refusal = check_schedule_args(megatron_lm_args(pipeline_schedule="zbv", transformer_impl="transformer_engine",
                                                   **values))
    assert refusal is not None and needle in refusal and "our CPU reproduction of TransformerEngine" in refusal
    assert refusal.count(". ") == 0, refusal  # one sentence
    for recipe in ("delayed", "tensorwise"):
        assert check_schedule_args(megatron_lm_args(pipeline_schedule="zbv", transformer_impl="transformer_engine",
                                                    fp8="hybrid", fp8_recipe=recipe, moe_grouped_gemm=True,
                                                    moe_router_padding_for_fp8=True)) is None, recipe


def test_offload_in_fp8_is_accepted_where_the_stand_in_reproduces_it(monkeypatch):
    """Activation offload moves TE's quantized tensors (issue 54 item 5): accepted with FP8 on TE 2.11 under the
    delayed and tensorwise recipes, with or without W ops; refused in one sentence each for the recipes the
    stand-in does not reproduce, FP8 parameters, FP4 and FP8 on another TE version."""
    from primus_megatron import unsupported

    monkeypatch.setattr(unsupported, "installed_te_version", lambda: "2.11.0")
    for schedule in ("1f1b", "zbv"):
        for recipe in ("delayed", "tensorwise"):
            assert check_schedule_args(megatron_lm_args(
                pipeline_schedule=schedule, pipeline_offload="all", fp8="hybrid", fp8_recipe=recipe,
                transformer_impl="transformer_engine", moe_grouped_gemm=True)) is None, (schedule, recipe)
    for values, needle in ((dict(fp8="hybrid", fp8_recipe="blockwise"), "not the blockwise FP8 recipe"),
                           (dict(fp8="e4m3", fp8_param=True), "not FP8 parameters (fp8_model_init)"),
                           (dict(fp4="e2m1", fp4_recipe="custom"), "not the custom FP4 recipe")):
        refusal = check_schedule_args(megatron_lm_args(pipeline_schedule="1f1b", pipeline_offload="auto",
                                                       transformer_impl="transformer_engine", **values))
        assert refusal is not None and needle in refusal and "--pipeline-offload auto" in refusal, refusal
        assert refusal.count(". ") == 0, refusal  # one sentence
    monkeypatch.setattr(unsupported, "installed_te_version", lambda: "2.12.0")
    assert "not FP8 on another TransformerEngine version" in check_schedule_args(megatron_lm_args(
        pipeline_schedule="1f1b", pipeline_offload="all", fp8="hybrid", transformer_impl="transformer_engine"))


def test_the_fp8_platform_names_the_rocm_gpu_target(monkeypatch):
    from types import SimpleNamespace

    import torch

    from primus_megatron import unsupported

    assert unsupported.te_platform() == "cuda"  # this machine's torch has no HIP
    monkeypatch.setattr(torch.version, "hip", "6.4.43482", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: SimpleNamespace(gcnArchName="gfx942:sramecc+:xnack-"))
    assert unsupported.te_platform() == "rocm-gfx942"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert unsupported.te_platform() == "rocm"


def test_no_transformer_engine_version_is_verified_for_fp8_with_w_ops_yet():
    from primus_megatron import unsupported

    assert unsupported.FP8_VERIFIED_TE_VERSIONS == frozenset()  # until tests/test_gpu_te.py verifies one


@pytest.mark.parametrize("values", [
    dict(pipeline_schedule="1f1b", fp8="hybrid", transformer_impl="transformer_engine"),  # no W ops: fine
    dict(pipeline_schedule="interleaved-1f1b", pipeline_chunks=2, fp8="e4m3", transformer_impl="transformer_engine"),
    dict(pipeline_schedule="zbv", fp8="hybrid", transformer_impl="local"),  # local layers: FP8 is not theirs
    dict(pipeline_schedule="1f1b", tp_comm_overlap=True, transformer_impl="transformer_engine"),
    dict(pipeline_schedule="zbv", tp_comm_overlap=True, transformer_impl="local"),
])
def test_megatron_lm_neighbours_of_the_transformer_engine_refusals_are_accepted(values, monkeypatch):
    """Without W ops TE's store is never touched (any TE, FP8 and userbuffers are TE's own business)."""
    from primus_megatron.runtime import te_wgrad

    monkeypatch.setattr(te_wgrad, "support_problem", lambda what: pytest.fail(f"TE asked for {what}"))
    assert check_schedule_args(megatron_lm_args(**values)) is None


def test_save_without_psutil_is_refused_before_training(monkeypatch, tmp_path):
    """megatron's checkpoint writer needs psutil mid-save: refuse at start-up, not at the first save."""
    import importlib.util

    from primus_megatron.train.arguments import ConfigError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "psutil" else real(name, *a))
    with pytest.raises(ConfigError, match=r"^--save needs the psutil package .*: pip install psutil$"):
        _parse(["--save", str(tmp_path / "ckpt")])
    assert _parse([]).save is None
    assert not (tmp_path / "ckpt").exists()


def test_a_schedules_own_microbatch_minimum_is_reported(monkeypatch):
    """A registered schedule that needs more microbatches says so through both entry points."""
    from primus_megatron.schedules import registry
    from primus_megatron.schedules.errors import ScheduleError
    from primus_megatron.train.arguments import ConfigError

    base = registry.info("zb-h1")

    def needs_two_per_rank(pp, microbatches, **kw):
        if microbatches < 2 * pp:
            raise ScheduleError(f"test-min needs at least {2 * pp} microbatches (2 per pipeline rank), got "
                                f"{microbatches}")
        return base.generator(pp, microbatches, **kw)

    monkeypatch.setitem(registry._REGISTRY, "test-min", base.__class__(
        "test-min", needs_two_per_rank, base.placement, base.chunks, base.memory, "test", splits_backward=True))
    with pytest.raises(ConfigError, match=r"test-min with 4 microbatches .* needs at least 8 microbatches"):
        _parse(["--pipeline-schedule", "test-min", "--global-batch-size", "4"])
    assert _parse(["--pipeline-schedule", "test-min"]).num_microbatches == 8
    message = check_schedule_args(megatron_lm_args(pipeline_schedule="test-min", global_batch_size=6,
                                                   micro_batch_size=1, data_parallel_size=1))
    assert "needs at least 8 microbatches (2 per pipeline rank), got 6" in message


# -- fuzzing: random command lines never end in an unexpected exception ------------------------------

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# bounded and reproducible by default; PRIMUS_FUZZ_EXAMPLES=5000 explores (randomly) for longer
_EXAMPLES = int(os.environ.get("PRIMUS_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=_EXAMPLES, deadline=None, derandomize="PRIMUS_FUZZ_EXAMPLES" not in os.environ, database=None)
JUNK = ["0", "-1", "1.5", "nan", "inf", "-inf", "1e3", "abc", "", "1,2", "--", "-"]
_FUZZ_DIR = tempfile.mkdtemp(prefix="primus-fuzz-")
atexit.register(shutil.rmtree, _FUZZ_DIR, True)
PATHS = [os.path.join(_FUZZ_DIR, "x.png"), os.path.join(_FUZZ_DIR, "x.json"), os.path.join(_FUZZ_DIR, "x.txt"),
         "/nonexistent/dir/x.png", _FUZZ_DIR]
INTS = ["1", "2", "3", "4", "8", "16"]
NUMBERS = ["0.5", "1", "2", "3.5", "1,2", "1,1,1,1", "1,2,3,4,5,6,7,8", "0,1"]
CLI_OPTIONS = {
    "--schedule": S.names(aliases=True) + ["zb-v", "ZBV", "1f1b-interleaved"], "--pp": INTS,
    "--microbatches": INTS, "-m": INTS, "--chunks": INTS, "--cost-f": NUMBERS, "--cost-b": NUMBERS,
    "--cost-w": NUMBERS, "--cost-comm": NUMBERS, "--memory-limit": NUMBERS + ["0.25", "100"], "--json": None,
    "--format": ["json", "torch", "xml"], "--output": PATHS, "-o": PATHS, "--trace": PATHS, "--plot": PATHS,
}


def _argv(data, options: dict, first=()):
    """A command line drawn from real options with plausible or junk values (or none, or a stray word)."""
    argv = list(first)
    for option in data.draw(st.lists(st.sampled_from(sorted(options)), max_size=7), label="options"):
        argv.append(option)
        values = options[option]
        junk = data.draw(st.integers(0, 9), label="junk") == 0  # one value in ten is junk (or a stray word)
        if values is not None and not junk:
            argv.append(data.draw(st.sampled_from(values), label=option))
        elif junk:
            argv.append(data.draw(st.sampled_from(JUNK), label=option))
    return argv


@contextlib.contextmanager
def _fast_zb_optimal():
    """zb-optimal's integer program may run for a minute: a stand-in that refuses at once
    (for the zb-optimal schedule and for compare's distance to the optimum)."""
    from unittest import mock

    from primus_megatron.schedules import registry
    from primus_megatron.schedules.errors import ScheduleError

    entry = registry.info("zb-optimal")

    def refuse(*a, **k):
        raise ScheduleError("zb-optimal is not solved while fuzzing")

    with mock.patch.dict(registry._REGISTRY, {"zb-optimal": entry.__class__(
            entry.name, refuse, entry.placement, entry.chunks, entry.memory, entry.description)}), \
            mock.patch("primus_megatron.schedules.optimality.solve", refuse):  # compare's 'vs optimum' column
        yield


CLI_OUTCOMES: dict = {}


@FUZZ
@given(st.data())
def test_fuzz_planner_cli_exits_0_or_2_without_traceback(data):
    from primus_megatron import cli

    # mostly the commands that compute, usually with their required options (to get past argparse)
    commands = ["simulate"] * 6 + ["compare"] * 3 + ["export"] * 3 + ["list", "plot", "-h"]
    command = commands[data.draw(st.integers(0, len(commands) - 1), label="command")]
    required = []
    if command != "list" and data.draw(st.integers(0, 9), label="required") > 0:
        required = ["--pp", data.draw(st.sampled_from(["2", "3", "4", "8"])), "-m", data.draw(st.sampled_from(INTS))]
        if command in ("simulate", "export"):
            required += ["--schedule", data.draw(st.sampled_from(CLI_OPTIONS["--schedule"]))]
    argv = _argv(data, CLI_OPTIONS, [command, *required])
    err = io.StringIO()
    # in a scratch folder: a junk value given to --output/--trace is a file name there
    with _fast_zb_optimal(), contextlib.chdir(_FUZZ_DIR), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # --help
            code = exc.code
    CLI_OUTCOMES[code] = CLI_OUTCOMES.get(code, 0) + 1
    assert code in (0, 2), (argv, code, err.getvalue())
    assert "Traceback" not in err.getvalue() and "internal error" not in err.getvalue(), (argv, err.getvalue())
    if code == 2:
        assert len(err.getvalue().strip().splitlines()) == 1 or "usage:" in err.getvalue(), err.getvalue()


def _pretrain_options() -> dict:
    from primus_megatron.train.arguments import build_parser

    options = {}
    for action in build_parser()._actions:
        if not action.option_strings or "--help" in action.option_strings:
            continue
        if action.nargs == 0:
            values = None
        elif action.choices:
            values = [str(c) for c in action.choices]
        elif action.type is int:
            values = INTS + ["0"]
        elif action.type is float:
            values = ["0", "0.01", "0.5", "1", "2", "600", "1e-3"]
        else:
            values = PATHS + S.names(aliases=True) + ["1,2,3", "1,1,1,0"]
        for option in action.option_strings:
            options[option] = values
    return options


PRETRAIN_OPTIONS = _pretrain_options()
PRETRAIN_OUTCOMES: dict = {}


@FUZZ
@given(st.data(), st.sampled_from([1, 2, 4, 8]))
def test_fuzz_pretrain_arguments_raise_only_usage_or_config_errors(data, world):
    from primus_megatron.train.arguments import ConfigError, parse

    argv = _argv(data, PRETRAIN_OPTIONS, ["--mock-data"] if data.draw(st.booleans(), label="mock") else [])
    outcome = "ok"
    with _fast_zb_optimal(), contextlib.redirect_stderr(io.StringIO()):
        try:
            parse(argv, world_size=world)
        except SystemExit as exc:
            outcome = "usage"
            assert exc.code == 2, (argv, exc.code)
        except ConfigError as exc:
            outcome = "config"
            assert str(exc) and "\n" not in str(exc), argv
    PRETRAIN_OUTCOMES[outcome] = PRETRAIN_OUTCOMES.get(outcome, 0) + 1
