"""The report's record and words pinned on one real smoke study (issue 43's acceptance).

``tests/data/smoke-study`` holds what one run of ``snakemake --cores 2 all --config
preset=smoke`` wrote that the judging and reporting read: the trainings' ``model.json``,
the arms' scores, the benchmark, the solver's and the checklist's records, the jobs'
benchmark files and the resolved config (the inference outputs cut to their rate:
``seconds`` and ``patterns``). The checklist items that judge outputs (no TensorFlow)
are judged again from them, and the report is assembled again, by this code; both must
equal what is recorded in ``expected/`` key for key and word for word, apart from what
names the machine and the moment (the machine and run paragraph, the time, the commit).

A change meant to change the report's record or words regenerates the expected files
and shows the difference in review::

    python tests/test_report_golden.py
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

STUDY = Path(__file__).parent / "data" / "smoke-study"
EXPECTED = STUDY / "expected"
#: The items that judge the pipeline's outputs without TensorFlow, with the flags the
#: workflow gives them (rules/checks.smk) read from the study's config.
JUDGED = ("convergence", "quality", "speedup")


def _params(item: str, cfg: dict) -> dict:
    t = cfg["thresholds"]
    params = {"two_sided": bool(t["two_sided"]), "margin": float(t["convergence_max_rel"])}
    if item == "speedup":
        params = {"context": cfg["bench"]["context"], "margin": float(t["convergence_max_rel"])}
    return params


def judge(out: Path) -> dict[str, Path]:
    """The judged items' records, written to ``out``/checks (item -> path)."""
    from ptycho.study import checklist, jobs
    from ptycho.study.results import StudyResults

    cfg = json.loads((STUDY / "config.json").read_text())
    results = StudyResults.folder(STUDY)
    paths = {}
    for item in JUDGED:
        paths[item] = out / "checks" / f"{item}.json"
        threshold = cfg["thresholds"][checklist.get(item).threshold]
        jobs.check(item, threshold, str(paths[item]), results=results, **_params(item, cfg))
    return paths


def report(out: Path) -> dict[str, Path]:
    """The report from the study's records (its judged items judged again here)."""
    from ptycho.study import jobs
    from ptycho.study.results import StudyResults

    judged = judge(out)
    results = StudyResults.folder(STUDY)
    benchmarks = fixed_times(STUDY / "benchmarks", out / "benchmarks")
    checks = [str(judged.get(Path(p).stem, p)) for p in results.checks]
    jobs.report(
        dataclasses.replace(results, checks=checks),
        (),
        str(benchmarks),
        json.loads((STUDY / "config.json").read_text()),
        str(out / "report"),
        {},
    )
    return {"json": out / "report" / "validation.json", "md": out / "report" / "validation.md"}


def fixed_times(source: Path, target: Path) -> Path:
    """A copy of the jobs' benchmark files, each ended at one fixed time: the report's span
    of the run reads the files' times, which a clone sets to the moment it was made."""
    import os
    import shutil

    shutil.copytree(source, target)
    for path in target.rglob("*.tsv"):
        os.utime(path, (1e9, 1e9))
    return target


#: What names the machine and the moment, not the study.
_VOLATILE_KEYS = ("generated_utc", "machine")
_VOLATILE_PROVENANCE = ("git_commit",)


def stable_json(path: Path) -> dict:
    record = json.loads(path.read_text())
    record.pop("_format", None)
    for key in _VOLATILE_KEYS:
        record.pop(key, None)
    for key in _VOLATILE_PROVENANCE:
        record.get("provenance", {}).pop(key, None)
    return record


def stable_md(path: Path) -> str:
    text = path.read_text()
    text = re.sub(r"commit \w+; generated \S+", "commit <commit>; generated <time>", text)
    # the machine and run paragraph: the machine's name, load and versions, and the time
    return re.sub(r"(## Machine and run\n\n)[^\n]*\n", r"\1<machine>\n", text)


def test_the_judged_items_give_the_recorded_records_again(tmp_path):
    from ptycho.artifacts import read_json
    from ptycho.study import checklist

    for item, path in judge(tmp_path).items():
        again = read_json(path, producer=checklist.producer(item))
        recorded = read_json(STUDY / "checks" / f"{item}.json", producer=checklist.producer(item))
        assert again == recorded, item


def test_the_report_gives_the_recorded_record_and_words_again(tmp_path):
    made = report(tmp_path)
    assert stable_json(made["json"]) == stable_json(EXPECTED / "validation.json")
    assert stable_md(made["md"]) == stable_md(EXPECTED / "validation.md")


def regenerate() -> None:
    """Write ``expected/`` from this code (the judged items' records into the study too)."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        made = report(Path(tmp))
        for item in JUDGED:
            shutil.copyfile(Path(tmp) / "checks" / f"{item}.json", STUDY / "checks" / f"{item}.json")
        EXPECTED.mkdir(exist_ok=True)
        for path in made.values():
            shutil.copyfile(path, EXPECTED / path.name)
    print(f"wrote {EXPECTED}/validation.json and validation.md", file=sys.stderr)


if __name__ == "__main__":
    regenerate()
