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

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ptycho.study.json_record import JsonRecord, read_fields, write_fields


def quartiles(values: Sequence[float]) -> dict:
    """Median, first and third quartiles, their distance (IQR) and the sample count; NaN when empty."""
    if not len(values):
        return {"median": float("nan"), "q1": float("nan"), "q3": float("nan"), "iqr": float("nan"), "n": 0}
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return {"median": float(med), "q1": float(q1), "q3": float(q3), "iqr": float(q3 - q1), "n": len(values)}


def line(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """The least-squares line through (``x``, ``y``): its value at x = 0 and its slope (when
    the ``x`` are all equal: the mean of ``y`` at any x, slope NaN). In closed form with exactly
    rounded sums (``math.fsum``), not ``np.polyfit``: LAPACK's least squares rounds
    differently on AVX2 and AVX-512 machines, and a record written on one CPU kind must
    read back equal on another (``tests/test_report_golden.py``). Used for a growth
    exponent (:func:`ptycho.study.scaling.slope`) and for reading a loss curve
    (:func:`ptycho.study.loss_curve.read_through`)."""
    mx, my = math.fsum(x) / len(x), math.fsum(y) / len(y)
    sxx = math.fsum((a - mx) ** 2 for a in x)
    if not sxx:
        return my, math.nan
    b = math.fsum((a - mx) * (c - my) for a, c in zip(x, y, strict=True)) / sxx
    return my - b * mx, b


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

#: The error rate of one verdict (``thresholds.alpha``, whose schema default a test keeps
#: equal): each decision is a one-sided test at this rate, read off the ``1 - 2 alpha``
#: interval (90 % at 0.05: NOT WORSE, and EQUIVALENT by the two one-sided tests) or the
#: ``1 - alpha`` one (95 %: WORSE, DIFFERENT, and the speed's interval). Lower asks a
#: stricter question and needs more seeds.
ALPHA = 0.05


#: Simulated studies behind :func:`sequential_levels`, and the seed of their draws (fixed:
#: one plan, one set of levels, on every machine).
SEQUENTIAL_STUDIES, SEQUENTIAL_SEED = 200_000, 45
#: How the looks spend the error rate: by the look at ``n`` of ``n_max`` seeds per arm at
#: most ``alpha (n / n_max) ** SPENDING_RHO`` (Kim & DeMets' power family of spending
#: functions; 3 is close to O'Brien & Fleming's boundary, 1 to Pocock's). Little at the
#: first looks, whose 3 or 5 seeds rarely decide a comparison as close as the study's, so
#: that the last look judges near ``alpha`` and decides nearly as often as one look at the
#: cap would (docs/report.md, "How the looks spend the error rate").
SPENDING_RHO = 3


def spent(alpha: float, sizes: Sequence[int], rho: float = SPENDING_RHO) -> tuple[float, ...]:
    """The error rate spent by each look of ``sizes`` (seeds per arm), cumulatively:
    ``alpha (n_k / n_max) ** rho``."""
    return tuple(float(alpha) * (n / sizes[-1]) ** rho for n in sizes)


@functools.lru_cache(maxsize=64)
def sequential_levels(alpha: float, sizes: tuple[int, ...], rho: float = SPENDING_RHO) -> tuple[float, ...]:
    """The error rate each look of a group-sequential study judges at, so that the study as
    a whole keeps ``alpha``: look k's nominal rate ``a_k`` is the largest at which a
    one-sided paired t test, repeated on the same seeds' differences as they grow to each
    of ``sizes`` (seeds per arm at each planned look), has rejected a true null by look k in
    at most :func:`spent` ``(alpha)[k]`` of studies, and its ``a_k / 2`` tail (the
    ``1 - a_k`` interval's, read by WORSE, DIFFERENT and the speed's answer) in at most
    ``spent(alpha / 2)[k]``: Lan & DeMets' alpha spending (Biometrika 70, 1983) with Kim &
    DeMets' power family (Biometrics 43, 1987; Jennison & Turnbull, *Group Sequential
    Methods*, 2000, ch. 7). The levels are set by simulation, because with 3 to 7 seeds the
    t statistics' dependence on a shared, estimated spread is not the normal theory's.
    Normal differences: the statistic's law at the boundary does not depend on their
    spread or the margin, so one calibration serves every comparison of the plan. Stopping
    at an earlier look (decided, futile) only removes chances to err. ``(alpha,)`` for one
    look. Each level is at least its look's increment of the spending (the union bound,
    always valid), and exactly that where a look has one seed per arm (the speed's interval
    is then a bootstrap of its steps, which the simulation does not model).

    Deterministic: :data:`SEQUENTIAL_STUDIES` studies drawn from :data:`SEQUENTIAL_SEED`;
    each goal is lowered by two of the simulation's standard errors, so that its own noise
    does not spend error rate (``tests/test_error_rate.py`` checks the rate independently).
    """
    from scipy import stats

    sizes = tuple(sorted({int(n) for n in sizes}))  # a look again at the same seeds judges the same
    if len(sizes) <= 1:
        return (float(alpha),)
    increments = tuple(float(v) for v in np.diff((0.0, *spent(alpha, sizes, rho))))
    if sizes[0] < 2:  # a look at one seed reads a bootstrap of its steps, not a t interval
        return increments
    rng, t, n = np.random.default_rng(SEQUENTIAL_SEED), [], np.array(sizes)
    for _ in range(SEQUENTIAL_STUDIES // 20_000):  # in chunks: memory bounded at any max_seeds
        draws = rng.standard_normal((20_000, sizes[-1]))
        total, total_sq = np.cumsum(draws, axis=1), np.cumsum(draws**2, axis=1)
        mean = total[:, n - 1] / n
        sd = np.sqrt(np.maximum(total_sq[:, n - 1] - n * mean**2, 0.0) / (n - 1))
        t.append((mean / (sd / np.sqrt(n))).T)
    t = np.concatenate(t, axis=1)  # looks x studies

    def calibrated(target: float) -> list[float]:
        levels, alive = [], np.ones(t.shape[1], dtype=bool)
        shares = spent(target, sizes, rho)
        for k, (goal, floor) in enumerate(zip(shares, np.diff((0.0, *shares)), strict=True)):
            goal -= 2 * math.sqrt(goal * (1 - goal) / SEQUENTIAL_STUDIES)
            low, high = floor, target

            def rejects(level: float, k: int = k) -> np.ndarray:
                return t[k] > stats.t.ppf(1 - level, sizes[k] - 1)

            for _ in range(40):
                mid = 0.5 * (low + high)
                low, high = (mid, high) if 1 - np.mean(alive & ~rejects(mid)) <= goal else (low, mid)
            levels.append(low)
            alive &= ~rejects(low)
        return levels

    one_sided, each_side = calibrated(alpha), calibrated(alpha / 2)
    return tuple(float(min(a, 2 * b)) for a, b in zip(one_sided, each_side, strict=True))


def clears(differences: np.ndarray, margin: float, alpha: float, two_sided: bool = False) -> np.ndarray:
    """Per row of paired differences (arm - reference, higher better; rows x seeds): whether
    :func:`seed_comparison` calls it NOT WORSE (its ``1 - 2 alpha`` interval's lower end
    above ``-margin``) or, ``two_sided``, EQUIVALENT (both ends inside +-margin)."""
    n = differences.shape[1]
    mean = differences.mean(axis=1)
    half = _half_widths(differences.std(axis=1, ddof=1), n, n, PAIRED, alpha)[0]
    inside = mean - half > -margin
    return inside & (mean + half < margin) if two_sided else inside


def decision_chance(
    sizes: Sequence[int],
    levels: Sequence[float],
    sd: float,
    margin: float,
    two_sided: bool = False,
    studies: int = 20_000,
) -> tuple[float, float]:
    """How often a study whose arms are identical decides NOT WORSE (``two_sided``:
    EQUIVALENT) at some look, and the seeds per arm it trains on average: ``studies``
    synthetic studies whose paired differences scatter normally by ``sd``, each look ``k``
    at ``sizes[k]`` seeds judged as :func:`seed_comparison` judges them (:func:`clears`, at
    ``levels[k]``), stopping at the first look that decides; a look at one seed never does.
    Deterministic (seed 0). What a study's budget is worth: a cap whose chance is 40 %
    leaves the question open in most runs even when XLA changes nothing (docs/report.md)."""
    rng = np.random.default_rng(0)
    x = rng.normal(0.0, sd, (studies, sizes[-1]))
    decided, seeds = np.zeros(studies, dtype=bool), np.full(studies, float(sizes[-1]))
    for n, level in zip(sizes, levels, strict=True):
        if n < 2:
            continue
        new = clears(x[:, :n], margin, level, two_sided) & ~decided
        seeds[new], decided = n, decided | new
    return float(decided.mean()), float(seeds.mean())


def level_words(level: float) -> str:
    """An interval's level in words: ``90 %``, ``95 %``, ``96.7 %``."""
    return f"{100 * level:.1f}".rstrip("0").rstrip(".") + " %"


def interval_levels(alpha: float = ALPHA) -> tuple[str, str]:
    """The two intervals a verdict at error rate ``alpha`` reads, in words: the
    ``1 - 2 alpha`` and the ``1 - alpha`` one (``("90 %", "95 %")`` at the default)."""
    return level_words(1 - 2 * alpha), level_words(1 - alpha)


def _half_widths(sd: float, n_a, n_b, design: str = UNPAIRED, alpha: float = ALPHA):
    """Half-widths of the ``1 - 2 alpha`` and ``1 - alpha`` t intervals (90 % and 95 % at
    the default alpha) of a difference of two means: ``paired``, the mean of ``n_a``
    per-seed differences whose standard deviation is ``sd`` (``n_a - 1`` degrees of
    freedom); ``unpaired``, two means with pooled ``sd``. ``n_a`` and ``n_b`` may be
    arrays of candidate seed counts (:func:`seeds_needed`), giving arrays."""
    from scipy import stats

    n_a, n_b = np.asarray(n_a, float), np.asarray(n_b, float)
    if design == PAIRED:
        dof, se = n_a - 1, sd / np.sqrt(n_a)
    else:
        dof, se = n_a - 1 + n_b - 1, sd * np.sqrt(1 / n_a + 1 / n_b)
    h90, h95 = stats.t.ppf(1 - alpha, dof) * se, stats.t.ppf(1 - alpha / 2, dof) * se
    return (h90, h95) if np.ndim(h90) else (float(h90), float(h95))


def worse_by(difference: float, better: str = HIGHER) -> float:
    """How much worse the arm is than its reference for a difference (arm - reference) of
    a metric whose ``better`` direction is given: the difference's opposite for a metric
    where higher is better (SSIM), the difference itself where lower is (a loss)."""
    return -difference if better == HIGHER else difference


def seeds_needed(
    difference: float,
    sd: float,
    margin: float,
    design: str = UNPAIRED,
    test: str = EQUIVALENCE,
    better: str = HIGHER,
    alpha: float = ALPHA,
) -> float:
    """Seeds per arm that would make the comparison conclusive if the observed difference
    and standard deviation (of the per-seed differences when ``paired``, of the seeds
    otherwise) held, at error rate ``alpha``. ``equivalence``: EQUIVALENT when
    ``|difference| < margin`` (the ``1 - 2 alpha``, 90 %, interval inside), DIFFERENT when
    it is beyond (the ``1 - alpha``, 95 %, interval outside); ``non-inferiority``: NOT WORSE
    when the one-sided ``1 - alpha`` bound on the worse side stays within the margin, WORSE
    when the other bound lies beyond it. Infinite when no number would (a difference
    exactly at the margin, or more than :data:`MAX_SEEDS`), NaN without a standard deviation."""
    if not (math.isfinite(difference) and math.isfinite(sd)):
        return float("nan")
    worse = worse_by(difference, better)
    n = np.arange(2, MAX_SEEDS + 1, dtype=float)  # every candidate at once: one t quantile call
    h90, h95 = _half_widths(sd, n, n, design, alpha)
    if test == NON_INFERIORITY:
        settled = (worse + h90 <= margin) | (worse - h90 > margin)
    else:
        settled = (abs(difference) + h90 <= margin) | (abs(difference) - h95 > margin)
    return float(n[np.argmax(settled)]) if settled.any() else float("inf")


@dataclass(frozen=True, kw_only=True)
class SeedComparison(JsonRecord):
    """One metric of an arm against its reference across seeds (:func:`seed_comparison`),
    judged once (``outcome``) and worded once (:meth:`words`, :meth:`needed_words`); its
    keys in the checks' and the report's JSON are written and read here (:meth:`to_json`,
    :meth:`from_json`, NaN as null; the machines table reads other machines' reports of this
    schema version through the same record). ``label`` and ``yardstick`` are set by the measured-data
    comparisons (:mod:`ptycho.study.checklist.agreement`): what is compared, and that the
    reference side is the seed-to-seed yardstick (pairs of seeds), not seeds."""

    # A record written before a field existed reads with its default (what it meant then:
    # two-sided, higher is better, pooled; a number not recorded is NaN).
    seeds_mode: tuple[int, ...] = ()
    seeds_off: tuple[int, ...] = ()
    mean_mode: float = math.nan
    mean_off: float = math.nan
    difference: float = math.nan
    sd: float = math.nan
    low: float = math.nan
    high: float = math.nan
    low90: float = math.nan
    high90: float = math.nan
    spread: float = math.nan
    design: str = UNPAIRED
    margin: float = math.nan
    test: str = EQUIVALENCE
    better: str = HIGHER
    outcome: str
    seeds_needed: float = math.nan
    label: str = ""
    yardstick: bool = False
    #: the pooled standard deviation of the seeds within each arm: all that makes two seeds
    #: of one arm differ (initial weights, batch order, the arm's arithmetic; unpaired, it
    #: equals ``sd``); NaN where the split below cannot be read (one seed, a side without
    #: variation, a yardstick)
    seed_sd: float = math.nan
    #: the error rate of its verdict (:data:`ALPHA`): ``low90``/``high90`` are the
    #: ``1 - 2 alpha`` interval, ``low``/``high`` the ``1 - alpha`` one
    alpha: float = ALPHA

    @property
    def levels(self) -> tuple[str, str]:
        """The two intervals' levels in words: ``("90 %", "95 %")`` at the default alpha."""
        return interval_levels(self.alpha)

    @property
    def seed_share(self) -> float:
        """The share of one arm's seed-to-seed variance that is the seed's own (initial
        weights and batch order, which both arms of a pair share) and that pairing by seed
        therefore removes: ``1 - sd**2 / (2 seed_sd**2)``, between 0 and 1, where ``sd``
        is the spread of the per-seed differences (``var(arm - reference) = 2 var(e)`` when
        a value is its seed's effect plus an independent remainder ``e``: the arms'
        arithmetic and the effect compared). Near 1: the pairs move together and the
        comparison sees through the seeds' luck; near 0: the arms' own numerics scatter a
        training as much as a new seed does. NaN unless paired with a ``seed_sd``."""
        return seed_share(self.sd, self.seed_sd) if self.design == PAIRED else math.nan

    def source_words(self, percent: bool = False) -> str:
        """Where the seed-to-seed spread comes from, in one clause (empty without a split)."""
        share = self.seed_share
        if not math.isfinite(share):
            return ""

        return (
            f"the seed itself (initial weights, batch order) is {share:.0%} of one arm's seed-to-seed variance, "
            f"which pairing removes (seeds sd {number_words(self.seed_sd, percent)}, "
            f"paired differences sd {number_words(self.sd, percent)})"
        )

    @property
    def within(self) -> bool:
        """|difference| <= margin (NaN compares False: no evidence, no pass)."""
        return bool(abs(self.difference) <= self.margin)

    @property
    def equivalent(self) -> bool:
        return self.outcome == EQUIVALENT

    def reach(self) -> float:
        """How far the 90 % interval reaches: from no difference either way (equivalence),
        or on the worse side (non-inferiority: how much worse the arm may be, 0 when even
        that end is better); the value an EQUIVALENT or NOT WORSE outcome keeps within the
        margin. NaN without an interval."""
        if self.test == NON_INFERIORITY:
            worst = max(worse_by(self.low90, self.better), worse_by(self.high90, self.better))
            return max(worst, 0.0) if math.isfinite(worst) else math.nan
        return max(abs(self.low90), abs(self.high90))

    def needed_words(self) -> str:
        """How many seeds would settle an INCONCLUSIVE comparison, in words."""
        n = self.seeds_needed
        if math.isnan(n):
            return "at least 2 seeds per arm are needed to judge it"
        if math.isinf(n):
            return "the observed difference sits at the margin: no number of seeds would settle it"
        return f"the observed spread says {n:.0f} seeds per arm would settle it"

    def words(self, percent: bool = False) -> str:
        """What follows the comparison's difference in words: its intervals, the seed
        spread and the outcome (or why there is none)."""

        def f(v: float, signed: bool = False) -> str:
            return signed_words(v, percent) if signed else number_words(v, percent)

        if not math.isfinite(self.sd):
            return f" (one seed per arm: no seed-to-seed spread to judge it by); INCONCLUSIVE, {self.needed_words()}"
        spread = f"seeds of the same arm differ by up to {f(self.spread)}" if math.isfinite(self.spread) else ""
        source = self.source_words(percent)
        spread = f"{spread}; {source}" if spread and source else spread or source
        sides = "pairs of seeds" if self.yardstick else "seeds"
        narrow, wide = self.levels
        intervals = (
            f"{narrow} interval {f(self.low90, True)} to {f(self.high90, True)}, {wide} {f(self.low, True)} to "
            f"{f(self.high, True)}, {len(self.seeds_mode)} {'seeds vs' if self.yardstick else 'vs'} "
            f"{len(self.seeds_off)} {sides}" + (", paired by seed" if self.design == PAIRED else "")
        )
        margin = f(self.margin)
        judged = {
            EQUIVALENT: f"EQUIVALENT within the {margin} margin (its {narrow} interval lies inside)",
            DIFFERENT: f"DIFFERENT: its {wide} interval lies beyond the {margin} margin",
            NOT_WORSE: f"NOT WORSE by more than the {margin} margin (its one-sided {wide} bound lies inside)",
            WORSE: f"WORSE by more than the {margin} margin (even its {narrow} interval's better end lies beyond it)",
        }.get(self.outcome, f"INCONCLUSIVE against the {margin} margin; {self.needed_words()}")
        return f" ({intervals}{'; ' + spread if spread else ''}); {judged}"

    def to_json(self) -> dict[str, Any]:
        """The record as the checks and the report keep it (NaN stays NaN here; the JSON
        writer stores it as null), with what follows from it (``within``, ``equivalent``)."""
        out = write_fields(self, skip=("label", "yardstick", "alpha"))
        out.update(within=self.within, equivalent=self.equivalent)
        if self.label:
            out["label"] = self.label
        if self.yardstick:
            out["yardstick"] = True
        if self.alpha != ALPHA:  # records before the key, and the default, say nothing
            out["alpha"] = self.alpha
        return out

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> SeedComparison:
        """The record from the checks' or the report's JSON (null read as NaN; a null
        ``alpha`` as the default)."""
        return cls(**read_fields(cls, {k: v for k, v in record.items() if v is not None or k != "alpha"}))


def seed_share(paired_sd: float, seed_sd: float) -> float:
    """The seed's own share of one arm's seed-to-seed variance, ``1 - paired_sd**2 /
    (2 seed_sd**2)`` clipped to 0-1 (:attr:`SeedComparison.seed_share` says why); NaN
    without both spreads or when the seeds do not vary."""
    if not (math.isfinite(paired_sd) and math.isfinite(seed_sd)) or seed_sd <= 0:
        return math.nan
    return min(1.0, max(0.0, 1.0 - paired_sd**2 / (2.0 * seed_sd**2)))


def variance_split(arm: Mapping[int, float], reference: Mapping[int, float]) -> tuple[float, float, float]:
    """``(seed_sd, paired_sd, share)`` of the values of two arms on the seeds both have
    (two or more): each arm's own seeds' standard deviation, pooled; that of the per-seed
    differences; and :func:`seed_share`. NaN where it cannot be read."""
    common = sorted(set(arm) & set(reference))
    a, b = (np.array([side[s] for s in common], float) for side in (arm, reference))
    if len(common) < 2 or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))) or not (np.ptp(a) and np.ptp(b)):
        return math.nan, math.nan, math.nan  # too few seeds, an undefined value, or a side without variation
    seed_sd = math.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2)
    paired_sd = float(np.std(a - b, ddof=1))
    return seed_sd, paired_sd, seed_share(paired_sd, seed_sd)


def number_words(v: float, percent: bool) -> str:
    """A difference or a spread without its sign: percent with one decimal, else four decimals."""
    return f"{v:.1%}" if percent else f"{v:.4f}"


def signed_words(v: float, percent: bool) -> str:
    """A difference with its sign: percent with one decimal, else four decimals."""
    return f"{v:+.1%}" if percent else f"{v:+.4f}"


def seed_comparison(
    mode_values: Mapping[int, float],
    off_values: Mapping[int, float],
    threshold: float,
    test: str = EQUIVALENCE,
    better: str = HIGHER,
    *,
    label: str = "",
    yardstick: bool = False,
    alpha: float = ALPHA,
) -> SeedComparison:
    """One metric of one mode against ``off`` across seeds, with one of three outcomes.

    Two trainings of the same arm with different seeds already differ (initial weights,
    batch order), so the mode - off difference of the means over seeds is judged with its
    interval from the seeds, against a margin set before looking at the data
    (``threshold``, the difference that matters). A seed fixes an arm's initial weights
    and batch order, so when both arms ran the same seeds (two or more) the study is a
    matched-pairs design: the ``design`` is ``paired`` and the interval comes from the
    per-seed differences, which carry only what the two arms differ in (the XLA mode or
    the precision), not how lucky a seed was. Otherwise it is ``unpaired`` (pooled).

    Every level below is at the default error rate ``alpha`` = 0.05 (:data:`ALPHA`,
    ``thresholds.alpha``): the 90 % interval is the ``1 - 2 alpha`` one, the 95 % the
    ``1 - alpha`` one, and a lower alpha widens both.

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
    * ``spread``: the largest difference between two seeds of the same arm; ``seed_sd``
      the pooled standard deviation of each arm's seeds, which with the paired differences'
      ``sd`` says how much of it is the seed's own (:attr:`SeedComparison.seed_share`);
      ``within``: |difference| <= margin; ``equivalent``: the outcome is EQUIVALENT.
    """
    a = np.array([mode_values[s] for s in sorted(mode_values)], float)
    b = np.array([off_values[s] for s in sorted(off_values)], float)
    diff = float(a.mean() - b.mean()) if len(a) and len(b) else math.nan
    design = PAIRED if sorted(mode_values) == sorted(off_values) and len(a) > 1 else UNPAIRED
    dof = len(a) - 1 if design == PAIRED else len(a) - 1 + len(b) - 1
    margin = float(threshold)
    nan = math.nan
    sd = low = high = low90 = high90 = needed = seed_sd = nan
    outcome = INCONCLUSIVE
    pooled_dof = len(a) - 1 + len(b) - 1
    pooled = (
        math.sqrt((((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()) / pooled_dof) if pooled_dof > 0 else nan
    )
    if not yardstick and all(len(v) > 1 and np.ptp(v) > 0 for v in (a, b)):
        seed_sd = pooled
    if dof > 0:
        if design == PAIRED:
            sd = float(np.std(a - b, ddof=1))
        else:
            sd = pooled  # unpaired: dof is the pooled one
        h90, h95 = _half_widths(sd, len(a), len(b), design, alpha)
        low, high, low90, high90 = diff - h95, diff + h95, diff - h90, diff + h90
        # the interval's ends as "how much worse the arm is": the worse end first
        worst, best = sorted((worse_by(low90, better), worse_by(high90, better)), reverse=True)
        if test == NON_INFERIORITY:
            outcome = NOT_WORSE if worst <= margin else WORSE if best > margin else INCONCLUSIVE
        elif -margin <= low90 and high90 <= margin:
            outcome = EQUIVALENT
        elif low > margin or high < -margin:
            outcome = DIFFERENT
        if outcome == INCONCLUSIVE:
            needed = seeds_needed(diff, sd, margin, design, test, better, alpha)
    return SeedComparison(
        seeds_mode=tuple(sorted(mode_values)),
        seeds_off=tuple(sorted(off_values)),
        mean_mode=float(a.mean()),
        mean_off=float(b.mean()),
        difference=diff,
        sd=sd,
        low=low,
        high=high,
        low90=low90,
        high90=high90,
        spread=max((float(np.ptp(v)) for v in (a, b) if len(v) > 1), default=nan),
        design=design,
        margin=margin,
        test=test,
        better=better,
        outcome=outcome,
        seeds_needed=needed,
        label=label,
        yardstick=yardstick,
        seed_sd=seed_sd,
        alpha=float(alpha),
    )


def overall(outcomes: Iterable[str]) -> str:
    """The outcome of several comparisons: DIFFERENT if any is DIFFERENT or WORSE,
    EQUIVALENT if all are EQUIVALENT or NOT WORSE, else INCONCLUSIVE (also for none)."""
    outcomes = list(outcomes)
    if DIFFERENT in outcomes or WORSE in outcomes:
        return DIFFERENT
    return EQUIVALENT if outcomes and all(o in (EQUIVALENT, NOT_WORSE) for o in outcomes) else INCONCLUSIVE
