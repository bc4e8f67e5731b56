"""TransformerEngine on GPU: megatron's TE layer spec, pp=2, our zb-h1, zbv and dualpipev
against megatron's own 1F1B, every loss and every gradient, in fp32, bf16 and FP8.

Skipped unless CUDA and a real TransformerEngine are present (the CPU tests in
test_te_wgrad.py use a stand-in of TE's weight-gradient API instead; `make gpu-te` runs
this file on a GPU machine from the TE bundle). Two ranks are spawned: with two or more
GPUs, one GPU each over NCCL; with one GPU, both ranks share it over gloo (NCCL refuses
two ranks on one device), and point-to-point transfers of CUDA tensors go through host
copies, since gloo sends host memory only.

Variants: in fp32, the plain model (the executor routes the TE layers itself) and each
chunk routed with te_wgrad.enable() then wrapped in megatron's DistributedDataParallel
(overlapped reduce, delay_wgrad_compute=True; two steps, the second reducing from DDP's
hooks), with gradient-accumulation fusion when apex's fused_weight_gradient_mlp_cuda is
importable (megatron's own output layer needs it); in bf16, and in FP8 (megatron's
`--fp8-format hybrid` with the `delayed` and `tensorwise` recipes the stand-in reproduces,
bf16 around it), the DDP variant, against megatron's 1F1B of the same precision under the
same DDP. FP8 variants are skipped on a GPU without FP8 (compute capability below 8.9).
"""
from __future__ import annotations

import datetime
import importlib.util
import io
import os
import traceback
from functools import partial

import pytest
import torch

import expected_skips
import megatron_reference as ref

HAVE_TE = importlib.util.find_spec("transformer_engine") is not None
pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() and HAVE_TE and ref.environment_ok()),
                                reason=expected_skips.reason(
                                    "no-cuda-te", "needs a CUDA GPU, TransformerEngine and megatron-core (TE does not "
                                    "install on the CPU machines; tests/test_te_wgrad.py covers the logic with a stand-in)"))

WORLD = 2
NUM_LAYERS, MICROBATCHES = 4, 4  # dualpipev needs at least 2 pp microbatches
# fp32: same kernels on the same inputs, room for reduction-order differences only; bf16 and FP8 (whose
# values are bf16 around the FP8 GEMMs): torch's default tolerances for bfloat16 (two ulps: 2^-6 relative)
TOLERANCES = {"fp32": (1e-4, 1e-6), "bf16": (1.6e-2, 1e-5), "fp8-delayed": (1.6e-2, 1e-5),
              "fp8-tensorwise": (1.6e-2, 1e-5)}
OURS = ("zb-h1", "zbv", "dualpipev")

VARIANTS = [{"schedule": "megatron-1f1b", "precision": "fp32"}]
VARIANTS += [{"schedule": s, "precision": "fp32"} for s in OURS]
VARIANTS += [{"schedule": s, "precision": "fp32", "ddp": True} for s in OURS]
for _precision in ("bf16", "fp8-delayed", "fp8-tensorwise"):
    VARIANTS += [{"schedule": s, "precision": _precision, "ddp": True} for s in ("megatron-1f1b", *OURS)]


def _reference(variant: dict) -> int:
    """The index of megatron's 1F1B run a variant is compared with: its precision's (fp32: the plain one)."""
    return next(i for i, v in enumerate(VARIANTS) if v["schedule"] == "megatron-1f1b"
                and v["precision"] == variant["precision"])


def _id(i: int) -> str:
    v = VARIANTS[i]
    return "-".join([v["schedule"], v["precision"]] + (["ddp"] if v.get("ddp") else []))


class _HostStagedWork:
    """A gloo send/recv of a CUDA tensor made through a host copy."""

    def __init__(self, work, host: torch.Tensor, device_tensor=None) -> None:
        self.work, self.host, self.device_tensor = work, host, device_tensor

    def wait(self, timeout=None):
        ok = self.work.wait() if timeout is None else self.work.wait(timeout)
        if self.device_tensor is not None:
            self.device_tensor.copy_(self.host)
            self.device_tensor = None
        return ok

    def is_completed(self) -> bool:
        return self.work.is_completed()


def _stage_cuda_p2p_through_host() -> None:
    """Gloo moves host memory only: send/recv CUDA tensors via host copies (one GPU, two ranks)."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    isend0, irecv0 = c10d.isend, c10d.irecv

    def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
        if not tensor.is_cuda:
            return isend0(tensor, dst, group, tag, group_dst)
        host = tensor.detach().to("cpu")  # a synchronous copy: the caller may free the tensor after posting
        return _HostStagedWork(isend0(host, dst, group, tag, group_dst), host)

    def irecv(tensor, src=None, group=None, tag=0, group_src=None):
        if not tensor.is_cuda:
            return irecv0(tensor, src, group, tag, group_src)
        host = torch.empty(tensor.shape, dtype=tensor.dtype)
        return _HostStagedWork(irecv0(host, src, group, tag, group_src), host, tensor)

    # P2POp and batch_isend_irecv compare ops with c10d's module globals: patch both names
    c10d.isend, c10d.irecv = isend, irecv
    dist.isend, dist.irecv = isend, irecv


def _worker(rank: int, port: int, out) -> None:
    try:
        import torch.distributed as dist
        from megatron.core import parallel_state
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

        gpus = torch.cuda.device_count()
        torch.cuda.set_device(rank % gpus)
        backend = "nccl" if gpus >= WORLD else "gloo"
        timeout = datetime.timedelta(seconds=300)
        store = dist.TCPStore("127.0.0.1", port, WORLD, is_master=False, timeout=timeout)  # the parent hosts it
        dist.init_process_group(backend, store=store, rank=rank, world_size=WORLD, timeout=timeout)
        if backend == "gloo":
            _stage_cuda_p2p_through_host()
        parallel_state.initialize_model_parallel(1, WORLD)
        model_parallel_cuda_manual_seed(1234)
        result = {"backend": backend, "runs": _body()}
        buf = io.BytesIO()
        torch.save(result, buf)
        out.put((rank, "ok", buf.getvalue()))
    except BaseException as exc:
        out.put((rank, "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        out.close()
        out.join_thread()
        os._exit(0)


def _config(pp: int, vp=None, fuse: bool = False, precision: str = "fp32"):
    from megatron.core.transformer.transformer_config import TransformerConfig

    low = precision != "fp32"  # bf16, and bf16 around FP8's GEMMs
    dtype = torch.bfloat16 if low else torch.float32
    fp8 = dict(fp8="hybrid", fp8_recipe=precision.removeprefix("fp8-")) if precision.startswith("fp8") else {}
    return TransformerConfig(num_layers=NUM_LAYERS, hidden_size=64, num_attention_heads=4, ffn_hidden_size=256,
                             hidden_dropout=0.0, attention_dropout=0.0, params_dtype=dtype,
                             pipeline_dtype=dtype, bf16=low, fp16=False,
                             gradient_accumulation_fusion=fuse, bias_dropout_fusion=False,
                             pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vp, **fp8)


def _gpt(config, *, pre_process, post_process, vp_stage=None):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    return GPTModel(config, get_gpt_layer_with_transformer_engine_spec(), vocab_size=ref.VOCAB_SIZE,
                    max_sequence_length=ref.SEQ_LENGTH, pre_process=pre_process, post_process=post_process,
                    share_embeddings_and_output_weights=False, vp_stage=vp_stage).cuda()


def _forward_step(data_iterator, model):
    batch = {k: v.cuda() for k, v in next(data_iterator).items()}
    output = model(batch["tokens"], batch["position_ids"], batch["attention_mask"], labels=batch["labels"])
    return output, partial(ref.loss_func, batch["loss_mask"])


def _fusion_available() -> bool:
    return importlib.util.find_spec("fused_weight_gradient_mlp_cuda") is not None


def _run(variant: dict, full, batches) -> dict:
    import primus_megatron as pm
    import transformer_engine.pytorch as te
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

    from primus_megatron.runtime import te_wgrad

    sched, ddp, precision = variant["schedule"], variant.get("ddp", False), variant["precision"]
    if precision.startswith("fp8"):
        from transformer_engine.pytorch.quantization import check_fp8_support

        available, why = check_fp8_support()
        if not available:
            return {"unavailable": f"FP8: {why}"}
    fuse = ddp and _fusion_available()
    pp = ps.get_pipeline_model_parallel_world_size()
    if sched == "megatron-1f1b":
        from megatron.core.pipeline_parallel import get_forward_backward_func

        config = _config(pp, fuse=fuse, precision=precision)
        model = [_gpt(config, pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage())]
        fbf = get_forward_backward_func()
    else:
        chunks = pm.schedules.registry.resolve_chunks(pm.schedules.info(sched), None)
        config = _config(pp, chunks if chunks > 1 else None, fuse, precision)
        model = pm.build_model(partial(_gpt, config), schedule=sched)
        fbf = pm.get_forward_backward_func(sched, p2p_timeout_s=120)
    for chunk in model:
        ref.copy_weights_by_layer_number(full, chunk)  # the fp32 weights, rounded to the chunk's dtype
    if config.bf16:  # as Megatron-LM wraps a bf16 model: inputs and the last stage's output cast
        from megatron.core.transformer.module import Float16Module

        model = [Float16Module(config, c) for c in model]
    if ddp:
        for chunk in model:
            if sched != "megatron-1f1b":
                te_wgrad.enable(chunk)  # before DDP, which then hooks the TE layers instead of their parameters
        # megatron's own 1F1B runs TE's undelayed layers: DDP hooks their parameters as usual
        ddp_config = DistributedDataParallelConfig(overlap_grad_reduce=True, grad_reduce_in_fp32=True,
                                                   delay_wgrad_compute=sched != "megatron-1f1b")
        model = [DistributedDataParallel(config, ddp_config, c, disable_bucketing=i > 0) for i, c in enumerate(model)]
        config.no_sync_func = [c.no_sync for c in model] if len(model) > 1 else model[0].no_sync
    steps = []
    for _ in range(2 if ddp else 1):
        if ddp:
            for c in model:
                c.zero_grad_buffer()
        else:
            for c in model:
                c.zero_grad(set_to_none=True)
        store = fbf(forward_step_func=_forward_step, data_iterator=iter(batches),
                    model=model if len(model) > 1 else model[0], num_microbatches=len(batches),
                    seq_length=ref.SEQ_LENGTH, micro_batch_size=ref.MICRO_BATCH_SIZE)
        torch.cuda.synchronize()
        grads, seen = {}, set()
        for c in model:
            if ddp:
                c.finish_grad_sync()
            for name, p in ref.named_global_parameters(c):
                if id(p) in seen:
                    continue
                seen.add(id(p))
                g = p.main_grad if ddp else p.grad
                if g is not None:
                    grads[name] = g.detach().float().cpu().clone()
        steps.append({"losses": ref.losses_from_store(store), "grads": grads})
    out = {"steps": steps, "fused": fuse}
    if sched != "megatron-1f1b":
        te_layers = [m for c in model for m in c.modules() if isinstance(m, (te.Linear, te.LayerNormLinear))]
        out["te_layers"] = len(te_layers)
        out["routed"] = sum(1 for m in te_layers if te_wgrad.is_routed(m))
        out["megatron_linears"] = sum(1 for c in model for m in c.modules()
                                      if type(m).__name__ in ("ColumnParallelLinear", "RowParallelLinear"))
        out["deferred"], out["ran"] = fbf.last_step.wgrads_deferred, fbf.last_step.wgrads_run
    return out


def _body() -> list:
    import transformer_engine

    batches = ref.make_microbatches(MICROBATCHES, seed=3)
    full = ref.deterministic_init_(_gpt(_config(1), pre_process=True, post_process=True), seed=11)
    runs = []
    for variant in VARIANTS:
        try:
            runs.append(_run(variant, full, batches))
        except Exception as exc:
            runs.append({"error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-3000:]}"})
    runs.append({"te_version": str(getattr(transformer_engine, "__version__", "?"))})
    return runs


@pytest.fixture(scope="module")
def gpu_results():
    import queue
    import time

    import torch.multiprocessing as mp

    from primus_megatron.runtime.local_ranks import rendezvous_store

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    store = rendezvous_store(WORLD)  # noqa: F841  (held while the ranks run)
    procs = [ctx.Process(target=_worker, args=(r, store.port, out)) for r in range(WORLD)]
    for p in procs:
        p.start()
    results, errors, deadline = {}, [], time.monotonic() + 900
    try:
        while len(results) + len(errors) < WORLD:
            try:
                rank, status, value = out.get(timeout=max(1.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"GPU ranks {sorted(set(range(WORLD)) - set(results))} did not finish") from None
            if status == "ok":
                results[rank] = torch.load(io.BytesIO(value), weights_only=False)
            else:
                errors.append(f"rank {rank}: {value}")
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(5)
    if errors:
        raise RuntimeError("\n".join(errors))
    return [results[r] for r in range(WORLD)]


@pytest.mark.parametrize("index", [i for i, v in enumerate(VARIANTS) if v["schedule"] != "megatron-1f1b"], ids=_id)
def test_te_gpt_matches_megatrons_1f1b(gpu_results, index):
    runs = [r["runs"][index] for r in gpu_results]
    refs = [r["runs"][_reference(VARIANTS[index])] for r in gpu_results]
    where = f"{gpu_results[0]['backend']}, TE {gpu_results[0]['runs'][-1]['te_version']}"
    if "unavailable" in runs[0]:
        pytest.skip(expected_skips.reason("no-cuda-fp8", f"{where}: {runs[0]['unavailable']}"))
    for rank, res in enumerate(runs + refs):
        assert "error" not in res, f"rank {rank % WORLD} ({where}): {res['error']}"
    rtol, atol = TOLERANCES[VARIANTS[index]["precision"]]
    ref_losses = [x for r in refs for x in r["steps"][0]["losses"]]
    ref_grads = ref.merge_grads([r["steps"][0]["grads"] for r in refs])
    assert len(ref_losses) == MICROBATCHES and ref_grads
    for step in range(len(runs[0]["steps"])):
        ref_step = min(step, len(refs[0]["steps"]) - 1)  # the fp32 DDP runs' second step against the plain reference
        ref_losses = [x for r in refs for x in r["steps"][ref_step]["losses"]]
        ref_grads = ref.merge_grads([r["steps"][ref_step]["grads"] for r in refs])
        losses = [x for r in runs for x in r["steps"][step]["losses"]]
        grads = ref.merge_grads([r["steps"][step]["grads"] for r in runs])
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=rtol, atol=atol,
                                   msg=lambda m: f"step {step} losses ({where}): {m}")
        assert set(grads) == set(ref_grads), f"gradient names differ: {sorted(set(grads) ^ set(ref_grads))[:6]}"
        for name, g in ref_grads.items():
            torch.testing.assert_close(grads[name], g, rtol=rtol, atol=atol,
                                       msg=lambda m: f"step {step} grad {name} ({where}): {m}")
    for res in runs:  # every TE linear layer routed; one deferred GEMM per layer per microbatch, all run in W
        assert res["te_layers"] > 0 and res["routed"] == res["te_layers"], res
        expected = (res["te_layers"] + res["megatron_linears"]) * MICROBATCHES
        assert res["deferred"] == res["ran"] == expected, {k: v for k, v in res.items() if k != "steps"}
