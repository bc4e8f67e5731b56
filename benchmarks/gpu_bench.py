"""The GPU benchmark: one command (`make gpu-bench`) that measures, on one GPU, what the weight-gradient
split costs at real layer sizes and whether our executor keeps the GPU fed, and writes the profile
the planner and `primus-pipeline emulate` take.

    python benchmarks/gpu_bench.py                    # on a GPU: every part, out/gpu_bench/
    python benchmarks/gpu_bench.py --cpu-dry-run      # gloo on CPU, toy shapes (the test suite's)

Parts, in this order (each in processes of its own, so a failure or a hang ends only that part;
the report is rewritten after each, so a deadline or a kill still leaves what finished):

1. `split` (gpu_split.py): per block (gpu_blocks.py: a Llama-3-8B-like dense block and a
   Qwen3-30B-A3B-like MoE block, two layers per chunk, bf16, megatron-core's layers) and chunk kind
   (first / mid / last), T_F, T_B, T_W and megatron's fused T_BW from CUDA/HIP events (medians),
   (T_B + T_W) / T_BW, the host's time to issue each op, and the activation memory held after F, B
   and W from the allocator, against the planner's default memory model (B frees nothing, W all);
   then `<block>.profile.json` (the format `primus-pipeline emulate --profile` and `balance` read)
   and the `--pipeline-costs` string of one chunk;
2. `gap` (gpu_pipeline.py): pp=2, the ranks as one-GPU nodes on the one GPU: megatron's 1F1B
   against our 1f1b, zb-h1 and zbv at the dense shape (and a shorter sequence, where ops are short
   enough for the host to show): per op the GPU's idle time before it, the host's time inside it
   and between ops, and how far ahead of the GPU the host ran; losses and gradients against
   megatron's;
3. `offload` (gpu_pipeline.py): activation offload's GPU path (pinned host buffers, copy streams,
   events) under zb-h1 and zbv with offload all and auto: bitwise against no offload, the allocator's
   peak against the plan, the bandwidth measured at start-up, step time against no offload;
4. `offload-check` (gpu_pipeline.py, issue 46): zb-h1 and zbv without offload and with offload all,
   every step begun with the device busy (`torch.cuda._sleep`) so the host runs ahead, every block
   the offload hands back overwritten at once: gradients bitwise against no offload, allocated and
   reserved peaks against the plan, the profiled B memory with and without offload, the copy streams
   over every step (one pair), pinned bytes reported against the host allocator's, and the copy
   rate inside the run against a copy alone;
5. `check` (gpu_check.py): Megatron-LM's pretrain_gpt.py on the GPU (local layers in bf16 where
   TransformerEngine is absent) and the schedule matrix with CUDA_DEVICE_MAX_CONNECTIONS unset.

`--deadline-min` (default 8) bounds the whole run: a part not begun by then is reported as not run,
a running part is stopped at it. Output: report.md, report.json, dense.profile.json,
moe.profile.json in --out. `benchmarks/gpu_projection.py` turns the report into projected step-time
ratios at pp 8-32 (on CPU).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from typing import Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

PARTS = ("split", "gap", "offload", "offload-check", "check")
PIPELINED = ("gap", "offload", "offload-check")  # gpu_pipeline.py's parts
# offload-check: 20 steps (the copy streams over as many steps as the stream pool would take to wrap),
# at a sequence and microbatch count that keep its offload-all runs short
DEFAULTS = {"gpu": dict(repeats=5, warmup=2, steps=3, microbatches=8, gap_seqs="4096,1024", check_steps=20,
                        check_seq=1024, check_microbatches=4),
            # the dry run exercises each part's code, not its numbers: one timed round, no warm-up, one sequence
            "dry": dict(repeats=1, warmup=0, steps=1, microbatches=4, gap_seqs="16", check_steps=3,
                        check_seq=None, check_microbatches=None)}
PLANNER_KEPT_FOR_W = 1.0  # the planner's default memory model: B frees nothing, W frees all (--mem-b 0)


# -- the split part's process ------------------------------------------------------------------

def split_process(case_file: str) -> int:
    """The split part in a process of its own: one rank, the device to itself."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    import gpu_split
    from primus_megatron.runtime import linear_hooks

    with open(case_file) as f:
        case = json.load(f)
    store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True)
    if case["gpu"]:
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=torch.device("cuda", 0))
        device = torch.device("cuda", 0)
    else:
        from primus_megatron.compat import cpu

        cpu.enable()
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        device = torch.device("cpu")
    ps.initialize_model_parallel(1, 1)
    if case["gpu"]:
        from megatron.core import tensor_parallel

        tensor_parallel.model_parallel_cuda_manual_seed(1234)
    linear_hooks.install()

    def emit(row: dict) -> None:
        with open(case["progress"], "a") as f:
            f.write(json.dumps(row) + "\n")

    with _fp8_device(case):
        gpu_split.run(case, device, emit)
    dist.destroy_process_group()
    return 0


def _fp8_device(case: dict):
    """The CPU dry run's FP8 cases (make gpu-te --cpu-dry-run): TE's stand-in answering as a Hopper
    (tests/te_standin); nothing otherwise."""
    import contextlib

    if not case.get("emulate_fp8"):
        return contextlib.nullcontext()
    from transformer_engine.pytorch.quantization import emulate_fp8_device

    return emulate_fp8_device("sm90")


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the part's process group (a launch dumps its ranks' stacks on it), then SIGKILL to
    whatever of the group is left."""
    import signal

    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass


def part_process(args: list, log: str, timeout_s: float, *, ok=(0,), env: Optional[dict] = None) -> Optional[str]:
    """Run one part's process (the checkout and benchmarks/ on its path, `env` or this process's
    environment), output to `log`; None, or why it ended otherwise (`ok`: the exit statuses that are not
    a failure of the part). Also gpu_te.py's."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, HERE, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    with open(log, "w") as out:
        # a session of its own: a part that runs past its time is stopped with every process it started
        # (a pytest part's test processes, a launch's ranks), which would otherwise hold the GPU
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            return f"ran past its {timeout_s:.0f} s (log: {log})"
    if code in ok:
        return None
    with open(log, errors="replace") as f:
        lines = [ln.strip() for ln in f if ln.strip()]
    errors = [ln for ln in lines if "Error" in ln or "error" in ln]
    return f"exit status {code}: {(errors[-1] if errors else lines[-1] if lines else 'no output')[:600]} (log: {log})"


def run_split(case: dict, where: str, timeout_s: float, env: Optional[dict] = None) -> tuple[list, Optional[str]]:
    """The split part's process on `case`; the rows it measured before it ended, and why it ended otherwise.
    Also gpu_te.py's (TE layers)."""
    os.makedirs(where, exist_ok=True)
    case_file, progress, log = (os.path.join(where, n) for n in ("case.json", "progress.jsonl", "log.txt"))
    with open(case_file, "w") as f:
        json.dump({**case, "progress": progress}, f)
    open(progress, "w").close()
    why = part_process([sys.executable, os.path.abspath(__file__), "--split-process", case_file], log, timeout_s,
                       env=env)
    with open(progress) as f:
        return [json.loads(line) for line in f if line.strip()], why


# -- the pipelined parts -------------------------------------------------------------------------

def _run_pipeline_part(part: str, opts: dict, where: str, timeout_s: float) -> tuple[list, Optional[str]]:
    import gpu_pipeline as P

    case = {"part": part, "pp": P.PP, "gpu": opts["gpu"], "dry_run": opts["dry_run"], "steps": opts["steps"],
            "microbatches": opts["microbatches"], "attention": opts["attention"],
            "p2p_timeout_s": opts["p2p_timeout_s"], "seqs": opts["gap_seqs"], "variants": list(P.GAP_VARIANTS),
            "schedules": list(P.OFFLOAD_SCHEDULES), "modes": list(P.OFFLOAD_MODES), "costs": opts.get("offload_costs"),
            "check_steps": opts["check_steps"], "check_seq": opts["check_seq"],
            "check_microbatches": opts["check_microbatches"],
            # the offload parts compare bitwise: attention's backward made deterministic
            "deterministic": part in ("offload", "offload-check")}
    if opts["gpu"] or part in opts["launch_on_cpu"]:
        return P.launch(case, where, timeout_s=timeout_s, on_cpu=not opts["gpu"])
    from primus_megatron.runtime import local_ranks

    try:
        return local_ranks.run_ranks(P.body, case, P.PP, timeout_s=timeout_s)[0], None
    except Exception as exc:  # noqa: BLE001 (the report says why the part ended)
        return [], f"{type(exc).__name__}: {str(exc)[:1500]}"


def _run_check(opts: dict, where: str, timeout_s: float) -> tuple[dict, Optional[str]]:
    """gpu_check.py for what the first GPU run left open: Megatron-LM's pretrain_gpt.py and the
    matrix with CUDA_DEVICE_MAX_CONNECTIONS unset (GPU_MAX_HW_QUEUES on ROCm)."""
    args = [sys.executable, os.path.join(HERE, "gpu_check.py"), "--pps", "2", "--inits", "eager",
            "--schedules", opts["check_schedules"], "--out", where, "--p2p-timeout", "60",
            "--config-timeout", "90", "--deadline-min", f"{max(0.5, timeout_s / 60 - 0.5):.2f}"]
    if opts["gpu"]:
        args += ["--knobs", "unset", "--megatron-lm", "--megatron-lm-schedules", opts["megatron_lm_schedules"]]
    else:  # the dry run: the check's own CPU path (its Megatron-LM part is the suite's test_gpu_check)
        args += ["--cpu-dry-run", "--no-megatron-lm"]
    os.makedirs(where, exist_ok=True)
    # status 1: a configuration failed, which its report says
    why = part_process(args, os.path.join(where, "console.txt"), timeout_s + 30, ok=(0, 1))
    report = os.path.join(where, "report.json")
    data = {}
    if os.path.isfile(report):
        with open(report) as f:
            data = json.load(f)
    data["command"] = " ".join("python" if a == sys.executable else os.path.relpath(a, ROOT) if a.startswith(ROOT)
                               else a for a in args)
    return data, why


# -- report --------------------------------------------------------------------------------------

def derive(data: dict, opts: dict) -> None:
    """Profiles from the split rows (a block with all three chunk kinds); written next to the report."""
    import gpu_blocks as G
    import gpu_split

    data["profiles"], data["pipeline_costs"] = {}, {}
    for name in opts["blocks"]:
        block = G.blocks(opts["dry_run"])[name]
        rows = [r for r in data["split"] if r["block_name"] == name and r["attention"] == block["attentions"][0]]
        if {r["kind"] for r in rows} != set(gpu_split.KINDS):
            continue
        profile = gpu_split.profile_of(rows, block, link_gbps=opts["link_gbps"], device_name=data["device"])
        data["profiles"][name] = profile
        data["pipeline_costs"][name] = gpu_split.pipeline_costs(profile)
        with open(os.path.join(opts["out"], f"{name}.profile.json"), "w") as f:
            json.dump(profile, f, indent=2)


def one_line(text: str) -> str:
    """A failure in one table cell: its first line and, for a traceback, the error it ends with."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    errors = [ln for ln in lines[1:] if "Error" in ln.split(":", 1)[0] or ln.startswith(("AssertionError", "KeyError"))]
    return " ... ".join(dict.fromkeys([lines[0]] + errors[-1:]))[:400].replace("|", "/") if lines else ""


def _versus(vs: dict) -> str:
    """A comparison (gpu_pipeline.compare) in words: bitwise, or by how much."""
    losses = "bitwise" if vs["losses_bitwise"] else f"max diff {vs['loss_max_diff'] or 0:.3g}"
    grads = "bitwise" if vs["grads_bitwise"] else (f"{vs['grads_differing']} of {vs['grads_compared']} differ "
                                                  f"(norm rel {vs['grad_norm_max_rel_diff']:.2g})")
    return f"losses {losses}, grads {grads}"


def _ms(x) -> str:
    return "-" if x is None else f"{1e3 * x:.2f}"


def _mib(x) -> str:
    return "-" if x is None else f"{x / 2**20:.1f}"


def split_rows(data: dict) -> list:
    rows = []
    for r in data["split"]:
        kept = "-" if r["kept_for_w"] is None else f"{r['kept_for_w']:.2f}"
        rows.append([r["block"], r["attention"], r["kind"], *(_ms(r[f"t_{k}"]) for k in ("f", "b", "w", "bw")),
                     f"{r['split_over_fused']:.3f}", f"{r['w_share']:.2f}",
                     "/".join(_ms(r[f"host_{k}"]) for k in ("f", "b", "w", "bw")),
                     *(_mib(r.get(f"mem_{k}")) for k in ("after_f", "after_b", "after_w", "closures")), kept])
    return rows


def profile_rows(data: dict) -> list:
    def fbw(d: dict) -> str:
        return "/".join(f"{1e3 * d[k]:.2f}" for k in "fbw")

    rows = []
    for name, p in data["profiles"].items():
        c = p["costs"]
        rows.append([p["meta"]["model"], f"{name}.profile.json", fbw(c["layer"]), fbw(c["embedding"]), fbw(c["head"]),
                     f"{1e3 * c['comm']:.3f} ({p['meta']['link_gbps_assumed']:g} GB/s)", f"{c['fused']:.3f}",
                     f"{c['wgrad_memory']:.3f}", f"{c['head_memory']:.2f}", f"`{data['pipeline_costs'][name]}`"])
    return rows


def _gap_rows(data: dict) -> list:
    rows = []
    for row in data["gap"]:
        vs = row.get("vs_megatron_1f1b")
        vs_text = "reference" if vs is None else _versus(vs)
        for rank, s in enumerate(row["ranks"]):
            rows.append([row["seq"], row["variant"], rank, f"{s['ops']:.0f}", f"{s['step_ms']:.1f}",
                         f"{s['gpu_busy_ms']:.1f}",
                         f"{s['gap_ms_total']:.1f} / {s['gap_ms_median']:.2f} / {s['gap_ms_max']:.1f}",
                         f"{s['host_in_op_ms']:.2f}", f"{s['host_between_ms_per_op']:.2f}", f"{s['drain_ms']:.1f}",
                         f"{s['peak_gib']:.2f}", vs_text if rank == 0 else ""])
    return rows


def _offload_rows(rows: list) -> list:
    def per_rank(values, fmt: str) -> str:
        return " / ".join(format(x, fmt) for x in values)

    out = []
    off = {r["schedule"]: r for r in rows if r["mode"] == "off"}
    for r in rows:
        base = off.get(r["schedule"])
        steps = [s["step_ms"] for s in r["ranks"]]
        peaks = [s["peak_gib"] for s in r["ranks"]]
        ratio = ratio_mem = "-"
        if base is not None:
            ratio = f"{max(steps) / max(s['step_ms'] for s in base['ranks']):.3f}"
            b_peak, b_plan = max(s["peak_gib"] for s in base["ranks"]), max(base["planned_peak"])
            if b_peak > 0 and b_plan > 0:
                ratio_mem = f"{max(peaks) / b_peak:.2f} / {max(r['planned_peak']) / b_plan:.2f}"
        vs = r.get("vs_off")
        bw = r.get("bandwidth_units")
        out.append([r["schedule"], r["mode"], per_rank(steps, ".1f"), ratio, per_rank(peaks, ".2f"), ratio_mem,
                    per_rank(r["planned_peak"], ".2f"),
                    f"{sum(s['moved'] for s in r['ranks'])} / {sum(s['moved_w'] for s in r['ranks'])}",
                    "-" if bw is None else f"{bw:.3g}", "reference" if vs is None else _versus(vs)])
    return out


CHECK_HEADERS = ["schedule", "mode", "vs off", "peak vs off, measured / planned", "reserved GiB",
                 "profiled B MiB (rank 0 / 1)", "B vs off", "copy stream pairs", "outside the pool",
                 "pinned MiB: peak in use / host allocator holds", "copy GB/s in run / alone"]


def _check_rows(rows: list) -> list:
    def ranks(r: dict, key: str, fmt=lambda x: f"{x:.2f}") -> str:
        return " / ".join("-" if s.get(key) is None else fmt(s[key]) for s in r["ranks"])

    out = []
    for r in rows:
        vs = r.get("vs_off")
        peak = "-" if not r.get("peak_vs_off") else (
            " / ".join("-" if x is None else f"{x:.2f}" for x in r["peak_vs_off"]) + f" (plan {r['planned_vs_off']:.2f})")
        out.append([r["schedule"], r["mode"], "reference" if vs is None else _versus(vs), peak,
                    ranks(r, "reserved_gib"), ranks(r, "profiled_b_mib", lambda d: ", ".join(f"{v}" for v in d.values())),
                    "-" if "profiled_b_equal" not in r else ("equal" if r["profiled_b_equal"] else
                                                             f"rel diff {r['profiled_b_max_rel_diff']:.1e}"),
                    ranks(r, "stream_pairs", str), ranks(r, "external_streams", str),
                    " ; ".join(f"{s['pinned_reported_mib']:.0f} / " + " / ".join(
                        "-" if s.get(k) is None else f"{s[k]:.0f}" for k in ("pinned_held_mib",))
                        for s in r["ranks"]),
                    ranks(r, "copy_gbps_in_run", lambda x: f"{x:.1f}") + " ; " + ranks(r, "copy_gbps_alone",
                                                                                        lambda x: f"{x:.1f}")])
    return out


SPLIT_HEADERS = ["block", "attention", "chunk", "T_F ms", "T_B ms", "T_W ms", "T_BW ms", "(T_B+T_W)/T_BW", "W share",
                 "host F/B/W/BW ms", "held after F MiB", "after B MiB", "after W MiB", "closures hold MiB",
                 "kept for W (planner 1.0)"]
PROFILE_HEADERS = ["block", "file", "layer F/B/W ms", "embedding F/B/W ms", "head F/B/W ms", "comm ms (assumed link)",
                   "fused", "wgrad_memory", "head_memory (layers)", "--pipeline-costs (one chunk, ms)"]
GAP_HEADERS = ["seq", "variant", "rank", "ops", "step ms", "GPU busy ms", "GPU gaps ms (sum / median / max)",
               "host in op ms", "host between ops ms/op", "drain ms", "peak GiB", "vs megatron 1F1B"]
OFFLOAD_HEADERS = ["schedule", "mode", "step ms (rank 0 / 1)", "step vs off", "peak GiB (rank 0 / 1)",
                   "peak vs off, measured / planned", "planned peak (units)", "moved F / W", "bandwidth (units)",
                   "vs off"]


def report_markdown(data: dict) -> str:
    from _common import table

    env = data["environment"]
    gpus = ", ".join(f"{g['name']} ({g['memory_gib']} GiB)" for g in env.get("gpus", [])) or "none (CPU dry run)"
    lines = [f"# GPU benchmark ({data['when']}{', CPU dry run' if data['dry_run'] else ''})", "",
             f"Device: {gpus}; torch {env['torch']} (CUDA {env['cuda']}, HIP {env['hip']}), NCCL/RCCL "
             f"{env.get('nccl')}, megatron-core {env['megatron_core']}, TransformerEngine "
             f"{env['transformer_engine']}, apex {env['apex']}, Python {env['python']}.", "", parts_table(data)]
    if data.get("split"):
        lines += ["", "## Split backward against megatron's fused backward (one chunk = 2 layers, medians)", "",
                  table(SPLIT_HEADERS, split_rows(data))]
    if data.get("profiles"):
        lines += ["", "## Profiles (`primus-pipeline emulate --profile`, `balance --profile`)", "",
                  table(PROFILE_HEADERS, profile_rows(data))]
    if data.get("gap"):
        lines += ["", "## Host and GPU gaps per op, pp=2 (medians over the timed steps)", "",
                  table(GAP_HEADERS, _gap_rows(data))]
    if data.get("offload"):
        copy = [r for r in data["offload"] if r["part"] == "offload-copy"]
        lines += ["", "## Activation offload on the device, pp=2", ""]
        if copy:
            lines += [f"Pinned copy lane (the slower of device-to-host and host-to-device, "
                      f"{copy[0]['bytes'] / 2**20:.0f} MiB): {copy[0]['gbps']:.1f} GB/s.", ""]
        lines.append(table(OFFLOAD_HEADERS, _offload_rows([r for r in data["offload"] if r["part"] == "offload"])))
    if data.get("offload-check"):
        lines += ["", "## Offload check: the host ahead of a busy device, freed blocks overwritten, pp=2", "",
                  table(CHECK_HEADERS, _check_rows(data["offload-check"]))]
    check = data.get("check") or {}
    if check.get("matrix") or check.get("megatron_lm"):
        import gpu_check

        text = gpu_check.report_markdown(check)
        body = text.split("\n", 1)[1] if "\n" in text else text
        lines += ["", "## gpu_check.py: CUDA_DEVICE_MAX_CONNECTIONS unset, Megatron-LM pretrain_gpt.py", body]
    lines += ["", f"Command: `{data['command']}`", ""]
    return "\n".join(lines)


def parts_table(data: dict) -> str:
    """Each part's status (and why it stopped, in one line) and wall time."""
    from _common import table

    return table(["part", "status", "wall s"],
                 [[part, st["status"] + (": " + one_line(st["why"]) if st.get("why") else ""), st.get("wall_s", "-")]
                  for part, st in data["parts"].items()])


def write_report(data: dict, out: str, markdown: Callable[[dict], str] = report_markdown) -> str:
    """report.json and report.md (`markdown` of the data) in `out`, rewritten whole after each part."""
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(data, f, indent=1, default=str)
    text = markdown(data)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(text)
    return text


def _children_cpu() -> float:
    """CPU seconds the finished child processes used (the parts' processes)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_parts(name: str, data: dict, parts: list, deadline: float, run_one: Callable[[str, float], Optional[str]],
              write: Callable[[], object]) -> None:
    """Each part in turn (`run_one(part, seconds left)` returns None or why it stopped), the report
    rewritten after each; a part not begun 5 s before `deadline` (time.monotonic) is reported not run.
    Also gpu_te.py's."""
    for part in parts:
        data["parts"][part] = {"status": "pending"}
    write()
    for part in parts:
        left = deadline - time.monotonic()
        if left <= 5:
            data["parts"][part] = {"status": "not run", "why": "the --deadline-min passed before it began"}
            continue
        t0, cpu0 = time.monotonic(), _children_cpu()
        print(f"{name}: {part} (up to {left:.0f} s)", flush=True)
        why = run_one(part, left)
        data["parts"][part] = {"status": "ok" if why is None else "stopped", "why": why,
                               "wall_s": round(time.monotonic() - t0, 1), "cpu_s": round(_children_cpu() - cpu0, 1)}
        write()


# -- main ----------------------------------------------------------------------------------------

def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # bad input: one line naming the option, status 2
        print(f"gpu_bench: error: {message}", file=sys.stderr)
        sys.exit(2)


def parse(argv) -> argparse.Namespace:
    parser = _Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-dry-run", action="store_true", help="gloo on CPU, toy shapes (every code path)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)} (default all)")
    parser.add_argument("--blocks", default="dense,moe", help="comma-separated, of dense, moe (split part)")
    parser.add_argument("--repeats", type=_positive_int, help="timed rounds per chunk (split; default 5, dry run 1)")
    parser.add_argument("--warmup", type=int, help="untimed rounds first (split; default 2, dry run 0)")
    parser.add_argument("--steps", type=_positive_int, help="timed steps per pipelined run (default 3, dry run 1)")
    parser.add_argument("--microbatches", type=_positive_int, help="per pipelined step (default 8, dry run 4)")
    parser.add_argument("--gap-seqs", help="sequence lengths of the gap part (default 4096,1024; dry run 16)")
    parser.add_argument("--attention", default="sdpa", choices=("sdpa", "local"),
                        help="core attention of the pipelined parts (default sdpa: torch's fused kernel)")
    parser.add_argument("--link-gbps", type=float, default=50.0,
                        help="pipeline link bandwidth the profile's comm cost assumes, GB/s (default 50: 400 Gb/s)")
    parser.add_argument("--check-schedules", default="1f1b,zb-h1,zbv", help="gpu_check part's matrix schedules")
    parser.add_argument("--megatron-lm-schedules", default="zb-h1,zbv", help="gpu_check part's Megatron-LM schedules")
    parser.add_argument("--p2p-timeout", type=float, default=120.0, help="seconds before our watchdog names a hang")
    parser.add_argument("--deadline-min", type=float, default=8.0,
                        help="minutes for the whole run: parts not begun by then are reported not run (default 8)")
    parser.add_argument("--out", default=os.path.join(ROOT, "out", "gpu_bench"))
    parser.add_argument("--split-process", help=argparse.SUPPRESS)
    # tests: these pipelined parts through the GPU launch path, with gloo (the others on forked ranks: the
    # launch is the same code for each part, and each launch starts its ranks afresh)
    parser.add_argument("--launch-on-cpu", nargs="?", const=",".join(PIPELINED), default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        parser.error(f"--parts takes {', '.join(PARTS)} (comma-separated), got {args.parts}")
    blocks = [b for b in args.blocks.split(",") if b]
    if not blocks or any(b not in ("dense", "moe") for b in blocks):
        parser.error(f"--blocks takes dense, moe (comma-separated), got {args.blocks}")
    args.parts_list, args.blocks_list = parts, blocks
    dflt = DEFAULTS["dry" if args.cpu_dry_run else "gpu"]
    for key in ("repeats", "warmup", "steps", "microbatches", "gap_seqs"):
        if getattr(args, key) is None:
            setattr(args, key, dflt[key])
    args.check_steps, args.check_seq, args.check_microbatches = (dflt[k] for k in ("check_steps", "check_seq",
                                                                                 "check_microbatches"))
    try:
        args.gap_seqs_list = [int(s) for s in str(args.gap_seqs).split(",")]
        if not args.gap_seqs_list or min(args.gap_seqs_list) < 1:
            raise ValueError
    except ValueError:
        parser.error(f"--gap-seqs takes positive sequence lengths (comma-separated), got {args.gap_seqs}")
    if args.deadline_min <= 0 or args.link_gbps <= 0:
        parser.error("--deadline-min and --link-gbps must be positive")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.split_process:
        return split_process(args.split_process)
    import torch

    import gpu_check

    gpu = not args.cpu_dry_run
    if gpu and not torch.cuda.is_available():
        print("gpu_bench: no GPU is visible to torch (use --cpu-dry-run to exercise the benchmark on CPU)",
              file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    started = time.monotonic()
    deadline = started + 60 * args.deadline_min
    opts = {"gpu": gpu, "dry_run": not gpu, "blocks": args.blocks_list, "repeats": args.repeats, "warmup": args.warmup,
            "steps": args.steps, "microbatches": args.microbatches, "gap_seqs": args.gap_seqs_list,
            "check_steps": args.check_steps, "check_seq": args.check_seq, "check_microbatches": args.check_microbatches,
            "attention": args.attention, "link_gbps": args.link_gbps, "p2p_timeout_s": args.p2p_timeout,
            "check_schedules": args.check_schedules, "megatron_lm_schedules": args.megatron_lm_schedules,
            "launch_on_cpu": [p for p in args.launch_on_cpu.split(",") if p], "out": args.out}
    unknown = sorted(set(opts["launch_on_cpu"]) - set(PIPELINED))
    if unknown:  # a misspelt part would quietly run on forked ranks instead of the launch path
        print(f"gpu_bench: --launch-on-cpu takes parts of {', '.join(PIPELINED)}, got {', '.join(unknown)}",
              file=sys.stderr)
        return 2
    env = gpu_check.environment()
    data = {"when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "dry_run": not gpu,
            "command": " ".join(["python", "benchmarks/gpu_bench.py", *(argv if argv is not None else sys.argv[1:])]),
            "environment": env, "device": env["gpus"][0]["name"] if env.get("gpus") else "cpu",
            "options": {k: v for k, v in opts.items() if k != "out"},
            "parts": {p: {"status": "not run", "why": "not asked for (--parts)"} for p in PARTS},
            "split": [], "gap": [], "offload": [], "offload-check": [], "check": {}}

    def run_one(part: str, left: float) -> Optional[str]:
        where = os.path.join(args.out, part)
        if part == "split":
            data["split"], why = run_split({**opts, "gpu": gpu}, where, left)
            derive(data, opts)
            opts["offload_costs"] = data["pipeline_costs"].get("dense")  # offload plans from measured costs
        elif part in PIPELINED:
            data[part], why = _run_pipeline_part(part, opts, where, left)
        else:
            data["check"], why = _run_check(opts, where, left)
        return why

    run_parts("gpu_bench", data, args.parts_list, deadline, run_one, lambda: write_report(data, args.out))
    text = write_report(data, args.out)
    print(text)
    failed = [p for p, st in data["parts"].items() if p in args.parts_list and st["status"] != "ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
