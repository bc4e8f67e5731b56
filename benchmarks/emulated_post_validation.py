"""Iteration time with and without post-validation on emulated devices (`emulated_scale.py --post-validation`).

Every iteration ends with the emulated optimizer step (`emulation/optimizer.py`, `EmulatedOptimizer`): the
synchronous step is megatron's (a real all-reduce of the gradient norm over every rank, then the
timed step), which every rank waits for; under `--optimizer-post-validation` our schedule steps
without that synchronisation and checks the step inside the next iteration's prefix
(`optim.PostValidationOptimizer`). Steps run back to back (no barrier), so the iteration is the
slowest rank's period over the measured steps. The straggler rows make the last rank's optimizer
step `--straggler-factor` times longer (one slow node). Each plan is made for the objective it runs
under (the makespan for the synchronous step, the longest rank's span under post-validation).
cpu/op: every rank's CPU time in the median step (all threads, the optimizer step included) per
emulated op; cores busy: that CPU time over the step's makespan, of this machine's 2 (near 2, ranks
wait for a core and the measured time includes it).
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402



def _variants(setting, scale: float, step_s: float) -> list:
    from primus_megatron import emulation as E
    from primus_megatron import schedules as S

    p, m = setting.pp, setting.microbatches
    costs = setting.costs()
    out = []
    for label, name, kw in (("zb-h1", "zb-h1", {}), ("zb-auto 2x", "zb-auto", {"memory_limit": 2 * p})):
        for pv in (False, True):
            sched = S.generate(name, p, m, costs=costs, post_validation=pv, **kw)
            v = E.make_variant(f"{label} {'post-validated' if pv else 'synchronous'}", sched, costs, scale=scale)
            v.post_validation = pv
            # the simulator's iteration: makespan + step, or (no synchronisation) the longest rank's span + step
            v.simulated["iteration"] = step_s + (scale * max(S.simulate(sched, costs).span) if pv
                                                 else v.simulated["makespan"])
            out.append(v)
    out.append(E.make_variant("megatron-1f1b synchronous", S.generate("1f1b", p, m), costs, scale=scale,
                              megatron=True))
    out[-1].simulated["iteration"] = step_s + out[-1].simulated["makespan"]
    return out


def run_table(names: list, table: dict, args) -> str:
    from primus_megatron import emulation as E

    scale = args.scale / 1000.0
    step_s = args.optimizer_ms * scale
    rows = []
    for name in names:
        setting, _ = table[name]
        vs = _variants(setting, scale, step_s)
        for straggler in (None, setting.pp - 1) if args.straggler_factor > 1 else (None,):
            spec = {"step_s": step_s}
            if straggler is not None:
                spec.update(straggler_rank=straggler, straggler_factor=args.straggler_factor)
            load, t0 = C.load(), time.perf_counter()
            try:
                results, _ = E.run(vs, setting.pp, setting.microbatches, elements=int(args.activation_kib * 256),
                                   steps=args.pv_steps, warmup=1, p2p_mode=args.p2p_mode,
                                   p2p_timeout_s=args.p2p_timeout, optimizer=spec)
            except (RuntimeError, TimeoutError) as exc:
                rows.append([name, "-", "launch failed", E.first_failure(str(exc)), "", "", "", "", "", f"{load:.1f}"])
                continue
            print(f"{name} straggler={straggler}: {time.perf_counter() - t0:.0f} s, load {load:.1f}",
                  file=sys.stderr, flush=True)
            sync = {}
            for v, r in zip(vs, results):
                base = v.label.rsplit(" ", 1)[0]
                if not v.post_validation:
                    sync[base] = r["iteration"]
                gain = "" if not v.post_validation else f"{sync[base] / r['iteration'] - 1:+.1%}"
                rows.append([name, "none" if straggler is None else f"rank {straggler} x{args.straggler_factor:g}",
                             v.label, f"{1e3 * r['iteration']:.0f}", f"{1e3 * v.simulated['iteration']:.0f}", gain,
                             f"{r['iteration'] / v.simulated['iteration'] - 1:+.1%}", f"{1e3 * r['cpu_per_op']:.2f}",
                             f"{r['cores_busy']:.2f}", f"{load:.1f}"])
    head = (__doc__.split("\n\n", 1)[1].strip() + "\n\n"
            f"Scale: {args.scale:g} ms per paper ms; optimizer step {args.optimizer_ms:g} paper ms; p2p {args.p2p_mode}; "
            f"{args.pv_steps} measured steps after one warm-up; taken {C.taken()} "
            f"(2 cores shared with other work; load: 1-minute load average when the launch started).\n\n")
    return head + C.table(["setting", "straggler", "schedule", "iteration ms (measured)",
                           "simulated (no straggler)", "post-validation gain", "measured / simulated",
                           "cpu/op ms", "cores busy", "load"], rows)
