"""Every reconstruction of the study as ptychodus products (:mod:`ptycho.data.ptychodus`).

One folder per reconstruction, one product per object of the test split
(``products/<arm>/object-<m>.h5``; the solver's ``products/solver-<mode>/``), written by
the job that scores it (``ptycho evaluate --product-dir``, ``ptycho solve --products-dir``)
so that the pipeline runs no extra job. The comments name the study, the reconstruction,
the MLflow parent run it is logged under and where the geometry came from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: The geometry's source, in the comments: the data's own (simulated with the config's
#: cxi section) or assumed (a file whose geometry this package does not keep, or none).
SIMULATED, ASSUMED = "simulated", "assumed"


def comments(what: str, parent_json: str | None, geometry, source: str) -> str:
    """The product's comments: what it is, the MLflow run, the geometry and its source."""
    from ptycho.tracking.store import read_parent

    parent = read_parent(parent_json) if parent_json else None
    run = (
        f"MLflow parent run {parent['run_id']} at {parent.get('tracking_uri', '?')}"
        if parent
        else "not logged to MLflow"
    )
    where = (
        "the simulation's own (config cxi)"
        if source == SIMULATED
        else "assumed (config cxi): this package keeps no geometry of a data file, and a tike scan has none"
    )
    return (
        f"{what}; written by ptycho (XLA study); {run}; geometry {where}: {geometry.energy_ev:g} eV, detector "
        f"{geometry.detector_distance_m:g} m away, detector pixel {geometry.detector_pixel_m:g} m; the probe is the "
        "forward model's, |FFT2(P O)|^2 / N^2 predicts the counts"
    )


@dataclass(frozen=True)
class Products:
    """Where and how a job writes its reconstructions as products: the ``folder``, the
    products' ``name``, their ``comments`` (:func:`comments`), the far-field ``geometry``
    (:class:`ptycho.data.cxi.CxiGeometry`) and a network's (epoch, loss) ``losses``."""

    folder: str
    name: str
    comments: str
    geometry: Any
    losses: Sequence[tuple[int, float]] = ()

    def within(self, sub: str, name: str) -> Products:
        """The same products in ``folder/sub``, named ``name`` (the solver's, per mode)."""
        return dataclasses.replace(self, folder=str(Path(self.folder) / sub), name=name)


def write_products(
    products: Products,
    ds,
    images: Sequence[np.ndarray],
    object_losses: Sequence[Sequence[tuple[int, float]]] | None = None,
) -> list[Path]:
    """``<products.folder>/object-<m>.h5`` for each stitched object ``images[m]`` of ``ds``,
    with the (epoch, loss) pairs ``products.losses`` (a network's, the same for every
    object) or ``object_losses[m]`` (the solver's, per object: iteration, misfit)."""
    from ptycho.data.ptychodus import write_product

    folder = Path(products.folder)
    folder.mkdir(parents=True, exist_ok=True)
    geometry = products.geometry
    probe = (ds.scale * ds.probe).astype(np.complex64)
    pixel = geometry.object_pixel_m(ds.n)
    paths = []
    for m, image in enumerate(images):
        path = folder / f"object-{m}.h5"
        write_product(
            path,
            name=f"{products.name} object {m}",
            comments=products.comments,
            obj=image,
            region=ds.scan_region[m],
            probe=probe,
            positions=ds.positions[ds.position_object == m],
            pixel_m=pixel,
            energy_ev=geometry.energy_ev,
            distance_m=geometry.detector_distance_m,
            losses=products.losses if object_losses is None else object_losses[m],
        )
        paths.append(path)
    return paths


def training_losses(model: str) -> list[tuple[int, float]]:
    """(epoch, training loss) of a trained network: its ``model.json``, or the folder holding
    it (what ``ptycho infer --model`` takes)."""
    from ptycho.study.results import StudyResults

    path = Path(model)
    [record] = StudyResults(models=[path / "model.json" if path.is_dir() else path]).trainings.values()
    return [(e.epoch, e.train_loss) for e in record.history]
