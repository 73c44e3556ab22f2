"""The journal: every write to a study's runs, kept beside its outputs, in one format.

``<results>/<preset>/mlflow/journal/<run name>.jsonl`` (``parent.jsonl`` for the study's
parent run) holds one JSON line per write, ``{"op", "run_id", "uri", ...}``, appended
*before* the write is sent to MLflow: whatever happens to the tracking server or the
store, what a job computed is on disk, and :func:`ptycho.tracking.replay.replay_journals`
sends it again. The ops are the kinds of write (:data:`ptycho.tracking.record.KINDS`:
each one's fields and how it is sent, live or replayed), ``run`` (the run's creation:
name, tags, start time and, for a root run, the experiment's name) among them, and
``rebuilt`` (the id an older version's rebuild gave the run). This module writes and
reads the file: nothing else knows its layout.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ptycho.errors import PtychoError
from ptycho.tracking.store import JOURNAL_TAG

_log = logging.getLogger(__name__)
#: The parent run's journal, ``journal/parent.jsonl`` beside the jobs' (no job is named so).
PARENT_JOURNAL = "parent"
#: MLflow's tag naming a run's parent.
PARENT_TAG = "mlflow.parentRunId"


class Journal:
    """An append-only JSON-lines file of one run's writes (several attempts may share it).

    A journal that cannot be written (disk full) is reported once as a warning and then
    skipped; it never stops the job, whose MLflow writes go on.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._broken = False

    def write(self, op: str, run_id: str, uri: str, **fields: Any) -> dict:
        """Append one line and return it."""
        line = {"op": op, "run_id": run_id, "uri": uri, **fields}
        if self._broken:
            return line
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as fh:
                fh.write(json.dumps(line, separators=(",", ":"), default=str) + "\n")
        except OSError as exc:
            self._broken = True
            _log.warning(
                "cannot write the MLflow journal %s (%s); MLflow alone records this job", self.path, exc.strerror
            )
        return line


def journal_of(tags: Mapping[str, str]) -> Journal | None:
    """The journal of a run with these tags (:data:`JOURNAL_TAG`), or None (not journaled)."""
    path = tags.get(JOURNAL_TAG)
    return Journal(path) if path else None


def journal_path(parent_json: str | os.PathLike, name: str) -> Path:
    """Where run ``name`` of a study is journaled: ``journal/<name>.jsonl`` beside the
    parent's JSON (``<results>/<preset>/mlflow/``)."""
    return Path(parent_json).resolve().parent / "journal" / f"{name.replace('/', '_')}.jsonl"


def read_journal(path: Path) -> list[dict]:
    """The lines of a journal, as they read in the results folder that holds it now.

    A last line cut short (a job killed mid-write) is skipped; anything else that is not
    a journal line is a one-line error.
    """
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise PtychoError(f"{path}: cannot read the MLflow journal ({exc.strerror})") from None
    records = []
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            records.append(json.loads(text))
        except json.JSONDecodeError:
            if number == len(lines):
                _log.warning("%s: last line is incomplete; skipped", path)
                continue
            raise PtychoError(f"{path}: line {number} is not JSON; not an MLflow journal written by ptycho") from None
    for rec in records:
        if not isinstance(rec, dict) or "op" not in rec or not rec.get("run_id"):
            raise PtychoError(f"{path}: a record without op, run_id or uri; not an MLflow journal written by ptycho")
    return _moved(records, path)


def _moved(records: list[dict], path: Path) -> list[dict]:
    """``records`` with the paths under the results folder they were written in read
    under the one that holds ``path`` now (a results folder copied or moved elsewhere):
    the journal's own path, as its ``run`` line tags it, tells the old folder."""
    said = next((r["tags"][JOURNAL_TAG] for r in records if r["op"] == "run" and JOURNAL_TAG in r.get("tags", {})), "")
    was, now = Path(said), path.resolve()
    if not said or was == now or len(was.parts) < 5 or len(now.parts) < 5 or was.parts[-4:] != now.parts[-4:]:
        return records
    old, new = str(was.parents[3]), str(now.parents[3])

    def move(value: Any) -> Any:
        if isinstance(value, str):
            for prefix in ("", "sqlite:///"):
                if value.startswith(prefix + old + "/"):
                    return prefix + new + value[len(prefix + old) :]
        return value

    out = []
    for rec in records:
        rec = {k: move(v) for k, v in rec.items()}
        if isinstance(rec.get("tags"), dict):
            rec["tags"] = {k: move(v) for k, v in rec["tags"].items()}
        out.append(rec)
    return out


def aliases(records: list[dict]) -> dict[str, str]:
    """The ids older versions' rebuilds (1bd3668..bdde171) gave runs, each mapped to the
    run's key: their ``rebuilt`` lines, ``{"run_id": <new id>, "from": <earlier id>}``."""
    alias: dict[str, str] = {}
    for rec in records:
        if rec["op"] == "rebuilt":
            was = rec.get("from") or rec["run_id"]
            alias[rec["run_id"]] = alias.get(was, was)
    return alias


def journaled_end(path: Path, key: str) -> bool:
    """Whether the journal ``path`` holds the run's own end (not a sweep's "stale" guess)."""
    try:
        records = read_journal(path)
    except PtychoError:
        return False
    alias = aliases(records)
    key = alias.get(key, key)
    return any(r["op"] == "end" and not r.get("stale") and alias.get(r["run_id"], r["run_id"]) == key for r in records)


def journaled_parent(parent_json: str | os.PathLike) -> dict | None:
    """What ``parent_json`` held, read from the study's parent journal (for a lost file).

    The newest parent run created in ``journal/parent.jsonl`` beside it: ``run_id``,
    ``key``, ``tracking_uri``, ``experiment``, ``config_hash``, as ``track start`` writes
    them (``run_id`` is the key, or the newest id an older version's rebuild journaled;
    a store rebuilt since holds it tagged with the key), plus ``start_time`` (ms) and
    ``complete`` (its params are journaled: ``track start`` got past creating it). None
    when nothing is journaled.
    """
    path = journal_path(parent_json, PARENT_JOURNAL)
    if not path.is_file():
        return None
    try:
        records = read_journal(path)
    except PtychoError:
        return None
    roots = [r for r in records if r["op"] == "run" and r.get("experiment") and PARENT_TAG not in r.get("tags", {})]
    if not roots:
        return None
    root, alias = roots[-1], aliases(records)
    key = root["run_id"]
    ids = [key, *(i for i, k in alias.items() if k == key)]  # a store an older version rebuilt: its newest id
    rebuilt = [r for r in records if r["op"] == "rebuilt" and r["run_id"] in ids]
    return {
        "run_id": ids[-1],
        "key": key,
        "tracking_uri": (rebuilt[-1].get("uri") if rebuilt else "") or root.get("uri", ""),
        "experiment": root["experiment"],
        "config_hash": (root.get("tags") or {}).get("config_hash", ""),
        "start_time": root.get("start_time"),
        "complete": any(r["op"] == "params" and r["run_id"] in ids for r in records),
    }


def write_parent_json(path: str | os.PathLike, record: Mapping[str, Any], ns: int | None = None) -> None:
    """Write the study's ``parent.json`` (atomically), dated as it was (or at ``ns``, the
    parent's start, for a file written anew): Snakemake re-runs no job for a rewrite."""
    from ptycho.artifacts import write_json

    path = Path(path)
    times = (ns, ns) if ns else (path.stat().st_atime_ns, path.stat().st_mtime_ns) if path.exists() else None
    write_json(path, dict(record))
    if times:
        os.utime(path, ns=times)


def parent_record(parent_json: str | os.PathLike) -> dict:
    """The study's parent run as ``parent_json`` names it, else as its journal does (a lost
    ``parent.json``); a :class:`PtychoError` naming ``track start`` when neither exists."""
    from ptycho.artifacts import read_json

    if Path(parent_json).exists():
        return read_json(parent_json)
    record = journaled_parent(parent_json)
    if record is None:
        raise PtychoError(
            f"{parent_json}: no such file, and no parent run is journaled beside it (it is written by 'track start')"
        )
    return record
