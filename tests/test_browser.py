"""What a person sees: the report and the MLflow UI, rendered by a real headless Chromium.

One smoke pipeline runs per session (a few minutes) in a temporary folder; its
``reports/validation.html`` is opened from disk, and its MLflow store is served on
127.0.0.1 by ``make ui``'s command and browsed. The browser is Debian's
``chromium`` driven over the DevTools pipe (``tests/browser.py``, no Python dependency);
when it is missing, the session installs it with apt-get as root (CI) or through
passwordless sudo, and skips otherwise.

Screenshots go to ``$PTYCHO_SCREENSHOTS`` when set, else to each test's tmp folder; their
paths are printed (``pytest -s`` shows them).

The checks are generic on purpose: every ``<section>`` and every ``<img>`` of the report,
whatever sections and figures it grows; only the ``verdict`` and ``checklist`` ids are
named. The MLflow routes are those of the 3.17 UI (a hash-routed single-page app):
``#/experiments/<id>`` (the study's experiment is tagged a machine-learning one, so it
opens on its runs, not on MLflow 3's GenAI overview), ``#/experiments/<id>/runs`` and
``#/compare-runs?runs=[...]&experiments=[...]``. The server is started as ``make ui``
starts it (``ptycho track ui results``), which prints the addresses a person opens.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from apt_install import apt_get
from browser import Browser, BrowserError, stop_process_group
from test_pipeline import _workdir, snakemake

pytestmark = [pytest.mark.slow, pytest.mark.browser]

APT_PACKAGES = ("chromium", "fonts-dejavu-core")  # a font, so that text renders on a bare machine
EXPERIMENT = "xla-ptycho"


# ---------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of Debian's ``chromium``; installed with apt-get when missing (about 20 s).

    Installs as root, or through passwordless ``sudo -n``; otherwise skips with the reason.
    """
    found = shutil.which("chromium")
    if found:
        return found
    sudo = os.geteuid() != 0
    can_sudo = (
        sudo and shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0
    )
    if not shutil.which("apt-get") or (sudo and not can_sudo):
        pytest.skip(
            "chromium is not on PATH and cannot be installed here (needs apt-get as root or passwordless "
            "sudo); install it with `sudo apt-get install chromium` to run the browser tests"
        )
    started = time.monotonic()
    for args in (("update", "-q"), ("install", "-y", "-q", "--no-install-recommends", *APT_PACKAGES)):
        result = apt_get(*args, sudo=sudo)
        assert result.returncode == 0, (
            f"apt-get {' '.join(args)} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
    found = shutil.which("chromium")
    assert found, "apt-get installed chromium but it is not on PATH"
    print(f"\ninstalled {', '.join(APT_PACKAGES)} in {time.monotonic() - started:.0f} s")
    return found


@pytest.fixture(scope="session")
def smoke(chromium, tmp_path_factory) -> Path:
    """A workdir where the smoke pipeline has run to the end (report and MLflow store).

    Asks for ``chromium`` first so that a machine without a browser skips before the
    pipeline's minutes are spent.
    """
    work = _workdir(tmp_path_factory.mktemp("browser-smoke"))
    started = time.monotonic()
    result = snakemake(work, "all", "--config", "preset=smoke")
    assert result.returncode == 0, result.stderr[-3000:]
    print(f"\nsmoke pipeline: {time.monotonic() - started:.0f} s in {work}")
    return work


@pytest.fixture
def shots(tmp_path) -> Path:
    """Where screenshots go: ``$PTYCHO_SCREENSHOTS`` if set, else this test's tmp folder."""
    folder = Path(os.environ.get("PTYCHO_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def browser(chromium, tmp_path):
    """A fresh headless Chromium (own profile), stopped with all its processes afterwards."""
    with Browser.launch(chromium, window=(1600, 1200), profile_root=tmp_path, timeout=60) as b:
        yield b
    assert not b.leftover, f"browser processes left running: {b.leftover}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def mlflow_ui(smoke, tmp_path_factory):
    """``make ui``'s command (``ptycho track ui results``) on 127.0.0.1 over the smoke
    run's store; yields its base URL and the addresses it printed.

    MLflow's background job runner is off: nothing here uses GenAI jobs, and the machine
    is small. Stopped by its process group (the server spawns uvicorn workers); the test
    fails if any is left.
    """
    port = _free_port()
    log = tmp_path_factory.mktemp("mlflow-ui") / "server.log"
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ptycho", "track", "ui", "results", "--port", str(port)],
            cwd=smoke,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow ui did not come up on {base}:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        # `make ui` prints its addresses once the server answers, not before (a link printed
        # a minute before the server answered led to a refused connection)
        while "MLflow UI at" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow ui printed no address:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        text = log.read_text()
        assert text.index("serving at") < text.index("MLflow: ")  # the addresses after the server answered
        printed = [line.split(": ", 2)[-1] for line in text.splitlines() if line.startswith("MLflow: ")]
        yield {"base": base, "printed": printed}
    finally:
        left = stop_process_group(proc, grace=20)
        assert not left, f"mlflow ui processes left running: {left}"


@pytest.fixture(scope="session")
def runs(smoke) -> dict:
    """The smoke study's runs from the store: experiment id, parent, children, PINN train arms."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{smoke / 'results' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(EXPERIMENT)
    found = client.search_runs([experiment.experiment_id], max_results=1000)
    children = [r for r in found if "mlflow.parentRunId" in r.data.tags]
    parents = [r for r in found if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1 and children
    arms = {
        r.data.tags["xla"]: r
        for r in children
        if r.data.tags.get("rule") == "train" and r.data.tags.get("model") == "pinn"
    }
    assert set(arms) == {"jit", "off"}, f"PINN train runs by xla tag: {sorted(arms)}"
    return {"experiment_id": experiment.experiment_id, "parent": parents[0], "children": children, "pinn_train": arms}


# ---------------------------------------------------------------------- validation.html
REPORT_FACTS = """((verdictWord) => {
  const box = e => { const r = e.getBoundingClientRect(), s = getComputedStyle(e);
    return {top: r.top + scrollY, bottom: r.bottom + scrollY, width: r.width, height: r.height,
            shown: s.display !== 'none' && s.visibility !== 'hidden' && Number(s.opacity) > 0}; };
  const verdict = document.getElementById('verdict');
  const checklist = document.getElementById('checklist');
  return {
    title: document.title,
    viewport: {width: innerWidth, height: innerHeight},
    sections: [...document.querySelectorAll('section')].map(s => {
      const h = s.querySelector('h1, h2, h3, h4, h5, h6');
      return {id: s.id, heading: h ? h.innerText.trim() : '', box: box(s), headingBox: h ? box(h) : null};
    }),
    images: [...document.images].map(i => ({
      alt: i.alt, src: i.currentSrc.slice(0, 30), section: i.closest('section') ? i.closest('section').id : null,
      complete: i.complete, naturalWidth: i.naturalWidth, naturalHeight: i.naturalHeight, box: box(i)})),
    verdict: verdict && {text: verdict.innerText, box: box(verdict)},
    // The innermost element reading exactly PASS/FAIL, and whether it is topmost at its centre.
    verdictWord: (() => {
      const el = verdict && [...verdict.querySelectorAll('*')].filter(e => e.innerText.trim() === verdictWord).pop();
      if (!el) return null;
      const r = el.getBoundingClientRect(), hit = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
      return {box: box(el), onTop: !!hit && (hit === el || el.contains(hit))};
    })(),
    checklist: checklist && {text: checklist.innerText, rows: checklist.querySelectorAll('tbody tr').length},
    resources: performance.getEntriesByType('resource').map(e => e.name),
  };
})"""


def test_validation_report_renders_every_section_and_image_offline(smoke, browser, shots):
    report_json = json.loads((smoke / "reports" / "smoke" / "validation.json").read_text())
    url = (smoke / "reports" / "smoke" / "validation.html").as_uri()
    page = browser.new_page(1280, 900)
    page.goto(url)
    page.wait_for("[...document.images].every(i => i.complete)", message="all images to finish loading")
    verdict = report_json["verdict"]
    facts = page.evaluate(f"({REPORT_FACTS})({json.dumps(verdict)})")
    shot = page.screenshot(shots / "validation.png", full_page=True)
    print(f"\nscreenshot of validation.html: {shot}")

    # The verdict: the record's, readable at the top, in the first screenful.
    assert facts["verdict"], "no element with id 'verdict'"
    assert facts["verdictWord"], f"verdict {verdict} not shown: {facts['verdict']['text']!r}"
    assert verdict in facts["title"]
    v = facts["verdictWord"]["box"]
    assert v["shown"] and v["height"] > 0 and 0 <= v["top"] and v["bottom"] <= facts["viewport"]["height"], (
        f"verdict not in the first screenful: {v}, viewport {facts['viewport']}"
    )
    assert facts["verdictWord"]["onTop"], "the verdict is covered by another element"

    # The checklist: one row per item of the record, each named.
    assert facts["checklist"], "no element with id 'checklist'"
    assert facts["checklist"]["rows"] == len(report_json["items"])
    for name in report_json["items"]:
        assert name in facts["checklist"]["text"]

    # Every section: a heading, and content rendered below it.
    assert len(facts["sections"]) >= 2 + len(report_json["items"])  # verdict, checklist, one per item
    for s in facts["sections"]:
        where = f"section {s['id'] or s['heading'] or '?'}"
        assert s["heading"], f"{where} has no heading"
        assert s["box"]["shown"] and s["box"]["width"] > 0, f"{where} is not rendered: {s['box']}"
        assert s["box"]["height"] > s["headingBox"]["height"], f"{where} renders nothing below its heading"

    # Every image: decoded, with pixels, laid out at a visible size.
    assert facts["images"], "the report has no image"
    assert len(facts["images"]) == len(report_json["figures"]), "every figure of the record is on the page"
    for img in facts["images"]:
        where = f"image {img['alt']!r} in section {img['section']}"
        assert img["complete"] and img["naturalWidth"] > 0 and img["naturalHeight"] > 0, f"{where} did not load"
        assert img["box"]["shown"] and img["box"]["width"] > 0 and img["box"]["height"] > 0, f"{where} not rendered"

    # Self-contained: nothing fetched but the page itself and data: URLs; no errors.
    fetched = [u for u in page.requests if u != url and not u.startswith("data:")]
    assert not fetched, f"the report fetched external resources: {fetched}"
    assert not [u for u in facts["resources"] if not u.startswith("data:")]
    assert not page.failed_requests, page.failed_requests
    assert not page.console_errors, page.console_errors


def test_the_reports_first_screen_holds_the_verdict_and_its_three_sentences(smoke, browser, shots):
    report_json = json.loads((smoke / "reports" / "smoke" / "validation.json").read_text())
    page = browser.new_page(1400, 900)
    page.goto((smoke / "reports" / "smoke" / "validation.html").as_uri())
    shot = page.screenshot(shots / "validation-first-screen.png")
    print(f"\nscreenshot of the report's first screen: {shot}")
    facts = page.evaluate(
        """(() => {
          const box = e => { const r = e.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, h: r.height}; };
          const verdict = document.querySelector('#verdict .verdict');
          return {
            viewport: window.innerHeight,
            verdict: verdict && {text: verdict.textContent.trim(), box: box(verdict)},
            answers: [...document.querySelectorAll('#verdict .answer')].map(e => ({text: e.textContent, box: box(e)})),
            contents: [...document.querySelectorAll('#contents a')].map(a => a.getAttribute('href')),
            links: [...document.querySelectorAll('#checklist td a')].map(a => a.getAttribute('href')),
          };
        })()"""
    )
    assert facts["verdict"]["text"] == report_json["verdict"]
    assert [a["text"].split(":")[0] for a in facts["answers"]] == ["Speed", "Quality", "Precision"]
    for element in [facts["verdict"], *facts["answers"]]:
        assert 0 <= element["box"]["top"] and element["box"]["bottom"] <= facts["viewport"], element
    assert {"#verdict", "#checklist", "#speedup"} <= set(facts["contents"])
    assert sorted(facts["links"]) == sorted(f"#{name}" for name in report_json["items"])  # each row to its section


# ---------------------------------------------------------------------- MLflow UI
def _close_assistant(page) -> None:
    """Close the MLflow Assistant side panel (open by default in a fresh profile), if it shows."""
    close = "document.querySelector('button[data-component-id=\"mlflow.assistant.chat_panel.close\"]')"
    try:
        page.wait_for(f"!!{close}", timeout=5)
    except BrowserError:
        return  # no such panel in this MLflow version: nothing to close
    page.evaluate(f"{close}.click()")
    page.wait_for(f"!{close}", timeout=10, message="the assistant panel to close")


def _report_page_problems(page, base: str) -> None:
    """Fail on what would break the UI for a person; print the rest.

    MLflow's own UI logs harmless errors (a 404 for ``users/current`` without an auth
    app, ResizeObserver notices), so console errors are printed, not asserted; uncaught
    exceptions and server errors (5xx) fail the test.
    """
    if page.console_errors:
        print("browser console errors (not failing):", *page.console_errors, sep="\n  ")
    assert not page.exceptions, page.exceptions
    assert not [e for e in page.http_errors if e[0] >= 500], page.http_errors
    assert not [r for r in page.failed_requests if r[0].startswith(base)], page.failed_requests


def _unlisted(runs) -> str:
    """JavaScript: the names of ``runs`` with no row in the runs table (linked by id, shown by name)."""
    wanted = {r.info.run_id: r.info.run_name for r in runs}
    return f"""(() => {{
      const wanted = {json.dumps(wanted)};
      const links = [...document.querySelectorAll('[role=row] a[href*="/runs/"]')];
      return Object.entries(wanted).filter(([id, n]) =>
        !links.some(a => a.getAttribute('href').endsWith('/runs/' + id) && a.textContent.trim() === n)).map(e => e[1]);
    }})()"""


def test_mlflow_experiment_page_lists_every_run_of_the_smoke_pipeline(mlflow_ui, runs, browser, shots):
    mlflow_ui = mlflow_ui["base"]
    parent, children = runs["parent"], runs["children"]
    page = browser.new_page(1600, max(1200, 500 + 40 * (len(children) + 1)))  # every row in view
    page.goto(f"{mlflow_ui}/#/experiments/{runs['experiment_id']}/runs")
    name = json.dumps(parent.info.run_name)
    page.wait_for(
        f"[...document.querySelectorAll('a')].some(a => a.innerText.trim() === {name})",
        timeout=120,
        message=f"the parent run {parent.info.run_name} in the runs table",
    )
    _close_assistant(page)
    page.wait_for(
        f"document.body.innerText.includes('{len(children) + 1} matching runs')",
        message=f"the runs table to count {len(children) + 1} runs",
    )

    # Child runs are nested under the parent: expand it, as a person clicks its "+".
    page.evaluate(f"""[...document.querySelectorAll('a')].find(a => a.innerText.trim() === {name})
                      .closest('[role=gridcell]').querySelector('button').click()""")
    direct = [r for r in children if r.data.tags["mlflow.parentRunId"] == parent.info.run_id]
    page.wait_for(
        f"{_unlisted([parent, *direct])}.length === 0", timeout=60, message="a row for every job's run (by id and name)"
    )
    # The benchmark's run nests one run per benchmarked arm, the solver's jobs one per mode
    # and start: expand each of them too.
    nesting = {r.data.tags["mlflow.parentRunId"] for r in children} - {parent.info.run_id}
    for job in (r for r in direct if r.info.run_id in nesting):
        page.evaluate(f"""[...document.querySelectorAll('a')].find(a => a.innerText.trim() === {json.dumps(job.info.run_name)})
                          .closest('[role=gridcell]').querySelector('button').click()""")
    assert {r.data.tags.get("rule") for r in direct if r.info.run_id in nesting} == {"bench", "solve", "warm_start"}
    page.wait_for(
        f"{_unlisted([parent, *children])}.length === 0",
        timeout=60,
        message="a row for every run, the benchmark's arms and the solver's runs too",
    )
    time.sleep(1)  # let the row colours and durations paint before the picture
    shot = page.screenshot(shots / "mlflow-experiment.png")
    print(f"\nscreenshot of the MLflow experiment page: {shot}")
    _report_page_problems(page, mlflow_ui)


#: The texts of a table row as a person reads it: the element whose own text is
#: ``label``, then every text to its right on the same line, left to right. What is on
#: screen must really be seen (the topmost element at its centre: not covered by a
#: panel or overlay); what is clipped by a scrolled box or lies below the fold counts as
#: reachable by scrolling (the compare view's metrics sit in a 300 px scrolled box).
ROW_TEXTS = """(label) => {
  const own = e => [...e.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent).join('').trim();
  const centre = e => { const r = e.getBoundingClientRect(); return [(r.left + r.right) / 2, (r.top + r.bottom) / 2]; };
  const clipped = e => { const [x, y] = centre(e);
    if (x < 0 || y < 0 || x > innerWidth || y > innerHeight) return true;
    for (let a = e.parentElement; a; a = a.parentElement) {
      const s = getComputedStyle(a);
      if (s.overflowX === 'visible' && s.overflowY === 'visible') continue;
      const r = a.getBoundingClientRect();
      if (x < r.left || x > r.right || y < r.top || y > r.bottom) return true;
    }
    return false; };
  const seen = e => { const r = e.getBoundingClientRect(), s = getComputedStyle(e);
    if (r.width <= 0 || r.height <= 0 || s.visibility === 'hidden') return false;
    if (clipped(e)) return true;
    const hit = document.elementFromPoint(...centre(e));
    return !!hit && (hit === e || e.contains(hit) || hit.contains(e)); };
  return [...document.querySelectorAll('body *')].filter(e => own(e) === label && seen(e)).map(head => {
    const h = head.getBoundingClientRect(), mid = (h.top + h.bottom) / 2;
    return [...document.querySelectorAll('body *')].filter(e => e !== head && own(e))
      .map(e => [e.getBoundingClientRect(), own(e), e])
      .filter(([r, , e]) => r.left >= h.right - 1 && r.top <= mid && r.bottom >= mid && seen(e))
      .sort((a, b) => a[0].left - b[0].left).map(([, t]) => t);
  });
}"""


def _row(page, label: str, columns: int) -> list[str]:
    """The first ``columns`` values of the one visible row labelled ``label`` (fails if none or several)."""
    rows = [r[:columns] for r in page.evaluate(f"({ROW_TEXTS})({json.dumps(label)})") if len(r) >= columns]
    assert len(rows) == 1, f"expected one visible row {label!r} with {columns} values, found {rows}"
    return rows[0]


def test_mlflow_compare_view_shows_the_xla_arms_side_by_side(mlflow_ui, runs, browser, shots):
    # The address `make ui` prints first: the PINN's arms side by side.
    compare = mlflow_ui["printed"][0]
    arms = runs["pinn_train"]
    ordered = [arms["jit"], arms["off"]]
    ids = [r.info.run_id for r in ordered]
    assert compare.startswith(f"{mlflow_ui['base']}/#/compare-runs?runs=") and all(i in compare for i in ids)
    page = browser.new_page(1600, 6000)  # tall enough for run details, params, metrics and tags, unfolded
    page.goto(compare)
    page.wait_for(
        "document.body.innerText.includes('Tags') && "
        + " && ".join(f"document.body.innerText.includes({json.dumps(r.info.run_name)})" for r in ordered),
        timeout=120,
        message="the compare view with both runs and their tags",
    )
    _close_assistant(page)
    # MLflow's parameter and metric tables scroll inside fixed-height boxes, labels apart
    # from values: unfold every such box so each row is in view, at its label's height.
    page.evaluate("""[...document.querySelectorAll('body *')].forEach(e => {
        const s = getComputedStyle(e);
        if (s.overflowY !== 'visible' && e.scrollHeight > e.clientHeight + 1 && e !== document.body) {
          e.style.maxHeight = 'none'; e.style.height = 'auto'; e.style.overflowY = 'visible'; } })""")
    time.sleep(1)

    # Columns follow the run ids; read each row across them.
    columns = _row(page, "Run ID:", 2)
    assert sorted(columns) == sorted(ids), columns
    expected = [arms["jit"] if c == ids[0] else arms["off"] for c in columns]
    # each arm's run is named as the arm, and carries it: mode, precision, seed
    assert (
        _row(page, "Run Name:", 2)
        == [r.info.run_name for r in expected]
        == [f"pinn-{r.data.tags['xla']}-s0" for r in expected]
    )
    for tag in ("xla", "precision", "seed", "model", "rule"):
        assert _row(page, tag, 2) == [r.data.tags[tag] for r in expected], f"tag {tag}"
    # and its answer beside its training: quality on the test split (from the report) and
    # time to the quality target. MLflow renders the metrics table virtually (the rows in
    # its 300 px box, alphabetical): these sit at its top, above the system samples.
    for metric in ("amp_ssim", "phase_ssim", "quality_time_s", "compile_s", "final_val_loss", "step_median_s"):
        shown = [float(v) for v in _row(page, metric, 2)]
        actual = [r.data.metrics[metric] for r in expected]
        for s, a in zip(shown, actual, strict=True):
            assert abs(s - a) <= 1e-3 + 1e-3 * abs(a), f"{metric}: shown {shown}, stored {actual}"

    shot = page.screenshot(shots / "mlflow-compare-xla.png")
    print(f"\nscreenshot of the MLflow compare view: {shot}")
    _report_page_problems(page, mlflow_ui["base"])


def test_mlflow_experiment_opens_on_its_runs_with_its_description(mlflow_ui, runs, browser, shots):
    # The first click on the second address `make ui` prints: the experiment's runs in
    # MLflow's machine-learning mode, not the GenAI overview a fresh browser starts in
    # ("No data available"), with the experiment's description.
    page = browser.new_page(1600, 1200)
    assert mlflow_ui["printed"][1] == (
        f"{mlflow_ui['base']}/#/experiments/{runs['experiment_id']}/runs?workflowType=machine_learning"
    )
    page.goto(mlflow_ui["printed"][1])
    name = json.dumps(runs["parent"].info.run_name)
    page.wait_for(
        f"[...document.querySelectorAll('a')].some(a => a.innerText.trim() === {name})",
        timeout=120,
        message="the runs table with the parent run",
    )
    _close_assistant(page)
    text = page.evaluate("document.body.innerText")
    assert "No data available" not in text and "Does XLA make physics-informed ptychographic reconstruction" in text
    shot = page.screenshot(shots / "mlflow-first-click.png")
    print(f"\nscreenshot of the experiment's first page: {shot}")
    _report_page_problems(page, mlflow_ui["base"])


def test_mlflow_run_page_shows_a_trainings_dataset_model_and_system_metrics(mlflow_ui, smoke, runs, browser, shots):
    mlflow_ui = mlflow_ui["base"]
    """What a person looks for in a training run: the data it used (the Datasets column and
    box), the network it produced (an MLflow logged model, with its linked metrics) and
    what the machine did meanwhile (the System metrics tab)."""
    from mlflow.tracking import MlflowClient

    run = runs["pinn_train"]["off"]
    client = MlflowClient(f"sqlite:///{smoke / 'results' / 'mlflow.db'}")
    (model,) = [m for m in client.search_logged_models([runs["experiment_id"]]) if m.source_run_id == run.info.run_id]
    (dataset,) = run.inputs.dataset_inputs
    base = f"{mlflow_ui}/#/experiments/{runs['experiment_id']}"
    page = browser.new_page(1600, 2400)

    page.goto(f"{base}/runs/{run.info.run_id}")
    body = "document.body.innerText"
    page.wait_for(
        f"{body}.includes('Logged models') && {body}.includes({json.dumps(model.name)}) && "
        f"{body}.includes('Datasets') && {body}.includes({json.dumps(dataset.dataset.name)}) && "
        f"{body}.includes({json.dumps(dataset.dataset.digest[:12])}) && "
        f"{body}.includes('system/cpu_utilization_percentage')",
        timeout=120,
        message="the run page with its logged model, dataset and system metrics",
    )
    _close_assistant(page)
    shot = page.screenshot(shots / "mlflow-run.png")
    print(f"\nscreenshot of the training run page: {shot}")
    _report_page_problems(page, mlflow_ui)

    page.goto(f"{base}/runs/{run.info.run_id}/system-metrics")
    charts = ("cpu_utilization_percentage", "system_memory_usage_megabytes")
    page.wait_for(
        " && ".join(f"{body}.includes({json.dumps(c)})" for c in charts)
        + f" && {body}.includes({json.dumps(run.info.run_name)})",
        timeout=60,
        message="the system metrics charts of the run",
    )
    shot = page.screenshot(shots / "mlflow-system-metrics.png")
    print(f"screenshot of its system metrics: {shot}")

    page.goto(f"{base}/models/{model.model_id}")
    final = next(m for m in model.metrics if m.key == "final_val_loss")
    page.wait_for(
        f"{body}.includes('final_val_loss') && {body}.includes({json.dumps(run.info.run_name)}) && "
        f"{body}.includes({json.dumps(dataset.dataset.name)})",
        timeout=60,
        message="the logged model's page with its metrics, source run and dataset",
    )
    row = _row(page, "final_val_loss", 3)  # dataset, source run, value
    assert row[1] == run.info.run_name and abs(float(row[2]) - final.value) <= 1e-6 * abs(final.value), row
    shot = page.screenshot(shots / "mlflow-logged-model.png")
    print(f"screenshot of the logged model: {shot}")
    _report_page_problems(page, mlflow_ui)
