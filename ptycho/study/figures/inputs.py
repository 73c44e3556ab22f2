"""The small readers the drawing modules use: :func:`floats` and :func:`number` turn
JSON numbers (``null`` = NaN) into what they plot. What the figures draw is read by
:class:`ptycho.study.results.StudyResults`, the study's one reader of its outputs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def floats(values: Any, what: str) -> np.ndarray:
    """1-D float array (JSON ``null`` -> NaN); ``None`` -> empty; ValueError naming ``what``."""
    if values is None:
        return np.zeros(0)
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected a sequence of numbers, got {type(values).__name__}") from None
    if arr.ndim > 1:
        raise ValueError(f"{what}: expected a 1-D sequence, got shape {arr.shape}")
    return arr.reshape(-1)


def number(value: Any, what: str) -> float:
    """A float (JSON ``null`` -> NaN); ValueError naming ``what``."""
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected a number, got {value!r}") from None
