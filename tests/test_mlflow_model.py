"""The logged model's input checks (ptycho.study.mlflow_model): what would change or blank
every reconstruction of a batch is refused in one line. Its predictions against ``ptycho
infer`` are checked end to end in tests/test_pipeline.py."""

from __future__ import annotations

import numpy as np
import pytest

from ptycho.study.mlflow_model import checked_counts


def test_finite_non_negative_counts_pass_as_float32():
    counts = checked_counts(np.arange(8, dtype=np.uint32).reshape(2, 2, 2, 1))
    assert counts.dtype == np.float32 and counts.shape == (2, 2, 2, 1)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (np.inf, "model_input holds 1 values that are not finite (NaN or inf); give photon counts"),
        (np.nan, "model_input holds 1 values that are not finite (NaN or inf); give photon counts"),
        (-2.0, "model_input holds 1 negative values (lowest -2); give photon counts, which are never negative"),
    ],
)
def test_a_pixel_that_is_not_a_count_is_refused_in_one_line(value, message):
    """One inf pixel moved the other 24 reconstructions of its batch by up to 3.9 % (the
    batch's mean normalises them all); a NaN made every one NaN, without an error."""
    counts = np.ones((25, 4, 4, 4), np.float32)
    counts[3, 1, 1, 0] = value
    with pytest.raises(ValueError) as err:
        checked_counts(counts)
    assert str(err.value) == message
