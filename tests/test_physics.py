"""NumPy physics: translation convention, patch extraction, scan geometry, forward model,
probes and objects (docs/physics.md sections 2 and 3)."""

from __future__ import annotations

import numpy as np
import pytest
from padding import pad_to

from ptycho.physics.forward import (
    diffraction_amplitude,
    exit_waves,
    expected_counts,
    poisson_counts,
    scale_for_photons,
)
from ptycho.physics.objects import OBJECT_KINDS, PHASE_KINDS, make_object
from ptycho.physics.probe import defocused_probe, disk_probe, make_probe
from ptycho.physics.scan import grid_scan, group_offsets, nearest_neighbour_groups
from ptycho.physics.translate import centre_crop, extract_patches, translate


def _random_complex(shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


# ------------------------------------------------------------------ translation
def test_translate_moves_content_by_plus_t():
    img = np.zeros((9, 9))
    img[4, 4] = 1.0  # row 4, column 4
    out = translate(img, (2, 1))  # [dx, dy] = 2 columns right, 1 row down
    assert out[5, 6] == 1.0
    assert out.sum() == 1.0


def test_translate_negative_shift_moves_up_left():
    img = np.zeros((9, 9))
    img[4, 4] = 1.0
    out = translate(img, (-3, -2))
    assert out[2, 1] == 1.0
    assert out.sum() == 1.0


def test_translate_subpixel_splits_mass_bilinearly():
    img = np.zeros((8, 8))
    img[3, 3] = 1.0
    out = translate(img, (0.25, 0.5))  # a quarter column right, half a row down
    expected = np.zeros((8, 8))
    expected[3, 3] = 0.75 * 0.5
    expected[3, 4] = 0.25 * 0.5
    expected[4, 3] = 0.75 * 0.5
    expected[4, 4] = 0.25 * 0.5
    np.testing.assert_allclose(out, expected, atol=1e-15)


def test_translate_complex_input_translates_real_and_imaginary_parts():
    img = _random_complex((12, 10)).astype(np.complex64)
    out = translate(img, (1.3, -0.6))
    assert out.dtype == np.complex64
    np.testing.assert_allclose(out.real, translate(img.real, (1.3, -0.6)), atol=1e-6)
    np.testing.assert_allclose(out.imag, translate(img.imag, (1.3, -0.6)), atol=1e-6)


def test_translate_zero_fills_outside():
    img = np.ones((6, 6))
    out = translate(img, (1, 0))
    assert np.all(out[:, 0] == 0)
    assert np.all(out[:, 1:] == 1)
    assert np.all(translate(img, (10, -10)) == 0)


def test_translate_integer_shift_is_exactly_undone_by_minus_shift_on_padded_image():
    patch = _random_complex((6, 6))
    padded = pad_to(patch, 14)
    back = translate(translate(padded, (3, -2)), (-3, 2))
    np.testing.assert_array_equal(back, padded)


def test_translate_batched_per_image_shifts_equal_individual_calls():
    imgs = _random_complex((3, 10, 10), seed=1)
    shifts = np.array([[0.5, 0.0], [-1.25, 2.0], [0.0, -0.75]])
    out = translate(imgs, shifts)
    for k in range(3):
        np.testing.assert_array_equal(out[k], translate(imgs[k], shifts[k]))


def test_centre_crop_and_pad_to_keep_centre_pixel():
    img = np.zeros((7, 7))
    img[3, 3] = 1.0
    big = pad_to(img, 12)
    assert big.shape == (12, 12) and big[6, 6] == 1.0
    np.testing.assert_array_equal(centre_crop(big, 7), img)


# ------------------------------------------------------------ patch extraction
def test_extract_patches_integer_position_equals_slicing():
    obj = _random_complex((40, 50))  # non-square: a swapped [x, y] cannot pass
    n = 8
    pos = np.array([[30, 12], [4, 35], [45, 4]])  # [x, y]
    patches = extract_patches(obj, pos, n)
    for (x, y), patch in zip(pos, patches, strict=True):
        np.testing.assert_array_equal(patch, obj[y - n // 2 : y + n // 2, x - n // 2 : x + n // 2])
        assert patch[n // 2, n // 2] == obj[y, x]


def test_extract_patches_subpixel_equals_translate_based_expectation():
    obj = _random_complex((32, 32))
    n = 8
    p = np.array([13.3, 17.8])  # [x, y]
    centre = np.array([32 // 2, 32 // 2])
    expected = centre_crop(translate(obj, centre - p), n)  # bring object point p to the centre
    got = extract_patches(obj, p[None], n)[0]
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_extract_patches_subpixel_samples_object_bilinearly():
    obj = np.arange(30 * 30, dtype=np.float64).reshape(30, 30)  # value = 30*row + col, linear
    patch = extract_patches(obj, np.array([[10.25, 12.5]]), 6)[0]
    # pixel (i, j) samples object row 12.5 - 3 + i, column 10.25 - 3 + j
    i, j = np.meshgrid(np.arange(6), np.arange(6), indexing="ij")
    np.testing.assert_allclose(patch, 30 * (9.5 + i) + (7.25 + j), atol=1e-9)


def test_extract_patches_refuses_patch_outside_object():
    obj = np.zeros((20, 20))
    extract_patches(obj, np.array([[4, 4]]), 8)  # touches the edge: allowed
    with pytest.raises(ValueError, match="beyond the object"):
        extract_patches(obj, np.array([[3, 10]]), 8)
    with pytest.raises(ValueError, match="beyond the object"):
        extract_patches(obj, np.array([[10, 16.5]]), 8)


def test_group_extraction_by_plus_offset_and_reassembly_by_minus_offset():
    """Patch k = centre_crop(translate(canvas, +offset_k)); reassembly is its inverse."""
    obj = _random_complex((48, 48), seed=3)
    n, m = 16, 20  # canvas: the group's patches with their +-2 px offsets
    scan = grid_scan(48, n, stride=8, gridsize=2, spacing=4)
    g = 0
    members = scan.positions[scan.groups[g]]
    centroid = members.mean(axis=0)
    canvas = extract_patches(obj, centroid[None], m)[0]
    direct = extract_patches(obj, members, n)
    for c in range(4):
        via_canvas = centre_crop(translate(canvas, scan.offsets[g, c]), n)
        np.testing.assert_array_equal(via_canvas, direct[c])
        back = translate(pad_to(direct[c], m), -scan.offsets[g, c])
        x0, y0 = (members[c] - centroid + m // 2 - n // 2).astype(int)
        np.testing.assert_array_equal(back[y0 : y0 + n, x0 : x0 + n], direct[c])


# ------------------------------------------------------------------------- scan
def test_grid_scan_gridsize2_offsets_are_plus_minus_2_in_row_major_channel_order():
    scan = grid_scan(object_size=48, n=16, stride=4, gridsize=2, spacing=4)
    expected = np.array([[2, 2], [-2, 2], [2, -2], [-2, -2]], dtype=float)
    assert scan.groups.shape[1] == 4
    np.testing.assert_array_equal(scan.offsets, np.broadcast_to(expected, scan.offsets.shape))
    # channel 0 is top-left: smallest x and smallest y in its group
    members = scan.positions[scan.groups]
    assert np.all(members[:, 0, 0] < members[:, 1, 0]) and np.all(members[:, 0, 1] == members[:, 1, 1])
    assert np.all(members[:, 0, 1] < members[:, 2, 1]) and np.all(members[:, 0, 0] == members[:, 2, 0])
    np.testing.assert_array_equal(scan.offsets, group_offsets(scan.positions, scan.groups))


def test_grid_scan_offsets_are_half_the_spacing():
    scan = grid_scan(object_size=64, n=16, stride=10, gridsize=2, spacing=6)
    np.testing.assert_array_equal(np.abs(scan.offsets), 3.0)


def test_grid_scan_positions_are_unique_shared_and_inside_the_object():
    size, n = 48, 16
    scan = grid_scan(size, n, stride=4, gridsize=2, spacing=4)
    assert len(np.unique(scan.positions, axis=0)) == len(scan.positions)
    # stride == spacing: neighbouring groups share positions, stored once
    assert len(scan.positions) < scan.groups.size
    assert scan.positions.min() - n // 2 >= 0
    assert scan.positions.max() + n - n // 2 <= size
    extract_patches(np.ones((size, size)), scan.positions, n)  # every patch fits


def test_grid_scan_gridsize1_has_zero_offsets_and_stride_pitch():
    scan = grid_scan(object_size=40, n=16, stride=4, gridsize=1)
    assert scan.groups.shape == (len(scan.positions), 1)
    assert np.all(scan.offsets == 0)
    xs = np.unique(scan.positions[:, 0])
    np.testing.assert_array_equal(xs, [8, 12, 16, 20, 24, 28, 32])


def test_grid_scan_refuses_object_too_small():
    with pytest.raises(ValueError, match="too small"):
        grid_scan(object_size=18, n=16, stride=4, gridsize=2, spacing=4)


def test_nearest_neighbour_groups_asymmetric_jittered_rectangle():
    """10 px wide, 3 px tall, jittered so that top-right has a smaller y than top-left."""
    pos = np.array([[0.0, 0.3], [10.0, 0.0], [0.2, 3.0], [10.1, 3.2]])  # TL, TR, BL, BR
    groups = nearest_neighbour_groups(pos, 2)
    assert groups.shape == (4, 4)
    np.testing.assert_array_equal(groups, np.broadcast_to([0, 1, 2, 3], (4, 4)))
    offsets = group_offsets(pos, groups)[0]
    centroid = pos.mean(axis=0)
    np.testing.assert_allclose(offsets, centroid - pos)
    np.testing.assert_allclose(offsets[0], [5.075, 1.325])  # TL: positive x and y
    signs = np.sign(offsets)
    np.testing.assert_array_equal(signs, [[1, 1], [-1, 1], [1, -1], [-1, -1]])


def test_nearest_neighbour_groups_order_does_not_depend_on_input_order():
    square = np.array([[8.0, 8.0], [12.0, 8.0], [8.0, 12.0], [12.0, 12.0]])  # TL, TR, BL, BR
    shuffled = square[[3, 0, 2, 1]]
    groups = nearest_neighbour_groups(shuffled, 2)
    np.testing.assert_array_equal(shuffled[groups], np.broadcast_to(square, (4, 4, 2)))
    expected = np.array([[2, 2], [-2, 2], [2, -2], [-2, -2]], dtype=float)  # as grid_scan
    np.testing.assert_array_equal(group_offsets(shuffled, groups), np.broadcast_to(expected, (4, 4, 2)))


def test_nearest_neighbour_groups_gridsize1_is_identity_and_needs_enough_positions():
    pos = np.array([[0.0, 0.0], [5.0, 1.0]])
    np.testing.assert_array_equal(nearest_neighbour_groups(pos, 1), [[0], [1]])
    with pytest.raises(ValueError, match="at least 4 positions"):
        nearest_neighbour_groups(pos, 2)


# ---------------------------------------------------------------- forward model
def test_diffraction_amplitude_parseval_per_pattern():
    psi = _random_complex((5, 16, 16), seed=4) * np.arange(1, 6)[:, None, None]
    amp = diffraction_amplitude(psi)
    np.testing.assert_allclose(np.sum(amp**2, axis=(1, 2)), np.sum(np.abs(psi) ** 2, axis=(1, 2)), rtol=1e-12)


def test_diffraction_amplitude_zero_frequency_at_centre():
    amp = diffraction_amplitude(np.ones((16, 16), dtype=complex))
    assert amp[8, 8] == pytest.approx(16.0)  # |sum psi| / N = 256 / 16
    assert np.sum(amp**2) == pytest.approx(256.0)
    amp[8, 8] = 0
    assert np.abs(amp).max() < 1e-12


def test_diffraction_amplitude_equals_scaled_unnormalised_fft():
    psi = _random_complex((16, 16), seed=5)
    direct = np.abs(np.fft.fftshift(np.fft.fft2(psi))) / 16
    np.testing.assert_allclose(diffraction_amplitude(psi), direct, rtol=1e-12)


def test_scale_for_photons_sets_mean_expected_total():
    probe = disk_probe(16)
    patches = np.abs(_random_complex((6, 16, 16), seed=6)) * np.exp(0.3j)
    s = scale_for_photons(probe, patches, 1234.5)
    totals = expected_counts(probe, patches, s).sum(axis=(1, 2))
    assert totals.mean() == pytest.approx(1234.5, rel=1e-12)
    np.testing.assert_allclose(exit_waves(probe, patches, s), s * probe * patches)


def test_scale_for_photons_refuses_zero_energy():
    with pytest.raises(ValueError, match="no energy"):
        scale_for_photons(disk_probe(16), np.zeros((2, 16, 16)), 100.0)


def test_poisson_counts_are_seeded_uint32():
    expected = np.full((3, 8, 8), 50.0)
    a = poisson_counts(expected, np.random.default_rng(7))
    b = poisson_counts(expected, np.random.default_rng(7))
    assert a.dtype == np.uint32
    np.testing.assert_array_equal(a, b)
    assert abs(a.mean() - 50.0) < 5 * np.sqrt(50.0 / a.size)


def test_poisson_counts_refuse_uint32_overflow():
    with pytest.raises(ValueError, match="uint32"):
        poisson_counts(np.array([3e9]), np.random.default_rng(0))


# ----------------------------------------------------------------------- probes
@pytest.mark.parametrize("n", [16, 64, 128])
@pytest.mark.parametrize("kind", ["disk", "defocused"])
def test_probe_has_unit_energy(kind, n):
    p = make_probe(kind, n)
    assert p.shape == (n, n) and np.iscomplexobj(p)
    assert np.sum(np.abs(p) ** 2) == pytest.approx(1.0, rel=1e-12)


def test_disk_probe_radius_is_11px_at_n64_and_centred():
    amp = np.abs(disk_probe(64))
    inside = amp > amp.max() / 2
    radius = np.sqrt(inside.sum() / np.pi)
    assert radius == pytest.approx(11.0, abs=0.3)
    rows, cols = np.nonzero(inside)
    assert rows.mean() == pytest.approx(32.0) and cols.mean() == pytest.approx(32.0)
    assert np.all(np.angle(disk_probe(64)) == 0)


def test_disk_probe_radius_scales_with_n():
    amp = np.abs(disk_probe(128))
    radius = np.sqrt((amp > amp.max() / 2).sum() / np.pi)
    assert radius == pytest.approx(22.0, abs=0.3)


def test_defocused_probe_same_amplitude_as_disk_and_quadratic_phase():
    n, edge = 64, np.pi
    disk, defoc = disk_probe(n), defocused_probe(n, edge_phase=edge)
    np.testing.assert_allclose(np.abs(defoc), np.abs(disk), atol=1e-12)
    idx = np.arange(n) - n // 2
    r = np.hypot(idx[None, :], idx[:, None])
    inside = r < 0.9 * 11.0  # phase < pi there: np.angle does not wrap
    np.testing.assert_allclose(np.angle(defoc)[inside], edge * (r[inside] / 11.0) ** 2, atol=1e-9)
    # quadratic in r: a least-squares fit of phase = a r^2 + b r + c has b ~ 0
    a, b, c = np.polyfit(r[inside], np.angle(defoc)[inside], 2)
    assert a == pytest.approx(edge / 121.0, rel=1e-6) and abs(b) < 1e-8 and abs(c) < 1e-8


def test_make_probe_unknown_kind():
    with pytest.raises(ValueError, match="unknown probe kind 'gauss'"):
        make_probe("gauss", 64)


# ---------------------------------------------------------------------- objects
def test_lines_object_has_amplitude_max_1_and_nontrivial_phase_by_default():
    obj = make_object("lines", 64, np.random.default_rng(0))
    amp, phase = np.abs(obj), np.angle(obj)
    assert amp.max() == pytest.approx(1.0, abs=1e-12)
    assert phase.std() > 0.1
    assert phase.min() >= -np.pi / 2 - 1e-12 and phase.max() <= np.pi / 2 + 1e-12
    # phase is an independent image, not a copy of the amplitude
    assert abs(np.corrcoef(amp.ravel(), phase.ravel())[0, 1]) < 0.9


@pytest.mark.parametrize("phase_kind", PHASE_KINDS)
@pytest.mark.parametrize("kind", OBJECT_KINDS)
def test_every_object_kind_is_finite_complex_with_amplitude_at_most_1(kind, phase_kind):
    obj = make_object(kind, 48, np.random.default_rng(1), phase_kind=phase_kind, n_lines=50)
    assert obj.shape == (48, 48) and np.iscomplexobj(obj)
    assert np.all(np.isfinite(obj))
    assert np.abs(obj).max() <= 1.0 + 1e-12
    if phase_kind == "zero":
        assert np.all(np.angle(obj) == 0)
    else:
        assert np.angle(obj).std() > 0.1


def test_object_is_seeded_and_amplitude_floor_applies():
    a = make_object("gaussian", 32, np.random.default_rng(5), amplitude_floor=0.3)
    b = make_object("gaussian", 32, np.random.default_rng(5), amplitude_floor=0.3)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a).min() == pytest.approx(0.3) and np.abs(a).max() == pytest.approx(1.0)
    c = make_object("gaussian", 32, np.random.default_rng(6))
    assert not np.array_equal(np.abs(a), np.abs(c))


def test_make_object_unknown_kinds():
    with pytest.raises(ValueError, match="unknown object kind 'stripes'"):
        make_object("stripes", 16, np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown phase kind 'ramp'"):
        make_object("gaussian", 16, np.random.default_rng(0), phase_kind="ramp")
