"""The GPU check: one command (`make gpu-check`) that tells whether this machine runs every
schedule, and how well, before a cluster job does.

    python benchmarks/gpu_check.py                      # on a GPU machine: the full check
    python benchmarks/gpu_check.py --cpu-dry-run        # gloo, 2 ranks, a small subset (the test suite's)

Writes out/gpu_check/report.md and report.json:

1. environment: torch and its CUDA/HIP, NCCL/RCCL, the GPUs (name, capability, bf16,
   FP8), TransformerEngine (version; delayed weight gradients) and apex;
2. matrix: every registered schedule x pp 2..#GPUs x communicator init (eager:
   `init_process_group(device_id=...)`; lazy: without) x environment (shipped: the sbatch's queue and
   stream settings, on ROCm GPU_MAX_HW_QUEUES=2 with high-priority RCCL streams; unset: none) runs two
   training steps of a small
   megatron-core GPT (fp32, local spec), each configuration in its own torchrun under a time
   limit and our p2p watchdog, with PyTorch's NCCL flight recorder on (its dump on a time-out
   goes to the configuration's folder) and every rank's Python stack dumped on a hang; per
   configuration: whether it ran, bitwise equality of losses and every gradient with
   megatron's own 1F1B (interleaved for interleaved schedules) on the same weights and data,
   iteration time and peak memory against it;
3. Megatron-LM's pretrain_gpt.py (the matching tag, patched as a user patches it) with
   TransformerEngine layers in bf16, and FP8 where the GPU has it, for every schedule and for
   megatron's own 1F1B: finished or not, losses equal to megatron's 1F1B, iteration time,
   tokens/s and peak memory from Megatron-LM's own log lines.

On CPU (`--cpu-dry-run`) the same code runs with gloo: the matrix in one process group of
forked ranks (runtime/local_ranks.py), eager and lazy init as the strict p2p mode's two
variants (strict, strict-lazy), no flight recorder; Megatron-LM's part only with
`--megatron-lm` (local layers, fp32).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import signal
import sys
import tempfile
import time
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
MODEL = dict(num_layers=8, hidden=256, heads=4, seq=256, mbs=2, vocab=1024)
DRY_MODEL = dict(num_layers=4, hidden=32, heads=4, seq=32, mbs=2, vocab=128)
DRY_SCHEDULES = ("1f1b", "zbv")
CONFIG_TIMEOUT_S = 300  # one matrix configuration (start-up, two steps, the reference)
P2P_TIMEOUT_S = 120  # our watchdog names a hang well before the configuration's limit


# -- 1. environment -----------------------------------------------------------------------------

def environment() -> dict:
    import importlib.metadata as md

    import torch

    env: dict = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
                 "hip": getattr(torch.version, "hip", None), "gpus": []}
    try:
        env["megatron_core"] = md.version("megatron-core")
    except md.PackageNotFoundError:
        env["megatron_core"] = None
    if torch.cuda.is_available():
        try:  # torch.cuda.nccl.version(): NCCL's, or RCCL's on ROCm builds
            env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as exc:  # noqa: BLE001 (a report, not a check)
            env["nccl"] = f"unavailable ({type(exc).__name__})"
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            cap = torch.cuda.get_device_capability(i)
            # gcnArchName is AMD's gfx name on ROCm builds; CUDA builds (torch 2.11 on an H200) fill it
            # with the device's name, which says nothing of FP8
            arch = getattr(props, "gcnArchName", "") if torch.version.hip else ""
            env["gpus"].append({"name": props.name, "capability": f"{cap[0]}.{cap[1]}", "arch": arch,
                                "memory_gib": round(props.total_memory / 2**30, 1),
                                "bf16": torch.cuda.is_bf16_supported(), "fp8": _has_fp8(cap, arch)})
    env["transformer_engine"] = _transformer_engine()
    try:
        env["apex"] = md.version("apex")
    except md.PackageNotFoundError:
        env["apex"] = None
    if env["apex"]:
        import importlib.util

        env["apex_fused"] = {m: importlib.util.find_spec(m) is not None
                             for m in ("fused_layer_norm_cuda", "fused_weight_gradient_mlp_cuda", "amp_C")}
    return env


def _has_fp8(cap: tuple, arch: str) -> bool:
    """FP8 GEMMs: NVIDIA compute capability 8.9 (Ada) and 9.0+ (Hopper, Blackwell: TransformerEngine's
    FP8 support check); AMD MI300 (gfx942, the FNUZ formats) and MI350 (gfx950, the OCP formats), the
    targets with FP8 in the ROCm docs' "Precision support" table."""
    if arch:
        return arch.split(":")[0] in ("gfx942", "gfx950")
    return tuple(cap) >= (8, 9)


def _transformer_engine() -> Optional[dict]:
    try:
        import transformer_engine  # noqa: F401
        import transformer_engine.pytorch as te
    except Exception as exc:  # noqa: BLE001 (absent, or a build that does not load here)
        return None if isinstance(exc, ImportError) else {"error": f"{type(exc).__name__}: {exc}"[:200]}
    info = {"version": getattr(transformer_engine, "__version__", "?")}
    try:
        from transformer_engine.pytorch.module import _common

        info["weight_grad_store"] = hasattr(_common, "WeightGradStore")  # delay_wgrad_compute (TE >= 2.3)
    except ImportError:
        info["weight_grad_store"] = False
    try:
        available, reason = te.fp8.check_fp8_support()
        info["fp8"] = bool(available)
        info["fp8_reason"] = reason or ""
    except Exception:  # noqa: BLE001
        info["fp8"] = None
    return info


def no_gpu_sentence(torch_module, rocm_node: Optional[bool] = None) -> str:
    """Why torch sees no GPU, in one sentence: on a ROCm node (/dev/kfd) a torch built without ROCm (PyPI's
    default wheel, which `make setup` installs, is CUDA's) is the usual cause (issue 45 item 2)."""
    if rocm_node is None:
        rocm_node = os.path.exists("/dev/kfd")
    if rocm_node and not getattr(torch_module.version, "hip", None):
        return (f"this is a ROCm node but {sys.executable} has torch {torch_module.__version__} built without ROCm: "
                f"run the check with a ROCm build (the ROCm image's python, with PYTHONPATH set to this checkout)")
    return "no GPU is visible to torch (use --cpu-dry-run to exercise the check on CPU)"


# -- 2. the schedule matrix -------------------------------------------------------------------

def shipped_env(rocm: bool, arch: str = "") -> dict:
    """The queue and stream settings examples/slurm/pretrain_gpt.sbatch exports on a GPU node (section 5;
    tests/test_gpu_check.py holds the two equal): both vendors, then ROCm's (AMD's recommended queue pair,
    scratch reclaim off on gfx942/gfx950; HSA_ENABLE_SDMA left at ROCm's default)."""
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "TORCH_NCCL_HIGH_PRIORITY": "1"}
    if rocm:
        env.update(GPU_MAX_HW_QUEUES="2", HSA_FORCE_FINE_GRAIN_PCIE="1", RCCL_MSCCL_ENABLE="0")
        if arch.startswith(("gfx942", "gfx950")):
            env["HSA_NO_SCRATCH_RECLAIM"] = "1"
    return env


# every variable a configuration may set: removed from the inherited environment first ("unset" runs without)
KNOB_VARIABLES = ("CUDA_DEVICE_MAX_CONNECTIONS", "GPU_MAX_HW_QUEUES", "TORCH_NCCL_HIGH_PRIORITY",
                  "HSA_FORCE_FINE_GRAIN_PCIE", "RCCL_MSCCL_ENABLE", "HSA_NO_SCRATCH_RECLAIM", "HSA_ENABLE_SDMA")


def effective_env(env: dict) -> dict:
    """Every variable of KNOB_VARIABLES as a run with `env` has it: its value, or None (unset: the
    runtime's default, e.g. ROCm's HSA_ENABLE_SDMA=1), recorded per row of the report."""
    return {name: env.get(name) for name in KNOB_VARIABLES}


def inherited_knobs(environ=None) -> dict:
    """What the caller's environment set of KNOB_VARIABLES: removed for every run, each of which
    sets exactly its own (reported, so that a run is never read as having had them)."""
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in KNOB_VARIABLES if name in environ}


@contextlib.contextmanager
def knob_environment(env: dict):
    """os.environ with exactly `env` of KNOB_VARIABLES for the duration (for Megatron-LM's part, whose
    launcher hands os.environ to its ranks)."""
    saved = inherited_knobs()
    for name in KNOB_VARIABLES:
        os.environ.pop(name, None)
    os.environ.update(env)
    try:
        yield
    finally:
        for name in KNOB_VARIABLES:
            os.environ.pop(name, None)
        os.environ.update(saved)


def configurations(schedules: list, pps: list, *, rocm: bool, gpu: bool, inits: tuple = ("eager", "lazy"),
                   knobs: tuple = ("shipped", "unset"), arch: str = "") -> list:
    """knobs: "shipped" (the sbatch's environment), "1" (only the queue knob at 1: CUDA_DEVICE_MAX_CONNECTIONS,
    GPU_MAX_HW_QUEUES on ROCm), "unset" (none of KNOB_VARIABLES)."""
    knob = "GPU_MAX_HW_QUEUES" if rocm else "CUDA_DEVICE_MAX_CONNECTIONS"
    by_name = {"shipped": shipped_env(rocm, arch), "1": {knob: "1"}, "unset": {}}
    settings = [by_name[v] for v in knobs] if gpu else [{}]  # CPU: the knobs mean nothing
    out = []
    for name in schedules:
        for pp in pps:
            for init in inits:
                for env in settings:
                    out.append({"schedule": name, "pp": pp, "init": init, "env": env,
                                "env_effective": effective_env(env)})
    return out


def _grads(model) -> dict:
    from primus_megatron.runtime.placement import named_global_parameters

    out = {}
    for chunk in model:
        for name, p in named_global_parameters(chunk):
            g = getattr(p, "main_grad", None) if getattr(p, "grad", None) is None else p.grad
            if g is not None:
                out[name] = g.detach().float().cpu()
    return out


def _losses(store) -> list:
    return [float(v) for entry in store for key, t in entry.items() if key == "lm loss"
            for v in t.detach().float().cpu().view(-1)[:1].tolist()]


def matrix_body(rank: int, world_case: dict) -> list:
    """Run world_case['configs'] (all of the same pp) on this rank; per configuration a dict
    (rank 0's has the comparison)."""
    return [_one_config(rank, world_case, c) for c in world_case["configs"]]


def _one_config(rank: int, world_case: dict, config: dict) -> dict:
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.pipeline_parallel import get_forward_backward_func as megatron_fbf

    import primus_megatron as pm
    from primus_megatron import schedules as S
    import runtime_throughput as RT

    model_cfg, pp = world_case["model"], config["pp"]
    m = world_case.get("microbatches") or 2 * pp  # a multiple of pp: megatron's interleaved schedule wants one
    gpu = world_case["gpu"]
    device = torch.device("cuda", torch.cuda.current_device()) if gpu else torch.device("cpu")
    name = config["schedule"]
    entry = S.info(name)
    batches = [{k: v.to(device) for k, v in b.items()} for b in RT.make_batches(model_cfg, m)]
    kw = dict(forward_step_func=RT.forward_step, seq_length=model_cfg["seq"], micro_batch_size=model_cfg["mbs"],
              decoder_seq_length=model_cfg["seq"], num_microbatches=m)
    result: dict = {**config, "ok": False}
    timer = _IterationTimer(device)

    def run(fbf, model):
        for chunk in model:
            chunk.zero_grad(set_to_none=True)
        # one iterator per chunk (megatron's interleaved schedule takes them so; each chunk reads
        # its microbatches in order)
        data = [iter(batches) for _ in model] if len(model) > 1 else iter(batches)
        dist.barrier()
        with timer:
            store = fbf(data_iterator=data, model=model if len(model) > 1 else model[0], **kw)
        return store

    try:
        interleaved = entry.chunks > 1 and entry.placement == S.LOOP
        ours = [c.to(device) for c in RT.build(model_cfg, name, pp)]
        fbf = pm.get_forward_backward_func(name, p2p_timeout_s=world_case["p2p_timeout_s"], losses_on_last_rank=True,
                                           p2p_mode="strict-lazy" if config["init"] == "lazy" else "strict")
        if gpu:
            torch.cuda.reset_peak_memory_stats()
        for _ in range(world_case["steps"]):
            store = run(fbf, ours)
        result["ok"] = True
        result["seconds"] = timer.last
        result["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30 if gpu else None
        mine = (_losses(store), _grads(ours))
        if config["init"] == "eager":  # the other receive policy's step time (issue 60), eager init only
            result.update(_just_in_time(world_case, name, mine, lambda f: run(f, ours), lambda: _grads(ours), timer))
        reference = "megatron-interleaved" if interleaved else "megatron-1f1b"
        if interleaved:  # megatron's interleaved schedule and its chunks read the chunk count from here
            ps.set_virtual_pipeline_model_parallel_world_size(entry.chunks)
        theirs_model = [c.to(device) for c in RT.build(model_cfg, "interleaved-1f1b" if interleaved else "1f1b", pp)]
        if interleaved:  # its p2p as Megatron-LM sets it (overlapped, unbatched): batched, at pp=2 a rank's
            # receives from its one neighbour (previous and next) share a batch and can swap
            theirs_model[0].config.overlap_p2p_comm, theirs_model[0].config.batch_p2p_comm = True, False
            if not gpu:  # with overlapped p2p it frees a sent output's storage while gloo (no stream to
                # record it on, unlike NCCL) may still be sending it
                theirs_model[0].config.deallocate_pipeline_outputs = False
        if gpu:
            torch.cuda.reset_peak_memory_stats()
        store = run(megatron_fbf(), theirs_model)
        result["reference"] = reference
        result["reference_seconds"] = timer.last
        result["reference_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30 if gpu else None
        theirs = (_losses(store), _grads(theirs_model))
        gathered: list = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, (mine, theirs))
        if rank == 0:
            result.update(_compare(gathered))
        result["tokens_per_s"] = m * model_cfg["mbs"] * model_cfg["seq"] / result["seconds"]
        result["reference_tokens_per_s"] = m * model_cfg["mbs"] * model_cfg["seq"] / result["reference_seconds"]
    except Exception as exc:  # noqa: BLE001 (reported per configuration; a hang is the watchdog's)
        import traceback

        where = traceback.extract_tb(exc.__traceback__)[-1]
        result["error"] = (f"{type(exc).__name__}: {str(exc)[:600]} (at {os.path.basename(where.filename)}:"
                           f"{where.lineno})")
        result["traceback"] = traceback.format_exc()[-4000:]
    finally:
        ps.set_virtual_pipeline_model_parallel_world_size(None)
    return result


def _just_in_time(world_case: dict, name: str, early: tuple, step, grads, timer) -> dict:
    """Our schedule again with its receives posted just in time (`--pipeline-recv-policy`; on ROCm a
    pending receive stalls compute, PyTorch #172668): its last step's time, and whether every rank's
    losses and gradients equal the early policy's bitwise (only where p2p is posted differs)."""
    import torch
    import torch.distributed as dist

    import primus_megatron as pm

    fbf = pm.get_forward_backward_func(name, p2p_timeout_s=world_case["p2p_timeout_s"], losses_on_last_rank=True,
                                       p2p_mode="strict", recv_policy="just-in-time")
    for _ in range(world_case["steps"]):
        store = step(fbf)
    seconds = timer.last
    mine = (_losses(store), grads())
    same = mine[0] == early[0] and mine[1].keys() == early[1].keys() and all(
        torch.equal(mine[1][k], early[1][k]) for k in mine[1])
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, same)
    return {"just_in_time_seconds": seconds, "just_in_time_bitwise": all(everyone)}


def _compare(gathered: list) -> dict:
    """Bitwise equality of losses (in order) and of every gradient by global name."""
    import torch

    ours_l = [x for (mine, _) in gathered for x in mine[0]]
    ref_l = [x for (_, theirs) in gathered for x in theirs[0]]
    ours_g, ref_g = {}, {}
    for mine, theirs in gathered:
        for into, grads in ((ours_g, mine[1]), (ref_g, theirs[1])):
            for k, g in grads.items():
                into[k] = into[k] + g if k in into else g
    names = sorted(set(ours_g) | set(ref_g))
    worst = max((float((ours_g[k] - ref_g[k]).abs().max()) for k in names if k in ours_g and k in ref_g),
                default=0.0)
    return {"losses_bitwise": ours_l == ref_l and bool(ours_l),
            "loss_max_diff": max((abs(a - b) for a, b in zip(ours_l, ref_l)), default=None),
            "grads_bitwise": set(ours_g) == set(ref_g) and all(torch.equal(ours_g[k], ref_g[k]) for k in names),
            "grad_max_diff": worst, "grads_compared": len(names)}


class _IterationTimer:
    """One iteration's time on this rank: CUDA/HIP events on the current stream on a GPU (host
    time would be launch time), the host's clock on CPU (runtime/profiler.clock_for); the
    caller's barrier lines the ranks up before it starts."""

    def __init__(self, device) -> None:
        from primus_megatron.runtime.profiler import clock_for

        self.clock = clock_for(device)
        self.last = None

    def __enter__(self):
        self._start = self.clock.mark()
        return self

    def __exit__(self, *exc) -> None:
        end = self.clock.mark()
        self.last = self.clock.elapsed(self._start, end)


# -- running the matrix -------------------------------------------------------------------------

def run_matrix_cpu(configs: list, opts: dict) -> list:
    """The dry run: every configuration of one pp in one process group of forked gloo ranks."""
    from primus_megatron.runtime import local_ranks

    out = []
    for pp in sorted({c["pp"] for c in configs}):
        mine = [c for c in configs if c["pp"] == pp]
        case = {**opts, "pp": pp, "configs": mine, "gpu": False}
        per_rank = local_ranks.run_ranks(matrix_body, case, pp, timeout_s=opts["config_timeout_s"] * len(mine))
        out += per_rank[0]
    return out


def run_matrix_gpu(configs: list, opts: dict, folder: str, *, gpus: int, deadline: float) -> list:
    """The configurations that share pp, init and knobs run in one launch (the knobs and the init
    are read when CUDA and NCCL start; each configuration builds its own model). A launch that
    makes no progress for config_timeout_s (its start-up: startup_timeout_s where given) is a hang:
    every rank's stack is dumped, the launch is killed, the configuration it ran is reported hung
    and the rest start again in a new launch.
    With fewer GPUs than pp the ranks share them (rank_launch.py); configurations not begun by
    `deadline` (monotonic) are reported as not run."""
    groups: dict = {}
    for config in configs:
        groups.setdefault((config["pp"], config["init"], tuple(sorted(config["env"].items()))), []).append(config)
    # the knobs' first value and the smallest pipelines first: what a deadline cuts matters least
    knob_order = {tuple(sorted(c["env"].items())): i for i, c in reversed(list(enumerate(configs)))}
    order = sorted(groups, key=lambda key: (knob_order[key[2]], key[0], key[1] != "eager"))
    out = []
    for (pp, init, env_items), todo in ((key, groups[key]) for key in order):
        attempt = 0
        while todo:
            if time.monotonic() > deadline:
                out += [{**c, "ok": False, "error": "not run: the check's --deadline-min passed"} for c in todo]
                break
            attempt += 1
            tag = f"pp{pp}-{init}-" + ("-".join(f"{k}{v}" for k, v in env_items) or "default") + f"-{attempt}"
            done, failure = _launch_group(todo, opts, os.path.join(folder, tag), gpus=gpus)
            out += done
            todo = todo[len(done):]
            if failure is not None:  # the configuration the launch was running when it ended
                out.append({**todo[0], "ok": False, "error": failure, "folder": os.path.join(folder, tag)})
                todo = todo[1:]
    return out


def _launch_group(configs: list, opts: dict, where: str, *, gpus: int) -> tuple[list, Optional[str]]:
    """(results of the configurations finished, in order; None, or why the launch ended early)."""
    os.makedirs(where, exist_ok=True)
    case_file, progress = os.path.join(where, "case.json"), os.path.join(where, "progress.jsonl")
    with open(case_file, "w") as f:
        json.dump({**opts, "configs": configs, "gpu": not opts.get("launch_on_cpu"), "progress": progress}, f)
    open(progress, "w").close()
    first = configs[0]
    env = {k: v for k, v in os.environ.items() if k not in KNOB_VARIABLES}
    env.update(first["env"])
    env.update(flight_recorder_env(where))
    env["PYTHONPATH"] = os.pathsep.join([ROOT, HERE, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    import rank_launch

    shared = first["pp"] > gpus
    launch = rank_launch.Launch([os.path.abspath(__file__), "--worker", case_file], env, ROOT, first["pp"],
                                os.path.join(where, "log.txt"), shared=shared, gpus=gpus)
    last = time.monotonic()
    seen = 0
    while True:
        code = launch.poll()
        size = os.path.getsize(progress)
        if size != seen:
            seen, last = size, time.monotonic()
        if code is not None:
            break
        # a launch's start-up (imports, the process group) until rank 0's first progress has a limit of its own
        limit = opts["config_timeout_s"] if seen else opts.get("startup_timeout_s") or opts["config_timeout_s"]
        if time.monotonic() - last > limit:
            launch.stop_with_stacks()
            code = None
            break
        time.sleep(0.5)
    done = []
    with open(progress) as f:
        for line in f:
            record = json.loads(line)
            if "result" in record:
                done.append({**record["result"], "shared_gpu": shared, "folder": where})
    if len(done) == len(configs) and code == 0:
        return done, None
    if code is None:
        why = (f"hung: no progress for {limit:g} s{'' if seen else ' since its ranks started'}, killed (every "
               f"rank's stack in {', '.join(os.path.basename(p) for p in launch.logs)}, the NCCL flight recorder's "
               f"dump in {where})")
    else:
        why = f"the launch exited with status {code}: {_last_error(launch.output())} (logs: {', '.join(launch.logs)})"
    return done, why


def _last_error(log: str) -> str:
    ours = [ln.split(": ", 1)[1] for ln in log.splitlines() if ln.startswith("gpu_check worker rank")]
    if ours:
        return ours[0][:400]
    lines = [ln.strip() for ln in log.splitlines() if "Error" in ln or "error" in ln]
    return lines[-1][:300] if lines else "no error line in its log"


def flight_recorder_env(folder: str) -> dict:
    """PyTorch's NCCL flight recorder on, dumped on a time-out, and our hang reports, into `folder`.
    Names as torch 2.13 reads them (libtorch: TORCH_FR_BUFFER_SIZE with TORCH_NCCL_TRACE_BUFFER_SIZE
    as the older name; TORCH_FR_DUMP_TEMP_FILE / TORCH_NCCL_DEBUG_INFO_TEMP_FILE the dump's path
    prefix, one file per rank; ProcessGroupNCCL: TORCH_NCCL_DUMP_ON_TIMEOUT, and
    TORCH_NCCL_ASYNC_ERROR_HANDLING=3 tears the process down after a time-out)."""
    prefix = os.path.join(folder, "nccl_trace_rank_")
    return {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
            "TORCH_FR_DUMP_TEMP_FILE": prefix, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix,
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
            "PRIMUS_HANG_REPORT_DIR": folder, "PYTHONFAULTHANDLER": "1"}


def worker(case_file: str) -> int:
    """One rank of one launch of GPU configurations (torchrun's, or a one-GPU node's variables:
    rank_launch.py). Rank 0 appends each configuration's result to the launch's progress file."""
    import faulthandler

    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    faulthandler.register(signal.SIGUSR1, all_threads=True)
    with open(case_file) as f:
        case = json.load(f)
    local = int(os.environ["LOCAL_RANK"])
    config = case["configs"][0]
    timeout = datetime.timedelta(seconds=case["p2p_timeout_s"] * 2)
    if not case["gpu"]:  # --launch-on-cpu: this launch path with gloo (the test suite's)
        from primus_megatron.compat import cpu

        cpu.enable()
        dist.init_process_group("gloo", timeout=timeout)
    elif config["init"] == "eager":  # communicators made now; p2p of a group then runs on one stream
        dist.init_process_group("nccl", device_id=torch.device("cuda", local), timeout=timeout)
    else:  # lazy: a two-rank communicator at each pair's first p2p
        dist.init_process_group("nccl", timeout=timeout)
    if case["gpu"]:  # the groups megatron makes next take the current device
        torch.cuda.set_device(local)
    ps.initialize_model_parallel(1, config["pp"])
    if case["gpu"]:  # megatron's layers fork its CUDA RNG tracker (pretrain_gpt seeds it so at start-up)
        from megatron.core import tensor_parallel

        tensor_parallel.model_parallel_cuda_manual_seed(1234)
    rank = dist.get_rank()
    for c in case["configs"]:
        if rank == 0:  # progress: the launcher tells a slow configuration from a hung one by it
            with open(case["progress"], "a") as f:
                f.write(json.dumps({"start": c["schedule"]}) + "\n")
        if os.environ.get("PRIMUS_GPU_CHECK_HANG") == c["schedule"] and rank == dist.get_world_size() - 1:
            time.sleep(3600)  # the tests' fault: this rank never joins the configuration
        result = _one_config(rank, case, c)
        if result.get("error"):  # a rank that failed leaves its peers mid-schedule: end the launch, the
            # launcher reports this configuration from this line and starts the rest anew
            print(f"gpu_check worker rank {rank}: configuration {c['schedule']} failed: {result['error']}\n"
                  f"{result.get('traceback', '')}", file=sys.stderr, flush=True)
            os._exit(3)
        if rank == 0:
            with open(case["progress"], "a") as f:
                f.write(json.dumps({"result": result}, default=str) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0


# -- 3. Megatron-LM's pretrain_gpt.py -----------------------------------------------------------

def run_megatron_lm(schedules: list, *, gpu: bool, fp8: bool, nproc: int, iters: int, workdir: str, gpus: int = 0,
                    te: bool = True, deadline: float = float("inf"), env: Optional[dict] = None) -> list:
    """pretrain_gpt.py under megatron's 1F1B and each schedule: TransformerEngine layers in bf16
    (and FP8 with `fp8`) where TransformerEngine is installed, else Megatron's local layers in
    bf16; on fewer GPUs than `nproc` the ranks share them (rank_launch.py). Runs not begun by
    `deadline` (monotonic) are reported as not run. `env`: the queue and stream variables every run
    has (KNOB_VARIABLES; the sbatch's shipped set on a GPU), recorded in each row."""
    with knob_environment(env or {}):
        rows = _megatron_lm_runs(schedules, gpu=gpu, fp8=fp8, nproc=nproc, iters=iters, workdir=workdir, gpus=gpus,
                                 te=te, deadline=deadline)
    return [{**row, "env": dict(env or {}), "env_effective": effective_env(env or {})} for row in rows]


def _megatron_lm_runs(schedules: list, *, gpu: bool, fp8: bool, nproc: int, iters: int, workdir: str, gpus: int,
                      te: bool, deadline: float) -> list:
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import megatron_lm_harness as MLM

    tree = MLM.prepare(workdir)
    launcher = ("nodes" if nproc > gpus else "torchrun") if gpu else None
    layers = ["--transformer-impl", "transformer_engine" if te else "local", "--bf16", *_absent_kernels(te)] if gpu \
        else []
    precisions = ([("bf16", [])] + ([("fp8", ["--fp8-format", "hybrid"])] if fp8 and te else [])
                  if gpu else [("fp32", [])])
    base = ["--pipeline-model-parallel-size", str(nproc), "--global-batch-size", str(4 * nproc),
            "--eval-interval", str(iters + 1), *layers]
    base += ["--train-iters", str(iters)]
    from primus_megatron import schedules as S

    if any(S.info(n).chunks > 1 for n in schedules):
        # Every run starts from the same weights: a model built in several chunks draws its random
        # initial weights in another order (as tests/test_megatron_lm_e2e.py does).
        start = os.path.join(workdir, "start")
        MLM.run(tree, nproc, base[:-1] + ["1", "--save", start, "--save-interval", "1"], cpu_flag=not gpu,
                launcher=launcher, gpus=gpus)
        base += ["--load", start, "--finetune"]
    out = []
    for precision, extra in precisions:
        for name in ["megatron-1f1b", *schedules]:
            args = base + extra + ([] if name == "megatron-1f1b" else ["--pipeline-schedule", name])
            started = time.monotonic()
            row = {"schedule": name, "precision": precision, "pp": nproc,
                   "layers": "transformer_engine" if gpu and te else "local"}
            refused = _refused_by_design(name, extra)
            if refused:  # not a failure: the schedule refuses this setting in one sentence, by design
                out.append({**row, "ok": True, "refused": refused})
                continue
            if time.monotonic() > deadline:
                out.append({**row, "ok": False, "error": "not run: the check's --deadline-min passed"})
                continue
            try:
                res = MLM.run(tree, nproc, args, cpu_flag=not gpu, expect_ok=False, launcher=launcher, gpus=gpus)
                row.update(ok=res.returncode == 0, losses=res.numbers()["lm loss"], **_iteration_stats(res.log))
                if row.get("ms_per_iteration"):  # one iteration: the global batch of sequences
                    seq = int(MLM.TINY[MLM.TINY.index("--seq-length") + 1])
                    row["tokens_per_s"] = round(4 * nproc * seq / (row["ms_per_iteration"] / 1e3))
                if res.returncode != 0:
                    row["error"] = MLM.tail(res.log, 15)
            except AssertionError as exc:  # did not finish in time
                row.update(ok=False, error=str(exc)[:2000])
            row["wall_s"] = round(time.monotonic() - started, 1)
            out.append(row)
    reference = {r["precision"]: r.get("losses") for r in out if r["schedule"] == "megatron-1f1b"}
    for row in out:
        row["losses_equal_megatron_1f1b"] = None if row.get("refused") else (
            bool(row.get("losses")) and row.get("losses") == reference.get(row["precision"]))
    return out


def _refused_by_design(schedule: str, extra: list) -> str:
    """The sentence our runtime refuses `schedule` with under these extra Megatron-LM options (the FP8
    row of a schedule with W ops: primus_megatron/unsupported.py), or "" (issue 45 item 5: such a row is
    reported as refused, not as a failure)."""
    if schedule == "megatron-1f1b" or "--fp8-format" not in extra:
        return ""
    from primus_megatron import schedules as S
    from primus_megatron import unsupported

    info = S.info(schedule)
    fields = {"fp8": extra[extra.index("--fp8-format") + 1]}
    setting = unsupported.Setting(schedule, info.splits_backward, info.placement == S.V, True, fields.get)
    return unsupported.first_refusal(setting) or ""


def _absent_kernels(te: bool) -> list:
    """What a user passes to Megatron-LM on a GPU machine without apex's CUDA extensions, with local
    layers: megatron-core's linear layers refuse gradient-accumulation fusion without
    `fused_weight_gradient_mlp_cuda` (tensor_parallel/layers.py), and its fused softmax imports
    `scaled_masked_softmax_cuda` at the first forward (fusions/fused_softmax.py)."""
    import importlib.util

    if te:
        return []
    missing = lambda m: importlib.util.find_spec(m) is None  # noqa: E731
    return ((["--no-gradient-accumulation-fusion"] if missing("fused_weight_gradient_mlp_cuda") else []) +
            (["--no-masked-softmax-fusion"] if missing("scaled_masked_softmax_cuda") else []))


def _iteration_stats(log: str) -> dict:
    """Megatron-LM's own numbers from its last iteration line and its memory report."""
    import re

    import megatron_lm_harness as MLM

    stats: dict = {}
    for line in log.splitlines():
        m = MLM._ITER.search(line)
        if m:
            fields = dict((k.strip(), v.strip()) for k, v in MLM._FIELD.findall(m.group(3) + "|"))
            for key, label in (("elapsed time per iteration (ms)", "ms_per_iteration"),
                               ("throughput per GPU (TFLOP/s/GPU)", "tflops_per_gpu")):
                if key in fields:
                    stats[label] = float(fields[key])
        peak = re.search(r"max allocated: ([0-9.]+)", line)
        if peak and float(peak.group(1)) > 0:  # on CPU Megatron-LM reports 0
            stats["peak_mib"] = max(stats.get("peak_mib", 0.0), float(peak.group(1)))
    return stats


# -- report -------------------------------------------------------------------------------------

def report_markdown(data: dict) -> str:
    env = data["environment"]
    lines = [f"# GPU check ({data['when']}{', CPU dry run' if data['dry_run'] else ''})", "",
             f"torch {env['torch']} (CUDA {env['cuda']}, HIP {env['hip']}), NCCL/RCCL {env.get('nccl')}, "
             f"megatron-core {env['megatron_core']}, TransformerEngine {env['transformer_engine']}, "
             f"apex {env['apex']}", ""]
    for i, g in enumerate(env["gpus"]):
        lines.append(f"- GPU {i}: {g['name']} (capability {g['capability']} {g['arch']}, {g['memory_gib']} GiB, "
                     f"bf16 {g['bf16']}, FP8 {g['fp8']})")
    if data.get("gpus_shared"):
        lines += ["", f"Fewer GPUs ({len(env['gpus'])}) than ranks: each rank ran as a one-GPU node of its own "
                      "(NCCL_HOSTID per rank), so NCCL carried p2p through its socket transport and the ranks "
                      "shared the GPU's SMs: NCCL's ordering, init and streams are real, the times are not a "
                      "pipeline's (benchmarks/rank_launch.py)."]
    lines += ["", "### Schedules x pp x init x knobs (two steps each)", "",
              "| schedule | pp | init | env | ran | losses bitwise | grads bitwise | ms/iter | ms/iter just-in-time "
              "(= early bitwise) | reference ms/iter | peak GiB (ref) | error |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["matrix"]:
        env_s = ",".join(f"{k}={v}" for k, v in r["env"].items()) or "unset"
        ms = lambda s: f"{1e3 * s:.1f}" if s else "-"  # noqa: E731
        peak = f"{r['peak_gib']:.2f} ({r['reference_peak_gib']:.2f})" if r.get("peak_gib") is not None else "-"
        lines.append(f"| {r['schedule']} | {r['pp']} | {r['init']} | {env_s} | {'yes' if r['ok'] else 'NO'} | "
                     f"{r.get('losses_bitwise', '-')} | {r.get('grads_bitwise', '-')} | {ms(r.get('seconds'))} | "
                     f"{_jit_cell(r)} | {ms(r.get('reference_seconds'))} ({r.get('reference', '-')}) | {peak} | "
                     f"{(r.get('error') or '').splitlines()[0][:120] if r.get('error') else ''} |")
    lines += ["", _knob_note(data.get("inherited_knobs") or {})]
    if data.get("megatron_lm") is not None:
        lines += ["", "### Megatron-LM pretrain_gpt.py", "",
                  "| schedule | layers | precision | env | ran | losses = megatron 1F1B | ms/iter | tokens/s | "
                  "TFLOP/s/GPU | peak MiB | error |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in data["megatron_lm"]:
            err = [ln for ln in (r.get("error") or "").splitlines() if ln.strip()]
            ran = "refused by design" if r.get("refused") else "yes" if r["ok"] else "NO"
            if r.get("refused"):
                err = [r["refused"]]
            env_s = ",".join(f"{k}={v}" for k, v in (r.get("env") or {}).items()) or "unset"
            lines.append(f"| {r['schedule']} | {r.get('layers', '-')} | {r['precision']} | {env_s} | {ran} | "
                         f"{r.get('losses_equal_megatron_1f1b', '-')} | {r.get('ms_per_iteration', '-')} | "
                         f"{r.get('tokens_per_s', '-')} | "
                         f"{r.get('tflops_per_gpu', '-')} | {r.get('peak_mib', '-')} | "
                         f"{err[-1][:120].replace('|', '/') if err else ''} |")
    lines += ["", f"Command: `{data['command']}`", ""]
    return "\n".join(lines)


def _jit_cell(r: dict) -> str:
    """The just-in-time policy's ms/iter and its bitwise equality with early ('-' where not run: lazy init)."""
    if r.get("just_in_time_seconds") is None:
        return "-"
    return f"{1e3 * r['just_in_time_seconds']:.1f} ({r.get('just_in_time_bitwise')})"


def _knob_note(inherited: dict) -> str:
    """What the env columns mean, with every variable named, and what the caller had that was removed."""
    note = (f"env: what a run set of {', '.join(KNOB_VARIABLES)}; the others were unset for it (the runtime's "
            f"default: on ROCm HSA_ENABLE_SDMA unset is 1, copies on the SDMA engines). Every row's values are in "
            f"report.json (env_effective).")
    if inherited:
        note += (" The caller's environment had " + ", ".join(f"{k}={v}" for k, v in inherited.items()) +
                 ": removed for every run.")
    return note


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-dry-run", action="store_true", help="gloo on CPU, 2 ranks, a small subset")
    parser.add_argument("--schedules", help="comma-separated (default: every registered schedule; dry run: "
                                            + ",".join(DRY_SCHEDULES) + ")")
    parser.add_argument("--max-pp", type=int, help="largest pipeline size (default: the GPU count, at least 2; "
                                                   "dry run: 2); beyond the GPU count ranks share GPUs "
                                                   "(benchmarks/rank_launch.py)")
    parser.add_argument("--pps", help="comma-separated pipeline sizes (default: 2 to --max-pp)")
    parser.add_argument("--inits", default="eager,lazy", help="communicator init: eager, lazy or both")
    parser.add_argument("--knobs", default="shipped,unset",
                        help="environments of the matrix: shipped (examples/slurm/pretrain_gpt.sbatch's queue and "
                             "stream settings), 1 (only CUDA_DEVICE_MAX_CONNECTIONS, GPU_MAX_HW_QUEUES on ROCm, at 1), "
                             "unset (none of them); comma-separated")
    parser.add_argument("--p2p-timeout", type=float, default=P2P_TIMEOUT_S,
                        help="seconds a rank waits on a peer before our watchdog names the hang")
    parser.add_argument("--config-timeout", type=float, default=CONFIG_TIMEOUT_S,
                        help="seconds without progress after which a launch counts as hung")
    parser.add_argument("--startup-timeout", type=float, default=None,
                        help="seconds a launch's ranks may take to start (imports, init) before the first "
                             "configuration begins (default: --config-timeout)")
    parser.add_argument("--deadline-min", type=float, default=None,
                        help="minutes for the whole check: what has not begun by then is reported as not run")
    parser.add_argument("--microbatches", type=int, default=None, help="per step (default: 2 x pp)")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--megatron-lm", action=argparse.BooleanOptionalAction, default=None,
                        help="also run Megatron-LM's pretrain_gpt.py (default: on GPUs only)")
    parser.add_argument("--megatron-lm-schedules", help="comma-separated, for Megatron-LM's part (default: "
                                                        "--schedules)")
    parser.add_argument("--megatron-lm-pp", type=int, default=2,
                        help="pipeline size of Megatron-LM's part (its tiny GPT has 4 layers; default 2)")
    parser.add_argument("--matrix", action=argparse.BooleanOptionalAction, default=True,
                        help="run the schedule matrix (--no-matrix: only the environment and Megatron-LM's part)")
    parser.add_argument("--out", default=os.path.join(ROOT, "out", "gpu_check"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--launch-on-cpu", action="store_true", help=argparse.SUPPRESS)  # tests: GPU launch path, gloo
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker)
    import torch

    from primus_megatron import schedules as S

    gpu = not args.cpu_dry_run
    if gpu and not torch.cuda.is_available():
        print(f"gpu_check: {no_gpu_sentence(torch)}", file=sys.stderr)
        return 2
    names = args.schedules.split(",") if args.schedules else (
        list(DRY_SCHEDULES) if not gpu else [n for n in S.names() if n != "zb-optimal"])
    unknown = [n for n in names + (args.megatron_lm_schedules or "").split(",") if n and n not in S.names()]
    if unknown:
        print(f"gpu_check: --schedules {','.join(unknown)} is not registered (known: {', '.join(S.names())})",
              file=sys.stderr)
        return 2
    started = time.monotonic()
    deadline = started + 60 * args.deadline_min if args.deadline_min else float("inf")
    gpus = torch.cuda.device_count() if gpu else 0
    try:
        top = args.max_pp or (max(gpus, 2) if gpu else 2)
        pps = [int(p) for p in args.pps.split(",")] if args.pps else list(range(2, top + 1))
        if not pps or min(pps) < 2:
            raise ValueError
    except ValueError:
        print(f"gpu_check: --pps/--max-pp must give pipeline sizes of at least 2, got {args.pps or args.max_pp}",
              file=sys.stderr)
        return 2
    inits, knobs = tuple(args.inits.split(",")), tuple(args.knobs.split(","))
    if not inits or set(inits) - {"eager", "lazy"}:
        print(f"gpu_check: --inits takes eager, lazy or both, got {args.inits}", file=sys.stderr)
        return 2
    if not knobs or set(knobs) - {"shipped", "1", "unset"}:
        print(f"gpu_check: --knobs takes shipped, 1 and unset (comma-separated), got {args.knobs}", file=sys.stderr)
        return 2
    bad = next(((f"--{name.replace('_', '-')}", value) for name in ("p2p_timeout", "config_timeout", "startup_timeout",
                                                                     "deadline_min")
                for value in [getattr(args, name)] if value is not None and not 0 < value < float("inf")), None)
    if bad:  # 0 or a negative limit would call every launch hung at once, nan would never call one hung
        print(f"gpu_check: {bad[0]} takes a positive number, got {bad[1]:g}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    opts = {"model": MODEL if gpu else DRY_MODEL, "microbatches": args.microbatches, "steps": args.steps,
            "p2p_timeout_s": args.p2p_timeout, "config_timeout_s": args.config_timeout,
            "startup_timeout_s": args.startup_timeout}
    arch = torch.cuda.get_device_properties(0).gcnArchName if gpu and torch.version.hip else ""
    configs = configurations(names, pps, rocm=bool(torch.version.hip), gpu=gpu, inits=inits, knobs=knobs, arch=arch)
    data = {"when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "dry_run": not gpu, "command": " ".join(["python", "benchmarks/gpu_check.py", *(argv or sys.argv[1:])]),
            "environment": environment(), "inherited_knobs": inherited_knobs()}
    data["gpus_shared"] = gpu and max(pps + [args.megatron_lm_pp]) > gpus
    if not args.matrix:
        data["matrix"] = []
    elif args.launch_on_cpu:  # one launch per (pp, init), ranks as one-"GPU" nodes, gloo
        data["matrix"] = run_matrix_gpu(configs, {**opts, "launch_on_cpu": True}, args.out, gpus=1, deadline=deadline)
    else:
        data["matrix"] = (run_matrix_gpu(configs, opts, args.out, gpus=gpus, deadline=deadline) if gpu
                          else run_matrix_cpu(configs, opts))
    if args.megatron_lm if args.megatron_lm is not None else gpu:
        fp8 = any(g["fp8"] for g in data["environment"]["gpus"])
        with tempfile.TemporaryDirectory() as work:
            mlm_names = args.megatron_lm_schedules.split(",") if args.megatron_lm_schedules else names
            te = bool(data["environment"]["transformer_engine"]) and "error" not in (
                data["environment"]["transformer_engine"] or {})
            try:
                # the sbatch's environment where the matrix runs it (a GPU), else none of it
                mlm_env = shipped_env(bool(torch.version.hip), arch) if gpu and "shipped" in knobs else {}
                data["megatron_lm"] = run_megatron_lm(mlm_names, gpu=gpu, fp8=fp8, nproc=args.megatron_lm_pp,
                                                      iters=4 if gpu else 2, workdir=work, gpus=gpus, te=te,
                                                      deadline=deadline, env=mlm_env)
            except Exception as exc:  # noqa: BLE001 (the tree could not be prepared: the report says why)
                data["megatron_lm"] = [{"schedule": "-", "precision": "-", "ok": False,
                                        "error": f"{type(exc).__name__}: {str(exc)[:500]}"}]
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(data, f, indent=1, default=str)
    text = report_markdown(data)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(text)
    print(text)
    failed = [r for r in data["matrix"] if not r["ok"]] + [r for r in data.get("megatron_lm") or [] if not r["ok"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
