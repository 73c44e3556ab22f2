"""How the pipeline's cost grows with the data: simulation, one training epoch, stitching,
and the iterative solver's iteration with the number of patterns.

Each step is timed at several data sizes (objects per split) in one process, one size
after another, and the growth is summarised by the slope of log(time) against
log(size): 1 is linear, 2 quadratic. The training epoch excludes the first step (trace
and compile, a fixed cost) and runs the study's model; stitching includes the phase
synchronisation, on exact patches (its cost does not depend on their content).
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
import time
from collections.abc import Sequence

import numpy as np

from ptycho.study.stats import line


def slope(sizes: Sequence[float], seconds: Sequence[float]) -> float:
    """Least-squares slope of log(seconds) against log(sizes): the growth exponent (also
    a learning curve's, :meth:`ptycho.study.time_to_quality.Run.exponent_near`); NaN below
    two points.

    With ``math.log``, not NumPy's SIMD logarithm, and :func:`ptycho.study.stats.line`:
    the same figure on every CPU kind."""
    if len(sizes) < 2:
        return math.nan
    return line([math.log(s) for s in sizes], [math.log(t) for t in seconds])[1]


def run(sizes: Sequence[int], sim_cfg, model_cfg, train_cfg, progress: bool = False) -> dict:
    """``{"sizes", "steps": {step: {"seconds": [...], "per_object_s": [...], "slope"}}}``."""
    from ptycho.analysis.stitch import stitch_objects
    from ptycho.data.simulate import simulate
    from ptycho.nets.train import train
    from ptycho.physics.translate import extract_patches
    from ptycho.study.training_record import TrainingRecord

    steps: dict[str, list[float]] = {"simulate": [], "train_epoch": [], "stitch": []}
    units: dict[str, list[int]] = {"simulate": [], "train_epoch": [], "stitch": []}
    for k in sizes:
        cfg = dataclasses.replace(sim_cfg, n_objects_train=k, n_objects_test=k)
        t0 = time.perf_counter()
        pair = simulate(cfg)
        steps["simulate"].append(time.perf_counter() - t0)
        units["simulate"].append(pair["train"].diffraction.shape[0] + pair["test"].diffraction.shape[0])
        with tempfile.TemporaryDirectory() as tmp:
            trained = TrainingRecord.of(
                train(pair["train"], model_cfg, dataclasses.replace(train_cfg, epochs=1), tmp, progress=False)
            )
        steps["train_epoch"].append(float(np.sum(trained.step_times_s)))
        units["train_epoch"].append(len(trained.step_times_s) + 1)
        test = pair["test"]
        objects = test.position_object[test.groups].reshape(-1)
        order = np.argsort(objects, kind="stable")  # object by object, as the patches are cut
        positions, objects = test.positions[test.groups].reshape(-1, 2)[order], objects[order]
        patches = np.concatenate(
            [extract_patches(test.objects[m], positions[objects == m], test.n) for m in range(test.objects.shape[0])]
        )
        t0 = time.perf_counter()
        stitch_objects(patches, positions, objects, test)
        steps["stitch"].append(time.perf_counter() - t0)
        units["stitch"].append(len(patches))
        if progress:
            print(f"{k} object(s): " + ", ".join(f"{s} {v[-1]:.2f} s" for s, v in steps.items()), flush=True)
    return {
        "sizes": list(sizes),
        "steps": {
            s: {
                "seconds": v,
                "work": units[s],
                "per_object_s": [t / k for t, k in zip(v, sizes, strict=True)],
                "slope": slope(sizes, v),
            }
            for s, v in steps.items()
        },
    }


def solver_run(sides: Sequence[int], sim_cfg, solver_cfg, mode: str, iterations: int = 20) -> dict:
    """The solver's iteration against the patterns of one object: test splits of object
    side ``sides`` (the study's stride, so the patterns grow with the area), each solved
    for ``iterations`` iterations under ``mode``.

    Per side: patterns, median seconds per iteration (after the solve job's warm-up),
    compile seconds, and the process's peak RSS so far (the sides run in increasing
    order, so each peak is that side's), with the growth exponent against patterns.
    """
    import resource

    from ptycho.data.simulate import simulate_split
    from ptycho.solvers.engines import engine
    from ptycho.solvers.problem import problems
    from ptycho.study.solve import WARMUP

    out: dict[str, list] = {
        "sides": [],
        "patterns": [],
        "seconds_per_iteration": [],
        "compile_s": [],
        "peak_rss_mb": [],
    }
    for side in sorted(sides):
        cfg = dataclasses.replace(sim_cfg, object_size=side, n_objects_test=1)
        problem = problems(simulate_split(cfg, "test", scale=None))[0]
        settings = dataclasses.replace(solver_cfg, iterations=iterations, tolerance=0.0)
        solver = engine(settings.engine).build(problem, mode, settings)
        compile_s = solver.compile()
        times = [it.seconds for it in solver.iterate()][WARMUP:]
        out["sides"].append(side)
        out["patterns"].append(len(problem.counts))
        out["seconds_per_iteration"].append(float(np.median(times)))
        out["compile_s"].append(compile_s)
        out["peak_rss_mb"].append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    out["mode"] = mode
    out["engine"] = solver_cfg.engine
    out["slope"] = slope(out["patterns"], out["seconds_per_iteration"])
    return out


def format_solver_table(result: dict) -> str:
    lines = [f"solver iteration ({result['mode']}): patterns   ms per iteration   compile s   peak RSS MB"]
    for row in zip(
        result["patterns"], result["seconds_per_iteration"], result["compile_s"], result["peak_rss_mb"], strict=True
    ):
        lines.append(f"{row[0]:32d} {1e3 * row[1]:18.1f} {row[2]:11.2f} {row[3]:13.0f}")
    lines.append(f"growth exponent against patterns: {result['slope']:.2f}")
    return "\n".join(lines)


def format_table(result: dict) -> str:
    sizes = result["sizes"]
    lines = ["step         " + "".join(f"{k:>4d} obj s" for k in sizes) + "   per object vs 1   growth exponent"]
    for step, r in result["steps"].items():
        per = r["per_object_s"]
        ratios = " ".join(f"{p / per[0]:.2f}" for p in per)
        lines.append(f"{step:12s} " + "".join(f"{t:10.2f}" for t in r["seconds"]) + f"   {ratios:17s} {r['slope']:.2f}")
    return "\n".join(lines)
