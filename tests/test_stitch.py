"""Stitching: each patch at its own position, overlaps averaged, cropped to the scan region."""

from __future__ import annotations

import numpy as np
import pytest
from padding import pad_to

from ptycho.analysis.stitch import stitch, stitch_objects, synchronise_phase
from ptycho.data.dataset import Dataset, scan_region
from ptycho.physics.scan import grid_scan
from ptycho.physics.translate import centre_crop, extract_patches, translate

N = 16
#: A probe lighting the whole patch: scan_region is then the region the kept N//2 covers.
_FLAT_PROBE = np.ones((N, N))


def _random_object(size: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(0.2, 1.0, (size, size)) * np.exp(1j * rng.uniform(-np.pi, np.pi, (size, size)))


def _crop(obj: np.ndarray, region: np.ndarray) -> np.ndarray:
    x0, y0, x1, y1 = (int(v) for v in region)
    return obj[y0:y1, x0:x1]


@pytest.mark.parametrize("gridsize", [1, 2])
def test_extract_then_stitch_integer_positions_reproduces_the_object_exactly(gridsize):
    obj = _random_object(72)
    scan = grid_scan(72, N, stride=3, gridsize=gridsize, spacing=4)
    positions = scan.positions[scan.groups].reshape(-1, 2)  # flat k = g*C + c, duplicates kept
    patches = extract_patches(obj, positions, N)
    region = scan_region(positions, _FLAT_PROBE)
    image, weights = stitch(patches, positions, region, return_weights=True)
    truth = _crop(obj, region)
    assert image.shape == truth.shape
    assert np.all(weights > 0)  # the scan region is exactly the covered region
    np.testing.assert_allclose(image, truth, rtol=0, atol=1e-12)


def test_complex64_and_trailing_channel_layout_are_accepted():
    obj = _random_object(48).astype(np.complex64)
    scan = grid_scan(48, N, stride=4)
    patches = extract_patches(obj, scan.positions, N)[..., None]  # (K, N, N, 1)
    region = scan_region(scan.positions, _FLAT_PROBE)
    image = stitch(patches, scan.positions, region)
    assert image.dtype == np.complex64
    np.testing.assert_allclose(image, _crop(obj, region), rtol=0, atol=1e-6)


def test_subpixel_placement_is_translate_of_padded_patch_by_the_fraction():
    """A kept patch at p = floor(p) + f is translate(pad(kept), +f) placed at floor(p)."""
    rng = np.random.default_rng(1)
    patch = rng.normal(size=(N, N)) + 1j * rng.normal(size=(N, N))
    p = np.array([20.3, 17.8])
    n_keep = N // 2
    image, weights = stitch(patch[None], p[None], [0, 0, 40, 40], return_weights=True)

    f = p - np.floor(p)
    m = n_keep + 2  # one pixel of zero padding each side, centre index m // 2 = n_keep // 2 + 1
    v = translate(pad_to(centre_crop(patch, n_keep), m), f)
    w = translate(pad_to(np.ones((n_keep, n_keep)), m), f)
    ix, iy = np.floor(p).astype(int)
    values, expected_w = np.zeros((40, 40), complex), np.zeros((40, 40))
    values[iy - m // 2 : iy - m // 2 + m, ix - m // 2 : ix - m // 2 + m] = v
    expected_w[iy - m // 2 : iy - m // 2 + m, ix - m // 2 : ix - m // 2 + m] = w
    expected = np.divide(values, expected_w, out=np.zeros_like(values), where=expected_w > 0)
    np.testing.assert_allclose(weights, expected_w, atol=1e-12)
    np.testing.assert_allclose(image, expected, atol=1e-12)


def test_subpixel_positions_constant_object_stitches_to_the_constant_everywhere():
    rng = np.random.default_rng(2)
    value = 0.7 * np.exp(0.4j)
    positions = rng.uniform(20, 40, size=(60, 2))
    patches = np.full((60, N, N), value)
    region = scan_region(positions, _FLAT_PROBE)
    image, weights = stitch(patches, positions, region, return_weights=True)
    covered = weights > 0
    assert covered.mean() > 0.9  # random positions: a few corners of the bounding box stay empty
    np.testing.assert_allclose(image[covered], value, rtol=0, atol=1e-12)


def test_subpixel_extract_then_stitch_is_exact_for_an_affine_object_away_from_footprint_rims():
    """Bilinear interpolation is exact for affine functions, so extraction (bilinear,
    same convention) followed by stitching reproduces an affine object exactly wherever
    only full-weight footprint pixels contribute. On the one-pixel rim of a sub-pixel
    footprint a contribution is a patch sample less than 1 px away from the pixel, so the
    error there is bounded by |d/dx| + |d/dy| of the object."""
    size = 80
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    gx, gy = 0.013 - 0.007j, -0.009 + 0.011j
    obj = (0.3 + 0.2j) + gx * xx + gy * yy
    rng = np.random.default_rng(3)
    n_keep = N // 2
    centres = grid_scan(size - 4, N, stride=n_keep - 1).positions + 2  # 2 px margin for the jitter
    positions = centres + rng.uniform(-0.5, 0.5, size=centres.shape)
    patches = extract_patches(obj, positions, N)
    region = scan_region(positions, _FLAT_PROBE)
    image, weights = stitch(patches, positions, region, return_weights=True)
    truth = _crop(obj, region)
    covered = weights > 0  # jittered scan: a corner of the bounding box may stay empty
    assert covered.mean() > 0.95
    x0, y0 = int(region[0]), int(region[1])

    rim = np.zeros(truth.shape, dtype=bool)
    for px, py in np.floor(positions).astype(int):
        top, left = py - n_keep // 2 - y0, px - n_keep // 2 - x0
        fp = np.zeros(truth.shape, dtype=bool)
        fp[max(top, 0) : top + n_keep + 1, max(left, 0) : left + n_keep + 1] = True
        fp[max(top + 1, 0) : top + n_keep, max(left + 1, 0) : left + n_keep] = False
        rim |= fp
    clean = covered & ~rim
    assert clean.mean() > 0.25
    err = np.abs(image - truth)
    assert err[clean].max() < 1e-12
    assert err[covered].max() <= abs(gx) + abs(gy)


def test_each_patch_is_stitched_at_its_own_position_not_the_group_centre():
    obj = _random_object(48, seed=4)
    own = np.array([[20.0, 20.0], [24.0, 20.0], [20.0, 24.0], [24.0, 24.0]])  # a gridsize-2 group
    patches = extract_patches(obj, own, N)
    region = scan_region(own, _FLAT_PROBE)
    truth = _crop(obj, region)
    np.testing.assert_allclose(stitch(patches, own, region), truth, atol=1e-12)
    centre = np.repeat(own.mean(axis=0, keepdims=True), 4, axis=0)
    wrong = stitch(patches, centre, region)
    assert np.abs(wrong - truth).max() > 0.5


def test_overlaps_are_averaged():
    patches = np.stack([np.ones((N, N)), np.full((N, N), 3.0)])
    positions = np.array([[10.0, 10.0], [14.0, 10.0]])  # kept 8x8 windows overlap by 4 columns
    image, weights = stitch(patches, positions, [0, 0, 30, 20], return_weights=True)
    rows = slice(6, 14)
    np.testing.assert_array_equal(image[rows, 6:10], 1.0)
    np.testing.assert_array_equal(image[rows, 10:14], 2.0)
    np.testing.assert_array_equal(image[rows, 14:18], 3.0)
    np.testing.assert_array_equal(weights[rows, 10:14], 2.0)


def test_overlaps_are_averaged_at_subpixel_positions():
    patches = np.stack([np.ones((N, N)), np.full((N, N), 3.0)])
    positions = np.array([[10.25, 10.5], [14.25, 10.5]])
    image, weights = stitch(patches, positions, [0, 0, 30, 20], return_weights=True)
    both = np.isclose(weights, 2.0)
    assert both.sum() == 3 * 7  # full-weight overlap: 3 columns x 7 rows
    np.testing.assert_allclose(image[both], 2.0, atol=1e-12)


def test_uncovered_pixels_are_zero_and_have_zero_weight():
    patches = np.full((1, N, N), 5.0 + 1j)
    image, weights = stitch(patches, np.array([[10.0, 10.0]]), [0, 0, 30, 30], return_weights=True)
    assert image[weights == 0].size > 0
    assert np.all(image[weights == 0] == 0)
    np.testing.assert_array_equal(image[6:14, 6:14], 5.0 + 1j)


def test_patches_outside_the_region_are_clipped_not_wrapped():
    patches = np.full((2, N, N), 2.0)
    positions = np.array([[2.0, 3.0], [100.0, 100.0]])  # one overhangs, one far outside
    image, weights = stitch(patches, positions, [0, 0, 10, 10], return_weights=True)
    np.testing.assert_array_equal(image[:7, :6], 2.0)
    assert weights[7:, :].sum() == 0 and weights[:, 6:].sum() == 0


def test_invalid_inputs_raise():
    with pytest.raises(ValueError, match="positions"):
        stitch(np.zeros((3, N, N)), np.zeros((2, 2)), [0, 0, 10, 10])
    with pytest.raises(ValueError, match="empty"):
        stitch(np.zeros((1, N, N)), np.zeros((1, 2)), [5, 0, 5, 10])
    with pytest.raises(ValueError, match="n_keep"):
        stitch(np.zeros((1, N, N)), np.zeros((1, 2)), [0, 0, 10, 10], n_keep=N + 1)


def _two_object_dataset(gridsize: int) -> Dataset:
    size = 56
    scan = grid_scan(size, N, stride=6, gridsize=gridsize, spacing=4)
    objects = np.stack([_random_object(size, seed=10), _random_object(size, seed=11)])
    n_pos, c = len(scan.positions), scan.groups.shape[1]
    return Dataset(
        diffraction=np.zeros((2 * n_pos, N, N), dtype=np.uint32),
        probe=np.ones((N, N), dtype=np.complex64),
        objects=objects,
        positions=np.tile(scan.positions, (2, 1)),
        position_object=np.repeat(np.arange(2), n_pos),
        groups=np.concatenate([scan.groups, scan.groups + n_pos]),
        group_offsets=np.tile(scan.offsets, (2, 1, 1)).reshape(-1, c, 2),
        scan_region=np.tile(scan_region(scan.positions, _FLAT_PROBE), (2, 1)),
        scale=1.0,
    )


@pytest.mark.parametrize("gridsize", [1, 2])
def test_stitch_objects_reproduces_each_object_over_its_scan_region(gridsize):
    # What `ptycho stitch` does with infer's output: every group channel's patch at its
    # own position, each into the image of its own object.
    ds = _two_object_dataset(gridsize)
    positions = ds.positions[ds.groups].reshape(-1, 2)
    obj_of = ds.position_object[ds.groups].reshape(-1)
    patches = np.stack([extract_patches(ds.objects[m], positions[k : k + 1], N)[0] for k, m in enumerate(obj_of)])
    images = stitch_objects(patches, positions, obj_of, ds)
    assert len(images) == 2
    for m, image in enumerate(images):
        assert image.shape == ds.ground_truth(m).shape
        np.testing.assert_allclose(image, ds.ground_truth(m), atol=1e-12)
    # Already-cropped (N//2) patches, and a trailing channel axis, give the same result.
    for same in (centre_crop(patches, N // 2), patches[..., None]):
        for m, image in enumerate(stitch_objects(same, positions, obj_of, ds)):
            np.testing.assert_allclose(image, ds.ground_truth(m), atol=1e-12)


def test_stitch_objects_rejects_patches_smaller_than_the_kept_region():
    ds = _two_object_dataset(1)
    positions = ds.positions[ds.groups].reshape(-1, 2)
    with pytest.raises(ValueError, match="smaller than the kept region"):
        stitch_objects(np.zeros((len(positions), 4, 4)), positions, ds.position_object[ds.groups].reshape(-1), ds)


def _patches_with_offsets(ds: Dataset, per_group: bool, seed: int = 3):
    """Exact patches of ``ds``, each group (or each patch) times a random constant phase."""
    positions = ds.positions[ds.groups].reshape(-1, 2)
    obj_of = ds.position_object[ds.groups].reshape(-1)
    patches = np.stack([extract_patches(ds.objects[m], positions[k : k + 1], N)[0] for k, m in enumerate(obj_of)])
    rng = np.random.default_rng(seed)
    g, c = ds.groups.shape
    phases = rng.uniform(-np.pi, np.pi, g if per_group else g * c)
    if per_group:
        phases = np.repeat(phases, c)
    return patches * np.exp(1j * phases)[:, None, None], positions, obj_of


@pytest.mark.parametrize("gridsize, per_group", [(1, False), (2, True), (2, False)])
def test_phase_sync_undoes_a_constant_phase_per_patch_or_group(gridsize, per_group):
    # The ambiguity a PINN is free to use: a constant phase per group leaves its
    # diffraction unchanged. Overlaps pin it: stitching recovers the object up to one
    # global phase; plain averaging of the scrambled patches does not.
    ds = _two_object_dataset(gridsize)
    patches, positions, obj_of = _patches_with_offsets(ds, per_group)
    synced = stitch_objects(patches, positions, obj_of, ds)
    plain = stitch_objects(patches, positions, obj_of, ds, phase_sync=False)
    for m in range(2):
        truth = ds.ground_truth(m)
        glob = np.vdot(synced[m], truth)
        np.testing.assert_allclose(synced[m] * glob / abs(glob), truth, atol=1e-6)
        assert np.mean(np.abs(plain[m] - truth)) > 0.1  # scrambled phases average away


def test_phase_sync_leaves_agreeing_patches_and_their_mean_phase_alone():
    obj = _random_object(48) * np.exp(0.7j)
    scan = grid_scan(48, N, stride=4)
    patches = extract_patches(obj, scan.positions, N)
    np.testing.assert_allclose(synchronise_phase(patches, scan.positions), patches, atol=1e-10)
    # A single patch, or patches that overlap nothing, keep their phase.
    far = np.array([[8.0, 8.0], [40.0, 40.0]])
    lone = extract_patches(obj, far, N) * np.exp(1j * np.array([0.3, -1.2]))[:, None, None]
    np.testing.assert_allclose(synchronise_phase(lone, far), lone, atol=1e-12)


def test_phase_sync_needs_complex_patches():
    with pytest.raises(ValueError, match="complex"):
        synchronise_phase(np.ones((2, N, N)), np.zeros((2, 2)))
