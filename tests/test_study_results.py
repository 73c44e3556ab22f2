"""The study's one reader of its outputs (issue 43, item 2): :class:`StudyResults` opens a
results folder as the workflow lays it out, gives each record keyed by arm, and is the
only code in the package that reads the records the judging, figures, report and MLflow
view use."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ptycho.errors import PtychoError
from ptycho.study import solver_view
from ptycho.study.arm_summary import ArmSummary
from ptycho.study.arms import Arm
from ptycho.study.results import StudyResults

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "tests" / "data" / "smoke-study"
ARMS = ["baseline-jit-s0", "baseline-off-s0", "pinn-jit-s0", "pinn-off-s0"]


def test_a_results_folder_is_read_by_kind_and_keyed_by_arm():
    results = StudyResults.folder(STUDY)
    assert [Path(p).parent.name for p in results.models] == ARMS
    assert [Path(p).stem for p in results.metrics] == ARMS == [Path(p).stem for p in results.reconstructions]
    assert [Path(p).stem for p in results.checks] == ["accuracy", "convergence", "gradients", "quality", "speedup"]
    assert [Path(p).name for p in results.solver] == ["solve.json", "warm_start.json"]  # flat starts first
    assert results.bench == str(STUDY / "bench" / "bench.json") and results.probe is None and results.dataset is None
    assert sorted(a.name for a in results.trainings) == ARMS and Arm.parse("pinn-jit-s0") in results.histories
    arms = results.arms()
    assert sorted(arms) == ARMS
    for name, arm in arms.items():
        assert arm.status == "FINISHED" and arm.final == results.histories[Arm.parse(name)][-1].raw
        assert "step_times_s" not in arm.timing and arm.timing == results.timings[name]
        assert set(arm.metrics) >= {"amp_ssim", "phase_ssim"} and arm.infer_patterns_per_s > 0
        assert ArmSummary.from_json(arm.to_json()) == arm  # the report's entry reads back as it was
    assert results.failed == {} and results.condition_records == {} and results.refinement is None
    assert set(results.checked) == {"accuracy", "gradients", "convergence", "quality", "speedup"}
    assert solver_view.entry(results).engine and results.benchmark.arms


def test_the_typed_records_read_back_what_their_jobs_wrote():
    """A check's result and the solver's records, read into their types and written again,
    give the recorded JSON key for key (the format stamp is the artifact layer's): their
    to_json/from_json are the one place that knows those keys."""
    import json

    from ptycho.artifacts import _jsonable
    from ptycho.study.checklist.result import ItemResult
    from ptycho.study.solver_record import SolveRecord

    def stored(path):
        return {k: v for k, v in json.loads(Path(path).read_text()).items() if k != "format"}

    results = StudyResults.folder(STUDY)
    for path in results.checks:
        assert _jsonable(ItemResult.from_json(stored(path)).to_json()) == stored(path), path
    for path, record in zip(results.solver, results.solver_records, strict=True):
        assert _jsonable(record.to_json()) == stored(path), path
        assert SolveRecord.from_json(record.to_json()) == record
    # The report: validation.json read into a StudyReport and written again, key for key.
    from ptycho.study.report.record import StudyReport

    report = stored(STUDY / "expected" / "validation.json")
    typed = StudyReport.from_json(report)
    assert _jsonable(typed.to_json()) == report
    assert typed.items["speedup"].status == report["items"]["speedup"]["status"]
    assert (
        typed.solver.best.target.iterations
        == report["solver"]["modes"][report["solver"]["fastest"]]["target"]["iterations"]
    )
    with pytest.raises(
        PtychoError, match=r"^x.json: not a solver record; pass the JSON written by 'ptycho solve --out'$"
    ):
        SolveRecord.from_json({"runs": [{"mode": "off"}], "engine": "apg", "objects": 1, "patterns": 2}, "x.json")


def test_a_folder_gives_the_arms_files_not_the_solvers_beside_them(tmp_path):
    """The solver writes stitched/solver-<mode>.npz beside the arms' stitched objects."""
    import shutil

    shutil.copytree(STUDY, tmp_path / "s")
    (tmp_path / "s" / "stitched").mkdir()
    for name in ("pinn-off-s0", "solver-off", "solver-jit"):
        (tmp_path / "s" / "stitched" / f"{name}.npz").write_bytes(b"")
    results = StudyResults.folder(tmp_path / "s")
    assert [Path(p).stem for p in results.stitched] == ["pinn-off-s0"]


def test_two_trainings_of_one_arm_are_refused_in_one_line(tmp_path):
    results = StudyResults.folder(STUDY)
    twice = StudyResults(models=[*results.models, results.models[0]])
    with pytest.raises(PtychoError, match="a second training of arm baseline-jit-s0; pass each arm's model.json once"):
        _ = twice.trainings


def test_what_a_study_did_not_give_is_said_in_one_line(tmp_path):
    with pytest.raises(PtychoError, match=r"nope: no such results folder; pass results/<study> of a run"):
        StudyResults.folder(tmp_path / "nope")
    empty = StudyResults.folder(tmp_path)
    assert empty.trainings == {} and empty.arms() == {} and solver_view.entry(empty) is None
    with pytest.raises(PtychoError, match="no benchmark record given; pass the JSON written by 'ptycho bench --out'"):
        _ = empty.benchmark
    with pytest.raises(PtychoError, match="no test dataset given"):
        _ = empty.truth


def test_a_training_record_reads_older_files_with_the_defaults_decided_once():
    """TrainingRecord is the one reader of model.json's keys: the smoke study's records
    come out typed, and a record from before precisions, statuses, floors, the untrained
    model's loss and the validation curve reads with its documented defaults."""
    import json

    from ptycho.study.training_record import Epoch, TrainingRecord

    results = StudyResults.folder(STUDY)
    jit = results.trainings[Arm.parse("pinn-jit-s0")]
    stored = json.loads((STUDY / "models" / "pinn-jit-s0" / "model.json").read_text())
    assert jit.history[-1] == Epoch.of(stored["history"][-1]) and jit.final == stored["history"][-1]
    assert jit.step_times_s == tuple(stored["timing"]["step_times_s"]) and "step_times_s" not in jit.timing
    assert jit.steps_per_epoch == stored["n_train"] // stored["train"]["batch_size"] and not jit.failed
    assert jit.val_curve and jit.floor == stored["loss_bounds"]["floor"]
    assert TrainingRecord.of(jit) is jit
    old = {
        "model": {"kind": "pinn"},
        "train": {"xla": True, "seed": 1, "batch_size": 4, "epochs": 3},
        "n_train": 10,
        "history": [{"epoch": 1, "train_loss": 2.0, "val_loss": None}],
        "timing": {"compile_s": 1.5, "step_times_s": [0.1, 0.2], "step_median_s": 0.15},
    }
    rec = TrainingRecord.of(old)
    assert rec.arm == Arm("pinn", "jit", 1, "float32") and rec.status == "FINISHED" and rec.failure is None
    assert rec.floor is None and rec.initial_val_loss is None and rec.val_curve == ()
    assert rec.history[0].train_loss == 2.0 and rec.history[0].val_loss != rec.history[0].val_loss  # null: NaN
    assert rec.steps_per_epoch == 2 and rec.planned_epochs == 3 and rec.compile_s == 1.5
    failed = TrainingRecord.of({**old, "status": "FAILED", "failure": "loss became nan at epoch 2"})
    assert failed.failed and failed.failure == "loss became nan at epoch 2"


#: The records the judging, figures, report and MLflow view read (by their producers in
#: ptycho.artifacts.FORMATS), which only ptycho/study/results.py opens.
READ_ONLY_THERE = {"train", "evaluate", "bench", "refine_probe", "condition", "SOLVER", "_check_producer_of"}


def _producer(call: ast.Call) -> str | None:
    for kw in call.keywords:
        if kw.arg == "producer":
            return ast.unparse(kw.value).strip("\"'")
    return None


def test_nobody_else_opens_the_studys_records():
    """A second reader of model.json, the scores, the bench, the solver's or the checklist's
    records would be a second place that knows their keys: the reader's job. (Caught: a
    read checked against one of these producers; loading a network, load_meta, is the
    model's own reading.)"""
    offenders = []
    for path in sorted((ROOT / "ptycho").rglob("*.py")):
        if path.name == "results.py" and path.parent.name == "study":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("read_json"):
                if _producer(node) in READ_ONLY_THERE:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_the_studys_subject_is_a_role_of_one_network_kind():
    """The study's question is about one kind (Method.subject); the study reads the role,
    not the kind's name, apart from the table of how each kind looks in the figures and
    the quality item's subject-minus-baseline evidence (``pinn_minus_baseline``)."""
    from ptycho.nets.models import METHODS, SUBJECT

    assert [m.name for m in METHODS.values() if m.subject] == [SUBJECT]
    named = set()
    for path in sorted((ROOT / "ptycho" / "study").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in METHODS:
                named.add((str(path.relative_to(ROOT)), node.value))
    assert named == {
        ("ptycho/study/presentation.py", "pinn"),
        ("ptycho/study/presentation.py", "baseline"),
        ("ptycho/study/checklist/quality.py", "baseline"),
    }


@pytest.mark.parametrize(
    "entry",
    [
        {"timing": None, "final": None, "status": "FAILED", "failure": "nan loss"},  # a status, no timing
        {"metrics": {"amp_ssim": 0.8}},  # scored, not trained in the records given
        {"timing": {"compile_s": None}, "final": None, "status": "FAILED", "failure": None},
        {
            "timing": {"train_wall_s": 60.0},
            "final": {"epoch": 3},
            "status": "FINISHED",
            "failure": None,
            "metrics": {"amp_ssim": 0.8},
            "infer_patterns_per_s": 1e3,
        },
    ],
)
def test_an_arms_report_entry_names_only_what_it_has(entry):
    """The report's entry of an arm writes back key for key what it was read from (a
    scored arm without a training names no status), and reads its failure."""
    arm = ArmSummary.from_json(entry)
    assert arm.to_json() == entry and arm.trained == ("status" in entry)
    failed = entry.get("status") == "FAILED"
    assert (arm.failed, arm.failure_words) == (failed, entry.get("failure") or "diverged")
