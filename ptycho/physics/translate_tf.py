"""TensorFlow translation: an XLA-safe implementation and an independent reference.

Both follow ``ptycho.physics.translate``: ``out(q) = in(q - t)`` for ``t = [dx, dy]``,
bilinear, zero fill. Images are NHWC ``(B, H, W, C)``, real or complex (complex is split
into real and imaginary parts, translated, recombined); shifts are ``(B, 2)``.

* :func:`translate_xla` compiles under ``jit_compile=True``: static shapes, separable
  bilinear interpolation by ``tf.gather`` along rows then columns. Indices are clamped
  *and* masked explicitly, because XLA's gather silently clamps out-of-range indices
  (which would smear border pixels instead of filling zeros).
* :func:`translate_reference` uses ``tf.raw_ops.ImageProjectiveTransformV3``, which XLA
  cannot compile; it is the ``off`` mode's translation, so ``off`` and the XLA modes run
  genuinely different code.

:func:`translate` picks one: ``xla=True`` for every XLA mode (``ptycho.nets.xla.xla_translation``).
"""

from __future__ import annotations


def _split_complex(fn):
    """Apply a real-valued image op to complex inputs via their real and imaginary parts."""

    def wrapped(images, shifts):
        import tensorflow as tf

        if images.dtype.is_complex:
            c = images.shape[-1]
            parts = tf.concat([tf.math.real(images), tf.math.imag(images)], axis=-1)
            out = fn(parts, shifts)
            return tf.complex(out[..., :c], out[..., c:])
        return fn(images, shifts)

    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    return wrapped


def _interp_axis(images, coords, axis: int):
    """Linear interpolation of ``images`` along ``axis`` (1 = rows, 2 = cols) at ``coords``.

    ``coords`` (B, L) are source positions along that axis for each output index;
    samples outside ``[0, L-1]`` read as zero.
    """
    import tensorflow as tf

    length = images.shape[axis]
    dtype = images.dtype
    lo = tf.floor(coords)
    frac = coords - lo
    lo = tf.cast(lo, tf.int32)
    hi = lo + 1

    def take(idx):
        valid = tf.cast((idx >= 0) & (idx < length), dtype)
        vals = tf.gather(images, tf.clip_by_value(idx, 0, length - 1), axis=axis, batch_dims=1)
        shape = [-1, length, 1, 1] if axis == 1 else [-1, 1, length, 1]
        return vals, tf.reshape(valid, shape)

    v_lo, m_lo = take(lo)
    v_hi, m_hi = take(hi)
    shape = [-1, length, 1, 1] if axis == 1 else [-1, 1, length, 1]
    w_hi = tf.reshape(frac, shape)
    return v_lo * m_lo * (1 - w_hi) + v_hi * m_hi * w_hi


@_split_complex
def translate_xla(images, shifts):
    """XLA-compilable bilinear translation of NHWC ``images`` by ``shifts`` ``[dx, dy]``."""
    import tensorflow as tf

    dtype = images.dtype
    shifts = tf.cast(shifts, dtype)
    h, w = images.shape[1], images.shape[2]
    rows = tf.range(h, dtype=dtype)[None, :] - shifts[:, 1:2]  # (B, H) source rows
    cols = tf.range(w, dtype=dtype)[None, :] - shifts[:, 0:1]  # (B, W) source cols
    out = _interp_axis(images, rows, axis=1)
    return _interp_axis(out, cols, axis=2)


@_split_complex
def translate_reference(images, shifts):
    """Reference translation by ``ImageProjectiveTransformV3`` (not XLA-compilable)."""
    import tensorflow as tf

    shifts = tf.cast(shifts, tf.float32)
    b = tf.shape(images)[0]
    one, zero = tf.ones([b], tf.float32), tf.zeros([b], tf.float32)
    # Output pixel (x, y) samples input (x - dx, y - dy).
    transforms = tf.stack([one, zero, -shifts[:, 0], zero, one, -shifts[:, 1], zero, zero], axis=1)
    # The op takes float32 transforms whatever the image dtype; float64 images keep
    # float64 values but their sampling positions carry float32 rounding (~1e-6 px).
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=images,
        transforms=transforms,
        output_shape=tf.shape(images)[1:3],
        fill_value=tf.constant(0.0, tf.float32),
        interpolation="BILINEAR",
        fill_mode="CONSTANT",
    )


def translate(images, shifts, *, xla: bool):
    """Translate with the implementation of the chosen arm (``xla=True``: gather-based)."""
    return translate_xla(images, shifts) if xla else translate_reference(images, shifts)
