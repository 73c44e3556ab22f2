"""Upgrades (issue 34, item 2): a results folder made by an earlier release, then `git
pull` and the same command. Every record a job writes for another carries its producer's
format version (``ptycho.artifacts.FORMATS``); a reader refuses another version in one
line naming the command that makes it again, and a version bump re-runs its producer and
what depends on it, nothing else (the rules' params, ``rerun_params``). The last test runs
the previous release's smoke results folder through this code."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from test_pipeline import ROOT, WORKFLOW_FILES, snakemake
from test_rerun_truth import SMOKE, _finished_looking_study

from ptycho.artifacts import (
    FORMATS,
    SOLVER,
    STITCHED,
    read_arrays,
    read_json,
    rerun_params,
    write_arrays,
    write_json,
)
from ptycho.errors import PtychoError
from ptycho.study import run_lock
from ptycho.study.results import _check_producer_of

#: The previous release (the last commit before the format versions), pinned by hash.
PREVIOUS_RELEASE = "532d692"
#: What the upgrade from it re-runs, by rule (of the smoke study's 33 jobs). d98f758 added
#: a training key (train.fail_on_collapse), so the resolved config and every training's
#: flags (its params) changed: every training and all that reads one re-run (check_speedup's
#: format 2, time to quality above the loss floor, re-runs nothing more). The datasets and the
#: solver's flat starts stay. e1a4604 made the gradient check run at the study's own dose
#: (its --nphotons flag: a param), so it re-runs too. The solver writes ptychodus products since
#: 2026-11-28 (outputs the previous release has not), so it re-runs too, and evaluate would for the
#: same reason; its flags also gained --engine (the solver as a record, 2026-11-29), which alone
#: re-runs solve and warm_start (and, in studies that have them, the conditions' solver; the probe
#: refinement's rule leaves the engine out: it is always apg's). The smoke preset's bench has no
#: batch sweep since 2026-11-29 (its flags changed; it re-runs anyway, reading the trainings). A change that re-runs jobs of an existing folder (a format bump, a key in a
#: rule's flags) shows here, on purpose: say it here.
UPGRADE_RERUNS = {
    "resolved_config": 1,
    "check_gradients": 1,
    "train": 4,
    "infer": 4,
    "stitch": 4,
    "evaluate": 4,
    "solve": 1,
    "bench": 1,
    "check_accuracy": 1,
    "check_convergence": 1,
    "check_quality": 1,
    "check_speedup": 1,
    "warm_start": 1,
    "figures": 1,
    "report": 1,
    "publish_report": 1,
    "all": 1,
}
#: What the upgrade keeps: records the previous release wrote, which this code's report reads
#: (the solver's record was one until the solver wrote products too; the datasets are kept).
KEPT = ()


def _remake(producer: str) -> str:
    return (
        f"snakemake all --cores all --forcerun {producer} (with the --config that made this folder; what depends "
        "on it runs again too), or re-run the ptycho command that wrote it"
    )


# ------------------------------------------------------------------------ readers
def test_a_record_of_an_older_format_is_refused_in_one_line_naming_the_fix(tmp_path, monkeypatch):
    path = tmp_path / "quality.json"
    write_json(path, {"item": "quality", "value": 0.01}, producer="check_quality")
    assert json.loads(path.read_text())["format"] == {"producer": "check_quality", "version": 1}
    assert read_json(path, producer="check_quality") == {"item": "quality", "value": 0.01}  # the stamp is not data
    monkeypatch.setitem(FORMATS, "check_quality", 2)  # this code reads a newer format
    with pytest.raises(PtychoError) as err:
        read_json(path, producer="check_quality")
    assert str(err.value) == (
        f"{path} is in format 1 of check_quality's output, but this ptycho reads format 2; make it again: "
        + _remake("check_quality")
    )


def test_a_folder_or_a_binary_file_given_as_a_record_is_one_line_naming_it(tmp_path):
    (tmp_path / "m.json").mkdir()
    (tmp_path / "b.json").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(PtychoError) as folder:
        read_json(tmp_path / "m.json")
    with pytest.raises(PtychoError) as binary:
        read_json(tmp_path / "b.json")
    assert str(folder.value) == f"{tmp_path / 'm.json'}: a folder, not a JSON file; name the .json file in it"
    assert str(binary.value) == f"{tmp_path / 'b.json'}: not valid JSON (not UTF-8 text); name the JSON file meant"


def test_a_record_of_a_newer_format_is_refused_naming_both_ways_out(tmp_path, monkeypatch):
    path = tmp_path / "m.json"
    monkeypatch.setitem(FORMATS, "evaluate", 3)
    write_json(path, {"mean": {}}, producer="evaluate")
    monkeypatch.setitem(FORMATS, "evaluate", 2)
    with pytest.raises(PtychoError) as err:
        read_json(path, producer="evaluate")
    assert str(err.value) == (
        f"{path} is in format 3 of evaluate's output, newer than the format 2 this ptycho reads; use the ptycho "
        "that wrote it, or make it again with this one: " + _remake("evaluate")
    )


def test_a_record_without_a_stamp_is_version_1(tmp_path, monkeypatch):
    """Folders made before the stamps stay valid until their producer's format changes."""
    path = tmp_path / "bench.json"
    path.write_text('{"arms": {}}')
    assert read_json(path, producer="bench") == {"arms": {}}
    monkeypatch.setitem(FORMATS, "bench", 2)
    with pytest.raises(
        PtychoError, match=r"bench.json is in format 1 of bench's output, but this ptycho reads format 2"
    ):
        read_json(path, producer="bench")


def test_arrays_carry_the_stamp_too(tmp_path, monkeypatch):
    path = tmp_path / "r.npz"
    write_arrays(path, producer="infer", seconds=np.float64(2.0), patterns=np.int64(8))
    assert set(read_arrays(path, ("seconds",), producer="infer")) == {"seconds", "patterns"}
    monkeypatch.setitem(FORMATS, "infer", 2)
    with pytest.raises(PtychoError) as err:
        read_arrays(path, ("seconds",), producer="infer")
    assert str(err.value).startswith(f"{path} is in format 1 of infer's output, but this ptycho reads format 2; ")


def test_a_file_of_another_producer_is_refused(tmp_path):
    path = tmp_path / "s.npz"
    write_arrays(path, producer="stitch", images=np.zeros((1, 4, 4), np.complex64))
    assert read_arrays(path, ("images",), producer=STITCHED)["images"].shape == (1, 4, 4)  # solver's or networks'
    with pytest.raises(PtychoError) as err:
        read_arrays(path, ("patches",), producer="infer")
    assert str(err.value) == f"{path} is an output of stitch, not of infer; pass an output of infer"


def test_one_format_of_two_producers_is_read_whichever_wrote_it(tmp_path, monkeypatch):
    """`ptycho solve --start` (rule warm_start) writes the flat starts too: its record may
    stand first, where the solve rule's goes; a change of that format bumps both lines."""
    path = tmp_path / "solve.json"
    write_json(path, {"runs": []}, producer="warm_start")
    assert read_json(path, producer=SOLVER) == {"runs": []}
    monkeypatch.setitem(FORMATS, "solve", 2)
    assert read_json(path, producer=SOLVER) == {"runs": []}  # its own producer's version decides
    unstamped = tmp_path / "old.json"
    unstamped.write_text('{"runs": []}')
    with pytest.raises(PtychoError, match="old.json is in format 1 of solve's output, but this ptycho reads format 2"):
        read_json(unstamped, producer=SOLVER)  # either producer may have written it: refused


def test_a_check_record_is_read_in_the_format_of_its_own_item(tmp_path, monkeypatch):
    """The report reads every item's record: one item's bump refuses that item's old record,
    not the others' (which carry no stamp either, when an earlier release wrote them)."""

    old = {}
    for item in ("accuracy", "quality"):
        old[item] = tmp_path / f"{item}.json"
        old[item].write_text(json.dumps({"item": item}))
    monkeypatch.setitem(FORMATS, "check_quality", 2)
    assert read_json(old["accuracy"], producer=_check_producer_of) == {"item": "accuracy"}
    with pytest.raises(PtychoError, match="format 1 of check_quality's output, but this ptycho reads format 2"):
        read_json(old["quality"], producer=_check_producer_of)


# ------------------------------------------------------------------------ the rules
def test_a_bumped_version_is_a_param_of_its_rule_and_version_1_adds_none(monkeypatch):
    """None at version 1: rules' params as before the versions existed, so the upgrade
    itself re-runs nothing. Then a value naming the producer: Snakemake compares params
    as a set of values without names, so a bare 2 could equal another param's value."""
    assert all(rerun_params(p) == {} for p, version in FORMATS.items() if version == 1)
    assert rerun_params("check_speedup") == {"format_version": "ptycho format of check_speedup: 3"}
    monkeypatch.setitem(FORMATS, "bench", 2)
    assert rerun_params("bench") == {"format_version": "ptycho format of bench: 2"}
    assert rerun_params("check_quality") == {}


def test_every_rule_has_a_format_version_and_passes_it_as_params():
    rules = {}
    for path in sorted((ROOT / "rules").glob("*.smk")):
        text = path.read_text()  # a checkpoint may sit under an `if` (rules/looks.smk): indented
        for rule, body in re.findall(r"(?ms)^ *(?:rule|checkpoint) (\w+):\n(.*?)(?=^ *(?:rule|checkpoint) |\Z)", text):
            params = re.search(r"(?ms)^( +)params:\n(.*?)(?=^\1\w)", body)
            rules[rule] = params.group(2) if params else ""
    assert sorted(rules) == sorted(FORMATS), "one line of ptycho.artifacts.FORMATS per rule"
    for rule, params in rules.items():
        assert f'**rerun_params("{rule}"),' in params, f"rule {rule}: its params need **rerun_params({rule!r})"
    # The formats a change has bumped since the versions began (each a reason, in its commit):
    # check_speedup 2, time to quality measured above each training's loss floor;
    # 3, a FAILED seed counted as a miss, and a ratio no seed reached marked an upper bound;
    # report 2, its own schema_version made this number (one version per file, issue 43).
    assert {p: v for p, v in FORMATS.items() if v != 1} == {"check_speedup": 3, "report": 2}
    # A condition's solver runs `ptycho solve`: its records are solve's, so its version is too.
    assert FORMATS["solve_condition"] == FORMATS["solve"]


# ------------------------------------------------------------------------ a real Snakemake
def _bump(work: Path, producer: str) -> int:
    """A release that changes ``producer``'s format: one line of the table, in the work
    folder's copy of the package (which the workflow and its jobs import)."""
    path = work / "ptycho" / "artifacts.py"
    text = path.read_text()
    (line,) = re.finditer(rf'^    "{producer}": (\d+),$', text, re.M)
    version = int(line.group(1)) + 1
    path.write_text(f'{text[: line.start()]}    "{producer}": {version},{text[line.end() :]}')
    for cached in (work / "ptycho" / "__pycache__").glob("artifacts.*"):
        cached.unlink()
    return version


def _jobs(run: subprocess.CompletedProcess) -> dict[str, int]:
    """Snakemake's job counts (its 'Job stats' table), by rule."""
    counts = re.findall(r"^(\w+)\s+(\d+)$", run.stdout + run.stderr, re.M)
    return {rule: int(n) for rule, n in counts if rule != "total"}


def test_a_bumped_format_plans_its_producer_and_what_depends_on_it_only(tmp_path):
    """Dry runs of a finished-looking smoke study whose jobs' params are recorded (as a
    real run records them; --touch does too): the stitched objects' format changes."""
    work = _finished_looking_study(tmp_path)
    touched = snakemake(work, "--touch", "--forceall", "all", *SMOKE)
    assert touched.returncode == 0, touched.stderr[-3000:]
    quiet = snakemake(work, "-n", "all", *SMOKE)
    assert "Nothing to be done" in quiet.stdout + quiet.stderr, quiet.stdout[-3000:]
    assert _bump(work, "stitch") == 2
    plan = snakemake(work, "-n", "all", *SMOKE)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert "now: 'ptycho format of stitch: 2'" in plan.stdout + plan.stderr
    # the 4 arms' stitched objects, what reads them (evaluate, warm_start, figures) and on to the report
    assert _jobs(plan) == {
        "stitch": 4,
        "evaluate": 4,
        "warm_start": 1,
        "check_quality": 1,
        "figures": 1,
        "report": 1,
        "publish_report": 1,
        "all": 1,
    }


# ------------------------------------------------------------------------ the previous release
def _run(work: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """Snakemake in ``work`` with ``work``'s package first on the path (and as cwd): the
    workflow and its jobs import that copy, not the installed checkout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(work), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _imported(work: Path) -> tuple[str, bool]:
    """Where ``ptycho`` comes from in ``work``'s processes, and whether it has the versions."""
    env = dict(os.environ, PYTHONPATH=str(work))
    env.pop("PYTHONSAFEPATH", None)
    code = "import ptycho.artifacts as a; print(a.__file__); print(hasattr(a, 'FORMATS'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True, check=True)
    where, has = out.stdout.split()
    return where, has == "True"


def _previous_release(work: Path) -> None:
    """The previous release's workflow files (``git archive``), as a clone of it holds them."""
    found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}"], check=False)
    if found.returncode != 0:
        pytest.fail(
            f"commit {PREVIOUS_RELEASE} (the previous release) is not in {ROOT}; this test needs the history "
            "(a full clone, or git fetch --unshallow)"
        )
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", PREVIOUS_RELEASE, *WORKFLOW_FILES],
        capture_output=True,
        check=True,
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(work, filter="data")


def _pull(work: Path) -> None:
    """`git pull`: this checkout's workflow files replace the release's; results stay."""
    for name in WORKFLOW_FILES:
        target = work / name
        shutil.rmtree(target) if target.is_dir() else target.unlink()
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target)


def _mtimes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
@pytest.mark.long
def test_the_previous_releases_smoke_folder_runs_through_this_code(tmp_path):
    """Issue 34's upgrade: the previous release's smoke study, then this code on the same
    folder: it re-runs what :data:`UPGRADE_RERUNS` says, and its report reads the records
    it kept as the previous release wrote them. Then a release that changes one record's
    format (the quality check's): with the params trigger off, the report refuses the
    old-format record in one line instead of failing on a missing key; with it, that job,
    the report and its copy re-run, nothing else."""
    work = tmp_path / "study"
    work.mkdir()
    _previous_release(work)
    assert _imported(work) == (str(work / "ptycho" / "artifacts.py"), False)  # the release's own package
    made = _run(work, "all", *SMOKE)
    assert made.returncode == 0, made.stderr[-3000:]
    results, reports = work / "results" / "smoke", work / "reports" / "smoke"
    assert "format" not in json.loads((results / "checks" / "quality.json").read_text())  # written unstamped
    published = (reports / "validation.json").read_bytes()

    _pull(work)
    assert _imported(work) == (str(work / "ptycho" / "artifacts.py"), True)
    planned = _run(work, "-n", "all", *SMOKE)
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert _jobs(planned) == UPGRADE_RERUNS, planned.stdout[-1500:]
    kept = {path: (results / path).read_bytes() for path in (*KEPT, "data/train.h5", "data/test.h5")}
    upgraded = _run(work, "all", *SMOKE)
    assert upgraded.returncode == 0, upgraded.stderr[-3000:]
    assert _jobs(upgraded) == UPGRADE_RERUNS
    assert {path: (results / path).read_bytes() for path in kept} == kept
    assert all("format" not in json.loads((results / path).read_text()) for path in KEPT)
    assert (reports / "validation.json").read_bytes() != published  # this code's report
    report = json.loads((reports / "validation.json").read_text())
    assert set(report["items"]) == {"accuracy", "gradients", "convergence", "quality", "speedup"}
    assert report["solver"]["modes"] and report["verdict"] in ("PASS", "FAIL", "INCONCLUSIVE")

    assert _bump(work, "check_quality") == 2
    published = (reports / "validation.json").read_bytes()
    refused = _run(work, "all", *SMOKE, "--rerun-triggers", "mtime", "--forcerun", "report")
    assert refused.returncode != 0
    assert (results / "logs" / "report.log").read_text().strip().splitlines()[-1] == (
        "ptycho report: error: results/smoke/checks/quality.json is in format 1 of check_quality's "
        "output, but this ptycho reads format 2; make it again: " + _remake("check_quality")
    )
    assert (reports / "validation.json").read_bytes() == published  # the published report stays

    before = _mtimes(results)
    again = _run(work, "all", *SMOKE)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _jobs(again) == {"check_quality": 1, "report": 1, "publish_report": 1, "all": 1}
    changed = {path for path, t in _mtimes(results).items() if before.get(path) != t}
    bookkeeping = ("logs/", "benchmarks/", "mlflow/", run_lock.LOCK_FILE, run_lock.JOBS_FOLDER)
    assert {path for path in changed if not path.startswith(bookkeeping)} == {
        "checks/quality.json",
        *(f"report/validation.{e}" for e in ("html", "md", "json")),
    }
    assert json.loads((results / "checks" / "quality.json").read_text())["format"] == {
        "producer": "check_quality",
        "version": 2,
    }
    assert (reports / "validation.json").read_bytes() != published
