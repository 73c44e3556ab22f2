"""The study's jobs: the benchmark, the scaling run, a checklist item, a look, a condition, the figures and the report."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ptycho.errors import PtychoError
from ptycho.nets.models import SUBJECT
from ptycho.study.results import StudyResults
from ptycho.tracking.record import JobRecord


def bench(
    dataset: str | None,
    model_jsons: Sequence[str],
    models: Sequence,
    train_cfg,
    modes: Sequence[str],
    config,
    out: str | None,
    *,
    precisions: Sequence[str] = (),
    sim=None,
) -> JobRecord:
    """Every (model, mode, precision) arm timed in its own process (:func:`ptycho.study.bench.run`).

    With ``model_jsons`` the trained models' own architecture, loss and batch size are
    timed (the benchmark must time the networks the study trains, not the CLI's
    defaults); otherwise ``models`` and ``train_cfg``. Without ``dataset``, a train
    split simulated from ``sim``. ``precisions`` beyond float32 (always timed) add arms of
    every model and mode. One nested run per arm, all with the same keys.
    """
    from ptycho.artifacts import write_json
    from ptycho.nets.train import TrainConfig, configs_from_meta
    from ptycho.study import bench as timing

    if model_jsons:
        configs = {}
        for record in StudyResults(models=model_jsons).trainings.values():
            model_cfg, trained = configs_from_meta(record.meta)
            configs.setdefault(model_cfg.kind, (model_cfg, trained))
        kinds = [m.kind for m in models]
        models = [configs[k][0] for k in kinds if k in configs]
        if not models:
            raise PtychoError(f"bench: none of --like {' '.join(model_jsons)} is a model of kind {', '.join(kinds)}")
        train_cfg = TrainConfig(batch_size=next(iter(configs.values()))[1].batch_size)
    if dataset:
        source = dataset
    else:
        from ptycho.data.simulate import simulate_split

        source = simulate_split(sim, "train")
    from ptycho.study.bench.record import BenchRecord

    result = timing.run(source, models, train_cfg, modes, config, precisions)
    if out:
        write_json(out, result, producer="bench")
    record = BenchRecord.from_json(result)
    gpus = record.machine["gpus"]  # what the workers' TensorFlow saw; this process loads none
    return JobRecord(
        tags={"device": "GPU" if gpus else "CPU", "gpus": str(gpus) if gpus else "none"},
        params={
            "bench.modes": " ".join(record.modes),
            "bench.precisions": " ".join(record.precisions),
            "bench.repeats": config.repeats,
            **{f"bench.context.{k}": c.how for k, c in record.contexts.items()},
        },
        nested=timing.arm_runs(record),
        artifacts=[(out, "bench")] if out else [],
        summary=timing.format_table(record),
    )


def scaling(config: Mapping, preset: str, sizes: Sequence[int], out: str | None) -> JobRecord:
    """Cost growth with the data size, at the study's settings (``config`` resolved)."""
    from ptycho.artifacts import write_json
    from ptycho.nets.xla import REFERENCE
    from ptycho.study import scaling as growth
    from ptycho.study import workflow

    result = growth.run(
        sizes,
        workflow.simulation_config(config),
        workflow.model_config(config, SUBJECT),
        workflow.train_config(config, REFERENCE, 0, SUBJECT),
        progress=True,
    )
    sim = workflow.simulation_config(config)
    side = sim.object_size
    result["solver"] = growth.solver_run(
        (side, int(side * 1.5), 2 * side), sim, workflow.solver_config(config), workflow.solver_mode(config)
    )
    result["preset"] = preset
    if out:
        write_json(out, result)
    return JobRecord(summary=growth.format_table(result) + "\n\n" + growth.format_solver_table(result["solver"]))


def check(item: str, threshold: float, out: str, **inputs) -> JobRecord:
    """One checklist item (:mod:`ptycho.study.checklist`) measured or collected, and judged
    against ``threshold``; ``inputs`` are :class:`~ptycho.study.checklist.Inputs`' fields
    (the outputs it judges as ``results``, a :class:`~ptycho.study.results.StudyResults`)."""
    from ptycho.artifacts import write_json
    from ptycho.study import checklist

    try:
        spec = checklist.get(item)
    except KeyError:
        raise PtychoError(f"check: unknown item {item!r}; choose one of {', '.join(checklist.names())}") from None
    result = spec.collect(checklist.Inputs(**inputs), threshold)
    write_json(out, result.to_json(), producer=checklist.producer(item))
    return JobRecord(
        metrics={f"{item}_value": result.value, f"{item}_pass": float(result.passed)},
        tags={"status": result.status},
        artifacts=[(out, None)],
        summary=f"{item}: {result.status} (value {result.value:.4g}, threshold {result.comparison} "
        f"{result.threshold:.4g}): {result.summary}",
    )


def look(index: int, plan: Mapping, thresholds: Mapping[str, float], out: str, previous: str | None = None,
         **inputs) -> JobRecord:  # fmt: skip
    """Look ``index`` of a study that adds seeds until it decides (:mod:`ptycho.study.looks`):
    the seeded items not decided at an earlier look (``previous``: the record of the look
    before) judged on the trainings and scores given (``inputs``: the
    :class:`~ptycho.study.checklist.Inputs` fields) at the plan's level for that look, and
    whether to stop or which seeds to add."""
    from ptycho.artifacts import read_json, write_json
    from ptycho.config import defaults
    from ptycho.study import checklist, looks
    from ptycho.study.checklist.look import judge

    limits = {**defaults("thresholds"), **thresholds}
    by_item = {name: float(limits[checklist.get(name).threshold]) for name in looks.SEEDED}
    before = looks.Look.from_json(read_json(previous, "look")) if previous else None
    record = judge(index, looks.Plan.from_json(plan), checklist.Inputs(**inputs), by_item, before)
    write_json(out, record.to_json(), producer="look")
    return JobRecord(
        metrics={
            "look": float(index),
            "stop": float(record.stop),
            **{f"{k}_seeds": len(v) for k, v in record.seeds.items()},
        },
        tags={"why": record.why},
        artifacts=[(out, None)],
        summary=record.words(),
    )


def condition(
    name: str,
    dataset: str,
    model_jsons: Sequence[str],
    out: str,
    *,
    modes: Sequence[str],
    precisions: Sequence[str],
    thresholds: Mapping[str, float],
) -> JobRecord:
    """The cheap checks at one condition (:mod:`ptycho.study.conditions`), each judged as its
    checklist item is, and the trained networks' scores on the condition's test split."""
    from ptycho.artifacts import write_json
    from ptycho.config import defaults
    from ptycho.study import conditions

    cond = conditions.CONDITIONS[name]
    limits = {**defaults("thresholds"), **thresholds}
    result = conditions.check(
        name,
        dataset,
        [str(Path(m).parent) for m in model_jsons],
        loss=cond.loss,
        nphotons=cond.nphotons,
        modes=modes,
        precisions=precisions,
        thresholds=limits,
    )
    write_json(out, result.to_json(), producer="condition")
    return JobRecord(
        metrics=result.metrics(),
        tags={"status": result.status, "condition": name},
        artifacts=[(out, None)],
        summary=result.words(),
    )


def figures(results: StudyResults, out_dir: str) -> JobRecord:
    """The report's figures (each section's own, :func:`ptycho.study.report.items.figures`)
    from the study's outputs, as PNG and SVG, all rendered before any is written."""
    from ptycho.artifacts import atomic_write
    from ptycho.study.figures.style import render
    from ptycho.study.report import items

    try:  # render everything before writing anything: no partial set of figures
        made = {figure.stem: render(figure.draw(results)) for _, figure in items.figures()}
    except (ValueError, KeyError) as err:
        raise PtychoError(
            f"cannot draw the figures from these inputs ({err}); re-run the jobs that wrote them"
        ) from None
    out = Path(out_dir)
    record = JobRecord(summary=f"{out}: {len(made)} figures ({', '.join(made)})")
    for name, files in made.items():
        for ext, data in files.items():
            path = out / f"{name}.{ext}"
            atomic_write(path, lambda tmp, data=data: Path(tmp).write_bytes(data), suffix=f".{ext}")
            record.artifacts.append((str(path), "figures"))
    return record


def report(
    results: StudyResults,
    figure_pngs: Sequence[str],
    benchmarks: str | None,
    config: Mapping,
    out_dir: str,
    parent: Mapping[str, str],
) -> JobRecord:
    """The validation report (JSON, Markdown, HTML) from the study's outputs (``results``:
    the checklist's records, every arm's, the solver's, the conditions'
    (:mod:`ptycho.study.conditions`) and measured data's probe refinement
    (:mod:`ptycho.study.probe`)), the figures' PNGs and the jobs' benchmark files."""
    from ptycho.study import conditions_view, solver_view
    from ptycho.study import report as views
    from ptycho.study.bench import machine_info
    from ptycho.study.checklist.speed_evidence import SpeedEvidence
    from ptycho.study.report.answers import answers as report_answers
    from ptycho.tracking import config_hash, git_commit

    items = results.checked
    figures = {}
    names = [name for name, _, _ in views.figures()]
    for path in figure_pngs:
        stem = Path(path).stem
        if stem not in names:
            raise PtychoError(
                f"{path}: not a figure of the report (expected one of {', '.join(names)}.png); "
                "pass the PNGs of 'ptycho figures'"
            )
        try:
            figures[stem] = Path(path).read_bytes()
        except OSError as err:
            raise PtychoError(f"{path}: cannot read ({err.strerror}); run 'ptycho figures' first") from None
        if not figures[stem].startswith(b"\x89PNG"):
            raise PtychoError(f"{path}: not a PNG file; re-run 'ptycho figures'")
    cost = views.pipeline_cost(benchmarks) if benchmarks else None
    if cost:  # what the workflow estimated before its first job (ptycho.study.estimate), beside what it took
        from ptycho.study.estimate import ESTIMATE_ENV, Estimate

        with contextlib.suppress(ValueError, TypeError, AttributeError):
            if found := json.loads(os.environ.get(ESTIMATE_ENV) or "null"):
                cost = dataclasses.replace(cost, estimate=Estimate.from_json(found))
    provenance = views.Provenance(
        config_hash=config_hash(config),
        git_commit=git_commit(Path.cwd()),
        mlflow_run_id=parent.get("run_id", ""),
        tracking_uri=parent.get("tracking_uri", ""),
        experiment_id=parent.get("experiment_id", ""),
    )
    # The device the study ran on is what the benchmark's TensorFlow processes saw.
    gpus = SpeedEvidence.from_json(items["speedup"].evidence).machine.get("gpus")
    result = views.build(
        items,
        results.arms(),
        config,
        machine_info(gpus),
        tuple(figures),
        cost,
        provenance,
        solver_view.entry(results),
        conditions_view.rows(results.condition_records, config),
        probe=results.refinement,
        looks=results.look_records,
    )
    paths = views.write(result, out_dir, figures)
    artifacts = [(str(p), "report") for p in paths.values()]
    others = report_answers(result)
    others[""].artifacts += [*artifacts, *((p, "figures") for p in figure_pngs)]
    return JobRecord(
        metrics={"verdict_pass": float(result.verdict == "PASS")},
        artifacts=artifacts,
        close_parent=parent or None,
        others=others,
        summary=f"{paths['html']}: verdict {result.verdict} "
        + " ".join(f"{k}={v.status}" for k, v in result.items.items()),
    )
