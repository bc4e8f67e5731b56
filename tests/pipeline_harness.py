"""Multi-process harness for runtime tests: run a schedule on a tiny GPTModel
over gloo and return per-rank results (losses, grads by global name, ...).

Not a test module; tests import it. Each case runs in fresh processes started
with torch.multiprocessing (spawn) and always ends: a worker exception or a
timeout kills every rank and raises in the parent.
"""
from __future__ import annotations

import datetime
import io
import os
import queue
import traceback
from functools import partial

import torch
import torch.multiprocessing as mp

import megatron_reference as ref


def _provider(config, tied, pre_process=True, post_process=True, vp_stage=None):
    return ref._gpt(config, pre_process=pre_process, post_process=post_process, vp_stage=vp_stage, tied=tied)


def _worker(rank, world, port, case, out):
    try:
        import warnings

        warnings.filterwarnings("ignore")
        import torch.distributed as dist
        from megatron.core import parallel_state

        from primus_megatron.compat import cpu

        cpu.enable()
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=case.get("gloo_timeout", 60)))
        tp, pp = case.get("tp", 1), case["pp"]
        parallel_state.initialize_model_parallel(tp, pp, distributed_timeout_minutes=1)
        result = case["body"](rank, case)
        buf = io.BytesIO()
        torch.save(result, buf)  # plain bytes: shared-memory tensors die with the process
        out.put((rank, "ok", buf.getvalue()))
    except BaseException as exc:  # report every failure to the parent, then exit
        out.put((rank, "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        out.close()
        out.join_thread()  # flush the result before the hard exit
        os._exit(0)


def run_ranks(case: dict, world: int, *, timeout_s: float = 240.0) -> list:
    """Run case['body'](rank, case) on `world` gloo ranks; results indexed by rank."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = ref.free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, case, out), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    results, errors = {}, []
    try:
        deadline = timeout_s
        while len(results) + len(errors) < world:
            try:
                rank, status, value = out.get(timeout=deadline)
            except queue.Empty:
                raise TimeoutError(f"ranks {sorted(set(range(world)) - set(results))} did not finish in {timeout_s} s")
            if status == "ok":
                results[rank] = torch.load(io.BytesIO(value), weights_only=False)
            else:
                errors.append((rank, value))
                break
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(5)
    if errors:
        rank, text = errors[0]
        raise RuntimeError(f"rank {rank} failed:\n{text}")
    return [results[r] for r in range(world)]


# -- the standard body: training steps of schedules vs the single-process reference -----------------

def _config_for(sched_chunks, case, pp):
    return ref.tiny_gpt_config(case["num_layers"], pipeline_model_parallel_size=pp,
                               virtual_pipeline_model_parallel_size=sched_chunks if sched_chunks > 1 else None,
                               **case.get("config", {}))


def _attach_main_grad(model):
    """What megatron's DDP does for gradient-accumulation fusion: an fp32 main_grad per param."""
    for chunk in model:
        for p in chunk.parameters():
            p.main_grad = torch.zeros_like(p, dtype=torch.float32)
            p.grad_added_to_main_grad = False


def _main_grads(model):
    grads = {}
    for chunk in model:
        for name, p in ref.named_global_parameters(chunk):
            g = p.main_grad.clone()
            if p.grad is not None:  # params outside the fused linear path still use .grad
                g += p.grad
            grads[name] = grads[name] + g if name in grads else g
    return grads


def one_step(rank, case, pp):
    """One step of case['schedule'] (or megatron's own 1F1B for 'megatron-1f1b')."""
    import primus_megatron as pm
    import primus_megatron.schedules  # noqa: F401  (submodule attribute)

    m, tied, sched = case["microbatches"], case.get("tied", False), case["schedule"]
    batches = ref.make_microbatches(m, seed=case.get("data_seed", 0))
    full = ref.build_full_model(case["num_layers"], tied=tied, **case.get("config", {}))
    if sched == "megatron-1f1b":
        from megatron.core.pipeline_parallel import get_forward_backward_func

        model = ref.build_pipeline_chunks(case["num_layers"], tied=tied, **case.get("config", {}))
        fbf, chunks = get_forward_backward_func(), 1
    else:
        chunks = pm.schedules.registry.resolve_chunks(pm.schedules.info(sched), case.get("chunks"))
        config = _config_for(chunks, case, pp)
        model = pm.build_model(partial(_provider, config, tied), schedule=sched, chunks=case.get("chunks"))
        fbf = pm.get_forward_backward_func(sched, chunks=case.get("chunks"), **case.get("options", {}))
    for chunk in model:
        ref.copy_weights_by_layer_number(full, chunk)
    if case.get("fusion"):
        _attach_main_grad(model)
    if case.get("break_hooks"):
        from primus_megatron.runtime import linear_hooks

        linear_hooks.uninstall()
    if case.get("list_iterators"):
        data = [iter(batches) for _ in model]
    else:
        data = iter(batches)
    kwargs = dict(forward_step_func=ref.make_forward_step_func(case.get("three_tuple", True)), data_iterator=data,
                  model=model if len(model) > 1 else model[0], num_microbatches=m,
                  seq_length=ref.SEQ_LENGTH, micro_batch_size=ref.MICRO_BATCH_SIZE,
                  forward_only=case.get("forward_only", False))
    try:
        store = fbf(**kwargs)
    finally:
        if case.get("break_hooks"):
            from primus_megatron.runtime import linear_hooks

            linear_hooks.install()
    result = {"losses": ref.losses_from_store(store),
              "grads": _main_grads(model) if case.get("fusion") else ref.chunk_grads(model),
              "layers": [ref.layer_numbers(c) for c in model],
              "stages": [getattr(c, "pipeline_stage", None) for c in model]}
    if sched != "megatron-1f1b":
        result.update(wgrads_deferred=fbf.last_step.wgrads_deferred, wgrads_run=fbf.last_step.wgrads_run,
                      linear_layers=sum(1 for c in model for mod in c.modules()
                                        if type(mod).__name__ in ("ColumnParallelLinear", "RowParallelLinear")),
                      timeline=[(r.op.kind, r.op.mb, r.op.chunk) for r in fbf.last_step.timeline])
    if rank == 0 and not case.get("forward_only"):
        result["ref_losses"], result["ref_grads"] = ref.reference_losses_and_grads(full, batches)
    elif rank == 0:
        result["ref_losses"] = ref.reference_losses_and_grads(full, batches)[0]
    return result


def cases_body(rank, world_case):
    """Run world_case['cases'] in order on the same process group; an exception
    in one case is returned as {'error': text} so the others still run."""
    out = []
    for case in world_case["cases"]:
        merged = {"num_layers": world_case.get("num_layers", 8), **case}
        try:
            out.append(one_step(rank, merged, world_case["pp"]))
        except Exception as exc:
            out.append({"error": f"{type(exc).__name__}: {exc}"})
    return out
