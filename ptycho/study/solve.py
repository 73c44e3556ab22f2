"""The conventional solver's job: every XLA mode timed in lockstep, and warm starts.

One process runs every (mode, start) of the request on every object. The runs advance
one iteration each in turn (round robin), so that the modes' iteration times are
measured under the same conditions, interleaved, and their ratio to ``off`` comes with
a bootstrap interval like the benchmark's. At fixed iterations (:data:`CHECKPOINTS`)
each run's object is scored with the same function ``ptycho evaluate`` uses
(:func:`ptycho.analysis.metrics.score_all`), which gives quality against iterations:
how many iterations the solver needs to match a network, and how many a warm start
from a network saves. Measured data has no ground truth to score against: the solver
reconstructs it all the same, and its quality at each checkpoint is then the data misfit
(:func:`ptycho.solvers.misfit.object_misfit`, the number ``ptycho evaluate`` gives the
networks' reconstructions of such data), lower being better.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ptycho.errors import PtychoError
from ptycho.study.solver_record import FLAT, MISFIT, SCORES, CurvePoint, SolveRecord, SolverRun, WarmStart
from ptycho.tracking.record import DatasetInput, JobRecord, NestedRun

#: Iterations at which every run's object is scored (plus its last one).
CHECKPOINTS = (0, 1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100, 150, 200)
#: Iterations of the flat start whose quality the warm starts must reach.
WARM_TARGETS = (10, 50, 200)
#: Iterations left out of the timing after each compile (caches, allocator warm-up).
WARMUP = 2


def _start_images(name: str, path: str, objects: int) -> np.ndarray:
    """A warm start's stitched objects, one per object of the dataset (read once)."""
    from ptycho.artifacts import STITCHED, read_arrays

    images = read_arrays(path, ("images",), producer=STITCHED)["images"]
    if len(images) < objects:
        raise PtychoError(f"start {name} ({path}) holds {len(images)} object(s); the dataset has {objects}")
    return images


def first_reaching(curve: Sequence[CurvePoint], amp: float, phase: float) -> CurvePoint | None:
    """The first point of a quality ``curve`` (ascending iterations) whose amplitude and
    phase SSIM both reach ``amp`` and ``phase``; None if none does."""
    return next((p for p in curve if p.reaches(amp, phase)), None)


def first_below(curve: Sequence[CurvePoint], misfit: float) -> CurvePoint | None:
    """The first point of a curve without a ground truth whose data misfit is at most
    ``misfit``; None if none is."""
    return next((p for p in curve if p.data_misfit <= misfit), None)


def solve(
    dataset: str,
    out: str,
    *,
    modes: Sequence[str],
    cfg,
    starts: Mapping[str, str] | None = None,
    stitched_dir: str | None = None,
    checkpoints: Sequence[int] = CHECKPOINTS,
    products=None,
) -> JobRecord:
    """Reconstruct every object of ``dataset`` under each mode from a flat start and, for
    each named ``starts`` (name -> stitched .npz of a network), from that start too.

    Writes ``out`` (JSON: per run the per-iteration seconds and misfit, quality at the
    checkpoints, the final scores, or on data without a ground truth the data misfit at
    the checkpoints and at the end; per mode the iteration time relative to ``off``), and
    for each mode's flat start ``<stitched_dir>/solver-<mode>.npz`` in the stitched
    format ``ptycho evaluate`` reads. With ``products``
    (:class:`ptycho.study.products.Products`), each mode's flat-start objects are also
    ptychodus products, ``<folder>/solver-<mode>/object-<m>.h5``, with the misfit per
    iteration as the losses.
    """
    from ptycho.analysis.metrics import score_all
    from ptycho.artifacts import write_arrays, write_json
    from ptycho.data.dataset import read_dataset
    from ptycho.data.provenance import DIGEST_KEY
    from ptycho.nets.xla import REFERENCE
    from ptycho.solvers.engines import engine
    from ptycho.solvers.misfit import object_misfit
    from ptycho.solvers.problem import crop, flat_start, problems, warm_start
    from ptycho.study.stats import bootstrap_ratio

    ds = read_dataset(dataset)
    try:
        probs = problems(ds)
    except ValueError as err:
        raise PtychoError(f"{dataset}: {err}") from None
    truths = [ds.ground_truth(m) for m in range(len(probs))] if ds.has_ground_truth else None
    starts = {FLAT: None, **dict(starts or {})}
    start_images = {name: _start_images(name, path, len(probs)) for name, path in starts.items() if path}
    runs = [(mode, name) for name in starts for mode in modes]
    marks = sorted({int(c) for c in checkpoints if 0 <= c <= cfg.iterations} | {0})
    # Per run, per object: the applied iterations (numbers only), the objects at the
    # checkpoints, the last object, why it stopped.
    done: dict[tuple, list[list]] = {r: [] for r in runs}
    snaps: dict[tuple, list[dict[int, np.ndarray]]] = {r: [] for r in runs}
    last: dict[tuple, list[np.ndarray]] = {r: [] for r in runs}
    stopped: dict[tuple, list[str]] = {r: [] for r in runs}
    compile_s = dict.fromkeys(modes, 0.0)
    for m, problem in enumerate(probs):
        solvers = {mode: engine(cfg.engine).build(problem, mode, cfg) for mode in modes}
        for mode, solver in solvers.items():
            compile_s[mode] += solver.compile()
        first = {FLAT: flat_start(problem)}
        for name, images in start_images.items():
            try:
                first[name] = solvers[modes[0]].rescaled(warm_start(problem, images[m]))
            except ValueError as err:
                raise PtychoError(f"start {name} ({starts[name]}): {err}") from None
        active = {}
        for run in runs:
            mode, name = run
            active[run] = solvers[mode].iterate(first[name])
            done[run].append([])
            snaps[run].append({0: first[name]})
            last[run].append(first[name])
        while active:  # one iteration of every run in turn: the modes timed interleaved
            for run, gen in list(active.items()):
                try:
                    it = next(gen)
                except StopIteration as stop:
                    stopped[run].append(stop.value)
                    last[run][m] = np.asarray(last[run][m])
                    del active[run]
                    continue
                if it.number in marks:
                    snaps[run][m][it.number] = np.array(it.obj)  # a copy: an engine may update its array in place
                last[run][m] = it.obj
                done[run][m].append(dataclasses.replace(it, obj=None))  # keep the numbers, not every iterate

    def quality(run) -> tuple[list[CurvePoint], dict]:
        """(mean scores at each checkpoint every object reached, and at the last
        iteration; final scores). Each object set is scored once."""
        reached = min(len(d) for d in done[run])
        if truths is None:
            return misfit_quality(run, reached)
        final = score_all([crop(p, last[run][m]) for m, p in enumerate(probs)], truths)
        curve = []
        for mark in [k for k in marks if k < reached] + [reached]:
            if mark == 0 and run[1] == FLAT:
                continue  # a constant object: nothing to register or score
            images = [crop(p, snaps[run][m][mark]) for m, p in enumerate(probs)] if mark < reached else None
            mean = score_all(images, truths)["mean"] if images else final["mean"]
            curve.append(CurvePoint(mark, **{k: float(mean[k]) for k in SCORES}))
        return curve, final

    def misfit_quality(run, reached: int) -> tuple[list[CurvePoint], dict]:
        """Without a ground truth: the mean data misfit of the objects at each checkpoint
        (a warm start's from its start, iteration 0) and at the last iteration."""

        def mean(objects) -> float:
            return float(np.mean([object_misfit(p, np.asarray(o)) for p, o in zip(probs, objects, strict=True)]))

        final = mean(last[run])
        curve = [
            CurvePoint(mark, data_misfit=mean([snaps[run][m][mark] for m in range(len(probs))]))
            for mark in marks
            if mark < reached and not (mark == 0 and run[1] == FLAT)
        ]
        curve.append(CurvePoint(reached, data_misfit=final))
        return curve, {"mean": {MISFIT: final}}

    def timed(run) -> list[float]:
        return [it.seconds for d in done[run] for it in d if it.number > WARMUP]

    def run_record(run) -> SolverRun:
        curve, final = quality(run)
        its = [it for d in done[run] for it in d]
        return SolverRun(
            mode=run[0],
            start=run[1],
            compile_s=compile_s[run[0]] / len(probs),
            iterations=len(its) / len(probs),
            stopped=tuple(sorted(set(stopped[run]))),
            seconds_per_iteration=float(np.median(timed(run))) if timed(run) else float("nan"),
            seconds_per_object=float(sum(it.seconds for it in its)) / len(probs),
            iteration_seconds=tuple(it.seconds for it in its),
            misfit=tuple(it.misfit for it in its),
            curve=tuple(curve),
            final=final["mean"],
        )

    record = SolveRecord(
        engine=cfg.engine,
        config=dataclasses.asdict(cfg),
        dataset_digest=ds.attrs["digest"],
        ground_truth=truths is not None,
        objects=len(probs),
        patterns=int(sum(len(p.counts) for p in probs)),
        modes=tuple(modes),
        starts=dict(starts),
        runs=tuple(run_record(run) for run in runs),
        ratios={
            mode: bootstrap_ratio(timed((REFERENCE, FLAT)), timed((mode, FLAT))) for mode in modes if mode != REFERENCE
        }
        if REFERENCE in modes
        else None,
    )
    record = dataclasses.replace(record, warm_start=tuple(warm_table(record)))
    halves = None
    if truths is None and stitched_dir and REFERENCE in modes:
        halves, half_scan = _half_scan(ds, probs, cfg)
        record = dataclasses.replace(record, half_scan=half_scan)
    write_json(out, record.to_json(), producer="warm_start" if starts else "solve")
    flat_objects = {mode: [crop(p, last[(mode, FLAT)][m]) for m, p in enumerate(probs)] for mode in modes}
    if stitched_dir:
        for mode in modes:
            extra = {"halves": halves} if mode == REFERENCE and halves is not None else {}
            write_arrays(  # with its dataset's digest, as stitch writes it: evaluate checks the pair
                Path(stitched_dir) / f"solver-{mode}.npz",
                producer="solve",
                images=np.stack(flat_objects[mode]).astype(np.complex64),
                **extra,
                **{DIGEST_KEY: np.array(ds.attrs["digest"])},
            )
    if products is not None:
        from ptycho.study.products import write_products

        for mode in modes:
            write_products(
                products.within(f"solver-{mode}", f"{products.name} solver {mode}"),
                ds,
                flat_objects[mode],
                object_losses=[[(it.number, it.misfit) for it in per] for per in done[(mode, FLAT)]],
            )
    return _job_record(record, out, ds, dataset)


def _half_scan(ds, probs, cfg) -> tuple[np.ndarray, dict[str, Any]]:
    """Without a ground truth, the solver's resolution: each object reconstructed again
    from each interleaved half of its scan alone (flat start, ``off``, the same settings),
    and the two compared (:func:`ptycho.analysis.metrics.half_scan`). Returns the
    halves' objects (2, objects, H, W) and the record's ``half_scan`` entry (the mean
    resolutions, per object, and the seconds it took)."""
    import time

    from ptycho.analysis.metrics import half_scan, half_scan_border
    from ptycho.analysis.stitch import scan_halves
    from ptycho.nets.xla import REFERENCE
    from ptycho.solvers.engines import engine
    from ptycho.solvers.problem import crop, flat_start

    start = time.perf_counter()
    images: list[list[np.ndarray]] = [[], []]
    for problem in probs:
        one_object = np.zeros(len(problem.counts), dtype=np.int64)  # a problem holds one object's patterns
        for side, sel in enumerate(scan_halves(one_object)):
            half = dataclasses.replace(problem, counts=problem.counts[sel], positions=problem.positions[sel])
            result = engine(cfg.engine).build(half, REFERENCE, cfg).solve(flat_start(half))
            images[side].append(crop(half, result.obj))
    halves = np.stack([np.stack(side) for side in images]).astype(np.complex64)
    per_object = [half_scan(a, b, border=half_scan_border(ds.n)) for a, b in zip(halves[0], halves[1], strict=True)]
    mean = {k: float(np.mean([r[k] for r in per_object])) for k in per_object[0]}
    entry = {"mode": REFERENCE, **mean, "per_object": per_object, "seconds": time.perf_counter() - start}
    return halves, entry


def warm_table(record: SolveRecord) -> list[WarmStart]:
    """For each warm start and each of :data:`WARM_TARGETS`: the iterations (and
    seconds) it needs to reach the flat start's quality at that many iterations (without
    a ground truth: its data misfit, ``target_data_misfit``, instead of its SSIMs)."""
    rows = []
    by = {(r.mode, r.start): r for r in record.runs}
    for (mode, name), run in by.items():
        flat = by.get((mode, FLAT))
        if name == FLAT or flat is None:
            continue
        seen = set()
        for target in WARM_TARGETS:
            # The flat start's quality at ``target`` iterations, or at its last iteration
            # if it stopped sooner (converged, or its budget is smaller).
            goal = [p for p in flat.curve if p.iteration <= target][-1]
            if goal.iteration in seen:
                continue
            seen.add(goal.iteration)
            if goal.data_misfit is not None:
                hit = first_below(run.curve, goal.data_misfit)
                target = {"target_data_misfit": goal.data_misfit}
            else:
                hit = first_reaching(run.curve, goal.amp_ssim, goal.phase_ssim)
                target = {"target_amp_ssim": goal.amp_ssim, "target_phase_ssim": goal.phase_ssim}
            needed = None if hit is None else hit.iteration
            saved = None if needed is None else goal.iteration - needed
            rows.append(
                WarmStart(
                    mode,
                    name,
                    goal.iteration,
                    **target,
                    iterations=needed,
                    iterations_saved=saved,
                    seconds_saved=None if saved is None else saved * run.seconds_per_iteration,
                )
            )
    return rows


def _job_record(record: SolveRecord, out: str, ds, dataset: str) -> JobRecord:
    """What the job logs: per run its key figures (also as one nested run each, with the
    same metric keys, like the benchmark's arms), the misfit per iteration, the record."""
    job = JobRecord()
    metrics: dict[str, float] = {}
    stepped: dict[int, dict[str, float]] = {}
    lines = []
    for run in record.runs:
        key = f"{run.mode}_{run.start}".replace("-", "_")
        # Its quality: the SSIMs against the ground truth, or without one the data misfit.
        final = {k: run.final[k] for k in ("amp_ssim", "phase_ssim", MISFIT) if k in run.final}
        metrics.update(
            {
                f"{key}_s_per_iteration": run.seconds_per_iteration,
                f"{key}_s_per_object": run.seconds_per_object,
                f"{key}_iterations": run.iterations,
                f"{key}_compile_s": run.compile_s,
                **{f"{key}_{k}": v for k, v in final.items()},
            }
        )
        for i, value in enumerate(run.misfit[: int(run.iterations)]):
            stepped.setdefault(i + 1, {})[f"{key}_misfit"] = value
        speed = (record.ratios or {}).get(run.mode) if run.start == FLAT else None
        job.nested.append(
            NestedRun(
                f"solve-{run.mode}-{run.start}",
                {
                    "model": "solver",
                    "xla": run.mode,
                    "start": run.start,
                    "mlflow.note.content": f"The conventional solver under XLA mode {run.mode}, started from "
                    f"{'a flat object' if run.start == FLAT else 'the ' + run.start + ' reconstruction'}: time per iteration, misfit per iteration, quality of the stitched object.",
                },
                {"arm.model": "solver", "arm.xla": run.mode, "start": run.start, "engine": record.engine},
                {
                    "s_per_iteration": run.seconds_per_iteration,
                    "s_per_object": run.seconds_per_object,
                    "iterations": run.iterations,
                    "compile_s": run.compile_s,
                    **final,
                    **({"iteration_speedup": speed["ratio"]} if speed else {}),
                },
            )
        )
        lines.append(
            f"  {run.mode:8s} {run.start:20s} {run.iterations:6.0f} it  "
            f"{1e3 * run.seconds_per_iteration:7.1f} ms/it  {run.seconds_per_object:6.2f} s/object  "
            + (
                f"amp SSIM {final['amp_ssim']:.4f}  phase SSIM {final['phase_ssim']:.4f}"
                if "amp_ssim" in final
                else f"no ground truth: data misfit {final[MISFIT]:.4g}"
            )
        )
    for mode, r in (record.ratios or {}).items():
        metrics[f"{mode}_iteration_speedup"] = r["ratio"]
        lines.append(f"  {mode} vs off, iteration: {r['ratio']:.2f}x (95 % {r['low']:.2f}-{r['high']:.2f})")
    for row in record.warm_start:
        saved = "never reached" if row.iterations is None else f"{row.iterations_saved} saved"
        lines.append(
            f"  warm start {row.start}: flat start's quality at {row.flat_iterations} it reached in "
            f"{row.iterations if row.iterations is not None else '-'} it ({saved})"
        )
    job.metrics = metrics
    job.stepped = sorted(stepped.items())
    job.artifacts = [(out, "solver")]
    job.summary = (
        f"{out}: {record.engine} solver, {record.objects} object(s), {record.patterns} patterns\n" + "\n".join(lines)
    )
    job.tags["dataset_digest"] = ds.attrs["digest"]
    job.tags["solver.engine"] = record.engine
    job.datasets.append(DatasetInput("test.h5", ds.attrs["digest"], str(Path(dataset).resolve()), "test"))
    return job
