"""Reconstruct a ptycho dataset with pty-chi (LSQML or ePIE): an independent check of the project's solvers.

Runs inside the scratch venv that ``scripts/compare_ptychi.py`` builds (torch + ptychi + h5py, not the ptycho
package, so that neither stack constrains the other). Reads the HDF5 file directly (docs/dataset-format.md).

The conversion, from pty-chi 2.2.0's source (checked numerically below before anything is trusted):

* intensity = ``|fft2(P * O_patch)|^2`` with torch's unnormalised FFT, DC at the corner
  (``FourierPropagator(norm=None)``); the project's is ``|fft2(s P O_patch, norm="ortho")|^2``, so pty-chi's
  probe is ``scale * probe / N``. The data are handed over with DC at the corner (``ifftshift``) and
  ``fft_shift=False``: pty-chi's own ``fft_shift`` applies ``fftshift``, which undoes the project's ``fftshift``
  only for even N.
* positions are (y, x) relative to the buffer origin ``round(S/2) - 0.5``; a patch centred at pixel-frame ``p``
  starts at ``p - (N-1)/2`` (``extract_patches_integer``). The project's patch at ``q`` starts at ``q - N//2``, so
  ``p = q - 0.5`` for even N and the relative position is ``q - round(S/2)``: integer, no sub-pixel probe shift.
* the probe stays as given: probe and positions are not optimised, and the two features that rescale the probe
  even when it is fixed are off (LSQML's first-epoch intensity rescaling, which also skips the object update in
  epoch 0, and the object-probe ambiguity removal every 10 epochs).

The check: pty-chi's own forward model on the true object must match the counts at Poisson level (chi^2 per pixel
near 1), and swapped axes, one-pixel and half-pixel offsets must not. Any failure stops the run (exit 3).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
import types
import warnings
from importlib.metadata import version
from pathlib import Path

import numpy as np

CHI2_OK = (0.5, 2.0)  # Poisson-level agreement of the true object's intensities with the counts
CHI2_WRONG_FACTOR = 10.0  # a wrong conversion must be at least this much worse
CHECK_BATCH = 128


def import_ptychi():
    """pty-chi, with a stand-in for torchvision if it is missing.

    pty-chi imports torchvision only for ``GaussianBlur`` in a random-image helper this script never calls.
    PyPI's torchvision wheels are CUDA builds whose ops need libtorch_cuda and fail to import next to the CPU
    torch, so the scratch venv has none; the stand-in raises if it is ever used.
    """
    try:
        import torchvision  # noqa: F401
    except ImportError:

        class GaussianBlur:
            def __init__(self, *args, **kwargs):
                raise RuntimeError("torchvision is not installed in the pty-chi scratch venv")

        transforms = types.ModuleType("torchvision.transforms")
        transforms.GaussianBlur = GaussianBlur
        sys.modules.update(torchvision=types.ModuleType("torchvision"), **{"torchvision.transforms": transforms})
    import ptychi

    return ptychi


def read_dataset(path: str) -> dict:
    """The arrays and ``scale`` of a ptycho dataset file (counts only: the forward model is checked on counts)."""
    import h5py

    with h5py.File(path, "r") as f:
        if f.attrs.get("format") != "ptycho-dataset":
            raise ValueError("no 'format' attribute 'ptycho-dataset'")
        if f.attrs["units"] != "counts":
            raise ValueError(f"units {f.attrs['units']!r}; pty-chi needs photon counts")
        names = ("diffraction", "probe", "objects", "positions", "position_object", "scan_region")
        ds = {k: f[k][()] for k in names}
        ds["scale"] = float(f.attrs["scale"])
    return ds


def convert(ds: dict, m: int, shift_xy: tuple[float, float] = (0.0, 0.0), swap: bool = False) -> dict:
    """pty-chi's inputs for object ``m`` (module docstring); ``shift_xy`` and ``swap`` make deliberate errors."""
    sel = ds["position_object"] == m
    n, size = ds["probe"].shape[0], ds["objects"].shape[-1]
    centre = ds["positions"][sel] + (n - 1) / 2 - n // 2  # pty-chi's centre of the project's window, [x, y]
    rel = centre - (round(size / 2) - 0.5) + np.asarray(shift_xy)  # relative to pty-chi's buffer origin
    x, y = (rel[:, 1], rel[:, 0]) if swap else (rel[:, 0], rel[:, 1])
    return {
        "diffraction_data": np.fft.ifftshift(ds["diffraction"][sel].astype(np.float32), axes=(-2, -1)),
        "probe_data": (ds["scale"] * ds["probe"] / n).astype(np.complex64)[None, None],
        "probe_position_x_px": x.astype(np.float32),
        "probe_position_y_px": y.astype(np.float32),
    }


def make_task(engine: str, inputs: dict, obj: np.ndarray, batch: int, seed: int = 0):
    """A pty-chi task on the CPU that optimises only the object (probe and positions fixed, see docstring)."""
    import ptychi.api as api
    from ptychi.api.task import PtychographyTask

    opts = api.LSQMLOptions() if engine == "lsqml" else api.EPIEOptions()
    opts.data_options.fft_shift = False
    opts.object_options.remove_object_probe_ambiguity.enabled = False
    opts.probe_options.optimizable = False
    opts.probe_position_options.optimizable = False
    rec = opts.reconstructor_options
    rec.batch_size = batch
    rec.default_device = api.Devices.CPU
    rec.random_seed = seed
    if engine == "lsqml":
        rec.rescale_probe_intensity_in_first_epoch = False
    return PtychographyTask(opts, object_data=obj[None].astype(np.complex64), **inputs)


def chi2_per_pixel(task) -> float:
    """Pearson chi^2 per detector pixel of the task's predicted intensities against its data (variance ~ max(I, 1))."""
    import torch

    fm, patterns = task.reconstructor.forward_model, task.dataset.patterns
    total = 0.0
    with torch.no_grad():
        for start in range(0, len(patterns), CHECK_BATCH):
            idx = torch.arange(start, min(start + CHECK_BATCH, len(patterns)))
            pred = fm.forward(idx).double()
            total += float((((patterns[idx].double() - pred) ** 2) / pred.clamp(min=1.0)).sum())
    return total / patterns.numel()


def check_conversion(ds: dict, m: int) -> dict[str, float]:
    """chi^2 of the true object under the conversion and under deliberate errors; raises if they do not separate."""
    variants = {
        "as converted": {},
        "x and y swapped": {"swap": True},
        "x + 1 px": {"shift_xy": (1.0, 0.0)},
        "y + 1 px": {"shift_xy": (0.0, 1.0)},
        "x, y + 0.5 px": {"shift_xy": (0.5, 0.5)},
    }
    chi2 = {
        name: chi2_per_pixel(make_task("lsqml", convert(ds, m, **kw), ds["objects"][m], CHECK_BATCH))
        for name, kw in variants.items()
    }
    ok = chi2["as converted"]
    worst_wrong = min(v for k, v in chi2.items() if k != "as converted")
    if not CHI2_OK[0] <= ok <= CHI2_OK[1] or worst_wrong < CHI2_WRONG_FACTOR * ok:
        raise RuntimeError(
            f"object {m}: conversion check failed (chi^2 per pixel {json.dumps(chi2)}; want {CHI2_OK[0]}-{CHI2_OK[1]}"
            f" as converted and at least {CHI2_WRONG_FACTOR}x that for every deliberate error)"
        )
    return chi2


def reconstruct(ds: dict, m: int, engine: str, checkpoints: list[int], batch: int) -> list[dict]:
    """Object ``m`` from a flat start (ones), cropped to its scan region at every checkpoint; run() time only."""
    inputs = convert(ds, m)
    size = ds["objects"].shape[-1]
    task = make_task(engine, inputs, np.ones((size, size), np.complex64), batch)
    x0, y0, x1, y1 = (int(v) for v in ds["scan_region"][m])
    done, seconds, cpu, out = 0, 0.0, 0.0, []
    for it in checkpoints:
        start, start_cpu = time.perf_counter(), time.process_time()
        task.run(n_epochs=it - done)
        seconds += time.perf_counter() - start
        cpu += time.process_time() - start_cpu
        done = it
        image = task.get_data_to_cpu("object", as_numpy=True)[0, y0:y1, x0:x1].astype(np.complex64)
        loss = float(task.reconstructor.loss_tracker.table.iloc[-1].loss)
        out.append({"iterations": it, "seconds": seconds, "cpu_seconds": cpu, "image": image, "loss": loss})
    probe = task.get_data_to_cpu("probe", as_numpy=True)
    if not np.array_equal(probe, inputs["probe_data"]):  # the comparison assumes the probe was never touched
        raise RuntimeError(f"object {m}: pty-chi changed the fixed probe")
    return out


def atomic(path: Path, write) -> None:
    """``write(tmp)`` beside ``path``, then rename: a killed run never leaves a half-written file that looks valid."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def save_npz(path: str, images: np.ndarray) -> None:
    """The project's stitched format (``images`` (M, H, W) complex64); a file object, as np.savez would add .npz."""
    with open(path, "wb") as fh:
        np.savez(fh, images=images)


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        """One line, no usage block: the caller is usually compare_ptychi.py, whose log should stay readable."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="ptychi_run", description=__doc__.splitlines()[0])
    p.add_argument("dataset", help="ptycho dataset file (.h5)")
    p.add_argument("engine", choices=["lsqml", "epie"])
    p.add_argument("--iterations", default="10,50,200", help="checkpoints, comma-separated, increasing (10,50,200)")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads (2)")
    p.add_argument("--batch-size", type=int, default=100, help="patterns per minibatch (100)")
    p.add_argument("--out", required=True, help="folder for <engine>-<iterations>.npz and <engine>.json")
    args = p.parse_args(argv)
    try:
        args.checkpoints = [int(v) for v in args.iterations.split(",")]
    except ValueError:
        p.error(f"--iterations: {args.iterations!r} is not a comma-separated list of integers")
    if min(args.checkpoints) < 1 or args.checkpoints != sorted(set(args.checkpoints)):
        p.error(f"--iterations: {args.iterations!r} must be positive and strictly increasing")
    if args.threads < 1 or args.batch_size < 1:
        p.error("--threads and --batch-size must be at least 1")
    if not Path(args.dataset).is_file():
        p.error(f"{args.dataset}: no such file")
    return args


def quiet_known_noise() -> None:
    """Silence two messages that are wrong here, so that a real warning stands out.

    pty-chi's SUPPORT coverage check bounds a patch by ``N // 2`` from its centre where it reaches ``(N - 1) / 2``,
    so it warns for patches that end exactly on the buffer's edge (the project's scans touch pixel 0); the
    padding warning of the patch extractor, which would fire for a real overrun, stays on. torch's
    requires_grad-to-scalar warning comes from pty-chi's set-up, not from anything this script does.
    """
    logging.basicConfig(level=logging.WARNING, format="pty-chi: %(levelname)s %(message)s")
    logging.getLogger().addFilter(lambda r: "determine_center_coords_by` is set to `SUPPORT`" not in r.getMessage())
    warnings.filterwarnings("ignore", message="Converting a tensor with requires_grad=True to a scalar")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_known_noise()
    import torch

    import_ptychi()
    torch.set_num_threads(args.threads)
    try:
        ds = read_dataset(args.dataset)
    except (OSError, KeyError, ValueError) as err:
        print(f"ptychi_run: error: {args.dataset}: not a readable ptycho dataset ({err})", file=sys.stderr)
        return 2
    out = Path(args.out)
    n_obj = ds["objects"].shape[0]
    try:
        checks = [check_conversion(ds, m) for m in range(n_obj)]
        for m, c in enumerate(checks):
            print(f"object {m}: chi^2 per pixel " + ", ".join(f"{k} {v:.3g}" for k, v in c.items()), flush=True)
        runs = [reconstruct(ds, m, args.engine, args.checkpoints, args.batch_size) for m in range(n_obj)]
    except RuntimeError as err:
        print(f"ptychi_run: error: {err}", file=sys.stderr)
        return 3
    rows = []
    for i, it in enumerate(args.checkpoints):
        npz = out / f"{args.engine}-{it}.npz"
        images = np.stack([run[i]["image"] for run in runs])
        atomic(npz, lambda tmp, images=images: save_npz(tmp, images))
        seconds = sum(run[i]["seconds"] for run in runs)
        cpu = sum(run[i]["cpu_seconds"] for run in runs)  # / seconds: threads really busy (< threads: contention)
        rows.append(
            {
                "iterations": it,
                "seconds": seconds,
                "seconds_per_iteration": seconds / it / n_obj,
                "seconds_per_object": seconds / n_obj,
                "cpu_seconds": cpu,
                "loss": [run[i]["loss"] for run in runs],
                "npz": str(npz),
            }
        )
        print(f"{args.engine} {it} it: {seconds:.1f} s, {seconds / it / n_obj:.3f} s/it per object", flush=True)
    summary = {
        "engine": args.engine,
        "dataset": str(Path(args.dataset).resolve()),
        "objects": n_obj,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "ptychi": version("ptychi"),
        "torch": torch.__version__,
        "chi2_per_pixel": checks,
        "checkpoints": rows,
    }
    atomic(out / f"{args.engine}.json", lambda tmp: Path(tmp).write_text(json.dumps(summary, indent=2) + "\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
