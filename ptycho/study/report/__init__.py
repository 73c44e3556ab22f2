"""The validation report: ``validation.json`` (the record), ``.md`` and ``.html`` (views).

Everything in it comes from this run's job outputs (checklist items, per-arm metrics,
training metadata); nothing is typed in. Judging is the checklist's
(:mod:`ptycho.study.checklist`); this package assembles and narrates:

* :mod:`~ptycho.study.report.record`: the record (:class:`StudyReport`, :func:`build`), its format version and
  the run's cost from the jobs' benchmark files;
* :mod:`~ptycho.study.report.words`: the sentences (the verdict line, the three answers,
  what follows them, provenance, what ``make all`` prints last);
* :mod:`~ptycho.study.report.pages`: the Markdown and HTML views, written atomically and
  published whole;
* :mod:`~ptycho.study.report.answers`: what the report adds to the study's other MLflow
  runs (each arm's answer, the parent's verdict and sentences).

The names below are the package's API, used by the jobs, the workflow and the tests.
"""

from ptycho.study.report.pages import (
    caption,
    checklist_table,
    cost_table,
    figures,
    markdown,
    page,
    publish,
    sections,
    write,
)
from ptycho.study.report.record import (
    REPORT_FILES,
    REPORT_SCHEMA_VERSION,
    Provenance,
    StudyReport,
    build,
    pipeline_cost,
)
from ptycho.study.report.words import (
    agreement_sentence,
    answer,
    console_lines,
    cost_line,
    data_sentence,
    decided_by,
    failed_sentence,
    mlflow_url,
    precision_sentence,
    print_answer,
    provenance_line,
    quality_sentence,
    rest_lines,
    speed_sentence,
    verdict_line,
)

__all__ = [
    "REPORT_FILES",
    "REPORT_SCHEMA_VERSION",
    "StudyReport",
    "agreement_sentence",
    "answer",
    "build",
    "caption",
    "checklist_table",
    "console_lines",
    "cost_line",
    "cost_table",
    "data_sentence",
    "decided_by",
    "failed_sentence",
    "figures",
    "markdown",
    "mlflow_url",
    "page",
    "pipeline_cost",
    "Provenance",
    "precision_sentence",
    "print_answer",
    "provenance_line",
    "publish",
    "quality_sentence",
    "rest_lines",
    "sections",
    "speed_sentence",
    "verdict_line",
    "write",
]
