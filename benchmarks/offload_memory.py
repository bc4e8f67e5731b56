"""Measured device-resident activation memory against the simulator's, with and without offload (CPU, pp=4).

    python benchmarks/offload_memory.py                 # prints the table and writes its section of docs/benchmarks/offload.md
    python benchmarks/offload_memory.py --no-markdown

Four gloo ranks (one core each where there are four) run a small GPTModel under every schedule
(zb-optimal aside: an ILP per call) with `--pipeline-offload` off, all and auto (auto under a
memory limit of half the largest rank's simulated peak without offload). `all` and `auto` move
F's saved activations and, under schedules with W ops, W shares: what a B keeps for its W, to
host after the B and back before the W. Per schedule, two
profiled steps without offload measure the costs (the profiler's graph walk: what the planner
plans with); each mode then runs one step in which the offload bandwidth is measured at start-up
(`runtime.offload.measured_bandwidth`) and one measured step under the plan made with it.

measured: the largest resident bytes at any op's start or end of that step, from torch's
allocator events (`runtime.resident`: blocks allocated since the step started and not yet freed,
the offload host pool's copies excluded; the autograd graph is never read). Gradients exist
before the step (zeroed in place), so the baseline holds parameters, gradients and optimizer
state. simulated: `runtime.resident.simulated_peak`, the simulator's peak for the plan that ran
(its offload set and reload points) under the profiled costs, times the profile's bytes per
activation unit; on CPU the host pool copies on the compute thread, each copy done before the
next op starts, so the prediction times the copies so (free lanes) rather than overlapping the
next ops as on GPU. error: the worst rank's |measured - simulated| / simulated.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

TITLE = "## Activation offload: measured resident memory against the simulator (CPU, pp=4)"
MODEL = {"num_layers": 32, "hidden": 64, "heads": 8, "seq": 256, "mbs": 1, "vocab": 256}
MODES = ("off", "all", "auto")
AUTO_LIMIT = 0.5  # auto's memory limit: this share of the largest rank's simulated peak without offload


def _step(runner, model, batches, cfg: dict, m: int) -> None:
    runner(forward_step_func=_forward_step, data_iterator=iter(batches), model=model if len(model) > 1 else model[0],
           num_microbatches=m, seq_length=cfg["seq"], micro_batch_size=cfg["mbs"], decoder_seq_length=cfg["seq"])


def _forward_step(data_iterator, model):
    import runtime_throughput as R

    return R.forward_step(data_iterator, model)


def resident_body(rank: int, case: dict) -> dict:
    """Per (schedule, mode): this rank's measured and simulated peak resident bytes (module doc)."""
    import math

    import runtime_throughput as R

    import primus_megatron as pm
    from primus_megatron import schedules as S
    from primus_megatron.runtime.resident import ResidentMemory, simulated_peak

    cfg, pp, m = case["model"], case["pp"], case["m"]
    batches = R.make_batches(cfg, m)
    out = {}
    for name in case["schedules"]:
        model = R.build(cfg, name, pp)
        profiler = pm.get_forward_backward_func(name, profile_steps=(1, 2), p2p_timeout_s=120)
        for _ in range(2):
            _step(profiler, model, batches, cfg, m)
        costs, summary = profiler.measured
        off_peak = None
        for mode in case["modes"]:
            limit = None
            if mode == "auto":
                off_peak = off_peak or max(S.simulate(S.generate(name, pp, m, costs=costs), costs).peak_memory)
                limit = AUTO_LIMIT * off_peak
            runner = pm.get_forward_backward_func(name, costs=costs, offload=mode, memory_limit=limit,
                                                  p2p_timeout_s=120, offload_bandwidth=case.get("bandwidth"))
            _step(runner, model, batches, cfg, m)  # the start-up step: measures the bandwidth
            for chunk in model:  # gradients exist, zeroed in place: not part of what the step allocates
                chunk.zero_grad(set_to_none=False)
            with ResidentMemory() as memory:
                _step(runner, model, batches, cfg, m)
            out[(name, mode)] = {
                "measured": memory.peak_at_ops(runner.last_step.timeline),
                "simulated": simulated_peak(runner, pp, m, costs, summary["unit_bytes"], rank),
                "offloaded": runner.last_step.offloaded, "offloaded_w": runner.last_step.offloaded_w,
                "bandwidth": runner.spec.offload_bandwidth or math.inf,
                "host_peak": memory.host_bytes_peak}
        del model, profiler
    return out


def run(schedules, modes=MODES, *, pp: int = 4, m: int = 8, model: dict = MODEL, timeout_s: float = 3000) -> list:
    return C.run_ranks(resident_body, {"pp": pp, "m": m, "model": model, "schedules": list(schedules),
                                       "modes": list(modes)}, pp, timeout_s=timeout_s)


def rows(per_rank: list, schedules, modes) -> list:
    out = []
    for name in schedules:
        for mode in modes:
            cells = [r[(name, mode)] for r in per_rank]
            errors = [abs(c["measured"] - c["simulated"]) / c["simulated"] for c in cells]
            mib = lambda x: f"{x / 2**20:.2f}"  # noqa: E731
            out.append([name, mode, sum(c["offloaded"] for c in cells), sum(c["offloaded_w"] for c in cells),
                        f"{min(c['bandwidth'] for c in cells):.3g}" if mode != "off" else "-",
                        " / ".join(mib(c["measured"]) for c in cells), " / ".join(mib(c["simulated"]) for c in cells),
                        f"{100 * max(errors):.1f}%"])
    return out


def main(argv=None) -> int:
    from primus_megatron import schedules as S

    parser = C.parser(__doc__)
    parser.add_argument("--schedules", default=",".join(n for n in S.names() if n != "zb-optimal"))
    parser.add_argument("-m", type=int, default=8, help="microbatches (default 8)")
    args = parser.parse_args(argv)
    schedules = args.schedules.split(",")
    began = time.time()
    per_rank = run(schedules, m=args.m)
    head = ["schedule", "offload", "F ops offloaded", "W shares offloaded", "bandwidth (units)",
            "measured MiB (rank 0/1/2/3)", "simulated MiB", "worst error"]
    worst = max(float(r[-1].rstrip("%")) for r in rows(per_rank, schedules, MODES))
    text = C.section(
        C.command_line("benchmarks/offload_memory.py", argv),
        f"Model: {MODEL['num_layers']} layers, hidden {MODEL['hidden']}, {MODEL['heads']} heads, sequence "
        f"{MODEL['seq']}, micro-batch {MODEL['mbs']}, fp32; pp=4, {args.m} microbatches; auto's memory limit "
        f"{AUTO_LIMIT:g} of the largest simulated peak without offload. Peak resident activation bytes per rank "
        f"(allocator events at op boundaries, `runtime/resident.py`) against the simulator's for the plan "
        f"that ran; worst error over every cell: {worst:.1f}%. {time.time() - began:.0f} s on this machine, "
        f"taken {C.taken()}.",
        C.table(head, rows(per_rank, schedules, MODES)))
    C.publish(args, TITLE, text, "offload_memory")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
