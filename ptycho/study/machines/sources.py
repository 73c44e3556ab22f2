"""The finished reports a source holds: a report's ``validation.json`` or a folder holding
one, a study's results folder or a folder of several, or an MLflow tracking URI (every
FINISHED parent run with its report attached as :data:`REPORT_ARTIFACT`, read through
MLflow's client). Nothing is written."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ptycho.errors import ConfigError, PtychoError
from ptycho.study.machines.table import Report, check_one_study, report_of

#: The artifact of a study's parent run that holds its report (``ptycho report --finish-parent``).
REPORT_ARTIFACT = "report/validation.json"
_DONE = "run the study there first (make all)"
_FOLDERS = "name the results folders instead"


def _why(exc: BaseException) -> str:
    return " ".join(str(exc).split("\n", 1)[0].split())[:200] or type(exc).__name__


def _read(path: Path, label: str) -> Any:
    """The JSON at ``path`` (:func:`ptycho.artifacts.read_json`); any failure one line naming ``label``."""
    from ptycho.artifacts import read_json

    try:
        return read_json(path)
    except PtychoError as exc:
        raise PtychoError(f"{label}{str(exc).removeprefix(str(path))}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PtychoError(f"{label}: cannot read ({_why(exc)}); check the file") from None


def _shown(path: Path) -> str:
    """A path as a reader types it: relative to the current folder when inside it."""
    absolute, cwd = path.absolute(), Path.cwd()
    return os.path.relpath(absolute, cwd) if cwd in absolute.parents else str(absolute)


def _work_folder(results: Path, given: str) -> Path | None:
    """The work folder a study ran in, from its results folder here (``results``) and as
    its config names it (``given``, relative to the work folder); None when that cannot
    be told (an absolute or ``..`` path, or a folder renamed since)."""
    parts = Path(os.path.normpath(given)).parts
    if not parts or Path(given).is_absolute() or ".." in parts or parts == (".",):
        return None
    if results.parts[-len(parts) :] != parts:
        return None
    return Path(*results.parts[: -len(parts)]) if len(results.parts) > len(parts) else Path("/")


def _published(study: Path) -> Path | None:
    """The report of one study's results folder (``<results>/<preset>``, holding the
    ``config.json`` the workflow resolved): where the workflow published it
    (:func:`ptycho.study.preflight.report_folder`, beside the study's work folder, else the
    current folder) when it is of this config (its hash), else the folder's own
    ``report/validation.json`` (the report job's output, which publishing copies)."""
    from ptycho.study.preflight import report_folder
    from ptycho.tracking.provenance import config_hash

    config = _read(study / "config.json", str(study / "config.json"))
    if isinstance(config, Mapping) and config.get("results") and config.get("preset"):
        home, want = _work_folder(study.absolute().parent, str(config["results"])), config_hash(config)
        for base in dict.fromkeys(b for b in (home, Path.cwd()) if b is not None):
            path = base / report_folder(config) / "validation.json"
            record = _read(path, str(path)) if path.is_file() else None
            if isinstance(record, Mapping) and (record.get("provenance") or {}).get("config_hash") == want:
                return path
    own = study / "report" / "validation.json"
    return own if own.is_file() else None


def folder_reports(source: str) -> list[tuple[str, Any]]:
    """``(report path, record)`` of a file or folder source."""
    path = Path(source)
    if not path.exists():
        raise ConfigError(
            f"{source}: no such file or folder; name a results folder (results, results/default), a report "
            "folder (reports/default), its validation.json, or an MLflow tracking URI (sqlite:///... or http://...)"
        )
    if path.is_dir() and (path / "validation.json").is_file():
        path = path / "validation.json"
    if path.is_file():
        return [(_shown(path), _read(path, str(path)))]
    studies = [path] if (path / "config.json").is_file() else sorted(p.parent for p in path.glob("*/config.json"))
    found = [f for f in map(_published, studies) if f is not None]
    if not found:
        raise PtychoError(f"{source} holds no finished study report; {_DONE}")
    return [(_shown(f), _read(f, str(f))) for f in found]


def _check_sqlite(uri: str, path: Path | None) -> None:
    """A SQLite store must exist and be of the schema of the MLflow here: MLflow's client
    creates a missing file, and creates or migrates the tables of a file that lacks some
    (a foreign file, a store of an older MLflow). A store of this MLflow's schema the
    client only reads (checked on MLflow 3.17: the file is byte for byte unchanged)."""
    import contextlib
    import sqlite3

    from mlflow.store.db.utils import _get_latest_schema_revision

    from ptycho.tracking.store import _read_only

    if path is None or not path.is_file():
        raise ConfigError(
            f"{uri}: no such MLflow store ({path or 'not a sqlite:/// file'}); name an existing store, "
            "e.g. sqlite:///results/mlflow.db, or the results folder"
        )
    try:
        with contextlib.closing(_read_only(path)) as con:
            (version,) = con.execute("SELECT version_num FROM alembic_version").fetchone() or ("none",)
    except sqlite3.Error as exc:
        raise PtychoError(f"{uri}: not an MLflow store this ptycho reads ({_why(exc)}); {_FOLDERS}") from None
    if version != _get_latest_schema_revision():
        raise PtychoError(
            f"{uri}: an MLflow store of another MLflow's schema ({version}); read it with the MLflow that made it "
            f"(the MLflow here would migrate or refuse it), or {_FOLDERS}"
        )


def _report_file(client: Any, run: Any, home: str, folder: Path | None, tmp: str) -> Path | None:
    """The run's attached report as a local file, or None: a SQLite store's beside the store
    where it is now (:func:`ptycho.tracking.access.relocate`), others downloaded."""
    base = run.info.artifact_uri.removeprefix("file://")
    if home and folder is not None and base.startswith(home + "/"):
        local = folder / base[len(home) + 1 :] / REPORT_ARTIFACT
        return local if local.is_file() else None
    run_id = run.info.run_id
    if REPORT_ARTIFACT not in {a.path for a in client.list_artifacts(run_id, os.path.dirname(REPORT_ARTIFACT))}:
        return None
    return Path(client.download_artifacts(run_id, REPORT_ARTIFACT, tmp))


def store_reports(uri: str) -> list[tuple[str, Any]]:
    """``(label, record)`` of every FINISHED parent run (no ``mlflow.parentRunId``) of the
    tracking store at ``uri`` with its report attached, newest first, through MLflow's
    client: a SQLite store (:func:`_check_sqlite` first) or a tracking server (one
    request first that says whether it answers)."""
    from mlflow.tracking import MlflowClient

    from ptycho.tracking.access import store_home
    from ptycho.tracking.server import is_server, server_defaults, server_down, unreachable
    from ptycho.tracking.store import sqlite_path

    def down(reason: str) -> PtychoError:
        return PtychoError(
            f"MLflow tracking server at {uri} is unreachable ({reason}); start it again ('make mlflow-server'), "
            f"or {_FOLDERS}"
        )

    path = sqlite_path(uri)
    if is_server(uri):
        server_defaults()
        reason = server_down(uri)
        if reason:
            raise down(reason)
    else:
        _check_sqlite(uri, path)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # stderr is the error line only
    out = []
    try:
        client, home = MlflowClient(uri), store_home(path) if path else ""
        experiments = [e.experiment_id for e in client.search_experiments()]
        parents = "attributes.status = 'FINISHED' AND tags.`mlflow.parentRunId` IS NULL"
        runs = client.search_runs(experiments, parents, max_results=5000, order_by=["attributes.start_time DESC"])
        with tempfile.TemporaryDirectory() as tmp:
            for run in runs:
                found = _report_file(client, run, home, path and path.parent, tmp)
                label = f"{uri} run {run.info.run_id}"
                if found is not None:
                    out.append((label, _read(found, label)))
    except PtychoError:
        raise
    except Exception as exc:  # noqa: BLE001 - MLflow's REST and store errors alike: one line
        if unreachable(exc):
            raise down(unreachable(exc)) from None
        raise PtychoError(f"{uri}: cannot read its runs ({_why(exc)}); {_FOLDERS}") from None
    if not out:
        raise PtychoError(
            f"{uri} holds no finished study report (no FINISHED parent run with {REPORT_ARTIFACT} attached); {_DONE}"
        )
    return out


def load(sources: Sequence[str], preset: str | None = None) -> list[Report]:
    """The finished reports the ``sources`` hold, each run once (read from its results
    folder and its store alike), of ``preset`` when given, all of one study; ordered by
    machine kind, then date. One-line errors: exit 2 for a source that does not exist, a
    preset none holds or runs of different studies; exit 1 for a source without a
    finished report, a file that is not one, or a store that cannot be read."""
    reports: dict[tuple, Report] = {}
    for source in sources:
        if source.startswith(("sqlite:", "http://", "https://")):
            found = store_reports(source)
        elif "://" in source:
            raise ConfigError(
                f"{source}: not a tracking URI this command reads; use sqlite:///<folder>/mlflow.db or http(s)://host:port"
            )
        else:
            found = folder_reports(source)
        for path, rec in found:
            report = report_of(rec, source, path)
            reports.setdefault((report.run_id or report.path, report.generated_utc, report.config_hash), report)
    chosen = [r for r in reports.values() if preset is None or r.preset == preset]
    if preset is not None and not chosen:
        held = ", ".join(sorted({r.preset for r in reports.values()}))
        raise ConfigError(
            f"--preset {preset}: none of the sources holds a report of it (they hold: {held}); choose one"
        )
    check_one_study(chosen)
    return sorted(chosen, key=lambda r: (r.kind.words(), r.generated_utc, r.path))
