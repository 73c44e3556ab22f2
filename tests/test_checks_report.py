"""Checklist verdicts and the report, from synthetic evidence (no training)."""

from __future__ import annotations

import dataclasses
import math
from html import escape, unescape

import numpy as np
import pytest

from ptycho.study import checklist, report
from ptycho.study.checklist.convergence import convergence
from ptycho.study.checklist.quality import quality
from ptycho.study.checklist.result import ItemResult, verdict
from ptycho.study.checklist.speedup import speedup


def _history(losses):
    return [{"epoch": i + 1, "train_loss": v, "val_loss": v} for i, v in enumerate(losses)]


def test_verdict_compares_in_the_stated_direction_and_nan_fails():
    assert verdict("x", 0.5, 1.0, "<=", "", {}).status == "PASS"
    assert verdict("x", 1.5, 1.0, "<=", "", {}).status == "FAIL"
    assert verdict("x", 1.5, 1.0, ">=", "", {}).status == "PASS"
    assert verdict("x", math.nan, 1.0, "<=", "", {}).status == "FAIL"


def test_convergence_needs_seeds_to_pass_and_fails_when_a_loss_rises_or_nothing_pairs():
    hist = {"pinn-jit-s0": _history([3.0, 2.0, 1.00]), "pinn-off-s0": _history([3.0, 2.0, 1.01])}
    init = {"pinn-jit-s0": 4.0, "pinn-off-s0": 4.0}
    one = convergence(hist, 0.05, init)  # one seed per arm: no spread to judge by
    assert one.status == "INCONCLUSIVE" and math.isnan(one.value) and "one seed per arm" in one.summary
    seeds = {
        f"pinn-{mode}-s{s}": _history([3.0, 2.0, final])
        for mode, finals in (("jit", (1.000, 1.002, 1.001)), ("off", (1.001, 1.000, 1.002)))
        for s, final in enumerate(finals)
    }
    ok = convergence(seeds, 0.05, dict.fromkeys(seeds, 4.0))  # "not worse": one-sided
    assert ok.status == "PASS" and ok.value <= 0.05 and "NOT WORSE by more than the 5.0% margin" in ok.summary
    same = convergence(seeds, 0.05, dict.fromkeys(seeds, 4.0), test="equivalence")  # thresholds.two_sided
    assert same.status == "PASS" and same.value <= 0.05 and "EQUIVALENT" in same.summary
    # a loss 20 % higher in every seed is WORSE: the item fails; 20 % lower is not worse
    for factor, status, word in ((1.2, "FAIL", "WORSE by more than"), (0.8, "PASS", "NOT WORSE")):
        moved = {
            k: _history([3.0, 2.0, v[-1]["val_loss"] * (factor if "-jit-" in k else 1.0)]) for k, v in seeds.items()
        }
        rec = convergence(moved, 0.05, dict.fromkeys(moved, 4.0))
        assert rec.status == status and word in rec.summary, rec.summary
    rising = convergence(hist, 0.05, {"pinn-jit-s0": 0.5, "pinn-off-s0": 4.0})
    assert rising.status == "FAIL" and "did not decrease" in rising.summary
    alone = convergence({"pinn-jit-s0": _history([2.0, 1.0])}, 0.05)
    assert alone.status == "FAIL" and "no pair" in alone.summary


def test_convergence_compares_all_arms_in_raw_loss_when_some_record_no_floor():
    # The jit arm's trainings predate the floor; off's record it (-2.2, the Poisson
    # likelihood's offset). Identical curves must compare EQUIVALENT, not 100 % apart.
    seeds = {
        f"pinn-{mode}-s{s}": _history([-1.0, -2.0, final])
        for mode in ("jit", "off")
        for s, final in enumerate((-2.100, -2.102, -2.101))
    }
    floors = {name: (-2.2 if "-off-" in name else None) for name in seeds}
    rec = convergence(seeds, 0.05, dict.fromkeys(seeds, 0.0), floors=floors)
    assert rec.status == "PASS" and "NOT WORSE" in rec.summary
    assert "compared in raw loss, since pinn-jit-s0, pinn-jit-s1, pinn-jit-s2 record no loss floor" in rec.summary
    above = convergence(seeds, 0.05, dict.fromkeys(seeds, 0.0), floors=dict.fromkeys(seeds, -2.2))
    assert above.status == "PASS" and "raw loss" not in above.summary


def test_quality_with_one_seed_per_arm_is_inconclusive_whatever_the_difference():
    def m(a, p):
        return {"mean": {"amp_ssim": a, "phase_ssim": p, "amp_psnr": 20.0}}

    rec = quality({"pinn-jit-s0": m(0.80, 0.70), "pinn-off-s0": m(0.79, 0.73)}, 0.02)
    assert rec.status == "INCONCLUSIVE" and math.isnan(rec.value)
    assert "at least 2 seeds per arm" in rec.summary
    assert rec.evidence["comparisons"]["pinn-jit"]["phase_ssim"]["difference"] == pytest.approx(-0.03)


def _seeds(model, mode, amp, phase):
    return {
        f"{model}-{mode}-s{s}": {"mean": {"amp_ssim": a, "phase_ssim": p}}
        for s, (a, p) in enumerate(zip(amp, phase, strict=True))
    }


def test_quality_across_seeds_says_inconclusive_with_the_seeds_needed_when_the_spread_is_wide():
    # Seeds of the same arm spread by 0.06 in phase SSIM: a 0.03 XLA - off difference with
    # three seeds each can be neither shown within the 0.02 margin nor beyond it (two-sided).
    off = _seeds("pinn", "off", [0.85, 0.86, 0.85], [0.80, 0.83, 0.86])
    jit = _seeds("pinn", "jit", [0.85, 0.86, 0.86], [0.86, 0.86, 0.86])
    rec = quality({**off, **jit}, 0.02, test="equivalence")
    c = rec.evidence["comparisons"]["pinn-jit"]["phase_ssim"]
    assert c["difference"] == pytest.approx(0.03) and c["spread"] == pytest.approx(0.06)
    assert c["margin"] == 0.02 and c["low"] < 0.02 < c["high"] and c["outcome"] == "INCONCLUSIVE"
    assert rec.status == "INCONCLUSIVE" and rec.threshold == pytest.approx(0.02)
    assert f"{c['seeds_needed']:.0f} seeds per arm would settle it" in rec.summary
    assert "3 vs 3 seeds" in rec.summary
    # The same spread, the XLA arm 0.10 better everywhere: DIFFERENT, a FAIL, two-sided.
    far = _seeds("pinn", "jit", [0.85, 0.86, 0.86], [0.91, 0.93, 0.95])
    rec = quality({**off, **far}, 0.02, test="equivalence")
    assert rec.status == "FAIL" and rec.value > 0.10
    assert "DIFFERENT: its 95 % interval lies beyond the 0.0200 margin" in rec.summary
    # The study's own question is one-sided, "without making it worse" (issue 45): an arm
    # better by 0.10 is NOT WORSE, not DIFFERENT; the first one (better by 0.03, lower
    # end -0.021) is nearer a decision than two-sided: fewer seeds would settle it.
    rec = quality({**off, **far}, 0.02)
    c = rec.evidence["comparisons"]["pinn-jit"]["phase_ssim"]
    assert c["outcome"] == "NOT WORSE" and c["low90"] > -0.02 and rec.status == "PASS", rec.summary
    assert rec.value <= 0.02
    two_sided = quality({**off, **jit}, 0.02, test="equivalence").evidence["comparisons"]["pinn-jit"]["phase_ssim"]
    c = quality({**off, **jit}, 0.02).evidence["comparisons"]["pinn-jit"]["phase_ssim"]
    assert c["outcome"] == "INCONCLUSIVE" and c["seeds_needed"] < two_sided["seeds_needed"]
    # 0.10 worse everywhere: WORSE, a FAIL; 0.03 worse with that spread: INCONCLUSIVE
    worse = _seeds("pinn", "jit", [0.85, 0.86, 0.86], [0.70, 0.73, 0.76])
    rec = quality({**off, **worse}, 0.02)
    assert rec.status == "FAIL" and "WORSE by more than the 0.0200 margin" in rec.summary
    bit = _seeds("pinn", "jit", [0.85, 0.86, 0.85], [0.79, 0.78, 0.84])
    rec = quality({**off, **bit}, 0.02)
    c = rec.evidence["comparisons"]["pinn-jit"]["phase_ssim"]
    assert c["outcome"] == "INCONCLUSIVE" and rec.status == "INCONCLUSIVE"
    assert f"{c['seeds_needed']:.0f} seeds per arm would settle it" in rec.summary


def test_quality_across_tight_seeds_shows_equivalence_and_passes():
    off = _seeds("pinn", "off", [0.850, 0.851, 0.852, 0.850], [0.860, 0.861, 0.860, 0.862])
    jit = _seeds("pinn", "jit", [0.851, 0.852, 0.850, 0.851], [0.861, 0.860, 0.862, 0.861])
    rec = quality({**off, **jit}, 0.02, test="equivalence")
    c = rec.evidence["comparisons"]["pinn-jit"]["amp_ssim"]
    assert c["margin"] == 0.02 and c["within"] and c["equivalent"] and c["outcome"] == "EQUIVALENT"
    assert rec.status == "PASS" and rec.value <= 0.02 and "EQUIVALENT within the 0.0200 margin" in rec.summary
    one_sided = quality({**off, **jit}, 0.02)
    assert one_sided.status == "PASS" and one_sided.evidence["comparisons"]["pinn-jit"]["amp_ssim"]["outcome"] == (
        "NOT WORSE"
    )


def _bench(pinn_xla_ms, pinn_noxla_ms, seed=0, shared=None):
    """A benchmark record as ``ptycho.study.bench.run`` writes it, from synthetic step times;
    ``shared`` = (jit ms, off ms) adds the shared context."""
    from ptycho.study.bench import ratios
    from ptycho.study.stats import quartiles

    rng = np.random.default_rng(seed)

    def samples(ms):
        return list(ms * 1e-3 * (1 + 0.02 * rng.standard_normal(20)))

    def arm(model, mode, ms, shared_ms=None):
        steps = samples(ms)
        out = {
            "model": model,
            "mode": mode,
            "compile_s": 5.0 if mode == "jit" else 2.0,
            "step_samples_s": steps,
            "step_s": quartiles(steps),
            "infer_batch_samples_s": list(0.01 * (1 + 0.02 * rng.standard_normal(8))),
            "infer_patterns_per_s": 1000.0,
            "naive_patterns_per_s": 100.0,
            "infer_compile_s": 1.0,
            "components": {k: {"median": 0.01} for k in ("network", "physics", "optimizer")},
            "peak_rss_mb": 900.0,
            "peak_above_baseline_mb": 100.0,
            "xla_clusters": None,
        }
        if shared_ms is not None:
            s = samples(shared_ms)
            out["shared"] = {"step_samples_s": s, "step_s": quartiles(s)}
        return out

    sj, so = shared or (None, None)
    arms = [
        arm("pinn", "jit", pinn_xla_ms, sj),
        arm("pinn", "off", pinn_noxla_ms, so),
        arm("baseline", "jit", 50, sj),
        arm("baseline", "off", 60, so),
    ]
    contexts = {"alone": {"jobs": 1, "threads": 2, "how": "alone"}}
    if shared:
        contexts["shared"] = {"jobs": 4, "threads": 2, "how": "shared"}
    return {
        "arms": arms,
        "ratios": ratios(arms),
        "contexts": contexts,
        "modes": ["off", "jit"],
        "machine": {"cpu": "test cpu", "cores": 2, "load_average": [0.1, 0.2, 0.3], "tensorflow": "2.x"},
    }


def test_speedup_reports_slower_xla_in_words_with_its_interval():
    rec = speedup(_bench(125, 100), 1.0)
    assert rec.status == "FAIL" and "SLOWER" in rec.summary and "95% CI" in rec.summary
    ci = rec.evidence["intervals"]["PINN jit vs off at fp32, train step alone"]
    assert rec.value == ci["low"] and ci["low"] < ci["ratio"] < ci["high"] < 1.0
    assert set(rec.evidence["intervals"]) == {
        "PINN jit vs off at fp32, train step alone",
        "PINN jit vs off at fp32, inference",
        "Baseline jit vs off at fp32, train step alone",
        "Baseline jit vs off at fp32, inference",
    }
    faster = speedup(_bench(80, 100), 1.0)
    assert faster.status == "PASS" and "faster" in faster.summary and "jit" in faster.summary
    same = speedup(_bench(100, 100), 1.0)
    assert "no measurable effect" in same.summary and same.status == "FAIL"  # not faster with confidence
    few = _bench(125, 100)
    for arm in few["arms"]:
        arm["step_samples_s"], arm["step_s"]["n"] = arm["step_samples_s"][:5], 5
    few_rec = speedup(few, 1.0)
    assert "too few steps for an interval" in few_rec.summary
    assert few_rec.value == few["ratios"]["pinn"]["jit"]["xla"]["train_step_alone"]["ratio"]  # the ratio itself


def test_speedup_verdict_is_for_its_stated_context_and_names_both():
    bench = _bench(125, 100, shared=(700, 1000))  # slower alone, faster in the pipeline's schedule
    alone = speedup(bench, 1.0, context="alone")
    shared = speedup(bench, 1.0, context="shared")
    assert alone.status == "FAIL" and shared.status == "PASS"
    assert "alone on the machine: jit" in alone.summary and "SLOWER" in alone.summary
    assert "in the pipeline's schedule: jit" in shared.summary and "faster" in shared.summary
    assert set(shared.evidence["per_step"]) == {"alone", "shared"}  # both contexts, in words
    assert shared.value > 1.0 and shared.evidence["judged"] == {"by": "step", "context": "shared", "arm": "jit"}


def test_a_measurement_beside_a_busy_process_is_marked_contaminated():
    """The benchmark's own check of its conditions: a busy loop started beside it."""
    import subprocess
    import sys
    import time

    from ptycho.study.bench import ForeignLoad
    from ptycho.study.bench.machine import process_cpu_seconds

    busy = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 30: pass"])
    try:
        time.sleep(0.3)
        with ForeignLoad() as loaded:
            time.sleep(1.5)
        used = process_cpu_seconds(busy.pid)  # what ForeignLoad subtracts for a process of its own
    finally:
        busy.kill()
        busy.wait()
    noisy = loaded.record(2)
    assert noisy["contaminated"] and noisy["foreign_cores"] > 0.5  # the busy loop took most of a core
    assert used > 0.5 and process_cpu_seconds(busy.pid) == 0.0  # reaped: nothing to count


def test_speedup_summary_says_when_its_evidence_is_contaminated():
    bench = _bench(125, 100)
    bench["contexts"]["alone"]["foreign_load"] = {"contaminated": True, "foreign_cores": 1.3, "of_cores": 2}
    rec = speedup(bench, 1.0)
    assert "CONTAMINATED: other processes kept 1.30 of 2 cores busy" in rec.summary


def test_speedup_picks_the_fastest_mode_against_off():
    from ptycho.study.bench import ratios
    from ptycho.study.stats import quartiles

    bench = _bench(125, 100)
    physics = dict(bench["arms"][0], mode="physics", step_samples_s=[0.08] * 10 + [0.081] * 10)
    physics["step_s"] = quartiles(physics["step_samples_s"])
    bench["arms"].append(physics)
    bench["ratios"] = ratios(bench["arms"])
    rec = speedup(bench, 1.0)
    assert rec.status == "PASS" and "alone on the machine: physics" in rec.summary


def test_bootstrap_interval_covers_the_true_ratio_and_narrows_with_more_samples():
    from ptycho.study.stats import bootstrap_ratio

    rng = np.random.default_rng(3)
    small = bootstrap_ratio(2.0 + 0.1 * rng.standard_normal(10), 1.0 + 0.05 * rng.standard_normal(10))
    large = bootstrap_ratio(2.0 + 0.1 * rng.standard_normal(400), 1.0 + 0.05 * rng.standard_normal(400))
    for ci in (small, large):
        assert ci["low"] < 2.0 < ci["high"]
    assert large["high"] - large["low"] < small["high"] - small["low"]
    assert math.isnan(bootstrap_ratio([1.0], [1.0, 2.0])["low"])  # one sample: no interval


def test_break_even_steps_repay_the_extra_compile_time():
    from ptycho.study.stats import break_even_steps

    assert break_even_steps(10.0, 2.0, 0.08, 0.10) == pytest.approx(400)  # 8 s extra / 20 ms per step
    assert break_even_steps(1.0, 2.0, 0.08, 0.10) == 0.0  # compiles faster and steps faster
    assert break_even_steps(10.0, 2.0, 0.12, 0.10) == math.inf  # slower steps never repay it


def test_quality_evidence_has_arm_differences_and_pinn_vs_baseline():
    def m(a, p):
        return {"mean": {"amp_ssim": a, "phase_ssim": p, "amp_psnr": 20.0}}

    rec = quality(
        {
            "pinn-jit-s0": m(0.80, 0.70),
            "pinn-off-s0": m(0.79, 0.71),
            "baseline-jit-s0": m(0.60, 0.50),
            "baseline-off-s0": m(0.60, 0.52),
        },
        0.02,
    )
    ev = rec.evidence
    assert ev["arm_differences"]["pinn-s0-jit"]["amp_ssim"] == pytest.approx(0.01)
    assert ev["pinn_minus_baseline"]["jit-s0"]["amp_ssim"] == pytest.approx(0.20)
    assert ev["pinn_minus_baseline"]["off-s0"]["phase_ssim"] == pytest.approx(0.19)


def _items(status="PASS"):
    return {
        name: verdict(
            name,
            0.0 if status == "PASS" else 2.0,
            1.0,
            "<=",
            f"{name} summary",
            {"pairs": {}} if name == "convergence" else {},
        )
        for name in checklist.names()
    }


def test_report_verdict_is_pass_only_if_every_item_passes():
    assert report.build(_items(), {}, {"preset": "smoke"}).verdict == "PASS"
    items = _items()
    items["speedup"] = verdict("speedup", 0.5, 1.0, ">=", "slower", {})
    assert report.build(items, {}, {"preset": "smoke"}).verdict == "FAIL"
    with pytest.raises(ValueError, match="gradients"):
        report.build({k: v for k, v in _items().items() if k != "gradients"}, {}, {})


def test_the_verdict_line_names_the_items_that_decide_it(tmp_path):
    """The first screen says what failed (a FAIL sat above a speed sentence ending 'no
    measurable effect', its item below the fold)."""
    assert report.verdict_line(report.build(_items(), {}, {"preset": "smoke"})) == "Verdict: PASS"
    items = _items()
    items["speedup"] = verdict("speedup", 0.8, 1.0, ">=", "slower", {})
    items["quality"] = dataclasses.replace(items["quality"], status="INCONCLUSIVE")
    items["convergence"] = dataclasses.replace(items["convergence"], status="INCONCLUSIVE")
    rec = report.build(items, {}, {"preset": "smoke"})
    assert report.verdict_line(rec) == "Verdict: FAIL (speedup FAIL; convergence, quality INCONCLUSIVE)"
    items["speedup"] = _items()["speedup"]
    assert report.verdict_line(report.build(items, {}, {"preset": "smoke"})) == (
        "Verdict: INCONCLUSIVE (convergence, quality INCONCLUSIVE)"
    )
    paths = report.write(rec, tmp_path)
    assert "## Verdict: FAIL (speedup FAIL; convergence, quality INCONCLUSIVE)" in paths["md"].read_text()
    assert "Decided by: speedup FAIL; convergence, quality INCONCLUSIVE." in paths["html"].read_text()
    assert report.console_lines(rec, "x")[0] == report.verdict_line(rec)


def test_report_files_are_written_and_the_html_is_self_contained(tmp_path):
    arms = {"pinn-jit-s0": {"metrics": {"amp_ssim": 0.8, "phase_ssim": 0.7}, "timing": {"compile_s": 9.0}}}
    rec = report.build(_items(), arms, {"preset": "smoke", "presets": {"x": {}}}, {"cpu": "test", "cores": 2})
    paths = report.write(rec, tmp_path)
    html = paths["html"].read_text()
    assert "Verdict" in html and "PASS" in html and "pinn-jit-s0" in html
    assert "http://" not in html and "https://" not in html  # nothing fetched from a network
    md = paths["md"].read_text()
    assert "| accuracy | PASS |" in md
    assert "presets" not in rec.config


def test_illumination_weighting_prefers_the_patch_that_lit_the_pixel():
    from ptycho.analysis.stitch import illumination_weight, stitch

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
        "pinn-jit-s0": [
            {"epoch": 1, "train_loss": 2.0, "val_loss": nan},
            {"epoch": 2, "train_loss": 1.0, "val_loss": nan},
        ],
        "pinn-off-s0": [
            {"epoch": 1, "train_loss": 9.0, "val_loss": nan},
            {"epoch": 2, "train_loss": 5.0, "val_loss": nan},
        ],
    }
    assert convergence(hist, 0.05).status == "FAIL"


def test_quality_with_an_undefined_ssim_fails_without_crashing():
    metrics = {
        "pinn-jit-s0": {"mean": {"amp_ssim": 0.8, "phase_ssim": None}},
        "pinn-off-s0": {"mean": {"amp_ssim": 0.8, "phase_ssim": None}},
    }
    record = quality(metrics, 0.02)
    assert record.status == "FAIL" and math.isnan(record.value)


def _full_items():
    """Items shaped like the pipeline's, with synthetic evidence."""
    items, evidence = _items(), {}
    evidence["accuracy"] = {
        "translation": [
            {"dtype": "float32", "batch": b, "shifts": "subpixel", "max_abs": 1e-7, "mean_abs": 1e-8} for b in (1, 7)
        ],
        "forward_model": {
            "max_abs": 2e-7,
            "mean_abs": 1e-8,
            "modes": {"jit": {"max_abs": 2e-7, "mean_abs": 1e-8}, "physics": {"max_abs": 1e-7, "mean_abs": 1e-8}},
        },
        "trained_inference": {
            "pinn-jit-s0": {
                "model": "pinn",
                "precision": "float32",
                "samples": 100,
                "comparisons": {
                    "jit": {
                        "compared": "jit vs off, fp32",
                        "precision": "float32",
                        "across_precisions": False,
                        "max_abs": 1e-6,
                        "mean_abs": 1e-7,
                        "limit": 1e-5,
                    }
                },
            }
        },
        "limits": {"float32": 1e-5},
    }
    evidence["gradients"] = {
        "models": {
            "pinn": {
                "loss_off": 1.0,
                "comparisons": {
                    "jit": {
                        "compared": "jit vs off, fp32",
                        "precision": "float32",
                        "across_precisions": False,
                        "limit": 1e-4,
                        "judged": "weights and inputs",
                        "worst": 3e-6,
                        "whole_weights": 3.2e-6,
                        "per_variable": {"conv2d/kernel": 1e-6, "conv2d/bias": 3e-6},
                        "inputs": 1e-6,
                        "loss": 1.0,
                        "loss_reference": 1.0,
                    }
                },
            }
        },
        "finite_differences": {"max_rel": 1e-8, "points": 8},
        "limits": {"float32": 1e-4},
    }
    evidence["convergence"] = {
        "pairs": {
            "pinn-s0-jit": {
                "mode": "jit",
                "final_val_loss": 1.0,
                "final_val_loss_off": 1.01,
                "relative_difference": 0.01,
                "decreased": {"pinn-jit-s0": True, "pinn-off-s0": True},
            }
        }
    }
    items["quality"] = quality(
        {
            "pinn-jit-s0": {"mean": {"amp_ssim": 0.8, "phase_ssim": 0.7}},
            "pinn-off-s0": {"mean": {"amp_ssim": 0.79, "phase_ssim": 0.7}},
        },
        0.02,
    )
    items["speedup"] = speedup(_bench(125, 100), 1.0)
    return {name: dataclasses.replace(item, evidence=evidence.get(name, item.evidence)) for name, item in items.items()}


def test_report_sections_show_the_evidence_of_every_item_and_embed_figures(tmp_path):
    from ptycho.study.figures.style import to_png
    from ptycho.study.figures.timing import speedup_bars

    png = to_png(speedup_bars(_bench(125, 100)))
    rec = report.build(_full_items(), {}, {"preset": "smoke"}, {"cpu": "test cpu", "cores": 2}, ("speedup",))
    paths = report.write(rec, tmp_path, {"speedup": png})
    html = paths["html"].read_text()
    for sid in ("verdict", "checklist", *checklist.names(), "machine"):
        assert f'<section id="{sid}">' in html
    assert html.count("data:image/png;base64,") == 1 and report.caption("speedup") in unescape(html)
    assert "conv2d/bias" in html and "trained pinn at inference" in html
    assert "SLOWER" in html.split('<section id="checklist">')[0]  # the plain sentence is at the top
    md = paths["md"].read_text()
    assert "## Speedup" in md and "95 % bootstrap intervals" in md and "PINN minus baseline" not in md
    assert "physics vs off" in md and "break-even steps alone" in md
    assert rec.figures == ("speedup",)


def test_every_figure_of_the_report_has_a_caption_for_snakemake_report():
    from pathlib import Path

    for stem, _, _ in report.figures():
        assert len(report.caption(stem)) > 40
    rules = (Path(__file__).resolve().parent.parent / "rules" / "report.smk").read_text()
    assert "from ptycho.study.report import figures" in rules  # the rule's outputs are the report's figures


def test_a_diverged_arm_fails_convergence_quality_and_the_verdict_with_its_reason(tmp_path):
    """A training that hit a NaN is recorded FAILED (last good state kept): the report
    shows the failed arm and why, instead of crashing or leaving it out."""
    reason = "loss became nan at epoch 3; the last good checkpoint (after epoch 2) is kept"
    hist = {"pinn-jit-s0": _history([3.0, 2.0]), "pinn-off-s0": _history([3.0, 2.0, 1.0])}
    conv = convergence(hist, 0.05, {"pinn-jit-s0": 4.0, "pinn-off-s0": 4.0}, {"pinn-jit-s0": reason})
    assert conv.status == "FAIL" and f"arm pinn-jit-s0 FAILED in training: {reason}" in conv.summary
    empty = convergence(
        {"pinn-jit-s0": [], "pinn-off-s0": _history([2.0, 1.0])}, 0.05, failed={"pinn-jit-s0": reason}
    )  # diverged before its first epoch ended
    assert empty.status == "FAIL" and math.isnan(empty.value)

    def m(a, p):
        return {"mean": {"amp_ssim": a, "phase_ssim": p}}

    qual = quality({"pinn-jit-s0": m(0.8, 0.7), "pinn-off-s0": m(0.8, 0.7)}, 0.02, {"pinn-jit-s0": reason})
    assert qual.status == "FAIL" and "last good state" in qual.summary
    items = _full_items()
    items["convergence"], items["quality"] = conv, qual
    arms = {
        "pinn-jit-s0": {"status": "FAILED", "failure": reason, "final": None, "timing": {"compile_s": None}},
        "pinn-off-s0": {"status": "FINISHED", "final": {"epoch": 3}, "timing": {"compile_s": 2.0}},
    }
    rec = report.build(items, arms, {"preset": "smoke"})
    assert rec.verdict == "FAIL" and rec.failed_arms == {"pinn-jit-s0": reason}
    paths = report.write(rec, tmp_path)
    top = paths["html"].read_text().split('<section id="checklist">')[0]
    assert f"Training FAILED for pinn-jit-s0: {reason}" in escape(top, quote=False) or reason in top
    assert f"FAILED: {reason}" in paths["md"].read_text()


def test_pipeline_cost_sums_the_jobs_benchmarks_per_step_and_spans_first_start_to_last_end(tmp_path):
    import os

    from ptycho.study.report import cost_line, cost_table, pipeline_cost

    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"

    def job(rel, wall, cpu, rss, end):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(header + f"{wall}\t0:00:{wall}\t{rss}\t1\t1\t1\t0\t0\t50\t{cpu}\n")
        os.utime(path, (end, end))

    job("train/pinn-off-s0.tsv", 100.0, 95.0, 900.0, end=1100.0)  # started at 1000
    job("train/pinn-jit-s0.tsv", 120.0, 110.0, 1200.0, end=1130.0)
    job("simulate.tsv", 10.0, 9.0, 300.0, end=1005.0)  # started at 995: the first
    (tmp_path / "stitch").mkdir()
    (tmp_path / "stitch" / "killed.tsv").write_text(header)  # a job killed mid-write: skipped
    cost = pipeline_cost(tmp_path)
    assert list(cost.steps) == ["train", "simulate"]  # largest first
    assert cost.to_json()["steps"]["train"] == {"jobs": 2, "wall_s": 220.0, "cpu_s": 205.0, "max_rss_mb": 1200.0}
    assert cost.span_s == pytest.approx(1130.0 - 995.0)
    assert cost.job_wall_s == pytest.approx(230.0)
    line = cost_line({"cost": cost.to_json()})  # a report's JSON reads into the record
    assert "2.2 min from its first job" in line and "train 3.7 min (2 jobs)" in line
    assert cost_table({"cost": cost.to_json()})[1][0][:2] == ["train", "2"]
    assert not pipeline_cost(tmp_path / "nothing") and pipeline_cost(tmp_path / "nothing").to_json() == {}
    assert cost_line({}) == ""


def test_convergence_across_seeds_compares_mean_final_losses_against_the_seed_spread():
    # The default study's run: one seed pair 9 % apart, the other 0.6 %: the means are
    # 4.3 % apart, inside the 5 % margin, but two pairs this unlike cannot show it: INCONCLUSIVE.
    hist = {
        "pinn-jit-s0": _history([0.09, 0.04987]),
        "pinn-off-s0": _history([0.09, 0.04562]),
        "pinn-jit-s1": _history([0.09, 0.04706]),
        "pinn-off-s1": _history([0.09, 0.04735]),
    }
    rec = convergence(hist, 0.05)
    c = rec.evidence["comparisons"]["pinn-jit"]
    assert c["difference"] == pytest.approx((0.04987 + 0.04706) / (0.04562 + 0.04735) - 1)
    assert rec.status == "INCONCLUSIVE" and rec.evidence["pairs"]["pinn-s0-jit"]["relative_difference"] > 0.09
    assert "final validation loss" in rec.summary and "2 vs 2 seeds" in rec.summary
    assert c["seeds_needed"] > 2 and f"{c['seeds_needed']:.0f} seeds per arm would settle it" in rec.summary
    # Every seed of the XLA arm about 20 % higher than off's (seeds matched: compared
    # pairwise): the 95 % interval lies beyond the margin.
    worse = dict(
        hist,
        **{
            "pinn-jit-s0": _history([0.09, 0.0555]),
            "pinn-jit-s1": _history([0.09, 0.0560]),
            "pinn-jit-s2": _history([0.09, 0.0565]),
            "pinn-off-s2": _history([0.09, 0.0470]),
        },
    )
    assert convergence(worse, 0.05).status == "FAIL"


def test_the_report_renders_seed_comparisons_read_back_from_json(tmp_path):
    """The report job reads the items' JSON, where NaN and infinity are null."""
    from ptycho.artifacts import read_json, write_json

    off = _seeds("pinn", "off", [0.85, 0.86, 0.85], [0.80, 0.83, 0.86])
    jit = _seeds("pinn", "jit", [0.85, 0.86, 0.86], [0.86, 0.86, 0.86])
    hist = {"pinn-jit-s0": _history([3.0, 2.0, 1.00]), "pinn-off-s0": _history([3.0, 2.0, 1.01])}
    one = convergence(hist, 0.05, {"pinn-jit-s0": 4.0, "pinn-off-s0": 4.0})  # one seed: no seeds_needed (NaN)
    items = _full_items()
    for name, rec in (("quality", quality({**off, **jit}, 0.02)), ("convergence", one)):
        write_json(tmp_path / f"{name}.json", rec.to_json())
        items[name] = ItemResult.from_json(read_json(tmp_path / f"{name}.json"))
    items["speedup"] = dataclasses.replace(
        items["speedup"], status="PASS"
    )  # no item fails: the verdict cannot say either way
    rec = report.build(items, {}, {"preset": "smoke"})
    assert rec.verdict == "INCONCLUSIVE"
    md = report.write(rec, tmp_path / "out")["md"].read_text()
    assert "INCONCLUSIVE" in md.split("## Accuracy")[0]  # named in the first lines
    assert "seeds needed" in md


def test_the_provenance_line_says_a_missing_commit_in_whole_words():
    line = report.provenance_line({"provenance": {"preset": "smoke", "git_commit": ""}, "generated_utc": "t"})
    assert "commit unknown (not a git checkout);" in line  # was cut to 12 characters like a hash
    line = report.provenance_line(
        {"provenance": {"preset": "smoke", "git_commit": "0123456789abcdef"}, "generated_utc": "t"}
    )
    assert "commit 0123456789ab;" in line


def test_the_benchmarks_cross_check_has_a_fixed_tolerance_and_says_disagree():
    """The report called 1208 ms against the trainings' 553-631 ms 'agreement': the range
    was widened by the bench's own IQR, which a contaminated bench makes huge."""
    from ptycho.study.bench.result import cross_check, cross_check_words

    def meta(mode, seed, step):
        return {
            "model": {"kind": "pinn"},
            "train": {"xla": mode, "seed": seed, "precision": "float32"},
            "timing": {"step_median_s": step},
        }

    metas = [meta("off", s, t) for s, t in enumerate((0.628, 0.553, 0.631))]
    metas += [meta("jit", s, t) for s, t in enumerate((0.529, 0.672, 0.674))]
    bench = {
        "arms": [
            {
                "model": "pinn",
                "mode": "off",
                "precision": "float32",
                "shared": {"step_s": {"median": 1.208, "iqr": 0.7}},
            },
            {
                "model": "pinn",
                "mode": "jit",
                "precision": "float32",
                "shared": {"step_s": {"median": 0.700, "iqr": 0.7}},
            },
        ]
    }
    checked = cross_check(bench, metas)
    assert not checked["off"].agree and checked["off"].ratio == pytest.approx(1.208 / 0.628)
    assert checked["jit"].agree  # 1.04x the trainings' median
    words = cross_check_words(checked, contaminated=True)
    assert words.startswith(
        "The benchmark's pipeline-schedule steps DISAGREE with the trainings' own for off, not within 25 %"
    )
    assert "CONTAMINATED" in words and "off 1208 ms vs 628/553/631 ms (1.92x)" in words
    assert cross_check_words({"jit": checked["jit"]}).startswith(
        "The benchmark's pipeline-schedule steps agree with the trainings' own within 25 %"
    )
