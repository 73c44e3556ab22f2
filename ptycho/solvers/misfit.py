"""How well a reconstruction explains the measured data, with no ground truth: the data misfit.

Measured data has no object to score against; what it does have is the diffraction the
object must reproduce. The misfit of an object ``O`` is the conventional solver's
(:meth:`ptycho.solvers.gradient.Solver.misfit`), in NumPy: the Poisson negative
log-likelihood of the counts ``n`` per measured pixel, above the saturated model's
(rate = counts), so that it reads about 0.5 at the noise level and 0 for a perfect fit::

    lam_k  = |fftshift(FFT2(s P window(O, r_k)))|^2 / N^2            (ptycho.physics.forward)
    misfit = (sum lam - n log(lam + eps) - sum_{n>0} (n - n log(n + eps))) / pixels

A reconstruction of the scanned region (a stitched object) is first placed into the
object as the solver's warm start places it (:func:`ptycho.solvers.problem.warm_start`:
the rest at its median amplitude) and scaled to predict the measured total count
(networks learn the amplitude up to a factor; :meth:`Solver.rescaled` does the same), so
that the misfit of the networks and of the solver are the same number of the same thing.

The other measure that needs no truth is how far two independent halves of the scan
agree (half-scan FRC, :func:`ptycho.analysis.metrics.half_scan`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def object_misfit(problem, obj: np.ndarray, *, rescale: bool = True) -> float:
    """The misfit of a whole object (``problem.shape``) with ``problem``'s counts; with
    ``rescale``, after the real factor that makes it predict the measured total count."""
    from ptycho.physics.forward import diffraction_amplitude
    from ptycho.physics.translate import extract_patches

    patches = extract_patches(np.asarray(obj, np.complex128), problem.positions, problem.n)
    lam = diffraction_amplitude(problem.probe.astype(np.complex128)[None] * patches) ** 2
    counts = problem.counts.astype(np.float64)
    if rescale:
        predicted = float(lam.sum())
        if not predicted > 0:
            return float("nan")  # dark where the probe illuminates: nothing to fit
        lam *= counts.sum() / predicted
    positive = counts[counts > 0]
    saturated = float(np.sum(positive - positive * np.log(positive + problem.eps)))
    nll = float(np.sum(lam - counts * np.log(lam + problem.eps)))
    return (nll - saturated) / counts.size


def data_misfit(ds, images: Sequence[np.ndarray]) -> list[float]:
    """Per object of ``ds``, the misfit of its stitched reconstruction ``images[m]`` (the
    scanned region, as ``ptycho stitch`` writes it); ValueError if one does not fit."""
    from ptycho.solvers.problem import problems, warm_start

    probs = problems(ds)
    if len(images) != len(probs):
        raise ValueError(f"{len(images)} stitched image(s) for the {len(probs)} object(s) of the data")
    return [object_misfit(p, warm_start(p, np.asarray(image))) for p, image in zip(probs, images, strict=True)]
