#!/usr/bin/env python
"""Proof that megatron-core's OWN data-parallel and optimizer stack runs on CPU/gloo.

With primus_megatron.compat.cpu enabled, each case spawns a gloo world, wraps
tiny GPTModel chunks (local spec, CPU init) in megatron's
DistributedDataParallel, builds the optimizer with megatron's
get_megatron_optimizer and trains with megatron's own pipeline schedule
(config.no_sync_func / grad_sync_func / finalize_model_grads_func set as
Megatron-LM sets them), then optimizer.step().  Every data-parallel rank gets
different microbatches.

  [0] fp32, pp=2 x dp=2: step-1 main_grads after finalize_model_grads, the
      loss, the returned grad norm and the parameters after 3 Adam steps equal a
      single-process run of the same global batches on the full model with
      torch.optim.AdamW (same lr/betas/eps, weight decay per megatron's wd_mult,
      clip_grad_norm_); variants: overlap_grad_reduce, distributed optimizer,
      tied embeddings, small buckets, overlap_param_gather, and Adam eps=1e-8
      (looser tolerance, see EPS); the distributed optimizer equals the
      non-distributed one.
  [1] fp32, tp=2 x dp=2: same comparison with tensor parallelism.
  [2] bf16, pp=2 x dp=2: 10 steps on a fixed batch, loss decreases
      (grad_reduce_in_fp32 on/off, distributed optimizer on/off).
  [3] fp16, pp=2 x dp=2, dynamic loss scaling: loss decreases; an inf injected
      into one rank's grads (before the data-parallel reduce) makes step()
      return update_successful=False on every rank, halves the scale
      (hysteresis=1) and leaves the parameters untouched.
  [4] checkpoints, pp=2 x dp=2: optimizer.state_dict() round trip (plus
      save/load_parameter_state for the distributed optimizer) and
      sharded_state_dict saved with megatron.core.dist_checkpointing.save
      (torch_dist) and loaded into a fresh model/optimizer: identical optimizer
      state and the next step gives identical parameters (FP32Optimizer,
      Float16Optimizer bf16, DistributedOptimizer with 'dp_reshardable' and
      'fully_reshardable'; the metadata-less default 'fully_sharded_model_space'
      is checked to fail upstream).
  [5] DDP hook protocol, dp=2, overlap_grad_reduce: weight gradients fed late
      through each parameter's AccumulateGrad node (as deferred W ops do), in
      shuffled order, launch each bucket's reduce exactly when its last
      parameter's grad arrives on the last microbatch; grad_added_to_main_grad
      skips the add.

Exits 0 only if every check passes (gloo timeout 60 s, per-case timeout, all
ranks killed on failure).

    PYTHONPATH=.:tests python scripts/check_megatron_optim_cpu.py            # all cases
    PYTHONPATH=.:tests python scripts/check_megatron_optim_cpu.py --case 0   # one case
"""

import argparse
import copy
import datetime
import math
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
import warnings

import torch
import torch.multiprocessing as mp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (ROOT, os.path.join(ROOT, "tests")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import megatron_reference as ref  # noqa: E402

RTOL = 1e-5  # per tensor: max|a - r| / max|r|
GLOO_TIMEOUT_S = 60
CASE_TIMEOUT_S = 480
NUM_LAYERS = 4
LR = 1e-2
WEIGHT_DECAY = 0.1
BETAS = (0.9, 0.95)
# Adam's m / (sqrt(v) + eps) turns float rounding in gradient elements that are mathematically
# zero (the attention key bias: softmax ignores a per-query constant) or nearly cancelling (tied
# embedding = input + output contributions) into O(lr) parameter moves.  eps=1e-4 keeps those
# elements from dominating a 1e-5 comparison; variant "eps=1e-8" (megatron's default) shows it.
EPS = 1e-4
CLIP_GRAD = 0.5  # below the typical global grad norm here, so clipping is active

CASES = [
    dict(
        name="fp32 pp=2 x dp=2: megatron DDP + optimizer vs single-process AdamW",
        body="parity", tp=1, pp=2, dp=2, microbatches=4, steps=3,
        variants=[
            dict(overlap=False, distopt=False, tied=False),
            dict(overlap=True, distopt=False, tied=True, bucket_size=4000),
            dict(overlap=False, distopt=True, tied=True),
            dict(overlap=True, distopt=True, tied=False, bucket_size=4000),
            dict(overlap=False, distopt=False, tied=True, eps=1e-8, rtol=1e-3),
            # param all-gather deferred to the next forward's pre-hooks (synced before reading params)
            dict(overlap=True, distopt=True, tied=True, bucket_size=4000, overlap_param_gather=True),
        ],
    ),
    dict(
        name="fp32 tp=2 x dp=2: megatron DDP + optimizer vs single-process AdamW",
        body="parity", tp=2, pp=1, dp=2, microbatches=4, steps=3,
        variants=[
            dict(overlap=False, distopt=False, tied=False),
            dict(overlap=True, distopt=True, tied=True, bucket_size=4000),
        ],
    ),
    dict(
        name="bf16 pp=2 x dp=2: runs, loss decreases",
        body="lowp", dtype="bf16", tp=1, pp=2, dp=2, microbatches=4, steps=10,
        variants=[
            dict(overlap=False, distopt=False, grad_reduce_in_fp32=True),
            dict(overlap=True, distopt=False, grad_reduce_in_fp32=False),
            dict(overlap=False, distopt=True, grad_reduce_in_fp32=True),
            dict(overlap=True, distopt=True, grad_reduce_in_fp32=False),
        ],
    ),
    dict(
        name="fp16 pp=2 x dp=2, dynamic loss scale: loss decreases, injected inf skips the step everywhere",
        body="lowp", dtype="fp16", tp=1, pp=2, dp=2, microbatches=4, steps=10, inject_step=6, inject_rank=3,
        variants=[
            dict(overlap=False, distopt=False, grad_reduce_in_fp32=True),
            dict(overlap=False, distopt=True, grad_reduce_in_fp32=True),
            # no injection here: with overlap the reduce may already be in flight at finalize time
            dict(overlap=True, distopt=False, grad_reduce_in_fp32=False, inject=False),
        ],
    ),
    dict(
        name="checkpoints pp=2 x dp=2: state_dict round trip, dist_checkpointing torch_dist save/load",
        body="ckpt", tp=1, pp=2, dp=2, microbatches=2, steps=2,
        variants=[
            dict(dtype="fp32", overlap=False, distopt=False),
            dict(dtype="bf16", overlap=False, distopt=False),
            dict(dtype="fp32", overlap=False, distopt=True, sharding="dp_reshardable"),
            dict(dtype="fp32", overlap=False, distopt=True, sharding="fully_reshardable"),
            dict(dtype="bf16", overlap=True, distopt=True, sharding="dp_reshardable"),
            # no metadata: megatron's default 'fully_sharded_model_space' builds ShardedTensors with a
            # flattened_range, which 0.16.1's ShardedTensor rejects (upstream, not CPU-specific)
            dict(dtype="fp32", overlap=False, distopt=True, sharding=None,
                 expect_dist_ckpt_error="flattened_range is not supported"),
        ],
    ),
    dict(name="DDP hook protocol with late AccumulateGrad (deferred W), dp=2", body="hooks", tp=1, pp=1, dp=2),
]


# ----------------------------------------------------------------------------- worker side


def _world(case):
    return case["tp"] * case["pp"] * case["dp"]


def _worker(rank, case, port, workdir):
    import torch.distributed as dist

    os.setpgrp()  # own process group: the parent can kill this rank and anything it forked
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=_world(case),
        timeout=datetime.timedelta(seconds=GLOO_TIMEOUT_S),
    )
    try:
        from megatron.core import parallel_state as ps

        from primus_megatron.compat import cpu

        cpu.enable()
        ps.initialize_model_parallel(
            tensor_model_parallel_size=case["tp"],
            pipeline_model_parallel_size=case["pp"],
            distributed_timeout_minutes=1,
        )
        result = BODIES[case["body"]](rank, case, workdir)
        gathered = [None] * dist.get_world_size() if rank == 0 else None
        dist.gather_object(result, gathered, dst=0)
        if rank == 0:
            torch.save(gathered, os.path.join(workdir, "result.pt"))
    finally:
        dist.destroy_process_group()


def _coords():
    from megatron.core import parallel_state as ps

    return dict(
        tp=ps.get_tensor_model_parallel_rank(),
        pp=ps.get_pipeline_model_parallel_rank(),
        dp=ps.get_data_parallel_rank(),
    )


def _model_overrides(case, dtype):
    overrides = dict(tensor_model_parallel_size=case["tp"])
    if dtype == "bf16":
        overrides.update(bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16)
    elif dtype == "fp16":
        overrides.update(fp16=True, params_dtype=torch.float16, pipeline_dtype=torch.float16)
    return overrides


def _load_full_weights(chunk, full_state):
    """Copy this rank's (tensor-parallel shard of the) full model's weights, by global layer number."""
    from megatron.core import parallel_state as ps

    tp, tp_rank = ps.get_tensor_model_parallel_world_size(), ps.get_tensor_model_parallel_rank()
    with torch.no_grad():
        for name, param in ref.named_global_parameters(chunk):
            src = full_state[name]
            if getattr(param, "tensor_model_parallel", False):
                src = src.chunk(tp, dim=param.partition_dim)[tp_rank]
            assert src.shape == param.shape, (name, src.shape, param.shape)
            param.copy_(src)


def _build(case, variant, workdir, dtype="fp32"):
    """Model chunks wrapped like Megatron-LM (Float16Module for bf16/fp16, then DDP) and the optimizer."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer.module import Float16Module

    tied = variant.get("tied", False)
    chunks = ref.build_pipeline_chunks(NUM_LAYERS, tied=tied, **_model_overrides(case, dtype))
    full_state = torch.load(os.path.join(workdir, f"full_tied{int(tied)}.pt"))
    for chunk in chunks:
        _load_full_weights(chunk, full_state)
    config = chunks[0].config
    if dtype in ("bf16", "fp16"):
        chunks = [Float16Module(config, c) for c in chunks]
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=variant.get("grad_reduce_in_fp32", True),
        overlap_grad_reduce=variant["overlap"],
        use_distributed_optimizer=variant["distopt"],
        bucket_size=variant.get("bucket_size"),
        overlap_param_gather=variant.get("overlap_param_gather", False),
    )
    model = [
        DistributedDataParallel(config, copy.deepcopy(ddp_config), c, disable_bucketing=(i > 0))
        for i, c in enumerate(chunks)
    ]
    for chunk in model:  # as Megatron-LM's get_model does
        chunk.broadcast_params()
    opt_config = OptimizerConfig(
        optimizer="adam",
        lr=LR,
        weight_decay=WEIGHT_DECAY,
        adam_beta1=BETAS[0],
        adam_beta2=BETAS[1],
        adam_eps=variant.get("eps", EPS),
        clip_grad=variant.get("clip_grad", CLIP_GRAD),
        bf16=dtype == "bf16",
        fp16=dtype == "fp16",
        params_dtype={"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype],
        initial_loss_scale=variant.get("initial_loss_scale", 2.0**12),
        hysteresis=1,
        use_distributed_optimizer=variant["distopt"],
        overlap_param_gather=variant.get("overlap_param_gather", False),
        log_num_zeros_in_grad=True,
    )
    optimizer = get_megatron_optimizer(opt_config, model)
    # What Megatron-LM's OptimizerParamScheduler does every step: wd = weight_decay * wd_mult.
    for group in optimizer.param_groups:
        group["weight_decay"] = WEIGHT_DECAY * group["wd_mult"]
    _set_schedule_hooks(model, optimizer, variant["overlap"])
    return model, optimizer


def _set_schedule_hooks(model, optimizer, overlap):
    """config hooks exactly as Megatron-LM's training.py sets them."""
    from megatron.core.distributed import finalize_model_grads

    config = model[0].config
    config.grad_scale_func = optimizer.scale_loss
    config.finalize_model_grads_func = finalize_model_grads
    config.no_sync_func = None
    config.grad_sync_func = None
    if overlap:
        no_sync = [m.no_sync for m in model]
        config.no_sync_func = no_sync[0] if len(model) == 1 else no_sync
        grad_sync = [m.start_grad_sync for m in model]  # --align-grad-reduce (default on)
        config.grad_sync_func = grad_sync[0] if len(model) == 1 else grad_sync


def _rank_batches(case, step, fixed=False):
    """This data-parallel rank's microbatches of the global batch of `step`."""
    from megatron.core import parallel_state as ps

    m, dp = case["microbatches"], case["dp"]
    batches = ref.make_microbatches(m * dp, seed=1000 + (0 if fixed else step))
    r = ps.get_data_parallel_rank()
    return batches[r * m:(r + 1) * m]


def _train_step(model, optimizer, case, batches):
    """One Megatron-LM train_step: zero buffers, megatron's schedule, optimizer.step()."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    for chunk in model:
        chunk.zero_grad_buffer()
    optimizer.zero_grad()
    store = get_forward_backward_func()(
        forward_step_func=ref.make_forward_step_func(),
        data_iterator=iter(batches),
        model=model if len(model) > 1 else model[0],
        num_microbatches=len(batches),
        seq_length=ref.SEQ_LENGTH,
        micro_batch_size=ref.MICRO_BATCH_SIZE,
    )
    ok, grad_norm, zeros = optimizer.step()
    losses = ref.losses_from_store(store)
    return dict(ok=bool(ok), grad_norm=None if grad_norm is None else float(grad_norm),
                zeros=None if zeros is None else float(zeros), losses=losses,
                loss_scale=float(optimizer.get_loss_scale().item()))


def _params(model):
    """{global name: (fp32 tensor, tp partition dim or None)} for this rank."""
    out = {}
    for chunk in model:
        for name, p in ref.named_global_parameters(chunk):
            dim = p.partition_dim if getattr(p, "tensor_model_parallel", False) else None
            key = name
            if key in out:  # tied embedding copy on the last stage of the same rank
                key = name + "#copy"
            out[key] = (p.detach().float().clone(), dim)
    return out


def _parity_body(rank, case, workdir):
    from megatron.core.distributed import finalize_model_grads

    out = dict(coords=_coords(), variants=[])
    for variant in case["variants"]:
        model, optimizer = _build(case, variant, workdir)
        grads = {}

        def finalize_and_capture(model_list, *args, **kwargs):
            finalize_model_grads(model_list, *args, **kwargs)
            if not grads and not variant["distopt"]:  # step 1; distopt: only the local shard is reduced
                for chunk in model_list:
                    for name, p in ref.named_global_parameters(chunk):
                        dim = p.partition_dim if getattr(p, "tensor_model_parallel", False) else None
                        key = name + "#copy" if name in grads else name
                        grads[key] = (p.main_grad.detach().clone(), dim)

        model[0].config.finalize_model_grads_func = finalize_and_capture
        steps = [_train_step(model, optimizer, case, _rank_batches(case, s)) for s in range(case["steps"])]
        for chunk in model:
            if chunk.use_forward_hook:  # as Megatron-LM's disable_forward_pre_hook before eval/save
                chunk.disable_forward_pre_hook(param_sync=True)
        out["variants"].append(dict(steps=steps, params=_params(model), grads=grads,
                                    optimizer=type(optimizer.chained_optimizers[0]).__name__))
    return out


def _inject_inf_before_dp_reduce(model, rank, inject_rank):
    """Wrap finalize_model_grads so that `inject_rank` sees an inf in one local grad
    before the data-parallel reduce (a real overflow in that rank's backward)."""
    from megatron.core.distributed import finalize_model_grads

    def finalize(model_list, *args, **kwargs):
        if rank == inject_rank:
            param = next(p for p in model_list[-1].module.parameters() if p.requires_grad)
            param.main_grad.view(-1)[0] = float("inf")
        return finalize_model_grads(model_list, *args, **kwargs)

    return finalize


def _lowp_body(rank, case, workdir):
    from megatron.core.distributed import finalize_model_grads

    out = dict(coords=_coords(), variants=[])
    for variant in case["variants"]:
        model, optimizer = _build(case, variant, workdir, dtype=case["dtype"])
        config = model[0].config
        steps, inject = [], None
        for s in range(case["steps"]):
            batches = _rank_batches(case, s, fixed=True)
            if s == case.get("inject_step") and variant.get("inject", True):
                before = _params(model)
                scale_before = float(optimizer.get_loss_scale().item())
                config.finalize_model_grads_func = _inject_inf_before_dp_reduce(model, rank, case["inject_rank"])
                result = _train_step(model, optimizer, case, batches)
                config.finalize_model_grads_func = finalize_model_grads
                after = _params(model)
                inject = dict(
                    ok=result["ok"], grad_norm=result["grad_norm"], scale_before=scale_before,
                    scale_after=result["loss_scale"],
                    max_param_change=max((after[k][0] - before[k][0]).abs().max().item() for k in before),
                )
                continue
            steps.append(_train_step(model, optimizer, case, batches))
        out["variants"].append(dict(steps=steps, inject=inject, params=_params(model)))
    return out


def _max_param_diff(a, b):
    return max((a[k][0] - b[k][0]).abs().max().item() for k in a)


def _inner_state_diff(opt_a, opt_b):
    """Max |difference| per inner-optimizer state key (and the main params) between two optimizers."""
    diffs = {}
    for a, b in zip(opt_a.chained_optimizers, opt_b.chained_optimizers):
        for ga, gb in zip(a.optimizer.param_groups, b.optimizer.param_groups):
            for k in ga:
                if k != "params" and ga[k] != gb.get(k):
                    diffs[f"group[{k}]: {ga[k]} vs {gb.get(k)}"] = float("inf")
            for pa, pb in zip(ga["params"], gb["params"]):
                pairs = [("main_param", pa, pb)] + [
                    (k, v, b.optimizer.state[pb].get(k)) for k, v in a.optimizer.state[pa].items()]
                for key, x, y in pairs:
                    d = float("inf") if y is None else (x.float() - y.float()).abs().max().item()
                    diffs[key] = max(diffs.get(key, 0.0), d)
    return diffs


def _ckpt_body(rank, case, workdir):
    import torch.distributed as dist
    from megatron.core import dist_checkpointing

    out = dict(coords=_coords(), variants=[])
    for index, variant in enumerate(case["variants"]):
        dtype = variant["dtype"]
        res = dict()
        model, optimizer = _build(case, variant, workdir, dtype=dtype)
        for s in range(case["steps"]):
            _train_step(model, optimizer, case, _rank_batches(case, s))
        next_batches = _rank_batches(case, 99)

        # (a) optimizer.state_dict() round trip (+ parameter state for the distributed optimizer)
        try:
            state = copy.deepcopy(optimizer.state_dict())
            from megatron.core import parallel_state as ps

            mp_rank = ps.get_model_parallel_group().rank()  # one file per model-parallel rank, as Megatron-LM
            param_file = os.path.join(workdir, f"param_state_{index}_mp{mp_rank}.pt")
            if variant["distopt"]:
                optimizer.save_parameter_state(param_file)
            model_b, optimizer_b = _build(case, variant, workdir, dtype=dtype)
            for chunk, chunk_b in zip(model, model_b):
                chunk_b.load_state_dict(chunk.state_dict())
            optimizer_b.load_state_dict(state)
            if variant["distopt"]:
                optimizer_b.load_parameter_state(param_file)
            res["state_dict"] = dict(ok=True)
        except Exception:
            res["state_dict"] = dict(ok=False, error=traceback.format_exc()[-1500:])
            print(f"[rank {rank}] state_dict round trip failed:\n{traceback.format_exc()}", file=sys.stderr)
            model_b = optimizer_b = None

        # (b) sharded_state_dict -> dist_checkpointing.save (torch_dist) -> load into a fresh model
        ckpt_dir = os.path.join(workdir, f"ckpt_{index}")
        metadata = {"distrib_optim_sharding_type": variant["sharding"]} if variant.get("sharding") else None
        try:
            if rank == 0:
                os.makedirs(ckpt_dir, exist_ok=True)
            dist.barrier()
            # Megatron-LM checkpoints the unwrapped modules (no DDP / Float16Module prefixes)
            sharded = {f"model{i}": ref.unwrap(chunk).sharded_state_dict() for i, chunk in enumerate(model)}
            sharded["optimizer"] = optimizer.sharded_state_dict(sharded, metadata=metadata)
            dist_checkpointing.save(sharded, ckpt_dir, sharded_strategy=("torch_dist", 1))
            model_c, optimizer_c = _build(case, variant, workdir, dtype=dtype)
            with torch.no_grad():  # make sure loading really overwrites the weights
                for chunk in model_c:
                    for p in chunk.parameters():
                        p.add_(1.0)
            to_load = {f"model{i}": ref.unwrap(chunk).sharded_state_dict() for i, chunk in enumerate(model_c)}
            to_load["optimizer"] = optimizer_c.sharded_state_dict(to_load, is_loading=True, metadata=metadata)
            loaded = dist_checkpointing.load(to_load, ckpt_dir)
            for i, chunk in enumerate(model_c):
                ref.unwrap(chunk).load_state_dict(loaded[f"model{i}"])
            optimizer_c.load_state_dict(loaded["optimizer"])
            res["dist_ckpt"] = dict(ok=True, files=sorted(os.listdir(ckpt_dir)) if rank == 0 else None)
        except Exception:
            res["dist_ckpt"] = dict(ok=False, error=traceback.format_exc()[-2500:])
            if variant.get("expect_dist_ckpt_error", "<none>") not in res["dist_ckpt"]["error"]:
                print(f"[rank {rank}] dist_checkpointing failed:\n{traceback.format_exc()}", file=sys.stderr)
            model_c = optimizer_c = None
        # Everyone must agree on who continues (a failure on one rank must not hang the others).
        flags = torch.tensor([model_b is not None, model_c is not None], dtype=torch.int)
        dist.all_reduce(flags, op=dist.ReduceOp.MIN)

        state_diff_b = _inner_state_diff(optimizer, optimizer_b) if flags[0] else None
        state_diff_c = _inner_state_diff(optimizer, optimizer_c) if flags[1] else None
        ref_step = _train_step(model, optimizer, case, next_batches)
        reference = _params(model)
        if flags[0]:
            step_b = _train_step(model_b, optimizer_b, case, next_batches)
            res["state_dict"].update(state_diff_after_load=state_diff_b,
                                     max_param_diff=_max_param_diff(reference, _params(model_b)),
                                     grad_norm=(ref_step["grad_norm"], step_b["grad_norm"]))
        if flags[1]:
            step_c = _train_step(model_c, optimizer_c, case, next_batches)
            res["dist_ckpt"].update(state_diff_after_load=state_diff_c,
                                    max_param_diff=_max_param_diff(reference, _params(model_c)),
                                    grad_norm=(ref_step["grad_norm"], step_c["grad_norm"]))
        out["variants"].append(res)
    return out


def _hooks_body(rank, case, workdir):
    """Late AccumulateGrad calls drive megatron's DDP backward post-hook and bucket launch."""
    import torch.distributed as dist
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

    checks = {}
    chunks = ref.build_pipeline_chunks(2)
    full_state = torch.load(os.path.join(workdir, "full_tied0.pt"))
    plain = ref.build_pipeline_chunks(2)[0]
    for c in (chunks[0], plain):
        for name, p in ref.named_global_parameters(c):
            with torch.no_grad():
                p.copy_(full_state[name])
    config = chunks[0].config
    ddp = DistributedDataParallel(
        config, DistributedDataParallelConfig(overlap_grad_reduce=True, bucket_size=3000), chunks[0])
    groups = ddp.bucket_groups
    checks["num_bucket_groups"] = len(groups)
    params = [p for p in ddp.module.parameters() if p.requires_grad]
    names = {p: n for n, p in ddp.module.named_parameters()}

    def grads_of(batch):
        """Per-parameter grads of this microbatch's loss (plain autograd, no hooks)."""
        plain.zero_grad(set_to_none=True)
        losses = plain(batch["tokens"], batch["position_ids"], batch["attention_mask"], labels=batch["labels"])
        mask = batch["loss_mask"].view(-1)
        (torch.sum(losses.view(-1) * mask) / mask.sum() / 2).backward()
        return {n: p.grad.clone() for n, p in plain.named_parameters()}

    def feed(grads, order):
        """Deferred-W style: give each weight its grad through its AccumulateGrad node."""
        launched_at = {}
        for i, p in enumerate(order):
            torch.autograd.backward(p.expand_as(p), grad_tensors=grads[names[p]])
            assert p.grad is None  # the hook moved it into main_grad
            for g_index, g in enumerate(groups):
                if g.grad_reduce_handle is not None and g_index not in launched_at:
                    launched_at[g_index] = i
        return launched_at

    batches = ref.make_microbatches(4, seed=7)
    mine = batches[2 * rank:2 * rank + 2]
    g0, g1 = grads_of(mine[0]), grads_of(mine[1])
    expected_local = {n: g0[n] + g1[n] for n in g0}
    expected = {}
    for n, g in expected_local.items():
        total = g.clone()
        dist.all_reduce(total)
        expected[n] = total / 2

    # The same shuffled order on every dp rank: bucket reduces are issued in readiness order, so
    # the ranks of a dp group must complete buckets in the same order (else gloo/NCCL mismatch).
    rng = random.Random(1234)
    for iteration in range(2):
        ddp.zero_grad_buffer()
        with ddp.no_sync():
            order = params[:]
            rng.shuffle(order)
            early = feed(g0, order)
        order = params[:]
        rng.shuffle(order)
        launched_at = feed(g1, order)
        # for every group: index (in `order`) of the last param it waits for
        position = {id(p): i for i, p in enumerate(order)}
        last_needed = {gi: max(position[id(p)] for p in g.params) for gi, g in enumerate(groups)}
        checks[f"iter{iteration}_no_launch_inside_no_sync"] = not early
        if iteration == 0:
            # first batch: counts are being recorded, the reduce starts in finish_grad_sync
            checks["iter0_no_launch_before_finish"] = not launched_at
        else:
            checks["iter1_launch_exactly_at_last_grad"] = launched_at == last_needed
        ddp.finish_grad_sync()
        diff = max((p.main_grad - expected[names[p]]).abs().max().item() for p in params)
        checks[f"iter{iteration}_main_grad_max_abs_diff"] = diff

    # grad_added_to_main_grad: the wgrad went straight into main_grad, autograd gets zeros
    ddp.zero_grad_buffer()
    p = params[0]
    p.main_grad.add_(g0[names[p]])
    p.grad_added_to_main_grad = True
    with ddp.no_sync():  # outside it, a bucket holding only p would launch a reduce nobody waits for
        torch.autograd.backward(p.expand_as(p), grad_tensors=torch.zeros_like(p))
    checks["grad_added_to_main_grad_skips_add"] = (p.main_grad - g0[names[p]]).abs().max().item()
    ddp.zero_grad_buffer()
    checks["zero_grad_buffer_resets_flag"] = p.grad_added_to_main_grad is False
    return dict(coords=_coords(), checks=checks)


BODIES = dict(parity=_parity_body, lowp=_lowp_body, ckpt=_ckpt_body, hooks=_hooks_body)


# ----------------------------------------------------------------------------- parent side


def _reference_run(workdir, case, variant):
    """Single process: the full model, the same global batches, torch.optim.AdamW."""
    full = ref.build_full_model(NUM_LAYERS, tied=variant.get("tied", False))
    full.load_state_dict(torch.load(os.path.join(workdir, f"full_tied{int(variant.get('tied', False))}.pt")),
                         strict=False)
    decay = [p for n, p in full.named_parameters() if not (p.dim() == 1 or n.endswith(".bias"))]
    no_decay = [p for n, p in full.named_parameters() if p.dim() == 1 or n.endswith(".bias")]
    opt = torch.optim.AdamW(
        [dict(params=decay, weight_decay=WEIGHT_DECAY), dict(params=no_decay, weight_decay=0.0)],
        lr=LR, betas=BETAS, eps=variant.get("eps", EPS),
    )
    steps, first_grads = [], None
    m, dp = case["microbatches"], case["dp"]
    for s in range(case["steps"]):
        batches = ref.make_microbatches(m * dp, seed=1000 + s)
        losses, grads = ref.reference_losses_and_grads(full, batches)
        first_grads = first_grads or grads
        norm = torch.nn.utils.clip_grad_norm_(full.parameters(), variant.get("clip_grad", CLIP_GRAD))
        opt.step()
        steps.append(dict(loss=sum(losses) / len(losses), grad_norm=float(norm)))
    params = {n: p.detach().clone() for n, p in full.named_parameters()}
    return steps, params, first_grads


def _assemble(gathered, v_index, case, field="params"):
    """Full parameters per data-parallel replica, plus the max spread between copies that must agree."""
    replicas = {}
    spread = 0.0
    for res in gathered:
        c = res["coords"]
        params = res["variants"][v_index][field]
        rep = replicas.setdefault(c["dp"], {})
        for key, (tensor, dim) in params.items():
            name = key.split("#")[0]
            slot = rep.setdefault(name, {})
            if c["tp"] in slot:  # tied copy (two stages) or a tp-duplicated param on another stage
                spread = max(spread, (slot[c["tp"]][0] - tensor).abs().max().item())
                continue
            slot[c["tp"]] = (tensor, dim)
    full = {}
    for dp_rank, rep in sorted(replicas.items()):
        out = {}
        for name, shards in rep.items():
            dims = {d for _, d in shards.values()}
            dim = dims.pop()
            if dim is None:
                base = shards[0][0]
                for t, _ in shards.values():
                    spread = max(spread, (t - base).abs().max().item())
                out[name] = base
            else:
                out[name] = torch.cat([shards[r][0] for r in sorted(shards)], dim=dim)
        full[dp_rank] = out
    for dp_rank in full:
        if dp_rank:
            spread = max(spread, max((full[dp_rank][n] - full[0][n]).abs().max().item() for n in full[0]))
    return full[0], spread


def _eval_parity(case, gathered, workdir, lines):
    ok_all = True
    finals = []
    for v_index, variant in enumerate(case["variants"]):
        ref_steps, ref_params, ref_grads = _reference_run(workdir, case, variant)
        params, spread = _assemble(gathered, v_index, case)
        max_abs, max_rel, missing, extra = ref.compare(ref_params, params)
        rtol = variant.get("rtol", RTOL)
        grad_line, grad_ok = "", True
        if not variant["distopt"]:
            grads, grad_spread = _assemble(gathered, v_index, case, field="grads")
            g_abs, g_rel, g_missing, g_extra = ref.compare(ref_grads, grads)
            grad_ok = g_rel <= RTOL and not g_missing and not g_extra and grad_spread == 0.0
            grad_line = (f"      step-1 main_grad after finalize_model_grads: max abs diff {g_abs:.3e}, "
                         f"max rel diff {g_rel:.3e}, copies spread {grad_spread:.1e}")
        if os.environ.get("CHECK_DEBUG"):
            worst = sorted(((params[n] - ref_params[n]).abs().max().item() / ref_params[n].abs().max().item(), n)
                           for n in ref_params if n in params)[-6:]
            for rel, n in worst:
                d = (params[n] - ref_params[n]).abs()
                i = int(d.view(-1).argmax())
                print(f"      DEBUG {n} rel {rel:.2e} abs {d.max().item():.2e} ref {ref_params[n].view(-1)[i].item():.4e} "
                      f"got {params[n].view(-1)[i].item():.4e} shape {tuple(ref_params[n].shape)}")
        # losses: mean of the dp ranks' means on the last stage (every rank of the last stage reports)
        m_steps = []
        for s in range(case["steps"]):
            per_dp = {}
            norms = set()
            oks = set()
            for res in gathered:
                st = res["variants"][v_index]["steps"][s]
                oks.add(st["ok"])
                norms.add(round(st["grad_norm"], 12))
                if st["losses"]:
                    per_dp[res["coords"]["dp"]] = sum(st["losses"]) / len(st["losses"])
            m_steps.append(dict(loss=sum(per_dp.values()) / len(per_dp), norms=norms, oks=oks))
        loss_rel = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(m_steps, ref_steps))
        norm_rel = max(abs(x - b["grad_norm"]) / b["grad_norm"] for a, b in zip(m_steps, ref_steps)
                       for x in a["norms"])
        all_ok = all(a["oks"] == {True} for a in m_steps)
        ok = (not missing and not extra and max_rel <= rtol and loss_rel <= RTOL and norm_rel <= RTOL
              and spread == 0.0 and all_ok and grad_ok)
        ok_all &= ok
        opt_name = gathered[0]["variants"][v_index]["optimizer"]
        lines.append(f"    variant {variant} -> {opt_name}")
        if grad_line:
            lines.append(grad_line)
        lines.append(
            f"      params ({len(ref_params)} tensors, {case['steps']} steps): max abs diff {max_abs:.3e}, "
            f"max rel diff {max_rel:.3e} (tol {rtol:g}); copies (dp replicas/tp/tied) spread {spread:.1e}"
            + (f"; missing {missing}" if missing else "") + (f"; unexpected {extra}" if extra else ""))
        lines.append(
            f"      loss max rel diff {loss_rel:.2e}; grad_norm max rel diff {norm_rel:.2e} "
            f"(reference norms {[round(s['grad_norm'], 4) for s in ref_steps]}, clip {CLIP_GRAD}); "
            f"update_successful on all ranks: {all_ok} -> {'ok' if ok else 'FAIL'}")
        finals.append((variant, params))
    # distributed optimizer vs non-distributed with the same tied setting
    for (va, pa) in finals:
        for (vb, pb) in finals:
            if (not va["distopt"] and vb["distopt"] and va.get("tied") == vb.get("tied")
                    and va.get("eps") == vb.get("eps")):
                _, rel, _, _ = ref.compare(pa, pb)
                good = rel <= RTOL
                ok_all &= good
                lines.append(f"    distributed vs non-distributed optimizer (tied={va.get('tied')}): "
                             f"max rel diff {rel:.3e} -> {'ok' if good else 'FAIL'}")
    return ok_all


def _eval_lowp(case, gathered, workdir, lines):
    ok_all = True
    for v_index, variant in enumerate(case["variants"]):
        losses, oks, scales, norms = [], set(), [], []
        for s in range(len(gathered[0]["variants"][v_index]["steps"])):
            per_dp = {}
            for res in gathered:
                st = res["variants"][v_index]["steps"][s]
                oks.add(st["ok"])
                if st["losses"]:
                    per_dp[res["coords"]["dp"]] = sum(st["losses"]) / len(st["losses"])
            losses.append(sum(per_dp.values()) / len(per_dp))
            scales.append(gathered[0]["variants"][v_index]["steps"][s]["loss_scale"])
            norms.append(gathered[0]["variants"][v_index]["steps"][s]["grad_norm"])
        decreased = losses[-1] < losses[0] - 0.05
        finite = all(n is not None and math.isfinite(n) for n in norms)
        _, spread = _assemble(gathered, v_index, case)
        ok = decreased and oks == {True} and finite and spread == 0.0
        lines.append(f"    variant {variant}")
        lines.append(f"      loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps; "
                     f"grad norms {norms[0]:.3f} -> {norms[-1]:.3f}; dp replicas spread {spread:.1e}")
        if case["dtype"] == "fp16":
            lines.append(f"      loss scale per step: {sorted(set(scales))} ")
        inj = [res["variants"][v_index]["inject"] for res in gathered]
        if inj[0] is not None:
            inj_ok = (all(not i["ok"] and i["grad_norm"] is None for i in inj)
                      and all(i["scale_after"] == i["scale_before"] / 2 for i in inj)
                      and all(i["max_param_change"] == 0.0 for i in inj))
            ok &= inj_ok
            lines.append(
                f"      inf injected on rank {case['inject_rank']} only: update_successful per rank "
                f"{[i['ok'] for i in inj]}, grad_norm {[i['grad_norm'] for i in inj]}, scale "
                f"{inj[0]['scale_before']:g} -> {[i['scale_after'] for i in inj]}, max param change "
                f"{max(i['max_param_change'] for i in inj):g} -> {'ok' if inj_ok else 'FAIL'}")
        lines.append(f"      -> {'ok' if ok else 'FAIL'}")
        ok_all &= ok
    return ok_all


def _eval_ckpt(case, gathered, workdir, lines):
    ok_all = True
    for v_index, variant in enumerate(case["variants"]):
        lines.append(f"    variant {variant}")
        for key, label in (("state_dict", "optimizer.state_dict() round trip"
                            + (" + save/load_parameter_state" if variant["distopt"] else "")),
                           ("dist_ckpt", "sharded_state_dict -> dist_checkpointing.save/load (torch_dist)")):
            per_rank = [res["variants"][v_index][key] for res in gathered]
            errors = [r.get("error") for r in per_rank if not r["ok"]]
            diffs = [r.get("max_param_diff") for r in per_rank]
            expected = variant.get("expect_dist_ckpt_error") if key == "dist_ckpt" else None
            if expected:
                ok = len(errors) == len(per_rank) and all(expected in e for e in errors)
                ok_all &= ok
                lines.append(f"      {label}: fails on every rank with '{expected}' as expected (upstream) "
                             f"-> {'ok' if ok else 'FAIL'}")
                continue
            ok = not errors and all(d == 0.0 for d in diffs)
            ok_all &= ok
            if errors:
                lines.append(f"      {label}: FAIL\n" + "\n".join("        " + l for l in errors[0].splitlines()[-12:]))
            else:
                sd = {}
                for r in per_rank:
                    for k, v in (r.get("state_diff_after_load") or {}).items():
                        sd[k] = max(sd.get(k, 0.0), v)
                lines.append(f"      {label}: loaded state max diff {{{', '.join(f'{k}: {v:.1e}' for k, v in sd.items())}}}; "
                             f"next step max param diff {max(diffs):.1e} -> {'ok' if ok else 'FAIL'}")
                if os.environ.get("CHECK_DEBUG"):
                    lines.append(f"      DEBUG grad norms (original, loaded) per rank: {[r.get('grad_norm') for r in per_rank]}")
    return ok_all


def _eval_hooks(case, gathered, workdir, lines):
    ok_all = True
    for res in gathered:
        c = res["checks"]
        ok = (c["num_bucket_groups"] > 1 and c["iter0_no_launch_inside_no_sync"]
              and c["iter1_no_launch_inside_no_sync"] and c["iter0_no_launch_before_finish"]
              and c["iter1_launch_exactly_at_last_grad"]
              and c["iter0_main_grad_max_abs_diff"] < 1e-6 and c["iter1_main_grad_max_abs_diff"] < 1e-6
              and c["grad_added_to_main_grad_skips_add"] == 0.0 and c["zero_grad_buffer_resets_flag"])
        ok_all &= ok
        shown = ", ".join(f"{k}={v}" for k, v in c.items())
        lines.append(f"    dp rank {res['coords']['dp']}: {shown} -> {'ok' if ok else 'FAIL'}")
    return ok_all


EVALS = dict(parity=_eval_parity, lowp=_eval_lowp, ckpt=_eval_ckpt, hooks=_eval_hooks)


def _run(case, workdir):
    port = ref.free_port()
    start = time.time()
    error = None
    ctx = mp.start_processes(_worker, args=(case, port, workdir), nprocs=_world(case), join=False,
                             start_method="spawn")
    try:
        while not ctx.join(timeout=1):
            if time.time() - start > CASE_TIMEOUT_S:
                error = f"timed out after {CASE_TIMEOUT_S}s"
                break
    except Exception as exc:  # a worker raised: its traceback is in exc
        error = f"worker failed:\n{exc}"
    finally:
        for proc in ctx.processes:
            try:  # the rank and whatever it forked (dist_checkpointing writer processes)
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.join(5)
    path = os.path.join(workdir, "result.pt")
    gathered = torch.load(path) if os.path.exists(path) else None
    if gathered is None and error is None:
        error = "no result written"
    return gathered, error, time.time() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", type=int, action="append", help="case index (repeatable)")
    args = parser.parse_args()
    selected = args.case if args.case else range(len(CASES))

    warnings.filterwarnings("ignore")
    ref.init_single_process()
    ok_all = True
    for index in selected:
        case = CASES[index]
        workdir = tempfile.mkdtemp(prefix=f"check_megatron_optim_cpu_{index}_")
        try:
            for tied in (False, True):  # the deterministic full model the workers shard from
                full = ref.build_full_model(NUM_LAYERS, tied=tied)
                torch.save({n: p.detach().clone() for n, p in full.named_parameters()},
                           os.path.join(workdir, f"full_tied{int(tied)}.pt"))
            gathered, error, seconds = _run(case, workdir)
            print(f"[{index}] {case['name']} (world={_world(case)}: tp={case['tp']} pp={case['pp']} dp={case['dp']})")
            if error or gathered is None:
                print(f"    FAIL: {error}")
                ok_all = False
                continue
            lines = []
            ok = EVALS[case["body"]](case, gathered, workdir, lines)
            print("\n".join(lines))
            print(f"    {'PASS' if ok else 'FAIL'} ({seconds:.1f}s)")
            ok_all &= ok
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        sys.stdout.flush()
    print("ALL PASS" if ok_all else "SOME CHECKS FAILED")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
