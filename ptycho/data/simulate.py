"""Simulate a train/test pair of datasets from a :class:`SimulationConfig`.

Deterministic: every random draw comes from ``numpy.random.Generator`` streams spawned
from ``config.seed`` (one per split and object), so the same config gives bit-identical
arrays, and so an identical digest, on any machine with the same library versions.
"""

from __future__ import annotations

import numpy as np

from ptycho.config import SimulationConfig, to_json
from ptycho.data import SPLITS
from ptycho.data.dataset import Dataset, scan_region
from ptycho.physics.forward import expected_counts, poisson_counts, scale_for_photons
from ptycho.physics.objects import make_object
from ptycho.physics.probe import make_probe
from ptycho.physics.scan import grid_scan
from ptycho.physics.translate import extract_patches


def simulate_split(
    cfg: SimulationConfig,
    split: str,
    *,
    scale: float | None = None,
    progress: bool = False,
) -> Dataset:
    """Simulate one split. ``scale=None`` derives ``s`` from ``cfg.nphotons`` on this split.

    The test split must be given the train split's ``scale`` so that both are measured
    with the same beam (docs/physics.md section 3: train and test use the same s).
    """
    from tqdm import tqdm

    split_index = SPLITS.index(split)
    n_objects = cfg.n_objects_train if split == "train" else cfg.n_objects_test
    stride = cfg.stride_train if split == "train" else cfg.stride_test
    seeds = np.random.SeedSequence(cfg.seed).spawn(len(SPLITS))[split_index]
    object_seeds, noise_seed = seeds.spawn(2)

    probe = make_probe(cfg.probe_kind, cfg.n, cfg.effective_probe_radius, cfg.probe_edge_phase)
    scan = grid_scan(cfg.object_size, cfg.n, stride, cfg.gridsize, cfg.spacing)
    objects = np.stack(
        [
            make_object(
                cfg.object_kind,
                cfg.object_size,
                np.random.default_rng(s),
                phase_kind=cfg.phase_kind,
                phase_range=cfg.phase_range,
                amplitude_floor=cfg.amplitude_floor,
                n_lines=cfg.effective_n_lines,
            )
            for s in tqdm(object_seeds.spawn(n_objects), desc=f"{split} objects", disable=not progress)
        ]
    ).astype(np.complex64)

    # Computing with the stored (complex64) object and probe means the file alone
    # reproduces the noise-free intensities exactly.
    probe = probe.astype(np.complex64)
    patches = np.concatenate([extract_patches(o, scan.positions, cfg.n) for o in objects])
    if scale is None:
        scale = scale_for_photons(probe.astype(np.complex128), patches.astype(np.complex128), cfg.nphotons)
    expected = expected_counts(probe.astype(np.complex128), patches.astype(np.complex128), scale)
    counts = poisson_counts(expected, np.random.default_rng(noise_seed))

    n_pos = len(scan.positions)
    positions = np.tile(scan.positions, (n_objects, 1))
    position_object = np.repeat(np.arange(n_objects, dtype=np.int64), n_pos)
    groups = np.concatenate([scan.groups + m * n_pos for m in range(n_objects)])
    offsets = np.tile(scan.offsets, (n_objects, 1, 1))
    region = np.tile(scan_region(scan.positions, probe), (n_objects, 1))

    return Dataset(
        diffraction=counts,
        probe=probe,
        objects=objects,
        positions=positions,
        position_object=position_object,
        groups=groups,
        group_offsets=offsets,
        scan_region=region,
        scale=float(scale),
        units="counts",
        attrs={
            "nphotons": float(cfg.nphotons),
            "split": split,
            "object_kind": cfg.object_kind,
            "phase_kind": cfg.phase_kind,
            "probe_kind": cfg.probe_kind,
            "seed": int(cfg.seed),
            "config": to_json(cfg),
            "stride": int(stride),
        },
    )


def simulate(cfg: SimulationConfig, *, progress: bool = False) -> dict[str, Dataset]:
    """Both splits; the test split reuses the train split's scale ``s``."""
    train = simulate_split(cfg, "train", progress=progress)
    test = simulate_split(cfg, "test", scale=train.scale, progress=progress)
    return {"train": train, "test": test}


__all__ = ["simulate", "simulate_split", "SPLITS"]
