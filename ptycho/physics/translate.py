"""Sub-pixel translation, patch extraction and reassembly (NumPy reference).

Convention, the one every module shares: ``translate(img, t)`` moves content by
``+t = [dx, dy]``, i.e. ``out(q) = in(q - t)``, bilinear, zero outside. A single bright
pixel translated by (+2, +1) lands 2 columns right and 1 row down.

Extraction of patch k from a group canvas is ``centre_crop(translate(canvas, +offset_k))``
and reassembly is ``translate(pad(patch_k), -offset_k)``: exact inverses for integer
offsets. The TensorFlow implementations in ``ptycho.physics.translate_tf`` follow this module
and are tested against it.
"""

from __future__ import annotations

import numpy as np


def translate(img: np.ndarray, shift: np.ndarray | tuple[float, float]) -> np.ndarray:
    """Translate the last two axes (rows, cols) of ``img`` by ``shift = [dx, dy]``.

    ``img`` may be real or complex, of shape ``(..., H, W)``; ``shift`` is ``(2,)`` or
    broadcastable to ``img.shape[:-2] + (2,)``.
    """
    img = np.asarray(img)
    shift = np.asarray(shift, dtype=np.float64)
    h, w = img.shape[-2:]
    lead = img.shape[:-2]
    flat = img.reshape((-1, h, w))
    shifts = np.broadcast_to(shift, lead + (2,)).reshape((-1, 2))
    out = np.empty_like(flat)
    rows = np.arange(h, dtype=np.float64)
    cols = np.arange(w, dtype=np.float64)
    for i, (dx, dy) in enumerate(shifts):
        out[i] = _bilinear_sample(flat[i], rows - dy, cols - dx)
    return out.reshape(img.shape)


def _bilinear_sample(img: np.ndarray, src_rows: np.ndarray, src_cols: np.ndarray) -> np.ndarray:
    """``img`` sampled at the outer grid ``src_rows x src_cols``, zero outside."""
    h, w = img.shape
    r0 = np.floor(src_rows).astype(np.int64)
    c0 = np.floor(src_cols).astype(np.int64)
    fr = (src_rows - r0)[:, None]
    fc = (src_cols - c0)[None, :]

    def take(r: np.ndarray, c: np.ndarray) -> np.ndarray:
        valid = ((r >= 0) & (r < h))[:, None] & ((c >= 0) & (c < w))[None, :]
        vals = img[np.clip(r, 0, h - 1)[:, None], np.clip(c, 0, w - 1)[None, :]]
        return np.where(valid, vals, 0)

    return (
        take(r0, c0) * (1 - fr) * (1 - fc)
        + take(r0, c0 + 1) * (1 - fr) * fc
        + take(r0 + 1, c0) * fr * (1 - fc)
        + take(r0 + 1, c0 + 1) * fr * fc
    ).astype(img.dtype, copy=False)


def centre_crop(img: np.ndarray, n: int) -> np.ndarray:
    """Central ``n x n`` window of the last two axes (centre index ``size // 2`` kept)."""
    h, w = img.shape[-2:]
    r, c = h // 2 - n // 2, w // 2 - n // 2
    return img[..., r : r + n, c : c + n]


def extract_patches(obj: np.ndarray, positions: np.ndarray, n: int) -> np.ndarray:
    """Patches of side ``n`` centred on ``positions`` ``[x, y]`` of ``obj``, shape (K, n, n).

    Integer positions are exact slices. A sub-pixel position ``p = ip + f`` takes the
    slice at ``ip`` (with a one-pixel margin) and applies ``translate(window, -f)``,
    which brings object point ``p`` to the patch centre. Raises ``ValueError`` if a
    patch would leave the object.
    """
    pos = np.asarray(positions, dtype=np.float64).reshape(-1, 2)
    ipos = np.rint(pos).astype(np.int64)
    frac = pos - ipos
    h, w = obj.shape
    m = n + 2  # one-pixel margin each side for bilinear interpolation
    x0 = ipos[:, 0] - m // 2
    y0 = ipos[:, 1] - m // 2
    subpixel = np.any(frac != 0, axis=1)
    margin = np.where(subpixel, 0, 1)  # integer positions may touch the object edge
    if (x0 + margin < 0).any() or (y0 + margin < 0).any() or (x0 + m - margin > w).any() or (y0 + m - margin > h).any():
        raise ValueError("a patch extends beyond the object")
    padded = np.pad(obj, 1)
    out = np.empty((len(pos), n, n), dtype=obj.dtype)
    for k in range(len(pos)):
        window = padded[y0[k] + 1 : y0[k] + 1 + m, x0[k] + 1 : x0[k] + 1 + m]
        if subpixel[k]:
            window = translate(window, -frac[k])
        out[k] = centre_crop(window, n)
    return out
