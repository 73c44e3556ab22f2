"""A training's validation curve read through its readings' noise.

Each reading of the validation loss is the loss of the weights that one minibatch step
left: on the default PINN (Intel AMX, bf16, 7 seeds; docs/report.md) the readings scatter
about 3 % (sd of log excess) around the curve they follow, reading to reading, with no
memory (lag-one autocorrelation near 0), while a pair's curves differ by a persistent
1.5 %. Where the curve is flat (near the study's target the excess falls as steps^-0.2)
a 3 % dip is 15 % in steps: the first raw reading under a target is set by the dip more
than by the curve, and a final raw reading by where the last step left the weights. So time to quality and convergence
read the curve, not one reading: every reading after the first step is replaced by a
least-squares line of loss against log step through the readings within a factor
:data:`WINDOW` of its step, taken at its step (a local linear fit, as LOWESS without its
weights: unbiased where the curve is straight in log step over the window, which a power
law's is to 0.1 % of the excess at b = 0.2; at the last reading, a one-sided fit that
keeps the trend instead of flattening it as a mean of the last readings would).
docs/report.md, "The curve, not one reading", has the measurement.

A reading with fewer than three readings in its window (a short training's first
readings) is kept as read; so is an older record's curve of the epochs' ends alone (its
readers decide: a few readings an epoch apart would average the curve's bend, not its
noise). The loss, not its excess: a floor is a constant, and the Poisson likelihood's loss
is negative.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ptycho.study.stats import line

#: The readings a reading is read through lie between its step over this and its step times this.
WINDOW = 1.25
#: Fewer readings than this in the window: the reading is kept as it is.
MIN_READINGS = 3


def read_through(points: Sequence[tuple[float, float]], window: float = WINDOW) -> list[tuple[float, float]]:
    """``points`` ((step, loss), in order of step) with each loss after step 0 replaced by
    the local linear fit described in the module's docstring; step 0 (before training)
    is kept as read."""
    logs = [(math.log(s), v) for s, v in points if s > 0]
    span = math.log(window)
    out = []
    for step, loss in points:
        if step <= 0:
            out.append((step, loss))
            continue
        x0 = math.log(step)
        near = [(x - x0, v) for x, v in logs if abs(x - x0) <= span + 1e-12]
        out.append((step, line([x for x, _ in near], [v for _, v in near])[0] if len(near) >= MIN_READINGS else loss))
    return out
