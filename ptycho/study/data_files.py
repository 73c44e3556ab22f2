"""The study on the user's own data: the config key ``data``, checked while the workflow is parsed.

``data: {train: <file>, test: <file>}`` names a CXI 1.6 file or a ptycho dataset (.h5)
per split, relative to the work folder or absolute; the ``import_data`` rule then reads
them (``ptycho import-data``) where ``simulate`` would have written its datasets, and
everything after runs as on simulated data. Empty (the default), the study simulates.

Before any job, :func:`check_data` refuses in one line naming the key what would fail
later: one split without the other, a file that is missing or of another kind, splits
whose patterns differ in size, patterns the networks cannot pool, and a matrix that
cannot train on the data: the supervised baseline learns from ground-truth object
patches, which measured data does not have (refused rather than dropped, so that the
report never silently lacks a model the config asked for).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ptycho.data import SPLITS
from ptycho.errors import ConfigError, DatasetError
from ptycho.nets.models import method_of


def data_files(cfg: Mapping) -> dict[str, str]:
    """``{split: path}`` of the config's ``data`` key as written, or ``{}`` to simulate."""
    given = cfg.get("data") or {}
    return {split: str(given[split]) for split in SPLITS if given.get(split)}


def check_data(cfg: Mapping, depths: Mapping[str, int], workdir: str | os.PathLike | None = None) -> dict:
    """The :class:`~ptycho.data.sources.Source` of each split of ``data`` (``{}`` without
    one), after every check of the module docstring; raises a one-line :class:`ConfigError`.
    ``depths``: each listed model's ``model.depth`` (its pooling levels), as the workflow
    resolved it (passed in: this module sits below :mod:`ptycho.study.workflow`)."""
    from ptycho.data.sources import describe

    files = data_files(cfg)
    if not files:
        return {}
    if len(files) != len(SPLITS):
        given, missing = next(iter(files)), next(s for s in SPLITS if s not in files)
        raise ConfigError(
            f"config key 'data' gives {given} but not {missing}; give both splits (data={{train: a.cxi, test: b.cxi}}; "
            "the same file twice reconstructs the scan the PINN trains on) or neither to simulate"
        )
    base = Path(os.path.abspath(workdir or os.getcwd()))
    sources, described = {}, {}
    for split, path in files.items():
        where = base / os.path.expanduser(path)
        try:  # the same file for both splits (a scan the PINN trains on and reconstructs) is read once
            sources[split] = described[where] = described.get(where) or describe(where)
        except DatasetError as err:
            raise ConfigError(f"config key 'data.{split}': {err}") from None
    sources = {split: _reduced(cfg, split, files[split], source) for split, source in sources.items()}
    train, test = sources["train"], sources["test"]
    if train.n != test.n:
        raise ConfigError(
            f"config key 'data.test': its patterns are {test.n}x{test.n} px and those of data.train {train.n}x{train.n} "
            "px; the network trained on one split reconstructs the other, so give two splits of one set-up"
        )
    group = cfg["simulation"]["gridsize"] ** 2  # the patterns of one group (the imported file is grouped so)
    for split, source in sources.items():
        if source.patterns < group:
            raise ConfigError(
                f"config key 'data.{split}': {files[split]} holds {source.patterns} pattern"
                f"{'s' * (source.patterns != 1)}, fewer than the {group} of one group of simulation.gridsize "
                f"{cfg['simulation']['gridsize']}; give a scan of at least {group} positions (or simulation.gridsize: 1)"
            )
    for kind in cfg["models"]:
        depth = depths[kind]
        factor = 2**depth
        if train.n % factor:
            fits = [d for d in range(1, depth) if train.n % 2**d == 0]
            fix = f"use a smaller model.depth ({max(fits)})" if fits else "crop the patterns to an even side"
            raise ConfigError(
                f"config key 'data.train': its patterns are {train.n}x{train.n} px, not a multiple of {factor}, which "
                f"the {kind} needs (model.depth = {depth} pooling levels); {fix}"
            )
        if not method_of(kind).physics and not train.ground_truth:
            raise ConfigError(
                f"config key 'models' = {list(cfg['models'])!r} lists the {kind}, which learns from ground-truth object "
                f"patches, but data.train ({files['train']}) has no ground truth (measured data); leave it out "
                "(models=[pinn])"
            )
    return sources


def _reduced(cfg: Mapping, split: str, path: str, source):
    """``source`` at the pattern side ``data.n`` asks for (tike scans only; 0: its own)."""
    import dataclasses

    from ptycho.data.sources import KINDS

    n = int((cfg.get("data") or {}).get("n") or 0)
    if not n or n == source.n:
        return source
    if source.kind != "tike":
        raise ConfigError(
            f"config key 'data.n' = {n}: {path} ({split}) is a {KINDS[source.kind]}, read at its own "
            f"{source.n} px; data.n reduces tike scans only: leave it out"
        )
    from ptycho.data.tike import side_problem

    problem = side_problem(source.n, n)
    if problem:
        raise ConfigError(f"config key 'data.n' = {n}: {path} ({split}): {problem}")
    return dataclasses.replace(source, n=n)
