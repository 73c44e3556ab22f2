"""The speedup item's section: the verdict's summary with the benchmark's findings in words,
the time to quality per seed, where its spread comes from, the benchmark's tables, the
trainings and the timing figures (the judging: :mod:`ptycho.study.checklist.speedup`)."""

from __future__ import annotations

import math

from ptycho.nets.precision import short
from ptycho.study.report.record import StudyReport
from ptycho.study.section import Figure, Section
from ptycho.study.tables import Table, fmt


def text(report: StudyReport) -> str:
    """The verdict's summary, why an unresolved XLA comparison's steps to the target move
    from pair to pair, the roofline in words (how close the fastest arm is to the machine's
    peak, which precision the hardware accelerates) and the machine."""
    from ptycho.study.bench import roofline_words
    from ptycho.study.bench.machine import machine_line
    from ptycho.study.ttq_comparison import NOT_RESOLVED

    item, ev = report.items["speedup"], report.speed
    roof = roofline_words(report.bench)
    machine = machine_line(ev.machine)
    unresolved = [c for c in report.time_to_quality.values() if c.is_xla() and c.answer == NOT_RESOLVED]
    parts = [
        item.summary,
        *(f"Why the time to quality is not resolved ({c.title}): {w}" for c in unresolved if (w := c.path_words())),
        ev.cross_check_words,
        ev.batch,
        ev.precision,
        ev.recommendation,
    ]
    text = ". ".join(p for p in parts if p)
    return f"{text}. {roof + ' ' if roof else ''}Benchmark machine: {machine}."


def ttq_table(report: StudyReport) -> Table:
    """Per comparison and seed: steps, step time and seconds to the target, both arms."""
    rows = []
    for c in report.time_to_quality.values():
        for side, reaches in (("arm", c.arm), ("reference", c.reference)):
            who = (
                f"{c.mode} {short(c.precision)}"
                if side == "arm"
                else f"{c.reference_mode} {short(c.reference_precision)}"
            )
            failed = getattr(c.failed, side)
            for x in reaches:
                rows.append(
                    [
                        c.title,
                        f"{who}, seed {x.seed}",
                        fmt(c.target),
                        str(x.epochs) + ("" if x.reached else " (FAILED)" if x.seed in failed else " (never)"),
                        fmt(x.steps),
                        fmt(x.step_s * 1e3),
                        fmt(x.seconds),
                        fmt(x.compile_s),
                    ]
                )
        if c.measured:
            rows.append(
                [
                    c.title,
                    "ratio (reference / arm)",
                    "",
                    "",
                    fmt(1 / c.steps_ratio),
                    fmt(c.per_step),
                    c.ratio_words(),
                    fmt(c.ratio_with_compile),
                ]
            )
    return (
        "Time to quality (target: the reference's mean final validation loss above its floor, plus the margin times its "
        "loss drop; each curve read through its readings' noise)",
        [
            "comparison",
            "run",
            "target (val loss above the floor)",
            "epochs to target",
            "steps",
            "step ms",
            "seconds to target",
            "compile s",
        ],
        rows,
    )


def steps_source_table(report: StudyReport) -> Table | None:
    """Where the spread of the steps to the target comes from, per paired comparison with
    two seeds that both reached it (:meth:`~ptycho.study.ttq_comparison.Comparison.steps_split`);
    None when there is none."""
    from ptycho.study.report.items.seeds import split_row, split_table

    rows = []
    for c in report.time_to_quality.values():
        seed_sd, paired_sd, share = c.steps_split()
        if math.isfinite(share):
            arm, reference = c.log_steps_to_target()
            both = set(arm) & set(reference)  # the seeds steps_split read
            rows.append(split_row(c.title, "log steps to the target", len(both), seed_sd, paired_sd, share))
    return split_table(
        "Where the spread of the steps to the target comes from (seeds that reached it in both arms): the seed's "
        "share (initial weights, batch order) is what the paired ratio leaves out",
        rows,
        "log ratios",
    )


def _trainings_at_once(report: StudyReport) -> str:
    """How many trainings ran at once, as words for the training table's title: one at a
    time (``--cores 1``, a cluster), up to N at once, or ``""`` when nothing says.

    Each training records the schedule it ran in (``timing.trainings_at_once``); a study
    whose arms ran in different runs (a rerun with another ``--cores``) says each count.
    Models trained before that was recorded fall back to the bench's shared context,
    which reproduces the schedule of the run that made the bench."""
    counts = sorted({n for arm in report.arms.values() if (n := arm.trainings_at_once)})
    if not counts:
        shared = report.bench.contexts.get("shared")
        counts = [shared.trainings_at_once] if shared and shared.trainings_at_once else []
    if not counts:
        return ""
    if counts == [1]:
        return ": one training at a time, nothing beside it"
    if len(counts) == 1:
        return f": up to {counts[0]} trainings at once, beside each other"
    return f": up to {' or '.join(map(str, counts))} trainings at once (arms trained in runs of different --cores)"


def training_table(report: StudyReport) -> Table:
    rows = []
    for name, arm in sorted(report.arms.items()):
        status = f"FAILED: {arm.failure_words}" if arm.failed else arm.status or "FINISHED"
        rows.append(
            [
                name,
                status,
                fmt(arm.compile_s),
                fmt(arm.step_median_s),
                fmt(arm.train_wall_s),
                fmt(arm.infer_patterns_per_s),
            ]
        )
    return (
        f"Training jobs (their steps ran in the pipeline's schedule{_trainings_at_once(report)})",
        ["arm", "training", "compile s", "step median s", "train wall s", "infer patterns/s"],
        rows,
    )


def tables(report: StudyReport) -> list[Table]:
    from ptycho.study.bench import batch_table
    from ptycho.study.bench import tables as bench_tables

    bench = report.bench
    source = steps_source_table(report)
    return [
        ttq_table(report),
        *([source] if source else []),
        *bench_tables(bench),
        batch_table(bench),
        training_table(report),
    ]


def _figure(kind: str):
    def draw(inputs):
        from ptycho.study.figures import timing

        if kind == "speedup":
            return timing.speedup_bars(inputs.benchmark)
        if kind == "precision_speedup":
            return timing.speedup_bars(inputs.benchmark, axis="precision")
        return getattr(timing, kind)(inputs.benchmark)

    return draw


SECTION = Section(
    name="speedup",
    title="Speedup",
    text=text,
    tables=tables,
    figures=(
        Figure("step_times", "step-time distributions", _figure("step_time_distributions")),
        Figure("components", "where the step time goes, per mode", _figure("component_bars")),
        Figure("speedup", "XLA's own speedup: each mode vs off at the same precision", _figure("speedup")),
        Figure(
            "precision_speedup",
            "the precision's own speedup: each precision vs float32 in the same mode",
            _figure("precision_speedup"),
        ),
    ),
)
