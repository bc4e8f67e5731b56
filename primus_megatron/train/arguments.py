"""Command-line arguments of examples/pretrain_gpt.py: Megatron-LM's names and
meanings (a subset), plus the pipeline-schedule group. Everything is checked
before any process group is created; a problem is one sentence (ConfigError)."""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
from typing import Optional, Sequence

from .. import options
from ..options import PipelineSpec
from .dataset_paths import missing_dataset


class ConfigError(ValueError):
    """Bad command-line input; the message names the option and what is allowed."""


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one sentence (ConfigError), not the usage text before it."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(f"{message} (see 'pretrain_gpt.py --help')")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="pretrain_gpt.py", description="Pretrain a GPT with megatron-core and "
                "primus_megatron's pipeline schedules (Megatron-LM argument names).", allow_abbrev=False)
    for add in (_model_args, _training_args, _parallel_args, _data_args, _checkpoint_args, _fault_args,
                options.add_args):
        add(p)
    return p


def _model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--num-layers", type=int, default=8)
    g.add_argument("--hidden-size", type=int, default=128)
    g.add_argument("--ffn-hidden-size", type=int, default=None,
                   help="default: 4 x hidden size (with --swiglu 2/3 of that, rounded down to a multiple of 64)")
    g.add_argument("--num-attention-heads", type=int, default=4)
    g.add_argument("--seq-length", type=int, default=128)
    g.add_argument("--max-position-embeddings", type=int, default=None, help="default: seq length")
    g.add_argument("--vocab-size", type=int, default=None, help="mock data vocabulary (default: the tokenizer's)")
    g.add_argument("--make-vocab-size-divisible-by", type=int, default=128)
    g.add_argument("--untie-embeddings-and-output-weights", action="store_true")
    g.add_argument("--hidden-dropout", type=float, default=0.1)
    g.add_argument("--attention-dropout", type=float, default=0.1)
    g.add_argument("--init-method-std", type=float, default=0.02)
    # the architectures teams train (Llama/Qwen/Mistral): Megatron-LM's names and defaults
    g.add_argument("--normalization", choices=["LayerNorm", "RMSNorm"], default="LayerNorm")
    g.add_argument("--norm-epsilon", type=float, default=1e-5)
    g.add_argument("--position-embedding-type", choices=["learned_absolute", "rope", "none"],
                   default="learned_absolute")
    g.add_argument("--rotary-base", type=int, default=10000, help="RoPE base (with --position-embedding-type rope)")
    g.add_argument("--rotary-percent", type=float, default=1.0, help="share of each head's dimensions RoPE rotates")
    g.add_argument("--swiglu", action="store_true", help="SwiGLU MLP (gated, SiLU) instead of GeLU")
    g.add_argument("--group-query-attention", action="store_true")
    g.add_argument("--num-query-groups", type=int, default=1, help="key/value heads, with --group-query-attention")
    g.add_argument("--qk-layernorm", action="store_true", help="normalise queries and keys per head (Qwen3)")
    g.add_argument("--disable-bias-linear", action="store_false", dest="add_bias_linear",
                   help="no biases in the linear layers")
    # mixtures of experts (DeepSeek/Qwen-MoE-style): megatron-core's MoE layer over local linear layers
    # (SequentialMLP experts, whose weight gradients our W ops take)
    g.add_argument("--num-experts", type=int, default=None, help="routed experts per MoE layer (default: dense)")
    g.add_argument("--moe-router-topk", type=int, default=2)
    g.add_argument("--moe-ffn-hidden-size", type=int, default=None, help="one expert's FFN width (default: "
                   "--ffn-hidden-size)")
    g.add_argument("--moe-shared-expert-intermediate-size", type=int, default=None,
                   help="the shared experts' FFN width in all (default: none)")
    g.add_argument("--moe-router-load-balancing-type", choices=["aux_loss", "seq_aux_loss", "none"],
                   default="aux_loss")
    g.add_argument("--moe-aux-loss-coeff", type=float, default=0.0)
    g.add_argument("--moe-token-dispatcher-type", choices=["allgather", "alltoall"], default="allgather")
    g.add_argument("--expert-model-parallel-size", type=int, default=1)
    g.add_argument("--moe-grouped-gemm", action="store_true", help=argparse.SUPPRESS)  # refused: _check_model
    g.add_argument("--multi-latent-attention", action="store_true", help=argparse.SUPPRESS)  # refused likewise


def _training_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("training")
    g.add_argument("--micro-batch-size", type=int, default=4)
    g.add_argument("--global-batch-size", type=int, default=None, help="default: micro batch x data parallel")
    g.add_argument("--train-iters", type=int, default=100)
    g.add_argument("--lr", type=float, default=1e-3)
    g.add_argument("--min-lr", type=float, default=0.0)
    g.add_argument("--lr-decay-style", choices=["constant", "linear", "cosine", "inverse-square-root", "WSD"],
                   default="cosine")
    g.add_argument("--lr-warmup-iters", type=int, default=0)
    g.add_argument("--lr-decay-iters", type=int, default=None, help="default: train iters")
    g.add_argument("--weight-decay", type=float, default=0.01)
    g.add_argument("--clip-grad", type=float, default=1.0)
    g.add_argument("--adam-beta1", type=float, default=0.9)
    g.add_argument("--adam-beta2", type=float, default=0.999)
    g.add_argument("--adam-eps", type=float, default=1e-8)
    g.add_argument("--bf16", action="store_true")
    g.add_argument("--fp16", action="store_true")
    g.add_argument("--loss-scale", type=float, default=None, help="static fp16 loss scale (default: dynamic)")
    g.add_argument("--initial-loss-scale", type=float, default=2.0 ** 16)
    g.add_argument("--seed", type=int, default=1234)
    g.add_argument("--use-distributed-optimizer", action="store_true")
    g.add_argument("--overlap-grad-reduce", action="store_true")
    g.add_argument("--accumulate-allreduce-grads-in-fp32", action="store_true")
    g.add_argument("--calculate-per-token-loss", action="store_true",
                   help="normalise the loss by the loss tokens of the whole global batch, not per microbatch "
                        "(Megatron-LM's option; always on with --pipeline-balance-data)")
    g.add_argument("--optimizer-post-validation", action="store_true",
                   help="no global synchronisation before the optimizer step: step optimistically, validate "
                        "during the next iteration's first forwards, roll back exactly if needed")
    g.add_argument("--inject-nonfinite-grad", default=None, metavar="ITER[:STAGE]",
                   help="testing aid: put a NaN into the gradients of pipeline stage STAGE (default 0) at "
                        "iteration ITER, as an overflow would")
    g.add_argument("--gradient-accumulation-fusion", action="store_true",
                   help="accumulate weight gradients straight into fp32 main grads (apex kernel on GPU)")
    g.add_argument("--recompute-granularity", choices=["full", "selective"], default=None,
                   help="activation recompute: 'selective' recomputes core attention; 'full' whole layers (not with "
                        "schedules that have W ops)")
    g.add_argument("--recompute-method", choices=["uniform", "block"], default=None,
                   help="which layers --recompute-granularity full recomputes")
    g.add_argument("--recompute-num-layers", type=int, default=None,
                   help="layers per recompute unit (uniform) or per stage (block), with --recompute-granularity full")
    _fp8_and_nan_check_args(g)


def _fp8_and_nan_check_args(g) -> None:
    g.add_argument("--fp8-format", choices=["e4m3", "hybrid"], default=None, dest="fp8",
                   help="TransformerEngine FP8 (Megatron-LM's option; refused here: this script builds megatron-core's "
                        "local layers)")
    g.add_argument("--no-check-for-nan-in-loss", "--no-check-for-nan-in-loss-and-grad", action="store_false",
                   dest="check_for_nan_in_loss",
                   help="keep training when the loss is NaN/inf (default: stop with the iteration and pipeline stage)")


def _parallel_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("parallelism")
    g.add_argument("--tensor-model-parallel-size", type=int, default=1)
    g.add_argument("--pipeline-model-parallel-size", type=int, default=1)
    g.add_argument("--decoder-first-pipeline-num-layers", type=int, default=None, metavar="N",
                   help="transformer layers of the first pipeline rank (all its chunks; a multiple of the chunks per "
                        "rank); the middle ranks share the rest evenly (Megatron-LM's option; default: even split)")
    g.add_argument("--decoder-last-pipeline-num-layers", type=int, default=None, metavar="N",
                   help="transformer layers of the last pipeline rank, as --decoder-first-pipeline-num-layers")
    g.add_argument("--account-for-embedding-in-pipeline-split", action="store_true",
                   help="count the embedding as a layer of the split: the first stage holds one transformer layer "
                        "fewer (under V placement rank 0 holds the first stage)")
    g.add_argument("--account-for-loss-in-pipeline-split", action="store_true",
                   help="count the output layer and loss as a layer of the split: the last stage holds one "
                        "transformer layer fewer (under V placement rank 0 holds the last stage too)")
    g.add_argument("--pipeline-model-parallel-layout", default=None, metavar="LAYOUT",
                   help="every global stage's layers, stages in order separated by '|': E embedding, t transformer "
                        "layer, L output layer and loss, 'x*n' / '(...)*n' repeat (Megatron-LM's option), e.g. "
                        "'Et|ttt|ttt|tL' for pp=2 x 2 chunks; excludes the four options above")
    g.add_argument("--sequence-parallel", action="store_true")
    g.add_argument("--distributed-backend", choices=["nccl", "gloo"], default=None,
                   help="default: gloo with --cpu, else nccl (RCCL on ROCm)")
    g.add_argument("--distributed-timeout-minutes", type=int, default=10)
    g.add_argument("--cpu", action="store_true", help="run on CPU with gloo (primus_megatron.compat.cpu)")


def _data_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data")
    g.add_argument("--data-path", nargs="*", default=None, help="PREFIX or W1 PREFIX1 W2 PREFIX2 ... (Megatron syntax)")
    g.add_argument("--split", default="969,30,1")
    g.add_argument("--mock-data", action="store_true")
    g.add_argument("--eod-mask-loss", action="store_true", help="no loss on end-of-document tokens (Megatron-LM's option)")
    g.add_argument("--tokenizer-type", default="ByteTokenizer", choices=["ByteTokenizer", "HuggingFaceTokenizer"])
    g.add_argument("--tokenizer-model", default=None)
    g.add_argument("--data-cache-path", default=None)


def _checkpoint_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("checkpointing and logging")
    g.add_argument("--save", default=None)
    g.add_argument("--load", default=None)
    g.add_argument("--save-interval", type=int, default=None)
    g.add_argument("--ckpt-step", type=int, default=None, help="load this iteration instead of the latest")
    g.add_argument("--no-load-optim", action="store_true")
    g.add_argument("--no-load-rng", action="store_true")
    g.add_argument("--finetune", action="store_true")
    g.add_argument("--log-interval", type=int, default=1)
    g.add_argument("--eval-interval", type=int, default=None)
    g.add_argument("--eval-iters", type=int, default=2)
    g.add_argument("--exit-interval", type=int, default=None)
    g.add_argument("--timeline", default=None, metavar="FILE.png|.svg",
                   help="draw the executed schedule (measured op times of the last iteration) and write FILE.json "
                        "as a Chrome trace")


def _fault_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("fault injection (testing aids: they make a healthy run fail on purpose)")
    g.add_argument("--inject-nan-loss-at", type=int, default=None, metavar="ITER",
                   help="the loss function returns NaN in iteration ITER (as numbered in the log)")
    g.add_argument("--inject-kill-at", type=int, default=None, metavar="ITER",
                   help="SIGKILL this process in the middle of iteration ITER (during its second forward op)")
    g.add_argument("--inject-kill-rank", type=int, default=None, metavar="RANK",
                   help="with --inject-kill-at: only global rank RANK dies (default: every rank)")


def _world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def validate(args: argparse.Namespace, world_size: Optional[int] = None) -> argparse.Namespace:
    """Fill defaults the way Megatron-LM does and check the combination.
    Raises ConfigError with one sentence naming the option."""
    return validated(args, world_size)[0]


def validated(args: argparse.Namespace,
              world_size: Optional[int] = None) -> tuple[argparse.Namespace, Optional[PipelineSpec]]:
    """`validate`, and the PipelineSpec of the checked arguments (None: megatron's own schedule),
    built once here: with --pipeline-balance FILE on the split chosen from the profile. One pass,
    each check beside what it checks: numbers, the model, the parallel layout, recompute, the
    batch, the pipeline schedule, inputs and outputs, testing aids, the environment."""
    world = _world_size() if world_size is None else world_size
    _check_numbers(args, world)
    _check_model(args)
    _check_parallel(args, world)
    _check_recompute(args)
    _check_batch(args)
    spec = _pipeline_spec(args)
    _check_io(args)
    _check_testing_aids(args)
    from ..compat.attention_env import AttentionEnvError, backend_for

    try:
        backend_for()  # NVTE_*_ATTN (AMD's images set them) must agree with one backend: model.py takes it
    except AttentionEnvError as exc:
        raise ConfigError(str(exc)) from None
    return args, spec


POSITIVE = ("moe_router_topk", "expert_model_parallel_size", "num_layers", "hidden_size", "num_attention_heads", "seq_length", "micro_batch_size", "train_iters",
            "tensor_model_parallel_size", "pipeline_model_parallel_size", "log_interval", "eval_iters",
            "make_vocab_size_divisible_by", "distributed_timeout_minutes")
POSITIVE_IF_GIVEN = ("num_query_groups", "rotary_base", "num_experts", "moe_ffn_hidden_size",
                     "moe_shared_expert_intermediate_size", "save_interval", "eval_interval", "exit_interval", "lr_decay_iters", "global_batch_size",
                     "ffn_hidden_size", "max_position_embeddings", "vocab_size", "recompute_num_layers",
                     "inject_nan_loss_at", "inject_kill_at", "ckpt_step", "decoder_first_pipeline_num_layers",
                     "decoder_last_pipeline_num_layers")
FINITE = ("lr", "min_lr", "weight_decay", "clip_grad", "adam_beta1", "adam_beta2", "adam_eps",
          "initial_loss_scale", "init_method_std", "hidden_dropout", "attention_dropout", "loss_scale",
          "norm_epsilon", "rotary_percent", "moe_aux_loss_coeff")


def _check_numbers(args: argparse.Namespace, world: int) -> None:
    """Each number on its own: positive counts, finite values, ranges."""
    for name in POSITIVE:
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in POSITIVE_IF_GIVEN:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    for name in FINITE:
        value = getattr(args, name)
        if value is not None and not math.isfinite(value):
            raise ConfigError(f"--{name.replace('_', '-')} must be a finite number, got {value:g}")
    if args.seed < 0:
        raise ConfigError(f"--seed must be >= 0, got {args.seed}")
    if args.inject_kill_rank is not None:
        if args.inject_kill_at is None:
            raise ConfigError("--inject-kill-rank needs --inject-kill-at ITER")
        if not 0 <= args.inject_kill_rank < world:
            raise ConfigError(f"--inject-kill-rank must be a global rank in [0, {world - 1}], got {args.inject_kill_rank}")
    if args.lr_warmup_iters < 0:
        raise ConfigError(f"--lr-warmup-iters must be >= 0, got {args.lr_warmup_iters}")
    if args.lr < 0 or args.min_lr < 0 or args.min_lr > args.lr:
        raise ConfigError(f"--lr and --min-lr must satisfy 0 <= min-lr <= lr, got lr {args.lr:g}, min-lr {args.min_lr:g}")
    if args.clip_grad < 0:
        raise ConfigError(f"--clip-grad must be >= 0 (0 disables clipping), got {args.clip_grad:g}")
    for name in ("hidden_dropout", "attention_dropout"):
        if not 0.0 <= getattr(args, name) < 1.0:
            raise ConfigError(f"--{name.replace('_', '-')} must be in [0, 1), got {getattr(args, name):g}")
    if args.bf16 and args.fp16:
        raise ConfigError("--bf16 and --fp16 cannot be combined: choose one")
    if args.lr_decay_iters is None:
        args.lr_decay_iters = args.train_iters


def _check_parallel(args: argparse.Namespace, world: int) -> None:
    """Tensor, pipeline and data-parallel sizes (sets data_parallel_size, as Megatron-LM)."""
    if args.hidden_size % args.num_attention_heads:
        raise ConfigError(f"--hidden-size {args.hidden_size} must be divisible by --num-attention-heads "
                          f"{args.num_attention_heads}")
    tp, pp = args.tensor_model_parallel_size, args.pipeline_model_parallel_size
    if world % (tp * pp):
        raise ConfigError(f"the world size {world} must be divisible by --tensor-model-parallel-size {tp} x "
                          f"--pipeline-model-parallel-size {pp}")
    args.data_parallel_size = world // (tp * pp)
    ep = args.expert_model_parallel_size
    if args.num_experts is not None and args.data_parallel_size % ep:
        raise ConfigError(f"--expert-model-parallel-size {ep} must divide the data-parallel size "
                          f"{args.data_parallel_size} (the experts are split over the data-parallel ranks)")
    if args.num_experts is not None and tp > 1 and not (args.sequence_parallel and not args.add_bias_linear):
        # megatron-core: MoE layers under tensor parallelism need sequence parallelism (moe_layer.py:379 at
        # 0.16.1) and its experts no biases ("Bias in Moe is only supported when ETP==1")
        raise ConfigError(f"--num-experts with --tensor-model-parallel-size {tp} needs --sequence-parallel and "
                          f"--disable-bias-linear (megatron-core's MoE layers under tensor parallelism)")
    groups = args.num_query_groups
    if groups is not None and groups % tp and tp % groups:
        raise ConfigError(f"--num-query-groups {groups} must be a multiple or a divisor of "
                          f"--tensor-model-parallel-size {tp}")
    if args.num_attention_heads % tp:
        raise ConfigError(f"--num-attention-heads {args.num_attention_heads} must be divisible by "
                          f"--tensor-model-parallel-size {tp}")
    if args.sequence_parallel and tp == 1:
        args.sequence_parallel = False  # as Megatron-LM: meaningless without tensor parallelism
    if args.sequence_parallel and args.seq_length % tp:
        raise ConfigError(f"--seq-length {args.seq_length} must be divisible by --tensor-model-parallel-size {tp} "
                          f"with --sequence-parallel")


def _check_batch(args: argparse.Namespace) -> None:
    """Global batch (default: micro batch x data parallel) and the microbatch count."""
    dp = args.data_parallel_size
    if args.global_batch_size is None:
        args.global_batch_size = args.micro_batch_size * dp
    if args.global_batch_size % (args.micro_batch_size * dp):
        raise ConfigError(f"--global-batch-size {args.global_batch_size} must be divisible by --micro-batch-size "
                          f"{args.micro_batch_size} x data-parallel size {dp}")
    args.num_microbatches = args.global_batch_size // (args.micro_batch_size * dp)
    # --pipeline-balance-data: each replica packs its share into a count of its own every step
    # (train/balanced_data.py); num_microbatches stays the unpacked count (evaluation, the logged plan)


def _pipeline_spec(args: argparse.Namespace) -> Optional[PipelineSpec]:
    """The schedule's options, checked in one pass (options.spec_for_run), as one spec; and the
    ILP's package where the schedule needs it."""
    problem, spec = options.spec_for_run(args)
    if problem:
        raise ConfigError(problem)
    if spec is None and args.pipeline_balance is not None:
        raise ConfigError("--pipeline-balance needs --pipeline-schedule (a registered name or auto)")
    if spec is None and args.optimizer_post_validation:
        raise ConfigError("--optimizer-post-validation needs --pipeline-schedule (it overlaps validation with "
                          "the schedule's first forwards)")
    if spec is not None and spec.entry.needs_extra == "ilp":
        try:
            import highspy  # noqa: F401
        except ImportError:
            raise ConfigError(f"--pipeline-schedule {spec.name} needs highspy: pip install "
                              f"'primus_megatron[ilp]'") from None
    return spec


def _check_model(args: argparse.Namespace) -> None:
    """The model: what the local layers this script builds cannot have, the MoE options, and the
    defaults Megatron-LM derives (FFN width, key/value groups, positions)."""
    if args.fp8:
        raise ConfigError(f"--fp8-format {args.fp8} is not supported by examples/pretrain_gpt.py (it builds "
                          f"megatron-core's local layers, which have no FP8): drop it, or use Megatron-LM's "
                          f"pretrain_gpt.py with primus_megatron.megatron_lm")
    for flag, on, what in (("--moe-grouped-gemm", args.moe_grouped_gemm, "TransformerEngine's grouped experts"),
                           ("--multi-latent-attention", args.multi_latent_attention,
                            "TransformerEngine's attention (megatron-core's local attention has no separate key "
                            "and value head sizes)")):
        if on:
            raise ConfigError(f"{flag} needs {what}, which examples/pretrain_gpt.py does not build (it builds "
                              f"megatron-core's local layers): drop it, or use Megatron-LM's pretrain_gpt.py with "
                              f"primus_megatron.megatron_lm")
    if args.num_experts is None and (args.expert_model_parallel_size > 1 or args.moe_shared_expert_intermediate_size):
        raise ConfigError("--expert-model-parallel-size and --moe-shared-expert-intermediate-size need --num-experts")
    if args.num_experts is not None:
        if args.moe_router_topk > args.num_experts:
            raise ConfigError(f"--moe-router-topk {args.moe_router_topk} must be <= --num-experts {args.num_experts}")
        if args.num_experts % args.expert_model_parallel_size:
            raise ConfigError(f"--num-experts {args.num_experts} must be divisible by --expert-model-parallel-size "
                              f"{args.expert_model_parallel_size}")
    if args.ffn_hidden_size is None:  # as Megatron-LM's validate_args
        args.ffn_hidden_size = int(4 * args.hidden_size * 2 / 3 / 64) * 64 if args.swiglu else 4 * args.hidden_size
        if args.ffn_hidden_size == 0:
            raise ConfigError(f"--swiglu with --hidden-size {args.hidden_size} leaves no default FFN width "
                              f"(2/3 of 4 x hidden, rounded down to a multiple of 64): give --ffn-hidden-size")
    if not args.group_query_attention:
        args.num_query_groups = None  # megatron: one key/value head per attention head
    elif args.num_attention_heads % args.num_query_groups:
        raise ConfigError(f"--num-query-groups {args.num_query_groups} must divide --num-attention-heads "
                          f"{args.num_attention_heads}")
    if not 0.0 < args.rotary_percent <= 1.0:
        raise ConfigError(f"--rotary-percent must be in (0, 1], got {args.rotary_percent}")
    if args.max_position_embeddings is None:
        args.max_position_embeddings = args.seq_length
    if args.max_position_embeddings < args.seq_length:
        raise ConfigError(f"--max-position-embeddings {args.max_position_embeddings} must be >= --seq-length "
                          f"{args.seq_length}")



def _check_io(args: argparse.Namespace) -> None:
    """Data, tokenizer, backend and checkpoint options."""
    if args.timeline is not None and os.path.splitext(args.timeline)[1].lower() not in (".png", ".svg"):
        raise ConfigError(f"--timeline must name a .png or .svg file, got {args.timeline!r}")
    if not args.mock_data and not args.data_path:
        raise ConfigError("give --data-path PREFIX (a Megatron .bin/.idx dataset) or --mock-data")
    if args.data_path:
        _check_data_path(args.data_path)
    if args.tokenizer_type == "HuggingFaceTokenizer" and not args.tokenizer_model:
        raise ConfigError("--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model PATH")
    if args.distributed_backend is None:
        args.distributed_backend = "gloo" if args.cpu else "nccl"
    if args.cpu and args.distributed_backend != "gloo":
        raise ConfigError("--cpu runs on gloo: drop --distributed-backend nccl")
    if args.save_interval is not None and args.save is None:
        raise ConfigError("--save-interval needs --save DIR")
    if args.save is not None and importlib.util.find_spec("psutil") is None:
        # megatron's writer asks psutil mid-save; without it a save fails (or hangs) after training started
        raise ConfigError("--save needs the psutil package (megatron-core's checkpoint writer uses it): "
                          "pip install psutil")


def _check_testing_aids(args: argparse.Namespace) -> None:
    if args.inject_nonfinite_grad is not None:
        try:
            parts = [int(x) for x in str(args.inject_nonfinite_grad).split(":")]
            if len(parts) not in (1, 2) or parts[0] < 1 or (len(parts) == 2 and parts[1] < 0):
                raise ValueError
        except ValueError:
            raise ConfigError(f"--inject-nonfinite-grad takes ITER or ITER:STAGE (positive iteration, stage >= 0), "
                              f"got {args.inject_nonfinite_grad!r}") from None
        args.inject_nonfinite_grad = (parts[0], parts[1] if len(parts) == 2 else 0)


def _check_recompute(args: argparse.Namespace) -> None:
    """Megatron's rules for the recompute options (checked here, not deep in TransformerConfig)."""
    granularity, method, layers = args.recompute_granularity, args.recompute_method, args.recompute_num_layers
    if granularity != "full":
        for option, value in (("--recompute-method", method), ("--recompute-num-layers", layers)):
            if value is not None:
                raise ConfigError(f"{option} applies to --recompute-granularity full only"
                                  + (f", not {granularity}" if granularity else "; add --recompute-granularity full"))
        return
    per_stage = _most_layers_of_a_rank(args)
    if args.hidden_dropout > 0 or args.attention_dropout > 0:
        # train/determinism.py reseeds dropout per (iteration, microbatch, layer) in each layer's forward
        # pre-hook; a layer recomputed inside a later backward would draw other masks
        raise ConfigError("--recompute-granularity full needs --hidden-dropout 0 and --attention-dropout 0 in "
                          "examples/pretrain_gpt.py (a recomputed layer would draw other dropout masks than its "
                          "forward did); use --recompute-granularity selective to keep dropout")
    if method is None or layers is None:
        raise ConfigError("--recompute-granularity full needs --recompute-method {uniform,block} and "
                          f"--recompute-num-layers N (1 to {max(per_stage, 1)} layers)")
    if method == "block" and layers > per_stage:
        raise ConfigError(f"--recompute-num-layers {layers} must be between 1 and the {per_stage} layers of a pipeline "
                          f"rank with --recompute-method block")


def _most_layers_of_a_rank(args: argparse.Namespace) -> int:
    """The transformer layers of the fullest pipeline rank (megatron's split, even or uneven)."""
    from ..schedules import layer_split

    pp = args.pipeline_model_parallel_size
    try:
        return max(layer_split.rank_layers(layer_split.LayerSplit.from_args(args), pp, 1, "loop"))
    except ValueError:  # refused later, with the split's own sentence
        return args.num_layers // pp


def _check_data_path(tokens: Sequence[str]) -> None:
    if len(tokens) > 1:
        if len(tokens) % 2:
            raise ConfigError("--data-path takes PREFIX or pairs 'WEIGHT PREFIX ...'")
        prefixes = tokens[1::2]
        for w in tokens[0::2]:
            try:
                if float(w) < 0:
                    raise ValueError
            except ValueError:
                raise ConfigError(f"--data-path weight {w!r} must be a non-negative number") from None
    else:
        prefixes = tokens
    for prefix in prefixes:
        for ext in (".bin", ".idx"):
            if not os.path.exists(prefix + ext):
                raise ConfigError(missing_dataset(prefix, prefix + ext))


def parse(argv: Optional[Sequence[str]] = None, world_size: Optional[int] = None) -> argparse.Namespace:
    return validate(build_parser().parse_args(argv), world_size)


def parse_run(argv: Optional[Sequence[str]] = None,
              world_size: Optional[int] = None) -> tuple[argparse.Namespace, Optional[PipelineSpec]]:
    """The checked arguments and their PipelineSpec (what pretrain.run takes)."""
    return validated(build_parser().parse_args(argv), world_size)
