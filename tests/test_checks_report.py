"""Checklist verdicts and the report, from synthetic evidence (no training)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ptycho import checks, report


def _history(losses):
    return [{"epoch": i + 1, "train_loss": v, "val_loss": v} for i, v in enumerate(losses)]


def test_verdict_compares_in_the_stated_direction_and_nan_fails():
    assert checks.verdict("x", 0.5, 1.0, "<=", "", {})["status"] == "PASS"
    assert checks.verdict("x", 1.5, 1.0, "<=", "", {})["status"] == "FAIL"
    assert checks.verdict("x", 1.5, 1.0, ">=", "", {})["status"] == "PASS"
    assert checks.verdict("x", math.nan, 1.0, "<=", "", {})["status"] == "FAIL"


def test_convergence_passes_for_close_decreasing_arms_and_fails_otherwise():
    hist = {"pinn-xla-s0": _history([3.0, 2.0, 1.00]), "pinn-noxla-s0": _history([3.0, 2.0, 1.01])}
    init = {"pinn-xla-s0": 4.0, "pinn-noxla-s0": 4.0}
    ok = checks.convergence(hist, 0.05, init)
    assert ok["status"] == "PASS" and ok["value"] == pytest.approx(0.01 / 1.01)
    far = checks.convergence(hist, 0.001, init)
    assert far["status"] == "FAIL"
    rising = checks.convergence(hist, 0.05, {"pinn-xla-s0": 0.5, "pinn-noxla-s0": 4.0})
    assert rising["status"] == "FAIL" and "did not decrease" in rising["summary"]
    alone = checks.convergence({"pinn-xla-s0": _history([2.0, 1.0])}, 0.05)
    assert alone["status"] == "FAIL" and "no pair" in alone["summary"]


def test_quality_uses_the_largest_ssim_difference_between_arms():
    def m(a, p):
        return {"mean": {"amp_ssim": a, "phase_ssim": p, "amp_psnr": 20.0}}

    rec = checks.quality({"pinn-xla-s0": m(0.80, 0.70), "pinn-noxla-s0": m(0.79, 0.73)}, 0.02)
    assert rec["value"] == pytest.approx(0.03) and rec["status"] == "FAIL"


def test_speedup_reports_slower_xla_in_words():
    bench = {"ratios": {"pinn": {"train_step_speedup": 0.8}}, "arms": [{"step_s": {"n": 20}}]}
    rec = checks.speedup(bench, 1.0)
    assert rec["status"] == "FAIL" and "SLOWER" in rec["summary"]


def _items(status="PASS"):
    return {name: checks.verdict(name, 0.0 if status == "PASS" else 2.0, 1.0, "<=", f"{name} summary",
                                 {"pairs": {}} if name == "convergence" else {}) for name in checks.ITEMS}


def test_report_verdict_is_pass_only_if_every_item_passes():
    assert report.build(_items(), {}, {"preset": "smoke"})["verdict"] == "PASS"
    items = _items()
    items["speedup"] = checks.verdict("speedup", 0.5, 1.0, ">=", "slower", {})
    assert report.build(items, {}, {"preset": "smoke"})["verdict"] == "FAIL"
    with pytest.raises(ValueError, match="gradients"):
        report.build({k: v for k, v in _items().items() if k != "gradients"}, {}, {})


def test_report_files_are_written_and_the_html_is_self_contained(tmp_path):
    arms = {"pinn-xla-s0": {"metrics": {"amp_ssim": 0.8, "phase_ssim": 0.7}, "timing": {"compile_s": 9.0}}}
    rec = report.build(_items(), arms, {"preset": "smoke", "presets": {"x": {}}}, {"cpu": "test", "cores": 2})
    paths = report.write(rec, tmp_path)
    html = paths["html"].read_text()
    assert "Verdict" in html and "PASS" in html and "pinn-xla-s0" in html
    assert "http://" not in html and "https://" not in html  # nothing fetched from a network
    md = paths["md"].read_text()
    assert "| accuracy | PASS |" in md
    assert "presets" not in rec["config"]


def test_illumination_weighting_prefers_the_patch_that_lit_the_pixel():
    from ptycho.stitch import illumination_weight, stitch

    n = 8
    probe = np.zeros((2 * n, 2 * n))
    probe[n - 2 : n + 2, n - 2 : n + 2] = 1.0  # lights the central 4x4 only
    weight = illumination_weight(probe, n)
    lit = np.full((n, n), 1.0)
    dark = np.full((n, n), 5.0)
    # second patch 3 px to the right: pixel at x = 10 is lit by patch 2 only
    positions = np.array([[10.0, 10.0], [13.0, 10.0]])
    image = stitch(np.stack([dark, lit]), positions, [6, 6, 18, 14], n_keep=n, weight=weight)
    assert image[10 - 6, 13 - 6] == pytest.approx(1.0, abs=0.01)  # centre of patch 2: lit by it
    plain = stitch(np.stack([dark, lit]), positions, [6, 6, 18, 14], n_keep=n)
    assert plain[10 - 6, 13 - 6] == pytest.approx(3.0)


def test_convergence_without_validation_losses_fails_instead_of_passing():
    nan = float("nan")
    hist = {
        "pinn-xla-s0": [{"epoch": 1, "train_loss": 2.0, "val_loss": nan}, {"epoch": 2, "train_loss": 1.0, "val_loss": nan}],
        "pinn-noxla-s0": [{"epoch": 1, "train_loss": 9.0, "val_loss": nan}, {"epoch": 2, "train_loss": 5.0, "val_loss": nan}],
    }
    assert checks.convergence(hist, 0.05)["status"] == "FAIL"


def test_quality_with_an_undefined_ssim_fails_without_crashing():
    metrics = {"pinn-xla-s0": {"mean": {"amp_ssim": 0.8, "phase_ssim": None}},
               "pinn-noxla-s0": {"mean": {"amp_ssim": 0.8, "phase_ssim": None}}}
    record = checks.quality(metrics, 0.02)
    assert record["status"] == "FAIL" and math.isnan(record["value"])
