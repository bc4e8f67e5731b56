"""Multi-process harness for runtime tests: run a schedule on a tiny GPTModel
over gloo and return per-rank results (losses, grads by global name, ...).

Not a test module; tests import it. Each case runs in fresh processes started
with torch.multiprocessing (spawn) and always ends: a worker exception or a
timeout kills every rank and raises in the parent.
"""
from __future__ import annotations

import contextlib
import os
import traceback
from datetime import timedelta
from functools import partial

import torch

import megatron_reference as ref
from primus_megatron.runtime import local_ranks


def _provider(config, tied, pre_process=True, post_process=True, vp_stage=None):
    return ref._gpt(config, pre_process=pre_process, post_process=post_process, vp_stage=vp_stage, tied=tied)


def run_ranks(case: dict, world: int, *, timeout_s: float = 240.0) -> list:
    """Run case['body'](rank, case) on `world` gloo ranks; results indexed by rank."""
    return local_ranks.run_ranks(case["body"], {"data_cache": _data_cache(), **case}, world, timeout_s=timeout_s)


_DATA_CACHE: list = []


def _data_cache() -> str:
    """This process's directory for megatron-core's dataset index cache (`train_body`), removed at exit."""
    if not _DATA_CACHE:
        import atexit
        import shutil
        import tempfile

        _DATA_CACHE.append(tempfile.mkdtemp(prefix="primus-test-data-cache-"))
        atexit.register(shutil.rmtree, _DATA_CACHE[0], True)
    return _DATA_CACHE[0]


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
    grads, seen = {}, set()
    for chunk in model:
        for name, p in ref.named_global_parameters(chunk):
            if id(p) in seen:
                continue
            seen.add(id(p))
            g = p.main_grad.clone()
            if p.grad is not None and not p.grad_added_to_main_grad:
                g += p.grad  # params outside the fused path use .grad (DDP would add it to main_grad)
            grads[name] = grads[name] + g if name in grads else g
    return grads


# megatron-core's own schedules, no hooks of ours: "megatron-1f1b", and "megatron-interleaved"
# with 2 chunks per rank (its p2p transport from the case's config, as Megatron-LM sets it)
MEGATRON_OWN = ("megatron-1f1b", "megatron-interleaved")
SCHEDULE_SIDE_OPTIONS = ("gradient_accumulation_fusion", "calculate_per_token_loss", "grad_scale_func",
                         "deallocate_pipeline_outputs", "overlap_p2p_comm", "batch_p2p_comm")
# how the layers are split over pipeline stages: meaningless for the unpipelined reference
SPLIT_OPTIONS = ("num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage",
                 "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
                 "pipeline_model_parallel_layout")


def one_step(rank, case, pp):
    """One step of case['schedule'] (or of megatron's own schedule, MEGATRON_OWN)."""
    if case["schedule"] == "megatron-interleaved":
        from megatron.core import parallel_state as ps

        # megatron's interleaved schedule and its model builder read the chunk count from here
        ps.set_virtual_pipeline_model_parallel_world_size(2)
        try:
            return _one_step(rank, case, pp)
        finally:
            ps.set_virtual_pipeline_model_parallel_world_size(None)
    return _one_step(rank, case, pp)


def _one_step(rank, case, pp):
    import primus_megatron as pm
    import primus_megatron.schedules  # noqa: F401  (submodule attribute)

    m, tied, sched = case["microbatches"], case.get("tied", False), case["schedule"]
    batches = ref.make_microbatches(m, seed=case.get("data_seed", 0))
    full, reference = _full_model(case)
    if sched in MEGATRON_OWN:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        model = ref.build_pipeline_chunks(case["num_layers"], tied=tied, **case.get("config", {}))
        fbf = get_forward_backward_func()
    else:
        chunks = pm.schedules.registry.resolve_chunks(pm.schedules.info(sched), case.get("chunks"))
        config = _config_for(chunks, case, pp)
        model = pm.build_model(partial(_provider, config, tied), schedule=sched, chunks=case.get("chunks"))
        fbf = pm.get_forward_backward_func(sched, chunks=case.get("chunks"), **case.get("options", {}))
        if case.get("lowering"):
            _use_lowering(fbf, case, pp)
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
    kwargs = dict(forward_step_func=case.get("forward_step") or ref.make_forward_step_func(case.get("three_tuple", True)),
                  data_iterator=data,
                  model=model if len(model) > 1 else model[0], num_microbatches=m,
                  seq_length=ref.SEQ_LENGTH, micro_batch_size=ref.MICRO_BATCH_SIZE,
                  forward_only=case.get("forward_only", False))
    # megatron's own schedules are an oracle: megatron's own linear layers, not our hook
    oracle = ref.megatron_own_linear() if sched in MEGATRON_OWN else contextlib.nullcontext()
    ref.mtp_losses_taken()  # nothing left from an earlier case
    try:
        with oracle as oracle_linear:
            store = fbf(**kwargs)
    finally:
        if case.get("break_hooks"):
            from primus_megatron.runtime import linear_hooks

            linear_hooks.install()
    result = {"losses": ref.losses_from_store(store), "mtp_losses": ref.mtp_losses_taken(),
              "grads": _main_grads(model) if case.get("fusion") else ref.chunk_grads(model),
              "layers": [ref.layer_numbers(c) for c in model],
              "stages": [getattr(c, "pipeline_stage", None) for c in model],
              "embeddings": _embedding_holders(model)}
    if sched in MEGATRON_OWN:
        result["oracle_linear"] = oracle_linear
    else:
        if case.get("options", {}).get("p2p_groups") == "per-direction":
            result["twin_posts"] = _twin_posts()
        result.update(wgrads_deferred=fbf.last_step.wgrads_deferred, wgrads_run=fbf.last_step.wgrads_run,
                      linear_layers=sum(1 for c in model for mod in c.modules()
                                        if type(mod).__name__ in ("ColumnParallelLinear", "RowParallelLinear")),
                      timeline=[(r.op.kind, r.op.mb, r.op.chunk) for r in fbf.last_step.timeline])
    if rank == 0:
        key = (m, case.get("data_seed", 0))
        if key not in reference:
            with ref.megatron_own_linear() as used:
                reference[key] = (used, *ref.reference_losses_and_grads(full, batches), ref.mtp_losses_taken())
        result["ref_linear"], result["ref_losses"], ref_grads, result["ref_mtp_losses"] = reference[key]
        result["ref_losses"] = list(result["ref_losses"])
        if not case.get("forward_only"):
            result["ref_grads"] = ref_grads
    return result


def _twin_posts() -> int:
    """How many submissions this rank's towards-lower-ranks twin group has carried (strict p2p)."""
    from megatron.core import parallel_state as ps
    from primus_megatron.runtime import p2p_groups, strict_p2p

    return strict_p2p._QUEUES[p2p_groups._TWINS[ps.get_pipeline_model_parallel_group()]].submitted


# the word and position embeddings and the output layer: where megatron keeps copies of them
EMBEDDING_NAMES = ("embedding.word_embeddings.weight", "embedding.position_embeddings.weight", "output_layer.weight")


def _embedding_holders(model) -> list:
    """(chunk, global name, parameter index on this rank) of every embedding / output Parameter this
    rank holds, each Parameter once, and which of them the MTP block of a chunk reads (`reads`:
    (chunk, index of the Parameter its embedding's word weight is))."""
    seen, out = {}, []
    for c, chunk in enumerate(model):
        for name, p in ref.named_global_parameters(chunk):
            if name in EMBEDDING_NAMES and id(p) not in seen:
                seen[id(p)] = len(seen)
                out.append(("holds", c, name, seen[id(p)]))
    for c, chunk in enumerate(model):
        inner = ref.unwrap(chunk)
        if getattr(inner, "mtp_process", False):
            weight = inner.embedding.word_embeddings.weight
            out.append(("reads", c, "embedding.word_embeddings.weight", seen.get(id(weight))))
    return out


# The non-pipelined reference model and its runs, per process: a launch's cases share them (they differ in
# the schedule, not in the model or the data). Built once per (layers, tied, model options); its run once per
# (microbatches, data seed), on rank 0 (the model's weights never change: the cases copy them, the reference
# only reads them and sets .grad).
_FULL: dict = {}


def _full_model(case: dict) -> tuple:
    """(the full model, {(microbatches, data seed): (its linear, losses, grads)}) for `case`."""
    # The reference is plain autograd: schedule-side options do not apply to it.
    numeric = {k: v for k, v in case.get("config", {}).items() if k not in SCHEDULE_SIDE_OPTIONS + SPLIT_OPTIONS}
    key = (case["num_layers"], case.get("tied", False), repr(sorted(numeric.items())))
    if key not in _FULL:
        _FULL[key] = (ref.build_full_model(case["num_layers"], tied=case.get("tied", False), **numeric), {})
    return _FULL[key]


def _use_lowering(fbf, case, pp):
    """Run the step with a hand-built lowering (tests/strict_lowerings.py), unvalidated."""
    import strict_lowerings
    from primus_megatron import schedules as S

    m = case["microbatches"]
    sched = S.generate(case["schedule"], pp, m, chunks=case.get("chunks"), validate=False)
    lowered = (strict_lowerings.hoisted(sched) if case["lowering"] == "hoisted"
               else strict_lowerings.batched(S.lower(sched)))
    fbf.planner.use((pp, m, False), sched, lowered)


def p2p_order_body(rank, world_case):
    """Two ranks post the p2p of world_case['scenarios'] (each on a process group of its own, so a
    hang leaves nothing behind for the next) in world_case['mode']; per scenario, 'ok' with the
    values received, or the PipelineTimeout's text.

    Scenarios (both ranks post the same, to each other): send_first: a send, then a receive
    (lone ops: under NCCL each send waits for a receive its peer queued behind its own send);
    send_first_batch: the same two as one batch (they progress together); head_of_line: a
    receive, then a send (each receive waits for a send its peer queued behind its receive). With
    the suffix _per_direction: the same on a process group per direction (`groups`: what each rank
    sends to the other goes on a queue of its own, so neither order holds anything)."""
    import torch.distributed as dist

    from primus_megatron.runtime.p2p import P2P, PipelineTimeout, Post

    out = {}
    for name in world_case["scenarios"]:
        group = dist.new_group([0, 1])
        groups = (group, dist.new_group([0, 1])) if name.endswith("_per_direction") else ()
        name = name.removesuffix("_per_direction")
        p2p = P2P(group, rank, world_case.get("timeout_s", 2.0), world_case["mode"], groups=groups)
        peer = 1 - rank
        mine = torch.full([4], float(rank + 1))
        theirs = torch.empty(4)
        send, recv = Post(True, mine, peer, f"x{rank}", "test"), Post(False, theirs, peer, f"x{peer}", "test")
        if name == "send_first":
            posts = [[send], [recv]]
        elif name == "send_first_batch":
            posts = [[send, recv]]
        elif name == "head_of_line":
            posts = [[recv], [send]]
        else:
            raise ValueError(name)
        key = name + ("_per_direction" if groups else "")
        try:
            pendings = [p for batch in posts for p in p2p.post(batch)]
            for p in pendings:
                p2p.wait(p, op=f"scenario {name}")
            out[key] = ("ok", theirs.tolist())
        except PipelineTimeout as exc:
            out[key] = ("timeout", str(exc))
    # neither rank ends (closing its connections) while the other still waits out its own timeout: under
    # load the peer that timed out first exited, and the other's wait ended in "connection closed" instead
    dist.barrier()
    return out


def first_contact_body(rank, world_case):
    """Lazy init's first contact: rank 0 posts a lone send to rank 1, which posts its receive only
    after world_case['late_s'] (or never, with world_case['never']). Returns how long rank 0's post
    blocked its host, and what happened."""
    import time as _time

    import torch.distributed as dist

    from primus_megatron.runtime.p2p import P2P, PipelineTimeout

    group = dist.new_group([0, 1])
    p2p = P2P(group, rank, world_case["timeout_s"], world_case["mode"])
    if rank == 1:
        _time.sleep(world_case["late_s"])
        if world_case.get("never"):
            return {"posted_s": None, "outcome": "silent"}
        got = p2p.post_recv([2], torch.float32, "cpu", peer=0, what="activation mb0 stage 0->1", op="F0")
        return {"posted_s": None, "outcome": p2p.wait(got, op="F0").tolist()}
    started = _time.monotonic()
    try:
        sent = p2p.post_send(torch.ones(2), peer=1, what="activation mb0 stage 0->1", op="F0")
    except PipelineTimeout as exc:
        return {"posted_s": _time.monotonic() - started, "outcome": str(exc)}
    posted = _time.monotonic() - started
    p2p.finish_send(sent, op="F0")
    return {"posted_s": posted, "sent_s": _time.monotonic() - started, "outcome": "sent"}


def watchdog_body(rank, world_case):
    """Device-side waits (the GPU's, forced on gloo: the host blocks in them, as a GPU host blocks
    at its next synchronisation) with a rank that never sends: rank 1 receives activation mb0 but
    never sends its gradient back, then waits for activation mb1, which rank 0 sends only after
    that gradient. Neither wait returns; each rank's watchdog must name it and end the process."""
    import os

    import torch.distributed as dist

    from primus_megatron.runtime import watchdog
    from primus_megatron.runtime.p2p import P2P

    os.environ[watchdog.REPORT_DIR_ENV] = world_case["report_dir"]
    group = dist.new_group([0, 1])
    p2p = P2P(group, rank, world_case["timeout_s"], "strict", waits="device")  # strict: gloo works report
    # completion only once waited; the strict queue reports it as it happens, as NCCL does
    shape, act = [4], torch.ones(4)
    if rank == 0:
        p2p.post_send(act, peer=1, what="activation mb0 stage 0->1", op="F0 (microbatch 0, chunk 0, stage 0)")
        grad = p2p.post_recv(shape, torch.float32, "cpu", peer=1, what="gradient mb0 stage 1->0",
                             op="B0 (microbatch 0, chunk 0, stage 0)")
        p2p.wait(grad, op="B0 (microbatch 0, chunk 0, stage 0)")
        p2p.post_send(act, peer=1, what="activation mb1 stage 0->1", op="F1 (microbatch 1, chunk 0, stage 0)")
    else:
        got = p2p.post_recv(shape, torch.float32, "cpu", peer=0, what="activation mb0 stage 0->1",
                            op="F0 (microbatch 0, chunk 0, stage 1)")
        p2p.wait(got, op="F0 (microbatch 0, chunk 0, stage 1)")
        nxt = p2p.post_recv(shape, torch.float32, "cpu", peer=0, what="activation mb1 stage 0->1",
                            op="F1 (microbatch 1, chunk 0, stage 1)")
        p2p.wait(nxt, op="F1 (microbatch 1, chunk 0, stage 1)")
    return "returned"  # a hang that is not caught ends here only after the gloo timeout


def assert_oracles_ran_megatrons_own_linear(cases: list, per_rank: list) -> int:
    """Every oracle of cases_body's results (per_rank[rank][case]: megatron's own schedules on
    every rank, the reference on rank 0) ran megatron-core's own linear layers from start to
    end, not our hook. Returns how many oracle runs were checked."""
    checked = 0
    for i, case in enumerate(cases):
        for rank, results in enumerate(per_rank):
            res = results[i]
            assert "error" not in res, f"{case} rank {rank}: {res['error']}"
            seen = ([("megatron's schedule", res["oracle_linear"])] if case["schedule"] in MEGATRON_OWN else []) \
                + ([("the reference", res["ref_linear"])] if rank == 0 else [])
            for oracle, linear in seen:
                assert linear == [ref.MEGATRON_LINEAR] * 2, \
                    f"{case} rank {rank}: {oracle} ran with {linear} as megatron's linear, not {ref.MEGATRON_LINEAR}"
                checked += 1
    return checked


def cases_body(rank, world_case):
    """Run world_case['cases'] in order on the same process group; an exception
    in one case is returned as {'error': text} so the others still run."""
    out = []
    for case in world_case["cases"]:
        merged = {"num_layers": world_case.get("num_layers", 8), **case}
        try:
            out.append(one_step(rank, merged, world_case["pp"]))
        except Exception as exc:
            out.append({"error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"})
    return out


def times_four(x):
    """A picklable grad_scale_func (config hooks travel to spawned ranks)."""
    return x * 4.0


# -- tensor parallel: compare schedules with megatron's own 1F1B on the same tp x pp grid --------------

def init_by_global_name_(model, tp_rank: int, tp_size: int, seed: int = 7):
    """Same values for a parameter whatever its placement: drawn from its global
    name, then this tensor-parallel rank's shard is taken."""
    import zlib

    with torch.no_grad():
        for chunk in model:
            for name, p in ref.named_global_parameters(chunk):
                shape = list(p.shape)
                dim = getattr(p, "partition_dim", 0) if getattr(p, "tensor_model_parallel", False) else None
                if dim is not None:
                    shape[dim] *= tp_size
                gen = torch.Generator().manual_seed(seed + zlib.crc32(name.encode()))
                full = 0.02 * torch.randn(shape, generator=gen)
                if name.endswith("layer_norm_weight") or ("norm" in name and name.endswith("weight")):
                    full += 1.0
                p.copy_(full if dim is None else full.chunk(tp_size, dim=dim)[tp_rank])


def tp_body(rank, world_case):
    import primus_megatron as pm
    import primus_megatron.schedules  # noqa: F401
    from megatron.core import parallel_state

    tp, pp = world_case["tp"], world_case["pp"]
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    out = []
    for case in world_case["cases"]:
        m, sched = case["microbatches"], case["schedule"]
        overrides = dict(tensor_model_parallel_size=tp, **case.get("config", {}))
        batches = ref.make_microbatches(m, seed=1)
        oracle = contextlib.nullcontext()
        if sched == "megatron-1f1b":
            from megatron.core.pipeline_parallel import get_forward_backward_func

            model = ref.build_pipeline_chunks(world_case["num_layers"], **overrides)
            fbf = get_forward_backward_func()
            oracle = ref.megatron_own_linear()  # an oracle: megatron's own linear layers, not our hook
        else:
            chunks = pm.schedules.info(sched).chunks
            config = ref.tiny_gpt_config(world_case["num_layers"], pipeline_model_parallel_size=pp,
                                         virtual_pipeline_model_parallel_size=chunks if chunks > 1 else None,
                                         **overrides)
            model = pm.build_model(partial(_provider, config, False), schedule=sched)
            fbf = pm.get_forward_backward_func(sched, p2p_timeout_s=60)
        init_by_global_name_(model, tp_rank, tp)
        if case.get("fusion"):
            _attach_main_grad(model)
        with oracle as oracle_linear:
            store = fbf(forward_step_func=ref.make_forward_step_func(), data_iterator=iter(batches),
                        model=model if len(model) > 1 else model[0], num_microbatches=m, seq_length=ref.SEQ_LENGTH,
                        micro_batch_size=ref.MICRO_BATCH_SIZE)
        out.append({"tp_rank": tp_rank, "losses": ref.losses_from_store(store), "oracle_linear": oracle_linear,
                    "grads": _main_grads(model) if case.get("fusion") else ref.chunk_grads(model)})
    return out


def sp_linear_body(rank, world_case):
    """Sequence-parallel Column->Row linear pair: weight gradients deferred to
    after megatron's shared all-gather buffer was overwritten equal the
    undeferred ones (B keeps the input shard; W gathers it again)."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
    from megatron.core.parallel_state import get_global_memory_buffer

    from primus_megatron.runtime import linear_hooks
    from primus_megatron.runtime.wgrad_store import get_store

    linear_hooks.install()
    tp = parallel_state.get_tensor_model_parallel_world_size()
    config = ref.tiny_gpt_config(2, tensor_model_parallel_size=tp, sequence_parallel=True)
    torch.manual_seed(3)
    init = torch.nn.init.normal_
    col = ColumnParallelLinear(32, 64, config=config, init_method=init, bias=True, gather_output=False)
    row = RowParallelLinear(64, 32, config=config, init_method=init, bias=True, input_is_parallel=True,
                            skip_bias_add=False)
    x = torch.randn(8 // tp, 2, 32, generator=torch.Generator().manual_seed(11 + rank))
    params = list(col.parameters()) + list(row.parameters())

    def run(defer: bool):
        for p in params:
            p.grad = None
        store = get_store()
        with store.step(splitting=defer):  # decided at forward time, as in a step with W ops
            out, _ = row(col(x)[0])
        loss = out.square().sum()
        if defer:
            kept: list = []
            with store.capture("sp", held=kept):
                loss.backward()
            held = [tuple(t.shape) for t in kept]
            buf = get_global_memory_buffer().get_tensor([8, 2, 32], torch.float32, "mpu")
            buf.fill_(float("nan"))  # later ops reuse megatron's shared gather buffer
            deferred = store.pending("sp")
            store.run("sp")
        else:
            loss.backward()
            deferred, held = 0, []
        return [p.grad.clone() for p in params], deferred, held

    eager, _, _ = run(False)
    later, deferred, held = run(True)
    return {"eager": eager, "deferred": later, "count": deferred, "held": held, "shard": tuple(x.shape)}


def silent_rank_body(rank, world_case):
    """Rank 1 starts the step but stalls in its first forward: rank 0 must time
    out with a diagnosis, well before rank 1 would come back. Rank 1 comes back after
    world_case['silent_s'], or as soon as rank 0 has its answer (a key in the launch's store:
    the rest of the wait would be idle)."""
    import time

    import torch.distributed as dist

    store = dist.distributed_c10d._get_default_store()
    if rank == 1:
        def stalled(data_iterator, model):
            deadline = time.monotonic() + world_case["silent_s"]
            while time.monotonic() < deadline and not store.check(["silent/answered"]):
                time.sleep(0.05)
            raise RuntimeError("stalled rank gives up")

        case = dict(world_case["cases"][0], forward_step=stalled)
    else:
        case = world_case["cases"][0]
    started = time.time()
    try:
        one_step(rank, case, world_case["pp"])
    except Exception as exc:
        return {"error_type": type(exc).__name__, "message": str(exc), "elapsed": time.time() - started}
    finally:
        if rank == 0:
            store.set("silent/answered", "1")
    return {"error_type": None}


def train_body(rank, world_case):
    """Run examples/pretrain_gpt.py's train() for each argv in world_case['runs']
    on this process group (one start-up for several runs). `capture_log`: each result's "log"
    holds what the run printed on this rank (else "")."""
    import io

    import torch.distributed as dist

    from primus_megatron.train import pretrain
    from primus_megatron.train.arguments import parse_run

    if world_case.get("no_subprocesses"):
        # a rank that forks while gloo's threads run can deadlock (megatron's checkpoint writer did)
        import multiprocessing.process
        import os

        def refuse(*_a, **_k):
            raise AssertionError("a training rank started a subprocess")

        os.fork = refuse
        multiprocessing.process.BaseProcess.start = refuse
    if world_case.get("one_core"):  # every rank on the same single core: the ranks time-share it
        import os

        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    out = []
    for argv in world_case["runs"]:
        args, spec = parse_run(_with_data_cache(argv, world_case.get("data_cache")), world_size=dist.get_world_size())
        log = io.StringIO()
        # the result names the schedule that ran (auto's choice) and the costs it was planned from
        with contextlib.redirect_stdout(log) if world_case.get("capture_log") else contextlib.nullcontext():
            out.append(pretrain.train(args, spec,
                                      probe=pretrain.Probe(keep_params=world_case.get("return_params", False))))
        out[-1]["log"] = log.getvalue()  # with capture_log: what the run printed (rank 0 logs)
    return out


def _with_data_cache(argv: list, cache) -> list:
    """A mock-data run's argv with the launching process's index cache (`--data-cache-path`) unless it names
    one: megatron-core's MockGPTDataset indexes its whole mock corpus (about 2 million samples a split; its
    shuffle index was a third of a short run's CPU), the same indices for every run of the same seed, sequence
    length and sample counts. Built once (rank 0), loaded by every later run."""
    if cache is None or "--mock-data" not in argv or "--data-cache-path" in argv:
        return list(argv)
    return [*argv, "--data-cache-path", cache]


def memory_body(rank, world_case):
    """Per schedule: measured peak activation bytes of a profiled step and the
    simulator's prediction from the measured per-op memory."""
    import primus_megatron as pm
    import primus_megatron.schedules as S

    pp, m = world_case["pp"], world_case["microbatches"]
    out = {}
    for name in world_case["schedules"]:
        chunks = S.info(name).chunks
        config = ref.tiny_gpt_config(world_case["num_layers"], pipeline_model_parallel_size=pp,
                                     virtual_pipeline_model_parallel_size=chunks if chunks > 1 else None)
        model = pm.build_model(partial(_provider, config, False), schedule=name)
        runner = pm.get_forward_backward_func(name, profile_steps=(1, 2), p2p_timeout_s=60)
        batches = ref.make_microbatches(2 * m, seed=5)
        data = iter(batches)
        for _ in range(2):
            for c in model:
                c.zero_grad(set_to_none=True)
            runner(forward_step_func=ref.make_forward_step_func(), data_iterator=data,
                   model=model if len(model) > 1 else model[0], num_microbatches=m, seq_length=ref.SEQ_LENGTH,
                   micro_batch_size=ref.MICRO_BATCH_SIZE)
        costs, summary = runner.measured
        plan = runner.plan(pp, m)[0]
        predicted = S.simulate(plan, costs).peak_memory[rank] * summary["unit_bytes"]
        out[name] = {"measured": runner.last_step.peak_activation_bytes, "predicted": predicted,
                     "costs": costs}
    return out


def refused_setting_body(rank, world_case):
    """A megatron setting the engine does not honour, set on the model config:
    every rank refuses it on the first call, before any rank waits on another."""
    import primus_megatron as pm

    config = _config_for(2, {"config": {}, "num_layers": world_case["num_layers"]}, world_case["pp"])
    model = pm.build_model(partial(_provider, config, False), schedule=world_case["schedule"])
    setattr(config, world_case["field"], world_case["value"])
    return _call_expecting_refusal(rank, world_case, model)


def refused_call_body(rank, world_case):
    """One forward_backward call that must be refused on every rank before any waits:
    world_case['config'] set on the model config, world_case['call'] extra keywords (a
    pg_collection, a p2p_communicator: 'multi-module' or 'other-stages'), forward-only or not."""
    import primus_megatron as pm

    config = _config_for(1, {"config": {}, "num_layers": world_case["num_layers"]}, world_case["pp"])
    model = pm.build_model(partial(_provider, config, False), schedule=world_case["schedule"])
    for field, value in world_case.get("config", {}).items():
        setattr(config, field, value)
    if world_case.get("ddp_config"):  # what megatron's DDP (or Megatron-FSDP) wrapper carries
        from megatron.core.distributed import DistributedDataParallelConfig

        model[0].ddp_config = DistributedDataParallelConfig(**world_case["ddp_config"])
    call = {}
    what = world_case.get("call")
    if what == "multi-module":
        from megatron.core.process_groups_config import MultiModuleProcessGroupCollection, ProcessGroupCollection

        call["pg_collection"] = MultiModuleProcessGroupCollection(
            module_pgs={"llm": ProcessGroupCollection.use_mpu_process_groups()}, language_model_module_name="llm")
    elif what == "other-stages":
        class OtherStages:  # what a communicator of another (e.g. multi-module) pipeline answers
            total_stages, current_stage = 3, 2

        call["p2p_communicator"] = OtherStages()
    return _call_expecting_refusal(rank, world_case, model, forward_only=world_case.get("forward_only", False), **call)


def _call_expecting_refusal(rank, world_case, model, **call):
    """One forward_backward call, rank 1 late by world_case['late_s']: the refusal's message
    and how long the rank took to refuse (None if the call ran). Rank 1 starts once rank 0's call
    has returned (a key in the launch's store), or after late_s if it has not: a rank 0 that waits
    for rank 1 waits late_s; one that does not frees rank 1 at once (no idle late_s)."""
    import time

    import torch.distributed as dist

    import primus_megatron as pm
    from primus_megatron.runtime.forward_backward import UnsupportedSetting

    store = dist.distributed_c10d._get_default_store()
    fbf = pm.get_forward_backward_func(world_case["schedule"], p2p_timeout_s=60)
    if rank == 1:  # rank 0 must not be waiting for this one
        deadline = time.monotonic() + world_case.get("late_s", 0)
        while time.monotonic() < deadline and not store.check(["refusal/rank0-returned"]):
            time.sleep(0.05)
    started = time.time()
    try:
        fbf(forward_step_func=ref.make_forward_step_func(), data_iterator=iter(ref.make_microbatches(4)),
            model=model, num_microbatches=4, seq_length=ref.SEQ_LENGTH, micro_batch_size=ref.MICRO_BATCH_SIZE,
            **call)
    except UnsupportedSetting as exc:
        return {"message": str(exc), "elapsed": time.time() - started}
    finally:
        if rank == 0:
            store.set("refusal/rank0-returned", "1")
    return {"message": None}


def communicator_body(rank, world_case):
    """A training step given megatron's own P2PCommunicator of the pipeline group (megatron-core
    0.19's answers stage questions from it): runs, losses as without one."""
    import primus_megatron as pm
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel.p2p_communication import P2PCommunicator

    out = {}
    for with_communicator in (False, True):
        config = _config_for(1, {"config": {}, "num_layers": world_case["num_layers"]}, world_case["pp"])
        model = pm.build_model(partial(_provider, config, False), schedule=world_case["schedule"])
        torch.manual_seed(0)
        for p in model[0].parameters():
            torch.nn.init.normal_(p, std=0.05) if p.dim() > 1 else torch.nn.init.zeros_(p)
        call = {}
        if with_communicator:
            comm = P2PCommunicator(parallel_state.get_pipeline_model_parallel_group(), config)
            call["p2p_communicator"] = comm
            out["stages"] = (getattr(comm, "total_stages", None), getattr(comm, "current_stage", None))
        fbf = pm.get_forward_backward_func(world_case["schedule"], p2p_timeout_s=60)
        store = fbf(forward_step_func=ref.make_forward_step_func(), data_iterator=iter(ref.make_microbatches(4)),
                    model=model, num_microbatches=4, seq_length=ref.SEQ_LENGTH,
                    micro_batch_size=ref.MICRO_BATCH_SIZE, **call)
        out["with" if with_communicator else "without"] = ref.losses_from_store(store)
        out["deferred"] = fbf.last_step.wgrads_deferred
    return out


def replica_plans_body(rank, world_case):
    """DP=2 x PP=2: (1) zb-auto profiled while data-parallel replica 1 measures forward ops 4x slower
    than replica 0 (each pipeline gathers its own measurements): the plan each rank re-planned and the
    costs it planned from; (2) replica 1 given another schedule than replica 0: what the first step says."""
    import primus_megatron as pm
    import primus_megatron.schedules as S
    from megatron.core import parallel_state
    from primus_megatron.runtime import profiler
    from primus_megatron.runtime.planner import ScheduleMismatch, schedule_fingerprint

    pp, m = world_case["pp"], world_case["microbatches"]
    dp_rank = parallel_state.get_data_parallel_rank()
    if dp_rank == 1:
        summary = profiler.Profile.summary

        def slower_forward(self):
            out = summary(self)
            out["durations"] = {k: v * (4.0 if k[0] == S.F else 1.0) for k, v in out["durations"].items()}
            return out

        profiler.Profile.summary = slower_forward
    config = ref.tiny_gpt_config(world_case["num_layers"], pipeline_model_parallel_size=pp)
    model = pm.build_model(partial(_provider, config, False), schedule="zb-auto")
    runner = pm.get_forward_backward_func("zb-auto", profile_steps=(1, 2), p2p_timeout_s=60)
    batches = iter(ref.make_microbatches(3 * m, seed=5))
    for _ in range(3):
        runner(forward_step_func=ref.make_forward_step_func(), data_iterator=batches, model=model[0],
               num_microbatches=m, seq_length=ref.SEQ_LENGTH, micro_batch_size=ref.MICRO_BATCH_SIZE)
    out = {"dp_rank": dp_rank, "fingerprint": schedule_fingerprint(runner.plan(pp, m)[0]),
           "costs": runner.measured[0]}
    other = pm.get_forward_backward_func("zb-h1" if dp_rank == 0 else "zb-h2", p2p_timeout_s=60)
    try:
        other(forward_step_func=ref.make_forward_step_func(), data_iterator=iter(ref.make_microbatches(m, seed=6)),
              model=model[0], num_microbatches=m, seq_length=ref.SEQ_LENGTH, micro_batch_size=ref.MICRO_BATCH_SIZE)
        out["mismatch"] = None
    except ScheduleMismatch as exc:
        out["mismatch"] = str(exc)
    return out


def replica_counts_body(rank, world_case):
    """DP=2 x PP=2 with `balance_data`: (1) replica 0 runs 3 microbatches a step and replica 1 runs 5;
    (2) replica 1 runs zb-h2 where replica 0 runs zb-h1; (3) replica 1's pipeline ranks disagree on
    the count. What each step says (None, or the ScheduleMismatch)."""
    import primus_megatron as pm
    from megatron.core import parallel_state
    from primus_megatron.runtime.planner import ScheduleMismatch

    pp = world_case["pp"]
    dp_rank, pp_rank = parallel_state.get_data_parallel_rank(), parallel_state.get_pipeline_model_parallel_rank()
    config = ref.tiny_gpt_config(world_case["num_layers"], pipeline_model_parallel_size=pp,
                                 calculate_per_token_loss=True)
    model = pm.build_model(partial(_provider, config, False), schedule="zb-h1")

    def step(name: str, m: int):
        runner = pm.get_forward_backward_func(name, p2p_timeout_s=60, balance_data="lb-mini")
        try:
            store = runner(forward_step_func=ref.make_forward_step_func(),
                           data_iterator=iter(ref.make_microbatches(m, seed=7 + dp_rank)), model=model[0],
                           num_microbatches=m, seq_length=ref.SEQ_LENGTH, micro_batch_size=ref.MICRO_BATCH_SIZE)
            return len(store)
        except ScheduleMismatch as exc:
            return str(exc)

    return {"dp_rank": dp_rank, "pp_rank": pp_rank,
            "own_counts": step("zb-h1", 3 if dp_rank == 0 else 5),
            "other_schedule": step("zb-h1" if dp_rank == 0 else "zb-h2", 4),
            "pipeline_disagrees": step("zb-h1", 4 if dp_rank == 0 or pp_rank == 0 else 5)}


def recv_stall_body(rank, world_case):
    """ROCm's receive stall on emulated ops (emulation/chunks.py `TimedWaits`): rank 0 posts a
    receive on its strict queue and runs two emulated waits, one with the stall factor and one
    without; rank 1 sends only after a barrier that rank 0 reaches after those waits, so the
    receive is pending during them whatever the ranks' speeds. Once it has completed, rank 0
    runs the stalled kind of wait again. Returns each wait's (kind, seconds charged), per object."""
    import torch.distributed as dist

    from primus_megatron.emulation.chunks import OpLog, StageTimes, TimedWaits
    from primus_megatron.runtime import strict_p2p

    group = dist.new_group([0, 1])
    queue = strict_p2p.queue_for(group)
    if rank == 1:
        dist.barrier()
        queue.submit([strict_p2p.Entry(True, torch.ones(2), 0, "send to rank 0")]).wait(timedelta(seconds=60))
        return {}

    class Emulated(TimedWaits):
        def __init__(self, stall: float) -> None:
            self.times = StageTimes(f=0.01, b=0.01, w=0.01, bw=0.02, recv_stall=stall)
            self.log = OpLog()

    stalled, plain = Emulated(world_case["stall"]), Emulated(1.0)
    got = queue.submit([strict_p2p.Entry(False, torch.zeros(2), 1, "receive from rank 1")])
    pending = strict_p2p.pending_receives()
    stalled._work(0.01, "F")
    plain._work(0.01, "F")
    dist.barrier()
    got.wait(timedelta(seconds=60))
    after = strict_p2p.pending_receives()
    stalled._work(0.01, "B")
    return {"pending": pending, "after": after, "stalled": stalled.log.requested, "plain": plain.log.requested,
            "count": stalled.log.stalled}
