"""Conditions: the operating points (dose, scan overlap, loss) at which the study checks
its cheap parts, beside the one it trains at.

A study trains its networks at one operating point, its own ``simulation`` and
``model.loss`` (the default: 1e9 photons, dense overlap, MAE; the ``lowdose`` preset:
1e4 photons, Poisson). What a dose or a loss can break is checked at every condition the
config lists (``conditions``), each with its own simulated test split (the study's
simulation with the condition's dose and test stride, same seed, so the same object):

* accuracy: the trained networks at inference on that split, each XLA mode vs ``off``
  and each reduced precision vs float32 (the numerics a dose moves), and the PINN's
  physics head under each mode vs ``off`` on that split's own geometry and scale (the
  true object at its group offsets: what a sparser scan or another dose changes for the
  head's translation and FFT);
* gradients: the loss gradients of every mode and precision with that condition's loss
  and dose;
* the networks the study trained, applied to that split (``infer`` normalises by the
  data it is given, so a model applies at any dose: docs/physics.md section 4), scored;
* the iterative solver on it (the data's ceiling there), in the solver's mode.

A condition is one record of :data:`CONDITIONS` (and its name in the schema's enum, which
a test keeps equal); nothing else names it. A listed condition whose settings are the
study's own is its training point, already covered by the checklist, and is not run
twice. Training the matrix at another condition is a results folder of its own (a
preset, as ``lowdose``): each report's Conditions section then compares from there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ptycho.nets.models import SUBJECT
from ptycho.study.condition_record import ConditionCheck

#: The default study's test pitch over its patch side: 10 px at n = 64 (dense overlap).
DENSE = 10 / 64


@dataclass(frozen=True)
class Condition:
    """One operating point. ``stride`` is the test split's group pitch over the patch
    side ``n`` (so that a smaller preset keeps the overlap: 10 px at n = 64 is 5 at n = 32)."""

    name: str
    description: str
    nphotons: float  #: mean total photons per pattern
    stride: float  #: group pitch of the test split, over the patch side n
    loss: str  #: the PINN loss (the gradient check's)


CONDITIONS: dict[str, Condition] = {
    c.name: c
    for c in (
        Condition(
            "dense-1e9-mae", "the default study's: 1e9 photons per pattern, dense overlap, MAE", 1e9, DENSE, "mae"
        ),
        Condition(
            "dense-1e4-poisson",
            "PtychoPINN's published dose: 1e4 photons per pattern, dense overlap, the Poisson likelihood",
            1e4,
            DENSE,
            "poisson",
        ),
        Condition(
            "sparse-1e9-mae",
            "sparse overlap: group centres 3/8 of the patch side apart (24 px at n = 64, about one probe "
            "diameter), 1e9 photons, MAE",
            1e9,
            0.375,
            "mae",
        ),
    )
}


def settings(condition: Condition, cfg: Mapping) -> dict[str, Any]:
    """The simulation section and PINN loss of ``condition`` in study ``cfg``: the study's
    simulation with the condition's dose and test stride."""
    sim = dict(cfg["simulation"])
    sim.update(nphotons=float(condition.nphotons), stride_test=max(1, round(condition.stride * sim["n"])))
    return {"simulation": sim, "loss": condition.loss}


def own_settings(cfg: Mapping) -> dict[str, Any]:
    """The study's own training point, in the terms of :func:`settings` (the PINN's loss:
    its own ``per_model`` key, else the study's)."""
    own = ((cfg.get("per_model") or {}).get(SUBJECT) or {}).get("model") or {}
    sim = dict(cfg["simulation"], nphotons=float(cfg["simulation"]["nphotons"]))
    return {"simulation": sim, "loss": own.get("loss", cfg["model"]["loss"])}


def own_name(cfg: Mapping) -> str | None:
    """The name of the condition that is the study's own training point, if one is."""
    own = own_settings(cfg)
    return next((name for name, c in CONDITIONS.items() if settings(c, cfg) == own), None)


def checked(cfg: Mapping) -> dict[str, dict[str, Any]]:
    """The conditions this study runs its cheap checks at: name -> :func:`settings`, the
    listed ones except the study's own. None on the user's own data (a condition is a
    simulation of the study's object)."""
    from ptycho.study.data_files import data_files

    if data_files(cfg):
        return {}
    own = own_settings(cfg)
    out = {}
    for name in cfg.get("conditions", []):
        s = settings(CONDITIONS[name], cfg)
        if s != own:
            out[name] = s
    return out


def skipped_words(cfg: Mapping) -> str:
    """One line when the config lists conditions the study will not run (on the user's own
    data, where a condition, a simulation of the study's object, has nothing to simulate);
    '' otherwise: they were dropped without a word."""
    from ptycho.study.data_files import data_files

    if not (data_files(cfg) and cfg.get("conditions")):
        return ""
    return (
        f"conditions {', '.join(cfg['conditions'])} are not run on your own data (config key 'data'): each is a "
        "simulation of the study's object at another dose or overlap; leave them out (conditions=[]) to silence this"
    )


def apply_models(model_dirs: Sequence[str], dataset) -> dict[str, dict[str, float]]:
    """Each trained network on ``dataset`` as ``ptycho infer``, ``stitch`` and ``evaluate``
    do it (normalised by the data's own intensity, weighted and phase-aligned stitching),
    in one process: arm -> mean scores over the test objects."""
    from ptycho.analysis.metrics import score_all
    from ptycho.analysis.stitch import stitch_objects
    from ptycho.nets.infer import reconstruct
    from ptycho.nets.train import load_meta
    from ptycho.study.arms import Arm

    truths = [dataset.ground_truth(m) for m in range(dataset.objects.shape[0])]
    out = {}
    for model_dir in model_dirs:
        rec = reconstruct(model_dir, dataset)
        images = stitch_objects(rec.patches, rec.positions, rec.position_object, dataset)
        mean = score_all(list(images), truths)["mean"]
        out[Arm.of_meta(load_meta(model_dir)).name] = {
            k: float(v) for k, v in mean.items() if isinstance(v, int | float)
        }
    return out


def check(
    name: str,
    dataset_path: str,
    model_dirs: Sequence[str],
    *,
    loss: str,
    nphotons: float,
    modes: Sequence[str],
    precisions: Sequence[str],
    thresholds: Mapping[str, float],
) -> ConditionCheck:
    """The cheap checks at one condition (module docstring): its ``condition`` job's
    record. ``thresholds`` are the study's (``accuracy_max_abs``, ``gradients_max_rel``
    and their ``*_precision_roundoffs``)."""
    from ptycho.data.dataset import read_dataset
    from ptycho.study.checklist.accuracy import accuracy
    from ptycho.study.checklist.gradients import gradients

    ds = read_dataset(dataset_path)
    acc = accuracy(
        thresholds["accuracy_max_abs"],
        thresholds["accuracy_precision_roundoffs"],
        model_dirs=model_dirs,
        dataset=ds,
        modes=modes,
        precisions=precisions,
        physics=False,
    )
    grad = gradients(
        thresholds["gradients_max_rel"],
        thresholds["gradients_precision_roundoffs"],
        pinn_loss=loss,
        modes=modes,
        precisions=precisions,
        nphotons=nphotons,
        finite_differences=False,
    )
    return ConditionCheck(
        name,
        float(ds.attrs["nphotons"]),
        int(ds.attrs["stride"]),
        loss,
        ds.attrs["digest"],
        int(ds.diffraction.shape[0]),
        checks={"accuracy": acc, "gradients": grad},
        models=apply_models(model_dirs, ds),
    )


def mean_scores(models: Mapping[str, Mapping[str, float]]) -> dict[tuple, dict[str, Any]]:
    """Arms grouped over their seeds: (model, mode, precision) -> mean amplitude and phase
    SSIM and the number of seeds."""
    from ptycho.study.arms import Arm

    groups: dict[tuple, list[Mapping[str, float]]] = {}
    for arm, scores in models.items():
        a = Arm.parse(arm)
        groups.setdefault((a.model, a.mode, a.precision), []).append(scores)
    return {
        key: {
            "amp_ssim": float(np.mean([s["amp_ssim"] for s in rows])),
            "phase_ssim": float(np.mean([s["phase_ssim"] for s in rows])),
            "seeds": len(rows),
        }
        for key, rows in sorted(groups.items())
    }
