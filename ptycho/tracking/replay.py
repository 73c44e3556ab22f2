"""Journals sent again to a tracking store ('ptycho track replay'), or a lost store rebuilt
from them ('ptycho track rebuild'), idempotently: a second replay adds nothing.

Each study's journals (``<results>/<preset>/mlflow/journal/*.jsonl``: the parent run's
``parent.jsonl``, one per job, one per nested run) hold every write in order, the run's
creation first. A replay sends each line to the run it names. When that run is not in
the store (the SQLite file was lost or damaged, or the server is a new one), it is
created again from its ``run`` line: in the experiment of that name (a root run) or
nested under its parent, itself created first; with its name, tags and start time.
MLflow gives it a new id, which is appended to the journal that created it
(``{"op": "rebuilt", "run_id": <new>, "from": <journal's id>}``): a later replay finds
the run by that id, lines written after the rebuild under the new id belong to the
same run, and a rebuild of a store lost again starts from the journal's id once more.
``parent.json`` is pointed at the rebuilt parent, its modification time kept, so the
workflow carries on without re-running a job.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ptycho.errors import PtychoError
from ptycho.tracking.access import preflight
from ptycho.tracking.journal import PARENT_JOURNAL, PARENT_TAG, Journal, read_journal
from ptycho.tracking.runs import END_REASON_TAG, send
from ptycho.tracking.store import (
    JOURNAL_TAG,
    experiment_id,
    flatten_params,
    open_client,
    rebuild_command,
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


@dataclass
class _Run:
    """One journaled run: the line that created it and every id it has had, oldest first."""

    ids: list[str]
    path: Path  #: the journal with its ``run`` line, where ``rebuilt`` lines go
    create: dict | None = None
    own_end: bool = False  #: the job journaled its own end (a "stale" KILLED is then a wrong guess)


@dataclass
class _Tree:
    """The runs journaled in one folder, by any of their ids, and the folder's ``parent.json``."""

    folder: Path
    files: dict[Path, list[dict]] = field(default_factory=dict)
    runs: dict[str, _Run] = field(default_factory=dict)

    @property
    def parent_json(self) -> Path | None:
        """``mlflow/parent.json`` when the folder is a study's ``mlflow/journal``."""
        if (self.folder.name, self.folder.parent.name) != ("journal", "mlflow"):
            return None
        return self.folder.parent / "parent.json"

    def parent_record(self) -> dict | None:
        path = self.parent_json
        if path is None or not path.is_file():
            return None
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(path.read_text())
            if isinstance(record, dict) and record.get("run_id"):
                return record
        return None

    def legacy_parent(self, run_id: str) -> _Run | None:
        """The study's parent run ``run_id`` if it was made before parent runs were
        journaled: its ``run`` and ``params`` lines made from ``parent.json`` (experiment,
        config hash; named ``<experiment>-<preset>``, started when the file was written)
        and the study's ``config.json``, and journaled now in ``parent.jsonl``. What was
        attached to it (the report, the children's table) and its end were not journaled:
        it is rebuilt RUNNING, without them ('ptycho track finish' closes it)."""
        record, path = self.parent_record(), self.parent_json
        if record is None or path is None or record["run_id"] != run_id or not record.get("experiment"):
            return None
        study = path.parent.parent
        config = study / "config.json"
        try:
            params = flatten_params(json.loads(config.read_text())) if config.is_file() else {}
        except (OSError, ValueError):
            params = {}
        journal = (self.folder / f"{PARENT_JOURNAL}.jsonl").resolve()
        tags = {"preset": study.name, "config_hash": record.get("config_hash", ""), JOURNAL_TAG: str(journal)}
        tags.update({"mlflow.source.name": "ptycho", "mlflow.source.type": "JOB"})
        base = {"run_id": run_id, "uri": record["tracking_uri"]}
        lines = [
            {
                "op": "run",
                **base,
                "experiment": record["experiment"],
                "name": f"{record['experiment']}-{study.name}",
                "tags": tags,
                "start_time": int(path.stat().st_mtime * 1000),
                "made_from": str(path),
            },
            *([{"op": "params", **base, "params": params}] if params else []),
        ]
        book = Journal(journal)
        lines = [book.write(**line) for line in lines]
        self.files.setdefault(journal, []).extend(lines)
        run = _Run([run_id], journal, lines[0])
        self.runs[run_id] = run
        return run

    @classmethod
    def load(cls, folder: Path) -> _Tree:
        tree = cls(folder)
        for path in sorted(folder.glob("*.jsonl")):
            tree.files[path.resolve()] = read_journal(path)
        # Creations and rebuilds first: a line of any file may name a run by a later id.
        for path, records in tree.files.items():
            for rec in records:
                if rec["op"] == "run":
                    run = tree.runs.setdefault(rec["run_id"], _Run([rec["run_id"]], path))
                    if run.create is None:
                        run.create, run.path = rec, path
                elif rec["op"] == "rebuilt":
                    run = tree.runs.setdefault(rec["from"], _Run([rec["from"]], path))
                    if rec["run_id"] not in run.ids:
                        run.ids.append(rec["run_id"])
                    tree.runs[rec["run_id"]] = run
        for path, records in tree.files.items():
            for rec in records:
                run = tree.runs.setdefault(rec["run_id"], _Run([rec["run_id"]], path))
                if rec["op"] == "end" and not rec.get("stale"):
                    run.own_end = True
        return tree


class _Store:
    """A target store: its client and, per journaled run, the id it holds the run under."""

    def __init__(self, uri: str):
        path = sqlite_path(uri)
        problem = sqlite_problem(path) if path is not None and path.exists() else ""
        if problem:
            raise PtychoError(
                f"MLflow store {path} is damaged ({problem}); rebuild it from the journals: {rebuild_command(path.parent)}"
            )
        if uri.startswith(("http://", "https://")):
            preflight(uri)
        self.uri = uri
        self.client = open_client(uri)
        self._exists: dict[str, bool] = {}
        self.resolved: dict[int, str] = {}
        self.created: list[_Run] = []

    def exists(self, run_id: str) -> bool:
        from mlflow.exceptions import MlflowException
        from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST, ErrorCode

        if run_id not in self._exists:
            try:
                retry(lambda: self.client.get_run(run_id), what="reading a journaled run", uri=self.uri)
                self._exists[run_id] = True
            except MlflowException as exc:
                if exc.error_code != ErrorCode.Name(RESOURCE_DOES_NOT_EXIST):
                    raise
                self._exists[run_id] = False
        return self._exists[run_id]

    def holding(self, run: _Run) -> str | None:
        """The id under which this store holds ``run`` (its newest id that exists), or None."""
        if id(run) not in self.resolved:
            found = next((r for r in reversed(run.ids) if self.exists(r)), None)
            if found is None:
                return None
            self.resolved[id(run)] = found
        return self.resolved[id(run)]

    def ensure(self, tree: _Tree, run: _Run) -> str:
        """The id of ``run`` here, creating it (and its parents first) from its ``run`` line."""
        held = self.holding(run)
        if held is not None:
            return held
        rec = run.create
        if rec is None:
            raise PtychoError(
                f"{run.path}: run {run.ids[0]} does not exist at {self.uri} and its journal does not say how it "
                "was created; replay into the store it was created in (--tracking-uri)"
            )
        tags = dict(rec.get("tags") or {})
        if tags.get(PARENT_TAG):
            parent = tree.runs.get(tags[PARENT_TAG])
            if parent is None and not self.exists(tags[PARENT_TAG]):
                parent = tree.legacy_parent(tags[PARENT_TAG])
            if parent is not None:
                tags[PARENT_TAG] = self.ensure(tree, parent)
            elif not self.exists(tags[PARENT_TAG]):
                raise PtychoError(
                    f"{run.path}: the parent run {tags[PARENT_TAG]} of run {run.ids[0]} is neither at {self.uri} "
                    f"nor journaled in {tree.folder}; replay into the store it was created in (--tracking-uri)"
                )
            experiment = self.client.get_run(tags[PARENT_TAG]).info.experiment_id
        elif rec.get("experiment"):
            experiment = experiment_id(self.client, self.uri, rec["experiment"])
        else:
            raise PtychoError(
                f"{run.path}: run {run.ids[0]} has no parent and its journal names no experiment; "
                "replay into the store it was created in (--tracking-uri)"
            )
        new_id = self._adopt(experiment, rec, tags.get(PARENT_TAG))
        if new_id is None:
            new_id = retry(
                lambda: self.client.create_run(
                    experiment, start_time=rec.get("start_time"), tags=tags, run_name=rec.get("name")
                ),
                what=f"creating run {rec.get('name')!r} again",
                uri=self.uri,
            ).info.run_id
            self.created.append(run)
        Journal(run.path).write("rebuilt", new_id, self.uri, **{"from": run.ids[0], "name": rec.get("name")})
        run.ids.append(new_id)
        tree.runs[new_id] = run
        self._exists[new_id] = True
        self.resolved[id(run)] = new_id
        return new_id

    def _adopt(self, experiment_id: str, rec: dict, parent_id: str | None) -> str | None:
        """A run an interrupted rebuild created before it could journal the new id: same
        experiment, parent, name and start time (to the millisecond)."""
        start = rec.get("start_time")
        if start is None:
            return None
        query = f"attributes.start_time = {int(start)}"
        if parent_id:
            query += f" and tags.`{PARENT_TAG}` = '{parent_id}'"
        found = retry(
            lambda: self.client.search_runs([experiment_id], query, max_results=100),
            what="looking for a run rebuilt before",
            uri=self.uri,
        )
        return next(
            (
                r.info.run_id
                for r in found
                if r.info.run_name == rec.get("name") and (parent_id or PARENT_TAG not in r.data.tags)
            ),
            None,
        )


#: What a replay counts of each kind of line (one per line, or per value).
_COUNTED = {"params": "params", "tags": "tags", "run": "tags", "metrics": "metrics", "artifact": "artifacts"}
_COUNTED.update(table="artifacts", model="models", end="ends")


def _replay_record(
    store: _Store, tree: _Tree, run: _Run, run_id: str, rec: dict, counts: dict[str, int], path: Path
) -> None:
    """Send one journal line to run ``run_id`` of ``store`` (:func:`~ptycho.tracking.runs.send`),
    its run ids as this store holds them; a file that is gone is counted, not sent."""
    from mlflow.exceptions import MlflowException

    op, line = rec["op"], dict(rec)
    local = rec.get("path") if op == "artifact" else rec.get("local_dir") if op == "model" else None
    if local is not None and not os.path.exists(local):
        _log.warning("%s: %s %s is gone; not replayed", path, "model folder" if op == "model" else "artifact", local)
        counts["missing_files"] += 1
        return
    if op in ("tags", "run"):
        line["tags"] = dict(rec.get("tags") or {})
        if line["tags"].get(PARENT_TAG) in tree.runs:  # the parent's id in this store
            line["tags"][PARENT_TAG] = store.ensure(tree, tree.runs[line["tags"][PARENT_TAG]])
    elif op == "table" and "run_id" in rec["columns"]:  # the children's ids as this store holds them
        ids = rec["columns"]["run_id"]
        line["columns"] = {
            **rec["columns"],
            "run_id": [store.holding(tree.runs[r]) or r if r in tree.runs else r for r in ids],
        }
    elif op == "end" and rec.get("stale"):
        if run.own_end:  # the job ended the run itself; "stale" was a guess made meanwhile
            return
        retry(lambda: store.client.set_tag(run_id, END_REASON_TAG, rec["stale"]), what="replaying", uri=store.uri)
    elif op == "end" and rec["status"] == "FINISHED":
        with contextlib.suppress(MlflowException):  # a job that finished offline may have been marked KILLED meanwhile
            store.client.delete_tag(run_id, END_REASON_TAG)
    retry(lambda: send(store.client, run_id, line), what=f"replaying {op}", uri=store.uri, conflicts=op == "dataset")
    if op in _COUNTED:
        values = line.get(op) if op in ("params", "metrics") else line.get("tags") if op in ("tags", "run") else None
        counts[_COUNTED[op]] += len(values) if values is not None else 1


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
    replaying a complete journal changes nothing), and for a store that lost runs.
    Params are identical values (MLflow accepts them again), tags are upserts, metrics
    carry their original timestamps (an exact duplicate is dropped by MLflow), artifacts
    are uploaded again to the same path, logged models are found by name and run, and
    the run's final status is set. A run the store does not hold is created again (see
    the module docstring), its parents first.

    The store: ``uri``, else the one the study's ``parent.json`` names (where its jobs
    log now), else the one in each line. Journals are read by folder (a study's runs
    name each other across its files); only the files in ``paths`` are sent.
    """
    out = Replayed()
    wanted = [Path(p).resolve() for p in paths]
    trees: dict[Path, _Tree] = {}
    loaded: dict[Path, set[Path]] = {}
    for path in wanted:
        if path.parent not in trees:
            trees[path.parent] = _Tree.load(path.parent)
            loaded[path.parent] = set(trees[path.parent].files)
        if path not in trees[path.parent].files:  # not named *.jsonl
            trees[path.parent].files[path] = read_journal(path)
    stores: dict[str, _Store] = {}
    # Where the study's jobs log now (read once: parent.json is rewritten at the end).
    study_uri = {folder: uri or (tree.parent_record() or {}).get("tracking_uri") for folder, tree in trees.items()}

    def store_for(tree: _Tree, rec: dict) -> _Store:
        target = study_uri[tree.folder] or rec.get("uri", "")
        if not target:
            raise PtychoError(
                f"{tree.folder}: a record without op, run_id or uri; not an MLflow journal written by ptycho"
            )
        if target not in stores:
            stores[target] = _Store(target)
        return stores[target]

    for tree in trees.values():
        files = [p for p in wanted if p.parent == tree.folder]
        # Every run first, parents before children, so that each line finds its run.
        for path in files:
            for rec in tree.files[path]:
                if rec["op"] != "rebuilt":
                    store_for(tree, rec).ensure(tree, tree.runs[rec["run_id"]])
        files += [p for p in tree.files if p not in files and p not in loaded[tree.folder]]  # a parent journaled now
        for path in files:
            counts = dict.fromkeys(COUNTS, 0)
            seen: set[tuple[str, str]] = set()
            for rec in tree.files[path]:
                if rec["op"] == "rebuilt":
                    continue
                store = store_for(tree, rec)
                run = tree.runs[rec["run_id"]]
                run_id = store.ensure(tree, run)
                if (store.uri, run_id) not in seen:
                    seen.add((store.uri, run_id))
                    counts["runs"] += 1
                _replay_record(store, tree, run, run_id, rec, counts, path)
            counts["created"] = sum(r.path == path for s in stores.values() for r in s.created)
            out.files.append((path, counts))
        note = _point_parent_json(tree, stores, uri)
        if note:
            out.notes.append(note)
    return out


def replay_journal(path: str | os.PathLike, uri: str | None = None) -> dict[str, int]:
    """:func:`replay_journals` of one file; returns its counts, by kind."""
    return replay_journals([path], uri).files[0][1]


def _point_parent_json(tree: _Tree, stores: dict[str, _Store], uri: str | None) -> str:
    """Point ``parent.json`` at the parent run as the store now holds it (after a rebuild);
    its modification time is kept, so that Snakemake sees no reason to re-run the jobs
    that depend on it. Written anew, dated at the parent's start, when it is missing."""
    from ptycho.artifacts import write_json

    path = tree.parent_json
    if path is None:
        return ""
    record = tree.parent_record()
    if record is not None:
        run = tree.runs.get(record["run_id"])
        target = uri or record.get("tracking_uri", "")
    else:  # the newest journaled root run (the parent) stands in for a lost parent.json
        roots = [r for r in {id(r): r for r in tree.runs.values()}.values() if r.create and r.create.get("experiment")]
        run = max(roots, key=lambda r: r.create.get("start_time") or 0, default=None)
        target = uri or (run.create.get("uri", "") if run else "")
        record = {"experiment": run.create["experiment"]} if run else {}
    store = stores.get(target)
    new_id = store.holding(run) if (store is not None and run is not None) else None
    if new_id is None or (record.get("run_id") == new_id and record.get("tracking_uri") == target):
        return ""
    if "run_id" in record:
        stamp = path.stat()
        times = (stamp.st_atime_ns, stamp.st_mtime_ns)
    else:
        start = int(run.create.get("start_time") or time.time() * 1000) * 1_000_000
        config_hash = (run.create.get("tags") or {}).get("config_hash")
        if config_hash:
            record["config_hash"] = config_hash
        times = (start, start)
    old = record.get("run_id")
    write_json(path, {**record, "run_id": new_id, "tracking_uri": target})
    os.utime(path, ns=times)
    return f"{path}: the study's parent run is now {new_id} at {target}" + (
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
    moved = []
    targets = set()
    for folder in folders:
        record = _Tree(folder).parent_record() or {}
        target = uri or record.get("tracking_uri")
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
