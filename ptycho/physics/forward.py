"""Far-field forward model and photon statistics (NumPy).

    psi = s * P * O_patch
    A   = fftshift(|FFT2(psi)|) / N        (orthonormal: sum A^2 = sum |psi|^2, Parseval)
    counts ~ Poisson(A^2)

``s`` is chosen so that the mean total expected count per pattern equals ``nphotons``
(:func:`scale_for_photons`). The TensorFlow model (``ptycho.physics.forward_tf``) implements the
same equations and is tested against :func:`diffraction_amplitude`.
"""

from __future__ import annotations

import numpy as np


def diffraction_amplitude(exit_wave: np.ndarray) -> np.ndarray:
    """Far-field amplitude ``fftshift(|FFT2(psi)|) / N`` over the last two axes.

    Orthonormal: ``sum(A**2) == sum(|psi|**2)`` per pattern. The zero frequency sits at
    index ``N // 2`` (fftshift), matching the centre convention of the real-space arrays.
    """
    spectrum = np.fft.fft2(exit_wave, norm="ortho")
    return np.fft.fftshift(np.abs(spectrum), axes=(-2, -1))


def exit_waves(probe: np.ndarray, patches: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """``s * P * O_patch`` for a stack of object patches ``(K, N, N)``."""
    return scale * probe[None, :, :] * patches


def scale_for_photons(probe: np.ndarray, patches: np.ndarray, nphotons: float) -> float:
    """Scale ``s`` such that ``mean_k sum |s P O_k|^2 = nphotons``."""
    energy = np.mean(np.sum(np.abs(probe[None] * patches) ** 2, axis=(-2, -1)))
    if not energy > 0:
        raise ValueError("the illuminated patches carry no energy (zero object or probe)")
    return float(np.sqrt(nphotons / energy))


def expected_counts(probe: np.ndarray, patches: np.ndarray, scale: float) -> np.ndarray:
    """Noise-free intensity ``A^2`` in photons for each patch, float64 ``(K, N, N)``."""
    return diffraction_amplitude(exit_waves(probe, patches, scale)) ** 2


def poisson_counts(expected: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Photon counts drawn from ``Poisson(expected)``, as exact ``uint32`` integers."""
    if expected.max(initial=0.0) >= 2**32 / 2:
        raise ValueError("expected counts exceed the uint32 range; lower nphotons")
    return rng.poisson(expected).astype(np.uint32)
