"""Which dataset a reconstruction or stitched file was made from, and the refusal to mix them.

A reconstruction (``ptycho infer``) and a stitched file (``ptycho stitch``) are arrays
in object pixels of one dataset's scan; scored against another dataset of the same
size they give a plausible, meaningless number. Each therefore carries the dataset's
content digest (:func:`ptycho.data.dataset.content_digest`, the one MLflow tracks it
by) as the array ``dataset_digest`` (written with it by ``ptycho.study.jobs.infer`` and
``stitch``), and ``stitch`` and ``evaluate`` compare it with
the digest of the dataset they are given before doing anything.
"""

from __future__ import annotations

import os

import numpy as np

from ptycho.errors import DatasetError, PtychoError

#: Name of the array holding the dataset's digest in a reconstruction or stitched .npz.
DIGEST_KEY = "dataset_digest"


def recorded_digest(path: str | os.PathLike) -> str | None:
    """The dataset digest an artefact records: "" if it records none, None if it cannot
    be read (absent, damaged, or declaring more than it may: the job reading it next says
    so, in one line)."""
    from ptycho.data.untrusted import Budget, npz_headers

    try:
        npz_headers(str(path), Budget(str(path)))  # nothing allocated beyond the stated bounds
        with np.load(path, allow_pickle=False) as z:
            return str(z[DIGEST_KEY][()]) if DIGEST_KEY in z.files else ""
    except Exception:  # noqa: BLE001 - numpy raises OSError, ValueError, BadZipFile, EOFError, ours PtychoError
        return None


def check_made_from(artefact: str | os.PathLike, dataset: str | os.PathLike, remake: str) -> str | None:
    """Refuse ``artefact`` if it was made from another dataset than ``dataset``.

    ``remake`` names the command(s) that make it again (e.g. "'ptycho infer'"). Returns
    a warning for an artefact written before the digest was recorded, None otherwise.

    Why files without a digest are accepted (with that warning) instead of refused: they
    were written by the same pipeline into the same results folder layout, nothing is
    known to be wrong with them, and refusing would make every existing results folder
    re-run inference before it can stitch or score again; the shape check of
    ``evaluate`` and the position validation of the dataset still apply to them, and
    every file written from now on carries the digest, so the check cannot be skipped
    by a new file.
    """
    from ptycho.data.dataset import read_attributes

    recorded = recorded_digest(artefact)
    if recorded is None:
        return None  # unreadable: the job's own read says so
    actual = read_attributes(dataset)["digest"]
    if not recorded:
        return (
            f"{artefact} records no dataset digest (written before ptycho recorded one), so it cannot be checked "
            f"against {dataset}; re-run {remake} to have it checked"
        )
    if recorded != actual:
        raise PtychoError(
            f"{artefact} was made from another dataset than {dataset} (dataset sha256 {recorded[:12]}..., "
            f"this one {actual[:12]}...); re-run {remake} with --dataset {dataset}"
        )
    return None


def require_ground_truth(dataset: str | os.PathLike, needed_by: str) -> None:
    """Refuse a dataset without a ground truth (measured data) for ``needed_by``."""
    from ptycho.data.dataset import GROUND_TRUTH, read_attributes

    if not read_attributes(dataset).get(GROUND_TRUTH, True):
        raise DatasetError(
            f"{dataset}: the dataset has no ground truth (measured data imported without an object), so "
            f"{needed_by}; it is reconstruct-only: train a PINN on it, infer and stitch"
        )
