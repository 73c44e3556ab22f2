"""The report's figures, on small synthetic inputs (no TensorFlow, no training)."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from ptycho.errors import PtychoError
from ptycho.study import solver_view
from ptycho.study.arms import Arm
from ptycho.study.bench.record import MEASUREMENT_WORDS
from ptycho.study.figures import curves, images, quality, style, timing

ARMS = tuple(map(Arm.parse, ("pinn-jit-s0", "pinn-off-s0", "baseline-jit-s0", "baseline-off-s0")))
PJ, PO = Arm("pinn", "jit", 0), Arm("pinn", "off", 0)
JIT, OFF, PHYSICS = "#0072B2", "#D55E00", "#CC79A7"
BF16 = "mixed_bfloat16"
#: float32 and bfloat16 arms of both models: every mode pair and every precision pair.
MIXED = tuple(
    map(
        Arm.parse,
        (
            "pinn-off-s0",
            "pinn-jit-s0",
            "pinn-off-bf16-s0",
            "pinn-jit-bf16-s0",
            "baseline-off-s0",
            "baseline-off-bf16-s0",
        ),
    )
)


def _truth(shape=(16, 20)):
    rng = np.random.default_rng(0)
    return rng.uniform(0.2, 1.0, shape), rng.uniform(-1.5, 1.5, shape)


def _arms(truth, names=ARMS, noise=0.05):
    rng = np.random.default_rng(1)
    return {
        n: (
            truth[0] + noise * rng.standard_normal(truth[0].shape),
            truth[1] + noise * rng.standard_normal(truth[1].shape),
        )
        for n in names
    }


def _curves():
    ep = np.arange(1, 9)
    return {
        PJ: {"train": list(-2 + 3 * np.exp(-ep / 3)), "val": list(-1.9 + 3 * np.exp(-ep / 3))},
        PO: {"train": list(-2 + 3 * np.exp(-ep / 3)), "val": list(-1.88 + 3 * np.exp(-ep / 3))},
        Arm("baseline", "jit", 0): {"train": list(np.exp(-ep)), "val": list(1.1 * np.exp(-ep))},
        Arm("baseline", "off", 0): {"train": list(np.exp(-ep)), "val": list(1.1 * np.exp(-ep))},
    }


def _bench_arms():
    rng = np.random.default_rng(2)

    def arm(m, mode, base, c):
        out = {
            "model": m,
            "mode": mode,
            "step_samples_s": list(base + 0.001 * rng.standard_normal(12)),
            "compile_s": c,
            "components": {
                "network": {"median": base * 0.6},
                "physics": {"median": base * 0.3},
                "optimizer": {"median": base * 0.05},
            },
        }
        out["step_s"] = {"median": float(np.median(out["step_samples_s"]))}
        out["shared"] = {"step_samples_s": list(3 * base + 0.002 * rng.standard_normal(15))}
        return out

    return [
        arm(m, x, base, c)
        for m, x, base, c in (
            ("pinn", "jit", 0.040, 9.5),
            ("pinn", "off", 0.055, 1.5),
            ("pinn", "physics", 0.050, 4.0),
            ("baseline", "jit", 0.010, 3.0),
            ("baseline", "off", 0.011, 0.7),
        )
    ]


def _mixed_bench_arms():
    """:func:`_bench_arms` with a bfloat16 arm beside each float32 one (faster by a fifth)."""
    out = []
    for a in _bench_arms():
        steps = [0.8 * t for t in a["step_samples_s"]]
        bf16 = dict(a, precision=BF16, step_samples_s=steps, step_s={"median": float(np.median(steps))})
        out += [dict(a, precision="float32"), bf16]
    return out


def _ratios():
    """``bench.json["ratios"]`` as the benchmark writes it (entries that are not measurements included)."""
    nan = math.nan
    return {
        "pinn": {
            "jit": {
                "mode": "jit",
                "train_step_alone": {"ratio": 1.4, "low": 1.2, "high": 1.6},
                "compile_extra_s": 3.0,
                "inference": {"ratio": nan, "low": nan, "high": nan},
            },
            "off": {"mode": "off", "padded_vs_naive": 1.1},
        },
        "baseline": {
            "jit": {"mode": "jit", "train_step_alone": {"ratio": 0.9, "low": nan, "high": nan}, "padded_vs_naive": 1.0}
        },
    }


def _mixed_ratios():
    """``bench.json["ratios"]`` of a record with precisions: keyed by arm, each entry with its mode and precision."""
    entry = {"ratio": 1.5, "low": 1.4, "high": 1.6}
    return {
        "pinn": {
            "off": {"mode": "off", "precision": "float32", "padded_vs_naive": 1.1},
            "jit": {
                "mode": "jit",
                "precision": "float32",
                "train_step_alone": {"ratio": 1.2, "low": 1.1, "high": 1.3},
                "xla": {"train_step_alone": {"ratio": 1.2, "low": 1.1, "high": 1.3}},
            },
            "off-bf16": {
                "mode": "off",
                "precision": BF16,
                "train_step_alone": {"ratio": 1.3, "low": 1.2, "high": 1.4},
                "vs_float32": {"train_step_alone": {"ratio": 1.3, "low": 1.2, "high": 1.4}},
            },
            "jit-bf16": {
                "mode": "jit",
                "precision": BF16,
                "train_step_alone": entry,
                "xla": {"train_step_alone": {"ratio": 1.15, "low": 1.05, "high": 1.25}},
            },
        }
    }


def _frcs():
    f = np.linspace(0, 0.5, 11)
    return {n: {"freq": f, "amp": np.exp(-8 * f), "phase": np.exp(-6 * f)} for n in ARMS}


def _images(fig):
    return [im for ax in fig.axes for im in ax.images]


def _texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts] + [t.get_text() for t in fig.texts]


@pytest.fixture(autouse=True)
def no_leaked_pyplot_figures():
    import matplotlib.pyplot as plt

    yield
    assert plt.get_fignums() == []


# ------------------------------------------------------------------ style contract
def test_palette_gives_every_xla_mode_one_okabe_ito_colour():
    from ptycho.nets.xla import MODES

    assert list(style.MODE_COLOURS) == list(MODES)  # every mode has one (a new one the next free colour)
    assert set(style.MODE_COLOURS.values()) <= set(style.OKABE_ITO)
    assert len(set(style.MODE_COLOURS.values())) == len(MODES)
    assert style.arm_colour("jit") == style.XLA_COLOUR == JIT and style.arm_colour("off") == style.NOXLA_COLOUR == OFF
    assert style.arm_colour(None) == style.UNKNOWN_ARM_COLOUR
    assert (style.AMPLITUDE_CMAP, style.PHASE_CMAP, style.ERROR_CMAP) == ("cividis", "cividis", "PuOr")


def test_every_precision_has_one_style_float32_plain_the_others_told_apart_without_colour():
    from matplotlib.colors import to_rgb

    from ptycho.nets.precision import PRECISIONS

    assert list(style.PRECISION_STYLES) == list(PRECISIONS)  # every precision has one (a new one a default)
    f32 = style.PRECISION_STYLES["float32"]
    assert (f32.lighten, f32.fillstyle, f32.hatch) == (0.0, "full", "")  # drawn as before the axis
    reduced = [s for p, s in style.PRECISION_STYLES.items() if p != "float32"]
    assert len({s.fillstyle for s in reduced} | {"full"}) == len(PRECISIONS)  # greyscale: the marker's fill
    assert len({s.hatch for s in reduced} | {""}) == len(PRECISIONS)  # greyscale: the hatching
    assert style.arm_colour("jit", "float32") == JIT and style.precision_marks("float32", "o", 10) == {}
    lighter = style.arm_colour("jit", BF16)
    assert lighter != JIT and all(b >= a for a, b in zip(to_rgb(JIT), to_rgb(lighter), strict=True))
    hatches = {style.arm_hatch(m, p) for m in style.MODEL_HATCHES for p in PRECISIONS}
    assert len(hatches) == len(style.MODEL_HATCHES) * len(PRECISIONS)  # model and precision never collide


def test_importing_the_figure_modules_does_not_import_matplotlib():
    modules = ", ".join(
        f"ptycho.study.figures.{m}" for m in ("style", "inputs", "images", "curves", "timing", "quality")
    )
    code = f"import sys, {modules}; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_building_and_rendering_changes_no_global_matplotlib_state():
    import matplotlib

    before = dict(matplotlib.rcParams)
    style.to_png(timing.speedup_bars({"ratios": _ratios()}))
    assert dict(matplotlib.rcParams) == before


def test_message_figure_says_its_text():
    fig = style.message_figure("no solver run")
    assert _texts(fig) == ["no solver run"]
    assert style.to_png(fig).startswith(b"\x89PNG")


# ------------------------------------------------------------------ image figures
def test_reconstruction_grid_has_truth_then_each_arm_with_colour_bars_and_truth_limits():
    truth = _truth()
    fig = images.reconstruction_grid(truth, _arms(truth))
    shown = _images(fig)
    assert len(shown) == 2 * (1 + len(ARMS))
    assert all(im.colorbar is not None for im in shown)
    amp, phase = shown[0::2], shown[1::2]
    assert {im.get_clim() for im in amp} == {(truth[0].min(), truth[0].max())}
    assert {im.get_clim() for im in phase} == {(truth[1].min(), truth[1].max())}
    assert [im.get_cmap().name for im in shown[:2]] == ["cividis", "cividis"]
    titles = [im.axes.get_title() for im in amp]
    assert titles == [
        "Ground truth: amplitude",
        "PINN, no XLA (off): amplitude",
        "PINN, XLA jit: amplitude",
        "Baseline, no XLA (off): amplitude",
        "Baseline, XLA jit: amplitude",
    ]
    assert phase[0].colorbar.ax.get_ylabel() == "phase (rad)"


def test_image_rows_follow_the_arm_order_and_name_the_seed_when_there_are_several():
    truth = _truth((8, 8))
    names = ("baseline-off-s1", "pinn-jit-s1", "pinn-off-s0", "pinn-jit-s0", "pinn-off-s1")
    fig = images.reconstruction_grid(truth, _arms(truth, tuple(map(Arm.parse, names))))
    titles = [im.axes.get_title() for im in _images(fig)[0::2]]
    assert titles == [
        "Ground truth: amplitude",
        "PINN, no XLA (off), seed 0: amplitude",
        "PINN, no XLA (off), seed 1: amplitude",
        "PINN, XLA jit, seed 0: amplitude",
        "PINN, XLA jit, seed 1: amplitude",
        "Baseline, no XLA (off), seed 1: amplitude",
    ]


def test_image_rows_of_several_precisions_go_by_model_precision_mode_and_name_the_precision():
    truth = _truth((8, 8))
    for builder in (images.reconstruction_grid, images.error_maps):
        fig = builder(truth, _arms(truth, tuple(reversed(MIXED))))
        titles = [im.axes.get_title().split(":")[0] for im in _images(fig)[0::2]]
        assert titles[-len(MIXED) :] == [
            "PINN, no XLA (off)",
            "PINN, XLA jit",
            "PINN, no XLA (off), bfloat16",
            "PINN, XLA jit, bfloat16",
            "Baseline, no XLA (off)",
            "Baseline, no XLA (off), bfloat16",
        ]
        assert style.to_png(fig).startswith(b"\x89PNG")


@pytest.mark.parametrize(
    "key", ["pinn-jit-s0", ("pinn", "jit", 0), Arm("pinn", "fast", 0), Arm("pinn", "jit", 0, "float64")]
)
def test_image_figures_take_arms_not_names(key):
    truth = _truth((8, 8))
    with pytest.raises(ValueError, match="arms: "):
        images.reconstruction_grid(truth, {key: truth})


def test_reconstruction_grid_uses_a_cyclic_map_only_for_a_phase_spanning_a_full_turn():
    amp = np.ones((8, 8))
    wrapped = np.linspace(-np.pi, np.pi, 64).reshape(8, 8)
    fig = images.reconstruction_grid((amp, wrapped), {})
    assert _images(fig)[1].get_cmap().name == "twilight"
    assert _images(fig)[1].get_clim() == (-np.pi, np.pi)


def test_error_maps_share_symmetric_limits_per_column_and_wrap_the_phase_error():
    truth = (np.ones((8, 8)), np.full((8, 8), 3.1))
    arms = {
        PJ: (np.full((8, 8), 1.1), np.full((8, 8), -3.1)),
        PO: (np.full((8, 8), 0.8), np.full((8, 8), 3.0)),
    }
    fig = images.error_maps(truth, arms)
    shown = _images(fig)
    assert len(shown) == 4 and all(im.colorbar is not None for im in shown)
    assert all(im.get_cmap().name == "PuOr" for im in shown)
    amp_lims = {im.get_clim() for im in shown[0::2]}
    assert len(amp_lims) == 1 and next(iter(amp_lims)) == pytest.approx((-0.2, 0.2))
    xla_phase_error = shown[3].get_array()  # rows: off, then jit
    assert np.allclose(xla_phase_error, 2 * np.pi - 6.2)  # -3.1 - 3.1 wrapped into (-pi, pi]
    assert shown[1].get_clim() == pytest.approx((-0.1, 0.1))  # the larger |error| of the two arms


@pytest.mark.parametrize("builder", [images.reconstruction_grid, images.error_maps])
@pytest.mark.parametrize(
    "bad, match",
    [
        ({PJ: (np.ones((8, 9)), np.ones((8, 9)))}, "differs from the truth"),
        ({PJ: (np.ones((8, 8)), np.ones((8, 9)))}, "differ in shape"),
        ({PJ: (np.ones(8), np.ones(8))}, "must be 2-D"),
        ({PJ: (np.ones((8, 8), complex), np.ones((8, 8)))}, "complex"),
        ({PJ: np.ones((8, 8))}, "expected a pair"),
    ],
)
def test_image_figures_reject_structurally_wrong_arrays(builder, bad, match):
    with pytest.raises(ValueError, match=match):
        builder((np.ones((8, 8)), np.zeros((8, 8))), bad)


def test_image_figures_require_the_truth():
    with pytest.raises(ValueError, match="truth"):
        images.reconstruction_grid(None, {})


def test_a_missing_arm_is_drawn_as_na_and_nan_pixels_do_not_crash():
    truth = _truth((8, 8))
    arm = (np.full((8, 8), np.nan), truth[1])
    fig = images.error_maps(truth, {PJ: None, PO: arm})
    assert len(_images(fig)) == 2
    assert "n/a (no reconstruction)" in _texts(fig)
    amp_error = next(ax for ax in fig.axes if ax.get_title().startswith("PINN, no XLA (off): amplitude"))
    assert amp_error.get_title().endswith("RMSE n/a")
    assert style.to_png(fig).startswith(b"\x89PNG")


# -------------------------------------------------------------------- loss curves
def test_loss_curves_one_panel_per_model_and_seed_mode_colours_and_train_dashed():
    fig = curves.loss_curves(_curves())
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == 2
    pinn = panels[0]
    final_jit, final_off = -1.9 + 3 * np.exp(-8 / 3), -1.88 + 3 * np.exp(-8 / 3)
    rel = abs(final_jit - final_off) / abs(final_off)
    assert pinn.get_title().startswith("PINN, seed 0") and pinn.get_title().endswith(f"from off: {rel:.2%}")
    styles = {(line.get_color(), line.get_linestyle()) for line in pinn.lines}
    assert styles == {(JIT, "--"), (JIT, "-"), (OFF, "--"), (OFF, "-")}
    assert all(line.get_xdata()[0] == 1 for line in pinn.lines)
    assert len(fig.legends) == 1 and len(fig.legends[0].get_texts()) == 4


def test_loss_curves_panels_go_by_seed_then_model():
    ep = [3.0, 2.0, 1.0]
    arms = ("baseline-off-s1", "pinn-off-s1", "baseline-off-s0", "pinn-off-s0")
    fig = curves.loss_curves({Arm.parse(n): {"val": ep} for n in arms})
    titles = [ax.get_title().split("\n")[0] for ax in fig.axes if ax.get_visible()]
    assert titles == ["PINN, seed 0", "Baseline, seed 0", "PINN, seed 1", "Baseline, seed 1"]


def test_loss_curves_log_scale_only_for_positive_losses_spanning_a_decade():
    fig = curves.loss_curves(_curves())
    by_title = {ax.get_title().split("\n")[0]: ax.get_yscale() for ax in fig.axes if ax.get_visible()}
    assert by_title == {"PINN, seed 0": "linear", "Baseline, seed 0": "log"}
    narrow = {PJ: {"val": [2.0, 1.5]}, PO: {"val": [2.0, 1.4]}}
    assert curves.loss_curves(narrow).axes[0].get_yscale() == "linear"


def test_loss_curves_tolerate_missing_series_nulls_and_empty_evidence():
    fig = curves.loss_curves({PJ: {"val": [1.0, None, 0.5]}, Arm("pinn", "jit", 1): {"train": []}})
    assert len(fig.axes[0].lines) == 1
    assert "n/a (no loss history)" in _texts(fig)
    assert "n/a" in fig.axes[0].get_title()  # no off arm: no relative difference
    assert curves.loss_curves({}).axes[0].texts[0].get_text().startswith("no ")
    with pytest.raises(ValueError, match="curves\\['pinn-jit-s0'\\]"):
        curves.loss_curves({PJ: [1.0, 2.0]})


def _line_style(line):
    """What tells a line apart: colour, line style, marker and its fill."""
    return line.get_color(), line.get_linestyle(), line.get_marker(), line.get_fillstyle(), line.get_markerfacecolor()


def test_loss_curves_draw_each_precision_of_a_mode_apart_and_compare_it_with_float32():
    ep = np.arange(1, 9)
    fig = curves.loss_curves(
        {
            a: {"train": list((1 + 0.1 * i) * np.exp(-ep)), "val": list((1.1 + 0.1 * i) * np.exp(-ep))}
            for i, a in enumerate(MIXED)
        }
    )
    pinn, baseline = (ax for ax in fig.axes if ax.get_visible())
    assert len(pinn.lines) == 2 * 4 and len({_line_style(line) for line in pinn.lines}) == 2 * 4
    bf16 = [line for line in pinn.lines if line.get_color() == style.arm_colour("jit", BF16)]
    assert len(bf16) == 2 and {line.get_markerfacecolor() for line in bf16} == {"white"}  # hollow markers
    # final val losses 1.1 (off), 1.2 (jit), 1.3 (off bf16), 1.4 (jit bf16), times e^-8:
    # mode pairs jit vs off at each precision, precision pairs bf16 vs float32 in each mode
    largest_mode, largest_precision = max(1.2 / 1.1, 1.4 / 1.3) - 1, max(1.3 / 1.1, 1.4 / 1.2) - 1
    assert pinn.get_title().endswith(f"from off: {largest_mode:.2%}, from float32: {largest_precision:.2%}")
    assert baseline.get_title().endswith(f"from off: n/a, from float32: {1.6 / 1.5 - 1:.2%}")
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(labels) == len(set(labels)) == 8  # (off, jit) x (float32, bfloat16) x (training, validation)
    assert "XLA jit, bfloat16, validation" in labels and "no XLA (off), float32, training" in labels
    assert "every precision vs float32" in fig.texts[0].get_text()
    assert style.to_png(fig).startswith(b"\x89PNG")


# --------------------------------------------------------------- step-time figure
def test_step_time_distributions_one_column_per_model_one_row_per_context_with_compile_time():
    arms = _bench_arms()
    fig = timing.step_time_distributions({"arms": arms})
    assert len(fig.axes) == 4  # 2 models x (alone, shared)
    pinn, pinn_shared = fig.axes[0], fig.axes[2]
    assert pinn.get_title().startswith("PINN, alone") and pinn_shared.get_title().startswith(
        "PINN, pipeline's schedule"
    )
    edges = [b.get_edgecolor()[:3] for b in pinn.patches]
    from matplotlib.colors import to_rgb

    assert edges == [pytest.approx(to_rgb(c)) for c in (OFF, JIT, PHYSICS)]  # mode order off, jit, ..., physics
    points = [c for c in pinn.collections if len(c.get_offsets()) == 12]
    assert len(points) == 3
    jit = next(a for a in arms if a["model"] == "pinn" and a["mode"] == "jit")
    assert np.allclose(np.sort(points[1].get_offsets()[:, 1]), np.sort(np.array(jit["step_samples_s"]) * 1e3))
    labels = [t.get_text() for t in pinn.get_xticklabels()]
    assert "compile 1.5 s" in labels[0] and "compile 9.5 s" in labels[1]
    off = next(a for a in arms if a["model"] == "pinn" and a["mode"] == "off")
    ratio = np.median(off["step_samples_s"]) / np.median(jit["step_samples_s"])
    assert f"jit, {ratio:.2f}× off" in pinn.get_title()
    assert len([c for c in pinn_shared.collections if len(c.get_offsets()) == 15]) == 3


def test_step_time_distributions_draw_quartiles_alone_and_missing_arms_as_na():
    arms = [
        {"model": "pinn", "mode": "jit", "step_s": {"median": 0.04, "q1": 0.038, "q3": 0.043}, "compile_s": None},
        {"model": "baseline", "mode": "off", "step_samples_s": [0.01, 0.011]},
    ]
    fig = timing.step_time_distributions({"arms": arms})
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert "not measured" in labels[0] and "40 ms" in labels[1] and "compile n/a" in labels[1]
    assert "n/a" in fig.axes[0].get_title()


@pytest.mark.parametrize(
    "bad, error, match",
    [
        ({"model": "pinn"}, PtychoError, "not a benchmark record"),
        ([{"model": "pinn"}], PtychoError, "not a benchmark record \\(KeyError: 'mode'\\)"),
        ([{"model": "pinn", "mode": "fast"}], ValueError, "arms\\[0\\]: 'mode' must be one of"),
        ([{"model": "pinn", "mode": "jit"}, {"model": "pinn", "mode": "jit"}], ValueError, "a second pinn jit arm"),
        (
            [{"model": "pinn", "mode": "jit"}, {"model": "pinn", "mode": "jit", "precision": "float32"}],
            ValueError,
            "a second",
        ),
        ([{"model": "pinn", "mode": "jit", "precision": "bf16"}], ValueError, "'precision' must be one of"),
    ],
)
def test_step_time_distributions_reject_structurally_wrong_arms(bad, error, match):
    with pytest.raises(error, match=match):
        timing.step_time_distributions({"arms": bad})


def test_step_time_distributions_draw_every_precision_of_a_mode_apart_and_name_it():
    from matplotlib.colors import to_hex

    fig = timing.step_time_distributions({"arms": _mixed_bench_arms()})
    pinn = fig.axes[0]
    labels = [t.get_text().split("\n")[0] for t in pinn.get_xticklabels()]
    assert labels == [
        "off at float32",
        "jit at float32",
        "physics at float32",
        "off at bfloat16",
        "jit at bfloat16",
        "physics at bfloat16",
    ]
    looks = {(to_hex(b.get_edgecolor()), b.get_hatch() or "") for b in pinn.patches}  # the boxes
    assert len(looks) == len(labels)  # every arm's box differs in colour or hatching
    assert ("#0072b2", "") in looks and (style.arm_colour("jit", BF16), "....") in looks
    points = [c for c in pinn.collections if len(c.get_offsets()) == 12]
    assert len(points) == len(labels)
    # XLA's own effect: the fastest mode against off at ITS precision, never against off at float32
    assert "fastest XLA mode: jit at" in pinn.get_title()
    title = pinn.get_title()
    assert ("at float32, " in title and "× off at float32" in title) or "× off at bfloat16" in title
    assert "and precision" in fig.texts[0].get_text()
    assert style.to_png(fig).startswith(b"\x89PNG")


def test_bench_figures_read_a_record_without_precisions_as_float32_and_draw_it_as_before():
    old = _bench_arms()
    new = [dict(a, precision="float32") for a in old]
    for draw in (timing.step_time_distributions, timing.component_bars):
        assert style.to_png(draw({"arms": old})) == style.to_png(draw({"arms": new}))
    ratios = {m: {k: dict(r, precision="float32") for k, r in per.items()} for m, per in _ratios().items()}
    assert style.to_png(timing.speedup_bars({"ratios": _ratios()})) == style.to_png(
        timing.speedup_bars({"ratios": ratios})
    )


def test_component_bars_stack_the_three_parts_per_mode_and_mark_the_whole_step():
    arms = _bench_arms()
    fig = timing.component_bars({"arms": arms})
    ax = fig.axes[0]
    bars = [p for p in ax.patches if p.get_height() == pytest.approx(0.62)]
    assert len(bars) == 3 * len(arms)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0].startswith("PINN, off") and labels[-1].startswith("Baseline, jit")
    jit = next(a for a in arms if a["model"] == "pinn" and a["mode"] == "jit")
    widths = sorted(p.get_width() for p in bars if p.get_y() == pytest.approx(len(arms) - 2 - 0.31))
    assert widths == pytest.approx(
        sorted(1e3 * jit["components"][k]["median"] for k in ("network", "physics", "optimizer"))
    )
    assert (
        timing.component_bars({"arms": [{"model": "pinn", "mode": "off"}]})
        .axes[0]
        .texts[0]
        .get_text()
        .startswith("no ")
    )


def test_component_bars_name_the_precision_of_each_row():
    fig = timing.component_bars({"arms": _mixed_bench_arms()})
    labels = [t.get_text().split("\n")[0] for t in fig.axes[0].get_yticklabels()]
    assert labels[:2] == ["PINN, off at float32", "PINN, jit at float32"] and "PINN, jit at bfloat16" in labels
    assert len(set(labels)) == len(labels) == 10
    assert "and precision" in fig.axes[0].get_title()


# ----------------------------------------------------------------- speed-up bars
def test_speedup_bars_nan_ratio_draws_no_bar_and_nan_interval_no_error_bar():
    fig = timing.speedup_bars({"ratios": _ratios()})
    ax = fig.axes[0]
    bars = [p for p in ax.patches if p.get_height() == pytest.approx(0.56)]
    assert len(bars) == 2  # the NaN ratio has none
    assert len(ax.containers) == 2 + 1  # two bar containers, one error bar (the NaN interval has none)
    assert ax.get_xscale() == "log" and ax.get_xlim()[0] < 1 < ax.get_xlim()[1]
    assert any(line.get_xdata()[0] == 1.0 for line in ax.lines)
    texts = [t.strip() for t in _texts(fig)]
    assert {"no change", "◀ slower than off", "faster than off ▶", "n/a"} <= set(texts)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [  # the record's order: model, mode, measurement; entries that are not measurements left out
        "PINN jit, train step alone\n1.40× [1.20, 1.60]",
        "PINN jit, inference\nn/a",
        "Baseline jit, train step alone\n0.90×",
    ]
    assert [t.get_position()[1] for t in ax.get_yticklabels()] == [2, 1, 0]  # first label on top


def test_speedup_bars_label_every_measurement_in_words_from_the_records_fields():
    entry = {"ratio": 1.2, "low": 1.1, "high": 1.3}
    fig = timing.speedup_bars(
        {"ratios": {"pinn": {"auto": {"mode": "auto", **dict.fromkeys(MEASUREMENT_WORDS, entry)}}}}
    )
    labels = [t.get_text().split("\n")[0] for t in fig.axes[0].get_yticklabels()]
    assert labels == [
        "PINN auto, train step alone",
        "PINN auto, train step, pipeline's schedule",
        "PINN auto, inference",
    ]


def test_speedup_bars_colour_the_mode_and_hatch_the_baseline():
    fig = timing.speedup_bars(
        {
            "ratios": {
                "pinn": {"physics": {"mode": "physics", "train_step_alone": {"ratio": 2.0, "low": 1.5, "high": 2.5}}},
                "baseline": {"jit": {"mode": "jit", "train_step_alone": {"ratio": 0.5, "low": 0.4, "high": 0.6}}},
            }
        }
    )
    from matplotlib.colors import to_hex

    bars = {round(p.get_width() + 1.0, 6): p for p in fig.axes[0].patches if p.get_height() == pytest.approx(0.56)}
    assert to_hex(bars[2.0].get_edgecolor()) == PHYSICS.lower() and bars[2.0].get_hatch() in (None, "")
    assert to_hex(bars[0.5].get_edgecolor()) == JIT.lower() and bars[0.5].get_hatch() == "///"


def test_speedup_bars_draw_xla_against_off_at_the_same_precision_and_precision_apart():
    from matplotlib.colors import to_hex

    fig = timing.speedup_bars({"ratios": _mixed_ratios()})
    ax = fig.axes[0]
    labels = [t.get_text().split("\n")[0] for t in ax.get_yticklabels()]
    assert labels == [  # XLA's own bars only: no precision's gain among them
        "PINN jit at float32 vs off at float32, train step alone",
        "PINN jit at bfloat16 vs off at bfloat16, train step alone",
    ]
    bars = [p for p in ax.patches if p.get_height() == pytest.approx(0.56)]
    looks = [(to_hex(b.get_edgecolor()), b.get_hatch() or "") for b in bars]
    assert looks == [(JIT.lower(), ""), (style.arm_colour("jit", BF16), "....")]
    assert [b.get_width() + 1.0 for b in bars] == pytest.approx([1.2, 1.15])
    assert ax.get_title() == "XLA's own effect: each XLA mode vs off at the same precision"
    assert {"◀ slower than off", "faster than off ▶"} <= {t.strip() for t in _texts(fig)}
    with pytest.raises(ValueError, match="'precision' must be one of"):
        timing.speedup_bars({"ratios": {"pinn": {"jit": {"precision": "half", "train_step_alone": {"ratio": 1.0}}}}})


def test_the_precision_chart_compares_each_precision_with_float32_in_the_same_mode():
    fig = timing.speedup_bars({"ratios": _mixed_ratios()}, axis="precision")
    ax = fig.axes[0]
    labels = [t.get_text().split("\n")[0] for t in ax.get_yticklabels()]
    assert labels == ["PINN off: bfloat16 vs float32, train step alone"]
    assert ax.get_title() == "Precision's own effect: each precision vs float32 in the same mode"
    only_fp32 = timing.speedup_bars(
        {"ratios": {"pinn": {"jit": {"mode": "jit", "train_step_alone": {"ratio": 1.2, "low": 1.1, "high": 1.3}}}}},
        axis="precision",
    )
    assert "no reduced precision measured against float32" in " ".join(_texts(only_fp32))


def test_speedup_bars_all_nan_or_empty_still_render_and_wrong_entries_raise():
    nan = math.nan
    only_nan = {"ratios": {"pinn": {"jit": {"mode": "jit", "inference": {"ratio": nan}}}}}
    assert style.to_png(timing.speedup_bars(only_nan)).startswith(b"\x89PNG")
    assert style.to_png(timing.speedup_bars({})).startswith(b"\x89PNG")
    for broken in (
        {"ratios": {"pinn": {"jit": {"mode": "jit", "train_step_alone": 1.3}}}},
        {"ratios": {"pinn": [1.3]}},
        {"ratios": [1.3]},
        [1.3],
    ):
        with pytest.raises(PtychoError, match="not a benchmark record"):
            timing.speedup_bars(broken)


# -------------------------------------------------------------------- FRC curves
def test_frc_curves_two_panels_colour_by_arm_style_by_model_and_thresholds():
    fig = curves.frc_curves(_frcs())
    amp, phase = fig.axes
    names = {"PINN, XLA jit", "PINN, no XLA (off)", "Baseline, XLA jit", "Baseline, no XLA (off)"}
    lines = [line for line in amp.lines if line.get_label() in names]
    assert [(c.get_label(), c.get_color(), c.get_linestyle()) for c in lines] == [
        ("PINN, no XLA (off)", OFF, "-"),
        ("PINN, XLA jit", JIT, "-"),
        ("Baseline, no XLA (off)", OFF, "--"),
        ("Baseline, XLA jit", JIT, "--"),
    ]
    levels = sorted(line.get_ydata()[0] for line in amp.lines if line not in lines)
    assert levels == pytest.approx([1 / 7, 0.5])
    assert {"0.5", "1/7 ≈ 0.143"} <= {t.get_text() for t in phase.texts}
    assert amp.get_xlim() == (0.0, 0.5)


def test_frc_curves_skip_missing_pieces_and_reject_mismatched_lengths():
    fig = curves.frc_curves({PJ: {"freq": [0, 0.25, 0.5], "amp": [1, 0.5, 0.1]}, PO: None})
    assert "n/a (no FRC curve)" in [t.get_text() for t in fig.axes[1].texts]
    with pytest.raises(ValueError, match="'amp' has 2 values but 'freq' has 3"):
        curves.frc_curves({PJ: {"freq": [0, 0.25, 0.5], "amp": [1, 0.5], "phase": [1, 0.5, 0.1]}})


def test_frc_curves_mark_a_reduced_precision_and_keep_float32_lines_plain():
    f = np.linspace(0, 0.5, 11)
    fig = curves.frc_curves({a: {"freq": f, "amp": np.exp(-8 * f), "phase": np.exp(-6 * f)} for a in MIXED})
    amp = fig.axes[0]
    lines = {line.get_label(): line for line in amp.lines if not line.get_label().startswith("_")}
    assert list(lines) == [a.label(False) for a in style.in_order(MIXED, "arms")]
    assert len({_line_style(line) for line in lines.values()}) == len(MIXED)
    assert {lines[a.label(False)].get_marker() for a in MIXED if a.precision == "float32"} == {"None"}
    assert lines["Baseline, no XLA (off), bfloat16"].get_marker() == style.MODEL_MARKERS["baseline"]
    legend = fig.axes[1].get_legend()  # inside the figure: never clipped by the PNG's edge
    assert legend is not None and len(legend.get_texts()) == len(MIXED) and not fig.legends
    png = style.to_png(
        curves.frc_curves({a: {"freq": f, "amp": np.exp(-8 * f), "phase": np.exp(-6 * f)} for a in MIXED})
    )
    assert png.startswith(b"\x89PNG")


def test_a_reduced_precision_is_pale_only_beside_its_own_mode_at_float32():
    f = np.linspace(0, 0.5, 11)
    bf16 = [a for a in ARMS if a.model == "pinn"]
    bf16 = [a._replace(precision=BF16) for a in bf16]  # only bfloat16 PINN arms: full, distinct colours
    fig = curves.frc_curves({a: {"freq": f, "amp": np.exp(-8 * f), "phase": np.exp(-6 * f)} for a in bf16})
    colours = {line.get_label(): line.get_color() for line in fig.axes[0].lines if not line.get_label().startswith("_")}
    assert sorted(colours.values()) == sorted(style.arm_colour(a.mode) for a in bf16)
    assert style.arm_colour("jit", BF16) != style.arm_colour("jit", BF16, pale=False) == style.arm_colour("jit")


def test_render_gives_png_and_svg_of_one_figure():
    files = style.render(curves.frc_curves(_frcs()))
    assert files["png"].startswith(b"\x89PNG") and b"<svg" in files["svg"][:400]


# --------------------------------------------------------------------- rendering
def test_to_png_returns_png_bytes_of_the_figure_size_at_the_requested_dpi():
    fig = curves.frc_curves(_frcs())
    width_in, height_in = fig.get_size_inches()
    data = style.to_png(fig, dpi=100)
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (round(width_in * 100), round(height_in * 100))
    assert 10_000 < len(data) < 2_000_000


def test_save_png_writes_the_file_atomically_and_closes_pyplot_figures(tmp_path):
    import matplotlib.pyplot as plt

    fig = plt.figure()  # a pyplot-registered figure is closed too
    fig.add_subplot().plot([0, 1])
    target = tmp_path / "sub" / "fig.png"
    style.save_png(fig, target)
    assert target.read_bytes().startswith(b"\x89PNG")
    assert [p.name for p in target.parent.iterdir()] == ["fig.png"]
    assert plt.get_fignums() == []


def test_every_figure_renders():
    truth = _truth()
    for fig in (
        images.reconstruction_grid(truth, _arms(truth)),
        images.error_maps(truth, _arms(truth)),
        curves.loss_curves(_curves()),
        timing.step_time_distributions({"arms": _bench_arms()}),
        timing.component_bars({"arms": _bench_arms()}),
        timing.speedup_bars({"ratios": _ratios()}),
        curves.frc_curves(_frcs()),
    ):
        assert style.to_png(fig).startswith(b"\x89PNG")


def _compared(truth_amp, truth_phase, crop):
    r0, r1, c0, c1 = crop
    return {
        "amp": truth_amp[r0:r1, c0:c1] * 2,
        "phase": truth_phase[r0:r1, c0:c1] - 1,
        "truth_amp": truth_amp[r0:r1, c0:c1],
        "truth_phase": truth_phase[r0:r1, c0:c1],
        "crop": list(crop),
    }


def test_common_window_cuts_every_arm_to_the_pixels_all_of_them_scored():
    """An arm registered beyond the shift allowance is scored on a smaller window; the
    figures show the shared window, aligned in truth coordinates."""
    rng = np.random.default_rng(0)
    truth_amp, truth_phase = rng.random((40, 40)), rng.random((40, 40))
    truth, shown = images.common_window(
        {PJ: _compared(truth_amp, truth_phase, (8, 32, 8, 32)), PO: _compared(truth_amp, truth_phase, (10, 32, 8, 31))}
    )
    np.testing.assert_array_equal(truth[0], truth_amp[10:32, 8:31])
    np.testing.assert_array_equal(truth[1], truth_phase[10:32, 8:31])
    assert set(shown) == {PJ, PO}
    for amp, phase in shown.values():
        np.testing.assert_array_equal(amp, truth_amp[10:32, 8:31] * 2)
        np.testing.assert_array_equal(phase, truth_phase[10:32, 8:31] - 1)
    images.reconstruction_grid(truth, shown)  # one shape throughout: draws
    with pytest.raises(ValueError, match="do not overlap"):
        images.common_window(
            {
                PJ: _compared(truth_amp, truth_phase, (0, 10, 0, 10)),
                PO: _compared(truth_amp, truth_phase, (20, 30, 0, 10)),
            }
        )


def test_quality_vs_time_draws_one_line_per_recipe_in_minute_order_with_the_target():
    points = [
        {"recipe": "a", "minutes": 3.0, "amp_ssim": 0.7, "phase_ssim": 0.8},
        {"recipe": "a", "minutes": 1.0, "amp_ssim": 0.6, "phase_ssim": 0.7},
        {"recipe": "b", "minutes": 2.0, "amp_ssim": 0.65, "phase_ssim": 0.75},
    ]
    fig = quality.quality_vs_time(points, target=0.85)
    amp, phase = fig.axes
    lines = [ln for ln in amp.get_lines() if ln.get_label() in ("a", "b")]
    assert [ln.get_label() for ln in lines] == ["a", "b"]
    np.testing.assert_allclose(lines[0].get_xdata(), [1.0, 3.0])  # sorted by minutes
    np.testing.assert_allclose([ln.get_ydata() for ln in phase.get_lines() if ln.get_label() == "a"][0], [0.7, 0.8])
    assert any(np.allclose(ln.get_ydata(), 0.85) for ln in amp.get_lines())  # the target line
    assert style.to_png(fig).startswith(b"\x89PNG")


def test_the_docs_quality_vs_time_record_has_the_commands_and_the_default_recipe():
    import json
    from pathlib import Path

    record = json.loads((Path(__file__).resolve().parent.parent / "docs" / "quality-vs-time.json").read_text())
    assert record["commands"] and all(
        {"recipe", "minutes", "amp_ssim", "phase_ssim"} <= set(p) for p in record["points"]
    )
    assert any("default recipe" in p["recipe"] for p in record["points"])


# ------------------------------------------------------------- the job's inputs
def _meta(name, losses):
    arm = Arm.parse(name)
    return {
        "model": {"kind": arm.model},
        "train": {"xla": arm.mode, "seed": arm.seed, "precision": arm.precision},
        "history": [{"train_loss": t, "val_loss": v} for t, v in losses],
    }


def _inputs(tmp_path, *, stitched=(), metrics=(), model_jsons=(), bench="bench.json", **kw):
    from ptycho.study.results import StudyResults

    return StudyResults(
        dataset=str(tmp_path / "test.h5"),
        stitched=[str(tmp_path / p) for p in stitched],
        metrics=[str(tmp_path / p) for p in metrics],
        models=[str(tmp_path / p) for p in model_jsons],
        bench=str(tmp_path / bench),
        **kw,
    )


def test_inputs_read_nothing_until_asked(tmp_path):
    inputs = _inputs(tmp_path, stitched=["pinn-jit-s0.npz"], metrics=["pinn-jit-s0.json"])  # none of them exists
    assert inputs.stitched == (str(tmp_path / "pinn-jit-s0.npz"),) and solver_view.entry(inputs) is None


def test_inputs_key_the_frc_curves_and_the_loss_curves_by_arm(tmp_path):
    from ptycho.artifacts import write_json

    f = [0.0, 0.25, 0.5]
    for name in ("pinn-jit-s0", "pinn-off-s0"):
        write_json(
            tmp_path / f"{name}.json",
            {
                "mean": {},
                "per_image": [{"frc_freq": f, "amp_frc_curve": [1, 0.5, 0.2], "phase_frc_curve": [1, 0.4, 0.1]}],
            },
        )
    metas = {"pinn-jit-s0": [(3, 4), (1, 2)], "pinn-off-s0": [(3, 4), (2, 3)], "baseline-jit-s0": [(1, 1)]}
    for name, losses in metas.items():
        write_json(tmp_path / f"{name}.model.json", _meta(name, losses))
    inputs = _inputs(
        tmp_path, metrics=["pinn-jit-s0.json", "pinn-off-s0.json"], model_jsons=[f"{n}.model.json" for n in metas]
    )
    assert inputs.frc[PJ] == {"freq": f, "amp": [1, 0.5, 0.2], "phase": [1, 0.4, 0.1]} and set(inputs.frc) == {PJ, PO}
    assert set(inputs.histories) == set(map(Arm.parse, metas))
    # only arms of a (mode, off) pair: the baseline has no off arm
    assert inputs.loss_curves == {PO: {"train": [3, 2], "val": [4, 3]}, PJ: {"train": [3, 1], "val": [4, 2]}}
    assert style.to_png(curves.loss_curves(inputs.loss_curves)).startswith(b"\x89PNG")


def test_inputs_give_the_loss_curves_of_every_arm_of_a_mode_or_a_precision_pair(tmp_path):
    from ptycho.artifacts import write_json

    names = ("pinn-off-s0", "pinn-off-bf16-s0", "baseline-jit-bf16-s0", "baseline-jit-s0", "baseline-auto-s0")
    for name in names:
        write_json(tmp_path / f"{name}.model.json", _meta(name, [(2, 3), (1, 2)]))
    inputs = _inputs(tmp_path, model_jsons=[f"{n}.model.json" for n in names])
    # no off arm for the baseline: its precision pair is drawn, its auto arm (no pair) is not
    assert set(inputs.loss_curves) == set(map(Arm.parse, names[:4]))
    assert style.to_png(curves.loss_curves(inputs.loss_curves)).startswith(b"\x89PNG")


def test_inputs_compare_each_stitched_arm_with_the_truth(tmp_path, pair):
    from ptycho.artifacts import write_arrays
    from ptycho.data.dataset import write_dataset
    from ptycho.errors import PtychoError

    write_dataset(tmp_path / "test.h5", pair["test"])
    truth = pair["test"].ground_truth(0)
    write_arrays(tmp_path / "pinn-jit-s0.npz", images=truth[None])
    compared = _inputs(tmp_path, stitched=["pinn-jit-s0.npz"]).compared
    assert set(compared) == {PJ} and compared[PJ]["amp"].shape == compared[PJ]["truth_amp"].shape
    write_arrays(tmp_path / "pinn-off-s0.npz", images=truth[None, 1:])
    with pytest.raises(PtychoError, match="stitched images do not match the objects of .*; re-run stitch"):
        _ = _inputs(tmp_path, stitched=["pinn-off-s0.npz"]).compared
    write_arrays(tmp_path / "mystery.npz", images=truth[None])
    with pytest.raises(PtychoError, match="mystery.npz: the file is not named after an arm"):
        _ = _inputs(tmp_path, stitched=["mystery.npz"]).compared


def test_inputs_say_which_job_to_rerun(tmp_path):
    from ptycho.artifacts import write_json
    from ptycho.errors import PtychoError

    write_json(tmp_path / "pinn-jit-s0.json", {"mean": {}, "per_image": [{}]})
    write_json(tmp_path / "bench.json", {"contexts": {}})
    inputs = _inputs(tmp_path, metrics=["pinn-jit-s0.json"])
    with pytest.raises(PtychoError, match="no FRC curves in these metrics .*; re-run 'ptycho evaluate'"):
        _ = inputs.frc
    with pytest.raises(PtychoError, match="bench.json: not a benchmark result; pass the JSON written by 'ptycho bench"):
        _ = inputs.benchmark
    write_json(tmp_path / "bench.json", {"arms": [], "ratios": {}})
    record = _inputs(tmp_path).benchmark
    assert record.arms == () and record.ratios == {} and record.to_json() == {"arms": [], "ratios": {}}


def test_inputs_give_the_solver_view_each_networks_metrics_and_inference_rate(tmp_path, monkeypatch):
    from ptycho.artifacts import write_arrays, write_json
    from ptycho.errors import PtychoError
    from ptycho.study import solver_view

    write_json(tmp_path / "pinn-jit-s0.json", {"mean": {"amp_ssim": 0.9}, "per_image": [{}]})
    write_arrays(tmp_path / "pinn-jit-s0.npz", seconds=np.float64(2.0), patterns=np.int64(64))
    write_json(tmp_path / "solve.json", {"runs": [], "engine": "numpy", "objects": 1, "patterns": 64})
    seen = {}
    monkeypatch.setattr(solver_view, "summarise", lambda solve, warm, arms: seen.setdefault("arms", arms))
    inputs = _inputs(
        tmp_path,
        metrics=["pinn-jit-s0.json"],
        solver=[str(tmp_path / "solve.json")],
        reconstructions=[str(tmp_path / "pinn-jit-s0.npz")],
    )
    arms = solver_view.entry(inputs)
    assert {name: arm.to_json() for name, arm in arms.items()} == {
        "pinn-jit-s0": {"metrics": {"amp_ssim": 0.9}, "infer_patterns_per_s": 32.0}
    }
    write_json(tmp_path / "solve.json", {"runs": []})
    with pytest.raises(PtychoError, match="not a solver record"):
        _ = solver_view.entry(_inputs(tmp_path, solver=[str(tmp_path / "solve.json")]))
