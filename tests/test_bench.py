"""The benchmark's parts that need no worker process: its statistics (``ptycho.study.stats``),
the machine record and foreign-load monitor (psutil), the ratios of every (mode, precision)
arm, the one table builder of a bench record with its text rendering, its MLflow runs, and
the speedup item judged over every arm."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest

from ptycho.nets.xla import REFERENCE
from ptycho.study import stats
from ptycho.study.bench import (
    ForeignLoad,
    arm_runs,
    fastest,
    fastest_overall,
    format_table,
    machine_info,
    ratios,
    tables,
)
from ptycho.study.bench import machine as mach
from ptycho.study.bench.roofline import achieved
from ptycho.study.checklist.speedup import speedup
from ptycho.study.report.record import StudyReport
from ptycho.study.tables import to_text

T95_2 = 4.302652729911275  #: Student's t, 97.5 % quantile, 2 degrees of freedom


# ------------------------------------------------------------------ statistics
def test_quartiles_and_iqr_of_known_samples():
    q = stats.quartiles([5.0, 1.0, 4.0, 2.0, 3.0])
    assert q == {"median": 3.0, "q1": 2.0, "q3": 4.0, "iqr": 2.0, "n": 5}
    assert stats.iqr([5.0, 1.0, 4.0, 2.0, 3.0]) == 2.0
    assert stats.iqr(np.array([1.0, 2.0, 3.0, 4.0])) == pytest.approx(1.5)  # 3.25 - 1.75
    empty = stats.quartiles([])
    assert empty["n"] == 0 and all(math.isnan(empty[k]) for k in ("median", "q1", "q3", "iqr"))
    assert math.isnan(stats.iqr(np.array([])))


def test_bootstrap_ratio_of_known_samples():
    same = stats.bootstrap_ratio([0.2, 0.2, 0.2], [0.1, 0.1, 0.1])
    assert same == {"ratio": 2.0, "low": 2.0, "high": 2.0, "level": 0.95, "resamples": 2000}
    r = stats.bootstrap_ratio([1.0, 2.0, 3.0, 4.0, 100.0], [1.0, 1.0, 2.0])
    assert r["ratio"] == 3.0  # median 3 over median 1: medians, so the outlier does not count
    assert r["low"] <= r["ratio"] <= r["high"]
    assert r == stats.bootstrap_ratio([1.0, 2.0, 3.0, 4.0, 100.0], [1.0, 1.0, 2.0])  # seeded: reproducible
    one = stats.bootstrap_ratio([1.0], [2.0, 2.0])
    assert one["ratio"] == 0.5 and math.isnan(one["low"]) and math.isnan(one["high"]) and one["resamples"] == 0
    assert math.isnan(stats.bootstrap_ratio([], [1.0])["ratio"])


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((10.0, 2.0, 0.08, 0.10), 400.0),  # 8 s extra / 20 ms saved per step
        ((1.0, 2.0, 0.08, 0.10), 0.0),  # compiles faster and steps faster
        ((2.0, 2.0, 0.10, 0.10), 0.0),  # no extra, no gain
        ((10.0, 2.0, 0.12, 0.10), math.inf),  # slower steps: never repaid
        ((10.0, 2.0, 0.10, 0.10), math.inf),  # equal steps: never repaid
        ((1.0, 2.0, 0.12, 0.10), math.inf),  # compiles faster but steps slower
    ],
)
def test_break_even_steps(args, expected):
    assert stats.break_even_steps(*args) == pytest.approx(expected)


def test_break_even_steps_without_a_time_is_nan():
    assert math.isnan(stats.break_even_steps(math.nan, 2.0, 0.1, 0.1))
    assert math.isnan(stats.break_even_steps(1.0, 2.0, math.inf, 0.1))


def test_seed_comparison_pools_unmatched_seeds_and_gives_one_of_three_outcomes():
    c = stats.seed_comparison({1: 1.2, 0: 1.0}, {2: 1.1, 3: 1.3}, threshold=0.05)
    assert c.seeds_mode == (0, 1) and c.seeds_off == (2, 3) and c.design == "unpaired"
    assert c.mean_mode == pytest.approx(1.1) and c.mean_off == pytest.approx(1.2)
    assert c.difference == pytest.approx(-0.1)
    assert c.spread == pytest.approx(0.2) and c.margin == 0.05  # the margin is the threshold, never the spread
    sd = math.sqrt((0.01 + 0.01 + 0.01 + 0.01) / 2)  # pooled, 2 degrees of freedom
    assert c.sd == pytest.approx(sd)
    assert c.low == pytest.approx(-0.1 - T95_2 * sd) and c.high == pytest.approx(-0.1 + T95_2 * sd)
    # the 95 % interval reaches inside the margin and the 90 % one past it: neither shown
    assert c.outcome == "INCONCLUSIVE" and not c.within and not c.equivalent
    # beyond the margin, more seeds could show a difference: the smallest number that would
    n = c.seeds_needed
    assert n == stats.seeds_needed(-0.1, sd, 0.05) and 2 < n < stats.MAX_SEEDS
    h95 = stats._half_widths(sd, int(n), int(n))[1]
    assert 0.1 - h95 > 0.05 and 0.1 - stats._half_widths(sd, int(n) - 1, int(n) - 1)[1] <= 0.05


def test_matched_seeds_are_compared_pairwise_so_a_shared_seed_effect_cancels():
    # Seed 1 is 0.05 better than seed 0 in both arms (its luck), the arms differ by 0.002
    # at every seed: pooled, the seed spread would swamp the difference; paired, it is
    # EQUIVALENT within 0.02 with two seeds.
    mode, off = {0: 0.852, 1: 0.902}, {0: 0.850, 1: 0.899}
    c = stats.seed_comparison(mode, off, threshold=0.02)
    assert c.design == "paired" and c.outcome == "EQUIVALENT"
    assert c.sd == pytest.approx(np.std([0.002, 0.003], ddof=1))  # of the per-seed differences
    t90_1 = 6.313751514675041  # scipy.stats.t.ppf(0.95, 1): one degree of freedom from two pairs
    assert c.high90 == pytest.approx(0.0025 + t90_1 * c.sd / math.sqrt(2))
    pooled = stats.seed_comparison(mode, {2: 0.850, 3: 0.899}, threshold=0.02)
    assert pooled.design == "unpaired" and pooled.outcome == "INCONCLUSIVE"
    # Seeds that do not match (one arm lacks seed 1) fall back to the pooled comparison.
    assert stats.seed_comparison(mode, {0: 0.850, 2: 0.899}, 0.02).design == "unpaired"
    # The seeds needed follow the design: paired needs fewer here.
    assert stats.seeds_needed(0.01, 0.01, 0.02, "paired") < stats.seeds_needed(0.01, 0.05, 0.02, "unpaired")


def test_where_the_seed_spread_comes_from_is_split_between_the_seed_and_the_arms():
    """Issue 45, item 2: a value is its seed's effect (initial weights, batch order, shared
    by an arm and its reference) plus the arm's own remainder (its arithmetic). Simulated
    with a known split, the seed's share of one arm's variance is recovered, and the words
    and the report's table say it."""
    from ptycho.study.report.items.seeds import source_table

    rng = np.random.default_rng(0)
    n, seed_sd, own_sd = 400, 0.03, 0.01  # the seed's variance is 0.9 of the whole
    luck = rng.normal(0.85, seed_sd, n)
    arm = dict(enumerate(luck + rng.normal(0, own_sd, n)))
    ref = dict(enumerate(luck + rng.normal(0, own_sd, n)))
    c = stats.seed_comparison(arm, ref, threshold=0.02)
    expected = seed_sd**2 / (seed_sd**2 + own_sd**2)
    assert c.design == "paired" and c.seed_share == pytest.approx(expected, abs=0.03)
    assert c.seed_sd == pytest.approx(math.hypot(seed_sd, own_sd), rel=0.1)
    # Trainings whose seeds share nothing (the numerics scatter them as much as a new seed):
    # no share for pairing to remove.
    apart = stats.seed_comparison(
        dict(enumerate(rng.normal(0.85, 0.03, n))), dict(enumerate(rng.normal(0.85, 0.03, n))), 0.02
    )
    assert apart.seed_share == pytest.approx(0.0, abs=0.1)
    # Arms that differ by nothing but a constant: every bit of the spread is the seed's.
    same = stats.seed_comparison({0: 0.80, 1: 0.86, 2: 0.83}, {0: 0.79, 1: 0.85, 2: 0.82}, 0.02)
    assert same.seed_share == 1.0 and same.sd == pytest.approx(0.0, abs=1e-12)
    assert "the seed itself (initial weights, batch order) is 100% of one arm's seed-to-seed variance" in same.words()
    # Unpaired, one seed, a side without variation, a yardstick: no split to read.
    assert math.isnan(stats.seed_comparison({0: 0.8, 1: 0.9}, {2: 0.8, 3: 0.9}, 0.02).seed_share)
    assert math.isnan(stats.seed_comparison({0: 0.8}, {0: 0.9}, 0.02).seed_share)
    assert math.isnan(stats.seed_comparison({0: 0.8, 1: 0.9}, {0: 0.0, 1: 0.0}, 0.02).seed_share)
    assert all(math.isnan(v) for v in stats.variance_split({0: 1.0, 1: 2.0, 2: 3.0}, {0: 5.0, 1: 5.0, 2: 5.0}))
    assert math.isnan(stats.seed_comparison({0: 0.8, 1: 0.9}, {0: 0.7, 1: 0.9}, 0.02, yardstick=True).seed_share)
    assert "the seed itself" not in stats.seed_comparison({0: 0.8}, {0: 0.9}, 0.02).words()
    # The record keeps it (an older record without it reads as no split), and the table shows it.
    back = stats.SeedComparison.from_json(json.loads(json.dumps(same.to_json())))
    assert back.seed_share == 1.0 and back.seed_sd == pytest.approx(same.seed_sd)
    old = {k: v for k, v in same.to_json().items() if k != "seed_sd"}
    assert math.isnan(stats.SeedComparison.from_json(old).seed_share)
    old = stats.SeedComparison.from_json(old)
    title, header, rows = source_table({("pinn-jit", "amp ssim"): same, ("pinn-auto", "amp ssim"): old})
    assert "Where the seed-to-seed spread comes from" in title and len(header) == len(rows[0])
    assert len(rows) == 1 and rows[0][:3] == ["pinn-jit", "amp ssim", "3"] and rows[0][5:] == ["100%", "0%"]
    assert source_table({("pinn-auto", "amp ssim"): old}) is None


def test_seed_comparison_is_equivalent_only_when_the_90_percent_interval_is_inside_the_margin():
    tight = stats.seed_comparison({0: 0.851, 1: 0.852, 2: 0.850}, {0: 0.850, 1: 0.851, 2: 0.852}, 0.02)
    assert tight.outcome == "EQUIVALENT" and -0.02 <= tight.low90 and tight.high90 <= 0.02
    assert math.isnan(tight.seeds_needed)  # settled: nothing more needed
    apart = stats.seed_comparison({0: 0.95, 1: 0.951, 2: 0.952}, {0: 0.85, 1: 0.851, 2: 0.852}, 0.02)
    assert apart.outcome == "DIFFERENT" and apart.low > 0.02
    assert tight.reach() == pytest.approx(max(abs(tight.low90), abs(tight.high90)))
    assert stats.overall(["EQUIVALENT", "EQUIVALENT"]) == "EQUIVALENT"
    assert stats.overall(["EQUIVALENT", "INCONCLUSIVE"]) == "INCONCLUSIVE"
    assert stats.overall(["INCONCLUSIVE", "DIFFERENT"]) == "DIFFERENT" and stats.overall([]) == "INCONCLUSIVE"


def test_seed_comparison_with_one_seed_is_inconclusive():
    c = stats.seed_comparison({0: 0.90}, {0: 0.93}, threshold=0.05)
    assert math.isnan(c.sd) and math.isnan(c.spread) and c.margin == 0.05
    assert c.outcome == "INCONCLUSIVE" and c.within and math.isnan(c.seeds_needed)
    assert stats.seed_comparison({0: 0.80}, {0: 0.93}, threshold=0.05).outcome == "INCONCLUSIVE"


def test_a_seed_comparison_is_one_record_through_json():
    """The checks write it, the report reads it back: the same record, NaN as null."""
    import json

    for c in (
        stats.seed_comparison({0: 0.852, 1: 0.902}, {0: 0.850, 1: 0.899}, 0.02),
        stats.seed_comparison({0: 0.90}, {0: 0.93}, 0.05, stats.NON_INFERIORITY, label="amplitude", yardstick=True),
    ):
        written = json.loads(json.dumps(c.to_json()).replace("NaN", "null"))
        again = stats.SeedComparison.from_json(written)
        assert json.dumps(again.to_json()) == json.dumps(c.to_json())
        assert again.words() == c.words() and again.needed_words() == c.needed_words()
    assert "label" not in stats.seed_comparison({0: 1.0}, {0: 1.0}, 0.1).to_json()  # only where it is set


# --------------------------------------------------------------------- machine
def test_machine_info_comes_from_psutil_and_the_package_metadata():
    m = machine_info(gpus=0)
    assert set(m) == {"cpu", "cpu_id", "cpu_flags", "cores", "load_average", "tensorflow", "python", "gpus"}
    assert m["cores"] == psutil.cpu_count() and m["gpus"] == 0
    assert len(m["load_average"]) == 3 and all(v >= 0 for v in m["load_average"])
    assert isinstance(m["cpu"], str) and m["python"].count(".") == 2
    assert machine_info()["gpus"] is None


def test_cpu_flags_are_the_dtype_flags_of_proc_cpuinfo_in_a_fixed_order():
    flags = mach.cpu_flags()
    assert flags == [f for f in mach.DTYPE_FLAGS if f in flags]
    if sys.platform.startswith("linux"):
        with open("/proc/cpuinfo") as fh:
            present = set(next(line for line in fh if line.startswith("flags")).split(":", 1)[1].split())
        assert flags == [f for f in mach.DTYPE_FLAGS if f in present]
    assert mach.flags_words({"cpu_flags": ["avx512f", "avx512_bf16"]}) == " (avx512f, avx512_bf16)"
    assert mach.flags_words({"cpu_flags": []}) == f" (none of {', '.join(mach.DTYPE_FLAGS)})"
    assert mach.flags_words({}) == ""  # a record from before the flags: nothing claimed
    assert mach.machine_line({"cpu": "X", "cpu_flags": ["avx512f"], "cores": 2}).startswith("X (avx512f), 2 cores, ")


def test_the_cpu_is_named_with_its_family_and_model_numbers():
    """The numbers tell generations apart where a virtual machine names only the vendor's line."""
    assert mach.cpu_id({"model name": "AMD EPYC", "cpu family": "26", "model": "2"}) == "family 26 model 2"
    assert mach.cpu_id({"model name": "Apple M2"}) is None  # no x86 numbers: not claimed
    zen5 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n\n"
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n\n"
    assert mach.cpu_id(mach._cpuinfo(zen5 + zen5.replace(": 0", ": 1"))) == "family 26 model 2"
    assert mach._cpuinfo(zen5)["model name"] == "AMD EPYC" and mach.cpu_id(mach._cpuinfo(arm)) is None
    assert mach.cpu_words({"cpu": "AMD EPYC", "cpu_id": "family 26 model 2"}) == "AMD EPYC family 26 model 2"
    assert mach.cpu_words({"cpu": "AMD EPYC"}) == "AMD EPYC"  # a record made before the numbers were
    line = mach.machine_line(
        {"cpu": "AMD EPYC", "cpu_id": "family 25 model 17", "cpu_flags": ["avx512_bf16"], "cores": 2}
    )
    assert line.startswith("AMD EPYC family 25 model 17 (avx512_bf16), 2 cores, ")
    if sys.platform.startswith("linux") and "cpu family" in Path("/proc/cpuinfo").read_text():
        assert mach.cpu_id() == mach.machine_info()["cpu_id"] and mach.cpu_id().startswith("family ")


def test_cpu_seconds_of_the_machine_and_of_a_process():
    busy0 = mach.busy_cpu_seconds()
    sum(i * i for i in range(200_000))  # some CPU work of our own
    assert busy0 is not None and mach.busy_cpu_seconds() >= busy0 > 0
    assert mach.process_cpu_seconds(psutil.Process().pid) > 0
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()  # reaped: no such process any more
    assert mach.process_cpu_seconds(done.pid) == 0.0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmRSS / VmHWM are Linux's")
def test_rss_is_linux_vmrss_and_the_peak_is_at_least_it():
    def status(field):
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) / 1024 for line in fh if line.startswith(field + ":"))

    assert mach.rss_mb() == pytest.approx(status("VmRSS"), abs=2.0)  # MiB; a few pages may come and go between reads
    assert mach.peak_rss_mb() >= mach.rss_mb() > 0
    assert mach.peak_rss_mb() == pytest.approx(status("VmHWM"), abs=2.0)


def test_foreign_load_record_judges_the_cores_other_processes_took():
    with ForeignLoad() as load:
        pass
    assert load.foreign_cpu_s >= 0 and load.wall >= 0
    load.foreign_cpu_s, load.wall = 0.5, 2.0
    rec = load.record(2)
    assert rec["foreign_cores"] == 0.25 and rec["of_cores"] == 2 and not rec["contaminated"]  # at the limit
    assert set(rec) == {
        "foreign_cpu_s",
        "wall_s",
        "foreign_cores",
        "of_cores",
        "load_average_before",
        "load_average_after",
        "contaminated",
        "limit_cores",
    }
    load.foreign_cpu_s = 0.6
    assert load.record(2)["contaminated"]
    load.foreign_cpu_s = math.nan  # unknown: not a clean measurement
    assert load.record(2)["contaminated"]


# ---------------------------------------------------------------------- ratios
PEAK = {"size": 64, "repeats": 2, "threads": 2, "how": "best of 2", "gflops": {"float32": 100.0, "bfloat16": 200.0}}


def _arm(model, mode, step_s, compile_s, shared_s=None, overhead_s=None, precision=None):
    """An arm record with constant steps; ``precision=None`` is a record from before the
    precision axis (no precision, no roofline)."""
    steps = [step_s] * 5
    a = {
        "model": model,
        "mode": mode,
        "compile_s": compile_s,
        "step_samples_s": steps,
        "step_s": stats.quartiles(steps),
        "infer_batch_samples_s": [0.01] * 4,
        "infer_compile_s": 0.5,
        "infer_patterns_per_s": 1000.0,
        "naive_patterns_per_s": 250.0,
        "components": {"network": {"median": 0.004}, "physics": {"median": 0.003}, "optimizer": {"median": 0.001}},
        "peak_rss_mb": 900.0,
        "peak_above_baseline_mb": 100.0,
        "xla_clusters": None,
    }
    if precision is not None:
        a["precision"] = precision
        a["flops"] = {"per_step": 8e9, "forward_per_sample": 1e9 / 3, "train_factor": 3}
        a["roofline"] = achieved(a["flops"], step_s, precision, PEAK)
    if overhead_s is not None:
        a["startup_overhead_s"] = overhead_s
    if shared_s is not None:
        a["shared"] = {"step_samples_s": [shared_s] * 5, "step_s": stats.quartiles([shared_s] * 5)}
    return a


def test_ratios_against_the_reference_with_break_even():
    arms = [
        _arm("pinn", REFERENCE, 0.100, 2.0, shared_s=0.200, overhead_s=1.0),
        _arm("pinn", "jit", 0.050, 5.0, shared_s=0.250, overhead_s=6.0),
    ]
    r = ratios(arms)
    assert set(r) == {"pinn"} and list(r["pinn"]) == [REFERENCE, "jit"]  # a record without precisions: float32
    jit = r["pinn"]["jit"]
    assert (jit["mode"], jit["precision"]) == ("jit", "float32") and "vs_float32" not in jit
    assert jit["train_step_alone"]["ratio"] == pytest.approx(2.0)  # off's 100 ms / jit's 50 ms
    assert jit["xla"]["train_step_alone"] == jit["train_step_alone"]  # at float32 the same comparison
    assert jit["train_step_shared"]["ratio"] == pytest.approx(0.8)
    assert jit["compile_extra_s"] == 5.0  # start-up overheads, not first calls
    assert jit["break_even_steps"] == pytest.approx(100)  # 5 s / 50 ms
    assert jit["break_even_steps_shared"] == math.inf
    assert jit["inference"]["ratio"] == 1.0 and jit["padded_vs_naive"] == 4.0
    assert r["pinn"][REFERENCE] == {"mode": REFERENCE, "precision": "float32", "padded_vs_naive": 4.0}
    arm, best = fastest({"ratios": r}, "pinn", "alone")
    assert arm == "jit" and best.to_json() == jit["xla"]["train_step_alone"]
    assert fastest({"ratios": r}, "baseline", "alone") is None
    assert ratios([_arm("pinn", "jit", 0.05, 5.0)]) == {}  # nothing to compare with


def _precision_arms():
    return [
        _arm("pinn", REFERENCE, 0.100, 2.0, shared_s=0.400, precision="float32"),
        _arm("pinn", "jit", 0.080, 5.0, shared_s=0.500, precision="float32"),
        _arm("pinn", REFERENCE, 0.050, 2.0, shared_s=0.200, precision="mixed_bfloat16"),
        _arm("pinn", "jit", 0.040, 5.0, shared_s=0.250, precision="mixed_bfloat16"),
    ]


def test_each_axis_is_judged_with_the_other_held_fixed():
    r = ratios(_precision_arms())["pinn"]
    assert list(r) == [REFERENCE, "jit", "off-bf16", "jit-bf16"]
    assert [(e["mode"], e["precision"]) for e in r.values()] == [
        (REFERENCE, "float32"),
        ("jit", "float32"),
        (REFERENCE, "mixed_bfloat16"),
        ("jit", "mixed_bfloat16"),
    ]
    # XLA's own effect: each mode vs off AT THE SAME precision.
    assert r["jit"]["xla"]["train_step_alone"]["ratio"] == pytest.approx(1.25)  # 100 ms / 80 ms
    jit_bf16 = r["jit-bf16"]
    assert jit_bf16["xla"]["train_step_alone"]["ratio"] == pytest.approx(1.25)  # off bf16's 50 ms / 40 ms
    assert jit_bf16["xla"]["train_step_shared"]["ratio"] == pytest.approx(0.8)
    assert "xla" not in r["off-bf16"] and "xla" not in r[REFERENCE]
    # The precision's own effect: each reduced precision vs float32 IN THE SAME mode.
    assert r["off-bf16"]["vs_float32"]["train_step_alone"]["ratio"] == pytest.approx(2.0)
    assert jit_bf16["vs_float32"]["train_step_alone"]["ratio"] == pytest.approx(2.0)  # jit fp32's 80 ms / 40 ms
    assert "vs_float32" not in r["jit"]
    # Both at once (the configuration, never XLA's effect): vs off at float32.
    assert jit_bf16["train_step_alone"]["ratio"] == pytest.approx(2.5)
    assert jit_bf16["break_even_steps"] == pytest.approx(3.0 / 0.01)  # 3 s extra vs off bf16, 10 ms saved per step
    # The fastest XLA mode is judged by XLA's own ratio: jit at either precision (1.25),
    # never jit-bf16's 2.5 (most of which is bfloat16's); the overall fastest is named apart.
    arm, best = fastest({"ratios": {"pinn": r}}, "pinn", "alone")
    assert best.ratio == pytest.approx(1.25)
    arm, overall = fastest_overall({"ratios": {"pinn": r}}, "pinn", "alone")
    assert arm == "jit-bf16" and overall.to_json() == jit_bf16["train_step_alone"]


def test_a_precision_that_is_faster_is_never_xlas_gain():
    arms = [
        _arm("pinn", REFERENCE, 0.100, 2.0, shared_s=0.100, precision="float32"),
        _arm("pinn", "physics", 0.100, 2.0, shared_s=0.100, precision="float32"),
        _arm("pinn", REFERENCE, 0.060, 2.0, shared_s=0.060, precision="mixed_bfloat16"),
        _arm("pinn", "physics", 0.060, 2.0, shared_s=0.060, precision="mixed_bfloat16"),
    ]
    r = ratios(arms)["pinn"]
    assert r["physics-bf16"]["train_step_alone"]["ratio"] == pytest.approx(100 / 60)  # bf16's gain
    assert fastest({"ratios": {"pinn": r}}, "pinn", "alone")[1].ratio == pytest.approx(1.0)  # XLA adds nothing


# -------------------------------------------------------------------- roofline
def test_an_arms_roofline_is_its_flops_over_its_median_step_against_its_dtypes_peak():
    fp32, bf16 = (
        achieved({"per_step": 8e9}, 0.1, "float32", PEAK),
        achieved({"per_step": 8e9}, 0.1, "mixed_bfloat16", PEAK),
    )
    assert fp32 == {
        "gflops": pytest.approx(80.0),
        "dtype": "float32",
        "peak_gflops": 100.0,
        "of_peak": pytest.approx(0.8),
    }
    assert bf16["dtype"] == "bfloat16" and bf16["of_peak"] == pytest.approx(0.4)  # bf16 arms vs the bf16 peak
    fp16 = achieved({"per_step": 8e9}, 0.1, "mixed_float16", PEAK)  # a dtype whose peak was not measured
    assert fp16["dtype"] == "float16" and math.isnan(fp16["peak_gflops"]) and math.isnan(fp16["of_peak"])
    assert math.isnan(achieved({"per_step": 8e9}, 0.1, "float32", None)["of_peak"])


# ---------------------------------------------------------------------- tables
def _record(arms=None):
    arms = _precision_arms()[:2] if arms is None else arms
    arms[1]["xla_clusters"] = 3
    return {
        "machine": {
            "cpu": "Test CPU",
            "cpu_flags": ["avx512f", "avx512_bf16"],
            "cores": 2,
            "load_average": [0.5, 0.4, 0.3],
            "load_average_start": [0.25, 0.2, 0.1],
            "tensorflow": "2.21.0",
            "python": "3.11.7",
            "gpus": 0,
        },
        "modes": [REFERENCE, "jit"],
        "precisions": sorted({a.get("precision", "float32") for a in arms}, key=["float32", "mixed_bfloat16"].index),
        "peak": PEAK,
        "contexts": {
            "alone": {
                "jobs": 1,
                "threads": 2,
                "how": "one at a time",
                "foreign_load": {
                    "foreign_cores": 0.125,
                    "of_cores": 2,
                    "contaminated": False,
                    "load_average_before": 0.5,
                    "load_average_after": 0.75,
                },
            },
            "shared": {"jobs": 2, "threads": 1, "how": "all at once"},
        },
        "arms": arms,
        "ratios": ratios(arms),
    }


def test_tables_of_a_bench_record():
    conditions, timing, versus, roofline, peak, inference = tables(_record())
    assert [t[0] for t in (conditions, timing, versus, inference)] == [
        "Benchmark conditions: other processes' CPU use while each context was timed (/proc/stat)",
        "Train-step timings per arm (alone: one at a time; shared: all at once)",
        "Each arm's speed, one axis at a time (the reference's time / the arm's; > 1 means faster; 95 % bootstrap "
        "intervals): XLA = vs off at the same precision; precision = vs float32 in the same mode; both = vs off at "
        "float32 (the configuration, not XLA's effect); shared = the pipeline's schedule",
        "Inference: padded fixed batch vs a per-pattern loop (batch 1)",
    ]
    assert conditions[2] == [
        ["alone", "1", "2", "0.125", "2", "clean", "0.5 / 0.75"],
        ["shared", "2", "1", "n/a", "n/a", "n/a", "n/a / n/a"],
    ]
    assert timing[1][:5] == ["model", "mode", "precision", "compile s", "alone median ms"] and len(timing[1]) == 14
    assert timing[2] == [
        ["pinn", "off", "fp32", "2", "100", "0", "400", "0", "4", "3", "1", "900", "100", "-"],
        ["pinn", "jit", "fp32", "5", "80", "0", "500", "0", "4", "3", "1", "900", "100", "3"],
    ]
    assert versus[1] == [
        "model",
        "mode",
        "precision",
        "XLA: step alone",
        "XLA: step shared",
        "XLA: inference",
        "precision: step alone",
        "precision: step shared",
        "both: step alone",
        "extra compile s (vs off, same precision)",
        "break-even steps alone",
        "break-even steps shared",
    ]
    assert versus[2] == [
        [
            "pinn", "jit", "fp32", "1.25 (1.25 - 1.25)", "0.8 (0.8 - 0.8)", "1 (1 - 1)", "n/a", "n/a",
            "1.25 (1.25 - 1.25)", "3", "150", "never",
        ]
    ]  # fmt: skip
    assert roofline[0].startswith("Roofline, alone: FLOPs per train step counted from the layers")
    assert roofline[1] == [
        "model", "mode", "precision", "GFLOP per step", "alone median ms", "GFLOP/s", "dtype peak GFLOP/s", "% of peak"
    ]  # fmt: skip
    assert roofline[2] == [
        ["pinn", "off", "fp32", "8", "100", "80", "100", "80"],
        ["pinn", "jit", "fp32", "8", "80", "100", "100", "100"],
    ]
    assert peak[0] == "Machine peak: best of 2" and peak[2] == [["float32", "100", "1"], ["bfloat16", "200", "2"]]
    assert inference[2][0] == ["pinn", "off", "fp32", "0.5", "1000", "250", "4"]


def test_tables_give_each_axis_its_own_columns():
    _, timing, versus, roofline, _, _ = tables(_record(_precision_arms()))
    assert [row[:3] for row in timing[2]] == [
        ["pinn", "off", "fp32"],
        ["pinn", "jit", "fp32"],
        ["pinn", "off", "bf16"],
        ["pinn", "jit", "bf16"],
    ]
    # XLA alone, shared | precision alone, shared | both alone
    assert [row[3:5] + row[6:9] for row in versus[2]] == [
        ["1.25 (1.25 - 1.25)", "0.8 (0.8 - 0.8)", "n/a", "n/a", "1.25 (1.25 - 1.25)"],
        ["n/a", "n/a", "2 (2 - 2)", "2 (2 - 2)", "2 (2 - 2)"],
        ["1.25 (1.25 - 1.25)", "0.8 (0.8 - 0.8)", "2 (2 - 2)", "2 (2 - 2)", "2.5 (2.5 - 2.5)"],
    ]
    # a bf16 arm against the bf16 peak: 8 GFLOP in 40 ms = 200 GFLOP/s, all of 200
    assert roofline[2][3] == ["pinn", "jit", "bf16", "8", "40", "200", "200", "100"]


def test_a_record_from_before_the_precision_axis_reads_as_float32_without_a_roofline():
    old = _record([_arm("pinn", REFERENCE, 0.100, 2.0), _arm("pinn", "jit", 0.080, 5.0)])
    del old["peak"], old["precisions"], old["machine"]["cpu_flags"]
    _, timing, versus, roofline, peak, _ = tables(old)
    assert [row[2] for row in timing[2]] == ["fp32", "fp32"] and versus[2][0][:3] == ["pinn", "jit", "fp32"]
    assert roofline[2][0] == ["pinn", "off", "fp32", "n/a", "100", "n/a", "n/a", "n/a"]
    assert peak[0] == "Machine peak: not measured" and peak[2] == []
    text = format_table(old)
    assert text.startswith("machine: Test CPU | 2 cores")
    assert (
        "XLA's own effect on the PINN train step, alone: the fastest mode is jit (1.25 (1.25 - 1.25) vs off at fp32)"
        in text
    )
    assert "GFLOP/s, " not in text


def test_tables_of_an_empty_record_have_no_rows():
    out = tables({})
    assert len(out) == 6 and all(rows == [] for _, _, rows in out)
    assert out[1][0] == "Train-step timings per arm ()"


def test_the_shared_context_says_when_the_pipeline_ran_one_training_at_a_time():
    """``--cores 1`` (or a cluster): the pipeline trains one at a time, the bench reproduces
    that, and its words say no arm shared the cores, not that the arms had partners (#35)."""
    from ptycho.study.bench.coordinator import shared_how
    from ptycho.study.report.items.speedup import training_table

    assert shared_how(4, 1, 1, threads=1, alone_threads=2, n_cores=2) == (
        "one arm's step loop at a time, 1 thread on 2 cores: the pipeline runs its trainings one at a time here, "
        "so no arm shared the cores with another, and only its threads differ from alone (1 vs 2)"
    )
    assert shared_how(4, 1, 1, threads=2, alone_threads=2, n_cores=2).endswith(
        ", and its conditions are alone's, timed again"
    )
    assert shared_how(4, 2, 2, threads=1, alone_threads=2, n_cores=2) == (
        "2 arms' step loops at once, 1 thread each on 2 cores, every arm in turn with two different partners "
        "(the 2 trainings the pipeline runs at once here)"
    )
    assert shared_how(2, 2, 4, threads=1, alone_threads=2, n_cores=8) == (
        "all 2 arms' step loops at once, 1 thread each on 8 cores (the pipeline runs up to 4 trainings at once here)"
    )
    assert shared_how(3, 3, 0, threads=2, alone_threads=2, n_cores=2) == (
        "all 3 arms' step loops at once, 2 threads each on 2 cores"
    )

    def title(trainings_at_once):
        shared = {} if trainings_at_once is None else {"trainings_at_once": trainings_at_once}
        bench = {"contexts": {"shared": shared}}
        return training_table(StudyReport.of({"arms": {}, "items": {"speedup": {"evidence": {"bench": bench}}}}))[0]

    assert (
        title(1)
        == "Training jobs (their steps ran in the pipeline's schedule: one training at a time, nothing beside it)"
    )
    assert (
        title(2)
        == "Training jobs (their steps ran in the pipeline's schedule: up to 2 trainings at once, beside each other)"
    )
    assert title(None) == "Training jobs (their steps ran in the pipeline's schedule)"  # a record that does not say

    # Each training's own record wins over the bench's: a rerun with --cores 1 re-made the
    # bench alone, and the title said 'one at a time' of trainings that ran two at once.
    def arms(*counts):
        return {
            f"pinn-off-s{i}": {"timing": {"step_median_s": 0.1, "trainings_at_once": n}} for i, n in enumerate(counts)
        }

    bench = {"contexts": {"shared": {"trainings_at_once": 1}}}
    speedup = {"speedup": {"evidence": {"bench": bench}}}
    assert training_table(StudyReport.of({"arms": arms(2, 2), "items": speedup}))[0].endswith(
        "up to 2 trainings at once, beside each other)"
    )
    assert training_table(StudyReport.of({"arms": arms(1, 2), "items": speedup}))[0].endswith(
        "up to 1 or 2 trainings at once (arms trained in runs of different --cores))"
    )


def test_format_table_prints_the_machine_the_tables_the_fastest_arm_and_the_roofline():
    record = _record()
    text = format_table(record)
    assert text.startswith(
        "machine: Test CPU (avx512f, avx512_bf16) | 2 cores | load 0.25 at start, 0.5 at end | TF 2.21.0 | GPUs 0\n"
    )
    for title, header, rows in tables(record):
        assert f"{title}\n{to_text(header, rows)}" in text
    assert "the fastest mode is jit (1.25 (1.25 - 1.25) vs off at fp32)" in text
    assert (
        "XLA's own effect on the PINN train step, shared: the fastest mode is jit (0.8 (0.8 - 0.8) vs off at fp32)"
        in text
    )
    assert text.endswith(
        "The fastest PINN arm alone, jit, runs its 8.00 GFLOP train step at 100.0 GFLOP/s, 100 % of this "
        "machine's float32 peak (100 GFLOP/s, a large matmul on 2 threads); the hardware accelerates bfloat16 "
        "(peak vs float32: bfloat16 2.00x; CPU (avx512f, avx512_bf16))."
    )
    with_bf16 = format_table(_record(_precision_arms()))
    assert "(1.25 (1.25 - 1.25) vs off at" in with_bf16 and "2.5 (2.5" not in with_bf16.split("XLA's own effect")[-1]
    assert (
        "The fastest PINN arm alone, jit at bf16, runs its 8.00 GFLOP train step at 200.0 GFLOP/s, 100 %" in with_bf16
    )


def test_the_roofline_words_say_when_no_reduced_precision_is_accelerated():
    from ptycho.study.bench import roofline_words

    record = _record()
    record["peak"] = dict(PEAK, gflops={"float32": 100.0, "bfloat16": 120.0, "float16": 60.0})
    assert "the hardware accelerates no reduced precision (peak vs float32: bfloat16 1.20x, float16 0.60x;" in (
        roofline_words(record)
    )
    assert roofline_words({"arms": [_arm("pinn", REFERENCE, 0.1, 2.0)]}) == ""  # no roofline recorded


def test_a_peak_measured_beside_other_work_is_marked_contaminated_in_its_table_and_words():
    from ptycho.study.bench import roofline_words

    record = _record()
    record["peak"] = dict(PEAK, foreign_load={"contaminated": True, "foreign_cores": 1.5, "of_cores": 2})
    warning = "; CONTAMINATED: other processes kept 1.5 of 2 cores busy while the peak was measured"
    assert tables(record)[4][0] == f"Machine peak: best of 2{warning}"
    assert roofline_words(record).endswith(f"(avx512f, avx512_bf16)){warning}.")
    record["peak"]["foreign_load"]["contaminated"] = False
    assert tables(record)[4][0] == "Machine peak: best of 2" and "CONTAMINATED" not in roofline_words(record)


# ------------------------------------------------------------------ MLflow runs
def test_one_nested_run_per_arm_named_by_its_model_mode_and_precision():
    runs = arm_runs(_record(_precision_arms()))
    assert [r.name for r in runs] == ["bench-pinn-off", "bench-pinn-jit", "bench-pinn-off-bf16", "bench-pinn-jit-bf16"]
    jit_bf16 = runs[3]
    assert jit_bf16.tags.pop("mlflow.note.content").startswith("The benchmark's timing of PINN, XLA jit, bfloat16")
    assert jit_bf16.tags == {"model": "pinn", "xla": "jit", "precision": "mixed_bfloat16"}
    assert jit_bf16.params == {"arm.model": "pinn", "arm.xla": "jit", "arm.precision": "mixed_bfloat16"}
    m = jit_bf16.metrics
    assert m["gflops"] == pytest.approx(200.0) and m["of_peak"] == pytest.approx(1.0) and m["flops_per_step"] == 8e9
    assert m["train_step_alone_speedup"] == pytest.approx(2.5)
    assert m["train_step_alone_speedup_xla"] == pytest.approx(1.25)
    assert m["train_step_alone_speedup_vs_float32"] == pytest.approx(2.0)
    assert runs[0].tags["precision"] == "float32" and "train_step_alone_speedup" not in runs[0].metrics


# ------------------------------------------------------------- speedup item
def test_without_trainings_the_speedup_item_judges_xlas_own_per_step_ratio():
    record = _record(_precision_arms())
    rec = speedup(record, 1.0)
    # jit is 1.25x off at both precisions; jit at bf16 is 2.5x off at fp32, but 2.0x of it is bfloat16's
    assert rec.value == pytest.approx(1.25) and rec.status == "PASS"  # 5 steps: the ratio itself
    assert rec.evidence["judged"]["by"] == "step"
    assert rec.summary.startswith("No trained XLA pair to time to quality; XLA's own per-step effect")
    assert "2.50x" not in rec.summary
    assert set(rec.evidence["intervals"]) >= {
        "PINN jit vs off at bf16, train step alone",
        "PINN off: bf16 vs fp32, train step alone",
    }


def test_a_precision_that_is_faster_without_xla_does_not_pass_the_speed_item():
    arms = _precision_arms()
    for a in arms:  # enough steps for an interval: 20 of them, a little spread
        a["step_samples_s"] = [a["step_s"]["median"] * (1 + 0.001 * k) for k in range(20)]
        a["step_s"] = stats.quartiles(a["step_samples_s"])
    for i, slow in ((1, 0.12), (3, 0.07)):  # jit slower than off at both precisions
        arms[i] = dict(arms[i], step_samples_s=[slow * (1 + 0.001 * k) for k in range(20)])
        arms[i]["step_s"] = stats.quartiles(arms[i]["step_samples_s"])
    rec = speedup(_record(arms), 1.0)
    assert rec.status == "FAIL" and rec.value < 1.0  # bfloat16's 2x is not XLA's
    ev = rec.evidence
    assert ev["precision"].startswith("Precision: its own effect, not XLA's")
    assert "bf16 vs fp32 with off, per step: 2.00x (95% CI" in ev["precision"]
    assert ev["recommendation"].startswith("Recommendation for this machine kind (Test CPU")
    assert "is off at bf16, 2.00x (95% CI" in ev["recommendation"] and "(the precision's alone)" in ev["recommendation"]


def test_nothing_shown_faster_than_off_at_float32_recommends_off_at_float32():
    """A machine where every other configuration is slower per step (an AVX2 CPU whose
    bfloat16 is emulated, XLA no help): the recommendation is the reference itself, and the
    best other configuration is named with its interval, not recommended."""
    arms = _precision_arms()
    for i, step in enumerate((0.100, 0.104, 0.300, 0.290)):  # off fp32 first; the rest slower
        arms[i] = dict(arms[i], step_samples_s=[step * (1 + 0.001 * k) for k in range(20)])
        arms[i]["step_s"] = stats.quartiles(arms[i]["step_samples_s"])
    words = speedup(_record(arms), 1.0).evidence["recommendation"]
    assert words.startswith("Recommendation for this machine kind (Test CPU")
    assert "off at fp32, the reference; no other PINN configuration is shown faster per step alone" in words
    assert "(the fastest, jit, 0.96x (95% CI" in words and ": SLOWER)" in words


def test_the_speedup_text_says_how_close_the_fastest_arm_is_to_the_peak():
    from ptycho.study.report.items.speedup import text

    record = _record(_precision_arms())
    words = text(StudyReport(verdict="", items={"speedup": speedup(record, 1.0)}))
    assert "The fastest PINN arm alone, jit at bf16, runs its 8.00 GFLOP train step at 200.0 GFLOP/s" in words
    assert (
        "the hardware accelerates bfloat16" in words and "Benchmark machine: Test CPU (avx512f, avx512_bf16)" in words
    )


def test_importing_the_bench_imports_no_tensorflow():
    code = "import sys, ptycho.study.bench, ptycho.study.stats; assert 'tensorflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------ batch sweep
def _swept(a, train, infer):
    """``a`` with a batch sweep: ``{size: seconds}`` per kind, constant samples."""

    def rec(sizes):
        return {
            str(b): {**stats.quartiles([t] * 4), "samples_s": [t] * 4, "per_sample_s": t / b, "compile_s": 1.0}
            for b, t in sizes.items()
        }

    return dict(a, batch_size=8, batches={"train": rec(train), "infer": rec(infer)})


def test_the_batch_sweep_gives_xlas_own_ratio_at_each_batch_size():
    from ptycho.study.bench import batch_table, batch_words

    arms = [
        _swept(_arm("pinn", REFERENCE, 0.100, 2.0, precision="float32"), {2: 0.04, 32: 0.4}, {1: 0.002, 256: 0.2}),
        _swept(_arm("pinn", "jit", 0.080, 5.0, precision="float32"), {2: 0.04, 32: 0.2}, {1: 0.001, 256: 0.4}),
    ]
    record = _record(arms)
    xla = record["ratios"]["pinn"]["jit"]["xla_batches"]
    assert xla["train"]["2"]["ratio"] == pytest.approx(1.0) and xla["train"]["32"]["ratio"] == pytest.approx(2.0)
    assert xla["infer"]["1"]["ratio"] == pytest.approx(2.0) and xla["infer"]["256"]["ratio"] == pytest.approx(0.5)
    title, header, rows = batch_table(record)
    jit_rows = [r for r in rows if r[1] == "jit"]
    # the study's own batch (8, the main measurement) sits between the sweep's sizes
    assert [(r[3], r[4], r[7]) for r in jit_rows] == [
        ("training step", "2", "1 (1 - 1)"),
        ("training step", "8", "1.25 (1.25 - 1.25)"),
        ("training step", "32", "2 (2 - 2)"),
        ("inference batch", "1", "2 (2 - 2)"),
        ("inference batch", "8", "1 (1 - 1)"),
        ("inference batch", "256", "0.5 (0.5 - 0.5)"),
    ]
    words = batch_words(record)
    assert "jit at fp32: training batch 2: 1x, 8: 1.25x, 32: 2x; inference batch 1: 2x, 8: 1x, 256: 0.5x" in words
    assert "Highest PINN inference throughput here: off at fp32 with batch 256" in words
    runs = {r.name: r.metrics for r in arm_runs(record)}
    assert runs["bench-pinn-jit"]["train_batch_32_speedup_xla"] == pytest.approx(2.0)


def test_a_record_without_a_sweep_has_no_batch_rows_or_words():
    from ptycho.study.bench import batch_table, batch_words

    record = _record()
    assert batch_table(record)[2] == [] and batch_words(record) == ""


def test_the_typed_record_reads_a_recorded_bench_and_its_ratios_follow_from_its_arms():
    """bench.json is read in one place (:class:`BenchRecord`): the smoke study's record
    gives typed arms from which the recorded ratios are computed again, number for number
    (the bootstrap is seeded), so the typed arm carries everything the ratios use."""
    from ptycho.artifacts import read_json
    from ptycho.study.bench.record import BenchRecord

    raw = read_json(Path(__file__).parent / "data" / "smoke-study" / "bench" / "bench.json", producer="bench")
    record = BenchRecord.from_json(raw)
    assert [a.key for a in record.arms] == [REFERENCE, "jit"] and set(record.ratios["pinn"]) == {REFERENCE, "jit"}
    off, jit = record.arms
    assert off.step.median == raw["arms"][0]["step_s"]["median"] and off.step.n == len(off.step_samples)
    assert jit.shared.median == raw["arms"][1]["shared"]["step_s"]["median"]
    assert set(jit.components) == {"network", "physics", "optimizer"} and jit.roofline.dtype == "float32"
    assert record.contexts["shared"].trainings_at_once == 2 and not record.contaminated("shared")
    assert record.peak.gflops["float32"] > 0 and record.to_json() is raw
    assert ratios(record.arms) == ratios(raw["arms"]) == raw["ratios"]
    entry = record.entry("pinn", "jit")
    assert entry.xla["train_step_alone"].ratio == raw["ratios"]["pinn"]["jit"]["xla"]["train_step_alone"]["ratio"]
    assert entry.label == "jit" and record.steps("pinn", "alone") == off.step.n


def test_a_record_from_before_the_precision_axis_reads_as_float32_with_xlas_ratios_at_the_top():
    from ptycho.study.bench.record import BenchRecord

    arms = [_arm("pinn", REFERENCE, 0.100, 2.0), _arm("pinn", "jit", 0.080, 5.0)]
    legacy = {
        mode: {k: v for k, v in e.items() if k not in ("xla", "precision")} for mode, e in ratios(arms)["pinn"].items()
    }
    record = BenchRecord.from_json({"arms": arms, "ratios": {"pinn": legacy}})
    assert {a.precision for a in record.arms} == {"float32"} and record.arms[1].startup_overhead_s == 5.0
    jit = record.entry("pinn", "jit")
    assert (
        jit.precision == "float32"
        and jit.xla == jit.overall
        and jit.xla["train_step_alone"].ratio == pytest.approx(1.25)
    )
    assert record.entry("pinn", REFERENCE).xla == {}
    # The oldest records name no mode in their entries: nothing of theirs is credited to XLA.
    oldest = {key: {k: v for k, v in e.items() if k != "mode"} for key, e in legacy.items()}
    older = BenchRecord.from_json({"arms": arms, "ratios": {"pinn": oldest}})
    assert older.entry("pinn", "jit").xla == {} and older.entry("pinn", "jit").label == "jit"
    from ptycho.study.bench import xla_ratio

    assert fastest(older, "pinn", "alone") is None and xla_ratio(oldest["jit"], "train_step_alone") is None


def test_a_broken_bench_record_is_refused_in_one_line():
    from ptycho.errors import PtychoError
    from ptycho.study.bench.record import BenchRecord

    with pytest.raises(PtychoError, match=r"^bench.json: not a benchmark record \(AttributeError: .*\); pass the JSON"):
        BenchRecord.from_json({"arms": ["pinn-off"]}, "bench.json")
    with pytest.raises(PtychoError, match=r"^bench.json: not a benchmark record \(KeyError: 'mode'\); pass the JSON"):
        BenchRecord.from_json({"arms": [{"model": "pinn", "compile_s": 1.0}]}, "bench.json")
