"""Journals sent to a tracking store ('ptycho track replay'), or a lost store rebuilt from
them ('ptycho track rebuild'): one sync, idempotent, so a second one adds nothing.

A journal line names its run by the run's *key*: the id MLflow gave it when it was
created (:mod:`ptycho.tracking.journal`). A sync finds each run in the target store under
that id, or under the tag ``ptycho.key`` a rebuild gave it; a run the store does not
hold (a lost or damaged SQLite file, a new server) is created again from its ``run``
line, tagged with its key, its parent first (the line names the parent's key). Then
every line is sent (:func:`~ptycho.tracking.record.send`). Nothing is written to the
journals, so a store lost twice is rebuilt the same way. ``parent.json`` is pointed at
the parent as the store holds it, its modification time kept: the workflow re-runs no job.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ptycho.errors import PtychoError
from ptycho.tracking.access import preflight
from ptycho.tracking.journal import PARENT_TAG, aliases, read_journal, write_parent_json
from ptycho.tracking.record import END_REASON_TAG, KINDS, send
from ptycho.tracking.server import track_command
from ptycho.tracking.store import (
    KEY_TAG,
    experiment_id,
    find_run,
    open_client,
    read_parent,
    retry,
    sqlite_path,
    sqlite_problem,
)

_log = logging.getLogger(__name__)
#: What a replay counts per journal, in the order it prints them.
COUNTS = ("runs", "params", "metrics", "tags", "artifacts", "models", "ends", "missing_files", "created")


def journal_files(paths: list[str]) -> list[Path]:
    """The ``.jsonl`` files among ``paths``, folders searched recursively; sorted."""
    out: list[Path] = []
    for item in paths:
        p = Path(item)
        if p.is_dir():
            out.extend(sorted(p.rglob("*.jsonl")))
        elif p.is_file():
            out.append(p)
        else:
            raise PtychoError(
                f"{p}: no such journal file or folder; journals are in <results>/<preset>/mlflow/journal/"
            )
    return out


def journal_folders(paths: list[str]) -> list[Path]:
    """The studies' journal folders (``<results>/<preset>/mlflow/journal``) in or under ``paths``."""
    out: list[Path] = []
    for item in paths:
        p = Path(item)
        if not p.is_dir():
            raise PtychoError(f"{p}: no such folder; name the results folder (e.g. results), as the workflow writes it")
        found = [p] if (p.name, p.parent.name) == ("journal", "mlflow") else sorted(p.glob("**/mlflow/journal"))
        if not found:
            raise PtychoError(f"{p}: no MLflow journals under it (they are in <results>/<preset>/mlflow/journal/)")
        out.extend(f for f in found if f not in out)
    return out


class _Study:
    """The journals of one folder (a study's runs name each other across its files)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.files = {path.resolve(): read_journal(path) for path in sorted(folder.glob("*.jsonl"))}
        #: ids older versions gave rebuilt runs -> the run's key
        self.alias = aliases([x for lines in self.files.values() for x in lines])
        self.created: dict[str, tuple[Path, dict]] = {}
        for path, lines in self.files.items():
            for line in (x for x in lines if x["op"] == "run"):
                self.created.setdefault(self.key(line["run_id"]), (path, line))
        #: runs that journaled their own end (a sweep's "stale" KILLED is then a wrong guess)
        ends = (x for lines in self.files.values() for x in lines if x["op"] == "end" and not x.get("stale"))
        self.own_end = {self.key(x["run_id"]) for x in ends}

    def key(self, run_id: str) -> str:
        return self.alias.get(run_id, run_id)

    def ids(self, key: str) -> list[str]:
        """Every id the run of ``key`` may be held under: its key, then older rebuilds' ids."""
        return [key, *(i for i, k in self.alias.items() if k == key)]

    @property
    def parent_json(self) -> Path | None:
        """``mlflow/parent.json`` when the folder is a study's ``mlflow/journal``."""
        if (self.folder.name, self.folder.parent.name) != ("journal", "mlflow"):
            return None
        return self.folder.parent / "parent.json"

    def parent_record(self) -> dict | None:
        return read_parent(self.parent_json) if self.parent_json is not None else None


class _Store:
    """A target store: its client and, per run key, the id it holds the run under."""

    def __init__(self, uri: str):
        path = sqlite_path(uri)
        problem = sqlite_problem(path) if path is not None and path.exists() else ""
        if problem:
            raise PtychoError(
                f"MLflow store {path} is damaged ({problem}); rebuild it from the journals: {track_command('rebuild', path.parent)}"
            )
        if uri.startswith(("http://", "https://")):
            preflight(uri)
        self.uri = uri
        self.client = open_client(uri)
        self.ids: dict[str, str] = {}
        self.created: list[tuple[Path, str]] = []  #: (journal with the run line, key)

    def id_of(self, study: _Study, key: str) -> str:
        """The id of run ``key`` here, created (its parents first) when the store lacks it."""
        if key not in self.ids:
            held = find_run(self.client, self.uri, key)
            for alias in study.ids(key)[1:]:
                held = held or find_run(self.client, self.uri, alias, by_key=False)
            self.ids[key] = held or self._create(study, key)
        return self.ids[key]

    def _create(self, study: _Study, key: str) -> str:
        if key not in study.created:
            raise PtychoError(
                f"{study.folder}: run {key} does not exist at {self.uri} and no journal there says how it was "
                "created; replay into the store it was created in (--tracking-uri)"
            )
        path, line = study.created[key]
        tags = {**(line.get("tags") or {}), KEY_TAG: key}
        parent = line.get("parent") or tags.get(PARENT_TAG)
        if parent:
            tags[PARENT_TAG] = self.id_of(study, study.key(parent))
            experiment = self.client.get_run(tags[PARENT_TAG]).info.experiment_id
        elif line.get("experiment"):
            experiment = experiment_id(self.client, self.uri, line["experiment"])
        else:
            raise PtychoError(
                f"{path}: run {key} has no parent and its journal names no experiment; "
                "replay into the store it was created in (--tracking-uri)"
            )
        name = line.get("name")
        new = retry(
            lambda: self.client.create_run(experiment, start_time=line.get("start_time"), tags=tags, run_name=name),
            what=f"creating run {name!r} again",
            uri=self.uri,
        ).info.run_id
        self.created.append((path, key))
        return new


def _replay_line(store: _Store, study: _Study, line: dict, counts: dict[str, int], path: Path) -> None:
    """Send one journal line to its run in ``store``, the run ids in it as the store holds
    them; a file that is gone is counted, not sent."""
    from mlflow.exceptions import MlflowException

    op, key = line["op"], study.key(line["run_id"])
    run_id, line = store.id_of(study, key), dict(line)
    local = line.get("path") if op == "artifact" else line.get("local_dir") if op == "model" else None
    if local is not None and not os.path.exists(local):
        _log.warning("%s: %s %s is gone; not replayed", path, "model folder" if op == "model" else "artifact", local)
        counts["missing_files"] += 1
        return
    if op in ("tags", "run"):
        line["tags"] = dict(line.get("tags") or {})
        parent = line.get("parent") or line["tags"].get(PARENT_TAG)
        if parent and op == "run":
            line["tags"][PARENT_TAG] = store.id_of(study, study.key(parent))
        if run_id != key:
            line["tags"][KEY_TAG] = key
    elif op == "table" and "run_id" in line["columns"]:  # the children's ids as this store holds them
        ids = [
            store.id_of(study, study.key(r)) if study.key(r) in study.created else r for r in line["columns"]["run_id"]
        ]
        line["columns"] = {**line["columns"], "run_id": ids}
    elif op == "end" and line.get("stale") and key in study.own_end:
        return  # the job ended the run itself; "stale" was a guess made meanwhile
    elif op == "end" and line["status"] == "FINISHED":
        with contextlib.suppress(MlflowException):  # a job that finished offline may have been marked KILLED
            store.client.delete_tag(run_id, END_REASON_TAG)
    kind = KINDS[op]
    retry(lambda: send(store.client, run_id, line), what=f"replaying {op}", uri=store.uri, conflicts=kind.conflicts)
    counter, values = kind.count
    if counter:
        counts[counter] += len(line.get(values) or ()) if values else 1


@dataclass
class Replayed:
    """What a replay did: counts per journal file, and one line per other change."""

    files: list[tuple[Path, dict[str, int]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def total(self, key: str) -> int:
        return sum(c[key] for _, c in self.files)


def replay_journals(paths: Iterable[str | os.PathLike], uri: str | None = None) -> Replayed:
    """Send everything the journals ``paths`` recorded to MLflow again; idempotent.

    For a job that went on after the tracking server stopped answering (or any job:
    replaying a complete journal changes nothing), and for a store that lost runs (see
    the module docstring). The store: ``uri``, else the one the study's ``parent.json``
    names (where its jobs log now), else the one in each line. Journals are read by
    folder (a study's runs name each other across its files); only the files in
    ``paths`` are sent.
    """
    out = Replayed()
    wanted = [Path(p).resolve() for p in paths]
    studies: dict[Path, _Study] = {}
    stores: dict[str, _Store] = {}
    for path in wanted:
        if path.parent not in studies:
            studies[path.parent] = _Study(path.parent)
        if path not in studies[path.parent].files:  # not named *.jsonl
            studies[path.parent].files[path] = read_journal(path)
    for study in studies.values():
        study_uri = uri or (study.parent_record() or {}).get("tracking_uri")

        def store_for(line: dict, study_uri=study_uri) -> _Store:
            target = study_uri or line.get("uri", "")
            if target not in stores:
                stores[target] = _Store(target)
            return stores[target]

        for path in (p for p in wanted if p.parent == study.folder):
            counts = dict.fromkeys(COUNTS, 0)
            seen: set[str] = set()
            for line in study.files[path]:
                if line["op"] == "rebuilt":
                    continue
                store = store_for(line)
                _replay_line(store, study, line, counts, path)
                seen.add(study.key(line["run_id"]))
            counts["runs"] = len(seen)
            counts["created"] = sum(p == path for s in stores.values() for p, _ in s.created)
            out.files.append((path, counts))
        if study_uri in stores:
            note = _point_parent_json(study, stores[study_uri])
            if note:
                out.notes.append(note)
    return out


def _point_parent_json(study: _Study, store: _Store) -> str:
    """Point ``parent.json`` at the parent run as ``store`` holds it (after a rebuild), its
    modification time kept, so that Snakemake sees no reason to re-run the jobs that
    depend on it. Written anew, dated at the parent's start, when it is missing."""
    path = study.parent_json
    if path is None:
        return ""
    record = study.parent_record()
    if record is not None:
        key, start = study.key(record.get("key") or record["run_id"]), None  # dated as it was
    else:  # the newest journaled root run (the parent) stands in for a lost parent.json
        roots = [(k, line) for k, (_, line) in study.created.items() if line.get("experiment")]
        if not roots:
            return ""
        key, line = max(roots, key=lambda r: r[1].get("start_time") or 0)
        start = int(line.get("start_time") or time.time() * 1000) * 1_000_000
        record = {"experiment": line["experiment"], "config_hash": (line.get("tags") or {}).get("config_hash", "")}
    new_id = store.ids.get(key) or find_run(store.client, store.uri, key)
    if new_id is None or (record.get("run_id") == new_id and record.get("tracking_uri") == store.uri):
        return ""
    old = record.get("run_id")
    write_parent_json(path, {**record, "run_id": new_id, "key": key, "tracking_uri": store.uri}, ns=start)
    return f"{path}: the study's parent run is now {new_id} at {store.uri}" + (
        f" (was {old})" if old else " (written anew)"
    )


def rebuild(paths: list[str], uri: str | None = None) -> tuple[Replayed, list[str]]:
    """Rebuild the MLflow store of the studies under ``paths`` from their journals.

    ``paths``: results folders (every study in them), study folders or journal folders.
    A damaged SQLite store is moved aside first (with its rollback journal, which would
    otherwise be applied to the new file), never deleted; a missing one is created. Then
    every journal is replayed (:func:`replay_journals`): what the store still holds is
    left as it is, what it lost is created again, once. Returns the replay and one line
    per store moved aside.
    """
    folders = journal_folders(paths)
    moved, targets = [], set()
    for folder in folders:
        target = uri or (_Study(folder).parent_record() or {}).get("tracking_uri")
        if target:
            targets.add(target)
        else:
            for path in folder.glob("*.jsonl"):
                targets.update(r.get("uri", "") for r in read_journal(path)[:1])
    for target in sorted(t for t in targets if t):
        db = sqlite_path(target)
        problem = sqlite_problem(db) if db is not None and db.exists() else ""
        if problem:
            moved.append(_move_aside(db, problem))
    files = [p for folder in folders for p in sorted(folder.glob("*.jsonl"))]
    return replay_journals(files, uri), moved


def _move_aside(db: Path, problem: str) -> str:
    """Rename a damaged SQLite store (and its -journal, -wal, -shm files) to ``<name>.damaged-<time>``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = db.with_name(f"{db.name}.damaged-{stamp}")
    for suffix in ("", "-journal", "-wal", "-shm"):
        src = db.with_name(db.name + suffix)
        if src.exists():
            shutil.move(src, aside.with_name(aside.name + suffix))
    return f"moved the damaged MLflow store {db} ({problem}) aside to {aside}"
