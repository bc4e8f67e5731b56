"""Data balancing for post-training batches with long-tail sequence lengths (pure Python, no torch).

Attention costs grow with the square of a sample's length, so data-parallel replicas given equal
sample counts of long-tail data (SFT/RL) get very unequal work. Following ODC's LB-Mini, the
global batch is split over replicas by cost and each replica packs its share into its own number
of microbatches. Its parts:

  lengths.py  a log-normal long-tail length model matched to LongAlign, scaled to a sequence length
  cost.py     a sample's cost a*s^2 + b*s and its least-squares fit to measured microbatch times
  split.py    the global batch over dp replicas: contiguous, snake by cost, Karmarkar-Karp + refinement
  packing.py  one replica's samples into microbatches under a token cap: next fit, first fit decreasing
  plan.py     `BatchPlan` and `plan_batch`, the three modes of `--pipeline-balance-data`
"""
from .cost import SampleCost, fit_cost
from .lengths import LONGALIGN_MAX, LONGALIGN_MEAN, LONGALIGN_SAMPLES, lognormal_params, longalign_batch, sample_lengths
from .packing import first_fit_decreasing, next_fit
from .plan import MODES, BatchPlan, plan_batch
from .split import contiguous, karmarkar_karp, refine, snake

__all__ = ["LONGALIGN_MAX", "LONGALIGN_MEAN", "LONGALIGN_SAMPLES", "MODES", "BatchPlan", "SampleCost", "contiguous",
           "first_fit_decreasing", "fit_cost", "karmarkar_karp", "lognormal_params", "longalign_batch", "next_fit",
           "plan_batch", "refine", "sample_lengths", "snake"]
