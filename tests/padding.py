"""Zero-padding that keeps the centre pixel, for tests that place a patch by hand."""

import numpy as np


def pad_to(img: np.ndarray, m: int) -> np.ndarray:
    """Zero-pad the last two axes to ``m x m`` keeping the centre pixel at ``m // 2``."""
    h, w = img.shape[-2:]
    top, left = m // 2 - h // 2, m // 2 - w // 2
    pad = [(0, 0)] * (img.ndim - 2) + [(top, m - h - top), (left, m - w - left)]
    return np.pad(img, pad)
