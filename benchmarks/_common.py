"""Shared helpers of the CPU benchmarks (not a benchmark itself).

* `run_ranks(body, case, world)`: `runtime.local_ranks.run_ranks` with each rank
  pinned to one core (rank r -> the r-th core this process may use, modulo
  their number) and a 300 s collective timeout unless the case names one.
* the one markdown writer every benchmark uses: `parser(doc)` (the script's
  options start from its docstring and --markdown FILE / --no-markdown:
  `add_markdown_options`), `table(headers, rows)`, `section(command, *parts)`
  (the command that reproduces the numbers, `command_block`, then the parts a
  blank line apart; `command_line(script, argv)` is that command as it was run;
  `method(doc)`: the docstring's paragraphs past the title and usage)
  and `publish(args, title, text, name)`: print the section, then replace it in
  the script's page under docs/benchmarks/ (`PAGES`; `write_section`: that one `## ` section, every
  other as it is). BENCHMARKS.md is the front page, written by hand from those pages.
* what a section says about its run: `taken()` (when, UTC) and `load()` (the
  load average); `timed(fn)` for one timed call and `in_turn(variants, rep)`, the
  order of interleaved repetitions (`runs_in_turn`: each repetition's results, so ordered).
* `run_checked(cmd, timeout_s=...)`: a command (`primus-pipeline emulate`, a torchrun) run
  from the repository root, its output captured; a RuntimeError with its stderr if it fails.
* small statistics helpers (median, spread) for interleaved repetitions.
* `cpu_counters()` / `steal_share(before, after)`: how much CPU time the
  hypervisor took between two readings (a noisy virtual machine's excuse, measured).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from typing import Callable, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def run_ranks(body, case: dict, world: int, *, timeout_s: float, pin: bool = True, sys_path=()) -> list:
    """Run body(rank, case) on `world` gloo ranks, pinned one per core; results indexed by rank.
    `sys_path`: directories first on the ranks' import path (fresh processes: local_ranks)."""
    from primus_megatron.runtime import local_ranks

    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    case = {"gloo_timeout": 300, **case}  # long benchmark runs: a generous collective timeout
    return local_ranks.run_ranks(body, case, world, timeout_s=timeout_s, pin=pin, sys_path=sys_path)


def parser(doc: str, parser_class: type = argparse.ArgumentParser, **kwargs) -> argparse.ArgumentParser:
    """A benchmark's parser: the first paragraph of its docstring as the description, the markdown options."""
    made = parser_class(description=doc.split("\n\n")[0], **kwargs)
    add_markdown_options(made)
    return made


def run_checked(cmd: list, *, timeout_s: float, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    """Run cmd from the repository root, its output captured as text; a RuntimeError naming it and the tail
    of its stderr where it exits non-zero."""
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout_s, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}: {proc.stderr[-1500:]}")
    return proc


# The page of docs/benchmarks/ each script's sections belong to (BENCHMARKS.md, the front page, links them).
PAGES = {
    "balanced_data_emulated.py": "balanced-data",
    "cp_profile.py": "runtime-cpu",
    "dsv3_layers.py": "deepseek-v3",
    "dummy_grad_memory.py": "runtime-cpu",
    "emulated_post_validation.py": "post-validation",
    "emulated_scale.py": "emulated",
    "fp8_profile.py": "fp8",
    "gpu_projection.py": "projection",
    "health_overhead.py": "health",
    "idle_rank_cost.py": "emulated",
    "interleaved_wins.py": "schedule-quality",
    "layer_splits.py": "runtime-cpu",
    "lowered_makespan.py": "schedule-quality",
    "mb_order.py": "balanced-data",
    "moe_cpu_profile.py": "moe-and-pairs",
    "moe_emulated.py": "moe-and-pairs",
    "moe_layers.py": "moe-and-pairs",
    "offload_emulated.py": "offload",
    "offload_memory.py": "offload",
    "offload_paper.py": "offload",
    "offload_plan.py": "offload",
    "p2p_strict_overhead.py": "runtime-cpu",
    "pairs_emulated.py": "moe-and-pairs",
    "pairs_simulated.py": "moe-and-pairs",
    "paper_tables.py": "schedule-quality",
    "planner_speed.py": "planner",
    "post_validation.py": "post-validation",
    "recv_stall.py": "recv-stall",
    "runtime_throughput.py": "runtime-cpu",
    "schedule_quality.py": "schedule-quality",
    "soak.py": "runtime-cpu",
    "v_schedules_vs_sailsg.py": "schedule-quality",
    "w_host_cost.py": "runtime-cpu",
    "wgrad_fusion.py": "runtime-cpu",
}


def default_page() -> Optional[str]:
    """The running script's page (`PAGES`), or None for a script without one."""
    script = os.path.basename(getattr(sys.modules.get("__main__"), "__file__", None) or "")
    page = PAGES.get(script)
    return os.path.join(ROOT, "docs", "benchmarks", f"{page}.md") if page else None


def add_markdown_options(parser) -> None:
    """Where a benchmark writes its section: --markdown FILE (default: its docs/benchmarks page), or
    --no-markdown to print only."""
    page = default_page()
    shown = os.path.relpath(page, ROOT) if page else "none: give one"
    parser.add_argument("--markdown", default=page,
                        help=f"file whose section this benchmark replaces (default: {shown})")
    parser.add_argument("--no-markdown", action="store_true", help="print only; do not touch the markdown file")


def table(headers, rows) -> str:
    """A markdown table; a '|' inside a cell is escaped so that it cannot split the cell."""
    def line(cells) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(headers), "|" + "---|" * len(headers)] + [line(row) for row in rows])


def command_block(command: str) -> str:
    """Every section starts with the command that reproduces its numbers."""
    return f"Command (from the repository root, in the project's virtualenv):\n\n```\n{command}\n```\n"


def method(doc: str) -> str:
    """A script's docstring past its title and usage paragraphs: how it measures, as its section says."""
    return doc.split("\n\n", 2)[2].strip()


def section(command: str, *parts: str) -> str:
    """A section's text: the command block, then each non-empty part, one blank line between them."""
    return "\n\n".join([command_block(command).rstrip("\n"), *(p.strip("\n") for p in parts if p)]) + "\n"


def publish(args, title: str, text: str, name: str) -> None:
    """Print the section's text; unless --no-markdown, replace section `title` of args.markdown with it."""
    print(text)
    if not args.no_markdown and args.markdown is None:
        raise SystemExit(f"{name}: error: --markdown: this script has no page under docs/benchmarks/ (PAGES in "
                         f"benchmarks/_common.py); give the page's path, or --no-markdown")
    if not args.no_markdown:
        write_section(args.markdown, title, text)
        print(f"{name}: wrote the '{title}' section of {args.markdown}", flush=True)


def write_section(path: str, title: str, body: str) -> None:
    """Replace (or append) the section `title` (a '## ' line) of `path`; nothing else changes."""
    from primus_megatron.schedules.atomic_file import atomic_write

    old = open(path, encoding="utf-8").read() if os.path.exists(path) else "# Benchmarks\n"
    section = f"{title}\n\n{body.strip()}\n"
    lines = old.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == title), None)
    if start is None:
        new = old.rstrip("\n") + "\n\n" + section
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        tail = "".join(lines[end:])
        new = "".join(lines[:start]) + section + ("\n" + tail if tail else "")
    atomic_write(path, new)


def cpu_counters() -> Optional[tuple[int, int]]:
    """(steal, total) CPU ticks of all cores since boot, from /proc/stat; None where there is none."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice: already counted in user/nice]
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def steal_share(before: Optional[tuple[int, int]], after: Optional[tuple[int, int]]) -> Optional[float]:
    """Share of the CPU time between two `cpu_counters()` readings that the hypervisor took."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def median(values) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def quartiles(values) -> tuple[float, float]:
    """(25th, 75th) percentile, linear interpolation; (x, x) for one value."""
    xs = sorted(v for v in values if v == v)
    if not xs:
        return float("nan"), float("nan")

    def pct(p: float) -> float:
        k = (len(xs) - 1) * p
        lo = int(k)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

    return pct(0.25), pct(0.75)


def ratio_cell(values, digits: int = 3) -> str:
    """'median [q1-q3]' of a list of ratios."""
    q1, q3 = quartiles(values)
    return f"{median(values):.{digits}f} [{q1:.{digits}f}-{q3:.{digits}f}]"


def ms_cell(seconds, digits: int = 0) -> str:
    """'median (min-max)' in milliseconds."""
    xs = [1e3 * s for s in seconds if s == s]
    if not xs:
        return "n/a"
    return f"{median(xs):.{digits}f} ({min(xs):.{digits}f}-{max(xs):.{digits}f})"


def command_line(script: str, argv=None) -> str:
    """The command that ran `script` with `argv` (default: this process's), without the markdown options:
    where the section is written does not change its numbers."""
    import shlex

    args, kept = list(sys.argv[1:] if argv is None else argv), []
    while args:
        arg = args.pop(0)
        if arg == "--markdown":
            args[:1] = []  # and its value
        elif arg != "--no-markdown" and not arg.startswith("--markdown="):
            kept.append(arg)
    return "python " + shlex.join([script, *kept])


def taken() -> str:
    """When a measurement was taken, as sections say it: 'YYYY-MM-DD HH:MM UTC'."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def load() -> float:
    """The 1-minute load average: how busy the shared machine was while a benchmark ran."""
    return os.getloadavg()[0]


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """(seconds one call of fn() takes, what it returned); perf_counter: one clock for all processes on Linux."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def runs_in_turn(variants, reps: int, run: Callable[[object], object]) -> dict:
    """{variant: [run(variant) of each repetition]}: `reps` repetitions, the variants in turn (`in_turn`)."""
    out: dict = {v: [] for v in variants}
    for rep in range(reps):
        for variant in in_turn(variants, rep):
            out[variant].append(run(variant))
    return out


def in_turn(variants: list, rep: int) -> list:
    """The variants in repetition `rep`'s order: each leads in turn, so that a drift of the shared machine's
    speed within a repetition weighs on every variant alike (two variants: they alternate)."""
    k = rep % len(variants)
    return list(variants[k:]) + list(variants[:k])
