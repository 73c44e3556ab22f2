"""The networks' jobs: train an arm, infer the test split, stitch the patches, score the objects."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ptycho.errors import PtychoError
from ptycho.study.arms import ARM_TAGS, Arm
from ptycho.study.jobs.logged import prefixed, with_dataset
from ptycho.tracking.record import JobRecord, LoggedModel, Progress

#: The keys of a training's curve, logged per epoch.
CURVE_KEYS = ("train_loss", "val_loss", "log_scale")


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
    from ptycho.study.training_record import TrainingRecord

    ds = read_dataset(dataset)
    model_params = prefixed("model", model_cfg)
    params = {**model_params, **prefixed("train", train_cfg)}
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
    record = with_dataset(JobRecord(params=params, tags=resumed), "train.h5", ds, dataset, "train")
    record.artifacts.append((str(Path(out) / "model.json"), "model"))
    trained = TrainingRecord.of(meta)
    if trained.failed:
        record.failure = trained.failure
        record.summary = f"ptycho train: warning: {trained.failure}; recorded as a FAILED model in {out}"
        return record
    from ptycho.study.stats import iqr

    last = trained.history[-1]
    record.metrics.update(
        {
            "compile_s": trained.compile_s,
            "step_median_s": trained.step_median_s,
            "step_iqr_s": iqr(np.asarray(trained.step_times_s)),
            "train_wall_s": trained.wall_s,
            "traces_train": trained.train_traces,
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
        step=last.epoch,
        metrics={
            "final_train_loss": last.train_loss,
            "final_val_loss": last.val_loss,
            "step_median_s": trained.step_median_s or float("nan"),
        },
    )
    record.summary = (
        f"{out}: {model_cfg.kind} xla={train_cfg.xla} epochs={last.epoch} train_loss={last.train_loss:.6g} "
        f"val_loss={last.val_loss:.6g} compile={trained.compile_s or float('nan'):.2f}s "
        f"step_median={trained.step_median_s or float('nan'):.4f}s"
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
    return with_dataset(record, "test.h5", ds, dataset, "test")


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
    return with_dataset(record, "test.h5", ds, dataset, "test")


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
    return with_dataset(record, "test.h5", ds, dataset, "test")
