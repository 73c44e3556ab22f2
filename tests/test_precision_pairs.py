"""The precision axis in the seed-based items: each reduced precision is judged against
float32 in the same mode, each mode against off at the same precision (synthetic evidence)."""

from __future__ import annotations

from ptycho.study.checklist.convergence import convergence
from ptycho.study.checklist.quality import quality


def _metrics(name_of, values):
    return {name_of(s): {"mean": {"amp_ssim": a, "phase_ssim": p}} for s, (a, p) in enumerate(values)}


def test_quality_judges_bfloat16_against_float32_and_modes_at_each_precision():
    same = [(0.850, 0.900), (0.852, 0.902), (0.851, 0.901)]
    worse = [(0.750, 0.800), (0.752, 0.802), (0.751, 0.801)]  # bfloat16 0.1 lower, tight seeds
    arms = {
        **_metrics(lambda s: f"pinn-off-s{s}", same),
        **_metrics(lambda s: f"pinn-jit-s{s}", same),
        **_metrics(lambda s: f"pinn-off-bf16-s{s}", worse),
        **_metrics(lambda s: f"pinn-jit-bf16-s{s}", worse),
    }
    rec = quality(arms, 0.02)
    comparisons = rec.evidence["comparisons"]
    assert set(comparisons) == {"pinn-jit", "pinn-jit-bf16", "pinn-off-bf16-vs-fp32", "pinn-jit-bf16-vs-fp32"}
    assert comparisons["pinn-jit"]["amp_ssim"]["outcome"] == "NOT WORSE"
    assert comparisons["pinn-jit-bf16"]["amp_ssim"]["outcome"] == "NOT WORSE"  # jit vs off, both bfloat16
    diff = comparisons["pinn-off-bf16-vs-fp32"]["amp_ssim"]
    assert diff["outcome"] == "WORSE" and abs(diff["difference"] + 0.1) < 1e-9
    assert rec.status == "FAIL"
    assert "PINN bfloat16 - float32 (off) amplitude SSIM: -0.1000" in rec.summary
    assert "PINN jit - off (bfloat16) amplitude SSIM" in rec.summary
    assert set(rec.evidence["arm_differences"]) >= {"pinn-s0-off-bf16-vs-fp32", "pinn-s2-jit-bf16"}


def test_convergence_pairs_and_curves_keep_two_precisions_of_one_mode_apart():
    def hist(final):
        return [{"epoch": 1, "train_loss": 2.0, "val_loss": 2.0}, {"epoch": 2, "train_loss": final, "val_loss": final}]

    histories = {
        f"pinn-off{p}-s{s}": hist(final + 0.001 * s) for p, final in (("", 1.0), ("-bf16", 1.01)) for s in range(3)
    }
    rec = convergence(histories, 0.05, dict.fromkeys(histories, 3.0))
    ev = rec.evidence
    assert set(ev["comparisons"]) == {"pinn-off-bf16-vs-fp32"} and rec.status == "PASS"
    assert ev["pairs"]["pinn-s1-off-bf16-vs-fp32"]["reference"] == "pinn-off-s1"
    assert ev["pairs"]["pinn-s1-off-bf16-vs-fp32"]["precision"] == "mixed_bfloat16"
    assert set(ev["curves"]["pinn-s0"]) == {"off", "off-bf16"}
