"""The study on the user's own machine: ``precision: auto`` resolved for its hardware, and
the estimate of the study's wall time printed before the first job (ptycho.study.estimate)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ptycho.errors import ConfigError
from ptycho.nets.precision import Hardware, native_precision
from ptycho.study.workflow import arms, precision_warnings, resolve

ROOT = Path(__file__).resolve().parents[1]

AVX2 = Hardware(("avx2",))
ZEN4 = Hardware(("avx2", "avx512f", "avx512_bf16"))
AMX = Hardware(("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"))
AMPERE = Hardware(("avx2",), (8, 0))
TURING = Hardware(("avx2",), (7, 5))
PASCAL = Hardware(("avx2", "avx512_bf16"), (6, 1))


@pytest.fixture(scope="module")
def base():
    return yaml.safe_load((ROOT / "config.yaml").read_text())


@pytest.mark.parametrize(
    ("hardware", "precision", "short"),
    [
        (AVX2, "float32", ""),
        (ZEN4, "mixed_bfloat16", "-bf16"),
        (AMX, "mixed_bfloat16", "-bf16"),
        (AMPERE, "mixed_bfloat16", "-bf16"),
        (TURING, "mixed_float16", "-fp16"),
        (PASCAL, "float32", ""),  # the GPU decides, not the CPU's bfloat16
    ],
)
def test_the_default_precision_is_the_fastest_one_the_hardware_has(base, hardware, precision, short):
    cfg = resolve(base, hardware=hardware)
    assert cfg["precision"] == [precision]
    assert arms(cfg)[:3] == [f"pinn-off{short}-s{s}" for s in (0, 1, 2)]
    # the bench times float32 and the native one; an emulated one only where named
    assert cfg["bench"]["precision"] == list(dict.fromkeys(["float32", precision]))
    assert cfg["auto_precision"]["precision"] == precision and cfg["auto_precision"]["reason"]
    assert precision_warnings(cfg, hardware) == []


def test_the_reason_names_what_the_machine_has_or_lacks():
    assert native_precision(AMX) == ("mixed_bfloat16", "this CPU has avx512_bf16, amx_bf16, native bfloat16 kernels")
    name, why = native_precision(AVX2)
    assert name == "float32" and "none of avx512_bf16, amx_bf16 for bfloat16" in why
    assert native_precision(TURING)[1] == "the GPU (compute capability 7.5) has float16 tensor cores"


def test_an_emulated_precision_named_explicitly_is_kept_and_warned_about(base):
    cfg = resolve(
        base, {"precision": ["mixed_bfloat16"], "bench": {"precision": ["float32", "mixed_bfloat16"]}}, hardware=AVX2
    )
    assert cfg["precision"] == ["mixed_bfloat16"] and cfg["bench"]["precision"] == ["float32", "mixed_bfloat16"]
    assert "auto_precision" not in cfg  # nothing was chosen for the machine
    (line,) = precision_warnings(cfg, AVX2)
    assert line.startswith("precision mixed_bfloat16: this CPU has none of avx512_bf16, amx_bf16, so it emulates")


def test_a_config_that_names_its_precisions_keeps_its_hash(base):
    from ptycho.tracking import config_hash

    named = {"precision": ["float32"], "bench": {"precision": ["float32"]}}
    assert config_hash(resolve(base, named, hardware=AVX2)) == config_hash(resolve(base, named, hardware=AMX))


def test_per_model_and_preset_lists_resolve_too(base):
    # A preset's own precision list (as lowdose's was until 2026-12-04) resolves like the study's.
    base = {**base, "presets": {**base["presets"], "both": {"precision": ["float32", "auto"]}}}
    cfg = resolve(base, {"preset": "both", "per_model": {"baseline": {"precision": ["auto"]}}}, hardware=AVX2)
    assert cfg["precision"] == ["float32"] and cfg["per_model"]["baseline"]["precision"] == ["float32"]
    cfg = resolve(base, {"preset": "both"}, hardware=ZEN4)
    assert cfg["precision"] == ["float32", "mixed_bfloat16"]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"PTYCHO_CPU_FLAGS": "fpu avx avx2 fma", "PTYCHO_GPU_CAPABILITY": "none"}, Hardware(("avx2",))),
        (
            {"PTYCHO_CPU_FLAGS": "avx2,amx_tile,amx_bf16", "PTYCHO_GPU_CAPABILITY": "8.6"},
            Hardware(("avx2", "amx_tile", "amx_bf16"), (8, 6)),
        ),
        ({"PTYCHO_CPU_FLAGS": "none", "PTYCHO_GPU_CAPABILITY": ""}, Hardware((), None)),
    ],
)
def test_the_hardware_can_be_named_in_the_environment(monkeypatch, env, expected):
    from ptycho.study.bench.machine import hardware, hardware_environment

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert hardware() == expected
    for key, value in hardware_environment(expected).items():  # what the workflow passes to its jobs
        monkeypatch.setenv(key, value)
    assert hardware() == expected


def test_a_gpu_capability_that_cannot_be_read_is_one_line(monkeypatch):
    from ptycho.study.bench.machine import hardware

    monkeypatch.setenv("PTYCHO_GPU_CAPABILITY", "ampere")
    with pytest.raises(ConfigError, match=r"^environment variable PTYCHO_GPU_CAPABILITY='ampere' is not a GPU compute"):
        hardware()


# ------------------------------------------------------------------ the estimate
def _calibration(cfg, step_s: float = 0.1) -> dict:
    from ptycho.study.calibration import arm_key, planned_arms

    costs = {"startup_s": 3.0, "compile_s": 2.0, "step_s": step_s}
    return {"format": 1, "arms": {arm_key(*a): dict(costs) for a in planned_arms(cfg)}}


def test_trainings_are_scheduled_longest_first_on_the_slots():
    from ptycho.study.estimate import schedule

    assert schedule([4, 3, 3, 2], 2) == 6 and schedule([3, 3, 2, 2, 2], 2) == 7  # greedy, as Snakemake runs them
    assert schedule([5, 1, 1], 2) == 5 and schedule([5, 1, 1], 1) == 7


def test_the_estimate_grows_with_the_work_and_skips_what_is_done(base):
    from ptycho.study.estimate import estimate, training_seconds

    cfg = resolve(base, hardware=AMX)
    cal = _calibration(cfg)
    full = estimate(cfg, cal, 2)
    assert full.trainings == 7 and full.total_s == pytest.approx(full.training_s + full.bench_s + full.rest_s)
    longer = estimate(resolve(base, {"train": {"epochs": 40}}, hardware=AMX), cal, 2)
    assert longer.training_s > 1.8 * full.training_s - 60
    assert estimate(cfg, _calibration(cfg, 0.2), 2).training_s > 1.9 * full.training_s - 60
    done = estimate(cfg, cal, 2, trained=arms(cfg)[:6], bench_done=True)
    assert done.trainings == 1 and done.bench_s == 0
    assert done.training_s == pytest.approx(training_seconds(cfg, "baseline", next(iter(_costs(cal).values()))))
    assert estimate(cfg, cal, 1).training_s > full.training_s  # one slot: one at a time


def test_the_estimate_of_the_users_own_data_counts_its_patterns_at_its_side(base, monkeypatch):
    """The siemens preset was estimated at 32 min and took about half: the estimate counted
    the default simulation's 2178 training groups, not the star's 516 patterns. It counts
    the file's patterns and calibrates at the side the study trains on (data.n, else the
    file's own)."""
    from ptycho.study.calibration import pattern_side as _pattern_side
    from ptycho.study.estimate import _samples, estimate

    monkeypatch.chdir(ROOT)  # the preset names the star relative to the work folder
    simulated = resolve(base, {"models": ["pinn"]}, hardware=AMX)
    star = resolve(base, {"preset": "siemens"}, hardware=AMX)
    assert _samples(simulated, "pinn", "train") == 2178 and _pattern_side(simulated) == 64
    assert _samples(star, "pinn", "train") == 516 and _samples(star, "pinn", "test") == 516
    assert _pattern_side(star) == 64
    native = resolve(base, {"preset": "siemens", "data": {"n": 0}}, hardware=AMX)
    assert _pattern_side(native) == 128  # the file's own side
    cal = _calibration(simulated)
    assert estimate(star, cal, 2).training_s < 0.3 * estimate(simulated, cal, 2).training_s


def _costs(cal):
    from ptycho.study.calibration import arm_costs as costs

    return costs(cal)


def test_over_the_budget_the_lines_name_cheaper_choices(base):
    from ptycho.study.estimate import estimate_lines

    cfg = resolve(base, {"budget_min": 5}, hardware=AMX)
    est, lines = estimate_lines(cfg, _calibration(cfg, 0.5), 2)
    assert lines[0].startswith("this study will take about ") and "(2 trainings at once; 7 trainings" in lines[0]
    assert lines[1].startswith("that is over the study's budget of 5 min (budget_min); cheaper: ")
    assert "--config 'seeds=[0,1]'" in lines[1]
    emulated = resolve(base, {"budget_min": 5, "precision": ["mixed_bfloat16"]}, hardware=AVX2)
    _, lines = estimate_lines(emulated, _calibration(emulated, 0.5), 2, hardware=AVX2)
    assert ", training mixed_bfloat16, which this machine only emulates (precision=[auto], float32 here: " in lines[0]
    _, lines = estimate_lines(resolve(base, {"budget_min": 10000}, hardware=AMX), _calibration(cfg), 2)
    assert len(lines) == 1


def test_a_study_that_may_add_seeds_says_what_it_takes_at_the_cap(base):
    """The estimate is for the configured seeds; with max_seeds the line also says what
    the study takes if every look adds seeds up to the cap (issue 45)."""
    from ptycho.study.estimate import estimate, estimate_lines
    from ptycho.study.workflow import look_plan

    cfg = resolve(base, {"max_seeds": 7, "budget_min": 10000}, hardware=AMX)
    cal = _calibration(cfg)
    est, lines = estimate_lines(cfg, cal, 2)
    capped = look_plan(cfg).at_cap(cfg)
    assert capped["per_model"]["pinn"]["seeds"] == [0, 1, 2, 3, 4, 5, 6] and capped["per_model"]["baseline"][
        "seeds"
    ] == [0]
    most = estimate(capped, cal, 2)
    assert most.trainings == 15 and most.total_s > 2 * est.total_s - 600
    assert lines[0].endswith("if the looks add seeds to the cap (max_seeds=7)") and "; up to " in lines[0]
    _, plain = estimate_lines(resolve(base, {"budget_min": 10000}, hardware=AMX), cal, 2)
    assert "max_seeds" not in plain[0]


def test_a_finished_study_given_max_seeds_says_what_its_looks_may_add(tmp_path, monkeypatch, base):
    """Given max_seeds after its configured arms were trained and its bench run, a study
    printed no estimate at all, as if only minutes were left, while its looks could add
    trainings (the AVX2 default given max_seeds=5, 2026-12-03: 4 more, about 40 min). It
    now says what those may take, without the seeds a look has already trained."""
    from ptycho.study.bench.machine import machine_info
    from ptycho.study.calibration import calibration_path
    from ptycho.study.estimate import announce, estimate, minutes
    from ptycho.study.workflow import look_plan

    monkeypatch.setenv("PTYCHO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PTYCHO_CALIBRATE", "1")
    plain = resolve(base, {"budget_min": 10000}, hardware=AMX)
    looking = resolve(base, {"budget_min": 10000, "max_seeds": 5}, hardware=AMX)
    folder = tmp_path / "results" / "default"

    def trained(*names):
        for name in names:
            (folder / "models" / name).mkdir(parents=True)
            (folder / "models" / name / "model.json").write_text("{}")

    trained(*arms(plain))
    (folder / "bench").mkdir()
    (folder / "bench" / "bench.json").write_text("{}")
    for cfg in (plain, looking):  # one calibration: it does not depend on the seeds
        path = calibration_path(cfg, 2, 1, machine_info())
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_calibration(cfg)))
    capped = look_plan(looking).at_cap(looking)

    def up_to(done):
        most = estimate(capped, _calibration(looking), 2, done, bench_done=True)
        return f"; up to {minutes(most.total_s)} if the looks add seeds to the cap (max_seeds=5)"

    assert announce(plain, tmp_path / "results", 2, 1, AMX) == []
    line, worth = announce(looking, tmp_path / "results", 2, 1, AMX)
    assert worth.startswith("if XLA changes nothing, looks at 3 and 5 seeds per arm")
    assert "(7 of 7 trainings done)" in line and line.endswith(up_to(arms(plain)))
    added = [a for a in arms(capped) if a not in arms(plain)]
    assert len(added) == 4  # off and physics at seeds 3 and 4
    seed3 = [a for a in added if a.endswith("-s3")]
    trained(*seed3)  # a look added seeds 3 and 4; 3 is trained
    later, _ = announce(looking, tmp_path / "results", 2, 1, AMX)
    assert "(7 of 7 trainings done)" in later and later.endswith(up_to(arms(plain) + seed3))
    assert up_to(arms(plain) + seed3) != up_to(arms(plain))
    trained(*(a for a in added if a.endswith("-s4")))
    assert announce(looking, tmp_path / "results", 2, 1, AMX) == []


def test_max_seeds_auto_plans_the_most_seeds_the_budget_fits_and_keeps_them(tmp_path, monkeypatch, base):
    """``max_seeds: auto`` (issue 45, item 5: seeds added while the budget allows): the cap
    is the most seeds per arm at which the whole study, every look taken, fits budget_min
    by this machine's calibration; more cores or a larger budget fit more; below the
    configured seeds' own cost, no look. The workflow records it on its first calibrated
    run and every later parse plans the same looks, until the budget or the seeds change."""
    from ptycho.study.bench.machine import machine_info
    from ptycho.study.calibration import calibration_path
    from ptycho.study.estimate import announce, estimate, seed_cap, seeds_in_budget, study_s
    from ptycho.study.looks import CAP_FILE, recorded_cap
    from ptycho.study.workflow import look_plan

    def cfg_at(budget):
        return resolve(base, {"max_seeds": "auto", "budget_min": budget}, hardware=AMX)

    cal = _calibration(cfg_at(35))
    three = estimate(cfg_at(35), cal, 2).total_s / 60
    at_cap = {}
    for budget in (three - 1, three + 1, 2 * three, 4 * three):
        cap, total_s = seeds_in_budget(cfg_at(budget), cal, 2)
        at_cap[budget] = cap
        assert 3 <= cap <= 25 and (cap == 3 or total_s <= 60 * budget)  # the configured 3, then 2 a look
        if cap < 25:  # one seed more would not fit: the last look adds what the budget's rest holds
            more = look_plan(cfg_at(budget), cap + 1).at_cap(cfg_at(budget))
            assert estimate(more, cal, 2).total_s > 60 * budget
    assert at_cap[three - 1] == 3 and at_cap[three + 1] == 3  # a seed more costs a round of trainings
    assert at_cap[2 * three] > 3 and at_cap[4 * three] > at_cap[2 * three]
    assert seeds_in_budget(cfg_at(2 * three), cal, 4)[0] > at_cap[2 * three]  # twice the trainings at once
    plan = look_plan(cfg_at(2 * three), at_cap[2 * three])
    assert plan.sequential and plan.max_seeds == at_cap[2 * three] and look_plan(cfg_at(35)).looks == 1

    # The workflow's side: announce works the cap out and records it; later parses read it.
    monkeypatch.setenv("PTYCHO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PTYCHO_CALIBRATE", "1")
    cfg, folder = cfg_at(2 * three), tmp_path / "results" / "default"
    path = calibration_path(cfg, 2, 1, machine_info())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cal))
    assert seed_cap(cfg, folder, 2, 1) == at_cap[2 * three]  # a dry run: from the calibration
    assert announce(cfg, tmp_path / "results", 2, 1, AMX, record=False) and not (folder / CAP_FILE).exists()
    lines = announce(cfg, tmp_path / "results", 2, 1, AMX)
    assert f"max_seeds auto: up to {at_cap[2 * three]} seeds per arm fit the budget" in lines[-2]
    assert lines[-1].startswith("if XLA changes nothing, looks at 3, 5")  # what they are worth
    assert f"(max_seeds={at_cap[2 * three]})" in lines[0]
    assert recorded_cap(folder, look_plan(cfg), cfg["budget_min"]) == at_cap[2 * three]
    tight = announce(cfg_at(three + 1), tmp_path / "results", 2, 1, AMX, record=False)
    five, seven = (math.ceil(study_s(cfg_at(three + 1), cal, 2, n) / 60) for n in (5, 7))
    assert three + 1 < five < seven  # what the line prices is what would not fit, and grows with the seeds
    assert tight[-2] == "max_seeds auto: no look adds seeds (even 1 more per arm would not fit the budget of " + (
        f"{three + 1} min (budget_min) on this machine; the whole study with 5 seeds per arm about {five} min, "
        f"7 about {seven} min: a budget_min that holds one lets the looks add seeds)"
    )
    assert seeds_in_budget(cfg_at(five), cal, 2)[0] == 5  # and that budget buys them
    assert tight[-1].startswith("if XLA changes nothing, 3 seeds per arm find quality and convergence NOT WORSE")
    four = study_s(cfg_at(three + 1), cal, 2, 4) / 60
    last = seeds_in_budget(cfg_at(four), cal, 2)  # a budget that holds one seed more, not two
    assert last == (4, pytest.approx(60 * four)) and look_plan(cfg_at(four), 4).sizes("pinn") == (3, 4)
    path.write_text(json.dumps(_calibration(cfg, 0.5)))  # a slower machine later: the record holds
    assert seed_cap(cfg, folder, 2, 1) == at_cap[2 * three]
    assert recorded_cap(folder, look_plan(cfg), 4 * three) is None  # another budget: worked out again
    assert seed_cap(cfg_at(4 * three), folder, 2, 1) < at_cap[4 * three]  # from the slower calibration
    assert seed_cap(resolve(base, {"max_seeds": 5}, hardware=AMX), folder, 2, 1) is None  # a number is its own
    monkeypatch.setenv("PTYCHO_CALIBRATE", "0")
    assert seed_cap(cfg_at(4 * three), folder, 2, 1) is None  # no calibration, no record: no looks


def test_a_calibration_older_than_its_max_age_is_made_again(tmp_path, monkeypatch, capsys, base):
    """A machine's speed drifts (a shared VM timed 0.39 s per step one day, 0.27 s the next,
    and its day-old calibration estimated 2.0 h for an 83-min study): a cached calibration
    over CALIBRATION_MAX_AGE_S old is made again, and the line says why. The child process
    that times the arms is replaced here by one that writes a fixed record (the slow
    pipeline test calibrates for real)."""
    from ptycho.study import calibration
    from ptycho.study.bench.machine import machine_info
    from ptycho.study.estimate import announce

    monkeypatch.setenv("PTYCHO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PTYCHO_CALIBRATE", "1")
    cfg = resolve(base, {"budget_min": 10000}, hardware=AMX)
    path = calibration.calibration_path(cfg, 2, 1, machine_info())
    assert calibration.calibration_due(path)  # none cached
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(_calibration(cfg, step_s=0.4)))
    made = path.stat().st_mtime
    limit = calibration.CALIBRATION_MAX_AGE_S
    assert not calibration.calibration_due(path, now=made + limit - 60)
    assert calibration.calibration_due(path, now=made + limit + 60)

    timed = []

    def calibrate(command, **kwargs):  # `ptycho calibrate ... --out PATH`: a fresh record
        timed.append(command)
        Path(command[command.index("--out") + 1]).write_text(json.dumps(_calibration(cfg, step_s=0.2)))

    monkeypatch.setattr(subprocess, "run", calibrate)
    slow = announce(cfg, tmp_path / "results", 2, 1, AMX)
    assert not timed  # fresh: the cached record is used
    os.utime(path, (made - limit - 60, made - limit - 60))  # now older than the limit
    fast = announce(cfg, tmp_path / "results", 2, 1, AMX)
    assert len(timed) == 1 and "calibrate" in timed[0]
    assert f"again: the cached timing is over {limit / 3600:g} h old" in capsys.readouterr().err
    assert slow != fast and not calibration.calibration_due(path)  # the new record's estimate
    announce(cfg, tmp_path / "results", 2, 1, AMX)
    assert len(timed) == 1


def test_no_cheaper_choice_trains_too_few_epochs_to_learn(base):
    """On a slow machine (an AVX2 CPU's float32 step) the cheaper choices never go below
    40 % of the study's epochs (8 of 20 still learns; 2, once offered here, collapses);
    where nothing fits, the least that still learns is named as over the budget."""
    from ptycho.study.estimate import cheaper, estimate

    cfg = resolve(base, {"budget_min": 35}, hardware=AVX2)
    cal = _calibration(cfg, 0.37)  # this AVX2 EPYC's float32 step, two at once (2026-12-01)
    assert estimate(cfg, cal, 2).total_s > 90 * 60
    options = cheaper(cfg, cal, 2, 35 * 60)
    assert not any(f"epochs: {e}}}" in o for o in options for e in range(1, 8)), options
    assert options[0].startswith("--config 'seeds=[0,1]' (") and "fewer seeds decide less often" in options[0]
    assert options[-1].startswith("--config 'train={epochs: 8}' 'seeds=[0,1]' (")
    assert options[-1].endswith("; over the budget, but the least that still learns)")
    least = estimate({**resolve(base, {"train": {"epochs": 8}}, hardware=AVX2), "seeds": [0, 1]}, cal, 2)
    roomy = cheaper(cfg, cal, 2, least.total_s + 60)  # now a choice of epochs with two seeds fits
    assert roomy[-1].startswith("--config 'train={epochs: ") and roomy[-1].endswith("; lower quality)")
    assert "least that still learns" not in roomy[-1]
    one_seed = resolve(base, {"seeds": [0]}, hardware=AVX2)
    options = cheaper(one_seed, _calibration(one_seed, 0.37), 2, 60)
    assert options == [options[0]] and options[0].startswith("--config 'train={epochs: 8}' (")


def _snakemake_dry_run(work: Path, env: dict, *config: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(work), "-n", "--cores", "2", "all"]
        + (["--config", *config] if config else []),
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
    )


@pytest.mark.parametrize(
    ("flags", "gpu", "config", "first", "warned"),
    [
        ("avx2 fma", "none", (), "precision auto = float32: this CPU only emulates", False),
        ("avx2 avx512f avx512_bf16", "none", (), "precision auto = mixed_bfloat16: this CPU has avx512_bf16", False),
        ("avx2 amx_tile amx_bf16", "none", (), "precision auto = mixed_bfloat16: this CPU has amx_bf16", False),
        ("avx2", "8.0", (), "precision auto = mixed_bfloat16: the GPU (compute capability 8.0)", False),
        # named: trained as asked, with the warning (the bench's auto is float32 here)
        ("avx2 fma", "none", ("precision=[mixed_bfloat16]",), "precision auto = float32", True),
    ],
)
def test_a_dry_run_says_the_precision_and_the_estimate_before_any_job(
    tmp_path, monkeypatch, base, flags, gpu, config, first, warned
):
    """The dry run of the default study on each kind of machine: the chosen precision (or the
    warning for an emulated one named explicitly) and the estimate, from a calibration
    cached for this config (a fixed one here: the arithmetic is tested above; the slow
    pipeline test calibrates for real)."""
    from ptycho.nets.precision import Hardware as HW
    from ptycho.study.bench.machine import machine_info
    from ptycho.study.calibration import calibration_path
    from ptycho.study.schedule import concurrent_jobs, usable_cores

    env = {
        "PTYCHO_CPU_FLAGS": flags,
        "PTYCHO_GPU_CAPABILITY": gpu,
        "PTYCHO_CALIBRATE": "1",
        "PTYCHO_CACHE": str(tmp_path / "c"),
    }
    overrides = dict(c.split("=", 1) for c in config)
    if overrides.get("precision"):
        overrides["precision"] = ["mixed_bfloat16"]
    hardware = HW(tuple(f for f in flags.split() if f != "fma"), None if gpu == "none" else (8, 0))
    cfg = resolve(base, overrides, hardware=hardware)
    at_once = concurrent_jobs(1, 2, usable_cores())
    monkeypatch.setenv("PTYCHO_CACHE", env["PTYCHO_CACHE"])
    path = calibration_path(cfg, at_once, 1, machine_info())
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(_calibration(cfg)))
    work = tmp_path / "w"
    work.mkdir()
    result = _snakemake_dry_run(work, env, *config)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [
        line.removeprefix("ptycho workflow: ")
        for line in result.stderr.splitlines()
        if line.startswith("ptycho workflow:")
    ]
    assert lines[0].startswith(first), lines
    assert any(line.startswith("warning: precision mixed_bfloat16: this CPU has none of") for line in lines) == warned
    (estimate,) = [line for line in lines if line.startswith("this study will take about ")]
    assert "2 trainings at once; 7 trainings" in estimate or "1 training at once; 7 trainings" in estimate
    assert not (work / "results").exists()  # a dry run writes nothing


def test_the_parent_run_carries_what_auto_chose_and_why(tmp_path, base, cli):
    """``precision: auto``'s choice is the parent run's tag and its params (with the reason)."""
    from mlflow.tracking import MlflowClient

    cfg = resolve(base, {"results": "r"}, hardware=AVX2)
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    result = cli("track", "start", "--config-json", "c.json", "--out", "p.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    parent = json.loads((tmp_path / "p.json").read_text())
    run = MlflowClient(parent["tracking_uri"]).get_run(parent["run_id"])
    assert run.data.tags["auto_precision"] == "float32"
    assert run.data.params["auto_precision.precision"] == "float32"
    assert run.data.params["auto_precision.reason"] == cfg["auto_precision"]["reason"]
    assert json.loads(run.data.params["precision"]) == ["float32"]


def test_the_workflow_says_how_often_its_looks_decide_and_the_setting_that_would(base):
    """Before the first job (issue 45: a verdict that decides): how often the plan's looks
    find quality and convergence NOT WORSE when XLA changes nothing, at the spreads the
    recorded studies measured (``expected_spread``), and what would decide in 80 % of runs:
    under ``max_seeds: auto`` the budget_min that buys those seeds here, else the
    max_seeds. More seeds decide more often, more comparisons or two-sided questions less,
    a tighter spread needs fewer; a study with one seed per arm (smoke) has nothing to say."""
    from ptycho.study.estimate import PLANNED_CHANCE, decision_chance, decision_line, seeds_in_budget, study_s

    cfg = resolve(base, {"max_seeds": 4}, hardware=AMX)
    cal = _calibration(cfg)
    (sizes, few), (_, many) = decision_chance(cfg), decision_chance(cfg, 13)
    assert sizes == (3, 4) and 0.05 < few < many
    line = decision_line(cfg, cal, 2, budgeted=False)
    assert line.startswith(f"if XLA changes nothing, looks at 3 and 4 seeds per arm find quality and convergence "
                           f"NOT WORSE in about {100 * few:.0f} % of runs (expected_spread")  # fmt: skip
    n = next(n for n in range(5, 26) if decision_chance(cfg, n)[1] >= PLANNED_CHANCE)
    assert line.endswith(f"; in 80 %, looks up to {n} seeds per arm: --config max_seeds={n}")
    budget = math.ceil(study_s(cfg, cal, 2, n) / 60)  # max_seeds auto: the budget that buys them
    assert decision_line(cfg, cal, 2).endswith(f"looks up to {n} seeds per arm: --config budget_min={budget} here")
    assert seeds_in_budget(resolve(base, {"max_seeds": "auto", "budget_min": budget}, hardware=AMX), cal, 2)[0] == n
    one_look = resolve(base, {"max_seeds": None}, hardware=AMX)  # no looks: one judgement at alpha
    assert decision_chance(one_look) == ((3,), pytest.approx(decision_chance(one_look, 3)[1]))
    assert decision_chance(one_look)[1] < few and decision_line(one_look, cal, 2).startswith(
        "if XLA changes nothing, 3 seeds per arm find"
    )
    two = resolve(base, {"max_seeds": 4, "xla": ["off", "jit", "physics"]}, hardware=AMX)  # both must decide
    assert decision_chance(two)[1] < few
    tight = resolve(
        base,
        {"max_seeds": 4, "expected_spread": {"amplitude": 0.002, "phase": 0.002, "convergence": 0.004}},
        hardware=AMX,
    )
    assert decision_chance(tight)[1] > PLANNED_CHANCE and "; in 80 %" not in decision_line(tight, cal, 2)
    wide = resolve(base, {"max_seeds": 4, "expected_spread": {"amplitude": 0.5}}, hardware=AMX)
    assert decision_line(wide, cal, 2).endswith("; not even 25 seeds per arm decide in 80 %")
    equivalent = resolve(base, {"max_seeds": 4, "thresholds": {"two_sided": True}}, hardware=AMX)
    assert decision_chance(equivalent)[1] < few and "EQUIVALENT in about" in decision_line(equivalent, cal, 2)
    lowdose = resolve(base, {"preset": "lowdose", "max_seeds": 12}, hardware=AMX)
    assert decision_line(lowdose, _calibration(lowdose), 2).startswith(
        "if XLA changes nothing, looks at 3, 5, 7, 9, 11 and 12 seeds"
    )
    assert decision_line(resolve(base, {"preset": "smoke"}, hardware=AMX), cal, 2) == ""
