"""Accelerated preconditioned gradient descent on the Poisson likelihood over the object.

The conventional reconstruction the networks are judged against (docs/architecture.md,
"The conventional solver"): the probe and positions are known,
the object ``O`` (complex, the dataset's full ``S x S``) is the unknown, and the update
is nothing but the physics head and its adjoint:

    patch_k = window(O, position_k)           (translate(-frac) for sub-pixel positions)
    A_k     = fftshift(|FFT2(s P patch_k)|) / N
    L(O)    = sum_k sum_q  A^2 - n log(A^2 + eps)          (ptycho.physics.forward_tf)

One iteration is a Nesterov step on ``L``, preconditioned like the PIE family by the
illumination ``I(r) = sum_k |s P(r - r_k)|^2``::

    look  = O + m v
    delta = -step / (4 I + floor) * grad L(look)
    v     = m v + delta ;  O = O + v

The ``4 I`` is the curvature of ``L`` along the object at the solution (``d^2/da^2`` of
``a^2 - n log a^2`` is 4 at ``a^2 = n``, times ``s^2 |P|^2`` summed over the patterns
that see a pixel), so ``step = 1`` is accelerated gradient descent's textbook ``1/L``
(twice that diverged on the default data). The momentum restarts (``v = 0``) whenever
``L`` rises (O'Donoghue and Candes 2015), which keeps a bad start from oscillating.
The solver stops when a step would change the object by less than ``tolerance``
(relative, in the L2 norm), without applying it, or after ``iterations`` steps: a start
that is already the solution takes zero iterations.

**Probe refinement** (:meth:`Solver.refine`, for measured data, whose probe is only an
estimate): the probe ``P`` becomes a second unknown of the same likelihood, stepped
jointly with the object, preconditioned by the object's power the way the object is
by the probe's, ``step_P / (4 sum_k |O_k|^2 + floor)``, after :data:`PROBE_START`
iterations of the object alone (a flat object explains nothing yet, and a probe
stepped against it would take up the object's structure). The data fix only the
product ``P O_k``: ``(c P, O / c)`` fits them as well for any complex ``c``. So after
every step the pair is put back into one gauge: the probe keeps its starting total
power and its phase at its overlap with the starting probe, and the object carries the
global scale and phase (which the scores remove: amplitude scale, phase offset and
ramp, docs/physics.md). A shift of the probe against the object is the other such
freedom; the overlap phase pins it only loosely, and nothing here re-centres the probe.

The whole iteration runs under one XLA mode (:mod:`ptycho.nets.xla`): ``off`` as a
TensorFlow graph with the reference translation, ``jit`` as one compiled function,
``auto`` auto-clustered, ``physics`` with the likelihood and its gradient compiled (in
a solver that is all of the work but the momentum arithmetic).
"""

from __future__ import annotations

import time
from functools import cached_property

import numpy as np

from ptycho.solvers.engines import Iteration, IterativeSolver, SolverConfig
from ptycho.solvers.problem import Problem, flat_start, illumination

#: Iterations of the object alone before :meth:`Solver.refine` moves the probe too.
PROBE_START = 10
#: The probe's step, a fraction of its textbook ``1/(4 sum_k |O_k|^2)``: a joint step of
#: both factors at 1 each doubles the curvature along ``(O, P) -> (O, P)(1 + e)``.
PROBE_STEP = 0.5


class Solver(IterativeSolver):
    """The solver for one :class:`Problem` under one XLA mode.

    ``iterate`` is a generator (one iteration per ``next``), so that a caller can
    advance several modes in lockstep and time them under the same conditions.
    """

    def __init__(self, problem: Problem, mode: str, cfg: SolverConfig | None = None):
        from ptycho.nets.xla import compile_physics, compile_step, parse_mode
        from ptycho.runtime import import_tensorflow

        tf = import_tensorflow()
        self.problem, self.mode, self.cfg = problem, parse_mode(mode, key=None), cfg or SolverConfig()
        self._tf = tf
        n = problem.n
        corner, frac = problem.windows
        width = problem.shape[1] + 2  # the object is padded by one pixel for sub-pixel windows
        win = n + 2 if problem.subpixel else n
        start = corner + 1 - (win - n) // 2  # window corner in padded coordinates
        r = np.arange(win)
        index = (start[:, 1, None, None] + r[None, :, None]) * width + (start[:, 0, None, None] + r[None, None, :])
        self._index = tf.constant(index.astype(np.int32))
        self._frac = tf.constant(-frac) if problem.subpixel else None
        counts = problem.counts.astype(np.float64)
        self._counts = tf.constant(counts[..., None])
        self._probe = tf.constant(problem.probe.astype(np.complex64))
        illum = illumination(problem)
        pre = self.cfg.step / (4.0 * illum + self.cfg.floor * 4.0 * illum.max())
        self._pre = tf.constant(pre.astype(np.float32))
        positive = counts[counts > 0]
        # The NLL of the saturated model (rate = counts): subtracted so that the misfit
        # reads ~0.5 per pixel at the noise level instead of a large negative number.
        self._saturated = float(np.sum(positive - positive * np.log(positive + problem.eps)))
        self._pixels = counts.size
        self._value_and_grad = compile_physics(self._nll_and_gradient, mode, name="solver's likelihood")
        self._step = compile_step(self._update, mode, name="solver iteration")  # traced once, or Retraced

    # -- the physics: the same forward model and likelihood the PINN trains with ----
    def _patches(self, obj):
        from ptycho.nets.xla import xla_translation
        from ptycho.physics.forward_tf import crop_centre
        from ptycho.physics.translate_tf import translate

        tf = self._tf
        flat = tf.reshape(tf.pad(obj, [[1, 1], [1, 1]]), [-1])
        patches = tf.gather(flat, self._index)[..., None]  # (P, w, w, 1)
        if self._frac is not None:
            patches = crop_centre(translate(patches, self._frac, xla=xla_translation(self.mode)), self.problem.n)
        return patches

    def _exit_waves(self, obj, probe=None):
        probe = self._probe if probe is None else probe
        return self._patches(obj) * probe[None, :, :, None]

    def _nll(self, obj, probe=None):
        from ptycho.physics.forward_tf import diffraction_amplitude, poisson_nll

        tf = self._tf
        amp = tf.cast(diffraction_amplitude(self._exit_waves(obj, probe)), tf.float64)  # float64: the sum spans 1e13
        return tf.reduce_sum(poisson_nll(amp, self._counts, self.problem.eps))

    def _nll_and_gradient(self, obj):
        tf = self._tf
        with tf.GradientTape() as tape:
            tape.watch(obj)
            nll = self._nll(obj)
        return nll, tape.gradient(nll, obj)

    def _update(self, obj, velocity, previous):
        tf = self._tf
        m = tf.constant(self.cfg.momentum, tf.complex64)
        nll, grad = self._value_and_grad(obj + m * velocity)
        candidate = m * velocity - tf.cast(self._pre, tf.complex64) * grad
        step_norm = tf.norm(tf.abs(candidate)) / tf.maximum(tf.norm(tf.abs(obj)), 1e-30)
        # Restart: when the likelihood rose, the momentum is dropped and the object kept;
        # the next step is then a plain gradient step from it, accepted unconditionally.
        restart = nll > previous
        velocity = tf.where(restart, tf.zeros_like(candidate), candidate)
        previous = tf.where(restart, tf.constant(np.inf, tf.float64), nll)
        return obj + velocity, velocity, nll, previous, tf.cast(step_norm, tf.float64), restart

    # -- the probe as a second unknown (refine) ------------------------------------------
    @cached_property
    def _joint_value_and_gradients(self):
        from ptycho.nets.xla import compile_physics

        return compile_physics(self._joint_nll_and_gradients, self.mode, name="solver's likelihood, probe too")

    @cached_property
    def _joint_step(self):
        """The iteration with the probe too: compiled on a refinement's first step, once."""
        from ptycho.nets.xla import compile_step

        return compile_step(self._joint_update, self.mode, name="solver iteration, probe too")

    def _joint_nll_and_gradients(self, obj, probe):
        tf = self._tf
        with tf.GradientTape() as tape:
            tape.watch([obj, probe])
            patches = self._patches(obj)
            nll = self._nll(obj, probe)
        grad_obj, grad_probe = tape.gradient(nll, [obj, probe])
        # The probe's curvature: the object's power over the patterns (as the object's is the probe's).
        power = tf.reduce_sum(tf.square(tf.abs(patches[..., 0])), axis=0)
        return nll, grad_obj, grad_probe, power

    def _illumination(self, probe):
        """``I(r)`` of ``probe`` on the padded object grid, as a flat vector (the windows' scatter)."""
        tf = self._tf
        win = int(self._index.shape[-1])
        pad = (win - self.problem.n) // 2
        power = tf.pad(tf.square(tf.abs(probe)), [[pad, win - self.problem.n - pad]] * 2)
        tiles = tf.broadcast_to(power[None], self._index.shape)
        size = (self.problem.shape[0] + 2) * (self.problem.shape[1] + 2)
        return tf.math.unsorted_segment_sum(tf.reshape(tiles, [-1]), tf.reshape(self._index, [-1]), size)

    def _joint_update(self, obj, probe, v_obj, v_probe, previous, rate):
        tf = self._tf
        m = tf.constant(self.cfg.momentum, tf.complex64)
        look_obj, look_probe = obj + m * v_obj, probe + m * v_probe
        nll, g_obj, g_probe, power = self._joint_value_and_gradients(look_obj, look_probe)
        h, w = self.problem.shape
        illum = tf.reshape(self._illumination(look_probe), [h + 2, w + 2])[1:-1, 1:-1]
        pre_obj = self.cfg.step / (4.0 * illum + self.cfg.floor * 4.0 * tf.reduce_max(illum))
        pre_probe = rate * PROBE_STEP / (4.0 * power + self.cfg.floor * 4.0 * tf.reduce_max(power))
        c_obj = m * v_obj - tf.cast(pre_obj, tf.complex64) * g_obj
        c_probe = m * v_probe - tf.cast(pre_probe, tf.complex64) * g_probe
        step_norm = tf.norm(tf.abs(c_obj)) / tf.maximum(tf.norm(tf.abs(obj)), 1e-30)
        restart = nll > previous
        v_obj = tf.where(restart, tf.zeros_like(c_obj), c_obj)
        v_probe = tf.where(restart, tf.zeros_like(c_probe), c_probe)
        previous = tf.where(restart, tf.constant(np.inf, tf.float64), nll)
        obj, probe = obj + v_obj, probe + v_probe
        # The gauge: the probe keeps the start's power and its phase at the overlap with it.
        overlap = tf.reduce_sum(tf.math.conj(self._probe) * probe)
        scale = tf.sqrt(tf.reduce_sum(tf.square(tf.abs(self._probe))) / tf.reduce_sum(tf.square(tf.abs(probe))))
        g = tf.cast(scale, tf.complex64) * tf.math.conj(overlap) / tf.cast(tf.abs(overlap), tf.complex64)
        return obj / g, probe * g, v_obj / g, v_probe * g, nll, previous, tf.cast(step_norm, tf.float64), restart

    def refine(self, start: np.ndarray | None = None, iterations: int | None = None, probe_start: int = PROBE_START):
        """Object and probe together from ``start`` (default :func:`flat_start`) and the
        problem's probe: like :meth:`iterate`, one :class:`Iteration` per step (with its
        ``probe``), the probe still for the first ``probe_start`` steps. Stops at the
        tolerance (on the object's step, once the probe moves) or the budget; returns
        why."""
        tf = self._tf
        budget = self.cfg.iterations if iterations is None else iterations
        obj = tf.constant(flat_start(self.problem) if start is None else start, tf.complex64)
        probe = self._probe
        v_obj, v_probe = tf.zeros_like(obj), tf.zeros_like(probe)
        previous = tf.constant(np.inf, tf.float64)
        for number in range(1, budget + 1):
            moving = number > probe_start
            rate = tf.constant(1.0 if moving else 0.0, tf.float32)
            t0 = time.perf_counter()
            out = self._joint_step(obj, probe, v_obj, v_probe, previous, rate)
            relative = float(out[6])
            seconds = time.perf_counter() - t0
            if moving and relative < self.cfg.tolerance and not bool(out[7]):
                return "tolerance"
            obj, probe, v_obj, v_probe, nll, previous = out[:6]
            misfit = (float(nll) - self._saturated) / self._pixels
            yield Iteration(number, misfit, relative, seconds, bool(out[7]), obj, probe)
        return "budget"

    # -- driving ---------------------------------------------------------------------
    def misfit(self, obj, probe=None) -> float:
        """NLL per measured pixel above the saturated model's (~0.5 at the noise level);
        with ``probe`` (scale included), under that probe instead of the problem's."""
        tf = self._tf
        probe = None if probe is None else tf.constant(probe, tf.complex64)
        return (float(self._nll(tf.constant(obj, tf.complex64), probe)) - self._saturated) / self._pixels

    def rescaled(self, obj: np.ndarray) -> np.ndarray:
        """``obj`` times the real factor that makes it predict the measured total count."""
        tf = self._tf
        # Parseval: the far field's total intensity is the exit waves' (the FFT is unitary).
        predicted = float(tf.reduce_sum(tf.square(tf.abs(self._exit_waves(tf.constant(obj, tf.complex64))))))
        measured = float(np.sum(self.problem.counts, dtype=np.float64))
        if not predicted > 0:
            raise ValueError("the start predicts no photons at all (zero where the probe illuminates)")
        return (obj * np.sqrt(measured / predicted)).astype(np.complex64)

    def compile(self) -> float:
        """Trace and compile the iteration (seconds); the iterate is not changed."""
        tf = self._tf
        obj = tf.ones(self.problem.shape, tf.complex64)
        t0 = time.perf_counter()
        out = self._step(obj, tf.zeros_like(obj), tf.constant(np.inf, tf.float64))
        float(out[4])
        return time.perf_counter() - t0

    def iterate(self, start: np.ndarray | None = None, iterations: int | None = None):
        """Run from ``start`` (default :func:`flat_start`), yielding each applied
        :class:`Iteration`; the generator's return value says why it ended:
        ``"tolerance"`` or ``"budget"``. Several generators of one solver may run
        interleaved (each holds its own iterate)."""
        tf = self._tf
        budget = self.cfg.iterations if iterations is None else iterations
        obj = tf.constant(flat_start(self.problem) if start is None else start, tf.complex64)
        velocity = tf.zeros_like(obj)
        previous = tf.constant(np.inf, tf.float64)
        for number in range(1, budget + 1):
            t0 = time.perf_counter()
            new, velocity_new, nll, previous_new, step_norm, restart = self._step(obj, velocity, previous)
            relative = float(step_norm)  # fetching it waits for the step
            seconds = time.perf_counter() - t0
            if relative < self.cfg.tolerance and not bool(restart):
                return "tolerance"
            obj, velocity, previous = new, velocity_new, previous_new
            misfit = (float(nll) - self._saturated) / self._pixels
            yield Iteration(number, misfit, relative, seconds, bool(restart), obj)
        return "budget"

    def trace_count(self) -> int:
        """How many times the iteration was traced (once: a second trace raises Retraced)."""
        return self._step.experimental_get_tracing_count()
