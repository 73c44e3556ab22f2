"""The model and its compiled steps for one (model, XLA mode) pair."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ptycho.nets.models import ModelConfig, method_of

if TYPE_CHECKING:
    from ptycho.nets.train import TrainConfig


class Trainer:
    """Builds the model and its compiled steps for one (model, XLA mode) pair.

    The step is split the way the modes need it (:mod:`ptycho.nets.xla`): the network's
    forward pass, then :meth:`physics_loss` (physics head and loss) on its output. The
    ``physics`` mode compiles only the latter; ``jit`` and ``auto`` the whole step. Each
    compiled function may be traced once (:func:`ptycho.nets.xla.compile_step`): a
    retrace raises :class:`~ptycho.nets.xla.Retraced`.
    """

    def __init__(
        self,
        model_cfg: ModelConfig,
        train_cfg: TrainConfig,
        n: int,
        channels: int,
        probe: np.ndarray,
        physics: dict,
        steps_per_epoch: int = 0,
    ):
        import keras
        import tensorflow as tf

        from ptycho.nets.models import build_network
        from ptycho.nets.precision import PRECISIONS
        from ptycho.nets.xla import compile_physics, compile_step

        keras.utils.set_random_seed(train_cfg.seed)
        self.model_cfg, self.train_cfg = model_cfg, train_cfg
        self.n, self.channels = n, channels
        self.network = build_network(
            n,
            channels,
            channels,
            model_cfg.filters,
            model_cfg.pooling,
            train_cfg.seed,
            depth=model_cfg.depth,
            mixing=model_cfg.mixing,
            precision=train_cfg.precision,
        )
        self.probe = tf.constant(probe.astype(np.complex64))
        self.canvas_pad = int(physics.get("canvas_pad", n // 4))
        self.log_scale = tf.Variable(
            physics.get("log_scale", 0.0),
            dtype=tf.float32,
            name="log_scale",
            trainable=method_of(model_cfg.kind).physics and model_cfg.trainable_scale,
        )
        # The schedule (warm-up, decay) reads the optimiser's own step count, so a resumed
        # training continues it where it stopped.
        rate = train_cfg.learning_rate_at(steps_per_epoch) if steps_per_epoch else train_cfg.learning_rate
        self.optimizer = keras.optimizers.Adam(rate)
        if PRECISIONS[train_cfg.precision].loss_scaled:  # float16 gradients underflow without it
            self.optimizer = keras.optimizers.LossScaleOptimizer(self.optimizer)
        # Create the optimizer's slots now: variables created inside the first trace
        # make tf.function trace a second time.
        self.optimizer.build(self.variables)
        self.mode = train_cfg.xla
        self.physics_loss = compile_physics(self._physics_loss, self.mode, name="physics head")
        self.train_step = compile_step(self._train_step, self.mode, name="train step")
        self.eval_step = compile_step(self._eval_step, self.mode, name="eval step")

    @property
    def traces(self) -> dict[str, int]:
        """Times each compiled function was traced: ``eval`` may be 0 (no validation
        split), ``physics`` is 0 unless the head is compiled apart (``physics`` mode)."""
        from ptycho.nets.xla import tracing_count

        return {
            "train": tracing_count(self.train_step),
            "eval": tracing_count(self.eval_step),
            "physics": tracing_count(self.physics_loss),
        }

    @property
    def variables(self):
        v = list(self.network.trainable_variables)
        return v + [self.log_scale] if self.log_scale.trainable else v

    def loss_terms(self, x, offsets, targets, training: bool):
        """Per-sample loss ``(B,)`` for the configured model: network, then physics and loss."""
        amp, phase = self.network(x, training=training)
        return self.physics_loss(amp, phase, offsets, targets)

    def _physics_loss(self, amp, phase, offsets, targets):
        """Per-sample loss ``(B,)`` from the network's output: the PINN's physics head
        (object canvas, translation, probe, FFT, amplitude) and its loss, or the
        baseline's MAE against the true patches. Its own XLA function in ``physics`` mode."""
        import tensorflow as tf

        if not method_of(self.model_cfg.kind).physics:
            d = phase - targets["phase"]
            if self.model_cfg.baseline_phase == "relative":
                # A constant phase of the patch leaves its diffraction unchanged: do not ask
                # the network for it. Remove the amplitude-weighted circular mean of the
                # error, then wrap (the offset may take the error across +-pi).
                w = targets["amp"]
                c = tf.math.atan2(
                    tf.reduce_sum(w * tf.sin(d), axis=[1, 2, 3], keepdims=True),
                    tf.reduce_sum(w * tf.cos(d), axis=[1, 2, 3], keepdims=True),
                )
                d = tf.math.atan2(tf.sin(d - c), tf.cos(d - c))
            return tf.reduce_mean(tf.abs(amp - targets["amp"]) + tf.abs(d), axis=[1, 2, 3])
        return self.data_loss(self.head_amplitude(amp, phase, offsets), targets["counts"])

    def head_amplitude(self, amp, phase, offsets):
        """The PINN's physics head: the network's amplitude and phase ``(B, N/2, N/2, C)``
        to far-field amplitudes ``(B, N, N, C)``, at the head's (trainable) scale."""
        from ptycho.nets.models import to_complex
        from ptycho.nets.xla import xla_translation
        from ptycho.physics.forward_tf import predicted_amplitude

        return predicted_amplitude(
            to_complex(amp, phase),
            offsets,
            self.probe,
            self.log_scale,
            xla=xla_translation(self.mode),
            canvas_pad=self.canvas_pad,
        )

    def data_loss(self, pred, counts):
        """The PINN's per-sample loss ``(B,)`` of predicted far-field amplitudes against the
        measured (normalised) counts: MAE on amplitudes, or the Poisson negative
        log-likelihood. Also the loss of the saturated model (``pred = sqrt(counts)``), the
        floor without a ground truth (:func:`ptycho.nets.bounds.loss_bounds`)."""
        import tensorflow as tf

        from ptycho.physics.forward_tf import poisson_nll

        if self.model_cfg.loss == "mae":
            return tf.reduce_mean(tf.abs(pred - tf.sqrt(counts)), axis=[1, 2, 3])
        return tf.reduce_mean(poisson_nll(pred, counts, self.model_cfg.poisson_eps), axis=[1, 2, 3])

    def _train_step(self, x, offsets, targets):
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(self.loss_terms(x, offsets, targets, training=True))
            scaled = self.optimizer.scale_loss(loss)  # the loss itself unless loss-scaled (float16)
        grads = tape.gradient(scaled, self.variables)
        self.optimizer.apply(grads, self.variables)  # unscales, and skips a step with non-finite gradients
        return loss

    def _eval_step(self, x, offsets, targets, mask):
        import tensorflow as tf

        per = self.loss_terms(x, offsets, targets, training=False)
        return tf.reduce_sum(per * mask), tf.reduce_sum(mask)
