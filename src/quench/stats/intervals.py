"""95% intervals by a seeded bootstrap over problems (Efron & Tibshirani, 1993, ch. 13: percentile intervals).

Every metric in quench is a mean over problems of a per-problem value (pass@k of some count) or, for
Robust Drop, a ratio of two such means. A resample draws the problems with replacement; all metrics of
one group are computed on the same resample, so the nominal and perturbed results of a problem stay
paired (RD = 1 − RP/Pass is computed per resample, not from two independent intervals). With n > 1
samples the per-problem value is the unbiased pass@k of that problem's samples: problems are
resampled, samples are not.

Problems are taken in a canonical order (sorted by task id, then variant) before they are resampled,
so the same results give the same interval whatever order their samples came in: a resample is a row
of counts over that order, a function of (seed, number of problems) only.

Where every problem has the same value the bootstrap has no width, which would claim a certainty the
problems cannot give (0 of 4 is not [0, 0]); those intervals come from `small_counts` instead (exact
Clopper-Pearson bounds for 0 of N and N of N) and say so in their `method`.

A share of successes in independent trials (variants labelled by reading them) takes Wilson's score
interval (`wilson_interval`).

A resample is a row of counts (how often each problem was drawn), so the mean over 2,000 resamples is
one matrix product: counts (B, N) @ values (N, M) / N.

numpy is imported in the functions that use it: the CLI imports this module to build its `--help`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Hashable, Mapping, TypeVar

from quench.stats.small_counts import WILSON, share_bounds, signed_bounds, wilson_bounds

BOOTSTRAP = "bootstrap"
Value = TypeVar("Value")


TOO_FEW_NOMINAL = "too few nominal passes"


@dataclass(frozen=True)
class BootstrapConfig:
    resamples: int = 2000  # B: bootstrap resamples of the problems
    seed: int = 0  # the resamples are a function of (seed, number of problems) only
    confidence: float = 0.95  # two-sided percentile interval
    min_nominal_passes: int = 10  # RD is reported only if at least this many problems pass nominally


@dataclass(frozen=True)
class Interval:
    """A point estimate with its percentile interval; low/high are None when there is no interval."""

    point: float | None
    low: float | None
    high: float | None
    problems: int  # the problems the metric averages over (the unit resampled)
    note: str | None = None  # why the value is not reported, e.g. "too few nominal passes"
    method: str = BOOTSTRAP  # "bootstrap", or "exact"/"wilson" where every problem had the same value

    @property
    def reported(self) -> bool:
        return self.note is None and self.point is not None

    def to_json(self) -> dict:
        data = {"point": self.point, "low": self.low, "high": self.high, "problems": self.problems}
        if self.low is not None:
            data["method"] = self.method
        return data | ({"note": self.note} if self.note else {})

    @classmethod
    def from_json(cls, data: Mapping) -> Interval:
        return cls(data["point"], data["low"], data["high"], data["problems"], data.get("note"),
                   data.get("method", BOOTSTRAP))


def canonical(values: Mapping[Hashable, Value]) -> list[Value]:
    """The values of a per-problem mapping in the order problems are resampled: sorted by key."""
    return [values[key] for key in sorted(values, key=_sort_key)]


def _sort_key(key: Hashable) -> tuple:
    return tuple(map(str, key)) if isinstance(key, tuple) else (str(key),)


@lru_cache(maxsize=16)
def resample_counts(problems: int, resamples: int, seed: int) -> np.ndarray:
    """(B, N) integer counts: how often each of N problems is drawn in each of B resamples."""
    import numpy as np
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(problems, np.full(problems, 1.0 / problems), size=resamples)  # (B, N)
    counts.flags.writeable = False
    return counts


def resampled_means(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Mean of each column of `values` (N, M) in each resample of `counts` (B, N): (B, M)."""
    return counts @ values / values.shape[0]


def _bounds(samples: np.ndarray, confidence: float) -> tuple[float | None, float | None]:
    import numpy as np
    finite = samples[np.isfinite(samples)]
    if finite.size == 0:
        return None, None
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(finite, [tail, 100.0 - tail])
    return float(low), float(high)


def _same_everywhere(column: np.ndarray) -> bool:
    """Every problem has the same value: the bootstrap would give a zero-width interval."""
    return bool(column.size) and float(column.min()) == float(column.max())


def mean_intervals(values: np.ndarray, config: BootstrapConfig) -> list[Interval]:
    """One interval per column of `values` (N problems in canonical order, M metrics), all from the same
    resamples; a column with one value on every problem takes `small_counts.share_bounds`."""
    import numpy as np
    values = np.asarray(values, dtype=float).reshape(len(values), -1)  # (N, M)
    problems = values.shape[0]
    if problems == 0:
        return [Interval(None, None, None, 0) for _ in range(values.shape[1])]
    means = resampled_means(values, resample_counts(problems, config.resamples, config.seed))  # (B, M)
    points = values.mean(axis=0)
    intervals = []
    for m in range(values.shape[1]):
        point = float(points[m])
        if _same_everywhere(values[:, m]):
            low, high, rule = share_bounds(point, problems, config.confidence)
            intervals.append(Interval(point, low, high, problems, method=rule))
        else:
            intervals.append(Interval(point, *_bounds(means[:, m], config.confidence), problems))
    return intervals


def _signed_interval(point: float | None, samples: np.ndarray, trials: int, problems: int,
                     confidence: float) -> Interval:
    """A drop or difference interval from its resampled values; where they all agree, `signed_bounds`
    over `trials` (the problems the value is a share of) replaces the zero-width bootstrap."""
    import numpy as np
    finite = samples[np.isfinite(samples)]
    if finite.size and float(finite.min()) == float(finite.max()) and trials > 0:
        low, high, rule = signed_bounds(float(finite[0]), trials, confidence)
        return Interval(point, low, high, problems, method=rule)
    return Interval(point, *_bounds(samples, confidence), problems)


def drop_ratio(nominal: np.ndarray, robust: np.ndarray) -> np.ndarray:
    """RD = (Pass − RP) / Pass elementwise; 0/0 is 0, x/0 (x ≠ 0) is NaN (undefined)."""
    import numpy as np
    nominal, robust = np.asarray(nominal, dtype=float), np.asarray(robust, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (nominal - robust) / nominal
    ratio = np.where((nominal == 0) & (robust == 0), 0.0, ratio)
    return np.where((nominal == 0) & (robust != 0), np.nan, ratio)


def drop_interval(
    nominal: np.ndarray, robust: np.ndarray, nominal_passing: int, config: BootstrapConfig
) -> Interval:
    """Interval of RD from per-problem nominal and worst-case values (N,), resampled as pairs.

    `nominal_passing` is the number of problems with a nominal pass; below `min_nominal_passes` a
    drop rests on too few problems to mean anything and no interval is given.
    """
    import numpy as np
    nominal, robust = np.asarray(nominal, dtype=float), np.asarray(robust, dtype=float)
    problems = len(nominal)
    if problems == 0:
        return Interval(None, None, None, 0)
    point = float(drop_ratio(nominal.mean(), robust.mean()))
    point_or_none = None if np.isnan(point) else point
    if nominal_passing < config.min_nominal_passes:
        return Interval(point_or_none, None, None, problems, TOO_FEW_NOMINAL)
    counts = resample_counts(problems, config.resamples, config.seed)
    means = resampled_means(np.stack([nominal, robust], axis=1), counts)  # (B, 2): the same draw for both
    return _signed_interval(point_or_none, drop_ratio(means[:, 0], means[:, 1]), nominal_passing, problems,
                            config.confidence)


def paired_difference(values_a: np.ndarray, values_b: np.ndarray, config: BootstrapConfig) -> Interval:
    """Interval of mean(B) − mean(A) over the same problems, both runs resampled together."""
    import numpy as np
    differences = np.asarray(values_b, dtype=float) - np.asarray(values_a, dtype=float)  # (N,)
    problems = len(differences)
    if problems == 0:
        return Interval(None, None, None, 0)
    means = resampled_means(differences[:, None], resample_counts(problems, config.resamples, config.seed))[:, 0]
    return _signed_interval(float(differences.mean()), means, problems, problems, config.confidence)


def paired_drop_difference(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], passing: int, config: BootstrapConfig
) -> Interval:
    """Interval of RD(B) − RD(A): `a` and `b` are (nominal, robust) per-problem values, one resample for all."""
    import numpy as np
    stacked = np.stack([a[0], a[1], b[0], b[1]], axis=1).astype(float)  # (N, 4)
    problems = stacked.shape[0]
    means = stacked.mean(axis=0)
    point = float(drop_ratio(means[2], means[3]) - drop_ratio(means[0], means[1]))
    point_or_none = None if np.isnan(point) else point
    if problems == 0:
        return Interval(None, None, None, 0)
    if passing < config.min_nominal_passes:
        return Interval(point_or_none, None, None, problems, TOO_FEW_NOMINAL)
    resampled = resampled_means(stacked, resample_counts(problems, config.resamples, config.seed))  # (B, 4)
    differences = drop_ratio(resampled[:, 2], resampled[:, 3]) - drop_ratio(resampled[:, 0], resampled[:, 1])
    return _signed_interval(point_or_none, differences, passing, problems, config.confidence)


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> Interval:
    """Wilson's score interval for a share of `successes` in `trials` (Wilson 1927; Agresti & Coull 1998):
    unlike a bootstrap it stays inside (0, 1) and keeps its coverage when the share is near 0 or 1."""
    if trials == 0:
        return Interval(None, None, None, 0)
    share = successes / trials
    return Interval(share, *wilson_bounds(share, trials, confidence), trials, method=WILSON)
