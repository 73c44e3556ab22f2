"""`make compare-ptychi`: this study's test split reconstructed by pty-chi (LSQML, ePIE), scored like the project's.

An independent reference for what the project's reconstructions should reach on the same data: pty-chi (the APS
ptychography library, PyTorch) with the probe known and fixed, from a flat object, scored with the project's own
``score_all``. pty-chi lives in a scratch venv (default .cache/ptychi-venv), never in the project's lock or CI:
its torch stack would constrain TensorFlow's. Runs with the project venv; ``scripts/ptychi_run.py`` runs inside
the scratch venv. Writes docs/ptychi-comparison.{json,md}.

A second solver's rows are added with :func:`score_checkpoint` into the same ``rows`` list (see :func:`main`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ptycho.study.bench.machine import cpu_words
from ptycho.study.solver_view import TARGET  # the quality the comparison asks for

ROOT = Path(__file__).resolve().parents[1]
# torch pinned: 2.13.0 is a CPU wheel on local disk; anything newer pulls a multi-GB CUDA build. pty-chi's run-time
# dependencies, then ptychi itself without its declared ones: torchvision exists only as CUDA builds that cannot
# load their ops next to the CPU torch (ptychi_run.py stands in for the one class pty-chi imports from it), and
# mypy, pytest and ruff are its development tools.
TORCH = "torch==2.13.0"
PTYCHI = "ptychi==2.2.0"
DEPS = ["h5py", "numpy", "scipy", "pandas", "pydantic", "tqdm", "matplotlib", "scikit-image", "scikit-learn"]
STAMP = ".ptychi-installed"
# Busy threads (CPU s / wall s of the reconstruction) below this share of --threads: other work took the CPU and
# the times are flagged. 2 threads gave 1.97-1.99 alone and about 1.0 beside a test suite (LSQML ~9x slower).
BUSY_SHARE = 0.8
FLAGS_OF_NOTE = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")
COLUMNS = [  # (key, header, format) of the Markdown table
    ("solver", "solver", "{}"),
    ("engine", "engine", "{}"),
    ("iterations", "iterations", "{}"),
    ("seconds_per_object", "s per object", "{:.1f}"),
    ("seconds_per_iteration", "s per iteration", "{:.3f}"),
    ("amp_ssim", "amp SSIM", "{:.4f}"),
    ("phase_ssim", "phase SSIM", "{:.4f}"),
    ("amp_psnr", "amp PSNR (dB)", "{:.2f}"),
    ("phase_psnr", "phase PSNR (dB)", "{:.2f}"),
]


class Failure(Exception):
    """A one-line error for the user (bad argument, failed install or run); never a traceback."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def run(cmd: list[str], what: str, **kwargs) -> None:
    """``cmd``, its output streamed; a non-zero exit is a :class:`Failure` naming ``what``."""
    print(f"+ {shlex.join(cmd)}", flush=True)
    if subprocess.run(cmd, cwd=ROOT, **kwargs).returncode != 0:
        raise Failure(f"{what} failed (command above)")


def ensure_venv(venv: Path) -> tuple[Path, dict]:
    """The scratch venv's python and its stamp (packages, install seconds, date); installed unless the stamp
    names the same packages. The stamp keeps the build's time, which the report gives even when it is reused."""
    packages = [TORCH, PTYCHI, *DEPS]
    py, stamp = venv / "bin" / "python", venv / STAMP
    try:
        built = json.loads(stamp.read_text())
        if built["packages"] == packages and py.is_file():
            return py, built
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if venv.exists() and not (venv / "pyvenv.cfg").is_file():
        raise Failure(f"{venv}: exists and is not a venv; choose another --venv")
    start = time.perf_counter()
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", str(venv)], "creating the scratch venv")
    (venv / ".gitignore").write_text("*\n")  # as Python 3.13's venv does: never committed
    pip = [str(py), "-m", "pip", "install", "-q"]
    run([*pip, TORCH, *DEPS], "installing torch and pty-chi's run-time dependencies")
    run([*pip, "--no-deps", PTYCHI], "installing pty-chi")  # last: pip checks nothing it did not install
    built = {"packages": packages, "install_seconds": round(time.perf_counter() - start, 1), "date": now()}
    stamp.write_text(json.dumps(built))
    return py, built


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def make_test_split(folder: Path) -> Path:
    """The default preset's test split, made as the pipeline's simulate rule makes it (same resolved flags)."""
    import yaml

    from ptycho.study.workflow import cli_flags, resolve

    with open(ROOT / "config.yaml") as fh:
        cfg = resolve(yaml.safe_load(fh), {"preset": "default"})
    cmd = [sys.executable, "-m", "ptycho", "simulate", "--quiet", "--train", str(folder / "train.h5")]
    run([*cmd, "--test", str(folder / "test.h5"), *shlex.split(cli_flags(cfg["simulation"]))], "simulate")
    return folder / "test.h5"


def run_ptychi(py: Path, dataset: Path, engine: str, iterations: str, args, out: Path) -> tuple[dict, str]:
    """ptychi_run.py in the scratch venv; its summary (checkpoints, chi^2 checks) and the exact command."""
    cmd = [str(py), str(ROOT / "scripts" / "ptychi_run.py"), str(dataset), engine, "--iterations", iterations]
    cmd += ["--threads", str(args.threads), "--batch-size", str(args.batch_size), "--out", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    run(cmd, f"pty-chi {engine}", env=env)
    return json.loads((out / f"{engine}.json").read_text()), shlex.join(cmd)


def score_checkpoint(name: str, engine: str, iterations: int, seconds: float, npz: str | Path, truths: list) -> dict:
    """One table row: reconstructions in the project's stitched format (``images`` (M, H, W)) scored with
    ``score_all`` against ``truths`` (``ds.ground_truth(m)``), exactly as ``ptycho evaluate`` scores the
    project's own; ``seconds`` is the reconstruction wall time of all M objects together."""
    import numpy as np

    from ptycho.analysis.metrics import score_all
    from ptycho.artifacts import read_arrays

    images = read_arrays(npz, ("images",))["images"]
    if len(images) != len(truths) or any(i.shape != t.shape for i, t in zip(images, truths, strict=True)):
        raise Failure(f"{npz}: images do not match the dataset's scan regions")
    mean = score_all(list(images.astype(np.complex64)), truths)["mean"]
    return {
        "solver": name,
        "engine": engine,
        "iterations": iterations,
        "seconds_per_object": seconds / len(truths),
        "seconds_per_iteration": seconds / len(truths) / iterations,
        **{k: mean[k] for k in ("amp_ssim", "phase_ssim", "amp_psnr", "phase_psnr")},
        "images": str(npz),
    }


#: This project's solver: the iterations it is scored at (beside pty-chi's checkpoints).
OURS_CHECKPOINTS = (10, 20, 30, 50, 200)


def run_ours(dataset: Path, args, out: Path) -> tuple[dict, str]:
    """This project's solver (``ptycho solve``) on the same split, threads and machine, after pty-chi:
    every mode of ``--ours-modes`` from a flat start, one iteration of each in turn."""
    out.mkdir(parents=True, exist_ok=True)
    checkpoints = sorted({*range(1, 11), 12, 15, 20, 25, 30, 40, 50, 70, 100, 150, 200})
    cmd = [
        sys.executable, "-m", "ptycho", "--threads", str(args.threads), "solve", "--dataset", str(dataset),
        "--modes", *args.ours_modes.split(","), "--checkpoints", *map(str, checkpoints),
        "--out", str(out / "solve.json"), "--stitched-dir", str(out),
    ]  # fmt: skip
    run(cmd, "this project's solver (ptycho solve)")
    return json.loads((out / "solve.json").read_text()), shlex.join([os.path.relpath(cmd[0]), *cmd[1:]])


def _ours_seconds(run_: dict, iterations: int) -> float:
    """Wall seconds per object of the first ``iterations`` iterations (compilation excluded, as pty-chi's
    set-up is)."""
    per_object = max(round(len(run_["iteration_seconds"]) / max(run_["iterations"], 1e-9)), 1)
    return sum(run_["iteration_seconds"][: iterations * per_object]) / per_object


def ours_rows(record: dict, iterations: tuple[int, ...]) -> list[dict]:
    """Table rows of ``ptycho solve``'s record: its own scores (the same ``score_all``) at ``iterations``,
    or at its last iteration when it stopped on its tolerance before one of them."""
    rows = []
    for r in record["runs"]:
        curve = {p["iteration"]: p for p in r["curve"]}
        done = set()
        for it in iterations:
            at = max(i for i in curve if i <= it)
            if at in done:
                continue
            done.add(at)
            seconds = _ours_seconds(r, at)
            rows.append({
                "solver": "ptycho (this project)",
                "engine": f"{record['engine'].upper()} {r['mode']}",
                "iterations": at,
                "seconds_per_object": seconds,
                "seconds_per_iteration": seconds / at,
                **{k: curve[at][k] for k in ("amp_ssim", "phase_ssim", "amp_psnr", "phase_psnr")},
                "compile_s": r["compile_s"],
            })  # fmt: skip
    return rows


def to_target(rows: list[dict], runs: dict, ours: dict) -> list[dict]:
    """Per solver and engine: the first checkpoint reaching :data:`TARGET`, and its seconds per object."""
    from ptycho.study.solve import first_reaching

    out = []
    for label, engine in (("LSQML", "lsqml"), ("ePIE", "epie")):
        curve = [r for r in rows if r["solver"] == "pty-chi" and r["engine"] == label]
        hit = first_reaching(curve, *TARGET)
        its = [c["iterations"] for c in runs[engine]["checkpoints"]]
        out.append({"solver": "pty-chi", "engine": label, "checkpoints": its,
                    "iterations": hit and hit["iterations"], "seconds": hit and hit["seconds_per_object"]})  # fmt: skip
    for r in ours["runs"]:
        hit = first_reaching(r["curve"], *TARGET)  # a flat start's curve begins at iteration 1
        out.append({"solver": "ptycho (this project)", "engine": f"{ours['engine'].upper()} {r['mode']}",
                    "checkpoints": [p["iteration"] for p in r["curve"]],
                    "iterations": hit and hit["iteration"],
                    "seconds": hit and _ours_seconds(r, hit["iteration"]), "compile_s": r["compile_s"]})  # fmt: skip
    return out


def machine(threads: int) -> dict:
    """What the timings depend on: the project's machine record (CPU model, cores, load), the CPU flags of
    note (bf16 and AMX support), the threads and the date."""
    from ptycho.study.bench import machine_info

    try:
        flags = next(
            set(line.split(":", 1)[1].split())
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("flags")
        )
    except (OSError, StopIteration):
        flags = set()
    info = machine_info()
    return {
        **info,
        "load_average": [round(v, 2) for v in info["load_average"]],
        "cpu_flags_of_note": [f for f in FLAGS_OF_NOTE if f in flags],
        "threads": threads,
        "date": now(),
    }


def _target_rows(targets: list[dict]) -> list[str]:
    """Markdown rows of :func:`to_target`, each with pty-chi LSQML's time over its own."""
    lsqml = next((t["seconds"] for t in targets if t["engine"] == "LSQML"), None)
    out = []
    for t in targets:
        its, secs = t["iterations"], t["seconds"]
        compile_s = f"{t['compile_s']:.2f}" if "compile_s" in t else "-"
        ratio = f"{lsqml / secs:.1f}x" if secs and lsqml else "n/a"
        shown = (str(its), f"{secs:.2f}") if its is not None else ("not reached", "-")
        out.append(f"| {t['solver']} | {t['engine']} | {shown[0]} | {shown[1]} | {compile_s} | {ratio} |")
    return out


def markdown(result: dict) -> str:
    """The report a reader sees; every figure comes from ``result`` (the JSON beside it)."""
    rows = result["rows"]
    m, runs = result["machine"], result["runs"]
    table = ["| " + " | ".join(h for _, h, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    table += ["| " + " | ".join(fmt.format(r[k]) for k, _, fmt in COLUMNS) + " |" for r in rows]
    checks = next(iter(runs.values()))["chi2_per_pixel"]
    chi2 = [f"| {name} | {' | '.join(f'{c[name]:.4g}' for c in checks)} |" for name in checks[0]]
    venv = result["scratch_venv"]
    busy = {e: r["checkpoints"][-1]["cpu_seconds"] / r["checkpoints"][-1]["seconds"] for e, r in runs.items()}
    caution = (
        [f"**Caution: the runs got less than {BUSY_SHARE:.0%} of {m['threads']} threads (below); times inflated.**", ""]
        if min(busy.values()) < BUSY_SHARE * m["threads"]
        else []
    )
    lines = [
        "# pty-chi and this project's solver on the study's test split",
        "",
        "Generated by `make compare-ptychi` (`scripts/compare_ptychi.py`); do not edit by hand.",
        "",
        *caution,
        "An independent reference for the reconstructions: the test split named below (by default the default",
        "preset's) reconstructed by [pty-chi](https://github.com/AdvancedPhotonSource/pty-chi) with the true probe",
        "fixed, positions exact, a flat start (object = 1), and scored with the project's `score_all` on the scan",
        "region, as `ptycho evaluate` scores the project's own reconstructions. Times are the reconstruction's wall",
        "time alone (no set-up), on the CPU with the threads below.",
        "",
        *table,
        "",
        f"## Time to amplitude SSIM >= {TARGET[0]} and phase SSIM >= {TARGET[1]}",
        "",
        "The first scored iteration at which both are reached (pty-chi is scored at its checkpoints only, so its",
        "figure is an upper bound within one checkpoint interval; this project's solver at every iteration up to",
        "10, then more sparsely), and the wall seconds per object up to it. Compilation (this project's solver,",
        "once per mode and problem) is excluded like pty-chi's set-up, and given beside it.",
        "",
        "| solver | engine | iterations | s per object | compile s | pty-chi LSQML's time / this |",
        "|---|---|---|---|---|---|",
        *_target_rows(result["to_target"]),
        "",
        "## Conditions",
        "",
        f"- CPU: {cpu_words(m)} ({m['cores']} cores), flags of note: {', '.join(m['cpu_flags_of_note']) or 'none'}",
        f"- torch threads: {m['threads']}; load average (1, 5, 15 min) at start: {m['load_average']},"
        f" at end: {result['load_at_end']}",
        "- threads busy during reconstruction (CPU s / wall s): " + ", ".join(f"{e} {b:.2f}" for e, b in busy.items()),
        f"- date: {m['date']}; pty-chi {result['ptychi']}, torch {result['torch']}; batch size {result['batch_size']}",
        f"- dataset: `{result['dataset']}` (sha256 {result['dataset_digest'][:16]}), {result['objects']} object(s)",
        f"- command: `{result['command']}`",
        *[f"- {engine}: `{r['command']}`" for engine, r in runs.items()],
        f"- this project's solver: `{result['ours_command']}`",
        f"- scratch venv: {' '.join(venv['packages'])}, installed in {venv['install_seconds']:.0f} s on {venv['date']}",
        "",
        "## Conversion check",
        "",
        "Before reconstructing, pty-chi's own forward model is run on the true object: the noise-free intensities",
        "must match the counts at Poisson level (Pearson chi^2 per detector pixel near 1), and deliberate errors",
        "must not (the run stops otherwise). Per object:",
        "",
        "| conversion | " + " | ".join(f"object {i}" for i in range(len(checks))) + " |",
        "|---|" + "---|" * len(checks),
        *chi2,
        "",
        "## pty-chi settings and conventions (2.2.0, read from its source)",
        "",
        "- Far field `|fft2(P O)|^2` with torch's unnormalised FFT, DC at the corner: the probe is",
        "  `scale * probe / N`; data handed over with DC at the corner (`ifftshift`) and `fft_shift=False`",
        "  (pty-chi's `fft_shift` applies `fftshift`, right for even N only).",
        "- Positions (y, x) relative to the buffer origin `round(S/2) - 0.5`; a patch centred at `p` starts at",
        "  `p - (N-1)/2`, the project's at `q - N//2`: relative position `q - round(S/2)` for even N (integer, so",
        "  no sub-pixel probe shift). Taking `q - (round(S/2) - 0.5)` literally is the half-pixel row above.",
        "- Probe and positions not optimised; LSQML's first-epoch probe-intensity rescaling (which also skips the",
        "  object update in epoch 0) and the object-probe ambiguity removal (every 10 epochs) are off, since both",
        "  rescale the probe even when it is fixed; the run checks the probe is unchanged at the end.",
        "- Defaults otherwise: LSQML Gaussian noise model, step-size scaler 0.9; ePIE alpha 0.1, step 1; random",
        "  batches (seed 0), float32 on the CPU.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="compare_ptychi", description=__doc__.splitlines()[0])
    p.add_argument("--dataset", help="a test split (.h5); default: make the default preset's in --work")
    p.add_argument("--venv", default=".cache/ptychi-venv", help="scratch venv for pty-chi (.cache/ptychi-venv)")
    p.add_argument("--work", default="/tmp/ptychi-data", help="folder for the split and pty-chi's outputs")
    p.add_argument("--threads", type=int, default=2, help="torch threads (2)")
    p.add_argument("--batch-size", type=int, default=100, help="patterns per minibatch, both engines (100)")
    p.add_argument("--lsqml-iterations", default="10,20,30,40,50,200", help="checkpoints (10,20,30,40,50,200)")
    p.add_argument(
        "--ours-modes", default="off,jit", help="XLA modes of this project's solver, run after pty-chi (off,jit)"
    )
    p.add_argument("--epie-iterations", default="10", help="checkpoints (10)")
    p.add_argument("--out", default="docs/ptychi-comparison", help="writes OUT.json and OUT.md")
    args = p.parse_args(argv)
    for name in ("lsqml_iterations", "epie_iterations"):
        its = getattr(args, name).split(",")
        if not all(v.isdigit() and int(v) > 0 for v in its) or [int(v) for v in its] != sorted({int(v) for v in its}):
            p.error(
                f"--{name.replace('_', '-')}: {getattr(args, name)!r} is not an increasing list of positive integers"
            )
    if args.threads < 1 or args.batch_size < 1:
        p.error("--threads and --batch-size must be at least 1")
    if args.dataset and not Path(args.dataset).is_file():
        p.error(f"--dataset: {args.dataset}: no such file")

    from ptycho.artifacts import atomic_write, write_json
    from ptycho.data.dataset import read_dataset
    from ptycho.errors import PtychoError

    command = shlex.join([os.path.relpath(sys.executable), *sys.argv])
    try:
        work = Path(args.work).resolve()
        work.mkdir(parents=True, exist_ok=True)
        py, venv = ensure_venv((ROOT / args.venv).resolve())
        dataset = Path(args.dataset).resolve() if args.dataset else make_test_split(work)
        ds = read_dataset(dataset)
        truths = [ds.ground_truth(m) for m in range(ds.objects.shape[0])]
        info = machine(args.threads)
        runs, rows = {}, []
        for engine, label, its in (("lsqml", "LSQML", args.lsqml_iterations), ("epie", "ePIE", args.epie_iterations)):
            summary, cmd = run_ptychi(py, dataset, engine, its, args, work / "ptychi")
            runs[engine] = {**summary, "command": cmd}
            for c in summary["checkpoints"]:
                rows.append(score_checkpoint("pty-chi", label, c["iterations"], c["seconds"], c["npz"], truths))
        ours, ours_cmd = run_ours(dataset, args, work / "ours")
        rows += ours_rows(ours, OURS_CHECKPOINTS)
        result = {
            "rows": rows,
            "to_target": to_target(rows, runs, ours),
            "ours_command": ours_cmd,
            "machine": info,
            "load_at_end": [round(v, 2) for v in os.getloadavg()],
            "ptychi": runs["lsqml"]["ptychi"],
            "torch": runs["lsqml"]["torch"],
            "batch_size": args.batch_size,
            "dataset": str(dataset),
            "dataset_digest": ds.attrs["digest"],
            "objects": len(truths),
            "command": command,
            "scratch_venv": venv,
            "runs": runs,
        }
        write_json(ROOT / f"{args.out}.json", result)
        atomic_write(ROOT / f"{args.out}.md", lambda tmp: Path(tmp).write_text(markdown(result)))
    except (Failure, PtychoError, OSError) as err:
        print(f"compare_ptychi: error: {err}", file=sys.stderr)
        return 1
    print(Path(ROOT / f"{args.out}.md").read_text().split("\n## ")[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
