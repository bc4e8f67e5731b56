"""`--pipeline-balance-data off|sorted|lb-mini` in Megatron-LM's own loop (`pretrain_gpt.py --sft`).

Megatron-LM's train_step asks the forward_backward_func for get_num_microbatches() microbatches of
--micro-batch-size samples from each replica's own sampler. With balancing, the plugin's
forward_backward_func (install's get_forward_backward_func) takes the training step's data itself:

* the global batch is the train dataset's samples [consumed, consumed + global batch) (Megatron-LM's
  `single` sampler order, args.consumed_train_samples at the step's start). Every rank reads all of
  them from the dataset (Megatron-LM builds the SFT dataset on every pipeline stage): no message, but
  each rank tokenizes the whole global batch, data-parallel size times its plain share;
* a sample's length is its last loss-bearing position + 1: the positions after it carry no loss and,
  attention being causal, change no other output, so dropping them changes no gradient;
* every rank makes the same `balancing.plan_batch` from those lengths (a sample's cost the sum of its
  documents', from its cu_seqlens: under --dataloader-inter-document-masking every sample is --seq-length
  tokens, so what differs between them is only how their documents cut the attention), packs its replica's samples
  into microbatches of --seq-length tokens in the SFT dataset's own format (tokens, labels, loss_mask,
  position_ids, cu_seqlens padded with --seq-length, max_seqlen), so Megatron-LM's get_batch and its
  thd path (PackedSeqParams, TE attention) run them unchanged, and our runner runs the replica's own
  count (runtime/replica_counts.py checks the counts before the step).

Evaluation keeps Megatron-LM's data and count. Megatron-LM's per-token loss
(--calculate-per-token-loss) sums losses and tokens over every microbatch and replica, so the
gradient is the same whichever replica runs which sample.
"""
from __future__ import annotations

import argparse
import functools
from typing import Any, Callable, Optional, Sequence

import torch

NEEDS = "--pipeline-balance-data in Megatron-LM's pretrain_gpt.py"


def problem(args: argparse.Namespace) -> Optional[str]:
    """What Megatron-LM's arguments lack for balanced data or for our schedules on its packed pretraining
    samples, in one sentence, or None. Only on Megatron-LM's whole namespace (the group-only precheck has
    nothing to judge here)."""
    return inter_document_problem(args) or _balance_problem(args)


def inter_document_problem(args: argparse.Namespace) -> Optional[str]:
    """--dataloader-inter-document-masking without --sft under our schedule: Megatron-LM builds that dataset
    only for model chunks on the first or the last stage (pretrain_gpt.py is_dataset_built_on_rank at
    core_v0.19.0), yet every stage's get_batch reads the pack's cu_seqlens from it: a chunk elsewhere (a V
    schedule's, an interleaved one's, a middle rank's) would get no data iterator and fail in get_batch."""
    if not getattr(args, "dataloader_inter_document_masking", False) or getattr(args, "sft", False):
        return None
    name = getattr(args, "pipeline_schedule", None)
    if name is None:
        return None  # megatron's own schedules: Megatron-LM's own behaviour
    from ..schedules import ScheduleError, registry

    try:
        chunks = registry.info(name).chunks
    except ScheduleError:
        return None  # auto and unknown names: judged once the schedule is chosen, or refused elsewhere
    pp = getattr(args, "pipeline_model_parallel_size", 1) or 1
    if pp <= 2 and chunks == 1:
        return None
    return (f"--pipeline-schedule {name} with --dataloader-inter-document-masking (without --sft) needs one model "
            f"chunk per rank at --pipeline-model-parallel-size 2 at most: Megatron-LM builds that dataset for the "
            f"first and the last stage only, and any other stage reads its cu_seqlens from it (use e.g. zb-h1 at "
            f"pipeline size 2, or --sft data, which every stage builds)")


def _balance_problem(args: argparse.Namespace) -> Optional[str]:
    if getattr(args, "pipeline_balance_data", None) is None or not hasattr(args, "calculate_per_token_loss"):
        return None
    if not hasattr(args, "dataloader_inter_document_masking"):
        return (f"{NEEDS} needs Megatron-LM core_v0.19.0 or later: this checkout's --sft get_batch gives pipeline "
                f"stages other than the first and last no cu_seqlens, so their attention would cross the samples "
                f"of a pack")
    sft, masking = getattr(args, "sft", False), args.dataloader_inter_document_masking
    refusals = (
        (getattr(args, "pipeline_schedule", None) is None,
         "needs --pipeline-schedule (our runner runs each replica's own microbatch count), e.g. zb-h1"),
        (not (sft or masking), "needs --sft or --dataloader-inter-document-masking: samples packed with cu_seqlens "
                               "(megatron's thd path)"),
        (not args.calculate_per_token_loss, "needs --calculate-per-token-loss: replicas run different token "
                                            "counts, so the loss must be normalised by the global token count"),
        (getattr(args, "transformer_impl", None) != "transformer_engine",
         "needs --transformer-impl transformer_engine: megatron's thd attention over cu_seqlens is TE's"),
        ((getattr(args, "tensor_model_parallel_size", 1) or 1) > 1,
         "needs --tensor-model-parallel-size 1: Megatron-LM builds the dataset on tensor-parallel rank 0 only, and "
         "every rank plans from the global batch's lengths"),
        (getattr(args, "rampup_batch_size", None) is not None,
         "cannot take --rampup-batch-size: the global batch it plans from must be --global-batch-size"),
        (getattr(args, "dataloader_type", None) not in (None, "single"),
         f"needs --dataloader-type single (the global batch is the next --global-batch-size samples in order), "
         f"got {getattr(args, 'dataloader_type', None)}"),
    )
    return next((f"{NEEDS} {why}" for bad, why in refusals if bad), None)


def sample_length(item: dict) -> int:
    """Tokens of a dataset sample that matter: up to its last loss-bearing position (module doc)."""
    nonzero = torch.nonzero(torch.as_tensor(item["loss_mask"]).reshape(-1)).reshape(-1)
    return int(nonzero[-1]) + 1 if nonzero.numel() else 1


def _bounds(item: dict, n: int) -> list:
    """The document ends of a sample's first `n` tokens (its cu_seqlens, padding entries dropped)."""
    cu = [int(x) for x in torch.as_tensor(item["cu_seqlens"]).reshape(-1).tolist()]
    return [b for b in cu if 0 < b < n] + [n]


def documents(item: dict, n: int) -> list:
    """The lengths of the documents in a sample's first `n` tokens: what its attention costs, each
    attending only within itself (two conversations of a jsonl line; the documents of a pretraining
    sample under --dataloader-inter-document-masking, which are all --seq-length long)."""
    ends = _bounds(item, n)
    return [b - a for a, b in zip([0] + ends, ends)]


def pack(items: Sequence[dict], lengths: Sequence[int], seq: int) -> dict:
    """Samples' first `lengths` tokens one after another in `seq` tokens, as one collated microbatch of
    the SFT dataset's format; the rest is a padding document without loss."""
    parts: dict = {k: [] for k in ("tokens", "labels", "loss_mask", "position_ids")}
    cu = [0]
    for item, n in zip(items, lengths):
        for key in parts:
            parts[key].append(torch.as_tensor(item[key]).reshape(-1)[:n])
        base = cu[-1]
        cu += [base + b for b in _bounds(item, n)]
    used = cu[-1]
    if used > seq:
        raise ValueError(f"a pack of {used} tokens exceeds --seq-length {seq}")
    if used < seq:
        pad = seq - used
        for key, tensors in parts.items():
            like = tensors[0]
            tensors.append(torch.arange(pad, dtype=like.dtype) if key == "position_ids" else
                           torch.zeros(pad, dtype=like.dtype))
        cu.append(seq)
    out = {key: torch.cat(tensors).unsqueeze(0) for key, tensors in parts.items()}
    padded = torch.full((1, seq + 1), seq, dtype=torch.int32)
    padded[0, :len(cu)] = torch.tensor(cu, dtype=torch.int32)
    out["cu_seqlens"] = padded
    out["max_seqlen"] = torch.tensor([max(b - a for a, b in zip(cu, cu[1:]))], dtype=torch.int32)
    return out


class BalancedSteps:
    """Each training step's microbatches for this rank's replica (module doc)."""

    def __init__(self, args: argparse.Namespace, dataset, dp_rank: int, dp_size: int, pp: int,
                 log: Callable[[str], None]) -> None:
        from ..train.balanced_data import sample_cost

        self.args, self.dataset, self.log = args, dataset, log
        self.dp_rank, self.dp_size, self.pp = dp_rank, dp_size, pp
        self.cost = sample_cost(args)
        self.last_counts: tuple = ()

    def next_step(self) -> tuple[int, list]:
        """(this replica's microbatch count, its packed microbatches) for the step starting now."""
        from ..balancing import plan_batch

        args, ds = self.args, self.dataset
        first = args.consumed_train_samples
        items = [ds[(first + j) % len(ds)] for j in range(args.global_batch_size)]
        lengths = [sample_length(item) for item in items]
        plan = plan_batch(lengths, self.dp_size, args.seq_length, args.pipeline_balance_data, self.cost,
                          min_microbatches=self.pp, documents=[documents(item, n) for item, n in zip(items, lengths)])
        self.last_counts = plan.counts
        tokens = tuple(sum(lengths[i] for mb in r for i in mb) for r in plan.replicas)
        self.log(f"primus_megatron: --pipeline-balance-data {args.pipeline_balance_data}: samples "
                 f"{first}..{first + len(items) - 1}, microbatches per replica {plan.counts}, tokens per replica "
                 f"{tokens}")
        packs = [pack([items[i] for i in mb], [lengths[i] for i in mb], args.seq_length)
                 for mb in plan.replicas[self.dp_rank]]
        return len(packs), packs


def _like(data_iterator: Any, packs: list) -> Any:
    """Iterators over `packs` shaped as Megatron-LM's (None where it has none; one per model chunk)."""
    if isinstance(data_iterator, (list, tuple)):
        return [None if it is None else iter(packs) for it in data_iterator]
    return None if data_iterator is None else iter(packs)


def wrap_runner(runner: Callable, steps: Callable[[], BalancedSteps]) -> Callable:
    """Megatron-LM's forward_backward_func for balanced data: a training step runs this replica's packed
    microbatches and count (`steps()`: made on first use, once the dataset exists); evaluation as given."""

    @functools.wraps(runner)
    def forward_backward(*, data_iterator=None, num_microbatches: int, forward_only: bool = False, **kwargs):
        if not forward_only:
            num_microbatches, packs = steps().next_step()
            data_iterator = _like(data_iterator, packs)
        return runner(data_iterator=data_iterator, num_microbatches=num_microbatches, forward_only=forward_only,
                      **kwargs)

    return forward_backward


def install(mlm_training, log: Callable[[str], None]) -> Callable[[], BalancedSteps]:
    """Keep the train dataset Megatron-LM builds (its build_train_valid_test_datasets, called by name in
    its training module); returns the maker of this rank's BalancedSteps (after the datasets exist)."""
    original = getattr(mlm_training, "build_train_valid_test_datasets", None)
    kept: dict = {}
    if original is None:  # not Megatron-LM's training module (a test's stand-in): nothing to keep
        return lambda: _no_dataset()

    @functools.wraps(original)
    def build_train_valid_test_datasets(*a, **kw):
        datasets = original(*a, **kw)
        # installed whatever the options (Megatron-LM builds datasets before we see them): pass-through,
        # and a result of another shape is only not kept
        kept["train"] = datasets[0] if isinstance(datasets, (tuple, list)) and datasets else None
        return datasets

    mlm_training.build_train_valid_test_datasets = build_train_valid_test_datasets

    def steps() -> BalancedSteps:
        if "steps" not in kept:
            from megatron.core import parallel_state as ps
            from megatron.training import get_args

            if kept.get("train") is None:
                raise RuntimeError(f"{NEEDS}: this rank has no train dataset to plan from (Megatron-LM did not "
                                   f"build it here)")
            kept["steps"] = BalancedSteps(get_args(), kept["train"], ps.get_data_parallel_rank(),
                                          ps.get_data_parallel_world_size(),
                                          ps.get_pipeline_model_parallel_world_size(), log)
        return kept["steps"]

    return steps


def _no_dataset() -> BalancedSteps:
    raise RuntimeError(f"{NEEDS}: Megatron-LM's training module has no build_train_valid_test_datasets to "
                       f"keep the train dataset from")
