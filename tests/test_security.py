"""Security: where servers listen, what reaches a shell, what is deserialised, where
outputs may go. (Refusals a user meets are rows of ``tests/test_bad_inputs.py``.)"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from ptycho.errors import ConfigError
from ptycho.study.workflow import check_shell_safe, cli_flags, load_schema, resolve, results_folder

ROOT = Path(__file__).resolve().parent.parent
PAYLOADS = ["a b", "x;touch {f}", "$(touch {f})", "`touch {f}`", "x|touch {f}", "x&&touch {f}", "x>{f}", "'x'"]


# ------------------------------------------------------------------ servers: 127.0.0.1
@pytest.fixture
def fake_venv(tmp_path) -> Path:
    """A venv whose ``mlflow`` prints its arguments: the Makefile's real recipes, run by
    make and bash, show where the server would listen without starting one."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    mlflow = venv / "bin" / "mlflow"
    mlflow.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    mlflow.chmod(0o755)
    (venv / "bin" / "python").symlink_to(mlflow)  # `make ui` runs `python -m ptycho track ui`
    (venv / ".installed").touch()
    return venv


def _make(target: str, venv: Path, **env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    proc = subprocess.run(
        ["make", "-s", "-o", f"{venv}/.installed", target, f"VENV={venv}", f"STAMP={venv}/.installed"],
        cwd=ROOT,
        env=dict(clean, **env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def _host(args: list[str]) -> str:
    return args[args.index("--host") + 1]


def test_make_servers_listen_on_loopback_unless_asked(fake_venv):
    assert _host(_make("mlflow-server", fake_venv)) == "127.0.0.1"
    # `make ui` is `ptycho track ui`, which serves on 127.0.0.1 only (the scan below reads it)
    assert _make("ui", fake_venv) == ["-m", "ptycho", "track", "ui", "results", "--port", "5000"]


def test_make_mlflow_server_listens_everywhere_only_when_asked(fake_venv):
    assert _host(_make("mlflow-server", fake_venv, MLFLOW_HOST="0.0.0.0")) == "0.0.0.0"


def test_servers_started_by_tests_and_package_bind_loopback():
    """Every listening socket the package or a test helper opens names 127.0.0.1; the one
    exception is the test of the cluster recipe, which asks for 0.0.0.0 on purpose."""
    binds = re.compile(r"""(\.bind\(\(|HTTPServer\(\(|"--host",\s*)["']?([^"',)]+)""")
    found = []
    for path in [*ROOT.glob("ptycho/**/*.py"), *ROOT.glob("tests/*.py")]:
        if path.name == Path(__file__).name:
            continue
        for match in binds.finditer(path.read_text()):
            found.append((path.name, match.group(2)))
    assert found, "the pattern no longer finds the servers"
    assert {host for _, host in found} == {"127.0.0.1"}, found
    asked = [
        p.name
        for p in ROOT.glob("tests/*.py")
        if 'MLFLOW_HOST="0.0.0.0"' in p.read_text() and p.name != Path(__file__).name
    ]
    assert asked == ["test_cluster.py"]


# --------------------------------------------------------------- no shell injection
def test_every_free_string_of_the_schema_is_an_enum_or_a_safe_pattern():
    """Strings reach the rules' shell commands: the schema itself admits no shell syntax."""

    def strings(node, path=""):
        if isinstance(node, dict):
            if node.get("type") == "string":
                yield path, node
            for key, sub in node.get("properties", {}).items():
                yield from strings(sub, f"{path}.{key}".lstrip("."))
            if isinstance(node.get("items"), dict):
                yield from strings(node["items"], path + "[]")

    found = dict(strings(load_schema()))
    assert "results" in found and "study" in found
    for path, spec in found.items():
        safe = r"\^(\[A-Za-z0-9\])?\[A-Za-z0-9[_@%+=:,./-]*\][+*]\$"  # ^[A-Za-z0-9...]+$, or a first character then *
        assert "enum" in spec or re.fullmatch(safe, spec.get("pattern", "")), path


@pytest.mark.parametrize("payload", PAYLOADS)
def test_shell_syntax_in_any_config_string_is_refused(payload, tmp_path):
    value = payload.format(f=tmp_path / "pwned")
    with pytest.raises(ConfigError, match=r"config key 'simulation.note' = .* has characters a shell would interpret"):
        check_shell_safe({"simulation": {"note": value}, "presets": {"x": {"note": value}}})
    base = yaml.safe_load((ROOT / "config.yaml").read_text())
    with pytest.raises(ConfigError, match="config key 'results'"):
        resolve(base, {"results": value})
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("payload", PAYLOADS)
def test_flags_are_quoted_so_a_shell_passes_values_through_and_runs_nothing(payload, tmp_path):
    """``flags()`` of rules/common.smk, run by a real shell: each value arrives whole."""
    value = payload.format(f=tmp_path / "pwned")
    line = cli_flags({"object_kind": value, "gridsize": 2, "trainable_scale": True})
    proc = subprocess.run(["bash", "-c", f"printf '%s\\n' {line}"], capture_output=True, text=True, timeout=30)
    assert proc.stdout.splitlines() == ["--object-kind", value, "--gridsize", "2", "--trainable-scale", "true"]
    assert not (tmp_path / "pwned").exists()
    assert shlex.split(line)[1] == value


def test_the_workflow_quotes_flags_and_runs_the_checks_while_parsed():
    """rules/common.smk builds ``flags()`` with :func:`cli_flags` and validates through
    :func:`parse_time_checks` (which refuses shell syntax in every config string)."""
    common = (ROOT / "rules" / "common.smk").read_text()
    assert "cli_flags(CFG[section])" in common and "parse_time_checks(" in common


# --------------------------------------------------------- no unsafe deserialisation
UNSAFE = [
    (r"yaml\.load\(", "yaml.load (use yaml.safe_load)"),
    (r"yaml\.(unsafe_load|full_load|Loader|UnsafeLoader|FullLoader)\b", "an unsafe YAML loader"),
    (r"^\s*(import|from)\s+(pickle|dill|cloudpickle|joblib|shelve|marshal)\b", "a pickle-like module"),
    (r"allow_pickle\s*=\s*True", "allow_pickle=True"),
    (r"safe_mode\s*=\s*False", "Keras safe_mode=False"),
    (r"\beval\(|\bexec\(", "eval/exec"),
]


def _sources() -> list[Path]:
    return [*ROOT.glob("ptycho/**/*.py"), *ROOT.glob("rules/*.smk"), ROOT / "Snakefile"]


@pytest.mark.parametrize(("pattern", "what"), UNSAFE, ids=[w for _, w in UNSAFE])
def test_no_unsafe_deserialisation_in_the_package_the_workflow_or_the_tests(pattern, what):
    tests = [p for p in ROOT.glob("tests/*.py") if p.name != Path(__file__).name]
    hits = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in [*_sources(), *tests]
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(pattern, line, re.MULTILINE)
    ]
    assert hits == [], f"{what} at {hits}"


def test_every_npz_and_keras_load_is_the_safe_one():
    text = {p: p.read_text() for p in _sources()}
    np_loads = [(p.name, m) for p, t in text.items() for m in re.findall(r"np\.load\([^)]*\)", t)]
    assert np_loads and all("allow_pickle=False" in call for _, call in np_loads), np_loads
    keras_loads = [(p.name, m) for p, t in text.items() for m in re.findall(r"load_model\([^)]*\)", t)]
    assert keras_loads and all("safe_mode=True" in call for _, call in keras_loads), keras_loads


def test_a_pickled_artefact_is_refused_not_unpickled(tmp_path):
    import numpy as np

    from ptycho.artifacts import read_arrays
    from ptycho.errors import PtychoError

    np.savez(tmp_path / "r.npz", patches=np.array([{"a": 1}], dtype=object))
    with pytest.raises(PtychoError, match="not a readable .npz artefact"):
        read_arrays(tmp_path / "r.npz", ("patches",))


# ----------------------------------------------------------- outputs stay inside
@pytest.mark.parametrize("results", ["results", "./out/../results", "deep/er/results", "{work}/results", "."])
def test_results_inside_the_work_folder_are_accepted(results, tmp_path):
    cfg = {"results": results.format(work=tmp_path), "allow_results_outside": False}
    folder = results_folder(cfg, tmp_path)
    assert folder == tmp_path or tmp_path in folder.parents


@pytest.mark.parametrize("results", ["..", "../sibling", "/etc", "/tmp", "results/../../x", "~/results"])
def test_results_outside_the_work_folder_need_the_opt_in(results, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(ConfigError, match="is outside the work folder .*allow_results_outside: true"):
        results_folder({"results": results}, work)
    assert results_folder({"results": results, "allow_results_outside": True}, work).is_absolute()


def test_the_opt_in_is_a_documented_schema_key(tmp_path):
    spec = load_schema()["properties"]["allow_results_outside"]
    assert spec["type"] == "boolean" and spec["default"] is False
    base = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg = resolve(base, {"results": "/tmp/elsewhere", "allow_results_outside": "true"})
    assert cfg["allow_results_outside"] is True
