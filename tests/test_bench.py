"""The benchmark's parts that need no worker process: its statistics (``ptycho.study.stats``),
the machine record and foreign-load monitor (psutil), the ratios, and the one table
builder of a bench record with its text rendering."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import psutil
import pytest

from ptycho.nets.xla import REFERENCE
from ptycho.study import stats
from ptycho.study.bench import ForeignLoad, fastest, format_table, machine_info, ratios, tables
from ptycho.study.bench import machine as mach
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


def test_seed_comparison_pools_the_seeds_and_gives_one_of_three_outcomes():
    c = stats.seed_comparison({1: 1.2, 0: 1.0}, {0: 1.1, 1: 1.3}, threshold=0.05)
    assert c["seeds_mode"] == [0, 1] and c["seeds_off"] == [0, 1]
    assert c["mean_mode"] == pytest.approx(1.1) and c["mean_off"] == pytest.approx(1.2)
    assert c["difference"] == pytest.approx(-0.1)
    assert c["spread"] == pytest.approx(0.2) and c["margin"] == 0.05  # the margin is the threshold, never the spread
    sd = math.sqrt((0.01 + 0.01 + 0.01 + 0.01) / 2)  # pooled, 2 degrees of freedom
    assert c["sd"] == pytest.approx(sd)
    assert c["low"] == pytest.approx(-0.1 - T95_2 * sd) and c["high"] == pytest.approx(-0.1 + T95_2 * sd)
    # the 95 % interval reaches inside the margin and the 90 % one past it: neither shown
    assert c["outcome"] == "INCONCLUSIVE" and not c["within"] and not c["equivalent"]
    # beyond the margin, more seeds could show a difference: the smallest number that would
    n = c["seeds_needed"]
    assert n == stats.seeds_needed(-0.1, sd, 0.05) and 2 < n < stats.MAX_SEEDS
    h95 = stats._half_widths(sd, int(n), int(n))[1]
    assert 0.1 - h95 > 0.05 and 0.1 - stats._half_widths(sd, int(n) - 1, int(n) - 1)[1] <= 0.05


def test_seed_comparison_is_equivalent_only_when_the_90_percent_interval_is_inside_the_margin():
    tight = stats.seed_comparison({0: 0.851, 1: 0.852, 2: 0.850}, {0: 0.850, 1: 0.851, 2: 0.852}, 0.02)
    assert tight["outcome"] == "EQUIVALENT" and -0.02 <= tight["low90"] and tight["high90"] <= 0.02
    assert math.isnan(tight["seeds_needed"])  # settled: nothing more needed
    apart = stats.seed_comparison({0: 0.95, 1: 0.951, 2: 0.952}, {0: 0.85, 1: 0.851, 2: 0.852}, 0.02)
    assert apart["outcome"] == "DIFFERENT" and apart["low"] > 0.02
    assert stats.reach(tight) == pytest.approx(max(abs(tight["low90"]), abs(tight["high90"])))
    assert stats.overall(["EQUIVALENT", "EQUIVALENT"]) == "EQUIVALENT"
    assert stats.overall(["EQUIVALENT", "INCONCLUSIVE"]) == "INCONCLUSIVE"
    assert stats.overall(["INCONCLUSIVE", "DIFFERENT"]) == "DIFFERENT" and stats.overall([]) == "INCONCLUSIVE"


def test_seed_comparison_with_one_seed_is_inconclusive():
    c = stats.seed_comparison({0: 0.90}, {0: 0.93}, threshold=0.05)
    assert math.isnan(c["sd"]) and math.isnan(c["spread"]) and c["margin"] == 0.05
    assert c["outcome"] == "INCONCLUSIVE" and c["within"] and math.isnan(c["seeds_needed"])
    assert stats.seed_comparison({0: 0.80}, {0: 0.93}, threshold=0.05)["outcome"] == "INCONCLUSIVE"


# --------------------------------------------------------------------- machine
def test_machine_info_comes_from_psutil_and_the_package_metadata():
    m = machine_info(gpus=0)
    assert set(m) == {"cpu", "cores", "load_average", "tensorflow", "python", "gpus"}
    assert m["cores"] == psutil.cpu_count() and m["gpus"] == 0
    assert len(m["load_average"]) == 3 and all(v >= 0 for v in m["load_average"])
    assert isinstance(m["cpu"], str) and m["python"].count(".") == 2
    assert machine_info()["gpus"] is None


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
def _arm(model, mode, step_s, compile_s, shared_s=None, overhead_s=None):
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
    assert set(r) == {"pinn"} and set(r["pinn"]) == {REFERENCE, "jit"}
    jit = r["pinn"]["jit"]
    assert jit["train_step_alone"]["ratio"] == pytest.approx(2.0)  # off's 100 ms / jit's 50 ms
    assert jit["train_step_shared"]["ratio"] == pytest.approx(0.8)
    assert jit["compile_extra_s"] == 5.0  # start-up overheads, not first calls
    assert jit["break_even_steps"] == pytest.approx(100)  # 5 s / 50 ms
    assert jit["break_even_steps_shared"] == math.inf
    assert jit["inference"]["ratio"] == 1.0 and jit["padded_vs_naive"] == 4.0
    assert r["pinn"][REFERENCE] == {"padded_vs_naive": 4.0}
    assert fastest({"ratios": r}, "pinn", "alone") == ("jit", jit["train_step_alone"])
    assert fastest({"ratios": r}, "baseline", "alone") is None
    assert ratios([_arm("pinn", "jit", 0.05, 5.0)]) == {}  # nothing to compare with


# ---------------------------------------------------------------------- tables
def _record():
    arms = [
        _arm("pinn", REFERENCE, 0.100, 2.0, shared_s=0.200),
        _arm("pinn", "jit", 0.080, 5.0, shared_s=0.250),
    ]
    arms[1]["xla_clusters"] = 3
    return {
        "machine": {
            "cpu": "Test CPU",
            "cores": 2,
            "load_average": [0.5, 0.4, 0.3],
            "load_average_start": [0.25, 0.2, 0.1],
            "tensorflow": "2.21.0",
            "python": "3.11.7",
            "gpus": 0,
        },
        "modes": [REFERENCE, "jit"],
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
        "ratios": {
            "pinn": {
                "jit": {
                    "train_step_alone": {"ratio": 1.25, "low": 1.2, "high": 1.3},
                    "train_step_shared": {"ratio": 0.8, "low": 0.75, "high": 0.85},
                    "compile_extra_s": 3.0,
                    "break_even_steps": 150.0,
                    "break_even_steps_shared": None,  # infinite, as JSON stores it
                    "padded_vs_naive": 4.0,
                },
                REFERENCE: {"padded_vs_naive": 4.0},
            }
        },
    }


def test_tables_of_a_bench_record():
    conditions, timing, versus, inference = tables(_record())
    assert [t[0] for t in (conditions, timing, versus, inference)] == [
        "Benchmark conditions: other processes' CPU use while each context was timed (/proc/stat)",
        "Train-step timings per mode (alone: one at a time; shared: all at once)",
        "Each mode vs off (off's time / the mode's; > 1 means faster), 95 % bootstrap intervals",
        "Inference: padded fixed batch vs a per-pattern loop (batch 1)",
    ]
    assert conditions[2] == [
        ["alone", "1", "2", "0.125", "2", "clean", "0.5 / 0.75"],
        ["shared", "2", "1", "n/a", "n/a", "n/a", "n/a / n/a"],
    ]
    assert timing[1][:4] == ["model", "mode", "compile s", "alone median ms"] and len(timing[1]) == 13
    assert timing[2] == [
        ["pinn", "off", "2", "100", "0", "200", "0", "4", "3", "1", "900", "100", "-"],
        ["pinn", "jit", "5", "80", "0", "250", "0", "4", "3", "1", "900", "100", "3"],
    ]
    assert versus[1] == [
        "model",
        "mode",
        "train step alone",
        "train step shared",
        "inference (padded batch)",
        "extra compile s",
        "break-even steps alone",
        "break-even steps shared",
    ]
    assert versus[2] == [["pinn", "jit", "1.25 (1.2 - 1.3)", "0.8 (0.75 - 0.85)", "n/a", "3", "150", "never"]]
    assert inference[2][0] == ["pinn", "off", "0.5", "1000", "250", "4"]


def test_tables_of_an_empty_record_have_no_rows():
    out = tables({})
    assert len(out) == 4 and all(rows == [] for _, _, rows in out)
    assert out[1][0] == "Train-step timings per mode ()"


def test_format_table_prints_the_machine_the_tables_and_the_fastest_mode():
    record = _record()
    text = format_table(record)
    assert text.startswith("machine: Test CPU | 2 cores | load 0.25 at start, 0.5 at end | TF 2.21.0 | GPUs 0\n")
    for title, header, rows in tables(record):
        assert f"{title}\n{to_text(header, rows)}" in text
    assert "fastest PINN train step, alone: jit (1.25 (1.2 - 1.3) vs off)" in text
    assert "fastest PINN train step, shared: jit (0.8 (0.75 - 0.85) vs off)" in text


def test_importing_the_bench_imports_no_tensorflow():
    code = "import sys, ptycho.study.bench, ptycho.study.stats; assert 'tensorflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
