"""The pipeline's jobs: each reads its inputs, does its one thing, writes its outputs
atomically and returns a :class:`~ptycho.tracking.record.JobRecord` of what it did.

One function per tracked CLI command (``ptycho simulate``, ``train``, ...). The CLI
parses arguments into the values these take and hands the record to tracking in one
place (``ptycho.cli``), so nothing here asks whether an MLflow run exists; a test can
call a job and read its record. Heavy libraries are imported inside, as everywhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ptycho.errors import PtychoError
from ptycho.nets.models import SUBJECT
from ptycho.study.arms import ARM_TAGS, Arm
from ptycho.study.results import StudyResults
from ptycho.tracking.record import DatasetInput, JobRecord, LoggedModel, Progress

#: The keys of a training's curve, logged per epoch.
CURVE_KEYS = ("train_loss", "val_loss", "log_scale")


def _prefixed(prefix: str, cfg: Any) -> dict[str, Any]:
    return {f"{prefix}.{k}": v for k, v in dataclasses.asdict(cfg).items()}


def _input(name: str, digest: str, path: str, split: str) -> DatasetInput:
    return DatasetInput(name, digest, str(Path(path).resolve()), split)


def _with_dataset(record: JobRecord, name: str, ds, path: str, split: str) -> JobRecord:
    record.tags["dataset_digest"] = ds.attrs["digest"]
    record.datasets.append(_input(name, ds.attrs["digest"], path, split))
    return record


def simulate(cfg, train_path: str | None, test_path: str, *, progress: bool = True) -> JobRecord:
    """A train/test pair from ``cfg``, written as a pair or not at all; without
    ``train_path``, the test split alone (a condition's, :mod:`ptycho.study.conditions`):
    each split has its own seeds, so it holds the pair's test object, its beam scaled to
    ``cfg.nphotons`` on itself (a pair's test split takes the train split's)."""
    from ptycho.data.dataset import write_dataset
    from ptycho.data.simulate import simulate as make
    from ptycho.data.simulate import simulate_split

    paths = {"train": train_path, "test": test_path}
    datasets = make(cfg, progress=progress) if train_path else {"test": simulate_split(cfg, "test", progress=progress)}
    record = JobRecord(params=_prefixed("simulation", cfg))
    written: list[str] = []
    lines = []
    for split, ds in datasets.items():
        path = paths[split]
        try:
            digest = write_dataset(path, datasets[split])
        except BaseException:  # a write refused, or Ctrl-C between the two
            for done in written:  # a pair or nothing: no train split without its test split
                Path(done).unlink(missing_ok=True)
            raise
        written.append(path)
        record.datasets.append(_input(f"{split}.h5", digest, path, split))
        record.metrics.update(
            {f"{split}_patterns": ds.diffraction.shape[0], f"{split}_groups": ds.groups.shape[0], "scale": ds.scale}
        )
        lines.append(
            f"{split}: {path}  patterns={ds.diffraction.shape[0]} groups={ds.groups.shape[0]} "
            f"scale={ds.scale:.6g} sha256={digest[:16]}"
        )
    record.summary = "\n".join(lines)
    return record


def import_data(source: str, out: str, *, split: str, gridsize: int, n: int = 0, reduce: str = "crop") -> JobRecord:
    """The user's own file (a CXI file, a tike scan or a ptycho dataset:
    :mod:`ptycho.data.sources`) as the study's ``split``, validated and written where
    ``simulate`` writes its datasets; a tike scan at side ``n`` made by ``reduce``."""
    from ptycho.data.dataset import write_dataset
    from ptycho.data.sources import describe, read_source

    found = describe(source)
    ds = read_source(source, gridsize=gridsize, split=split, n=n, reduce=reduce, source=found)
    digest = write_dataset(out, ds)
    record = JobRecord(
        params={
            "data.source": str(Path(source).resolve()),
            "data.kind": found.kind,
            **({"data.n": n, "data.reduce": reduce} if n and n != found.n else {}),
        },
        tags={"ground_truth": str(ds.has_ground_truth).lower()},
        metrics={
            f"{split}_patterns": ds.diffraction.shape[0],
            f"{split}_groups": ds.groups.shape[0],
            "scale": ds.scale,
        },
        summary=f"{split}: {out} from {source} ({found.words}): {ds.diffraction.shape[0]} patterns, "
        f"{ds.groups.shape[0]} groups, scale={ds.scale:.6g} sha256={digest[:16]}",
    )
    record.datasets.append(_input(f"{split}.h5", digest, out, split))
    return record


def export_cxi(file: str, out: str, geometry) -> JobRecord:
    """A dataset file as CXI 1.6 in the physical units of ``geometry``."""
    from ptycho.data.cxi import export_cxi as write
    from ptycho.data.dataset import read_dataset

    ds = read_dataset(file)
    write(ds, out, geometry)
    pixel_nm = geometry.object_pixel_m(ds.probe.shape[0]) * 1e9
    record = JobRecord(
        params=_prefixed("cxi", geometry),
        metrics={"object_pixel_nm": pixel_nm},
        summary=f"{out}: CXI 1.6, {ds.diffraction.shape[0]} patterns, object pixel {pixel_nm:.3g} nm "
        f"at {geometry.energy_ev:g} eV",
    )
    record.datasets.append(_input(Path(file).name, ds.attrs["digest"], file, ds.attrs.get("split", "")))
    return record


def train(
    dataset: str,
    model_cfg,
    train_cfg,
    out: str,
    *,
    arm: Mapping[str, str],
    progress: bool = True,
    resume: bool = False,
    checkpoint_dir: str | None = None,
    on_diverge: str = "raise",
    live: Progress | None = None,
) -> JobRecord:
    """Train one arm; ``live`` receives each epoch's curve (and a resumed run's earlier ones).

    A diverged training under ``on_diverge='record'`` is a result, not an error: its
    outputs hold the last good state marked FAILED and the record carries the reason.
    """
    from ptycho.data.dataset import read_dataset
    from ptycho.nets.train import train as fit
    from ptycho.study.schedule import scheduled_at_once

    ds = read_dataset(dataset)
    model_params = _prefixed("model", model_cfg)
    params = {**model_params, **_prefixed("train", train_cfg)}
    on_epoch = on_resume = None
    resumed: dict[str, Any] = {}
    if live is not None:

        def on_epoch(epoch: int, rec: dict) -> None:
            live(epoch + 1, {k: rec[k] for k in CURVE_KEYS})

        def on_resume(history: list[dict]) -> None:
            # The earlier attempt's epochs, at their own steps: this run holds the whole curve.
            resumed["ptycho.resumed_after_epoch"] = len(history)
            for rec in history:
                live(rec["epoch"], {k: rec[k] for k in CURVE_KEYS})

    meta = fit(
        ds,
        model_cfg,
        train_cfg,
        out,
        progress=progress,
        on_epoch=on_epoch,
        resume=resume,
        checkpoint_dir=checkpoint_dir,
        on_resume=on_resume,
        on_diverge=on_diverge,
        at_once=scheduled_at_once(),
    )
    record = _with_dataset(JobRecord(params=params, tags=resumed), "train.h5", ds, dataset, "train")
    record.artifacts.append((str(Path(out) / "model.json"), "model"))
    if meta.get("status") == "FAILED":
        record.failure = meta["failure"]
        record.summary = f"ptycho train: warning: {meta['failure']}; recorded as a FAILED model in {out}"
        return record
    from ptycho.study.stats import iqr

    last, t = meta["history"][-1], meta["timing"]
    steps = np.asarray(t["step_times_s"])
    record.metrics.update(
        {
            "compile_s": t["compile_s"],
            "step_median_s": t["step_median_s"],
            "step_iqr_s": iqr(steps),
            "train_wall_s": t["train_wall_s"],
            "traces_train": meta["traces"]["train"],
        }
    )
    from ptycho.nets.inputs import layout
    from ptycho.study import mlflow_model

    # The network as an MLflow model (pyfunc): the arm's logged model, loadable by MLflow.
    folder = mlflow_model.save(out, layout(ds, model_cfg.kind, ds.counts)[:1])
    arm_tags = {k: arm[k] for k in ARM_TAGS if k in arm}
    named = Arm.of_tags(arm_tags)
    record.model = LoggedModel(
        named.name if named else model_cfg.kind,
        str(folder),
        dataset=("train.h5", ds.attrs["digest"]),
        params={
            **model_params,
            "train.xla": train_cfg.xla,
            "train.precision": train_cfg.precision,
            "train.epochs": train_cfg.epochs,
        },
        tags=arm_tags,
        step=last["epoch"],
        metrics={
            "final_train_loss": last["train_loss"],
            "final_val_loss": last["val_loss"],
            "step_median_s": t["step_median_s"] or float("nan"),
        },
    )
    record.summary = (
        f"{out}: {model_cfg.kind} xla={train_cfg.xla} epochs={last['epoch']} train_loss={last['train_loss']:.6g} "
        f"val_loss={last['val_loss']:.6g} compile={t['compile_s']:.2f}s "
        f"step_median={t['step_median_s'] or float('nan'):.4f}s"
    )
    return record


def infer(model: str, dataset: str, out: str, *, xla: str | None = None, batch_size: int | None = None) -> JobRecord:
    """The test split's patches reconstructed by a trained model, timed."""
    from ptycho.artifacts import write_arrays
    from ptycho.data.dataset import read_dataset
    from ptycho.data.provenance import DIGEST_KEY
    from ptycho.nets.infer import reconstruct

    ds = read_dataset(dataset)
    rec = reconstruct(model, ds, xla=xla, batch_size=batch_size)
    write_arrays(
        out,
        producer="infer",
        # stitch and evaluate refuse a file of another dataset by it (ptycho.data.provenance)
        **{DIGEST_KEY: np.array(ds.attrs["digest"])},
        patches=rec.patches,
        positions=rec.positions,
        position_object=rec.position_object,
        seconds=np.float64(rec.seconds),
        compile_seconds=np.float64(rec.compile_seconds),
        patterns=np.int64(rec.patterns),
        intensity_norm=np.float64(rec.intensity_norm),  # the given data's own (docs/physics.md, section 4)
    )
    record = JobRecord(
        metrics={
            "infer_patterns_per_s": rec.patterns_per_second,
            "infer_compile_s": rec.compile_seconds,
            "infer_seconds": rec.seconds,
            "infer_patterns": rec.patterns,
        },
        summary=f"{out}: {len(rec.patches)} patches, {rec.patterns_per_second:.1f} patterns/s, "
        f"compile {rec.compile_seconds:.2f}s",
    )
    return _with_dataset(record, "test.h5", ds, dataset, "test")


def stitch(dataset: str, reconstruction: str, out: str, *, weighted: bool = True, phase_sync: bool = True) -> JobRecord:
    """Patches placed at their own positions into one image per object. On measured data
    (no ground truth) also ``halves`` (2, objects, H, W): the objects stitched from each
    interleaved half of the scan alone (:func:`ptycho.analysis.stitch.scan_halves`), whose
    agreement ``evaluate`` reads as the resolution (half-scan FRC)."""
    from ptycho.analysis.stitch import scan_halves, stitch_objects
    from ptycho.artifacts import read_arrays, write_arrays
    from ptycho.data.dataset import read_dataset
    from ptycho.data.provenance import DIGEST_KEY

    ds = read_dataset(dataset)
    rec = read_arrays(reconstruction, ("patches", "positions", "position_object"), producer="infer")
    patches, positions, owner = rec["patches"], rec["positions"], rec["position_object"]

    def stitched(sel) -> np.ndarray:
        return np.stack(
            stitch_objects(patches[sel], positions[sel], owner[sel], ds, weighted=weighted, phase_sync=phase_sync)
        ).astype(np.complex64)

    arrays = {}
    try:
        arrays["images"] = stitched(slice(None))
        if not ds.has_ground_truth:
            arrays["halves"] = np.stack([stitched(half) for half in scan_halves(owner)])
    except ValueError as err:
        raise PtychoError(f"{reconstruction}: {err}; re-run infer with this dataset") from None
    images = arrays["images"]
    write_arrays(out, producer="stitch", **arrays, **{DIGEST_KEY: np.array(ds.attrs["digest"])})
    halves = " and from each half of the scan" if "halves" in arrays else ""
    return JobRecord(summary=f"{out}: {len(images)} stitched object(s) of shape {images[0].shape}{halves}")


def evaluate(dataset: str, stitched: str, out: str, *, products=None) -> JobRecord:
    """Stitched objects scored against the ground truth (SSIM, PSNR, MAE, FRC); on
    measured data, which has none, their data misfit instead (:func:`evaluate_measured`).
    With ``products`` (:class:`ptycho.study.products.Products`), each object is also
    written as a ptychodus product, after the scores."""
    from ptycho.artifacts import STITCHED, read_arrays
    from ptycho.data.dataset import read_dataset

    ds = read_dataset(dataset)
    arrays = read_arrays(stitched, ("images",), producer=STITCHED)
    images = arrays["images"]
    if ds.has_ground_truth:
        record = evaluate_scored(ds, dataset, images, stitched, out)
    else:
        record = evaluate_measured(ds, dataset, images, arrays.get("halves"), stitched, out)
    if products is not None:
        from ptycho.study.products import write_products

        written = write_products(products, ds, list(images))
        record.summary += f"; {len(written)} ptychodus product(s) in {products.folder}"
    return record


def evaluate_scored(ds, dataset: str, images: np.ndarray, stitched: str, out: str) -> JobRecord:
    """The record of an arm on data with a ground truth: every object scored against it."""
    from ptycho.analysis.metrics import score_all
    from ptycho.artifacts import write_json

    truths = [ds.ground_truth(m) for m in range(ds.objects.shape[0])]
    if len(images) != len(truths) or any(i.shape != t.shape for i, t in zip(images, truths, strict=True)):
        raise PtychoError(
            f"{stitched}: stitched images do not match the objects of {dataset}; re-run stitch with this dataset"
        )
    try:
        result = score_all(list(images), truths)
    except ValueError as err:
        raise PtychoError(f"{stitched}: cannot score ({err})") from None
    result["dataset_digest"] = ds.attrs["digest"]
    write_json(out, result, producer="evaluate")
    mean = result["mean"]
    record = JobRecord(
        metrics={k: v for k, v in mean.items() if isinstance(v, int | float)},
        stepped=[
            (i, {f"{k}_image": v for k, v in per.items() if k in ("amp_ssim", "phase_ssim")})
            for i, per in enumerate(result["per_image"])
        ],
        artifacts=[(out, "metrics")],
        summary=f"{out}: amp SSIM {mean['amp_ssim']:.4f} phase SSIM {mean['phase_ssim']:.4f} "
        f"amp PSNR {mean['amp_psnr']:.2f} dB over {result['n_images']} image(s)",
    )
    return _with_dataset(record, "test.h5", ds, dataset, "test")


def evaluate_measured(
    ds, dataset: str, images: np.ndarray, halves: np.ndarray | None, stitched: str, out: str
) -> JobRecord:
    """The record of an arm on measured data: no ground truth, so no scores (the quality
    item compares the arms' reconstructions with each other); per object its data misfit
    (:mod:`ptycho.solvers.misfit`: how well it explains the measured patterns) and its
    half-scan FRC (:func:`ptycho.analysis.metrics.half_scan`: how far the reconstructions
    from the two halves of the scan agree)::

        {"ground_truth": false, "n_images", "mean": {"data_misfit", "amp_half_frc", "phase_half_frc",
         "amp_half_frc_mean", "phase_half_frc_mean"}, "per_image": [{...}], "dataset_digest"}
    """
    from ptycho.analysis.metrics import half_scan, half_scan_border
    from ptycho.artifacts import write_json
    from ptycho.solvers.misfit import data_misfit

    regions = [(int(y1 - y0), int(x1 - x0)) for x0, y0, x1, y1 in ds.scan_region]
    if len(images) != len(regions) or any(i.shape != r for i, r in zip(images, regions, strict=True)):
        raise PtychoError(
            f"{stitched}: stitched images do not match the scanned regions of {dataset}; re-run stitch with this dataset"
        )
    if halves is None or np.shape(halves) != (2, *np.shape(images)):
        raise PtychoError(
            f"{stitched}: no objects stitched from each half of the scan, which measured data is judged by; "
            "re-run stitch (it writes them for data without a ground truth)"
        )
    try:
        misfits = data_misfit(ds, list(images))
        per_image = [
            {"data_misfit": float(v), **half_scan(a, b, border=half_scan_border(ds.n))}
            for v, a, b in zip(misfits, halves[0], halves[1], strict=True)
        ]
    except ValueError as err:
        raise PtychoError(f"{stitched}: cannot judge the reconstruction without a ground truth ({err})") from None
    mean = {k: float(np.mean([p[k] for p in per_image])) for k in per_image[0]}
    result = {
        "ground_truth": False,
        "n_images": len(misfits),
        "mean": mean,
        "per_image": per_image,
        "dataset_digest": ds.attrs["digest"],
    }
    write_json(out, result, producer="evaluate")
    record = JobRecord(
        tags={"ground_truth": "false"},
        metrics=mean,
        artifacts=[(out, "metrics")],
        summary=f"{out}: no ground truth (measured data), nothing to score against; data misfit "
        f"{mean['data_misfit']:.4g} (Poisson NLL per measured pixel above the saturated model's, 0.5 at the noise "
        f"level), half-scan resolution {mean['amp_half_frc']:.3f} (amplitude) and {mean['phase_half_frc']:.3f} "
        f"(phase) cycles/px at the 1/2-bit threshold, over {len(misfits)} object(s)",
    )
    return _with_dataset(record, "test.h5", ds, dataset, "test")


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
        for meta in StudyResults(models=model_jsons).trainings.values():
            model_cfg, trained = configs_from_meta(meta)
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
    result = timing.run(source, models, train_cfg, modes, config, precisions)
    if out:
        write_json(out, result, producer="bench")
    gpus = result["machine"]["gpus"]  # what the workers' TensorFlow saw; this process loads none
    return JobRecord(
        tags={"device": "GPU" if gpus else "CPU", "gpus": str(gpus) if gpus else "none"},
        params={
            "bench.modes": " ".join(result["modes"]),
            "bench.precisions": " ".join(result["precisions"]),
            "bench.repeats": config.repeats,
            **{f"bench.context.{k}": v["how"] for k, v in result["contexts"].items()},
        },
        nested=timing.arm_runs(result),
        artifacts=[(out, "bench")] if out else [],
        summary=timing.format_table(result),
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
    write_json(out, result, producer="condition")
    items = ("accuracy", "gradients")
    metrics = {f"{item}_value": result[item]["value"] for item in items}
    metrics.update({f"{item}_pass": float(result[item]["status"] == "PASS") for item in items})
    for arm, scores in result["models"].items():
        metrics.update({f"{arm}.amp_ssim": scores["amp_ssim"], f"{arm}.phase_ssim": scores["phase_ssim"]})
    status = "PASS" if all(result[item]["status"] == "PASS" for item in items) else "FAIL"
    scored = ", ".join(f"{arm} {s['amp_ssim']:.3f}/{s['phase_ssim']:.3f}" for arm, s in result["models"].items())
    return JobRecord(
        metrics=metrics,
        tags={"status": status, "condition": name},
        artifacts=[(out, None)],
        summary=f"{name}: accuracy {result['accuracy']['status']}, gradients {result['gradients']['status']}; "
        f"amplitude/phase SSIM {scored}",
    )


def figures(results: StudyResults, out_dir: str) -> JobRecord:
    """The report's figures (each section's own, :func:`ptycho.study.checklist.figures`)
    from the study's outputs, as PNG and SVG, all rendered before any is written."""
    from ptycho.artifacts import atomic_write
    from ptycho.study import checklist
    from ptycho.study.figures.style import render

    try:  # render everything before writing anything: no partial set of figures
        made = {figure.stem: render(figure.draw(results)) for _, figure in checklist.figures()}
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
        from ptycho.study.estimate import ESTIMATE_ENV

        with contextlib.suppress(ValueError, TypeError):
            cost["estimate"] = json.loads(os.environ.get(ESTIMATE_ENV) or "null")
    provenance = {
        "config_hash": config_hash(config),
        "git_commit": git_commit(Path.cwd()),
        "mlflow_run_id": parent.get("run_id", ""),
        "tracking_uri": parent.get("tracking_uri", ""),
        "experiment_id": parent.get("experiment_id", ""),
    }
    # The device the study ran on is what the benchmark's TensorFlow processes saw.
    gpus = items["speedup"].evidence.get("machine", {}).get("gpus")
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
    )
    paths = views.write(result, out_dir, figures)
    artifacts = [(str(p), "report") for p in paths.values()]
    others = report_answers(result)
    others[""].artifacts += [*artifacts, *((p, "figures") for p in figure_pngs)]
    return JobRecord(
        metrics={"verdict_pass": float(result["verdict"] == "PASS")},
        artifacts=artifacts,
        close_parent=parent or None,
        others=others,
        summary=f"{paths['html']}: verdict {result['verdict']} "
        + " ".join(f"{k}={v['status']}" for k, v in result["items"].items()),
    )
