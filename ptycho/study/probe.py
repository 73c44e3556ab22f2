"""The probe from the data: the solver's refinement of a measured scan's probe estimate.

Measured data comes with a probe known only from an earlier reconstruction (tike's
estimate, a CXI file's ``probe``). A network trained through a physics head with the
wrong probe learns an object that makes up for it, and a solver with it cannot fit the
counts. So on measured data the study first refines the probe with the conventional
solver (:meth:`ptycho.solvers.gradient.Solver.refine`: object and probe together, from a
flat object) on every pattern of the training split, and writes the splits again with
that probe: the PINN then trains, and every reconstruction is scored, with the solver's
probe, as PtychoPINN users do. The record says how far the probe moved and how much
better the counts are explained than with the given probe held fixed (the same solver,
the same budget).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ptycho.errors import PtychoError
from ptycho.tracking.record import DatasetInput, JobRecord

#: The dataset config's key that records the refinement (its provenance).
PROVENANCE = "probe_refined"


#: What the report says of a refinement (:func:`ptycho.study.report.data_sentence`).
SUMMARY = ("patterns", "iterations", "probe_change", "misfit_given_probe", "misfit_refined_probe", "mode")


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """The refinement's record as the report keeps it."""
    return {k: record[k] for k in SUMMARY}


def refine_probe(source: str, targets: Sequence[tuple[str, str]], out: str, *, cfg, mode: str) -> JobRecord:
    """Refine ``source``'s probe on all its patterns (:func:`ptycho.solvers.problem.joint_problem`)
    and write each ``(dataset, refined)`` pair of ``targets`` again with it; ``out`` is
    the record (JSON). The targets must have the source's pattern side; their own
    scale is kept (the probe is stored as the source stores it, before its scale)."""
    from ptycho.analysis.metrics import probe_error
    from ptycho.artifacts import write_json
    from ptycho.data.dataset import read_dataset, write_dataset
    from ptycho.solvers.engines import REFINER, drained
    from ptycho.solvers.gradient import PROBE_START, Solver
    from ptycho.solvers.problem import joint_problem

    if cfg.iterations <= PROBE_START:
        raise PtychoError(
            f"config key 'solver.iterations' = {cfg.iterations}: the probe moves after {PROBE_START} iterations of the "
            "object alone; give the refinement more (the study's default is 200)"
        )
    ds = read_dataset(source)
    try:
        problem = joint_problem(ds)
    except ValueError as err:
        raise PtychoError(f"{source}: {err}") from None
    read = {path: (ds if path == source else read_dataset(path)) for path, _ in targets}
    for path, target in read.items():
        if target.n != ds.n:
            raise PtychoError(
                f"{path}: patterns of {target.n} px, but the probe is refined on {source}'s {ds.n} px; "
                "read both splits at the same data.n"
            )
    start = time.perf_counter()
    solver = Solver(problem, mode, cfg)
    given = solver.solve()  # the given probe held fixed (compiled first): what the refinement is measured against
    its, stopped = drained(solver.refine())
    refined = its[-1].probe.numpy().astype(np.complex128)
    stored = (refined / ds.scale).astype(np.complex64)
    change = probe_error(refined, problem.probe)
    record: dict[str, Any] = {
        "engine": REFINER,
        "mode": mode,
        "config": dataclasses.asdict(dataclasses.replace(cfg, engine=REFINER)),
        "source": {"path": str(source), "digest": ds.attrs["digest"]},
        "patterns": len(problem.counts),
        "probe_start": PROBE_START,
        "iterations": len(its),
        "stopped": stopped,
        "compile_s": given.compile_seconds,
        "seconds": time.perf_counter() - start,
        "misfit": [it.misfit for it in its],
        "misfit_given_probe": given.iterations[-1].misfit if given.iterations else solver.misfit(given.obj),
        "misfit_refined_probe": its[-1].misfit,
        "probe_change": change,
        "outputs": {},
    }
    provenance = {k: record[k] for k in ("engine", "mode", "iterations", "probe_change")}
    provenance["source_digest"] = ds.attrs["digest"]
    job = JobRecord()
    for path, refined_path in targets:
        target = read[path]
        config = json.loads(target.attrs.get("config") or "{}") | {PROVENANCE: provenance}
        attrs = {**target.attrs, "config": json.dumps(config), "probe_kind": f"{target.attrs['probe_kind']}, refined"}
        digest = write_dataset(refined_path, dataclasses.replace(target, probe=stored, attrs=attrs))
        record["outputs"][str(refined_path)] = digest
        split = str(target.attrs.get("split", ""))
        job.datasets.append(DatasetInput(Path(refined_path).name, digest, str(Path(refined_path).resolve()), split))
    write_json(out, record, producer="refine_probe")
    job.params = {"probe.refined_on": str(source), "probe.mode": mode}
    job.metrics = {
        "probe_change": change,
        "misfit_given_probe": record["misfit_given_probe"],
        "misfit_refined_probe": record["misfit_refined_probe"],
        "iterations": len(its),
        "seconds": record["seconds"],
    }
    job.stepped = [(it.number, {"misfit": it.misfit}) for it in its]
    job.artifacts = [(out, "solver")]
    job.summary = (
        f"{out}: probe refined on {len(problem.counts)} patterns in {len(its)} iterations ({stopped}, {mode}): "
        f"moved {100 * change:.1f} % (relative L2, up to phase and scale); data misfit "
        f"{record['misfit_given_probe']:.4g} with the given probe, {record['misfit_refined_probe']:.4g} refined; "
        f"written to {', '.join(str(t) for _, t in targets)}"
    )
    return job
