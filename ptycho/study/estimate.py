"""How long the study will take on this machine, said before its first job.

A study's cost is its trainings' steps: 7 trainings of 20 epochs cost about 20 minutes
on a CPU with native bfloat16 and about 15 hours where the type is emulated. The
workflow therefore times a few steps of every arm it plans
(:func:`ptycho.study.calibration.calibrate`: each (model, mode, precision) in a bench
worker, as many stepping at once as the pipeline runs trainings at once, on a small
simulated split of the study's geometry), caches the figures per machine and config
(:func:`~ptycho.study.calibration.calibration_path`), and multiplies them by the planned
work (:func:`estimate`):

* trainings: per arm, a job's start, its first (compiling) step, then
  ``epochs x steps_per_epoch`` steps plus the validation passes (``train.val_checks`` per
  epoch; a forward pass costs
  about :data:`FORWARD_SHARE` of a train step), scheduled longest first on the
  trainings-at-once slots, as Snakemake's priorities do (``rules/common.smk``);
* the bench: alone on every core, per timed arm its start, compile and about
  :data:`BENCH_STEPS_PER_ARM` steps' worth of timing (both contexts, components,
  inference) plus its batch sweep;
* the rest (simulation, inference, stitching, scoring, solver, conditions, checks,
  figures, report): :data:`JOB_S` per job start (interpreter, TensorFlow, an MLflow
  child run), spread over the slots, plus the inference passes.

The constants were fitted on this project's recorded runs (docs/timing.md) and the
report checks the estimate against the finished run ("estimated 31 min, took 29 min").
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ptycho.study.calibration import (
    CALIBRATION_MAX_AGE_S,
    ArmCost,
    arm_costs,
    arm_key,
    bench_arms,
    calibration_due,
    calibration_path,
    described,
    own_scan,
    planned_arms,
)
from ptycho.study.json_record import JsonRecord, write_fields

#: The estimate, as JSON, in the jobs' environment: the report sets it beside the run's real cost.
ESTIMATE_ENV = "PTYCHO_ESTIMATE"
#: Seconds a job takes to start and end beside its work: the interpreter, TensorFlow's
#: import and an MLflow child run (the smoke preset's jobs: 2.4-8 s, median about 6 s).
JOB_S = 6.0
#: A forward pass (validation, inference) per sample, as a share of a train step's.
FORWARD_SHARE = 0.35
#: Steps' worth of timing per bench arm beyond its compile: warm-up and repeats alone
#: and shared, the components (three sub-steps, 20 calls each) and inference.
BENCH_STEPS_PER_ARM = 3.0
#: The bench's own fixed cost: the machine's peak per dtype, the workers' coordination.
BENCH_FIXED_S = 10.0
#: The study's jobs other than trainings and the bench, per arm (infer, stitch, evaluate)
#: and per study (simulate, checks, solver and warm start, figures, report, config, parent).
JOBS_PER_ARM = 3
JOBS_PER_STUDY = 8
#: A job's work besides its start, in steps of the slowest arm (a check's few passes, a
#: stitch, a solver's iterations; fitted on the smoke and default runs' other jobs).
REST_STEPS_PER_JOB = 10
#: Jobs per condition (its simulation, checks and solver).
JOBS_PER_CONDITION = 2


@dataclass(frozen=True)
class Estimate(JsonRecord):
    """A study's expected wall time on a machine, in seconds, by part."""

    training_s: float
    bench_s: float
    rest_s: float
    at_once: int  #: trainings at once
    trainings: int

    @property
    def total_s(self) -> float:
        return self.training_s + self.bench_s + self.rest_s

    def words(self) -> str:
        """``about 42 min on this machine (2 trainings at once; training 31 min, bench 6 min, rest 5 min)``."""
        return (
            f"about {minutes(self.total_s)} on this machine ({self.at_once} training{'s' * (self.at_once != 1)} at "
            f"once; {self.trainings} trainings {minutes(self.training_s)}, bench {minutes(self.bench_s)}, "
            f"rest {minutes(self.rest_s)})"
        )

    def to_json(self) -> dict:
        return {**write_fields(self), "total_s": self.total_s}


def minutes(seconds: float) -> str:
    """``42 min``, ``1.5 min``, ``14.8 h``: an estimate's precision, no more."""
    m = seconds / 60
    if m >= 100:
        return f"{m / 60:.1f} h"
    return f"{m:.0f} min" if m >= 10 else f"{m:.1f} min"


def _samples(cfg: Mapping, kind: str, split: str) -> int:
    """Training samples of model ``kind`` in ``split``: groups for a grouped model (the PINN),
    patterns otherwise (:mod:`ptycho.study.resources`); of the user's own data, its
    patterns (an imported scan has a group per pattern, its nearest neighbours)."""
    from ptycho.nets.models import method_of
    from ptycho.study.data_files import data_files
    from ptycho.study.resources import split_of
    from ptycho.study.workflow import simulation_config

    if own_scan(cfg) is not None:
        return described(data_files(cfg)[split]).patterns
    s = split_of(simulation_config(cfg), split)
    if method_of(kind).grouped:
        return s.group_patterns // max(1, cfg["simulation"]["gridsize"] ** 2)
    return s.patterns


def training_seconds(cfg: Mapping, kind: str, cost: ArmCost) -> float:
    """One training job of model ``kind``: start, compile, its epochs' steps and validation."""
    from ptycho.nets.train import check_steps, split_sizes
    from ptycho.study.workflow import train_config

    train = train_config(cfg, "off", 0, kind)  # the mode, seed and precision do not change the sizes
    n_val, _, steps = split_sizes(_samples(cfg, kind, "train"), train)
    checks = len(check_steps(max(1, steps), train.val_checks))  # validation passes per epoch
    epoch = (max(1, steps) + checks * FORWARD_SHARE * math.ceil(n_val / train.batch_size)) * cost.step_s
    return JOB_S + cost.startup_s + cost.compile_s + train.epochs * epoch


def schedule(durations: Sequence[float], slots: int) -> float:
    """Makespan of ``durations`` run longest first on ``slots`` (Snakemake's priorities)."""
    ends = [0.0] * max(1, slots)
    for d in sorted(durations, reverse=True):
        i = ends.index(min(ends))
        ends[i] += d
    return max(ends)


def estimate(
    cfg: Mapping, calibration: Mapping, at_once: int, trained: Sequence[str] = (), bench_done: bool = False
) -> Estimate:
    """The study's wall time from ``calibration`` (:func:`~ptycho.study.calibration.calibrate`) with ``at_once``
    trainings at once, without the arms already ``trained`` (and the bench when
    ``bench_done``); raises ``KeyError`` for an arm the calibration did not time."""
    from ptycho.study.arms import parse_arm
    from ptycho.study.workflow import arms

    by_arm = arm_costs(calibration)
    names = [n for n in arms(cfg) if n not in set(trained)]
    trainings = []
    for name in names:
        a = parse_arm(name)
        trainings.append(training_seconds(cfg, a.model, by_arm[arm_key(a.model, a.mode, a.precision)]))
    bench = cfg["bench"]
    bench_s = 0.0 if bench_done else JOB_S + BENCH_FIXED_S
    for arm in [] if bench_done else bench_arms(cfg):
        c = by_arm[arm_key(*arm)]
        timing = (bench["warmup"] + bench["repeats"]) * BENCH_STEPS_PER_ARM * c.step_s
        sweep = sum(c.compile_s + bench["batch_repeats"] * c.step_s * max(1.0, b / 8) for b in bench["train_batches"])
        bench_s += c.startup_s + c.compile_s + timing + sweep
    n_jobs = JOBS_PER_STUDY + JOBS_PER_ARM * len(names) + JOBS_PER_CONDITION * len(cfg.get("conditions") or [])
    slowest = max(c.step_s for c in by_arm.values())
    infer = sum(
        FORWARD_SHARE * _samples(cfg, parse_arm(n).model, "test") / 8 * by_arm[arm_key(*_axes(n))].step_s for n in names
    )
    startup = max(c.startup_s for c in by_arm.values())
    rest_s = (n_jobs * (JOB_S + startup + REST_STEPS_PER_JOB * min(slowest, 1.0)) + infer) / max(1, at_once)
    return Estimate(schedule(trainings, at_once), bench_s, rest_s, at_once, len(names))


def _axes(name: str) -> tuple[str, str, str]:
    from ptycho.study.arms import parse_arm

    a = parse_arm(name)
    return a.model, a.mode, a.precision


#: The fewest epochs a cheaper choice offers, as a share of the study's own: the default's
#: 8 of 20 (the previous default) still learns the object, amplitude/phase SSIM 0.70/0.85
#: against 0.80/0.90 at 20 (docs/measurements.md); far fewer learn nothing the checks can
#: judge (2 epochs do not beat a featureless object, and such a training fails,
#: ``train.fail_on_collapse``), so a choice below this share is never offered.
LEAST_EPOCHS_SHARE = 0.4


def cheaper(cfg: Mapping, calibration: Mapping, at_once: int, budget_s: float) -> list[str]:
    """Cheaper choices, each with its estimate: the most epochs that fit ``budget_s`` (no
    fewer than :data:`LEAST_EPOCHS_SHARE` of the study's), two seeds, and where neither
    fits alone both together; where nothing fits, the least that still learns, said to be
    over the budget. The smoke preset's matrix is not offered (it answers nothing). Only
    choices whose arms the calibration timed."""
    from ptycho.study.workflow import deep_merge

    epochs = cfg["train"]["epochs"]
    least = max(1, math.ceil(LEAST_EPOCHS_SHARE * epochs))
    two = cfg["seeds"][:2] if len(cfg["seeds"]) > 2 else None

    def cost(e: int, seeds: list | None) -> float:
        trial = deep_merge(cfg, {"train": {"epochs": e}})
        return estimate({**trial, "seeds": seeds} if seeds else trial, calibration, at_once).total_s

    def words(e: int, seeds: list | None, note: str = "") -> str:
        flags = ([f"'train={{epochs: {e}}}'"] if e != epochs else []) + (
            [f"'seeds=[{','.join(map(str, seeds))}]'"] if seeds else []
        )
        return f"--config {' '.join(flags)} ({minutes(cost(e, seeds))}{note})"

    fewer = "; lower quality" if least < epochs else ""
    by_epochs = next((e for e in range(epochs - 1, least - 1, -1) if cost(e, None) <= budget_s), None)
    out = [words(by_epochs, None, fewer)] if by_epochs else []
    if two:
        out.append(words(epochs, two, "; fewer seeds decide less often"))
    if two and by_epochs is None and cost(epochs, two) > budget_s:
        both = next((e for e in range(epochs - 1, least - 1, -1) if cost(e, two) <= budget_s), None)
        out.append(
            words(both, two, fewer) if both else words(least, two, "; over the budget, but the least that still learns")
        )
    elif not out and least < epochs:
        out.append(words(least, None, "; over the budget, but the least that still learns"))
    return out


def estimate_lines(
    cfg: Mapping,
    calibration: Mapping,
    at_once: int,
    trained: Sequence[str] = (),
    bench_done: bool = False,
    hardware=None,
) -> tuple[Estimate, list[str]]:
    """The estimate and the lines the workflow prints before its first job: the estimate
    (naming the trained precisions ``hardware``, default the detected one, only emulates,
    with what the native one would take), and over ``budget_min`` the cheaper choices.
    ``trained`` may name arms of seeds a look added: the figure up to ``max_seeds`` leaves
    them out too."""
    from ptycho.nets.precision import AUTO, is_native
    from ptycho.study.bench.machine import hardware as detect
    from ptycho.study.workflow import arm_lists, arms

    hardware = detect() if hardware is None else hardware
    est = estimate(cfg, calibration, at_once, trained, bench_done)
    total = len(arms(cfg))  # ``trained`` may also name seeds a look added: count the configured
    done = total - est.trainings
    left = f" ({done} of {total} trainings done)" if done else ""
    lines = [f"this study will take {est.words()}{left}"]
    trained_precisions = dict.fromkeys(p for kind in cfg["models"] for p in arm_lists(cfg, kind)[1])
    emulated = [p for p in trained_precisions if not is_native(p, hardware)]
    if emulated:
        native = (cfg.get("auto_precision") or {}).get("precision")
        lines[0] += f", training {', '.join(emulated)}, which this machine only emulates"
        try:
            if native:
                faster = estimate(_with_precision(cfg, emulated, native), calibration, at_once)
                lines[0] += f" (precision=[{AUTO}], {native} here: {minutes(faster.total_s)})"
        except KeyError:
            pass
    from ptycho.study.workflow import look_plan

    plan = look_plan(cfg)
    if plan.sequential:  # the configured seeds first; the looks may add up to max_seeds
        most = estimate(plan.at_cap(cfg), calibration, at_once, trained, bench_done)
        lines[0] += f"; up to {minutes(most.total_s)} if the looks add seeds to the cap (max_seeds={plan.max_seeds})"
    budget_s = 60 * cfg["budget_min"]
    if est.total_s > budget_s:
        options = cheaper(cfg, calibration, at_once, budget_s)
        lines.append(
            f"that is over the study's budget of {cfg['budget_min']} min (budget_min)"
            + (f"; cheaper: {'; '.join(options)}" if options else "; no cheaper choice of epochs or seeds fits it")
        )
    return est, lines


#: The most seeds per arm ``max_seeds: auto`` considers, whatever the budget.
AUTO_SEEDS_LIMIT = 25


def study_s(cfg: Mapping, calibration: Mapping, at_once: int, seeds: int) -> float:
    """The whole study's estimated seconds on this machine with its looks taken until
    every compared arm has ``seeds`` seeds (``max_seeds = seeds``, every look adding)."""
    import dataclasses

    from ptycho.study.workflow import look_plan

    plan = look_plan({**cfg, "max_seeds": None})
    return estimate(dataclasses.replace(plan, max_seeds=seeds).at_cap(cfg), calibration, at_once).total_s


def seeds_in_budget(cfg: Mapping, calibration: Mapping, at_once: int) -> tuple[int, float]:
    """``max_seeds: auto``: the most seeds per arm (the configured ones, then
    ``seeds_per_look`` more at a time, and a last look that adds fewer where only that
    fits; at most :data:`AUTO_SEEDS_LIMIT`) at which the whole study, every look taken,
    still fits ``budget_min`` on this machine by its calibration, and that estimate in
    seconds. The configured seeds when even one more does not fit (no look adds any); the
    looks add seeds only while an item is open, so this bounds the cost."""
    from ptycho.study.workflow import look_plan

    plan = look_plan({**cfg, "max_seeds": None})
    budget_s = 60 * cfg["budget_min"]
    best = max((len(s) for s in plan.seeds.values()), default=0)
    best_s = estimate(cfg, calibration, at_once).total_s
    if not plan.seeds:  # nothing compares arms: nothing to add seeds to
        return best, best_s
    n = best + plan.seeds_per_look
    while n <= AUTO_SEEDS_LIMIT:
        total_s = study_s(cfg, calibration, at_once, n)
        if total_s > budget_s:
            break
        best, best_s, n = n, total_s, n + plan.seeds_per_look
    for fewer in range(min(n, AUTO_SEEDS_LIMIT + 1) - 1, best, -1):  # the budget's rest: a smaller last look
        total_s = study_s(cfg, calibration, at_once, fewer)
        if total_s <= budget_s:
            return fewer, total_s
    return best, best_s


def look_prices(cfg: Mapping, calibration: Mapping, at_once: int) -> str:
    """What the next two looks' seeds would cost, for a study whose budget buys none:
    "5 seeds per arm about 44 min, 7 about 58 min" (the configured seeds, then
    ``seeds_per_look`` more twice; at most :data:`AUTO_SEEDS_LIMIT`; minutes rounded up,
    so that the figure as ``budget_min`` holds it), so that a user sees before the first
    job which ``budget_min`` lets the looks add seeds."""
    from ptycho.study.workflow import look_plan

    plan = look_plan({**cfg, "max_seeds": None})
    if not plan.seeds:  # nothing compares arms: no look to price
        return ""
    start = max(len(s) for s in plan.seeds.values())
    sizes = [n for n in (start + plan.seeds_per_look, start + 2 * plan.seeds_per_look) if n <= AUTO_SEEDS_LIMIT]
    costs = [
        f"{n}{' seeds per arm' if i == 0 else ''} about {math.ceil(study_s(cfg, calibration, at_once, n) / 60)} min"
        for i, n in enumerate(sizes)
    ]
    return ", ".join(costs)


#: The share of runs of identical arms a budget should decide in, for :func:`decision_line`.
PLANNED_CHANCE = 0.8


def decision_chance(cfg: Mapping, max_seeds: int | None = None) -> tuple[tuple[int, ...], float] | None:
    """The PINN's seeds per arm at each look of the config's plan (``max_seeds``: planned up
    to that many instead), and how often such a study decides quality (amplitude and phase
    SSIM) and convergence for every PINN comparison when XLA changes nothing:
    :func:`ptycho.study.stats.decision_chance` at the config's ``expected_spread`` and
    margins, the metrics and comparisons taken as independent (slightly optimistic: an item
    decides at a look only when all its comparisons and metrics do at once). None where
    the PINN compares no arms or has one seed per arm (no paired t)."""
    from ptycho.nets.models import SUBJECT
    from ptycho.study.arms import matrix, pairs
    from ptycho.study.stats import decision_chance as chance
    from ptycho.study.workflow import arm_lists, look_plan

    plan = look_plan(cfg if max_seeds is None else {**cfg, "max_seeds": max_seeds})
    if SUBJECT not in plan.seeds:
        return None
    sizes, levels = (
        (plan.sizes(SUBJECT), plan.levels) if plan.sequential else ((len(plan.seeds[SUBJECT]),), (plan.alpha,))
    )
    modes, precisions, _ = arm_lists(cfg, SUBJECT)
    comparisons = len(pairs(matrix([SUBJECT], modes, [0], precisions)))
    if sizes[-1] < 2 or not comparisons:
        return None
    spread, limits = cfg["expected_spread"], cfg["thresholds"]
    two_sided, levels = limits["two_sided"], levels[: len(sizes)]
    margins = {
        "amplitude": "quality_max_ssim_diff",
        "phase": "quality_max_ssim_diff",
        "convergence": "convergence_max_rel",
    }
    each = [chance(sizes, levels, spread[k], limits[margin], two_sided)[0] for k, margin in margins.items()]
    return sizes, math.prod(each) ** comparisons


def decision_line(cfg: Mapping, calibration: Mapping, at_once: int, budgeted: bool = True) -> str:
    """What the plan's looks are worth, said before the first job: how often they decide
    quality and convergence if XLA changes nothing (:func:`decision_chance`), and, where that
    is under :data:`PLANNED_CHANCE`, the fewest seeds per arm whose looks reach it, as the
    setting that buys them: ``budgeted`` (``max_seeds: auto``, whose cap the budget sets),
    the ``budget_min`` of the whole study's minutes with them here; else ``max_seeds``.
    '' where there is nothing to judge. Speed is left out: its chance depends on XLA's true
    effect."""
    found = decision_chance(cfg)
    if found is None:
        return ""
    sizes, p = found
    what = "NOT WORSE" if not cfg["thresholds"]["two_sided"] else "EQUIVALENT"
    if len(sizes) > 1:
        looks = f"looks at {', '.join(map(str, sizes[:-1]))} and {sizes[-1]} seeds per arm"
    else:
        looks = f"{sizes[0]} seeds per arm"
    line = (
        f"if XLA changes nothing, {looks} find quality and convergence {what} in about {100 * p:.0f} % of runs "
        f"(expected_spread: the recorded studies' seed-to-seed spread)"
    )
    goal, most = f"{100 * PLANNED_CHANCE:.0f} %", max(AUTO_SEEDS_LIMIT, sizes[-1])
    if p >= PLANNED_CHANCE:
        return line
    for n in range(sizes[-1] + 1, most + 1):  # a cap between two looks' seeds: the last adds fewer
        more = decision_chance(cfg, n)
        if more and more[1] >= PLANNED_CHANCE:
            if budgeted:
                setting = f"--config budget_min={math.ceil(study_s(cfg, calibration, at_once, n) / 60)} here"
            else:
                setting = f"--config max_seeds={n}"
            return f"{line}; in {goal}, looks up to {n} seeds per arm: {setting}"
    return f"{line}; not even {most} seeds per arm decide in {goal}"


def _with_precision(cfg: Mapping, emulated: Sequence[str], native: str) -> dict:
    """``cfg`` with each ``emulated`` precision of the models' lists trained at ``native`` instead."""
    import copy

    out = copy.deepcopy(dict(cfg))
    for own in [out, *out.get("per_model", {}).values()]:
        if "precision" in own:
            own["precision"] = list(dict.fromkeys(native if p in emulated else p for p in own["precision"]))
    return out


#: ``PTYCHO_CALIBRATE=0`` skips the calibration and the estimate (a login node, a test).
CALIBRATE_ENV = "PTYCHO_CALIBRATE"


def calibrating() -> bool:
    """Whether the workflow calibrates (not switched off by :data:`CALIBRATE_ENV`)."""
    return os.environ.get(CALIBRATE_ENV, "1").strip().lower() not in ("0", "no", "false", "off")


def announce(
    cfg: Mapping, results: str | os.PathLike, at_once: int, threads: int, hardware=None, record: bool = True
) -> list[str]:
    """The workflow's lines before its first job: how long the study will take here.

    Calibrates once per machine and config, and again when the cached one is older than
    :data:`~ptycho.study.calibration.CALIBRATION_MAX_AGE_S` (``python -m ptycho calibrate``
    in a child process, its output in a log beside the cached record; about a minute for
    the default, seconds for the smoke preset), then estimates what is left to do: trainings
    whose ``model.json`` exists and a bench that has run are not counted. Sets
    :data:`ESTIMATE_ENV` for the report to set beside the run's real cost. With
    ``max_seeds: auto``, works out the cap the budget fits (:func:`seeds_in_budget`) and,
    with ``record`` (a run that makes files), records it for every later parse
    (:func:`ptycho.study.looks.record_cap`); a cap recorded before is kept. Never stops the
    study: a failed calibration is one line saying so."""
    import subprocess
    import sys

    from ptycho.study.bench.machine import machine_info

    if not calibrating():
        return []
    folder = Path(results) / cfg["preset"]
    from ptycho.study.looks import AUTO, recorded_cap
    from ptycho.study.workflow import arms, look_plan

    auto, uncapped = cfg.get("max_seeds") == AUTO, look_plan(cfg)
    cap = recorded_cap(folder, uncapped, cfg["budget_min"]) if auto else None
    plan = look_plan(cfg, cap)  # with max_seeds, the seeds its looks may add are still to come
    planned = arms(plan.at_cap(cfg))  # the configured arms when no look adds seeds
    trained = [a for a in planned if (folder / "models" / a / "model.json").exists()]
    bench_done = (folder / "bench" / "bench.json").exists()
    if len(trained) == len(planned) and bench_done:
        return []  # the trainings and the bench are done: what is left takes minutes
    path = calibration_path(cfg, at_once, threads, machine_info())
    lines = []
    if calibration_due(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        log = path.with_suffix(".log")
        hours = f"{CALIBRATION_MAX_AGE_S / 3600:g} h"
        again = f" (again: the cached timing is over {hours} old)" if path.exists() else ""
        print(
            f"ptycho workflow: timing a few steps of each of the study's {len(planned_arms(cfg))} arms for its "
            f"estimate (once per machine and config, and every {hours}){again}...",
            file=sys.stderr,
            flush=True,
        )
        command = [sys.executable, "-m", "ptycho", "calibrate", "--config-json", json.dumps(cfg)]
        command += ["--at-once", str(at_once), "--threads-per-arm", str(threads), "--out", str(path)]
        try:
            with open(log, "w") as out:
                subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=1800, check=True)
        except (OSError, subprocess.SubprocessError) as exc:
            return [f"no estimate: the calibration failed ({type(exc).__name__}; its log: {log})"]
    try:
        calibration = json.loads(path.read_text())
        said = []
        if auto:
            if cap is None:
                cap, total_s = seeds_in_budget(cfg, calibration, at_once)
                if record:
                    from ptycho.study.looks import record_cap

                    record_cap(folder, uncapped, cfg["budget_min"], cap, total_s)
            cfg = {**cfg, "max_seeds": cap}
            budget = f"the budget of {cfg['budget_min']} min (budget_min) on this machine"
            if look_plan(cfg).sequential:
                said = [
                    f"max_seeds auto: up to {cap} seeds per arm fit {budget}; the looks add them while an item is open"
                ]
            else:
                costs = look_prices(cfg, calibration, at_once)
                priced = (
                    f"; the whole study with {costs}: a budget_min that holds one lets the looks add seeds"
                    if costs
                    else ""
                )
                said = [f"max_seeds auto: no look adds seeds (even 1 more per arm would not fit {budget}{priced})"]
        est, lines = estimate_lines(cfg, calibration, at_once, trained, bench_done, hardware)
        lines += said
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"no estimate: the calibration {path} cannot be read ({type(exc).__name__}: {exc}); delete it"]
    try:  # its own step: a fault here is not the calibration's, and never stops the study
        worth = decision_line(cfg, calibration, at_once, budgeted=auto)
    except (ValueError, KeyError, TypeError) as exc:
        worth = f"no chance of a decision worked out ({type(exc).__name__}: {exc})"
    lines += [worth] if worth else []
    os.environ[ESTIMATE_ENV] = json.dumps(est.to_json())
    return lines


def calibrated_training_s(cfg: Mapping, at_once: int, threads: int) -> dict[tuple[str, str, str], float]:
    """Each planned (model, mode, precision)'s training seconds by this machine's cached
    calibration (the one :func:`announce` made or found), which orders the workflow's
    trainings (:func:`ptycho.study.schedule.training_priority`); empty where the calibration
    is switched off (:data:`CALIBRATE_ENV`) or without a readable one of every planned arm
    (the order then rests on the records' cost fields)."""
    from ptycho.errors import PtychoError
    from ptycho.study.bench.machine import machine_info

    if not calibrating():
        return {}
    try:
        calibration = json.loads(calibration_path(cfg, at_once, threads, machine_info()).read_text())
        by_arm = arm_costs(calibration)
        return {arm: training_seconds(cfg, arm[0], by_arm[arm_key(*arm)]) for arm in planned_arms(cfg)}
    except (OSError, ValueError, KeyError, TypeError, PtychoError):
        return {}


def seed_cap(cfg: Mapping, folder: str | os.PathLike, at_once: int, threads: int) -> int | None:
    """What ``max_seeds: auto`` plans up to: the cap recorded for this study
    (:func:`ptycho.study.looks.recorded_cap`), else the one this machine's cached
    calibration fits in the budget (:func:`seeds_in_budget`: a dry run shows the looks the
    run would plan); ``None`` without either (no look adds seeds) or for any other ``max_seeds``."""
    from ptycho.errors import PtychoError
    from ptycho.study.bench.machine import machine_info
    from ptycho.study.looks import AUTO, recorded_cap
    from ptycho.study.workflow import look_plan

    if cfg.get("max_seeds") != AUTO:
        return None
    recorded = recorded_cap(folder, look_plan(cfg), cfg["budget_min"])
    if recorded is not None or not calibrating():
        return recorded
    try:
        calibration = json.loads(calibration_path(cfg, at_once, threads, machine_info()).read_text())
        return seeds_in_budget(cfg, calibration, at_once)[0]
    except (OSError, ValueError, KeyError, TypeError, PtychoError):
        return None


__all__ = [
    "announce",
    "Estimate",
    "calibrated_training_s",
    "seed_cap",
    "seeds_in_budget",
    "estimate",
    "estimate_lines",
]
