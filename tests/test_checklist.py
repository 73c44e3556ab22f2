"""The checklist's shape: an item is its judging (a checklist module) and its section (a
report module), and the rest of the study reads the lists.

An item defined here, in a test module, with its section, is registered and then appears
in ``ptycho check``'s job, the verdict, the report's checklist table, its own section with
its tables, and the figures job's list, without any other module knowing its name.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ptycho.study import checklist, report
from ptycho.study.checklist import Inputs, Item, ItemResult, verdict
from ptycho.study.report import items as sections
from ptycho.study.results import StudyResults
from ptycho.study.section import Figure, Section


def _collect(inputs: Inputs, threshold: float) -> ItemResult:
    """A toy item: the number of metrics files given, at most ``threshold``."""
    n = len(inputs.results.metrics)
    return verdict("tidiness", float(n), threshold, "<=", f"{n} metrics files", {"files": list(inputs.results.metrics)})


def _tables(rep):
    files = rep.evidence("tidiness")["files"]
    return [("Files seen", ["file"], [[f] for f in files])]


def _draw(inputs):
    from ptycho.study.figures.style import message_figure

    return message_figure("tidy")


TIDINESS = Item(name="tidiness", collect=_collect, threshold="tidiness_max")
TIDINESS_SECTION = Section(
    name="tidiness", title="Tidiness", tables=_tables, figures=(Figure("tidiness", "a tidy figure", _draw),)
)


@pytest.fixture
def tidiness():
    checklist.register(TIDINESS)
    sections.register(TIDINESS_SECTION)
    yield TIDINESS
    checklist.unregister(TIDINESS.name)
    sections.unregister(TIDINESS.name)


def _passing_items():
    return {
        name: verdict(name, 0.0, 1.0, "<=", f"{name} ok", {"pairs": {}} if name == "convergence" else {})
        for name in checklist.names()
    }


def test_the_package_lists_its_items_once_in_report_order():
    assert checklist.names() == ["accuracy", "gradients", "convergence", "quality", "speedup"]
    assert [it.name for it in checklist.items() if it.measures] == ["accuracy", "gradients"]
    assert [s.name for s in sections.sections()][:5] == checklist.names()  # each item's section, in its order
    assert [f.stem for _, f in sections.figures()] == [
        "losses",
        "reconstructions",
        "errors",
        "frc",
        "step_times",
        "components",
        "speedup",
        "precision_speedup",
        "solver",
    ]


def test_an_item_registered_from_a_test_module_is_checked_judged_and_reported(tidiness, tmp_path):
    from ptycho.study import jobs

    assert checklist.names()[-1] == "tidiness" and checklist.get("tidiness") is tidiness
    out = tmp_path / "tidiness.json"
    record = jobs.check("tidiness", 1.0, str(out), results=StudyResults(metrics=["a.json", "b.json"]))
    assert json.loads(out.read_text())["status"] == "FAIL" and "tidiness: FAIL" in record.summary

    items = _passing_items()
    with pytest.raises(ValueError, match="tidiness"):  # the verdict needs every item, the new one too
        report.build({k: v for k, v in items.items() if k != "tidiness"}, {}, {"preset": "smoke"})
    items["tidiness"] = ItemResult.from_json(json.loads(out.read_text()))
    rec = report.build(items, {}, {"preset": "smoke"})
    assert rec.verdict == "FAIL" and list(rec.items)[-1] == "tidiness"
    paths = report.write(rec, tmp_path / "report")
    html, md = paths["html"].read_text(), paths["md"].read_text()
    assert '<section id="tidiness"><h2>Tidiness <span class="fail">FAIL</span>' in html
    assert "| tidiness | FAIL | 2 | <= 1 | 2 metrics files |" in md and "### Files seen" in md
    assert ("tidiness", "tidiness", "a tidy figure") in report.figures()


def test_the_items_that_only_judge_import_no_tensorflow():
    code = (
        "import sys; from ptycho.study import checklist, report; from ptycho.study.report import items as sections; "
        "[sections.section(it.name).tables for it in checklist.items()]; "
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_an_unknown_item_is_one_line_naming_the_choices(tmp_path):
    from ptycho.errors import PtychoError
    from ptycho.study import jobs

    with pytest.raises(PtychoError, match="unknown item 'tidyness'; choose one of accuracy, gradients"):
        jobs.check("tidyness", 1.0, str(tmp_path / "x.json"))
    assert not (tmp_path / "x.json").exists()


def test_an_item_without_a_section_is_one_line_naming_the_fix():
    with pytest.raises(KeyError, match="checklist item 'tidiness' has no report section; register one"):
        sections.section("tidiness")
    with pytest.raises(KeyError, match="'seeds' has no report section"):  # a module of the package, no section
        sections.section("seeds")


def test_the_judging_modules_say_nothing_of_how_they_are_shown():
    """Judging apart from narrating: no checklist module builds a table or draws a figure
    (their sections do, in ptycho/study/report/items/), and each item has its section."""
    from pathlib import Path

    folder = Path(checklist.__file__).parent
    for path in sorted(folder.glob("*.py")):
        text = path.read_text()
        narrates = ("ptycho.study.figures", "ptycho.study.tables", "-> Table")
        assert not any(word in text for word in narrates), f"{path.name} narrates"
    assert [sections.section(name).name for name in checklist.names()] == checklist.names()
