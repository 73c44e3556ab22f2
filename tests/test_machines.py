"""``ptycho machines``: the study's answers from runs on different machines, per machine kind.

No training: every run is the finished smoke study's ``reports/smoke/validation.json``
copied into ``tmp_path`` and edited (its machine, its time-to-quality and quality
comparisons, its config). The MLflow source is a SQLite store made in ``tmp_path`` with
MLflow's client: parent runs with the report attached as ``report/validation.json``.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from ptycho.cli import main
from ptycho.study.machines import sources, table

ROOT = Path(__file__).resolve().parent.parent
#: A finished smoke study's report (ptycho at 0eb835a, Intel Xeon with AMX; its bench record,
#: solver and the accuracy and gradients details dropped, which ``machines`` does not read):
#: the tests move it to other machines and edit its comparisons.
SMOKE = ROOT / "tests" / "data" / "smoke-validation.json"

INTEL = {"cpu": "Intel(R) Xeon(R) Processor", "cpu_flags": ["avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"]}
ZEN4 = {"cpu": "AMD EPYC 9R14 96-Core Processor", "cpu_flags": ["avx2", "avx512f", "avx512_bf16"]}
OLD = {"cpu": "Intel(R) Xeon(R) CPU E5-2680 v4", "cpu_flags": ["avx2"]}


@pytest.fixture(scope="module")
def smoke() -> dict:
    return json.loads(SMOKE.read_text())


# ------------------------------------------------------------------ building runs
def _ttq(mode: str, precision: str, ratio: float, low: float, high: float, **extra) -> dict:
    """A time-to-quality comparison of the PINN, as the speedup item records it (a mode vs
    off at the same precision, unless ``extra`` names another reference)."""
    return {
        "model": "pinn",
        "mode": mode,
        "precision": precision,
        "reference_mode": "off",
        "reference_precision": precision,
        "ratio": ratio,
        "low": low,
        "high": high,
        "upper_bound": False,
        "inconclusive": False,
        **extra,
    }


def _outcomes(amp: str = "INCONCLUSIVE", phase: str = "INCONCLUSIVE") -> dict:
    return {"amp_ssim": {"outcome": amp}, "phase_ssim": {"outcome": phase}}


def run(
    smoke: dict,
    machine: dict,
    *,
    jit: tuple | None = None,
    bf16: dict | None = None,
    generated: str = "2026-11-28T06:34:38+00:00",
    run_id: str = "",
    cores: int = 2,
) -> dict:
    """The smoke report on another ``machine``: ``jit`` replaces the jit-vs-off ratio at
    float32 (ratio, low, high[, extra fields]); ``bf16`` adds the PINN at bfloat16:
    ``{"jit": (...), "precision": (...), "quality": {key: outcomes}, "fp32": False}``
    (``fp32`` False: the PINN trained at bf16 only)."""
    r = copy.deepcopy(smoke)
    r["machine"] = {**r["machine"], **machine, "cores": cores, "gpus": 0}
    r["generated_utc"] = generated
    r["provenance"] = {**r["provenance"], "mlflow_run_id": run_id or r["provenance"]["mlflow_run_id"]}
    records = r["items"]["speedup"]["evidence"]["time_to_quality"]
    comparisons = r["items"]["quality"]["evidence"]["comparisons"]
    if jit is not None:
        ratio, low, high, *extra = jit
        records["pinn-jit"].update(ratio=ratio, low=low, high=high, **(extra[0] if extra else {}))
    if bf16 is not None:
        if not bf16.get("fp32", True):  # the PINN at bf16 only: no float32 arm, no float32 comparison
            del records["pinn-jit"], comparisons["pinn-jit"]
            for name in ("pinn-off-s0", "pinn-jit-s0"):
                r["arms"].pop(name)
        for name in ("pinn-off-bf16-s0", "pinn-jit-bf16-s0"):
            r["arms"][name] = copy.deepcopy(r["arms"]["baseline-off-s0"])
        ratio, low, high, *extra = bf16["jit"]
        records["pinn-jit-bf16"] = _ttq("jit", "mixed_bfloat16", ratio, low, high, **(extra[0] if extra else {}))
        comparisons["pinn-jit-bf16"] = _outcomes()
        if "precision" in bf16:
            ratio, low, high = bf16["precision"]
            records["pinn-off-bf16-vs-fp32"] = _ttq(
                "off", "mixed_bfloat16", ratio, low, high, reference_mode="off", reference_precision="float32"
            )
            comparisons["pinn-off-bf16-vs-fp32"] = _outcomes()
        for key, outcomes in bf16.get("quality", {}).items():
            comparisons[key] = outcomes
    return r


def report_folder(base: Path, name: str, record: dict) -> Path:
    """A folder holding ``validation.json`` (a published report folder)."""
    folder = base / name
    folder.mkdir(parents=True)
    (folder / "validation.json").write_text(json.dumps(record))
    return folder


def one(record: dict) -> table.Report:
    return table.report_of(record, "test", "test/validation.json")


def state(folder: Path) -> dict:
    """Every file and folder under ``folder``, each file with its bytes: what 'nothing written' compares."""
    return {p.relative_to(folder): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def cli(argv, capsys) -> tuple[int, str, str]:
    code = main(["machines", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


# ------------------------------------------------------------------ the table
def test_two_machine_kinds_give_one_row_each_with_their_own_ratios(smoke, tmp_path, capsys, monkeypatch):
    """Node A (Xeon, AMX): the smoke run as measured, jit 1.09x (0.99-1.25), not resolved.
    Node B (Zen 4), a results folder whose report the workflow published in its work
    folder: jit 1.30x (1.10-1.50), resolved, so jit is recommended there and only there."""
    monkeypatch.chdir(tmp_path)
    a = report_folder(tmp_path, "nodeA/reports/smoke", run(smoke, INTEL))
    work_b = tmp_path / "nodeB"
    b = run(smoke, ZEN4, jit=(1.30, 1.10, 1.50), generated="2026-11-29T10:00:00+00:00", run_id="b" * 32)
    (work_b / "results" / "smoke").mkdir(parents=True)
    config = {**b["config"], "presets": {}}  # config.json as the workflow wrote it (the report drops presets)
    (work_b / "results" / "smoke" / "config.json").write_text(json.dumps(config))
    from ptycho.tracking.provenance import config_hash

    b["provenance"]["config_hash"] = config_hash(config)
    report_folder(work_b, "reports/smoke", b)

    code, out, err = cli([a, work_b / "results", "--out", "t.md", "--json", "t.json"], capsys)
    assert code == 0 and err == ""
    record = json.loads((tmp_path / "t.json").read_text())
    assert [(r["machine"]["cpu"], r["precision"]) for r in record["rows"]] == [
        (ZEN4["cpu"], "float32"),
        (INTEL["cpu"], "float32"),
    ]
    zen, xeon = record["rows"]
    assert zen["source"] == str(work_b / "results") and zen["report"] == "nodeB/reports/smoke/validation.json"
    assert zen["machine"]["cpu_flags"] == ZEN4["cpu_flags"] and zen["config_hash"] == b["provenance"]["config_hash"]
    assert (zen["xla"][0]["ratio"], zen["xla"][0]["low"], zen["xla"][0]["high"]) == (1.30, 1.10, 1.50)
    assert zen["xla"][0]["outcome"] == "faster" and zen["recommended_mode"] == "jit"
    expected = smoke["items"]["speedup"]["evidence"]["time_to_quality"]["pinn-jit"]
    assert (xeon["xla"][0]["ratio"], xeon["xla"][0]["low"]) == (expected["ratio"], expected["low"])
    assert xeon["xla"][0]["outcome"] == "not resolved" and xeon["recommended_mode"] == "off"
    assert xeon["generated_utc"] == smoke["generated_utc"] and xeon["preset"] == "smoke"
    settings = {
        r["machine"]["cpu"]: (r["mode"], r["precision"], r["train_threads"], r["batch_size"])
        for r in record["recommendations"]
    }
    assert settings == {ZEN4["cpu"]: ("jit", "float32", 1, 8), INTEL["cpu"]: ("off", "float32", 1, 8)}
    # stdout is the Markdown table, and --out holds the same
    assert (tmp_path / "t.md").read_text() == out
    lines = [line for line in out.splitlines() if line.startswith("| AMD") or line.startswith("| Intel")]
    assert len(lines) == 4  # one row per kind, one setting per kind
    assert "jit 1.30x (1.10-1.50): faster" in lines[0] and "2026-11-29T10:00:00+00:00" in lines[0]
    assert "jit 1.09x (0.99-1.25): not resolved" in lines[1] and "off: XLA not shown faster here" in lines[1]
    assert "| smoke | 3fc16332c5fb74ce |" in lines[1]


def test_a_results_folder_without_a_published_report_reads_its_own_report_job_output(
    smoke, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    study = tmp_path / "elsewhere" / "results" / "smoke"
    (study / "report").mkdir(parents=True)
    (study / "config.json").write_text(json.dumps(smoke["config"]))
    (study / "report" / "validation.json").write_text(json.dumps(run(smoke, OLD)))
    code, out, err = cli([study], capsys)  # results/<preset> names one study
    assert code == 0 and err == "" and OLD["cpu"] in out


def test_the_same_run_read_twice_is_one_row(smoke, tmp_path):
    record = run(smoke, INTEL)
    a = report_folder(tmp_path, "a", record)
    b = report_folder(tmp_path, "b", record)
    assert len(sources.load([str(a), str(b / "validation.json")])) == 1


def test_an_upper_bound_is_never_shown_as_a_measured_ratio(smoke, tmp_path, capsys):
    """jit's only seed never reached the target: its 1.60x (1.20-2.00) is an upper bound,
    'not shown faster', never 'faster', and recommends nothing."""
    bound = run(smoke, ZEN4, jit=(1.60, 1.20, 2.00, {"upper_bound": True}))
    folder = report_folder(tmp_path, "zen", bound)
    code, out, err = cli([folder, "--json", tmp_path / "t.json"], capsys)
    assert code == 0 and err == ""
    row = json.loads((tmp_path / "t.json").read_text())["rows"][0]
    assert row["xla"][0]["outcome"] == "not shown faster" and not row["xla"][0]["resolved_faster"]
    assert row["xla"][0]["words"] == "jit <= 1.60x (upper bound): not shown faster"
    assert row["recommended_mode"] == "off" and row["recommended_mode_why"] == table.NOT_SHOWN
    assert "<= 1.60x (upper bound): not shown faster" in out
    assert "1.60x (1.20-2.00)" not in out and ": faster" not in out
    # a bound whose interval lies below 1 shows SLOWER, still as a bound
    slower = one(run(smoke, ZEN4, jit=(0.60, 0.50, 0.80, {"upper_bound": True}))).comparisons[0]
    assert slower.words() == "jit <= 0.60x (upper bound): SLOWER"


NOT_SHOWN = table.NOT_SHOWN
RECOMMENDATIONS = [
    # XLA resolved at fp32, its quality not DIFFERENT: jit at fp32
    pytest.param(
        {"jit": (1.30, 1.10, 1.50)},
        ("jit", "float32", True),
        "jit faster than off at fp32: 1.30x (1.10-1.50)",
        id="xla",
    ),
    # the lower end at 1 or below: not resolved, whatever the ratio
    pytest.param({"jit": (1.80, 0.95, 2.60)}, ("off", "float32", False), NOT_SHOWN, id="xla-unresolved"),
    # two seeds never reached the target: INCONCLUSIVE, never recommended
    pytest.param({"jit": (1.3, 1.1, 1.5, {"inconclusive": True})}, ("off", "float32", False), NOT_SHOWN, id="inconcl"),
    # faster, but its reconstructions are worse: not recommended
    pytest.param(
        {"jit": (1.30, 1.10, 1.50), "quality": {"pinn-jit": _outcomes("DIFFERENT", "EQUIVALENT")}},
        ("off", "float32", False),
        "jit faster but its quality DIFFERENT",
        id="faster-but-worse",
    ),
    # both axes resolved, each on its own: jit at bf16
    pytest.param(
        {"bf16": {"jit": (1.20, 1.05, 1.35), "precision": (1.40, 1.30, 1.50)}},
        ("jit", "mixed_bfloat16", True),
        "bf16 faster than fp32 with off (its own effect): 1.40x (1.30-1.50)",
        id="both-axes",
    ),
    # bf16 resolved, XLA at bf16 not: off at bf16
    pytest.param(
        {"bf16": {"jit": (1.02, 0.90, 1.15), "precision": (1.40, 1.30, 1.50)}},
        ("off", "mixed_bfloat16", True),
        NOT_SHOWN,
        id="precision-only",
    ),
    # XLA resolved at bf16, bf16 not vs fp32: float32, where jit is not resolved; jit's gain at
    # bf16 does not stand in for it
    pytest.param(
        {"bf16": {"jit": (1.50, 1.30, 1.70), "precision": (1.10, 0.90, 1.30)}},
        ("off", "float32", False),
        "bf16 not shown faster than fp32 here",
        id="xla-at-bf16-only",
    ),
    # the PINN at bf16 only (the default study): bf16, the only precision trained, and XLA
    # resolved there
    pytest.param(
        {"bf16": {"jit": (1.21, 1.11, 1.35), "fp32": False}},
        ("jit", "mixed_bfloat16", True),
        "jit faster than off at bf16: 1.21x (1.11-1.35); bf16: the only precision trained",
        id="bf16-only-study",
    ),
    # ... and XLA not resolved there: off at bf16, never an untrained float32
    pytest.param(
        {"bf16": {"jit": (1.10, 0.95, 1.25), "fp32": False}},
        ("off", "mixed_bfloat16", False),
        f"{NOT_SHOWN}; bf16: the only precision trained",
        id="bf16-only-study-unresolved",
    ),
]


@pytest.mark.parametrize("edits, setting, words", RECOMMENDATIONS)
def test_a_setting_is_recommended_only_where_the_measurement_resolved_it(smoke, edits, setting, words):
    edits = dict(edits)
    quality = edits.pop("quality", None)
    record = run(smoke, ZEN4, **edits)
    if quality:
        record["items"]["quality"]["evidence"]["comparisons"].update(quality)
    rec = table.recommend(one(record))
    assert (rec["mode"], rec["precision"], rec["resolved"]) == setting, rec["why"]
    assert words in rec["why"]
    assert (rec["mode"] == "off") == (NOT_SHOWN in rec["why"])
    assert (rec["train_threads"], rec["batch_size"]) == (1, 8)


def test_a_precisions_gain_never_stands_for_xlas(smoke):
    """bf16 vs fp32 is the precision's column, never the XLA column; every XLA ratio is a
    mode vs off at its own precision."""
    report = one(run(smoke, ZEN4, bf16={"jit": (1.02, 0.90, 1.15), "precision": (1.40, 1.30, 1.50)}))
    by_precision = {row.precision: row for row in table.rows([report])}
    assert list(by_precision) == ["float32", "mixed_bfloat16"]
    fp32, bf16 = by_precision["float32"], by_precision["mixed_bfloat16"]
    assert [(x.mode, x.precision, x.reference_mode, x.reference_precision) for x in bf16.xla] == [
        ("jit", "mixed_bfloat16", "off", "mixed_bfloat16")
    ]
    assert [x.words() for x in bf16.precision_effect] == ["bf16 vs fp32 (off) 1.40x (1.30-1.50): faster"]
    assert all(x.axis == "mode" for row in (fp32, bf16) for x in row.xla)
    assert fp32.precision_effect == () and bf16.choice == "off"
    cells = table.markdown([report])
    assert (
        "| bf16 | jit 1.02x (0.90-1.15): not resolved | bf16 vs fp32 (off) 1.40x (1.30-1.50): faster | "
        "jit: amp INCONCLUSIVE, phase INCONCLUSIVE; bf16 vs fp32 (off): amp INCONCLUSIVE, phase INCONCLUSIVE |"
    ) in cells


def test_a_ratio_is_shown_only_under_the_comparison_it_is_of(smoke):
    """A record keyed as jit vs off at bf16 that says it compared with float32 (two axes
    at once) is left out, not shown as XLA's effect."""
    record = run(smoke, ZEN4, bf16={"jit": (1.50, 1.30, 1.70, {"reference_precision": "float32"})})
    [bf16] = [row for row in table.rows([one(record)]) if row.precision == "mixed_bfloat16"]
    assert [c.words() for c in bf16.xla] == ["jit: not measured"] and bf16.choice == "off"


def test_the_machine_kind_is_cpu_flags_cores_and_gpus(smoke):
    a = one(run(smoke, INTEL, cores=2))
    b = one(run(smoke, INTEL, cores=8))
    c = one(run(smoke, {**INTEL, "load_average": [9.0, 9.0, 9.0], "tensorflow": "other"}, cores=2))
    assert a.kind != b.kind and a.kind == c.kind
    assert a.kind.words() == f"{INTEL['cpu']} ({', '.join(INTEL['cpu_flags'])}), 2 cores, no GPU"


def test_one_model_name_of_two_cpu_generations_is_two_kinds(smoke):
    """A virtual machine's model name is often its vendor's generic word: "AMD EPYC" for a
    Zen 4 (family 25) and a Zen 5 (family 26) alike. Their family and model numbers part
    them; a report made before they were recorded is a kind of its own, by its name."""
    epyc = {"cpu": "AMD EPYC", "cpu_flags": ZEN4["cpu_flags"]}
    zen4 = one(run(smoke, {**epyc, "cpu_id": "family 25 model 17"}))
    zen5 = one(run(smoke, {**epyc, "cpu_id": "family 26 model 2"}))
    older = one(run(smoke, epyc))
    assert len({zen4.kind, zen5.kind, older.kind}) == 3
    assert zen5.kind.words() == "AMD EPYC family 26 model 2 (avx2, avx512f, avx512_bf16), 2 cores, no GPU"
    assert (zen5.kind.cpu, zen5.kind.cpu_id) == ("AMD EPYC", "family 26 model 2")  # the record's own fields
    assert older.kind.words().startswith("AMD EPYC (avx2")


def test_machine_dependent_keys_may_differ_between_runs_of_one_study(smoke, tmp_path):
    a = run(smoke, INTEL)
    b = run(smoke, ZEN4, generated="2026-11-30T00:00:00+00:00")
    b["config"].update(precision=["mixed_bfloat16"], train_threads=4, results="runs/zen")
    b["config"]["bench"]["precision"] = ["float32", "mixed_bfloat16"]
    b["config"]["auto_precision"] = {"precision": "mixed_bfloat16", "reason": "this CPU has avx512_bf16"}
    folders = [report_folder(tmp_path, "a", a), report_folder(tmp_path, "b", b)]
    assert len(sources.load([str(f) for f in folders])) == 2


# ------------------------------------------------------------------ MLflow
@pytest.fixture(scope="module")
def store(smoke, tmp_path_factory) -> Path:
    """A results folder whose SQLite store (made by MLflow's client) holds: a FINISHED
    parent run with the Zen 4 report attached, a RUNNING parent and a FINISHED parent
    without one, and a child run carrying a report of its own (none of those three count)."""
    from mlflow.tracking import MlflowClient

    results = tmp_path_factory.mktemp("store") / "results"
    results.mkdir()
    uri = f"sqlite:///{results / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("xla-ptycho", artifact_location=str(results / "mlartifacts" / "xla-ptycho"))
    files = results.parent / "files"

    def with_report(run_id: str, record: dict) -> None:
        folder = files / run_id
        folder.mkdir(parents=True)
        (folder / "validation.json").write_text(json.dumps(record))
        client.log_artifact(run_id, str(folder / "validation.json"), "report")

    parent = client.create_run(exp, run_name="xla-ptycho-smoke", tags={"preset": "smoke"}).info.run_id
    with_report(parent, run(smoke, ZEN4, jit=(1.30, 1.10, 1.50), run_id=parent, generated="2026-11-29T00:00:00+00:00"))
    child = client.create_run(exp, tags={"mlflow.parentRunId": parent, "rule": "report"}).info.run_id
    with_report(child, run(smoke, OLD, run_id=child))
    client.set_terminated(child, "FINISHED")
    client.set_terminated(parent, "FINISHED")
    running = client.create_run(exp, run_name="still-running").info.run_id
    with_report(running, run(smoke, OLD, run_id=running))
    bare = client.create_run(exp, run_name="no-report").info.run_id
    client.set_terminated(bare, "FINISHED")
    shutil.rmtree(files)
    return results


def test_an_mlflow_store_gives_its_finished_parent_runs_reports(store, smoke, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{store / 'mlflow.db'}"
    before = state(store)
    node = report_folder(tmp_path, "node", run(smoke, INTEL))
    code, out, err = cli([uri, node, "--json", "t.json"], capsys)
    assert code == 0 and err == ""
    rows = json.loads((tmp_path / "t.json").read_text())["rows"]
    measured = smoke["items"]["speedup"]["evidence"]["time_to_quality"]["pinn-jit"]["ratio"]
    assert [(r["machine"]["cpu"], r["xla"][0]["ratio"]) for r in rows] == [
        (ZEN4["cpu"], 1.30),
        (INTEL["cpu"], measured),
    ]
    assert rows[0]["source"] == uri and rows[0]["mlflow_run_id"] in rows[0]["report"]
    assert f"{uri} (run {rows[0]['mlflow_run_id'][:12]})" in out
    # as a tracking server's: listed and downloaded through the client, not read beside the store
    monkeypatch.setattr("ptycho.tracking.access.store_home", lambda db: "")
    [(label, record)] = sources.store_reports(uri)
    assert label == f"{uri} run {rows[0]['mlflow_run_id']}" and record["machine"]["cpu"] == ZEN4["cpu"]
    assert state(store) == before  # read through MLflow's client, and not one byte written there


def test_a_store_moved_with_its_results_folder_is_read_where_it_is(store, smoke, tmp_path):
    """The store records its artifacts' absolute paths; a copy reads its own, not the original's."""
    moved = tmp_path / "copy" / "results"
    shutil.copytree(store, moved)
    [report] = [p for p in moved.glob("mlartifacts/*/*/artifacts/report/*.json") if ZEN4["cpu"] in p.read_text()]
    report.write_text(json.dumps(run(smoke, OLD)))
    [(label, record)] = sources.store_reports(f"sqlite:///{moved / 'mlflow.db'}")
    assert record["machine"]["cpu"] == OLD["cpu"] and label.startswith(f"sqlite:///{moved}")


# ------------------------------------------------------------------ bad inputs
def _setup_bad(kind: str, smoke: dict, d: Path, store: Path) -> list[str]:
    """The sources of one bad input, made in ``d`` (a store: a copy of ``store``'s database)."""
    if kind == "missing":
        return ["nowhere"]
    if kind == "empty-folder":
        (d / "results").mkdir()
        return ["results"]
    if kind == "results-without-report":
        (d / "results" / "default").mkdir(parents=True)
        (d / "results" / "default" / "config.json").write_text(json.dumps(smoke["config"]))
        return ["results"]
    if kind == "truncated-json":
        text = json.dumps(smoke)
        (d / "validation.json").write_text(text[: len(text) // 2])
        return ["validation.json"]
    if kind == "not-a-report":
        (d / "validation.json").write_text(json.dumps({"verdict": "PASS"}))
        return ["validation.json"]
    if kind == "malformed":
        broken = copy.deepcopy(smoke)
        broken["items"]["speedup"]["evidence"]["time_to_quality"] = ["not", "a", "mapping"]
        (d / "validation.json").write_text(json.dumps(broken))
        return ["validation.json"]
    if kind == "old-schema":
        (d / "validation.json").write_text(json.dumps({**smoke, "schema_version": 1}))
        return ["validation.json"]
    if kind in ("different-training", "different-presets", "unknown-preset"):
        a, b = run(smoke, INTEL), run(smoke, ZEN4, generated="2026-11-30T00:00:00+00:00", run_id="b" * 32)
        if kind == "different-training":
            b["config"]["train"]["epochs"] = 20
        else:
            b["config"]["preset"] = b["provenance"]["preset"] = "default"
        report_folder(d, "a", a)
        report_folder(d, "b", b)
        return ["a", "b", *(["--preset", "paper"] if kind == "unknown-preset" else [])]
    if kind == "unreachable-server":
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        return [f"http://127.0.0.1:{port}"]
    if kind == "missing-store":
        return ["sqlite:///results/mlflow.db"]
    if kind == "not-a-store":
        import sqlite3

        sqlite3.connect(d / "other.db").execute("CREATE TABLE t (x)").connection.commit()
        return [f"sqlite:///{d / 'other.db'}"]
    if kind in ("empty-store", "older-store"):  # its runs' artifacts left behind: no report attached here
        import sqlite3

        shutil.copy(store / "mlflow.db", d / "mlflow.db")
        if kind == "older-store":  # MLflow's client would migrate it: refused before it opens it
            sqlite3.connect(d / "mlflow.db").execute(
                "UPDATE alembic_version SET version_num = 'older'"
            ).connection.commit()
        return [f"sqlite:///{d / 'mlflow.db'}"]
    if kind == "other-uri":
        return ["s3://bucket/results"]
    raise AssertionError(kind)


BAD = [
    ("missing", 2, "nowhere: no such file or folder; name a results folder"),
    ("empty-folder", 1, "results holds no finished study report; run the study there first (make all)"),
    ("results-without-report", 1, "results holds no finished study report; run the study there first (make all)"),
    ("truncated-json", 1, "validation.json: not valid JSON"),
    ("not-a-report", 1, "validation.json: not a validation report of this ptycho (no schema_version)"),
    ("malformed", 1, "validation.json: not a validation report of this ptycho (AttributeError: 'list' object"),
    ("old-schema", 1, "a validation report of schema version 1, this ptycho reads version 2"),
    ("different-training", 2, "are runs of different studies (train.epochs of pinn = 2 vs 20)"),
    ("different-presets", 2, "are runs of different studies (preset = smoke vs default)"),
    ("unknown-preset", 2, "--preset paper: none of the sources holds a report of it (they hold: default, smoke)"),
    ("unreachable-server", 1, "is unreachable"),
    ("missing-store", 2, "sqlite:///results/mlflow.db: no such MLflow store"),
    ("not-a-store", 1, "not an MLflow store this ptycho reads (no such table: alembic_version)"),
    ("older-store", 1, "an MLflow store of another MLflow's schema (older); read it with the MLflow that made it"),
    ("empty-store", 1, "holds no finished study report (no FINISHED parent run with report/validation.json attached)"),
    ("other-uri", 2, "s3://bucket/results: not a tracking URI this command reads"),
]


@pytest.mark.parametrize("kind, code, message", BAD, ids=[b[0] for b in BAD])
def test_each_bad_input_is_one_line_and_writes_nothing(
    kind, code, message, smoke, store, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    argv = _setup_bad(kind, smoke, tmp_path, store)
    before = state(tmp_path)
    got, out, err = cli([*argv, "--out", "t.md", "--json", "t.json"], capsys)
    assert got == code, err
    assert err.count("\n") == 1 and err.startswith("ptycho machines: error: "), err
    assert message in err, err
    if kind == "different-presets":
        assert err.rstrip().endswith(": choose one with --preset")
    assert out == ""
    assert state(tmp_path) == before  # no table, no temporary file, no store created or changed


def test_a_preset_chooses_one_study_among_several(smoke, tmp_path):
    a, b = run(smoke, INTEL), run(smoke, ZEN4, generated="2026-11-30T00:00:00+00:00", run_id="b" * 32)
    b["config"]["preset"] = b["provenance"]["preset"] = "default"
    folders = [str(report_folder(tmp_path, "a", a)), str(report_folder(tmp_path, "b", b))]
    [chosen] = sources.load(folders, preset="default")
    assert chosen.kind.cpu == ZEN4["cpu"]
