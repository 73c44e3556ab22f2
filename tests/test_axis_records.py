"""Each axis is one record: an XLA mode or a precision added by its record alone, here in a
test module, is parsed, named, paired, planned by the workflow (a real Snakemake too),
compiled and trained as its fields say, and drawn and reported in words.

The new mode, ``jit2``, is ``jit`` under another name; the new precision,
``mixed_bfloat16_copy`` (``bf16c``), is ``mixed_bfloat16`` under another name. Neither
has a row in ``ptycho.study.presentation``: they render with its defaults.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ptycho.nets.precision
import ptycho.nets.xla

ROOT = Path(__file__).resolve().parent.parent
#: The one record of each addition.
JIT2 = ptycho.nets.xla.Mode("jit2", "whole step jit-compiled, under another name (a test mode)", jit_step=True)
BF16C = ptycho.nets.precision.Precision(
    "mixed_bfloat16_copy",
    "bf16c",
    "bfloat16 compute over float32 variables, under another name (a test precision)",
    "mixed_bfloat16",
    "bfloat16",
    2.0**-8,
    native_flags=("avx512_bf16", "amx_bf16"),
)


def register(setitem=None) -> None:
    """Add the two records to their registries (``setitem``: pytest's ``monkeypatch.setitem``,
    undone after the test; None: for good, in a process of its own)."""
    setitem = setitem or (lambda mapping, key, value: mapping.__setitem__(key, value))
    setitem(ptycho.nets.xla.MODES, JIT2.name, JIT2)
    setitem(ptycho.nets.precision.PRECISIONS, BF16C.name, BF16C)


@pytest.fixture
def added(monkeypatch):
    register(monkeypatch.setitem)


@pytest.fixture
def base():
    import yaml

    return yaml.safe_load((ROOT / "config.yaml").read_text())


def test_a_mode_and_a_precision_added_by_their_records_are_parsed_named_and_paired(added):
    from ptycho.nets.precision import EPSILON, SHORT, Hardware, is_native, parse_precision
    from ptycho.nets.xla import compared, mode_of, parse_mode
    from ptycho.study import arms

    assert parse_mode("jit2") == "jit2" and mode_of("jit2") is JIT2
    assert "jit2" in ptycho.nets.xla.COMPARED and compared(["off", "jit2"]) == ["jit2"]
    assert parse_precision("bf16c") == parse_precision("mixed_bfloat16_copy") == BF16C.name
    assert SHORT[BF16C.name] == "bf16c" and EPSILON[BF16C.name] == 2.0**-8
    assert not is_native(BF16C.name, Hardware(("avx2",))) and is_native(BF16C.name, Hardware(("avx512_bf16",)))
    for name in ("pinn-jit2-s0", "baseline-jit2-bf16c-s1", "pinn-off-bf16c-s2"):
        assert re.fullmatch(arms.PATTERN, name) and arms.Arm.parse(name).name == name
    assert arms.arm_name("pinn", "jit2", 0, "bf16c") == "pinn-jit2-bf16c-s0"
    names = arms.matrix(["pinn"], ["off", "jit2"], [0], ["float32", BF16C.name])
    assert [p.key for p in arms.pairs(names)] == [
        "pinn-s0-jit2",
        "pinn-s0-jit2-bf16c",
        "pinn-s0-off-bf16c-vs-fp32",
        "pinn-s0-jit2-bf16c-vs-fp32",
    ]
    # Words: the presentation table's defaults (no row for either).
    assert arms.Arm("pinn", "jit2", 0, BF16C.name).label() == "PINN, XLA jit2, mixed_bfloat16_copy, seed 0"
    assert arms.Pair(arms.Arm("pinn", "jit2", 0), arms.Arm("pinn", "off", 0)).words() == "PINN jit2 - off"


def test_the_workflow_plans_the_arms_of_a_mode_and_a_precision_added_by_their_records(added, base):
    from ptycho.study.workflow import arms, bench_lists, checked_lists, resolve

    lists = {"xla": ["off", "jit2"], "precision": ["float32", BF16C.name]}
    cfg = resolve(base, {**lists, "seeds": [0], "bench": lists})
    assert cfg["precision"] == ["float32", BF16C.name]  # the config's choices are the registries'
    assert [a for a in arms(cfg) if a.startswith("pinn-")] == [
        "pinn-off-s0",
        "pinn-jit2-s0",
        "pinn-off-bf16c-s0",
        "pinn-jit2-bf16c-s0",
    ]
    assert checked_lists(cfg) == (["off", "jit2"], ["float32", BF16C.name])
    assert bench_lists(cfg)[1:] == (["off", "jit2"], ["float32", BF16C.name])


def test_a_real_snakemake_plans_the_jobs_of_a_mode_and_a_precision_added_by_their_records(tmp_path):
    """Snakemake in a process where the records were added before it read the Snakefile, as
    an edit of ptycho/nets/xla.py and ptycho/nets/precision.py would add them (a dry run)."""
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r}); import test_axis_records; "
        "test_axis_records.register(); from snakemake.cli import main; main()"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, "-n", "-p", "--cores", "2", "all",
         "--config", f"results={tmp_path}/r", "allow_results_outside=true", "xla=[off,jit2]",
         f"precision=[float32,{BF16C.name}]", "seeds=[0]",
         f'bench={{"xla": [off, jit2], "precision": [float32, {BF16C.name}]}}'],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    trained = set(re.findall(r"models/([\w-]+)/model\.json", out.stdout))
    assert {"pinn-jit2-s0", "pinn-jit2-bf16c-s0", "pinn-off-bf16c-s0", "pinn-off-s0"} <= trained
    assert re.search(r"bench .*--modes off jit2 --precisions float32 mixed_bfloat16_copy", out.stdout)
    assert re.search(r"check accuracy .*--modes jit2 .*--precisions float32 mixed_bfloat16_copy", out.stdout)


def _tiny_trainer(mode: str, precision: str):
    from ptycho.config import SimulationConfig
    from ptycho.data.simulate import simulate_split
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig, Trainer, prepare

    ds = simulate_split(
        SimulationConfig(
            n=16, object_size=40, n_lines=40, n_objects_train=1, stride_train=4, nphotons=1e6, probe_kind="defocused"
        ),
        "train",
    )
    data = prepare(ds, "pinn")
    trainer = Trainer(
        ModelConfig(kind="pinn", filters=2, mixing=1),
        TrainConfig(batch_size=4, xla=mode, seed=3, precision=precision),
        ds.n,
        data.inputs.shape[-1],
        ds.probe,
        data.physics,
    )
    idx = np.arange(4)
    return trainer, (data.inputs[idx], data.offsets[idx], {k: v[idx] for k, v in data.targets.items()})


def test_a_mode_and_a_precision_added_by_their_records_train_as_their_fields_say(added):
    """jit2 compiles the whole step (one trace, no separate head) and bf16c computes in
    bfloat16 over float32 variables: each trains exactly as the record it copies."""
    losses = {}
    for mode, precision in (("jit", "mixed_bfloat16"), ("jit2", BF16C.name)):
        trainer, batch = _tiny_trainer(mode, precision)
        losses[mode] = [float(trainer.train_step(*batch)) for _ in range(3)]
        assert trainer.traces == {"train": 1, "eval": 0, "physics": 0}
        assert getattr(trainer.train_step, "_jit_compile", None) is True  # the tf.function's own flag
        assert trainer.network.layers[1].dtype_policy.name == "mixed_bfloat16"
        assert all(v.dtype == "float32" for v in trainer.variables)
    assert losses["jit2"] == losses["jit"]


def _bench_record():
    """A benchmark record as the bench writes it, for off and jit2 at float32 and bf16c."""
    from ptycho.study.bench import ratios
    from ptycho.study.stats import quartiles

    rng = np.random.default_rng(0)

    def arm(mode, precision, ms):
        steps = list(ms * 1e-3 * (1 + 0.02 * rng.standard_normal(20)))
        return {
            "model": "pinn",
            "mode": mode,
            "precision": precision,
            "compile_s": 2.0,
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

    arms = [
        arm("off", "float32", 100),
        arm("jit2", "float32", 80),
        arm("off", BF16C.name, 70),
        arm("jit2", BF16C.name, 60),
    ]
    return {
        "arms": arms,
        "ratios": ratios(arms),
        "contexts": {"alone": {"jobs": 1, "threads": 2, "how": "alone"}},
        "modes": ["off", "jit2"],
        "precisions": ["float32", BF16C.name],
        "machine": {"cpu": "test cpu", "cores": 2, "load_average": [0.1, 0.2, 0.3], "tensorflow": "2.x"},
    }


def test_a_mode_and_a_precision_added_by_their_records_are_drawn_and_reported_in_words(added, tmp_path):
    from ptycho.study import checklist, report
    from ptycho.study.arms import Arm
    from ptycho.study.checklist.quality import quality
    from ptycho.study.checklist.result import verdict
    from ptycho.study.checklist.speedup import speedup
    from ptycho.study.figures import style
    from ptycho.study.figures.curves import loss_curves
    from ptycho.study.figures.timing import speedup_bars
    from ptycho.study.presentation import MODE_LOOKS

    # Drawn: jit2 gets the next Okabe-Ito colour no mode has, bf16c a paler one and its own marker fill.
    colour = style.arm_colour("jit2")
    assert colour in style.OKABE_ITO and colour not in {look.colour for look in MODE_LOOKS.values()}
    assert style.PRECISION_STYLES[BF16C.name].fillstyle not in {"full", "none", "bottom"}
    history = [{"train": [3.0, 2.0, 1.0], "val": [3.1, 2.1, 1.1]}]
    curves = {Arm("pinn", m, 0, p): history[0] for m in ("off", "jit2") for p in ("float32", BF16C.name)}
    fig = loss_curves(curves)
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    style.close(fig)
    assert "XLA jit2, mixed_bfloat16_copy, validation" in labels and "XLA jit2, float32, training" in labels
    bench = _bench_record()
    style.close(speedup_bars(bench))

    # Reported: the speedup and quality items and the report name them.
    metrics = {
        Arm("pinn", m, s, p).name: {"mean": {"amp_ssim": 0.80 + 0.001 * s, "phase_ssim": 0.90 - 0.001 * s}}
        for m in ("off", "jit2")
        for p in ("float32", BF16C.name)
        for s in (0, 1, 2)
    }
    items = {
        name: verdict(name, 0.0, 1.0, "<=", f"{name} summary", {"pairs": {}} if name == "convergence" else {})
        for name in checklist.names()
    }
    items["quality"] = quality(metrics, 0.02)
    items["speedup"] = speedup(bench, 1.0)
    rec = report.build(items, {}, {"preset": "smoke"}, {"cpu": "test cpu", "cores": 2})
    md = report.write(rec, tmp_path)["md"].read_text()
    assert "PINN jit2 - off" in md and "PINN mixed_bfloat16_copy - float32 (jit2)" in md
    assert "jit2 at bf16c" in md
    json.dumps(rec.to_json())  # the record stays JSON
