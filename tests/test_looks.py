"""Seeds added until the verdict decides (issue 45): the plan of looks, what a look decides
on a study's trainings and scores, the error rate the sequential rule keeps (by
simulation), the report's section, and the workflow's checkpoint (dry run; the slow test
runs it)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from ptycho.artifacts import write_json
from ptycho.errors import ConfigError
from ptycho.study import looks, looks_view
from ptycho.study.checklist import Inputs
from ptycho.study.checklist.look import judge
from ptycho.study.checklist.quality import COLUMNS, quality
from ptycho.study.results import StudyResults
from ptycho.study.stats import ALPHA, sequential_levels, spent
from ptycho.study.workflow import look_plan, resolve

ROOT = Path(__file__).resolve().parents[1]
THRESHOLDS = {"convergence": 0.05, "quality": 0.02, "speedup": 1.0}
EPOCHS, STEPS = 6, 10  # n_train 80 / batch 8


@pytest.fixture(scope="module")
def base():
    return yaml.safe_load((ROOT / "config.yaml").read_text())


# ------------------------------------------------------------------ the plan
def test_the_plan_splits_alpha_over_the_looks_it_plans(base):
    plan = look_plan(resolve(base, {"max_seeds": 7}))
    assert plan.seeds == {"pinn": (0, 1, 2)}  # the default's baseline trains one arm: nothing to compare
    assert plan.looks == 3 and plan.sequential and plan.sizes("pinn") == (3, 5, 7)
    # the looks spend alpha, little at the first: levels rising with the seeds, each at least
    # its look's share of the spending (a union bound), the last above it (set by simulation)
    levels, shares = plan.levels, np.diff((0.0, *spent(ALPHA, (3, 5, 7))))
    assert levels == sequential_levels(ALPHA, (3, 5, 7)) and levels[0] < levels[1] < levels[2] < ALPHA
    assert (
        all(level >= share * (1 - 1e-12) for level, share in zip(levels, shares, strict=True))
        and levels[2] > 1.1 * shares[2]
    )
    assert plan.level(0) == levels[0] and plan.level(2) == levels[2]
    with pytest.raises(ConfigError, match="look 3 is not one of this plan's 3 looks"):
        plan.level(3)
    assert plan.added((0, 1, 2)) == (0, 1, 2, 3, 4) and plan.added((0, 1, 2, 3, 4, 5)) == (0, 1, 2, 3, 4, 5, 6)
    assert plan.added((0, 1, 2, 3, 4, 5, 6)) == (0, 1, 2, 3, 4, 5, 6)  # at the cap: no more
    one = look_plan(resolve(base))  # no max_seeds: one look at the full rate, as before looks existed
    assert one.looks == 1 and not one.sequential and one.levels == (ALPHA,) and one.level(0) == ALPHA
    assert looks.Plan.from_json(plan.to_json()) == plan


def test_a_cap_below_the_seeds_an_arm_has_is_one_line(base):
    with pytest.raises(ConfigError) as err:
        resolve(base, {"max_seeds": 2})
    assert "config key 'max_seeds' = 2 is below the 3 seeds" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="seeds_per_look"):
        resolve(base, {"max_seeds": 6, "seeds_per_look": 0})


# ------------------------------------------------------------------ a look on a study's files
def _curve(final: float, reach: int) -> list[float]:
    """A validation curve falling from 1.0 to ``final`` at epoch ``reach``, then flat."""
    return [final + (1.0 - final) * max(0, reach - e) / reach for e in range(1, EPOCHS + 1)]


def _study(tmp_path: Path, seeds, amp, step_s, reach=(4, 4)) -> StudyResults:
    """Files of a PINN study with arms ``off`` and ``jit``: per seed, each arm's amplitude
    SSIM (``amp[mode](seed)``), its step time (``step_s[mode]``) and the epoch its
    validation loss reaches its final value (``reach``: off's, jit's)."""
    models, metrics = [], []
    for seed in seeds:
        for mode, epoch in zip(("off", "jit"), reach, strict=True):
            name = f"pinn-{mode}-s{seed}"
            steps = [step_s[mode] * (1 + 0.002 * ((k % 7) - 3)) for k in range(EPOCHS * STEPS - 1)]
            models.append(tmp_path / "models" / name / "model.json")
            models[-1].parent.mkdir(parents=True, exist_ok=True)
            write_json(
                models[-1],
                {
                    "model": {"kind": "pinn"},
                    "loss_bounds": {"floor": 0.0},
                    "train": {"xla": mode, "seed": seed, "precision": "float32", "batch_size": 8},
                    "n_train": 80,
                    "initial_val_loss": 1.2,
                    "history": [
                        {"epoch": e + 1, "train_loss": v, "val_loss": v}
                        for e, v in enumerate(_curve(0.10 * (1 + 0.01 * seed), epoch))
                    ],
                    "timing": {"compile_s": 2.0, "step_times_s": steps, "step_median_s": step_s[mode]},
                },
                producer="train",
            )
            metrics.append(tmp_path / "metrics" / f"{name}.json")
            metrics[-1].parent.mkdir(exist_ok=True)
            scores = dict.fromkeys(COLUMNS, 0.5) | {"amp_ssim": amp[mode](seed), "phase_ssim": 0.9}
            write_json(metrics[-1], {"mean": scores}, producer="evaluate")
    return StudyResults(models=tuple(map(str, models)), metrics=tuple(map(str, metrics)))


def _luck(seed: int) -> float:
    """A seed's own quality, shared by both arms of the seed (initial weights, batch order)."""
    return 0.8 + 0.03 * math.sin(3.7 * seed)


PLAN = looks.Plan({"pinn": (0, 1, 2)}, max_seeds=7, seeds_per_look=2)


def test_identical_arms_decide_at_the_first_look(tmp_path):
    study = _study(tmp_path, range(3), {"off": _luck, "jit": _luck}, {"off": 0.1, "jit": 0.1})
    look = judge(0, PLAN, Inputs(results=study), THRESHOLDS)
    assert look.statuses["quality"] == look.statuses["convergence"] == "PASS"
    assert look.statuses["speedup"] == "FAIL"  # identical steps: no measurable effect, decided
    assert look.stop and look.why == looks.DECIDED and look.seeds == {"pinn": (0, 1, 2)}
    assert "every seeded item decided, stopped" in look.words()


def test_a_true_2x_slowdown_decides_slower_at_the_first_look(tmp_path):
    study = _study(tmp_path, range(3), {"off": _luck, "jit": _luck}, {"off": 0.1, "jit": 0.2})
    look = judge(0, PLAN, Inputs(results=study), THRESHOLDS)
    assert look.statuses["speedup"] == "FAIL" and look.stop and look.why == looks.DECIDED


def test_an_item_decided_at_a_look_keeps_its_decision_and_is_judged_at_that_look(tmp_path):
    """A group-sequential decision is final (the levels keep the rate of deciding at ANY
    look): an item decided at look 1 is not judged again at look 2, where its seeds might
    no longer decide it; the study stops once every item has decided at some look, and the
    checks judge each item on the seeds of the look it decided at (``looks.deciding``)."""
    open_quality = quality(
        {f"pinn-{m}-s{s}": {"mean": {"amp_ssim": v, "phase_ssim": 0.9}}
         for m, values in {"off": (0.8, 0.8, 0.8), "jit": (0.78, 0.82, 0.795)}.items() for s, v in enumerate(values)},
        0.02, alpha=PLAN.level(0),
    )  # fmt: skip
    assert open_quality.status == "INCONCLUSIVE"
    decided = quality(
        {f"pinn-{m}-s{s}": {"mean": {"amp_ssim": 0.8, "phase_ssim": 0.9}} for m in ("off", "jit") for s in range(5)},
        0.02, alpha=PLAN.level(1),
    )  # fmt: skip
    assert decided.status == "PASS"
    seeds = {"pinn": (0, 1, 2)}
    results = {"convergence": decided, "quality": open_quality}
    first = looks.decide(PLAN, 0, seeds, results, looks.open_comparisons(results, THRESHOLDS))
    assert first.why == looks.MORE and first.settled == {"convergence": 0}
    # look 2: quality decides, convergence would be open now: it keeps look 1's PASS
    results = {"convergence": open_quality, "quality": decided}
    second = looks.decide(PLAN, 1, first.next_seeds, results, looks.open_comparisons(results, THRESHOLDS), first)
    assert second.stop and second.why == looks.DECIDED and not second.open
    assert second.statuses == {"convergence": "PASS", "quality": "PASS"} and second.settled == {
        "convergence": 0,
        "quality": 1,
    }
    assert "convergence PASS (at look 1), quality PASS" in second.words()
    chain = (first, second)
    assert looks.deciding(chain, "convergence") is first and looks.deciding(chain, "quality") is second
    assert looks.deciding(chain, "speedup") is second  # never decided: the last look
    assert looks.Look.from_json(json.loads(json.dumps(second.to_json()))) == second
    old = {k: v for k, v in second.to_json().items() if k != "settled"}  # a record from before 2026-12-04
    assert looks.Look.from_json(old).settled == {}
    text = looks_view.sentence(chain)
    assert "convergence at look 1 (pinn 3 seeds per arm, level 0.00394" in text
    assert "quality at look 2 (pinn 5 seeds per arm, level 0.0143, intervals at 97.1 % and 98.6 %)" in text
    # judge does not judge a decided item again: a true 2x slowdown stays as look 1 said
    study = _study(tmp_path, range(5), {"off": _luck, "jit": _luck}, {"off": 0.1, "jit": 0.2})
    before = dataclasses.replace(first, statuses={**first.statuses, "speedup": "PASS"}, settled={"speedup": 0})
    look = judge(1, PLAN, Inputs(results=study), THRESHOLDS, before)
    assert look.statuses["speedup"] == "PASS" and look.settled["speedup"] == 0 and look.settled["quality"] == 1
    with pytest.raises(ConfigError, match="pass look 1's record of the same plan"):
        judge(2, PLAN, Inputs(results=study), THRESHOLDS, before)  # look 0 is not the look before look 2


def test_a_noisy_study_adds_seeds_to_the_open_model_and_stops_at_the_cap_with_what_it_would_need(tmp_path):
    def noisy(seed: int) -> float:  # jit's own scatter around off: paired differences of sd ~0.025
        return _luck(seed) + (0.03, -0.03, 0.0, -0.025, 0.02, -0.03, 0.015)[seed]

    first = judge(0, PLAN, Inputs(results=_study(tmp_path / "a", range(3), {"off": _luck, "jit": noisy},
                                                       {"off": 0.1, "jit": 0.1})), THRESHOLDS)  # fmt: skip
    assert first.statuses["quality"] == "INCONCLUSIVE" and not first.stop and first.why == looks.MORE
    assert first.next_seeds == {"pinn": (0, 1, 2, 3, 4)}
    assert [o.key for o in first.open if o.item == "quality"] == ["pinn-jit"]
    assert "seeds added (pinn to 5)" in first.words()
    last = judge(2, PLAN, Inputs(results=_study(tmp_path / "b", range(7), {"off": _luck, "jit": noisy},
                                                      {"off": 0.1, "jit": 0.1})), THRESHOLDS)  # fmt: skip
    assert last.statuses["quality"] == "INCONCLUSIVE" and last.stop and last.why == looks.CAP
    assert math.isfinite(last.needed()) and last.needed() > 7
    assert f"need {last.needed():.0f} seeds per arm), stopped at the cap of 7 seeds per arm" in last.words()
    assert looks.Look.from_json(json.loads(json.dumps(last.to_json()))) == last


def test_a_look_stops_as_futile_only_where_no_number_of_seeds_would_settle_it():
    """Many seeds needed by a three-seed estimate is no reason to give up (the estimate is
    noisy); a mean so near the margin that more than MAX_SEEDS would be needed is."""
    plan = looks.Plan({"pinn": (0, 1, 2)}, max_seeds=5, seeds_per_look=1)
    values = {"off": {s: 0.8 for s in range(3)}, "jit": {0: 0.78, 1: 0.82, 2: 0.795}}
    metrics = {
        f"pinn-{m}-s{s}": {"mean": {"amp_ssim": v, "phase_ssim": 0.9}} for m in values for s, v in values[m].items()
    }
    result = quality(metrics, 0.02, alpha=plan.level(0))
    opened = looks.open_comparisons({"quality": result}, THRESHOLDS)
    assert result.status == "INCONCLUSIVE" and 5 < opened[0].needed < math.inf
    assert looks.decide(plan, 0, {"pinn": (0, 1, 2)}, {"quality": result}, opened).why == looks.MORE
    edge = [looks.Open("quality", "pinn-jit", "pinn", math.inf)]
    look = looks.decide(plan, 0, {"pinn": (0, 1, 2)}, {"quality": result}, edge)
    assert look.stop and look.why == looks.FUTILE
    assert "they need more than 1000 seeds per arm), stopped" in look.words()


def test_the_quality_sentence_names_the_interval_its_looks_alpha_judged_by():
    """Three planned looks (3, 5, 7 seeds) judge the last at 0.0383 (alpha 0.05 spent over
    them): its NOT WORSE reads the 92.3 % interval, and the report's first-screen sentence
    names that level, not the default's 90 %."""
    from ptycho.study import report as views

    plan = looks.Plan({"pinn": (0, 1, 2)}, max_seeds=7, seeds_per_look=2)
    values = {"off": {s: 0.80 + 0.01 * s for s in range(3)}, "jit": {0: 0.801, 1: 0.812, 2: 0.819}}
    metrics = {
        f"pinn-{m}-s{s}": {"mean": {"amp_ssim": v, "phase_ssim": 0.9}} for m in values for s, v in values[m].items()
    }
    record = quality(metrics, 0.02, alpha=plan.level(2)).to_json()
    report = {"items": {"quality": record}, "arms": {arm: {} for arm in metrics}}
    c = record["evidence"]["comparisons"]["pinn-jit"]["amp_ssim"]
    words = views.quality_sentence(json.loads(json.dumps(report)))  # as the file holds it
    assert f"amplitude SSIM {c['difference']:+.3f}, 92.3 % interval {c['low90']:+.3f} to {c['high90']:+.3f}" in words
    assert "90 %" not in words and "90%" not in words
    default = views.quality_sentence({**report, "items": {"quality": quality(metrics, 0.02).to_json()}})
    assert ", 90 % interval " in default


# ------------------------------------------------------------------ the error rate, by simulation
def _run_study(rng: np.random.Generator, plan: looks.Plan, difference: float, sd: float) -> looks.Look:
    """One synthetic study driven look by look by :func:`looks.decide`: its quality item
    on paired seeds whose arm differs from off by ``difference`` (plus scatter ``sd``)."""
    n = plan.max_seeds
    luck = rng.normal(0.8, 0.03, n)
    arm = luck + difference + rng.normal(0, sd, n)
    seeds, k = plan.seeds["pinn"], 0
    while True:
        metrics = {
            **{f"pinn-off-s{s}": {"mean": {"amp_ssim": luck[s], "phase_ssim": 0.9}} for s in seeds},
            **{f"pinn-jit-s{s}": {"mean": {"amp_ssim": arm[s], "phase_ssim": 0.9}} for s in seeds},
        }
        result = quality(metrics, 0.02, alpha=plan.level(k))
        look = looks.decide(
            plan, k, {"pinn": seeds}, {"quality": result}, looks.open_comparisons({"quality": result}, THRESHOLDS)
        )
        if look.stop:
            return look
        seeds, k = look.next_seeds["pinn"], k + 1


def test_the_sequential_rule_calls_a_worse_arm_not_worse_at_most_alpha_of_the_time():
    """Arms truly worse by exactly the margin (the hardest case): over 1000 simulated studies
    that add seeds look by look (3, 5, 7), the final verdict says NOT WORSE in at most
    alpha of them (binomial slack of three standard errors); and the looks add seeds: a
    study that stops later has more of them."""
    rng = np.random.default_rng(5)
    studies = 1000
    ended = [_run_study(rng, PLAN, -0.02, 0.012) for _ in range(studies)]
    wrong = sum(look.statuses["quality"] == "PASS" for look in ended)
    assert wrong / studies <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / studies)
    assert {look.index for look in ended} >= {0, 1, 2}  # some decided early, some went to the cap
    assert all(len(look.seeds["pinn"]) == 3 + 2 * look.index for look in ended)


def test_identical_arms_are_mostly_decided_not_worse_before_the_cap():
    rng = np.random.default_rng(6)
    ended = [_run_study(rng, PLAN, 0.0, 0.012) for _ in range(300)]
    decided = [look for look in ended if look.why == looks.DECIDED]
    assert len(decided) / len(ended) > 0.9 and all(look.statuses["quality"] == "PASS" for look in decided)


# ------------------------------------------------------------------ the report
def test_the_report_says_how_many_looks_were_taken_and_why_it_stopped(tmp_path):
    """The looks travel in the report's record and make a section of both views, only when
    a study took some (the recorded smoke report, without looks, gains nothing)."""
    from ptycho.study.report import markdown
    from ptycho.study.report.record import StudyReport

    study = _study(tmp_path, range(3), {"off": _luck, "jit": _luck}, {"off": 0.1, "jit": 0.1})
    look = judge(0, PLAN, Inputs(results=study), THRESHOLDS)
    recorded = json.loads((ROOT / "tests" / "data" / "smoke-validation.json").read_text())
    plain = StudyReport.from_json(recorded)
    record = StudyReport.from_json({**recorded, "looks": [look.to_json()]})
    assert record.looks == (look,) and StudyReport.from_json(record.to_json()).looks == (look,)
    assert "looks" not in plain.to_json() and "Seeds added until it decides" not in markdown(plain)
    text = looks_view.sentence(record.looks)
    assert "1 of 3 planned looks taken" in text and "It stopped because every seeded item decided" in text
    assert (
        "the looks judge at 0.00394, 0.0143 and 0.0383" in text
        and "little at the first, at levels set by simulation" in text
    )
    assert (
        "convergence, quality, speedup at look 1 (pinn 3 seeds per arm, level 0.00394, intervals at 99.2 % and 99.6 %)"
        in text
    )
    page = markdown(record)
    assert "Seeds added until it decides" in page and text in page and "stop: decided" in page
    from ptycho.study.report.answers import answers
    from ptycho.study.report.words import console_lines

    assert looks_view.headline(record.looks) in console_lines(record, "validation.html")
    assert looks_view.headline(record.looks).startswith(
        "Seeds: 1 of 3 planned looks (pinn 3 -> 3 seeds per arm), stopped: decided"
    )
    parent = answers(record)[""]
    assert parent.metrics["looks_taken"] == 1 and parent.metrics["seeds.pinn"] == 3
    assert parent.tags["looks.stopped"] == "decided"
    assert not [line for line in console_lines(plain, "v.html") if line.startswith("Seeds:")]


# ------------------------------------------------------------------ the workflow
def test_the_workflow_looks_only_when_max_seeds_is_set_and_judges_at_the_stopping_looks_level(tmp_path):
    """The real Snakemake, dry run: with max_seeds a look checkpoint stands between the
    trainings and the checks, which judge at the level of the look that stopped the study
    (unknown until the looks have run); without it, no look and the study's alpha."""

    def plan(*config: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "2", "all", "--config", f"results={tmp_path}/r",
             "allow_results_outside=true", "preset=smoke", *config],
            cwd=ROOT, capture_output=True, text=True, check=True, env={**os.environ, "PTYCHO_CALIBRATE": "0"},
        ).stdout  # fmt: skip

    with_looks = plan("max_seeds=3", "seeds_per_look=1")
    assert "checkpoint look:" in with_looks and "look --index 0" in with_looks
    # the checks judge at the level of the look that stops the study: known once it has run
    assert "checkpoint jobs" in with_looks and "--alpha <TBD>" in with_looks and "--alpha 0.05" not in with_looks
    without = plan()
    assert "look --index" not in without and "--alpha 0.05" in without
    # max_seeds: auto without a calibration or a recorded cap: no look; with the cap the
    # first calibrated run recorded (looks/cap.json), the looks it plans
    assert "look --index" not in plan("max_seeds=auto", "seeds=[0,1]")
    cfg = resolve(
        yaml.safe_load((ROOT / "config.yaml").read_text()), {"preset": "smoke", "max_seeds": "auto", "seeds": [0, 1]}
    )
    looks.record_cap(tmp_path / "r" / "smoke", look_plan(cfg), cfg["budget_min"], 6, 600.0)
    capped = look_plan(cfg, 6)
    assert capped.sequential and capped.sizes("pinn") == (2, 4, 6) and capped.sizes("baseline") == (1, 3, 5, 6)
    auto = plan("max_seeds=auto", "seeds=[0,1]")
    assert "look --index 0" in auto and "--alpha <TBD>" in auto


def test_a_plan_changed_after_the_study_looked_is_warned_about(tmp_path):
    """Raising the cap of a study that has looked re-plans its looks: the levels assume a
    plan fixed before the first look, so the workflow says the error rate no longer holds."""
    from ptycho.artifacts import write_json as write

    assert looks.replanned(tmp_path, PLAN) == ""  # no look yet
    look = looks.decide(PLAN, 0, {"pinn": (0, 1, 2)}, {}, ())
    write(tmp_path / "looks" / "0.json", look.to_json(), producer="look")
    assert looks.replanned(tmp_path, PLAN) == ""  # the same plan
    wider = dataclasses.replace(PLAN, max_seeds=11)
    said = looks.replanned(tmp_path, wider)
    assert "were planned otherwise (up to 7 seeds per arm, now 11)" in said and "\n" not in said
    assert "no longer keeps its error rate at 0.05" in said and "new results folder" in said
    other = looks.replanned(tmp_path, dataclasses.replace(PLAN, seeds={"pinn": (11, 12, 13)}, seeds_per_look=1))
    assert "(pinn seeds [0, 1, 2], now [11, 12, 13]; 2 seeds a look, now 1)" in other


def test_a_rerun_reads_this_plans_chain_of_looks_and_stops_at_anything_else(base, tmp_path):
    """``recorded_arms``: the first look's arms, then each recorded look's seeds while the
    chain holds; a look of another plan or one that cannot be read ends it."""
    plan = look_plan(resolve(base, {"preset": "smoke", "max_seeds": 3, "seeds_per_look": 1}))
    first = ["pinn-off-s0", "pinn-jit-s0"]

    def record(k, plan_, next_seeds):
        look = looks.Look(k, plan_, {"pinn": (0,)}, {}, why=looks.MORE, next_seeds={"pinn": next_seeds})
        write_json(tmp_path / "looks" / f"{k}.json", look.to_json(), producer="look")

    assert looks.recorded_arms(tmp_path, plan, first) == first  # no look yet
    record(0, plan, (0, 1))
    record(1, looks.Plan(plan.seeds, 4, 1, plan.alpha), (0, 1, 2))  # planned with another cap
    assert looks.recorded_arms(tmp_path, plan, first) == [*first, "pinn-off-s1", "pinn-jit-s1"]
    (tmp_path / "looks" / "1.json").write_text("{")  # cut short
    assert looks.recorded_arms(tmp_path, plan, first) == [*first, "pinn-off-s1", "pinn-jit-s1"]
    assert looks.recorded_arms(tmp_path, looks.Plan(plan.seeds), first) == first  # no looks planned
