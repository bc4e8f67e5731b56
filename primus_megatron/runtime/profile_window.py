"""The runner's profiling window: training steps [start, end) are measured (op times, p2p,
activation memory); at its end every rank gets the same per-stage costs, and
`--pipeline-profile-out` gets the per-layer cost model fitted to them."""
from __future__ import annotations

from typing import Callable, Optional

import torch.distributed as dist

from .. import schedules as S


class ProfilingWindow:
    """Counts training steps; hands the executor a Profile while the step is inside the window."""

    def __init__(self, window: Optional[tuple[int, int]], *, profile_out: Optional[str] = None,
                 log: Callable[[str], None] = lambda text: None) -> None:
        self.window = window
        self.profile_out = profile_out  # where the cost model fitted to the measurements goes (rank 0)
        self.log = log
        self.training_steps = 0
        self.profile = None
        self.measured: Optional[tuple[S.Costs, dict]] = None

    def open_for(self, forward_only: bool):
        """The Profile this step records into, or None (evaluation and steps outside the window)."""
        if forward_only or self.window is None or not self.window[0] <= self.training_steps < self.window[1]:
            return None
        if self.profile is None:
            from .profiler import Profile

            self.profile = Profile()
        return self.profile

    def step_done(self, forward_only: bool, profiled: bool) -> bool:
        """Count a finished step; True when it closed the window."""
        if forward_only:
            return False
        self.training_steps += 1
        return profiled and self.training_steps == self.window[1]

    def unwritten(self) -> Optional[str]:
        """At the run's end: why --pipeline-profile-out was not written (the run ended before the
        window closed, e.g. resumed with fewer steps left), in one sentence; None when it was
        written or not asked for."""
        if not self.profile_out or self.window is None or self.measured is not None:
            return None
        start, end = self.window
        return (f"--pipeline-profile-out {self.profile_out} was not written: the profile needs {end} training "
                f"steps ({start} warm-up, then --pipeline-profile-steps {end - start} measured) and this run ran "
                f"{self.training_steps}; run at least {end} steps (a resumed run counts from its own first step) or "
                f"lower --pipeline-profile-steps")

    def finish(self, sched: S.Schedule, group, rank: int, shape, dtype, device, config=None) -> S.Costs:
        """Gather the measured costs (every rank gets the same), log them, write the profile file."""
        from .profiler import agree_across_replicas, measure_p2p, measured_costs

        self.profile.comm.append(measure_p2p(group, rank, shape, dtype, device))
        costs, summary = measured_costs(self.profile, sched, group, rank)
        costs = agree_across_replicas(costs)  # one plan for every replica of the pipeline
        self.measured = (costs, summary)
        if self.profile_out and dist.get_rank() == 0 and config is not None:
            write_profile(self.profile_out, costs, sched, config, self.log)
        ms = lambda xs: ", ".join(f"{1e3 * x:.2f}" for x in xs)  # noqa: E731
        # one line per kind: a terminal shows each whole at the pipeline sizes a dry run has
        self.log(f"measured per-stage costs (ms) over {self.profile.steps} steps:\n  F [{ms(summary['f'])}]\n"
                 f"  B [{ms(summary['b'])}]\n  W [{ms(summary['w'])}]\n  p2p {1e3 * summary['comm']:.3f}; one "
                 f"microbatch's activations on a rank: {summary['unit_bytes'] / 2**20:.2f} MiB")
        return costs


def write_profile(path: str, costs: S.Costs, sched: S.Schedule, config, log: Callable[[str], None]) -> None:
    """Per-layer, embedding and head costs fitted to this run's per-stage
    measurements, for `primus-pipeline balance` or `--pipeline-balance FILE`."""
    from ..schedules import balance
    from ..schedules.layer_split import LayerSplit

    split = LayerSplit.from_config(config)
    model = balance.fit(costs, split, sched.pp, sched.chunks_per_rank)
    balance.save_profile(path, model, meta={
        "schedule": sched.name, "pp": sched.pp, "microbatches": sched.microbatches, "num_layers": split.num_layers,
        "split": balance.flags(split) or "even", "units": "seconds", "hidden_size": config.hidden_size})
    log(f"profile written to {path}: per layer F {1e3 * model.layer.f:.2f} B "
        f"{1e3 * model.layer.b:.2f} W {1e3 * model.layer.w:.2f} ms, head (output layer and loss) F "
        f"{1e3 * model.head.f:.2f} B {1e3 * model.head.b:.2f} W {1e3 * model.head.w:.2f} ms; "
        f"`primus-pipeline balance --profile {path} ...` gives the split for any schedule")
