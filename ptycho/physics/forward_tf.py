"""TensorFlow forward model: the PINN's physics head.

Same equations and conventions as ``ptycho.physics.forward`` (tested to agree):
``A = fftshift(|FFT2(P * O)|) / N`` per pattern, patches extracted from a group canvas by
``centre_crop(translate(canvas, +offset))`` and reassembled by
``translate(pad(patch), -offset)``. Layouts: channel ``(B, N, N, C)`` for networks, flat
``(B*C, N, N, 1)`` for the physics, flat index ``k = b*C + c``.
"""

from __future__ import annotations

from ptycho.physics.translate_tf import translate


def channels_to_flat(x):
    """``(B, H, W, C)`` -> ``(B*C, H, W, 1)`` with ``k = b*C + c``."""
    import tensorflow as tf

    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    return tf.reshape(tf.transpose(x, [0, 3, 1, 2]), [-1, h, w, 1]) if c != 1 else x


def flat_to_channels(x, c: int):
    """``(B*C, H, W, 1)`` -> ``(B, H, W, C)``, inverse of :func:`channels_to_flat`."""
    import tensorflow as tf

    if c == 1:
        return x
    h, w = x.shape[1], x.shape[2]
    return tf.transpose(tf.reshape(x, [-1, c, h, w]), [0, 2, 3, 1])


def pad_centre(x, m: int):
    """Zero-pad NHWC ``x`` spatially to ``m x m`` keeping the centre pixel at ``m // 2``."""
    import tensorflow as tf

    h, w = x.shape[1], x.shape[2]
    top, left = m // 2 - h // 2, m // 2 - w // 2
    return tf.pad(x, [[0, 0], [top, m - h - top], [left, m - w - left], [0, 0]])


def crop_centre(x, n: int):
    """Central ``n x n`` of NHWC ``x`` (the centre pixel ``size // 2`` is kept)."""
    h, w = x.shape[1], x.shape[2]
    r, c = h // 2 - n // 2, w // 2 - n // 2
    return x[:, r : r + n, c : c + n, :]


def diffraction_amplitude(exit_wave):
    """``fftshift(|FFT2(psi)|) / N`` over the spatial axes of NHWC complex ``exit_wave``."""
    import tensorflow as tf

    n = exit_wave.shape[1]
    field = tf.transpose(exit_wave, [0, 3, 1, 2])  # FFT acts on the two innermost axes
    spectrum = tf.signal.fft2d(field)
    amp = tf.signal.fftshift(tf.abs(spectrum), axes=(-2, -1)) / tf.cast(n, spectrum.dtype.real_dtype)
    return tf.transpose(amp, [0, 2, 3, 1])


def reassemble(patches, offsets, canvas_size: int, *, xla: bool):
    """Merge a group's patches into one canvas: average of ``translate(pad(p_c), -offset_c)``.

    ``patches`` (B, s, s, C) complex, ``offsets`` (B, C, 2). Each canvas pixel is the mean
    of the patches that cover it (their s x s support, not the padding around it: the
    networks fill only the central N/2 of a patch, and counting the padding as zeros
    would dim the object near each patch's rim). Where no patch reaches, the canvas is
    zero. Returns ``(B, M, M, 1)`` complex.
    """
    import tensorflow as tf

    c = patches.shape[-1]
    flat = channels_to_flat(pad_centre(patches, canvas_size))
    shifts = -tf.reshape(offsets, [-1, 2])
    moved = flat_to_channels(translate(flat, shifts, xla=xla), c)
    ones = tf.ones_like(tf.math.real(patches))
    weight = flat_to_channels(translate(channels_to_flat(pad_centre(ones, canvas_size)), shifts, xla=xla), c)
    total = tf.reduce_sum(moved, axis=-1, keepdims=True)
    # The coverage depends on the offsets alone: no gradient flows through it. It is made
    # complex with tf.complex, not a cast: a backward pass through a real-to-complex Cast
    # (built even behind the stop when the head is its own compiled function, the physics
    # mode) makes TensorFlow warn on every trace that the cast's gradient discards an
    # imaginary part.
    norm = tf.stop_gradient(tf.reduce_sum(weight, axis=-1, keepdims=True))
    inverse = 1.0 / tf.maximum(norm, 1e-3)
    return total * tf.complex(inverse, tf.zeros_like(inverse))


def extract(canvas, offsets, n: int, *, xla: bool):
    """Patches ``centre_crop(translate(canvas, +offset_c), n)`` -> ``(B, n, n, C)``."""
    import tensorflow as tf

    c = offsets.shape[1]
    tiled = tf.repeat(canvas, c, axis=0)  # (B*C, M, M, 1), k = b*C + c
    moved = translate(tiled, tf.reshape(offsets, [-1, 2]), xla=xla)
    return flat_to_channels(crop_centre(moved, n), c)


def canvas_pad_for(offsets, n: int) -> int:
    """Smallest canvas padding that keeps every reassembled patch whole.

    Object patches are zero outside their central ``n/2`` (the networks fill only that),
    so translating them by ``|offset| < n/4`` stays inside the ``n x n`` frame and no
    padding is needed; larger offsets pad by the excess. Static (a Python int) because
    it fixes the canvas shape of the compiled step.
    """
    import numpy as np

    reach = float(np.ceil(np.abs(np.asarray(offsets)).max())) if np.size(offsets) else 0.0
    return int(max(0.0, reach - (n // 4 - 1)))


def predicted_amplitude(object_patches, offsets, probe, log_scale, *, xla: bool, canvas_pad: int):
    """Physics head: object patches of a group -> far-field amplitudes ``(B, N, N, C)``.

    ``object_patches`` (B, s, s, C) complex, the object on the central s x s of each
    pattern's N x N window (s <= N, the probe's size; the networks give s = N/2, zero
    beyond); the group is first reassembled on a canvas of side ``N + 2*canvas_pad`` (so
    all C patches must agree where they overlap), each pattern's patch is then extracted
    at its own offset, multiplied by ``probe`` (N, N) and propagated; ``exp(log_scale)``
    is the trainable intensity scale. The true object's patches reproduce the simulated
    amplitudes (a test checks it at 1e9 photons).
    """
    import tensorflow as tf

    n = int(probe.shape[0])
    if object_patches.shape[-1] > 1:
        canvas = reassemble(object_patches, offsets, n + 2 * canvas_pad, xla=xla)
        object_patches = extract(canvas, offsets, n, xla=xla)
    else:
        object_patches = pad_centre(object_patches, n)
    wave = object_patches * tf.cast(probe, object_patches.dtype)[None, :, :, None]
    return diffraction_amplitude(wave) * tf.cast(tf.exp(log_scale), object_patches.dtype.real_dtype)


def poisson_nll(amplitude, counts, eps: float):
    """Poisson negative log-likelihood per pixel of ``counts`` given a predicted
    ``amplitude`` (rate ``lam = amplitude**2``), without the ``log(counts!)`` constant.

    ``eps`` keeps the logarithm finite where the rate is zero (ModelConfig.poisson_eps).
    """
    import tensorflow as tf

    lam = tf.square(amplitude)
    return lam - counts * tf.math.log(lam + eps)
