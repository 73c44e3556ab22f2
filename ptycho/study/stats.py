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


#: The three outcomes of a comparison with a margin (equivalence testing, two one-sided tests).
EQUIVALENT, DIFFERENT, INCONCLUSIVE = "EQUIVALENT", "DIFFERENT", "INCONCLUSIVE"
#: The outcomes of a one-sided comparison (non-inferiority: "without making it worse").
NOT_WORSE, WORSE = "NOT WORSE", "WORSE"
#: The two tests of a seed comparison: is the arm no worse than its reference by more than
#: the margin (one-sided, the study's question), or within the margin either way (two-sided).
NON_INFERIORITY, EQUIVALENCE = "non-inferiority", "equivalence"
#: Which direction of a metric is better (SSIM: higher; a loss: lower).
HIGHER, LOWER = "higher", "lower"
#: The most seeds per arm :func:`seeds_needed` looks for.
MAX_SEEDS = 1000


#: The two designs of a seed comparison (:func:`seed_comparison`).
PAIRED, UNPAIRED = "paired", "unpaired"


def _half_widths(sd: float, n_a: int, n_b: int, design: str = UNPAIRED) -> tuple[float, float]:
    """Half-widths of the 90 % and 95 % t intervals of a difference of two means:
    ``paired``, the mean of ``n_a`` per-seed differences whose standard deviation is ``sd``
    (``n_a - 1`` degrees of freedom); ``unpaired``, two means with pooled ``sd``."""
    from scipy import stats

    if design == PAIRED:
        dof, se = n_a - 1, sd / math.sqrt(n_a)
    else:
        dof, se = n_a - 1 + n_b - 1, sd * math.sqrt(1 / n_a + 1 / n_b)
    return float(stats.t.ppf(0.95, dof) * se), float(stats.t.ppf(0.975, dof) * se)


def worse_by(difference: float, better: str = HIGHER) -> float:
    """How much worse the arm is than its reference for a difference (arm - reference) of
    a metric whose ``better`` direction is given: the difference's opposite for a metric
    where higher is better (SSIM), the difference itself where lower is (a loss)."""
    return -difference if better == HIGHER else difference


def seeds_needed(
    difference: float, sd: float, margin: float, design: str = UNPAIRED, test: str = EQUIVALENCE, better: str = HIGHER
) -> float:
    """Seeds per arm that would make the comparison conclusive if the observed difference
    and standard deviation (of the per-seed differences when ``paired``, of the seeds
    otherwise) held. ``equivalence``: EQUIVALENT when ``|difference| < margin`` (90 %
    interval inside), DIFFERENT when it is beyond (95 % interval outside);
    ``non-inferiority``: NOT WORSE when the one-sided 95 % bound on the worse side stays
    within the margin, WORSE when the other bound lies beyond it. Infinite when no number
    would (a difference exactly at the margin, or more than :data:`MAX_SEEDS`), NaN without
    a standard deviation."""
    if not (math.isfinite(difference) and math.isfinite(sd)):
        return float("nan")
    worse = worse_by(difference, better)
    for n in range(2, MAX_SEEDS + 1):
        h90, h95 = _half_widths(sd, n, n, design)
        if test == NON_INFERIORITY:
            if worse + h90 <= margin or worse - h90 > margin:
                return float(n)
        elif abs(difference) + h90 <= margin or abs(difference) - h95 > margin:
            return float(n)
    return float("inf")


def seed_comparison(
    mode_values: Mapping[int, float],
    off_values: Mapping[int, float],
    threshold: float,
    test: str = EQUIVALENCE,
    better: str = HIGHER,
) -> dict:
    """One metric of one mode against ``off`` across seeds, with one of three outcomes.

    Two trainings of the same arm with different seeds already differ (initial weights,
    batch order), so the mode - off difference of the means over seeds is judged with its
    interval from the seeds, against a margin set before looking at the data
    (``threshold``, the difference that matters). A seed fixes an arm's initial weights
    and batch order, so when both arms ran the same seeds (two or more) the study is a
    matched-pairs design: the ``design`` is ``paired`` and the interval comes from the
    per-seed differences, which carry only what the two arms differ in (the XLA mode or
    the precision), not how lucky a seed was. Otherwise it is ``unpaired`` (pooled).

    * ``difference``: mean(mode) - mean(off); ``low``/``high`` its 95 % t interval and
      ``low90``/``high90`` its 90 % one: paired, from the standard deviation ``sd`` of the
      per-seed differences (``n - 1`` degrees of freedom); unpaired, from the pooled
      standard deviation ``sd`` of the seeds of both arms (``n_mode - 1 + n_off - 1``);
    * ``outcome`` of ``test``:

      - ``equivalence`` (two-sided): EQUIVALENT when the 90 % interval lies inside
        +-margin (the two one-sided tests at 5 %), DIFFERENT when the 95 % interval lies
        outside it;
      - ``non-inferiority`` (one-sided, "without making it worse"; ``better`` says which
        direction of the metric is better): NOT WORSE when the 90 % interval's end on the
        worse side (a one-sided 95 % bound) lies within the margin, WORSE when its other end
        lies beyond it (worse by more than the margin at 95 %);

      INCONCLUSIVE otherwise, and always with one seed per arm (no spread to judge by);
    * ``seeds_needed``: per arm, what the observed difference and spread say would make
      it conclusive (:func:`seeds_needed`);
    * ``spread``: the largest difference between two seeds of the same arm;
      ``within``: |difference| <= margin; ``equivalent``: the outcome is EQUIVALENT.
    """
    a = np.array([mode_values[s] for s in sorted(mode_values)], float)
    b = np.array([off_values[s] for s in sorted(off_values)], float)
    diff = float(a.mean() - b.mean()) if len(a) and len(b) else float("nan")
    design = PAIRED if sorted(mode_values) == sorted(off_values) and len(a) > 1 else UNPAIRED
    dof = len(a) - 1 if design == PAIRED else len(a) - 1 + len(b) - 1
    margin = float(threshold)
    nan = float("nan")
    out = {
        "seeds_mode": sorted(mode_values),
        "seeds_off": sorted(off_values),
        "mean_mode": float(a.mean()),
        "mean_off": float(b.mean()),
        "difference": diff,
        "sd": nan,
        "low": nan,
        "high": nan,
        "low90": nan,
        "high90": nan,
        "spread": max((float(np.ptp(v)) for v in (a, b) if len(v) > 1), default=nan),
        "design": design,
        "margin": margin,
        "test": test,
        "better": better,
        "outcome": INCONCLUSIVE,
        "seeds_needed": nan,
    }
    if dof > 0:
        if design == PAIRED:
            sd = float(np.std(a - b, ddof=1))
        else:
            sd = math.sqrt((((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()) / dof)
        h90, h95 = _half_widths(sd, len(a), len(b), design)
        out.update(sd=sd, low=diff - h95, high=diff + h95, low90=diff - h90, high90=diff + h90)
        # the interval's ends as "how much worse the arm is": the worse end first
        worst, best = sorted((worse_by(out["low90"], better), worse_by(out["high90"], better)), reverse=True)
        if test == NON_INFERIORITY:
            out["outcome"] = NOT_WORSE if worst <= margin else WORSE if best > margin else INCONCLUSIVE
        elif -margin <= out["low90"] and out["high90"] <= margin:
            out["outcome"] = EQUIVALENT
        elif out["low"] > margin or out["high"] < -margin:
            out["outcome"] = DIFFERENT
        if out["outcome"] == INCONCLUSIVE:
            out["seeds_needed"] = seeds_needed(diff, sd, margin, design, test, better)
    out["within"] = bool(abs(diff) <= margin)  # NaN compares False: no evidence, no pass
    out["equivalent"] = out["outcome"] == EQUIVALENT
    return out


def overall(outcomes: Iterable[str]) -> str:
    """The outcome of several comparisons: DIFFERENT if any is DIFFERENT or WORSE,
    EQUIVALENT if all are EQUIVALENT or NOT WORSE, else INCONCLUSIVE (also for none)."""
    outcomes = list(outcomes)
    if DIFFERENT in outcomes or WORSE in outcomes:
        return DIFFERENT
    return EQUIVALENT if outcomes and all(o in (EQUIVALENT, NOT_WORSE) for o in outcomes) else INCONCLUSIVE


def reach(c: Mapping[str, Any]) -> float:
    """How far the comparison's 90 % interval reaches: from no difference either way
    (equivalence), or on the worse side (non-inferiority: how much worse the arm may be,
    0 when even that end is better); the value an EQUIVALENT or NOT WORSE outcome keeps
    within the margin. NaN without an interval."""
    if c.get("test") == NON_INFERIORITY:
        worst = max(worse_by(c["low90"], c.get("better", HIGHER)), worse_by(c["high90"], c.get("better", HIGHER)))
        return max(worst, 0.0) if math.isfinite(worst) else math.nan
    return max(abs(c["low90"]), abs(c["high90"]))
