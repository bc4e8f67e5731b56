"""A sample's compute cost a*s^2 + b*s (attention grows with the square of its length s, the rest
linearly), and its fit to measured microbatch times."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable, Sequence, Tuple


@dataclass(frozen=True)
class SampleCost:
    """Cost of one sample of s tokens: a*s^2 + b*s, in whatever unit a and b were measured in."""

    a: float
    b: float

    def __post_init__(self) -> None:
        # a zero or negative cost would let a splitter pile samples on one replica for free
        if self.a < 0 or self.b < 0 or self.a + self.b <= 0:
            raise ValueError(f"a sample cost needs a >= 0, b >= 0 and not both 0, got a={self.a}, b={self.b}")

    def of(self, s: int) -> float:
        return self.a * s * s + self.b * s

    def of_microbatch(self, lengths: Iterable[int]) -> float:
        """A packed microbatch costs the sum of its samples (packing keeps attention per sample)."""
        return sum(self.of(s) for s in lengths)


def fit_cost(observations: Iterable[Tuple[Sequence[int], float]]) -> SampleCost:
    """Least-squares a and b from (a microbatch's sample lengths, its measured time) pairs.

    A microbatch's time is a * sum(s^2) + b * sum(s); the 2x2 normal equations are solved in
    exact fractions so a degenerate set (sum(s^2) proportional to sum(s) in every observation:
    one length throughout, or a single microbatch) is refused rather than fitted to rounding noise.
    """
    s11 = s12 = s22 = s1t = s2t = Fraction(0)
    for lengths, time in observations:
        x1, x2, t = Fraction(sum(s * s for s in lengths)), Fraction(sum(lengths)), Fraction(time)
        s11, s12, s22, s1t, s2t = s11 + x1 * x1, s12 + x1 * x2, s22 + x2 * x2, s1t + x1 * t, s2t + x2 * t
    det = s11 * s22 - s12 * s12
    if det == 0:
        raise ValueError("cannot fit a*s^2 + b*s: in every observation sum(s^2) is proportional to sum(s) "
                         "(one sample length throughout, or one microbatch), so a and b are not both determined")
    a, b = (s1t * s22 - s2t * s12) / det, (s2t * s11 - s1t * s12) / det
    # A negative coefficient is measurement noise (time never falls as a sample grows): clamp it to
    # 0 and refit the other one alone, so the cost stays positive and monotone in s.
    if a < 0:
        a, b = Fraction(0), s2t / s22
    elif b < 0:
        a, b = s1t / s11, Fraction(0)
    if a <= 0 and b <= 0:
        raise ValueError("cannot fit a*s^2 + b*s: the measured times are not positive")
    return SampleCost(float(a), float(b))
