"""The study's statistics: every interval and spread it reports, in one place.

* :func:`quartiles` and :func:`iqr`: the spread of timed samples (steps, batches);
* :func:`bootstrap_ratio`: a ratio of medians with its percentile bootstrap interval
  (a mode's speed against the reference, in the benchmark and the solver's timings);
* :func:`break_even_steps`: after how many steps a mode's extra start-up time is repaid;
* :func:`seed_comparison` and :func:`worst`: a mode against the reference across seeds,
  judged against the seed-to-seed spread (the convergence and quality items).

Pure NumPy (and SciPy's t distribution); no TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np


def quartiles(values: Sequence[float]) -> dict:
    """Median, first and third quartiles, their distance (IQR) and the sample count; NaN when empty."""
    if not len(values):
        return {"median": float("nan"), "q1": float("nan"), "q3": float("nan"), "iqr": float("nan"), "n": 0}
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return {"median": float(med), "q1": float(q1), "q3": float(q3), "iqr": float(q3 - q1), "n": len(values)}


def iqr(values: Sequence[float]) -> float:
    """Interquartile range (third minus first quartile) of ``values``; NaN when empty."""
    return quartiles(values)["iqr"]


def bootstrap_ratio(
    numerator: Sequence[float],
    denominator: Sequence[float],
    *,
    resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> dict:
    """Ratio of medians ``median(numerator) / median(denominator)`` with a bootstrap interval.

    Both samples are resampled with replacement, independently; the interval is the
    percentile interval of the resampled ratios. With fewer than 2 samples on either
    side the interval is NaN.
    """
    num = np.asarray(numerator, dtype=np.float64)
    den = np.asarray(denominator, dtype=np.float64)
    ratio = float(np.median(num) / np.median(den)) if num.size and den.size else float("nan")
    if num.size < 2 or den.size < 2:
        return {"ratio": ratio, "low": float("nan"), "high": float("nan"), "level": level, "resamples": 0}
    rng = np.random.default_rng(seed)
    a = np.median(rng.choice(num, (resamples, num.size)), axis=1)
    b = np.median(rng.choice(den, (resamples, den.size)), axis=1)
    low, high = np.percentile(a / b, [50 * (1 - level), 50 * (1 + level)])
    return {"ratio": ratio, "low": float(low), "high": float(high), "level": level, "resamples": resamples}


def break_even_steps(compile_s: float, compile_off_s: float, step_s: float, step_off_s: float) -> float:
    """Steps after which a mode's extra compile time is repaid by faster steps.

    0 when it compiles no slower and steps no slower; ``inf`` when its steps are not
    faster (its extra compile time is never paid back); NaN when a time is not finite.
    """
    extra = compile_s - compile_off_s
    gain = step_off_s - step_s
    if not all(math.isfinite(v) for v in (extra, gain)):
        return math.nan
    if extra <= 0 and gain >= 0:
        return 0.0
    if gain <= 0:
        return math.inf
    return max(0.0, extra / gain)


def seed_comparison(mode_values: Mapping[int, float], off_values: Mapping[int, float], threshold: float) -> dict:
    """One metric of one mode against ``off`` across seeds, judged against the seed-to-seed spread.

    Two trainings of the same arm with different seeds already differ (initial weights,
    batch order); with one seed per arm, float rounding alone can move an SSIM by a few
    hundredths. So the mode - off difference of the means over seeds is compared with
    how far seeds of the same arm fall apart:

    * ``difference``: mean(mode) - mean(off) over the seeds of each; ``low``/``high``: its
      95 % t interval from the pooled seed-to-seed standard deviation ``sd`` (both arms,
      ``n_mode - 1 + n_off - 1`` degrees of freedom);
    * ``spread``: the largest difference between two seeds of the same arm (either arm);
    * ``margin`` = max(``threshold``, ``spread``): a difference within it is one that
      changing the seed also produces (or one below the threshold that matters);
    * ``within``: |difference| <= margin (the verdict); ``equivalent``: the two one-sided
      tests at 5 % (the 90 % interval lies inside +-margin), which more seeds make
      possible and one seed cannot.

    With one seed per arm there is no spread: the margin is the threshold.
    """
    from scipy import stats

    a = np.array([mode_values[s] for s in sorted(mode_values)], float)
    b = np.array([off_values[s] for s in sorted(off_values)], float)
    diff = float(a.mean() - b.mean()) if len(a) and len(b) else float("nan")
    dof = len(a) - 1 + len(b) - 1
    spread = max((float(np.ptp(v)) for v in (a, b) if len(v) > 1), default=float("nan"))
    out = {
        "seeds_mode": sorted(mode_values),
        "seeds_off": sorted(off_values),
        "mean_mode": float(a.mean()),
        "mean_off": float(b.mean()),
        "difference": diff,
        "sd": float("nan"),
        "low": float("nan"),
        "high": float("nan"),
        "spread": spread,
        "margin": float(threshold),
        "within": False,
        "equivalent": False,
    }
    if dof > 0:
        sd = math.sqrt((((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()) / dof)
        se = sd * math.sqrt(1 / len(a) + 1 / len(b))
        t95, t90 = stats.t.ppf(0.975, dof), stats.t.ppf(0.95, dof)
        out.update(
            sd=sd,
            low=diff - t95 * se,
            high=diff + t95 * se,
            margin=max(float(threshold), spread if math.isfinite(spread) else 0.0),
        )
        out["equivalent"] = bool(abs(diff) + t90 * se <= out["margin"])
    out["within"] = bool(abs(diff) <= out["margin"])  # NaN compares False: no evidence, no pass
    return out


def worst(comparisons: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The comparison with the largest |difference| / margin (a NaN one wins: it FAILs)."""
    found, ratio_w = None, 0.0
    for c in comparisons:
        ratio = abs(c["difference"]) / c["margin"] if c["margin"] > 0 else float("inf")
        if found is None or not math.isnan(ratio_w) and not ratio <= ratio_w:
            found, ratio_w = c, ratio
    return found
