"""Guards of the workflow layer: what must never be lost or silently ignored.

* A report is replaced only by a complete new one: a report job that fails or is killed
  leaves the previous ``reports/<preset>/`` as it was (``ptycho.study.report.publish``,
  the ``publish_report`` rule).
* A store that cannot be written is one line while the workflow is parsed, before any
  job writes to it (``ptycho.study.preflight.preflight_store_writable``).
* Settings are honoured or refused, never ignored: a new ``study`` (MLflow experiment)
  on a results folder whose runs are in another one, a key given twice in a config file.

Each was a defect at 7816575 (issue #24, items 3 and 4).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ptycho.errors import ConfigError, PtychoError
from ptycho.study.preflight import parse_time_checks

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW_FILES = ("Snakefile", "config.yaml", "rules", "envs", "ptycho")
RUN_ID = "0123456789abcdef0123456789abcdef"


def _base() -> dict:
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def _workdir(tmp: Path) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_FILES:
        src, dst = ROOT / name, tmp / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    return tmp


def _snakemake(work: Path, *args: str, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", *args],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, **(env or {})),
    )


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("ptycho workflow: error:")]


def _study_that_ran(d: Path, preset: str = "smoke", experiment: str = "xla-ptycho", store: Path | None = None) -> Path:
    """``d/results`` as a study that has run leaves it, as far as the parse-time checks
    look: ``parent.json`` naming its store and experiment, and a SQLite store holding the
    parent run (a ``runs`` table is all the check reads). Returns the store."""
    store = store or d / "results" / "mlflow.db"
    store.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(store)) as con:
        con.execute("CREATE TABLE runs (run_uuid TEXT PRIMARY KEY)")
        con.execute("INSERT INTO runs VALUES (?)", (RUN_ID,))
        con.commit()
    mlflow_dir = d / "results" / preset / "mlflow"
    mlflow_dir.mkdir(parents=True)
    record = {"run_id": RUN_ID, "tracking_uri": f"sqlite:///{store}", "experiment": experiment, "config_hash": "x"}
    (mlflow_dir / "parent.json").write_text(json.dumps(record))
    return store


@pytest.fixture
def no_tracking_env(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


# ----------------------------------------------------------------- item 4: settings
def test_a_new_study_name_on_a_results_folder_whose_runs_are_in_another_experiment_is_refused(
    tmp_path, no_tracking_env
):
    """7816575 accepted it (rc 0, config.json said the new name) and every run stayed in
    the old experiment. Refused, not honoured: MLflow cannot move a run to another
    experiment, and the folder's one parent run is in the old one."""
    _study_that_ran(tmp_path, experiment="xla-ptycho")
    with pytest.raises(ConfigError) as err:
        parse_time_checks(_base(), {"preset": "smoke", "study": "renamed"}, tmp_path)
    line = str(err.value)
    assert "\n" not in line
    assert "config key 'study' = 'renamed'" in line and "MLflow experiment 'xla-ptycho'" in line
    assert "put study back to 'xla-ptycho'" in line and "--config results=<folder>" in line
    # The same name, another preset (its own parent run) and a new results folder all pass.
    assert parse_time_checks(_base(), {"preset": "smoke", "study": "xla-ptycho"}, tmp_path)["study"] == "xla-ptycho"
    assert parse_time_checks(_base(), {"preset": "default", "study": "renamed"}, tmp_path)["study"] == "renamed"
    fresh = parse_time_checks(_base(), {"preset": "smoke", "study": "renamed", "results": "other"}, tmp_path)
    assert fresh["study"] == "renamed"


DUPLICATED = """\
preset: smoke
train:
  epochs: 40
  learning_rate: 0.001
  epochs: 4
"""


def test_a_key_given_twice_in_a_config_file_is_one_line_naming_the_key_and_the_file(tmp_path):
    path = tmp_path / "extra.yaml"
    path.write_text(DUPLICATED)
    with pytest.raises(ConfigError) as err:
        parse_time_checks(_base(), {"preset": "smoke"}, tmp_path, config_files=[ROOT / "config.yaml", path])
    assert str(err.value) == (
        f"config file {path}: key 'train.epochs' is given twice (lines 3 and 5), and only the last would count; "
        "keep one"
    )
    top = tmp_path / "top.yaml"
    top.write_text("preset: smoke\nseeds: [0]\npreset: default\n")
    with pytest.raises(ConfigError, match=r"key 'preset' is given twice \(lines 1 and 3\)"):
        parse_time_checks(_base(), {}, tmp_path, config_files=[top])
    # The same key in two sections, or in two files, is not a repetition; the shipped config has none.
    fine = tmp_path / "fine.yaml"
    fine.write_text("train: {epochs: 4}\nper_model: {pinn: {train: {epochs: 5}}}\n")
    parse_time_checks(_base(), {"preset": "smoke"}, tmp_path, config_files=[ROOT / "config.yaml", fine, fine])


def test_snakemake_refuses_a_configfile_with_a_key_given_twice_before_any_job(tmp_path):
    """7816575 ran the study with the last value (rc 0, nothing said)."""
    work = _workdir(tmp_path)
    (work / "extra.yaml").write_text(DUPLICATED)
    result = _snakemake(work, "--dry-run", "--configfile", "extra.yaml")
    assert result.returncode != 0
    errors = _errors(result.stderr)
    assert len(errors) == 1 and "key 'train.epochs' is given twice (lines 3 and 5)" in errors[0], result.stderr
    assert "extra.yaml" in errors[0] and "Traceback" not in result.stderr
    assert not (work / "results").exists()


# ------------------------------------------------------------ item 3: read-only store
def _is_root() -> bool:
    return os.geteuid() == 0


@contextlib.contextmanager
def _read_only_file(path: Path) -> Iterator[None]:
    """``path`` read-only for real: a read-only bind mount as root (for whom ``chmod 444``
    stops nothing), ``chmod 444`` otherwise."""
    if not _is_root():
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(0o644)
        return
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(path)], check=False)


@contextlib.contextmanager
def _read_only_folder(folder: Path) -> Iterator[None]:
    """``folder`` read-only with what it holds: a tmpfs filled, then remounted read-only,
    as root; ``chmod 555`` otherwise."""
    if not _is_root():
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    saved = {p.name: p.read_bytes() for p in folder.iterdir()}
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], check=True)
    try:
        for name, data in saved.items():
            (folder / name).write_bytes(data)
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_a_read_only_store_is_one_line_at_parse_time_naming_the_file(tmp_path, no_tracking_env):
    """7816575 ran every job against it: the report job failed with tracebacks and the
    existing report was deleted (mlflow.db on a read-only bind mount)."""
    store = _study_that_ran(tmp_path)
    parse_time_checks(_base(), {"preset": "smoke"}, tmp_path)  # writable: passes
    with _read_only_file(store), pytest.raises(PtychoError) as err:
        parse_time_checks(_base(), {"preset": "smoke"}, tmp_path)
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(f"MLflow store {store} cannot be written (")
    assert "make it and its folder writable" in line
    assert store.read_bytes().startswith(b"SQLite format 3")  # nothing written


def test_a_store_in_a_read_only_folder_is_one_line_at_parse_time(tmp_path, no_tracking_env):
    """SQLite writes its journal beside the file: a writable file in a read-only folder
    cannot take a run either. The store here is the one parent.json names, outside results."""
    folder = tmp_path / "store"
    folder.mkdir()
    store = _study_that_ran(tmp_path, store=folder / "mlflow.db")
    with _read_only_folder(folder), pytest.raises(PtychoError) as err:
        parse_time_checks(_base(), {"preset": "smoke"}, tmp_path)
    assert str(err.value).startswith(f"MLflow store {store} cannot be written (its folder {folder} takes no new file")


# ------------------------------------------------------ item 3: the report survives
def _report(folder: Path, verdict: str = "PASS", text: str = "new") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "validation.json").write_text(json.dumps({"verdict": verdict, "text": text}))
    (folder / "validation.md").write_text(f"# {text}\n")
    (folder / "validation.html").write_text(f"<p>{text}</p>\n")


def _contents(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


def test_publish_copies_a_complete_report_and_refuses_an_incomplete_one(tmp_path):
    from ptycho.study.report import publish

    staged, out = tmp_path / "staged", tmp_path / "reports" / "smoke"
    _report(out, text="old")
    old = _contents(out)
    _report(staged, text="new")
    (staged / "validation.html").unlink()
    with pytest.raises(PtychoError, match="is incomplete .*validation.html missing"):
        publish(staged, out)
    (staged / "validation.html").write_text("<p>new</p>\n")
    (staged / "validation.json").write_text('{"verdict": "PA')  # cut short
    with pytest.raises(PtychoError, match="not a complete report"):
        publish(staged, out)
    assert _contents(out) == old  # refused: the old report as it was
    _report(staged, text="new")
    paths = publish(staged, out)
    assert _contents(out) == _contents(staged)
    assert sorted(p.name for p in paths.values()) == sorted(os.listdir(out))  # no temporary file left


#: A ``sitecustomize`` that kills the report job outright (``kill -9``) as it starts.
KILL_THE_REPORT_JOB = """\
import os, signal, sys
if "--finish-parent" in sys.argv:
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
def test_a_report_job_that_fails_or_is_killed_leaves_the_previous_report(tmp_path, no_tracking_env):
    """7816575 deleted ``reports/<preset>/validation.*`` whenever the report job failed
    (Snakemake deletes a job's outputs before it runs and after it fails): a read-only or
    damaged store, or ``kill -9`` of the job, lost the last good report. The report job
    runs here for real, on inputs that are placeholders (the jobs that make them are not
    allowed to run), so it fails; then it is killed with SIGKILL as it starts."""
    work = _workdir(tmp_path / "work")
    summary = _snakemake(work, "--summary", "--config", "preset=smoke")
    assert summary.returncode == 0, summary.stderr
    planned = [line.split("\t")[0] for line in summary.stdout.splitlines()[1:] if line.strip()]
    from test_rerun_truth import _touch

    for name in planned:  # every input of the report job, as a placeholder: whole but empty
        if not name.startswith(("reports/", "results/smoke/report/")) and not name.endswith("parent.json"):
            _touch(work / name)  # (a cut-short file would be moved aside and made again)
    # The last good report, published and staged, older than the study's (new) results:
    # the report is out of date and its job must run.
    reports, staged = work / "reports" / "smoke", work / "results" / "smoke" / "report"
    for folder in (reports, staged):
        _report(folder, text="the last good report")
        for path in folder.iterdir():
            os.utime(path, (path.stat().st_atime - 3600, path.stat().st_mtime - 3600))
    old = _contents(reports)
    # Rule names of both layouts (7816575 called the report rule validation_report).
    only = ["--allowed-rules", "mlflow_parent", "report", "validation_report", "publish_report"]
    targets = [f"reports/smoke/validation.{ext}" for ext in ("html", "md", "json")]

    failed = _snakemake(work, *only, "--config", "preset=smoke", "--", *targets)
    assert failed.returncode != 0
    assert _contents(reports) == old
    assert "Error in rule report" in failed.stderr, failed.stderr

    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(KILL_THE_REPORT_JOB)
    killed = _snakemake(work, *only, "--config", "preset=smoke", "--", *targets, env={"PYTHONPATH": str(hooks)})
    assert killed.returncode != 0
    assert _contents(reports) == old
    assert "Error in rule report" in killed.stderr, killed.stderr
    assert (work / "results" / "smoke" / "logs" / "report.log").read_text() == ""  # killed as it started


def test_the_clis_config_files_refuse_a_key_given_twice_too(tmp_path):
    """``ptycho bench|scaling --config FILE`` read the file with the same loader."""
    from ptycho.cli.values import load_yaml

    path = tmp_path / "extra.yaml"
    path.write_text(DUPLICATED)
    with pytest.raises(ConfigError, match=r"key 'train.epochs' is given twice \(lines 3 and 5\)"):
        load_yaml(str(path))
