"""The report's solver section: the networks beside the conventional solver.

:func:`summarise` turns the solver's two records (``ptycho solve``: every mode from a
flat start; and the warm starts) and the networks' arms into the report's ``solver``
entry; :func:`tables` and :func:`headline` render it for both views and
:func:`quality_time_figure` draws quality against seconds per object (networks as
points, the solver as a curve). On data without a ground truth (measured data) the
quality is the data misfit (the solver's at its checkpoints, each network's from
``ptycho evaluate``), and the entry says ``ground_truth: false``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ptycho.nets.models import SUBJECT
from ptycho.nets.precision import REFERENCE_PRECISION
from ptycho.nets.xla import REFERENCE
from ptycho.study.arm_summary import ArmSummary
from ptycho.study.arms import Arm
from ptycho.study.bench.record import Interval
from ptycho.study.checklist.agreement import OWN
from ptycho.study.presentation import MODEL_WORDS, PRECISION_WORDS
from ptycho.study.section import Figure, Section
from ptycho.study.solve import first_below, first_reaching
from ptycho.study.solver_record import MISFIT, SCORES, SolveRecord, SolverRun
from ptycho.study.solver_summary import ModeSummary, NetworkSummary, Reach, SolverSummary

if TYPE_CHECKING:
    from ptycho.study.report.record import StudyReport

#: The quality the issue asks of the solver: amplitude and phase SSIM.
TARGET = (0.995, 0.98)
#: What a table says where a score would be, on data without a ground truth.
NO_TRUTH = "no ground truth"
#: A reconstruction's quality without a ground truth: its data misfit and its half-scan FRC.
MEASURED = tuple(OWN)


def _seconds(run: SolverRun, iteration: int) -> float:
    """Seconds per object to run ``iteration`` iterations, at the run's median iteration time."""
    return float(iteration * run.seconds_per_iteration)


def _reach(run: SolverRun, amp: float, phase: float) -> Reach | None:
    """The first checkpoint of a flat-start ``run`` (its curve starts at iteration 1)
    whose amplitude and phase SSIM reach both values, with its seconds."""
    hit = first_reaching(run.curve, amp, phase)
    return None if hit is None else Reach(hit.iteration, _seconds(run, hit.iteration))


def _below(run: SolverRun, misfit: float) -> Reach | None:
    """Without a ground truth: the first checkpoint of a flat-start ``run`` whose data
    misfit is at most ``misfit``, with its seconds."""
    hit = first_below(run.curve, misfit)
    return None if hit is None else Reach(hit.iteration, _seconds(run, hit.iteration))


def summarise(
    solve: SolveRecord, warm: SolveRecord | None, arms: Mapping[str, ArmSummary | Mapping[str, Any]]
) -> SolverSummary:
    """The report's ``solver`` entry.

    ``arms`` are the report's network arms (:class:`ArmSummary`, or their JSON); a
    network's seconds per object are its inference time for one object's patterns.
    """
    flat = solve.flat_runs()
    truth = solve.ground_truth
    per_object = solve.patterns / max(solve.objects, 1)
    networks = []
    for name in sorted(arms):
        arm = ArmSummary.of(arms[name])
        metrics = arm.metrics
        if not metrics:
            continue
        rate, wall = arm.infer_patterns_per_s, arm.train_wall_s
        quality = (
            {
                "amp_ssim": metrics["amp_ssim"],
                "phase_ssim": metrics["phase_ssim"],
                "phase_psnr": metrics.get("phase_psnr"),
            }
            if truth
            else {k: metrics.get(k) for k in MEASURED}
        )
        networks.append(NetworkSummary(name, quality, per_object / rate if rate else None, wall / 60 if wall else None))
    fastest = min(flat, key=lambda m: flat[m].seconds_per_iteration)
    if truth:
        match = {n.arm: _reach(flat[fastest], n.quality["amp_ssim"], n.quality["phase_ssim"]) for n in networks}
    else:
        match = {
            n.arm: _below(flat[fastest], n.quality[MISFIT]) if n.quality[MISFIT] is not None else None for n in networks
        }
    finals = SCORES if truth else (MISFIT,)
    return SolverSummary(
        ground_truth=truth,
        engine=solve.engine,
        config=dict(solve.config),
        objects=solve.objects,
        patterns=solve.patterns,
        modes={
            mode: ModeSummary(
                r.compile_s,
                r.seconds_per_iteration,
                r.iterations,
                tuple(r.stopped),
                r.seconds_per_object,
                {k: r.final[k] for k in finals},
                _reach(r, *TARGET) if truth else None,
                tuple(dataclasses.replace(p, seconds=_seconds(r, p.iteration)) for p in r.curve),
            )
            for mode, r in flat.items()
        },
        fastest=fastest,
        ratios={k: Interval.from_json(v) for k, v in (solve.ratios or {}).items()},
        half_scan=solve.half_scan,
        networks=tuple(networks),
        match=match,
        warm_start=(warm or solve).warm_start,
        warm_mode=", ".join((warm or solve).modes),
    )


def _f(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "n/a"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _interval(r: Interval | None) -> str:
    if not r:
        return "n/a"
    return f"{r.ratio:.2f}x (95 % {r.low:.2f}-{r.high:.2f})"


def headline(solver: SolverSummary | Mapping) -> str:
    """The first lines' sentence: the data's ceiling and XLA's effect on the solver."""
    solver = SolverSummary.of(solver)
    best = solver.best
    target = best.target
    if not solver.ground_truth:
        return (
            f"The iterative solver ({solver.engine}, the dataset's probe held fixed, flat start) reconstructs the "
            f"measured data (no ground truth, so no scores) to a data misfit of {_f(best.final[MISFIT], 4)} after "
            f"{best.iterations:.0f} iterations ({best.seconds_per_object:.1f} s per object; 0.5 is the noise "
            f"level){_half_words(solver)}{_xla_words(solver)}"
        )
    reach = (
        f"reaches amplitude/phase SSIM {TARGET[0]}/{TARGET[1]} after {target.iterations} iterations "
        f"({target.seconds:.1f} s per object)"
        if target
        else f"does not reach amplitude/phase SSIM {TARGET[0]}/{TARGET[1]}"
    )
    return (
        f"The iterative solver ({solver.engine}, probe known, flat start) {reach} and ends at "
        f"{best.final['amp_ssim']:.4f}/{best.final['phase_ssim']:.4f}{_xla_words(solver)}"
    )


def _half_words(solver: SolverSummary) -> str:
    """The solver's half-scan resolution on measured data, as a clause (or nothing)."""
    half = solver.half_scan
    if not half:
        return ""
    return (
        f", and from each half of the scan alone to reconstructions that agree to {_f(half['amp_half_frc'], 3)} "
        f"(amplitude) and {_f(half['phase_half_frc'], 3)} (phase) cycles/px at the 1/2-bit threshold"
    )


def _xla_words(solver: SolverSummary) -> str:
    """XLA's effect on the solver's iteration, as the headline's last clause (or nothing)."""
    ratios = solver.ratios
    if not ratios:
        return ""
    mode = max(ratios, key=lambda m: ratios[m].ratio)
    r = ratios[mode]
    word = "faster" if r.low > 1 else ("slower" if r.high < 1 else "no different")
    return (
        f"; XLA {mode} makes its iteration {_interval(r)} of {REFERENCE}'s speed ({word}; all cores, "
        "modes interleaved in one process), where the work is all physics"
    )


def tables(report: StudyReport) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of the solver section. Without a ground truth the score cells
    say so, and a data misfit column takes their place as the quality."""
    solver = report.solver
    truth = solver.ground_truth

    def quality(q: Mapping) -> list[str]:
        if truth:
            return [_f(q["amp_ssim"]), _f(q["phase_ssim"]), _f(q["phase_psnr"], 1)]
        return [NO_TRUTH] * 3 + [_f(q.get(k), 4) for k in MEASURED]

    half = solver.half_scan or {}

    methods = [
        [
            n.arm,
            *quality(n.quality),
            _f(n.training_minutes, 1),
            _f(n.seconds_per_object, 2),
            _f(reach.iterations if (reach := solver.match.get(n.arm)) else None),
        ]
        for n in solver.networks
    ]
    for mode, r in solver.modes.items():
        methods.append(
            [
                f"solver {mode}",
                *quality({**r.final, **(half if half.get("mode") == mode else {})}),
                "-",
                _f(r.seconds_per_object, 2),
                f"{r.iterations:.0f} ({', '.join(r.stopped)})",
            ]
        )
    modes = [
        [
            mode,
            _f(r.compile_s, 2),
            _f(1e3 * r.seconds_per_iteration, 1),
            _interval(solver.ratios.get(mode)) if mode != REFERENCE else "1 (reference)",
            *(
                (_f(r.target.iterations if r.target else None), _f(r.target.seconds if r.target else None, 2))
                if truth
                else (NO_TRUTH, NO_TRUTH)
            ),
        ]
        for mode, r in solver.modes.items()
    ]
    warm = [
        [
            row.start,
            str(row.flat_iterations),
            f"{row.target_amp_ssim:.4f}/{row.target_phase_ssim:.4f}"
            if truth
            else f"data misfit {_f(row.target_data_misfit, 4)}",
            *(
                (_f(row.iterations), _f(row.iterations_saved), _f(row.seconds_saved, 2))
                if row.iterations is not None
                else ("not reached", "-", "-")
            ),
        ]
        for row in solver.warm_start
    ]
    out = [
        (
            "Quality and time per method (networks: test split reconstructed by the trained network; "
            "solver: iterations run to its tolerance or budget)"
            + (
                ""
                if truth
                else "; no ground truth (measured data): the quality is the data misfit, Poisson NLL per measured "
                "pixel above the saturated model's (0.5 at the noise level), and the solver matches a network when "
                "its misfit is as low; and the half-scan FRC, the reconstructions from the two halves of the scan "
                "correlated, its mean over the rings and where it crosses the 1/2-bit curve (cycles/px, higher is "
                f"finer; the solver's in {half.get('mode', REFERENCE)} only; a network's halves share the network, "
                "so they agree more than two independent reconstructions would)"
            ),
            [
                "method",
                "amp SSIM",
                "phase SSIM",
                "phase PSNR dB",
                *(
                    []
                    if truth
                    else [
                        "data misfit",
                        "amp half-scan FRC mean",
                        "phase half-scan FRC mean",
                        "amp half-scan 1/px",
                        "phase half-scan 1/px",
                    ]
                ),
                "training min",
                "s per object",
                "solver iterations to match",
            ],
            methods,
        ),
        (
            "The solver's iteration per XLA mode (all cores, one iteration of each mode in turn)",
            [
                "mode",
                "compile s",
                "ms per iteration",
                f"speed vs {REFERENCE} (95 % interval)",
                f"iterations to SSIM {TARGET[0]}/{TARGET[1]}",
                "seconds",
            ],
            modes,
        ),
    ]
    if warm:
        out.append(
            (
                f"Warm start from a network's reconstruction ({solver.warm_mode}): iterations to reach the "
                "flat start's quality",
                [
                    "start",
                    "flat start's iterations",
                    "its amp/phase SSIM" if truth else "its quality",
                    "iterations",
                    "saved",
                    "seconds saved",
                ],
                warm,
            )
        )
    return out


def _over_seeds(networks: Sequence[NetworkSummary]) -> dict[Arm, list[NetworkSummary]]:
    """The network arms with an inference time, grouped over seeds (keyed by the arm of seed 0)."""
    groups: dict[Arm, list[NetworkSummary]] = {}
    for n in networks:
        if n.seconds_per_object:
            groups.setdefault(Arm.parse(n.arm)._replace(seed=0), []).append(n)
    return groups


def quality_time_figure(solver: SolverSummary | Mapping):
    """Amplitude and phase SSIM against seconds per object: the solver's modes as
    curves over its iterations, each network (model, mode and precision, mean over seeds)
    as a point, drawn in the figures' encoding (colour: mode; marker: model; fill: precision).
    Without a ground truth one panel: the data misfit (log scale, lower is better)."""
    from ptycho.study.figures.style import PRECISION_STYLES, arm_colour, new_figure

    solver = SolverSummary.of(solver)
    truth = solver.ground_truth
    panels = (
        (("amp_ssim", "amplitude SSIM"), ("phase_ssim", "phase SSIM"))
        if truth
        else ((MISFIT, "data misfit, no ground truth (lower explains the data better)"),)
    )
    fig = new_figure((10.0, 4.0) if truth else (6.5, 4.0))
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    for ax, (key, title) in zip(axes, panels, strict=True):
        for mode, r in solver.modes.items():
            pts = [p for p in r.curve if p.iteration > 0]
            ax.plot(
                [p.seconds for p in pts],
                [getattr(p, key) for p in pts],
                marker=".",
                color=arm_colour(mode),
                label=f"solver {mode}",
            )
        for arm, group in _over_seeds(solver.networks).items():
            x = float(np.mean([n.seconds_per_object for n in group]))
            y = float(np.mean([np.nan if n.quality.get(key) is None else n.quality[key] for n in group]))
            words = f"{MODEL_WORDS.get(arm.model, arm.model)} {arm.mode}"
            if arm.precision != REFERENCE_PRECISION:
                words += f" {PRECISION_WORDS[arm.precision]}"
            label = words + (f" ({len(group)} seeds)" if len(group) > 1 else "")
            colour = arm_colour(arm.mode, arm.precision)
            fill = PRECISION_STYLES[arm.precision].fillstyle
            ax.plot(x, y, ls="", marker="s" if arm.model == SUBJECT else "^", ms=6, color=colour, fillstyle=fill,
                    markeredgecolor="black" if fill == "full" else colour, markeredgewidth=0.5 if fill == "full" else 1.2,
                    label=label)  # fmt: skip
        ax.set_xscale("log")
        if not truth:
            ax.set_yscale("log")
        ax.set_xlabel("seconds per object (log)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    where = "lower right" if truth else "upper right"
    axes[-1].legend(fontsize=7, loc=where, title="solver: curve; networks: points", title_fontsize=7)
    return fig


def entry(results) -> SolverSummary | None:
    """The report's solver entry (:func:`summarise`) from a study's
    :class:`~ptycho.study.results.StudyResults`: its solver records (the flat starts, then
    optionally the warm starts), the networks' scores and inference rates beside them;
    None without a solver record."""
    records = results.solver_records
    if not records:
        return None
    return summarise(records[0], records[1] if len(records) > 1 else None, results.arms())


def _draw(inputs):
    from ptycho.study.figures.style import message_figure

    solved = entry(inputs)
    return quality_time_figure(solved) if solved else message_figure("no solver run")


#: The report's section after the checklist (no verdict: the solver is a yardstick).
SECTION = Section(
    name="solver",
    title="Conventional solver",
    text=lambda report: headline(report.solver) + ".",
    tables=tables,
    figures=(Figure("solver", "quality against seconds per object: networks and the iterative solver", _draw),),
)
