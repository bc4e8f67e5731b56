#!/usr/bin/env python
"""Proof that megatron-core's OWN pipeline schedules run on CPU/gloo and are exact.

For each case, spawns `world` gloo processes (pipeline size = world size),
builds a tiny GPTModel pipeline with primus_megatron.compat.cpu enabled, copies
weights by global layer number from a deterministic full model, runs one step
of megatron's forward_backward_func (1F1B or interleaved) and a forward-only
pass, and compares per-microbatch losses and every parameter gradient with a
single-process run of the full model.  The last case reproduces a known
megatron-core bug (interleaved, pp=2, batched p2p: NVIDIA/Megatron-LM#1450) and
passes only if the mismatch shows.  Exits non-zero on any unexpected result,
error or timeout (gloo timeout 60 s, 300 s per case).

    python scripts/check_megatron_cpu.py            # all cases
    python scripts/check_megatron_cpu.py --case 0   # one case
"""

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
import traceback
import warnings

import torch
import torch.multiprocessing as mp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (ROOT, os.path.join(ROOT, "tests")):
    if path not in sys.path:
        sys.path.insert(0, path)

import megatron_reference as ref  # noqa: E402

RTOL = 1e-5  # max|a - r| / max|r| per tensor, and per loss
GLOO_TIMEOUT_S = 60
CASE_TIMEOUT_S = 300

CASES = [
    dict(name="1F1B pp=2, 4 layers", pp=2, vp=None, layers=4, microbatches=8),
    dict(
        name="1F1B pp=4, 4 layers, deallocate_pipeline_outputs, 2-tuple loss_func",
        pp=4,
        vp=None,
        layers=4,
        microbatches=8,
        three_tuple=False,
        overrides={"deallocate_pipeline_outputs": True},
    ),
    dict(
        name="1F1B pp=2, 4 layers, tied embeddings, unbatched p2p",
        pp=2,
        vp=None,
        layers=4,
        microbatches=8,
        tied=True,
        overrides={"batch_p2p_comm": False},
    ),
    dict(
        name="interleaved pp=2 vp=2, 8 layers, overlap_p2p_comm (Megatron-LM's default)",
        pp=2,
        vp=2,
        layers=8,
        microbatches=8,
        overrides={"overlap_p2p_comm": True, "batch_p2p_comm": False},
    ),
    dict(name="interleaved pp=4 vp=2, 8 layers, batched p2p", pp=4, vp=2, layers=8, microbatches=8),
    # Known upstream bug (NVIDIA/Megatron-LM#1450): with pp=2 prev and next rank coincide and
    # _batched_p2p_ops posts send_prev before send_next, so activations and gradients swap.
    dict(
        name="interleaved pp=2 vp=2, batched p2p: KNOWN UPSTREAM BUG, must mismatch",
        pp=2,
        vp=2,
        layers=8,
        microbatches=8,
        expect_mismatch=True,
    ),
]


def _worker(rank, case, port, result_path):
    import torch.distributed as dist

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    world = case["pp"]
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=GLOO_TIMEOUT_S),
    )
    try:
        _run_case(rank, case, result_path)
    finally:
        dist.destroy_process_group()


def _run_case(rank, case, result_path):
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.pipeline_parallel.schedules import get_forward_backward_func

    from primus_megatron.compat import cpu

    cpu.enable()
    ps.initialize_model_parallel(
        tensor_model_parallel_size=1,
        pipeline_model_parallel_size=case["pp"],
        virtual_pipeline_model_parallel_size=case["vp"],
        distributed_timeout_minutes=1,
    )
    overrides = case.get("overrides", {})
    tied = case.get("tied", False)
    three_tuple = case.get("three_tuple", True)
    m = case["microbatches"]

    full = ref.build_full_model(case["layers"], tied=tied, **overrides)
    chunks = ref.build_pipeline_chunks(case["layers"], tied=tied, **overrides)
    for chunk in chunks:
        ref.copy_weights_by_layer_number(full, chunk)
    microbatches = ref.make_microbatches(m)

    forward_backward = get_forward_backward_func()
    kwargs = dict(
        forward_step_func=ref.make_forward_step_func(three_tuple),
        model=chunks,
        num_microbatches=m,
        seq_length=ref.SEQ_LENGTH,
        micro_batch_size=ref.MICRO_BATCH_SIZE,
    )
    store = forward_backward(data_iterator=ref.data_iterators(microbatches, len(chunks)), **kwargs)
    losses = ref.losses_from_store(store)
    grads = ref.chunk_grads(chunks)
    eval_store = forward_backward(
        data_iterator=ref.data_iterators(microbatches, len(chunks)), forward_only=True, **kwargs
    )
    eval_losses = ref.losses_from_store(eval_store)
    placement = [ref.layer_numbers(c) for c in chunks]

    gathered = [None] * dist.get_world_size() if rank == 0 else None
    dist.gather_object((losses, eval_losses, grads, placement), gathered, dst=0)
    if rank != 0:
        return

    ref_losses, ref_grads = ref.reference_losses_and_grads(full, microbatches)
    pipe_losses = [l for g in gathered for l in g[0]]
    pipe_eval = [l for g in gathered for l in g[1]]
    pipe_grads = ref.merge_grads([g[2] for g in gathered])
    max_abs, max_rel, missing, extra = ref.compare(ref_grads, pipe_grads)

    def loss_rel(values):
        if len(values) != len(ref_losses):
            return float("inf")
        return max(abs(a - b) / abs(b) for a, b in zip(values, ref_losses))

    result = dict(
        schedule=forward_backward.__name__,
        placement=[g[3] for g in gathered],
        num_params=len(ref_grads),
        grad_max_abs=max_abs,
        grad_max_rel=max_rel,
        missing=missing,
        extra=extra,
        loss_max_rel=loss_rel(pipe_losses),
        eval_loss_max_rel=loss_rel(pipe_eval),
        mean_loss=sum(ref_losses) / len(ref_losses),
    )
    with open(result_path, "w") as f:
        json.dump(result, f)


def _run(case, index):
    port = ref.free_port()
    fd, result_path = tempfile.mkstemp(prefix=f"check_megatron_cpu_{index}_", suffix=".json")
    os.close(fd)
    os.unlink(result_path)
    start = time.time()
    error = None
    ctx = mp.start_processes(
        _worker,
        args=(case, port, result_path),
        nprocs=case["pp"],
        join=False,
        start_method="spawn",
    )
    try:
        while not ctx.join(timeout=1):
            if time.time() - start > CASE_TIMEOUT_S:
                error = f"timed out after {CASE_TIMEOUT_S}s"
                break
    except Exception as exc:  # a worker raised: its traceback is in exc
        error = f"worker failed:\n{exc}"
    finally:
        for proc in ctx.processes:
            if proc.is_alive():
                proc.kill()
            proc.join(5)
    result = None
    if os.path.exists(result_path):
        with open(result_path) as f:
            result = json.load(f)
        os.unlink(result_path)
    elif error is None:
        error = "no result written"
    return result, error, time.time() - start


def _expected_placement(case):
    layers, pp, vp = case["layers"], case["pp"], case["vp"] or 1
    per_chunk = layers // pp // vp
    return [
        [list(range((v * pp + r) * per_chunk + 1, (v * pp + r + 1) * per_chunk + 1)) for v in range(vp)]
        for r in range(pp)
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", type=int, action="append", help="case index (repeatable)")
    args = parser.parse_args()
    selected = args.case if args.case else range(len(CASES))

    ok_all = True
    for index in selected:
        case = CASES[index]
        result, error, seconds = _run(case, index)
        print(f"[{index}] {case['name']} (world={case['pp']}, microbatches={case['microbatches']})")
        if error or result is None:
            print(f"    FAIL: {error}")
            ok_all = False
            continue
        placement_ok = result["placement"] == _expected_placement(case)
        ok = (
            placement_ok
            and not result["missing"]
            and not result["extra"]
            and result["grad_max_rel"] <= RTOL
            and result["loss_max_rel"] <= RTOL
            and result["eval_loss_max_rel"] <= RTOL
        )
        if case.get("expect_mismatch"):
            ok = placement_ok and not ok
        ok_all &= ok
        print(f"    schedule: {result['schedule']}")
        print(f"    layers per rank/chunk: {result['placement']}" + ("" if placement_ok else " (UNEXPECTED)"))
        print(
            f"    losses (mean {result['mean_loss']:.6f}): max rel diff train {result['loss_max_rel']:.3e}, "
            f"forward_only {result['eval_loss_max_rel']:.3e}"
        )
        print(
            f"    grads ({result['num_params']} tensors): max abs diff {result['grad_max_abs']:.3e}, "
            f"max rel diff {result['grad_max_rel']:.3e}"
            + (f", missing {result['missing']}" if result["missing"] else "")
            + (f", unexpected {result['extra']}" if result["extra"] else "")
        )
        verdict = "PASS" if ok else "FAIL"
        if case.get("expect_mismatch"):
            verdict += " (mismatch reproduced)" if ok else " (expected a mismatch)"
        print(f"    {verdict} ({seconds:.1f}s)")
    print("ALL PASS" if ok_all else "SOME CASES FAILED")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
