"""A long-tail sample-length model for post-training data, scaled to a sequence length.

Post-training (SFT/RL) sets such as LongAlign-10k have a long tail: mean about 16.5K tokens,
longest 64K. We model a sample's length as log-normal, exp(N(mu, sigma^2)), with two facts:

  * the mean exp(mu + sigma^2 / 2) is the set's mean (LONGALIGN_MEAN = 16_500 tokens);
  * the set's longest sample (LONGALIGN_MAX = 65_536 tokens) sits at the 1 - 1/N quantile,
    N = LONGALIGN_SAMPLES = 10_000 (the set's size): of N draws, about one exceeds it.

With z the standard normal quantile of 1 - 1/N, ln(max / mean) = z * sigma - sigma^2 / 2, whose
smaller root is sigma = z - sqrt(z^2 - 2 ln(max / mean)) (the larger root puts most of the mean in
the far tail, unlike the data). For LongAlign: z = 3.719, sigma = 0.391, mu = 9.634 (median 15.3K,
5th percentile 8.0K, matching the set's 8K-64K range).

A draw is scaled by max_len / LONGALIGN_MAX (so the CPU model's seq_length 256 sees the same shape:
mean ~64 tokens, longest 256), rounded, and clipped to [min_len, max_len]. Draws come from
random.Random(seed), so a seed always gives the same list.
"""
from __future__ import annotations

import math
import random
from statistics import NormalDist
from typing import List, Tuple

LONGALIGN_MEAN = 16_500
LONGALIGN_MAX = 65_536
LONGALIGN_SAMPLES = 10_000


def lognormal_params(mean: float, maximum: float, population: int) -> Tuple[float, float]:
    """(mu, sigma) of the log-normal with this mean whose 1 - 1/population quantile is maximum."""
    if not 0 < mean < maximum:
        raise ValueError(f"the length model needs 0 < mean < maximum, got mean {mean} and maximum {maximum}")
    if population < 2:
        raise ValueError(f"the length model needs a population of at least 2 samples, got {population}")
    z = NormalDist().inv_cdf(1.0 - 1.0 / population)
    gap = math.log(maximum / mean)
    if z * z < 2 * gap:  # no log-normal has this mean and this quantile: the maximum is too far out
        raise ValueError(f"no log-normal has mean {mean} with {maximum} at its 1-1/{population} quantile")
    sigma = z - math.sqrt(z * z - 2 * gap)
    return math.log(mean) - sigma * sigma / 2, sigma


def sample_lengths(count: int, max_len: int, seed: int, *, min_len: int = 1, mean: float = LONGALIGN_MEAN,
                   maximum: float = LONGALIGN_MAX, population: int = LONGALIGN_SAMPLES) -> List[int]:
    """count lengths drawn from the model, scaled so `maximum` maps to max_len, clipped to [min_len, max_len]."""
    if not 1 <= min_len <= max_len:
        raise ValueError(f"lengths need 1 <= min_len <= max_len, got min_len {min_len} and max_len {max_len}")
    mu, sigma = lognormal_params(mean, maximum, population)
    rng = random.Random(seed)
    scale = max_len / maximum
    return [min(max_len, max(min_len, round(rng.lognormvariate(mu, sigma) * scale))) for _ in range(count)]


def longalign_batch(global_batch: int, seq_length: int, seed: int, *, min_len: int = 1) -> List[int]:
    """A global batch of LongAlign-shaped sample lengths for a model of this sequence length."""
    return sample_lengths(global_batch, seq_length, seed, min_len=min_len)
