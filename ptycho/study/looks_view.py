"""The looks of a study that added seeds until it decided, in words: the report's section,
its sentence and the console's line (:mod:`ptycho.study.looks` holds the records)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from ptycho.study.looks import CAP, DECIDED, FUTILE, Look
from ptycho.study.section import Section


def sentence(looks: Iterable[Look]) -> str:
    """The looks in words: how many were planned and taken, at what rate, and why the study stopped."""
    from ptycho.study.stats import MAX_SEEDS, level_words

    looks = tuple(looks)
    if not looks:
        return ""
    plan, last = looks[0].plan, looks[-1]
    why = {
        DECIDED: "every seeded item decided",
        CAP: f"it reached the cap of {plan.max_seeds} seeds per arm (max_seeds) with an item still INCONCLUSIVE",
        FUTILE: f"an open comparison's spread said more than {MAX_SEEDS} seeds per arm would be needed",
    }.get(last.why, last.why)
    union = any(plan.sizes(kind)[0] < 2 for kind in plan.seeds)
    kept = (
        "spent over the planned looks by a union bound (a look has one seed per arm)"
        if union
        else "spent over the planned looks, little at the first, at levels set by simulation (alpha spending)"
    )
    levels = [f"{level:.3g}" for level in plan.levels]
    listed = ", ".join(levels[:-1]) + f" and {levels[-1]}" if len(levels) > 1 else levels[0]
    at = {item: last.settled.get(item, last.index) for item in last.statuses}
    judged = "; ".join(
        f"{', '.join(items)} at look {k + 1} ({_counts(looks[k])}, level {plan.level(k):.3g}, "
        f"intervals at {level_words(1 - 2 * plan.level(k))} and {level_words(1 - plan.level(k))})"
        for k, items in sorted(_by_look(at).items())
    )
    return (
        f"Seeds were added while an item was INCONCLUSIVE: {len(looks)} of {plan.looks} planned looks taken "
        f"(up to {plan.max_seeds} seeds per arm, {plan.seeds_per_look} added per look). The error rate "
        f"{plan.alpha:g} is {kept}: the looks judge at {listed}. An item decided at a look keeps that "
        f"decision, so each seeded item above is judged on the seeds and at the level of the look it decided "
        f"at, or of the last: {judged}. It stopped because {why}. "
        + " ".join(f"{look.words()[0].upper()}{look.words()[1:]}." for look in looks)
    )


def _by_look(at: dict[str, int]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for item, k in at.items():
        out.setdefault(k, []).append(item)
    return out


def _status(look: Look, item: str) -> str:
    """``item``'s status at ``look``, and the look it decided at where that was earlier."""
    status, at = look.statuses.get(item, "-"), look.settled.get(item, look.index)
    return f"{status} (look {at + 1})" if at < look.index else status


def _counts(look: Look) -> str:
    return ", ".join(f"{m} {len(s)} seeds per arm" for m, s in look.seeds.items())


def headline(looks: Iterable[Look]) -> str:
    """The looks in one line for the console and the parent run: how many, the seeds, why it stopped."""
    looks = tuple(looks)
    if not looks:
        return ""
    first, last = looks[0], looks[-1]
    seeds = ", ".join(f"{m} {len(first.seeds.get(m, s))} -> {len(s)}" for m, s in last.seeds.items())
    return (
        f"Seeds: {len(looks)} of {last.plan.looks} planned looks ({seeds} seeds per arm), stopped: {last.why}; "
        "each item judged at the level of the look it decided at (the report's section on the looks)."
    )


def _tables(report) -> list:
    looks = report.looks
    if not looks:
        return []
    items = list(dict.fromkeys(i for look in looks for i in look.statuses))

    def decision(look: Look) -> str:
        if look.stop:
            return f"stop: {look.why}"
        return "add seeds: " + ", ".join(f"{m} to {len(s)}" for m, s in look.next_seeds.items())

    rows = [
        [
            str(look.index + 1),
            f"{look.plan.level(look.index):.3g}",
            ", ".join(f"{m} {len(s)}" for m, s in look.seeds.items()),
            *(_status(look, i) for i in items),
            ", ".join(sorted({f"{o.item} {o.key}" for o in look.open})) or "-",
            "-" if math.isnan(look.needed()) else f"{look.needed():.0f}",
            decision(look),
        ]
        for look in looks
    ]
    return [
        (
            "The looks: each judged at its level on the seeds so far, an item decided at an earlier look kept "
            "as it decided (seeds per arm, by model)",
            ["look", "level", "seeds", *items, "open comparisons", "seeds they need", "decision"],
            rows,
        )
    ]


def _text(report) -> str:
    return sentence(report.looks)


#: The report's section on the looks (shown when the study took some).
SECTION = Section("looks", "Seeds added until it decides", _tables, text=_text)
