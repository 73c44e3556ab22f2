"""The data jobs: simulate a train/test pair, import the user's own files, export CXI."""

from __future__ import annotations

from pathlib import Path

from ptycho.study.jobs.logged import dataset_input, prefixed
from ptycho.tracking.record import JobRecord


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
    record = JobRecord(params=prefixed("simulation", cfg))
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
        record.datasets.append(dataset_input(f"{split}.h5", digest, path, split))
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
    record.datasets.append(dataset_input(f"{split}.h5", digest, out, split))
    return record


def export_cxi(file: str, out: str, geometry) -> JobRecord:
    """A dataset file as CXI 1.6 in the physical units of ``geometry``."""
    from ptycho.data.cxi import export_cxi as write
    from ptycho.data.dataset import read_dataset

    ds = read_dataset(file)
    write(ds, out, geometry)
    pixel_nm = geometry.object_pixel_m(ds.probe.shape[0]) * 1e9
    record = JobRecord(
        params=prefixed("cxi", geometry),
        metrics={"object_pixel_nm": pixel_nm},
        summary=f"{out}: CXI 1.6, {ds.diffraction.shape[0]} patterns, object pixel {pixel_nm:.3g} nm "
        f"at {geometry.energy_ev:g} eV",
    )
    record.datasets.append(dataset_input(Path(file).name, ds.attrs["digest"], file, ds.attrs.get("split", "")))
    return record
