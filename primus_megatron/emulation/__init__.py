"""Emulated devices: a real pipeline on P local CPU ranks whose ops take given times.

`primus-pipeline emulate` (cli.py parses and checks its options, then calls `command`), the
tests and the benchmarks run schedules here with the real runtime (executor, strict NCCL-order
p2p, weight-gradient store, post-validation) and compare them with the simulator and with
megatron's and torch's schedules run in the same processes. Its parts:

  chunks.py        emulated model chunks: F, B and W as timed waits, p2p latency as send stamps
                   (torch)
  torch_stages.py  torch.distributed.pipelining's stages and runner on emulated chunks (torch)
  optimizer.py     the emulated optimizer step
  variants.py      what runs: a `Variant` per schedule, its op times and its simulation
  baselines.py     megatron's and torch's schedules run for comparison: names, plans, refusals (megatron's
                   combined 1F1B as its order and pairs in our IR, run by our runtime)
  planning.py      our schedule's plan (`auto` and cost-driven orders charged the host work per op)
  launch.py        starting the ranks (`runtime.local_ranks`), the runner per variant, the steps
  replicas.py      dp replicas of a pp-rank pipeline on dp x pp ranks, each its own microbatch count
                   and factors per step (`--pipeline-balance-data`), meeting at the gradient all-reduce
  measure.py       the measured spans turned into the simulator's numbers and the host costs
  reporting.py     the report: JSON object, text table, failures, trace spans
  command.py       what `primus-pipeline emulate` runs once its options are checked

Only chunks.py and torch_stages.py import torch at module level; importing this package does not.
"""
from .baselines import (BASELINES, MEGATRON_1F1B, MEGATRON_COMBINED, MEGATRON_INTERLEAVED, TORCH_BASELINES,
                        torch_variant)
from .launch import default_p2p_timeout, measure_op_overhead, run
from .measure import host_costs, host_gaps, launch_costs, summarise
from .planning import AUTO, choose, plan, planning_costs
from .replicas import ReplicaRun, run_replicas, simulated_makespans
from .reporting import first_failure, report, report_text, spans
from .variants import Variant, for_layout, make_variant, simulated, with_host_work

__all__ = ["AUTO", "BASELINES", "MEGATRON_1F1B", "MEGATRON_COMBINED", "MEGATRON_INTERLEAVED", "TORCH_BASELINES",
           "Variant", "choose", "default_p2p_timeout", "first_failure", "for_layout", "host_costs", "host_gaps",
           "launch_costs", "make_variant", "measure_op_overhead", "plan", "planning_costs", "ReplicaRun", "report",
           "report_text", "run", "run_replicas", "simulated", "simulated_makespans", "spans", "summarise",
           "torch_variant", "with_host_work"]
