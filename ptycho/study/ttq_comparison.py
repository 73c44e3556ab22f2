"""The time-to-quality comparison as a record: one arm's seeds against its reference's
(:class:`Comparison`, each training's way to the target a :class:`Reach`), judged once
(:attr:`Comparison.outcome`: one of the speed's four answers, by where the interval lies
against :data:`NO_EFFECT_BAND`), worded once and logged once, and the only code that
knows its keys in the report. How the trainings are read and the comparison measured is
:mod:`ptycho.study.time_to_quality`'s.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from ptycho.nets.precision import short
from ptycho.study.json_record import JsonRecord, read_fields, write_fields
from ptycho.study.stats import level_words

#: The band around 1 inside which a resolved ratio is "no measurable effect": an interval
#: within 0.95-1.05 says XLA changes the time to quality by less than 5 %, less than the
#: step-time spread of one arm's seeds on the study's shared machines (up to 14 %,
#: docs/report.md "Statistics and margins"). An interval reaching beyond it on both sides of
#: 1 did not resolve the effect: INCONCLUSIVE, not a failure of XLA.
NO_EFFECT_BAND = (0.95, 1.05)
#: The four answers of a speed comparison (:attr:`Comparison.answer`).
FASTER, NO_EFFECT, SLOWER, NOT_RESOLVED = "faster", "no measurable effect", "SLOWER", "not resolved"
#: How the interval was made (:attr:`Comparison.interval`).
T_LOG_RATIOS, BOOTSTRAP = "t on paired log ratios", "bootstrap"


@dataclass(frozen=True)
class Reach(JsonRecord):
    """One training's way to the target: the epochs and steps it took (its whole training
    when it never got there), at its median step time; compilation apart."""

    seed: int
    reached: bool
    epochs: int  #: the epoch in which it reached the target (1-based), or its whole training
    steps: float  #: train steps to the target, interpolated between validation readings
    step_s: float = math.nan
    seconds: float = math.nan
    compile_s: float = math.nan

    @property
    def seconds_with_compile(self) -> float:
        return self.seconds + self.compile_s

    def to_json(self) -> dict:
        return {**write_fields(self), "seconds_with_compile": self.seconds_with_compile}

    def metrics(self) -> dict[str, float]:
        """The MLflow metrics of this training's run (named so that MLflow's compare view,
        which sorts keys, shows them beside the SSIMs, above the ``system/`` samples)."""
        return {
            "quality_time_s": self.seconds,
            "quality_time_with_compile_s": self.seconds_with_compile,
            "quality_steps": float(self.steps),
            "quality_reached": float(self.reached),
        }


class Sides(NamedTuple):
    """Seeds named per side of a comparison: the arm's and the reference's."""

    arm: tuple[int, ...] = ()
    reference: tuple[int, ...] = ()

    def to_json(self) -> dict:
        return {"arm": list(self.arm), "reference": list(self.reference)}

    @classmethod
    def from_json(cls, d: Mapping | None) -> Sides:
        d = d or {}
        return cls(tuple(int(s) for s in d.get("arm", ())), tuple(int(s) for s in d.get("reference", ())))


def raw_loss_words(verb: str, which: str) -> str:
    """The clause a verdict adds when :func:`ptycho.study.time_to_quality.common_floors` fell back to raw loss: ``verb``
    ("measured", "compared"), ``which`` the trainings without a floor."""
    return (
        f"; {verb} in raw loss, since {which} record no loss floor (trained before it was recorded: "
        "re-run those trainings to measure every one above its floor)"
    )


def ratio_words(ratio: float, low: float = math.nan, high: float = math.nan, level: float = 0.95) -> str:
    """``"1.06x (95% CI 0.99-1.15)"`` (the interval at ``level``), or the ratio alone
    without a finite interval."""
    if math.isfinite(low) and math.isfinite(high):
        return f"{ratio:.2f}x ({level_words(level).replace(' ', '')} CI {low:.2f}-{high:.2f})"
    return f"{ratio:.2f}x"


def effect_words(ratio: float, low: float = math.nan, high: float = math.nan) -> str:
    """One of the four answers by where the interval lies: :data:`FASTER` (above 1),
    :data:`SLOWER` (below 1), :data:`NO_EFFECT` (inside :data:`NO_EFFECT_BAND`), else
    :data:`NOT_RESOLVED`; without an interval, "faster" or "not faster" by the ratio."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return FASTER if ratio > 1.0 else "not faster"
    if low > 1.0:
        return FASTER
    if high < 1.0:
        return SLOWER
    if NO_EFFECT_BAND[0] <= low and high <= NO_EFFECT_BAND[1]:
        return NO_EFFECT
    return NOT_RESOLVED


def t_log_ratios(ratios, level: float) -> tuple[float, float, float]:
    """The geometric mean of paired per-seed ratios and its t interval at ``level``: a mean
    and interval of the log ratios (``n - 1`` degrees of freedom), exponentiated. Valid at
    2-5 seeds, where a bootstrap over seeds has only a handful of distinct resamples (10 at
    3 seeds), and as wide as the seeds' disagreement says."""
    import numpy as np
    from scipy import stats

    logs = np.log(np.asarray(ratios, float))
    n, mean = len(logs), float(logs.mean())
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * logs.std(ddof=1) / math.sqrt(n))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


class Factor(NamedTuple):
    """A factor of a paired ratio: its geometric mean over the seeds and its t interval
    (:func:`t_log_ratios`)."""

    ratio: float
    low: float
    high: float


@dataclass(frozen=True)
class Comparison:
    """One time-to-quality comparison: an arm's seeds against its reference's, the only
    code that knows its keys in the report (:meth:`to_json`, :meth:`from_json`), judged
    once (:attr:`outcome`), worded once (:meth:`sentence`, :meth:`headline`) and logged
    once (:meth:`metrics`, :meth:`Reach.metrics`).

    ``ratio`` is the reference's seconds to the target over the arm's (above 1 = the arm is
    sooner: the geometric mean of paired seeds' ratios, else the ratio of the mean times),
    with its interval ``low``-``high`` at ``level`` (``interval`` says how it was made);
    NaN when the reference has no finished run or the arm none timed. The pair's identity (model, modes,
    precisions, ``title``) is set by who pairs the arms (:func:`ptycho.study.checklist.
    speedup.time_to_quality`); :func:`ptycho.study.time_to_quality.compare` leaves it empty.
    """

    ratio: float
    low: float = math.nan
    high: float = math.nan
    target: float = math.nan
    margin: float = math.nan
    level: float = 0.95
    resamples: int = 0
    ratio_with_compile: float = math.nan
    per_step: float = math.nan
    steps_ratio: float = math.nan
    paired: bool = False
    #: how ``low``-``high`` was made: :data:`T_LOG_RATIOS` (paired seeds, two or more) or
    #: :data:`BOOTSTRAP` (unpaired seeds, or one: then over its step times only)
    interval: str = BOOTSTRAP
    arm: tuple[Reach, ...] = ()
    reference: tuple[Reach, ...] = ()
    missed: Sides = Sides()
    #: FAILED trainings (diverged or collapsed), counted as their whole planned training
    failed: Sides = Sides()
    #: seeds without a recorded floor, when others have one: all were measured in raw loss
    no_floor: Sides = Sides()
    #: two seeds of one arm never reached the target
    inconclusive: bool = True
    #: no seed of the arm reached the target (one seed: the smoke preset): its times are
    #: lower bounds, so the ratio is an upper bound, which can show slower, never faster
    upper_bound: bool = False
    model: str = ""
    mode: str = ""
    precision: str = ""
    reference_mode: str = ""
    reference_precision: str = ""
    title: str = ""  #: the pair in words, e.g. "PINN jit - off"
    #: near the target the validation loss's excess falls as steps^-exponent (the median
    #: over the runs that reached it, :meth:`ptycho.study.time_to_quality.Run.exponent_near`)
    exponent: float = math.nan
    #: paired seeds: the standard deviation over the pairs of the log of the arm's excess
    #: over the reference's near the target (mean over the readings from half to twice the
    #: reference's steps to it)
    loss_spread: float = math.nan

    # ------------------------------------------------------------------ identity
    @property
    def axis(self) -> str:
        """``"mode"`` (an XLA mode vs off, same precision) or ``"precision"``."""
        return "mode" if self.mode != self.reference_mode else "precision"

    def of_pair(self, pair: Any) -> Comparison:
        """This comparison as ``pair``'s (:class:`ptycho.study.arms.Pair`)."""
        return dataclasses.replace(
            self,
            model=pair.arm.model,
            mode=pair.arm.mode,
            precision=pair.arm.precision,
            reference_mode=pair.reference.mode,
            reference_precision=pair.reference.precision,
            title=pair.words(),
        )

    def is_xla(self, model: str | None = None) -> bool:
        """An XLA mode against off at the same precision (of ``model``, when named)."""
        return self.axis == "mode" and (model is None or self.model == model)

    # ------------------------------------------------------------------ judged
    @property
    def measured(self) -> bool:
        return math.isfinite(self.ratio)

    @property
    def answer(self) -> str:
        """One of four answers: :data:`FASTER`, :data:`NO_EFFECT`, :data:`SLOWER` or
        :data:`NOT_RESOLVED` (also when two seeds of one arm never reached the target, and
        for an upper bound that is not SLOWER: it can show slower, never faster)."""
        answer = effect_words(self.ratio, self.low, self.high)
        if self.inconclusive or (self.upper_bound and answer != SLOWER) or answer == "not faster":
            return NOT_RESOLVED
        return answer

    @property
    def outcome(self) -> str:
        """:attr:`answer` in the report's words, with why when it is not resolved."""
        if self.inconclusive:
            return "INCONCLUSIVE (two seeds of one arm never reached the target)"
        if self.upper_bound and self.answer != SLOWER:
            return "not shown faster (no seed of the arm reached the target: the ratio is an upper bound)"
        if self.answer == NOT_RESOLVED:
            lo, hi = NO_EFFECT_BAND
            return f"not resolved (the interval spans 1 and reaches beyond {lo:g}-{hi:g}: {self.needed_words()})"
        return self.answer

    def paired_log_ratios(self) -> dict[int, float]:
        """Seed -> log of the reference's seconds to the target over the arm's, for every seed
        both sides ran: the terms of the paired ratio and its t interval."""
        reference = {r.seed: r.seconds for r in self.reference}
        return {
            r.seed: math.log(reference[r.seed] / r.seconds)
            for r in self.arm
            if r.seed in reference and 0 < r.seconds < math.inf and 0 < reference[r.seed] < math.inf
        }

    def _pairs(self) -> list[tuple[Reach, Reach]]:
        """(arm, reference) trainings of the seeds :meth:`paired_log_ratios` reads, each with
        a step time and steps."""
        reference, paired = {r.seed: r for r in self.reference}, self.paired_log_ratios()
        pairs = [(r, reference[r.seed]) for r in self.arm if r.seed in paired]
        return [(a, b) for a, b in pairs if a.step_s > 0 and b.step_s > 0 and a.steps > 0 and b.steps > 0]

    def factors(self) -> tuple[Factor, Factor] | None:
        """The paired ratio's two factors, each a paired t interval at :attr:`level` over the
        same seeds as the ratio's (:meth:`paired_log_ratios`): per step (the reference's
        step time over the arm's) and the steps to the target (the arm's over the
        reference's: below 1 = fewer). A training's seconds are its steps times its step
        time, so seed by seed the logs add up: log ratio = log per step - log steps. They
        say which factor leaves an answer unresolved: a step time that XLA changes the same
        way in every pair, or a path to the target that XLA's rounding moves by a different
        amount in each (docs/report.md, the speedup item). None unless the interval is a t
        interval on paired log ratios of two or more seeds."""
        pairs = self._pairs() if self.interval == T_LOG_RATIOS else []
        if len(pairs) < 2:
            return None
        return (
            Factor(*t_log_ratios([b.step_s / a.step_s for a, b in pairs], self.level)),
            Factor(*t_log_ratios([a.steps / b.steps for a, b in pairs], self.level)),
        )

    def factors_words(self) -> str:
        """``"per step 1.06x (98.3% CI 1.04-1.09), 0.99x the steps (0.84-1.17)"``, or
        without factors the two ratios alone: ``"1.06x per step, 0.99x the steps"``."""
        found = self.factors()
        if found is None:
            return f"{self.per_step:.2f}x per step, {1 / self.steps_ratio:.2f}x the steps"
        step, steps = found
        return (
            f"per step {ratio_words(step.ratio, step.low, step.high, self.level)}, "
            f"{steps.ratio:.2f}x the steps ({steps.low:.2f}-{steps.high:.2f})"
        )

    def seeds_needed(self) -> float:
        """Paired seeds that would resolve the answer if the paired log ratios' mean and
        standard deviation held (issue 45): the fewest whose t interval at :attr:`level`
        lies above 1, below 1 or inside :data:`NO_EFFECT_BAND`, as :func:`effect_words`
        reads it; at most :data:`ptycho.study.stats.MAX_SEEDS` (infinite beyond: a mean at
        an edge of the band). NaN unless the interval is a finite t interval on paired log
        ratios of every seed (two or more, each with a finite time on both sides)."""
        import numpy as np
        from scipy import stats

        from ptycho.study.stats import MAX_SEEDS

        logs = self._t_logs()
        if logs is None:
            return math.nan
        mean, sd = float(logs.mean()), float(logs.std(ddof=1))
        n = np.arange(2, MAX_SEEDS + 1)
        half = stats.t.ppf(0.5 + self.level / 2, n - 1) * sd / np.sqrt(n)
        band = [math.log(b) for b in NO_EFFECT_BAND]
        low, high = mean - half, mean + half
        resolved = (low > 0) | (high < 0) | ((band[0] <= low) & (high <= band[1]))
        return float(n[resolved.argmax()]) if resolved.any() else math.inf

    def _t_logs(self):
        """The paired log ratios a finite t interval of :attr:`level` was made of (every
        seed of both sides, two or more, each with a finite time), else None: what
        :meth:`seeds_needed` and :meth:`resolvable_gain` project from."""
        import numpy as np

        logs = np.array(list(self.paired_log_ratios().values()))
        whole = len(logs) == len(self.arm) == len(self.reference) >= 2  # the seeds the interval read
        if self.interval != T_LOG_RATIOS or not whole or not (math.isfinite(self.low) and math.isfinite(self.high)):
            return None
        return logs

    def resolvable_gain(self) -> float:
        """The smallest ratio these paired seeds would show faster at :attr:`level`, if
        their log ratios kept their spread: exp(t * sd / sqrt(n)), the t interval's half
        width, which is the interval's own ratio over its lower end (:func:`t_log_ratios`).
        A gain per step below it cannot be shown by time to quality at this many seeds
        unless the steps to the target move less. NaN unless the interval is a finite t
        interval on the paired log ratios of every seed."""
        return math.nan if self._t_logs() is None else self.ratio / self.low

    def path_words(self) -> str:
        """Why the steps to the target move from pair to pair, in words, or ``""`` where
        seeds that missed the target (:attr:`inconclusive`, :attr:`upper_bound`) are why,
        or without two pairs that both reached it, a measured :attr:`exponent` and a
        :meth:`resolvable_gain`: the learning curve's slope near the target turns the
        pairs' spread in excess over the loss floor near it (:attr:`loss_spread`) into a
        spread in steps about 1/exponent times larger, and this many seeds resolve only a
        gain above :meth:`resolvable_gain` (docs/report.md, the speedup item)."""
        import numpy as np

        arm, reference = self.log_steps_to_target()  # a miss's steps are its whole training, not a path
        logs = [arm[s] - reference[s] for s in sorted(set(arm) & set(reference))]
        gain, b = self.resolvable_gain(), self.exponent
        missed = self.inconclusive or self.upper_bound
        if missed or len(logs) < 2 or not (math.isfinite(b) and b > 0 and math.isfinite(gain)):
            return ""
        loss = ""
        if math.isfinite(self.loss_spread):
            loss = (
                f"; the pairs' excesses near the target differ by {100 * self.loss_spread:.1f} % (sd of their log ratios), "
                f"about {100 * self.loss_spread / b:.2g} % in steps"
            )
        return (
            f"near the target the validation loss's excess over its floor falls as steps^-{b:.2f}, so an excess 1 % "
            f"smaller takes about {1 / b:.2g} % more steps{loss}, and the steps to the target differ by "
            f"{100 * float(np.std(logs, ddof=1)):.2g} % between the pairs that reached it (sd of their log ratios). "
            f"With {len(self.arm)} paired seeds the time to quality's interval shows a gain only from {gain:.2f}x "
            f"up; per step {self.mode or 'this mode'} runs at {self.per_step:.2f}x "
            f"{self.reference_mode or 'its reference'}'s speed"
        )

    def needed_words(self) -> str:
        """How many paired seeds would resolve a not-resolved answer, in words."""
        n = self.seeds_needed()
        if math.isnan(n):
            return "more seeds would settle it"
        if math.isinf(n):
            from ptycho.study.stats import MAX_SEEDS

            return f"the paired seeds' spread says more than {MAX_SEEDS} seeds per arm would be needed"
        return f"the paired seeds' spread says {n:.0f} seeds per arm would settle it"

    @property
    def judged_value(self) -> float:
        """What a verdict compares with its threshold: the interval's lower end (the ratio without one)."""
        return self.low if math.isfinite(self.low) else self.ratio

    def passes(self, threshold: float) -> bool | None:
        """Whether it shows the arm at least ``threshold`` times as fast: True when the
        interval's lower end is at or above it; False when its upper end is below it, or
        (threshold 1) the answer is :data:`NO_EFFECT` (a change under 5 %, decided); None
        when it cannot say (the interval straddles the threshold, two seeds missed, or an
        upper bound that would pass: an upper bound can fail, never pass). With one seed
        per arm the interval holds its step times' noise only, not the seeds' spread."""
        if self.inconclusive or not self.measured:
            return None
        high = self.high if math.isfinite(self.high) else self.ratio
        # "no measurable effect" answers "is XLA faster?" (threshold 1): no. A threshold
        # above 1 inside the band is failed only by an interval wholly below it.
        if high < threshold or (self.answer == NO_EFFECT and math.isclose(threshold, 1.0)):
            return False
        if self.upper_bound:
            return None
        return True if self.judged_value >= threshold else None  # below it: the interval straddles it

    def log_steps_to_target(self) -> tuple[dict[int, float], dict[int, float]]:
        """Per side (arm, reference), seed -> log steps to the target, of the trainings that
        reached it (a miss's steps are its whole training, not a crossing)."""
        arm, reference = (
            {r.seed: math.log(r.steps) for r in side if r.reached and r.steps > 0}
            for side in (self.arm, self.reference)
        )
        return arm, reference

    def steps_split(self) -> tuple[float, float, float]:
        """Where the spread of the steps to the target comes from (issue 45, item 2): over
        the seeds whose trainings both reached it, on log steps, ``(seed_sd, paired_sd,
        share)`` (:func:`ptycho.study.stats.variance_split`): how far seeds of one arm
        differ, how far the paired log ratios do, and the seed's own share, which pairing
        removes. The steps, not the seconds: they are the training's path, not the
        machine's load. NaN unless paired with two such seeds."""
        from ptycho.study.stats import variance_split

        if not self.paired:
            return math.nan, math.nan, math.nan
        steps = self.log_steps_to_target()
        return variance_split(*steps)

    # ------------------------------------------------------------------ worded
    @property
    def who(self) -> str:
        """The arm in words: ``physics at bf16``, or ``bf16 (off)`` on the precision axis."""
        if self.axis == "mode":
            return f"{self.mode} at {short(self.precision)}"
        return f"{short(self.precision)} ({self.mode})"

    @property
    def whom(self) -> str:
        """The reference in words: ``off at bf16``, or ``fp32 (off)``."""
        if self.axis == "mode":
            return f"{self.reference_mode} at {short(self.precision)}"
        return f"{short(self.reference_precision)} ({self.mode})"

    def ratio_words(self) -> str:
        """``"1.06x (95% CI 0.99-1.15)"``."""
        return ratio_words(self.ratio, self.low, self.high, self.level)

    def value_words(self) -> str:
        """``1.21x (1.11-1.35)``; an upper bound ``<= 0.80x (upper bound)``."""
        if self.upper_bound:
            return f"<= {self.ratio:.2f}x (upper bound)"
        if math.isfinite(self.low) and math.isfinite(self.high):
            return f"{self.ratio:.2f}x ({self.low:.2f}-{self.high:.2f})"
        return f"{self.ratio:.2f}x"

    def _seeds(self, sides: Sides) -> str:
        """``"physics at bf16 seeds 1, 2; off at bf16 seed 0"``: each side's seeds named."""
        return "; ".join(
            f"{self.whom if side == 'reference' else self.who} seed{'s' * (len(s) > 1)} {', '.join(map(str, s))}"
            for side, s in sides._asdict().items()
            if s
        )

    def sentence(self) -> str:
        """``"physics at bf16 reaches the target at 1.02x (95% CI 0.97-1.04) the speed of
        off at bf16 (3 seeds paired, t on paired log ratios; 1.01x per step, 1.00x the
        steps; with compilation 0.90x): no measurable effect"``, with the seeds that missed
        or failed named."""
        if not self.measured:
            return (
                f"{self.who} vs {self.whom}: no time to quality (no finished {self.whom} training, "
                f"or no {self.who} training with step times)"
            )
        n = len(self.arm)
        missed = self._seeds(
            Sides(
                *(
                    tuple(s for s in seeds if s not in gone)
                    for seeds, gone in zip(self.missed, self.failed, strict=True)
                )
            )
        )
        miss = f"; never reached the target: {missed} (counted as the whole training)" if missed else ""
        gone = self._seeds(self.failed)
        if gone:
            miss += f"; FAILED (diverged or collapsed): {gone} (counted as the whole planned training)"
        unfloored = self._seeds(self.no_floor)
        if unfloored:
            miss += raw_loss_words("measured", unfloored)
        return (
            f"{self.who} reaches the target at {self.ratio_words()} the speed of {self.whom} "
            f"({n} seed{'s' * (n != 1)}{' paired' if self.paired and n > 1 else ''}, {self.interval}; "
            f"{self.factors_words()}; with compilation {self.ratio_with_compile:.2f}x{miss}): "
            f"{self.outcome}"
        )

    def headline(self) -> str:
        """The report's first screen: ``"at fp32 the best mode, jit, reaches the PINN's
        quality target at 1.09x (95% CI 0.99-1.25) off's speed (3 seeds; per step 1.09x
        (95% CI 1.05-1.13), 1.00x the steps (0.86-1.16)): not resolved (...)"``; the
        factors' intervals with paired seeds (:meth:`factors`), the step's ratio alone
        otherwise."""
        n = len(self.arm)
        step = self.factors_words() if self.factors() else f"{self.per_step:.2f}x per step"
        return (
            f"at {short(self.precision)} the best mode, {self.mode}, reaches the PINN's quality target at "
            f"{self.ratio_words()} {self.reference_mode}'s speed ({n} seed{'s' * (n != 1)}; {step}): {self.outcome}"
        )

    # ------------------------------------------------------------------ logged
    def metrics(self) -> dict[str, float]:
        """Its MLflow metrics by statistic, flags included, so that a logged ratio never
        reads as measured when it is an upper bound or INCONCLUSIVE; with paired seeds the
        factors' intervals (:meth:`factors`: ``per_step_low``/``high``, ``steps`` and its
        ``steps_low``/``high``, the arm's steps over the reference's) and why the path moves
        (:meth:`path_words`: ``resolvable_gain``, ``exponent``, ``loss_spread``)."""
        out = {k: getattr(self, k) for k in ("ratio", "low", "high", "per_step", "ratio_with_compile")}
        found = self.factors()
        if found is not None:  # with paired seeds: the factors' intervals too
            step, steps = found
            out |= {"per_step_low": step.low, "per_step_high": step.high}
            out |= {"steps": steps.ratio, "steps_low": steps.low, "steps_high": steps.high}
        out |= {"resolvable_gain": self.resolvable_gain(), "exponent": self.exponent, "loss_spread": self.loss_spread}
        out = {k: v for k, v in out.items() if math.isfinite(v)}
        return {**out, "upper_bound": float(self.upper_bound), "inconclusive": float(self.inconclusive)}

    # ------------------------------------------------------------------ stored
    def to_json(self) -> dict:
        """Its record in the report (``validation.json``): its fields, its axis, and its
        pair in words as ``words``."""
        return {**write_fields(self, skip=("title",)), "axis": self.axis, "words": self.title}

    @classmethod
    def from_json(cls, d: Mapping) -> Comparison:
        """The record of :meth:`to_json`, also from reports written before a field existed
        (its default) and with NaN stored as null."""
        fields = read_fields(cls, d, skip=("title",))
        fields["title"] = str(d.get("words", ""))
        if "reference_precision" not in d:  # written before precisions: the arm's own
            fields["reference_precision"] = d.get("precision", "")
        return cls(**fields)
