"""Bounds for the case the bootstrap cannot see: every problem with the same value.

A percentile bootstrap over problems draws only values it has seen, so when every problem passes (or
every problem fails) each resample has the same mean and the interval collapses to a point: 0 of 4
passing would read `[0.0%, 0.0%]`, a certainty four problems cannot give. Where that happens quench
reports instead

- the exact Clopper-Pearson interval (Clopper & Pearson, 1934) for 0 of N and N of N, which has the
  closed form [0, 1 − (α/2)^(1/N)] and [(α/2)^(1/N), 1];
- Wilson's score interval (Wilson, 1927) for any other common value v (possible only with several
  samples per problem), with v as the share and the N problems as the trials.
"""

from __future__ import annotations

import math
from statistics import NormalDist

EXACT = "exact"  # Clopper-Pearson, 0 of N or N of N
WILSON = "wilson"  # Wilson's score interval


def wilson_bounds(share: float, trials: int, confidence: float) -> tuple[float, float]:
    """Wilson's score interval of `share` observed in `trials` (Agresti & Coull, 1998, eq. 2)."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    centre = (share + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z / (1 + z * z / trials) * math.sqrt(share * (1 - share) / trials + z * z / (4 * trials * trials))
    return max(0.0, centre - half), min(1.0, centre + half)


def share_bounds(share: float, trials: int, confidence: float) -> tuple[float, float, str]:
    """Bounds of a share in [0, 1] seen as the same value on all `trials` problems, and the rule used."""
    tail = (1.0 - confidence) / 2.0
    if share <= 0.0:
        return 0.0, 1.0 - tail ** (1.0 / trials), EXACT
    if share >= 1.0:
        return tail ** (1.0 / trials), 1.0, EXACT
    low, high = wilson_bounds(share, trials, confidence)
    return low, high, WILSON


def signed_bounds(value: float, trials: int, confidence: float) -> tuple[float, float, str]:
    """Bounds of a value in [−1, 1] (a difference or a drop) seen the same on all `trials` problems.

    A difference of 0 means no problem differed: the share that differs is 0 of N, so the difference
    lies within ± that share's upper bound. Any other value is bounded by its size, keeping its sign.
    """
    if value == 0.0:
        _, high, rule = share_bounds(0.0, trials, confidence)
        return -high, high, rule
    low, high, rule = share_bounds(min(abs(value), 1.0), trials, confidence)
    return (low, high, rule) if value > 0 else (-high, -low, rule)
