"""Projected pipeline step time at pp 8-32 from the costs one GPU measured (simulated on CPU).

    python benchmarks/gpu_projection.py --report out/gpu_bench/report.json     # writes docs/benchmarks/projection.md's section
    python benchmarks/gpu_projection.py --profile dense.profile.json --no-markdown --json proj.json
    python benchmarks/gpu_projection.py --report R --no-markdown --emulate-pps 8 --time-unit 10000

Input: the report `benchmarks/gpu_bench.py` writes (its `profiles`: one primus-pipeline-profile/1
per block, dense and MoE) or one or more profile files (`--profile`). A profile holds one transformer
layer's F, B and W time per microbatch, the embedding's and the head's (output layer and loss), the
p2p time of one activation (from an assumed link bandwidth: one GPU has no link to measure),
`fused` = megatron's fused backward T_BW over our split T_B + T_W, and the activation memory the
weight gradient keeps from B to W.

For every block, pp in --pps and m in --m-per-pp multiples of pp, the model is 4 layers per rank
(num_layers = 4 pp, evenly split: a one-chunk stage of 4 layers, a two-chunk schedule's chunk of 2
layers, the chunk the GPU measured), the embedding on the first stage and the head on the last
(rank 0 under the V placement). Each schedule is generated on those stage costs
(`balance.stage_costs`; the cost-driven V schedules plan on them) and simulated: makespan, sync
bubble rate, peak activation memory. Our `1f1b` runs megatron's 1F1B op order and
`interleaved-1f1b` megatron's interleaved order (2 chunks); both run one fused backward op, timed
T_BW = (T_B + T_W) x fused, as megatron's does, while the zero-bubble schedules run B and W apart
at their measured times. The `fused=1` columns repeat the ratios with the baselines' backward
costing T_B + T_W: what the measured split overhead costs the zero-bubble schedules.

`--emulate-pps` (off by default) also runs the real runtime on emulated devices
(`primus-pipeline emulate --profile`) for --emulate-schedules (zb-h1, zbv) at those pp, with
megatron's own 1F1B and interleaved schedules as baselines in the same processes (each on its own
chunk layout's stage costs), and puts the measured ratios next to the simulated ones. At GPU op
times of a few ms, 8 or more ranks on a few CPU cores fall behind: `--time-unit` (milliseconds of
emulated time per profile second, default 1000: real time) slows the emulated ops down.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402  (puts the repository first on the import path)


PROG = "gpu_projection"
SECTION = "## Projected speed-up from a GPU's own costs"
FORMAT = "primus-gpu-projection/1"
LAYERS_PER_RANK = 4  # 2 per chunk of a two-chunk schedule: the 2-layer chunk gpu_split.py measures
ONE_F_ONE_B, INTERLEAVED = "1f1b", "interleaved-1f1b"
BASELINES = (ONE_F_ONE_B, INTERLEAVED)
LABELS = {ONE_F_ONE_B: "megatron 1F1B", INTERLEAVED: "megatron interleaved (2 chunks)"}
DEFAULT_SCHEDULES = "1f1b,interleaved-1f1b,zb-h1,zb-h2,zbv,v-half,v-min"
EMULATE_OF = {"megatron-1f1b": ONE_F_ONE_B, "megatron-interleaved": INTERLEAVED}  # emulate's baselines


class UsageError(Exception):
    """Bad input: one sentence naming the option, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block
        print(f"{PROG}: error: {message}", file=sys.stderr)
        sys.exit(2)


def _ints(minimum: int, what: str):
    def parse(text: str) -> list[int]:
        try:
            values = [int(t) for t in text.split(",") if t.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"takes comma-separated integers ({what}), got {text!r}") from None
        if any(v < minimum for v in values):
            raise argparse.ArgumentTypeError(f"takes integers >= {minimum} ({what}), got {text!r}")
        return list(dict.fromkeys(values))
    return parse


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"takes a positive number, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = C.parser(__doc__, _Parser, prog=PROG)
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--report", metavar="PATH", help="report.json written by benchmarks/gpu_bench.py")
    src.add_argument("--profile", metavar="PATH", action="append",
                     help="a primus-pipeline-profile/1 file (repeat for several)")
    parser.add_argument("--pps", type=_ints(2, "pipeline sizes"), default=[8, 16, 32], metavar="LIST",
                        help="pipeline sizes (default 8,16,32)")
    parser.add_argument("--m-per-pp", type=_ints(1, "microbatches per pipeline rank"), default=[2, 4],
                        metavar="LIST", help="microbatch counts as multiples of pp (default 2,4: m = 2p and 4p)")
    parser.add_argument("--schedules", default=DEFAULT_SCHEDULES, metavar="LIST",
                        help=f"registered schedules to project (default {DEFAULT_SCHEDULES}); megatron's 1F1B "
                             f"and interleaved baselines (1f1b, interleaved-1f1b) are always included")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    parser.add_argument("--balanced", action="store_true",
                        help="also give every schedule (and baseline) the fastest layer split megatron-core can "
                             "build for it (schedules.balance.choose: first/last rank layer counts, layouts), as a "
                             "user would against a heavy head; about a minute per block at pp=32")
    parser.add_argument("--emulate-pps", type=_ints(2, "pipeline sizes"), default=[], metavar="LIST",
                        help="also run the real runtime on emulated devices at these pp (each in --pps; default "
                             "none: simulation only)")
    parser.add_argument("--emulate-schedules", default="zb-h1,zbv", metavar="LIST",
                        help="schedules emulated with --emulate-pps (default zb-h1,zbv)")
    parser.add_argument("--time-unit", type=_positive, default=None, metavar="MS",
                        help="with --emulate-pps: milliseconds of emulated time per profile second (emulate's "
                             "--time-unit; default 1000, real time; e.g. 10000 runs ops 10x slower, which few "
                             "CPU cores follow more faithfully)")
    parser.add_argument("--op-overhead", type=float, default=None, metavar="MS",
                        help="with --emulate-pps: host work per op (ms) that the schedules planned on their costs "
                             "(zbv, v-half, v-min, zb-auto) charge when emulate plans them (default: emulate "
                             "measures it first)")
    parser.add_argument("--steps", type=int, default=2, metavar="N",
                        help="with --emulate-pps: measured steps per emulated run (default 2)")
    parser.add_argument("--emulate-timeout", type=_positive, default=1800.0, metavar="SECONDS",
                        help="with --emulate-pps: give up on one emulated run after this long (default 1800)")
    return parser


# -- input -----------------------------------------------------------------------------------------

@dataclasses.dataclass
class Block:
    name: str  # the report's block name ("dense", "moe") or the profile file's name
    path: str  # a profile file (a report's embedded profile: written to a temporary one)
    model: object  # balance.ModelCosts
    meta: dict


def _names(option: str, text: str) -> list[str]:
    from primus_megatron.schedules import ScheduleError, info

    out = []
    for name in (t.strip() for t in text.split(",")):
        if not name:
            continue
        try:
            out.append(info(name).name)
        except ScheduleError as exc:
            raise UsageError(f"{option}: {exc}") from None
    if not out:
        raise UsageError(f"{option} names no schedule")
    return list(dict.fromkeys(out))


def _load(path: str, option: str, described: Optional[str] = None):
    from primus_megatron.schedules import ScheduleError, balance

    try:
        model = balance.load_profile(path)
    except ScheduleError as exc:
        text = str(exc)
        if described:
            text = text.replace(f"profile {path!r}", described)
        raise UsageError(f"{option}: {text}") from None
    return model


def load_blocks(args, tmp: str) -> tuple[list[Block], dict]:
    """The blocks to project and where their costs come from (device, when, source)."""
    if args.report:
        path = args.report
        if not os.path.isfile(path):
            raise UsageError(f"--report: {path!r} does not exist")
        try:
            with open(path, encoding="utf-8") as f:
                report = json.load(f)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise UsageError(f"--report: {path!r} is not a JSON report ({exc.__class__.__name__})") from None
        profiles = report.get("profiles") if isinstance(report, dict) else None
        if not isinstance(profiles, dict) or not profiles:
            raise UsageError(f"--report: {path!r} has no profiles (its 'profiles' is missing or empty: the GPU run's "
                             f"split part did not finish, or this is not a gpu_bench.py report)")
        blocks = []
        for name, profile in profiles.items():
            if not isinstance(profile, dict):
                raise UsageError(f"--report: the profile {name!r} in {path!r} is not a primus-pipeline-profile/1 "
                                 f"object")
            file = os.path.join(tmp, f"{len(blocks)}.profile.json")
            with open(file, "w", encoding="utf-8") as f:
                json.dump(profile, f)
            model = _load(file, "--report", f"the profile {name!r} in {path!r}")
            meta = profile.get("meta") if isinstance(profile.get("meta"), dict) else {}
            blocks.append(Block(str(name), file, model, meta))
        env = report.get("environment") or {}
        gpus = env.get("gpus") or []
        device = (gpus[0].get("name") if gpus and isinstance(gpus[0], dict) else None) or report.get("device")
        source = {"report": path, "device": device or "unknown", "when": report.get("when"),
                  "dry_run": bool(report.get("dry_run"))}
        return blocks, source
    blocks = []
    for path in args.profile:
        model = _load(path, "--profile")
        with open(path, encoding="utf-8") as f:
            meta = json.load(f).get("meta") or {}
        name = os.path.basename(path)
        for suffix in (".json", ".profile"):
            name = name[:-len(suffix)] if name.endswith(suffix) else name
        if any(b.name == name for b in blocks):  # the same file name in two folders
            name = f"{name}-{len(blocks) + 1}"
        blocks.append(Block(name, path, model, meta if isinstance(meta, dict) else {}))
    devices = sorted({str(b.meta.get("device")) for b in blocks if b.meta.get("device")})
    return blocks, {"profiles": list(args.profile), "device": ", ".join(devices) or "unknown", "when": None,
                    "dry_run": False}


# -- simulation ------------------------------------------------------------------------------------

def simulate_one(name: str, model, pp: int, m: int) -> dict:
    """Makespan (seconds), sync bubble, peak activation memory (max over ranks) of `name` at
    4 pp layers, evenly split, under `model`; {"error": ...} if the schedule cannot be built."""
    from primus_megatron.schedules import B, F, ScheduleError, W, balance, generate, info, registry, simulate
    from primus_megatron.schedules.layer_split import LayerSplit

    chunks = registry.resolve_chunks(info(name), None)
    try:
        costs = balance.stage_costs(model, LayerSplit(LAYERS_PER_RANK * pp), pp, chunks)
        sched = generate(name, pp, m, costs=costs, validate=False)  # the generators' own tests validate them
        result = simulate(sched, costs)
    except ScheduleError as exc:
        return {"error": str(exc)}
    return {"makespan_s": result.makespan, "bubble_rate": result.bubble_sync, "bubble_rate_async": result.bubble_async,
            "peak_memory": max(result.peak_memory),
            "fused_ops": any(op.kind not in (F, B, W) for ops in sched.ranks for op in ops)}


def _ratio(base: dict, x: dict) -> Optional[float]:
    if "error" in base or "error" in x or not x["makespan_s"] > 0:
        return None
    return base["makespan_s"] / x["makespan_s"]


def balanced_cell(model, pp: int, m: int, names: list[str]) -> dict:
    """Each schedule on its own fastest layer split (`balance.choose`): makespan, the split's options,
    ratios against the baselines on theirs."""
    from primus_megatron.schedules import ScheduleError, balance

    rows = {}
    for name in names:
        try:
            best, _ = balance.choose(name, pp, m, model, LAYERS_PER_RANK * pp)
        except ScheduleError as exc:
            rows[name] = {"error": str(exc)}
            continue
        rows[name] = {"makespan_s": best.iteration, "split": balance.flags(best.split) or "even"}
    for name, row in rows.items():
        if "error" not in row:
            row["vs_megatron_1f1b"] = _ratio(rows[ONE_F_ONE_B], row)
            row["vs_megatron_interleaved"] = _ratio(rows[INTERLEAVED], row)
    return rows


def project_cell(model, pp: int, m: int, names: list[str]) -> dict:
    """Every schedule of one (pp, m): simulated numbers and ratios against megatron's baselines, also
    with the baselines' backward costing T_B + T_W (fused = 1)."""
    rows = {name: simulate_one(name, model, pp, m) for name in names}
    unfused_model = dataclasses.replace(model, fused=1.0)
    unfused = {}
    for name, row in rows.items():
        # fused only times BW ops: a schedule without them simulates the same (planned on the same F, B, W)
        if model.fused != 1.0 and ("error" in row or row["fused_ops"]):
            unfused[name] = simulate_one(name, unfused_model, pp, m)
        else:
            unfused[name] = row
    one, inter = rows[ONE_F_ONE_B], rows[INTERLEAVED]
    for name, row in rows.items():
        if "error" in row:
            continue
        row["vs_megatron_1f1b"] = _ratio(one, row)
        row["vs_megatron_interleaved"] = _ratio(inter, row)
        row["peak_memory_vs_1f1b"] = row["peak_memory"] / one["peak_memory"] if "error" not in one else None
        u = unfused[name]
        row["fused_1"] = {"makespan_s": u.get("makespan_s"),
                          "vs_megatron_1f1b": _ratio(unfused[ONE_F_ONE_B], u),
                          "vs_megatron_interleaved": _ratio(unfused[INTERLEAVED], u)}
    return {"pp": pp, "microbatches": m, "num_layers": LAYERS_PER_RANK * pp, "schedules": rows}


# -- emulation (optional) --------------------------------------------------------------------------

def emulate_run(block: Block, name: str, pp: int, m: int, args) -> dict:
    """One `primus-pipeline emulate --profile` run of `name` beside megatron's 1F1B and interleaved
    schedules; its JSON report, or {"error": one line}."""
    from primus_megatron.schedules import info

    cmd = [sys.executable, "-m", "primus_megatron.cli", "emulate", "--profile", block.path, "--schedule", name,
           "--pp", str(pp), "-m", str(m), "--num-layers", str(LAYERS_PER_RANK * pp), "--format", "json",
           "--steps", str(args.steps), "--baselines", ",".join(EMULATE_OF)]
    if info(name).uses_costs and args.op_overhead is not None:
        cmd += ["--op-overhead", f"{args.op_overhead:g}"]
    if args.time_unit is not None:
        cmd += ["--time-unit", f"{args.time_unit:g}"]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    t0 = time.time()
    try:
        done = subprocess.run(cmd, cwd=C.ROOT, capture_output=True, text=True, timeout=args.emulate_timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {args.emulate_timeout:g} s"}
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
        return {"error": f"exit {done.returncode}: {lines[-1].strip() if lines else 'no output'}"}
    out = done.stdout
    try:
        rep = json.loads(out[out.index("{"):])
    except ValueError:
        return {"error": "emulate printed no JSON report"}
    rep["wall_s"] = round(time.time() - t0, 1)
    rep["command"] = " ".join(cmd[1:])
    return rep


def emulate_cell(block: Block, pp: int, m: int, names: list[str], args) -> dict:
    """Measured and simulated (emulate's own plan) makespans of each schedule, in ms, and its
    ratios against the baselines measured in the same processes."""
    out = {}
    for name in names:
        print(f"{PROG}: emulating {block.name} {name} pp={pp} m={m} ...", file=sys.stderr, flush=True)
        rep = emulate_run(block, name, pp, m, args)
        if "error" in rep:
            out[name] = {"error": rep["error"]}
            continue
        row = {"measured_ms": rep["measured"]["makespan"], "simulated_ms": rep["simulated"]["makespan"],
               "wall_s": rep.get("wall_s"), "command": rep.get("command"), "time_unit_ms": rep.get("time_unit_ms")}
        for b in rep.get("baselines", []):
            key = EMULATE_OF[b["name"]]
            row[key] = {"skipped": b["skipped"]} if "skipped" in b else {
                "measured": b["measured"]["makespan"] / row["measured_ms"],
                "simulated": b["simulated"]["makespan"] / row["simulated_ms"]}
        out[name] = row
    return out


# -- output ----------------------------------------------------------------------------------------

def _num(x: Optional[float], digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _label(name: str) -> str:
    return f"{LABELS[name]} (`{name}`)" if name in LABELS else f"`{name}`"


def _fbw(part) -> str:
    return "/".join(f"{1e3 * getattr(part, k):.2f}" for k in "fbw")


def block_text(block: Block, cells: list[dict], names: list[str]) -> str:
    model, meta = block.model, block.meta
    link = meta.get("link_gbps_assumed")
    split_cost = 1.0 / model.fused - 1.0
    lines = [f"### {meta.get('model') or block.name} (`{block.name}`)", "",
             f"Per microbatch, F/B/W ms: layer {_fbw(model.layer)}, embedding {_fbw(model.embedding)}, head (output "
             f"layer and loss) {_fbw(model.head)}; p2p {1e3 * model.comm:.3f} ms per activation"
             + (f" (an assumed {link:g} GB/s link)" if isinstance(link, (int, float)) else "")
             + f"; fused = T_BW / (T_B + T_W) = {model.fused:.3f} (the split backward costs "
             f"{100 * split_cost:+.1f}% against megatron's fused one); weight-gradient memory share "
             f"{model.wgrad_memory:.2f}; head memory {model.head_memory:.2f} layers."
             + (" (fused = 1: the profile measured no fused backward, so the fused=1 columns repeat the others.)"
                if model.fused == 1.0 else ""), ""]
    heads = ["schedule"] + [f"pp={c['pp']}, m={c['microbatches']}" for c in cells]
    rows = []
    for name in names:
        row = [_label(name)]
        for c in cells:
            r = c["schedules"][name]
            row.append("failed" if "error" in r else
                       f"{_num(r['vs_megatron_1f1b'])} / {_num(r['vs_megatron_interleaved'])}")
        rows.append(row)
    lines += ["Projected step-time ratio vs megatron 1F1B / vs megatron interleaved (> 1: faster than it), the "
              "layers split evenly:", "", C.table(heads, rows), ""]
    if all("balanced" in c for c in cells):
        rows = [[_label(name)] + ["failed" if "error" in c["balanced"][name] else
                                  f"{_num(c['balanced'][name]['vs_megatron_1f1b'])} / "
                                  f"{_num(c['balanced'][name]['vs_megatron_interleaved'])}" for c in cells]
                for name in names]
        lines += ["The same, each schedule and baseline on the fastest layer split megatron-core can build for it "
                  "(`primus-pipeline balance`: the head weighs "
                  f"{(model.head.f + model.head.b + model.head.w) / max(1e-12, model.layer.f + model.layer.b + model.layer.w):.1f} "
                  "layers here):", "", C.table(heads, rows), ""]
    detail = []
    for c in cells:
        for name in names:
            r = c["schedules"][name]
            if "error" in r:
                detail.append([c["pp"], c["microbatches"], _label(name), "failed: " + r["error"]] + [""] * 6)
                continue
            u = r["fused_1"]
            detail.append([c["pp"], c["microbatches"], _label(name), f"{1e3 * r['makespan_s']:.1f}",
                           _num(r["vs_megatron_1f1b"]), _num(r["vs_megatron_interleaved"]),
                           _num(r["bubble_rate"]), _num(r["peak_memory_vs_1f1b"], 2),
                           _num(u["vs_megatron_1f1b"]), _num(u["vs_megatron_interleaved"])])
    lines += [C.table(["pp", "m", "schedule", "step ms", "vs 1F1B", "vs interleaved", "bubble",
                       "peak act. memory vs 1F1B", "vs 1F1B, fused=1", "vs interleaved, fused=1"], detail), ""]
    return "\n".join(lines)


def emulate_text(block: Block, cells: list[dict]) -> str:
    rows = []
    for c in cells:
        for name, r in (c.get("emulated") or {}).items():
            proj = c["schedules"].get(name, {})
            if "error" in r:
                rows.append([c["pp"], c["microbatches"], f"`{name}`", "failed: " + r["error"]] + [""] * 6)
                continue
            cells_ = []
            for key, proj_key in ((ONE_F_ONE_B, "vs_megatron_1f1b"), (INTERLEAVED, "vs_megatron_interleaved")):
                v = r.get(key) or {"skipped": "not run"}
                if "skipped" in v:
                    cells_ += ["-", "-", _num(proj.get(proj_key))]
                else:
                    cells_ += [f"{v['measured']:.3f}", f"{v['simulated']:.3f}", _num(proj.get(proj_key))]
            rows.append([c["pp"], c["microbatches"], f"`{name}`"] + cells_ + [f"{r['wall_s']}"])
    if not rows:
        return ""
    unit = next((r.get("time_unit_ms") for c in cells for r in (c.get("emulated") or {}).values()
                 if r.get("time_unit_ms")), None)
    return "\n".join([
        f"Emulated devices (`primus-pipeline emulate --profile`, {block.name}; 1 profile second = {unit:g} ms of "
        f"emulated time): measured step-time ratio (the baselines ran in the same processes), emulate's own "
        f"simulation of the same plan, and the projection above." if unit else f"Emulated devices ({block.name}):",
        "", C.table(["pp", "m", "schedule", "vs megatron 1F1B measured", "simulated", "projected",
                     "vs megatron interleaved measured", "simulated", "projected", "wall s"], rows), ""])


NOT_SHOWN = """What this does not show:

- the costs are per-op medians from one GPU (a 2-layer chunk), taken as every rank's: no variance
  between ranks or steps, no slow rank, no interference from the communication kernels;
- p2p time is one activation over the link bandwidth the profile assumed (its meta), not a
  measured link; no tensor, context, expert or data parallel communication is modelled, and no
  data-parallel gradient reduction, optimizer step or other time outside the pipeline schedule;
- the host's time to issue ops is not included (the GPU report's `gap` part measures it at pp=2),
  nor any layer split other than the even one (`primus-pipeline balance --profile` searches those);
- the model depth is fixed at 4 layers per rank, so a deeper model at the same pp has relatively
  less bubble and every ratio moves towards 1."""


def render(blocks: list[Block], results: dict, names: list[str], source: dict, command: str) -> str:
    where = (f"report {source['report']}" if source.get("report") else f"profiles {', '.join(source['profiles'])}")
    dry = (" **This report is a CPU dry run: toy shapes, not a GPU's costs.**" if source.get("dry_run") else "")
    parts = [C.command_block(command),
             f"Costs measured on {source['device']}"
             + (f" ({source['when']})" if source.get("when") else "") + f", from {where}.{dry} "
             f"Simulated with the planner: every schedule generated and simulated on the blocks' stage costs, with "
             f"num_layers = {LAYERS_PER_RANK} x pp ({LAYERS_PER_RANK} layers per rank: one-chunk schedules' stages "
             f"of {LAYERS_PER_RANK} layers, two-chunk schedules' chunks of {LAYERS_PER_RANK // 2}, the measured "
             f"2-layer chunk), evenly split, the embedding on the first stage and the head on the last (rank 0 "
             f"under V). Ratio = megatron's makespan / the schedule's (> 1: the schedule is faster). megatron's "
             f"1F1B is our `1f1b` and megatron's interleaved our `interleaved-1f1b` (the same op orders), "
             f"timed with megatron's fused backward (T_B + T_W) x fused; the zero-bubble schedules run B and W "
             f"apart at their measured times. `fused=1` columns: the same with the baselines' backward costing "
             f"T_B + T_W, i.e. without the measured split overhead. Bubble: 1 - busy / (pp x makespan), with a "
             f"barrier at the step's end. Peak activation memory: the largest rank's, relative to 1F1B's.", ""]
    for block in blocks:
        parts.append(block_text(block, results[block.name], names))
        em = emulate_text(block, results[block.name])
        if em:
            parts.append(em)
    parts.append(NOT_SHOWN)
    return "\n".join(parts) + "\n"


# -- main ------------------------------------------------------------------------------------------

def _check_json_path(path: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"--json: {path!r} is a folder, not a file name")
    if not os.path.isdir(folder):
        raise UsageError(f"--json: cannot write {path!r}: folder {folder!r} does not exist")


def run(args, argv) -> int:
    names = _names("--schedules", args.schedules)
    names = list(BASELINES) + [n for n in names if n not in BASELINES]  # the baselines first, always
    emulate_names = _names("--emulate-schedules", args.emulate_schedules) if args.emulate_pps else []
    bad = [p for p in args.emulate_pps if p not in args.pps]
    if bad:
        raise UsageError(f"--emulate-pps: {', '.join(map(str, bad))} not in --pps ({', '.join(map(str, args.pps))})")
    if args.op_overhead is not None and args.op_overhead < 0:
        raise UsageError(f"--op-overhead must be >= 0 ms, got {args.op_overhead:g}")
    if args.steps < 1:
        raise UsageError(f"--steps must be at least 1, got {args.steps}")
    if args.json:
        _check_json_path(args.json)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="gpu_projection_") as tmp:
        blocks, source = load_blocks(args, tmp)
        results = {}
        for block in blocks:
            cells = []
            for pp in args.pps:
                for k in args.m_per_pp:
                    cell = project_cell(block.model, pp, k * pp, names)
                    if args.balanced:
                        cell["balanced"] = balanced_cell(block.model, pp, k * pp, names)
                    if pp in args.emulate_pps:
                        cell["emulated"] = emulate_cell(block, pp, k * pp, emulate_names, args)
                    cells.append(cell)
            results[block.name] = cells
    elapsed = time.time() - t0
    text = render(blocks, results, names, source, C.command_line("benchmarks/gpu_projection.py", argv))
    if args.json:
        data = {"format": FORMAT, "source": source, "layers_per_rank": LAYERS_PER_RANK,
                "time_unit": "seconds (makespan_s); emulated: ms", "elapsed_s": round(elapsed, 2),
                "blocks": [{"block": b.name, "model": b.meta.get("model"), "costs": dataclasses.asdict(b.model),
                            "meta": b.meta, "cells": results[b.name]} for b in blocks]}
        from primus_megatron.schedules.atomic_file import atomic_write

        atomic_write(args.json, json.dumps(data, indent=1) + "\n")
    C.publish(args, SECTION, text, PROG)
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args, argv)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
