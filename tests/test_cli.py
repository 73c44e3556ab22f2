"""Configuration objects and the command line (``python -m ptycho ...``): one-line errors,
exit codes, no TensorFlow for help/simulate/inspect, end-to-end simulate -> inspect."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from ptycho.cli import main
from ptycho.config import SimulationConfig, from_dict, to_dict, to_json
from ptycho.errors import ConfigError, DatasetError, PtychoError
from ptycho.nets.xla import REFERENCE

STUDY_CONFIG = str(Path(__file__).resolve().parent.parent / "config.yaml")

SMALL_FLAGS = (
    "--n", "16", "--object-size", "48", "--n-lines", "50", "--stride-test", "8",
    "--nphotons", "1e6", "--seed", "3", "--quiet",
)  # fmt: skip


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


# ----------------------------------------------------------------------- config
def test_config_defaults_are_the_documented_study_defaults():
    cfg = SimulationConfig()
    assert (cfg.n, cfg.gridsize, cfg.stride_train, cfg.stride_test, cfg.spacing) == (64, 2, 4, 10, 4)
    assert cfg.object_kind == "lines" and cfg.phase_kind == "lines" and cfg.channels == 4
    assert cfg.effective_probe_radius == 11.0


def test_config_unknown_key_names_the_key():
    with pytest.raises(ConfigError, match="unknown config key 'nphoton'") as info:
        from_dict(SimulationConfig, {"nphoton": 1e6})
    assert "nphotons" in str(info.value)  # the allowed keys are listed


def test_config_unknown_key_names_the_section():
    with pytest.raises(ConfigError, match="unknown config key 'simulation.bogus'"):
        from_dict(SimulationConfig, {"bogus": 1}, section="simulation")


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("n", "64", "str"),
        ("n", 64.0, "float"),
        ("object_kind", 3, "int"),
        ("seed", True, "bool"),
        ("nphotons", "1e6", "str"),
    ],
)
def test_config_wrong_type_names_the_key(key, value, expected):
    with pytest.raises(ConfigError, match=f"config key '{key}' = .* has type {expected}"):
        from_dict(SimulationConfig, {key: value})


def test_config_int_is_accepted_for_float_key():
    cfg = from_dict(SimulationConfig, {"nphotons": 1000})
    assert cfg.nphotons == 1000.0 and isinstance(cfg.nphotons, float)


@pytest.mark.parametrize(
    "values, fragment",
    [
        ({"gridsize": 3}, "config key 'gridsize'"),
        ({"n": 63}, "config key 'n' = 63 must be even"),
        ({"n": 4}, "config key 'n' = 4 is out of range"),
        ({"nphotons": 0.5}, "config key 'nphotons'"),
        ({"object_kind": "stripes"}, "config key 'object_kind' = 'stripes' is not allowed"),
        ({"probe_kind": "airy"}, "config key 'probe_kind'"),
        ({"amplitude_floor": 1.0}, "config key 'amplitude_floor'"),
        ({"object_size": 60, "n": 64}, "config key 'object_size' = 60 is too small"),
    ],
)
def test_config_bad_value_names_the_key(values, fragment):
    with pytest.raises(ConfigError) as info:
        from_dict(SimulationConfig, values)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_config_is_immutable_and_json_roundtrips():
    cfg = SimulationConfig(n=32, object_size=80, seed=9)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.n = 16  # type: ignore[misc]
    assert from_dict(SimulationConfig, json.loads(to_json(cfg))) == cfg
    assert to_dict(cfg)["phase_range"] == math.pi
    assert to_json(cfg) == to_json(SimulationConfig(n=32, object_size=80, seed=9))


def test_errors_are_single_line_with_exit_codes():
    with pytest.raises(ValueError, match="single line"):
        PtychoError("two\nlines")
    assert ConfigError.exit_code == 2 and DatasetError.exit_code == 1


# ------------------------------------------------------------- help, no TF
def test_build_parser_does_not_import_tensorflow():
    code = (
        "import sys, ptycho.cli; ptycho.cli.build_parser(); "
        "bad = [m for m in ('tensorflow', 'keras', 'mlflow', 'matplotlib', 'scipy') if m in sys.modules]; "
        "assert not bad, bad"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("args", [("--help",), ("simulate", "--help"), ("inspect", "--help")])
def test_help_succeeds_without_importing_tensorflow(cli, args):
    proc = cli(*args, python_flags=("-X", "importtime"))
    assert proc.returncode == 0, proc.stderr
    assert "usage: ptycho" in proc.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line]
    assert imported, "-X importtime produced no report"
    # nor SciPy (0.25 s of ndimage, pulled in by the simulation module: help answered in 4-5 s under load)
    assert not [m for m in imported if m.split(".")[0] in ("tensorflow", "keras", "mlflow", "scipy")]


def test_simulate_help_lists_every_config_key(cli):
    out = cli("simulate", "--help").stdout
    for f in dataclasses.fields(SimulationConfig):
        assert "--" + f.name.replace("_", "-") in out


def test_version(cli):
    proc = cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip().startswith("ptycho ")


# ------------------------------------------------------------ argument errors
@pytest.mark.parametrize(
    "args, fragment",
    [
        (("simulate", "--train", "a.h5", "--test", "b.h5", "--n", "abc"), "argument --n: invalid int value: 'abc'"),
        (("simulate", "--train", "a.h5", "--test", "b.h5", "--bogus", "1"), "unrecognized arguments: --bogus"),
        (("simulate", "--train", "a.h5"), "the following arguments are required: --test"),
        (("frobnicate",), "invalid choice: 'frobnicate'"),
        ((), "the following arguments are required: command"),
    ],
    ids=["bad_int", "unknown_option", "missing_required", "unknown_command", "no_command"],
)
def test_bad_argument_exits_2_with_one_stderr_line(cli, tmp_path, args, fragment):
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 2
    line = _one_error_line(proc)
    assert line.startswith("ptycho") and "error:" in line and fragment in line
    assert list(tmp_path.iterdir()) == []


def test_bad_config_value_exits_2_naming_the_key(cli, tmp_path):
    proc = cli("simulate", "--train", "a.h5", "--test", "b.h5", "--gridsize", "3", cwd=tmp_path)
    assert proc.returncode == 2
    line = _one_error_line(proc)
    assert line.startswith("ptycho simulate: error: config key 'gridsize'")
    assert list(tmp_path.iterdir()) == []


def test_yaml_config_unknown_key_exits_2_naming_the_key(cli, tmp_path):
    (tmp_path / "cfg.yaml").write_text("simulation:\n  n: 16\n  nphoton: 1000\n")
    proc = cli("simulate", "--train", "a.h5", "--test", "b.h5", "--config", "cfg.yaml", cwd=tmp_path)
    assert proc.returncode == 2
    assert "unknown config key 'nphoton'" in _one_error_line(proc)


def test_yaml_config_unreadable_or_invalid_is_one_line_config_error(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("simulation: [unclosed\n")
    for cfg_file, fragment in ((tmp_path / "bad.yaml", "not valid YAML"), (tmp_path / "none.yaml", "cannot read")):
        code = main(["simulate", "--train", str(tmp_path / "a.h5"), "--test", str(tmp_path / "b.h5"),
                     "--config", str(cfg_file)])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and fragment in err and err.count("\n") == 1


# ---------------------------------------------------------------- end to end
def test_simulate_end_to_end_writes_both_files_which_inspect_validates(cli, tmp_path):
    (tmp_path / "cfg.yaml").write_text("simulation:\n  gridsize: 1\n  probe_kind: defocused\n")
    proc = cli("simulate", "--train", "out/train.h5", "--test", "out/test.h5", "--config", "cfg.yaml",
               *SMALL_FLAGS, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("train: out/train.h5") and "test: out/test.h5" in proc.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["test.h5", "train.h5"]

    from ptycho.data.dataset import read_dataset

    train = read_dataset(tmp_path / "out" / "train.h5")
    test = read_dataset(tmp_path / "out" / "test.h5")
    cfg = from_dict(SimulationConfig, json.loads(train.attrs["config"]))  # the config it records
    # flags and the YAML file both reached the config; the flags win where both are set
    assert (cfg.n, cfg.gridsize, cfg.probe_kind, cfg.seed, cfg.nphotons) == (16, 1, "defocused", 3, 1e6)
    assert train.scale == test.scale and train.attrs["digest"][:16] in proc.stdout

    for split, ds in (("train", train), ("test", test)):
        insp = cli("inspect", f"out/{split}.h5", cwd=tmp_path)
        assert insp.returncode == 0, insp.stderr
        assert insp.stdout.startswith(f"out/{split}.h5: valid ptycho dataset (schema 1, sha256 {ds.attrs['digest']})")
        info = json.loads(cli("inspect", "--json", f"out/{split}.h5", cwd=tmp_path).stdout)
        assert info["digest"] == ds.attrs["digest"]
        assert info["shapes"]["diffraction"] == list(ds.diffraction.shape)
        assert info["config"]["probe_kind"] == "defocused"
    assert abs(json.loads(cli("inspect", "--json", "out/train.h5", cwd=tmp_path).stdout)
               ["counts_per_pattern"]["mean"] / 1e6 - 1) < 0.01  # fmt: skip


def test_simulate_in_process_matches_library(tmp_path, small_cfg, pair, capsys):
    flags = ["--n", "16", "--object-size", "48", "--n-lines", "50", "--stride-test", "8", "--nphotons", "1e6",
             "--seed", "1", "--n-objects-train", "1", "--probe-kind", "disk", "--quiet"]  # fmt: skip
    code = main(["simulate", "--train", str(tmp_path / "tr.h5"), "--test", str(tmp_path / "te.h5"), *flags])
    assert code == 0
    from ptycho.data.dataset import content_digest, read_dataset

    for name, split in (("tr.h5", "train"), ("te.h5", "test")):
        ds = pair[split]
        assert read_dataset(tmp_path / name).attrs["digest"] == content_digest(ds.arrays(), ds.scale, ds.units)
    assert "train:" in capsys.readouterr().out


def test_output_into_a_closed_pipe_stops_quietly(tmp_path, pair):
    """``ptycho inspect f.h5 | head -1``: no traceback when the reader has gone."""
    import os

    from ptycho.data.dataset import write_dataset

    write_dataset(tmp_path / "d.h5", pair["train"])
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write now fails with EPIPE
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "ptycho", "inspect", str(tmp_path / "d.h5")],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 1 and proc.stderr == ""


# ---------------------------------------------------------- inspect failures
def test_inspect_malformed_file_exits_nonzero_with_one_line(cli, corrupted):
    path, fragment = corrupted
    proc = cli("inspect", str(path))
    assert proc.returncode == 1
    line = _one_error_line(proc)
    assert line.startswith(f"ptycho inspect: error: {path}")
    assert fragment in line
    assert proc.stdout == ""


def test_inspect_missing_file_exits_1_with_hint(cli, tmp_path):
    proc = cli("inspect", "absent.h5", cwd=tmp_path)
    assert proc.returncode == 1
    assert _one_error_line(proc) == (
        "ptycho inspect: error: absent.h5: no such file; create it with 'python -m ptycho simulate'"
    )


# ------------------------------------------------------------------ NPZ commands
# (a pickled NPZ refused by import-npz is a row of tests/test_bad_inputs.py)
def test_export_then_import_npz_via_cli(files, tmp_path, capsys):
    from ptycho.data.dataset import read_dataset

    assert main(["export-npz", str(files["train"]), "--out", str(tmp_path / "d.npz")]) == 0
    assert main(["import-npz", str(tmp_path / "d.npz"), "--out", str(tmp_path / "d.h5"), "--gridsize", "2"]) == 0
    back, orig = read_dataset(tmp_path / "d.h5"), read_dataset(files["train"])
    assert back.units == "sqrt_counts" and back.gridsize == 2
    assert back.diffraction.shape == orig.diffraction.shape
    assert "imported 81 patterns" in capsys.readouterr().out


def test_a_job_returns_what_it_logs_as_a_record(tmp_path):
    # What `ptycho simulate --mlflow-parent` sends to MLflow, read without any run.
    from ptycho.study import jobs

    cfg = SimulationConfig(n=16, object_size=40, gridsize=1, nphotons=1e6)
    record = jobs.simulate(cfg, str(tmp_path / "train.h5"), str(tmp_path / "test.h5"), progress=False)
    assert [(d.name, d.split, len(d.digest)) for d in record.datasets] == [
        ("train.h5", "train", 64),
        ("test.h5", "test", 64),
    ]
    assert record.params["simulation.n"] == 16 and record.params["simulation.nphotons"] == 1e6
    assert record.metrics["train_patterns"] > 0 and record.metrics["test_groups"] > 0 and record.metrics["scale"] > 0
    assert record.summary.splitlines()[0].startswith(f"train: {tmp_path / 'train.h5'}")
    assert not record.failure and record.model is None and not record.nested


# ------------------------------------------------------------------ declarations
def _argv_for(spec, output: str, unwritable: str) -> list[str]:
    """The shortest command line of ``spec`` that parses, with ``unwritable`` as output
    ``output`` and every other required argument a placeholder (never read: the outputs
    are probed before a command does any work)."""
    from ptycho.cli.declare import Arg

    argv = [spec.name]
    for a in spec.arguments:
        if not isinstance(a, Arg):
            continue
        positional = not a.flags[0].startswith("-")
        if a.flags[0] == output:
            argv += [a.flags[0], unwritable]
        elif positional or a.options.get("required"):
            choices = a.options.get("choices")
            value = str(next(iter(choices))) if choices else "1"
            argv += [value] if positional else [a.flags[0], value]
    return argv


def _declared_outputs() -> list[tuple[str, str]]:
    from ptycho.cli import COMMANDS

    return [(name, flag) for name, spec in COMMANDS.items() for _, flag, _ in spec.outputs()]


def test_the_outputs_are_declared_where_the_commands_are():
    # What the old _OUTPUTS table listed, now read from the declarations.
    from ptycho.cli import COMMANDS

    outputs = {name: [(attr, flag, folder) for attr, flag, folder in spec.outputs()] for name, spec in COMMANDS.items()}
    assert outputs["simulate"] == [("train", "--train", False), ("test", "--test", False)]
    assert outputs["train"] == [("out", "--out", True)]
    assert outputs["solve"] == [
        ("out", "--out", False),
        ("stitched_dir", "--stitched-dir", True),
        ("products_dir", "--products-dir", True),
    ]
    assert outputs["evaluate"] == [("out", "--out", False), ("product_dir", "--product-dir", True)]
    assert outputs["figures"] == outputs["report"] == [("out_dir", "--out-dir", True)]
    assert outputs["inspect"] == []
    # every --out / --out-dir a command has is declared as an output
    for name, spec in COMMANDS.items():
        flags = {f for a in spec.arguments for f in getattr(a, "flags", ())}
        assert {f for f in flags if f in ("--out", "--out-dir")} <= {flag for _, flag, _ in spec.outputs()}, name


@pytest.mark.parametrize("command, flag", _declared_outputs(), ids=lambda x: x)
def test_every_declared_output_is_probed_before_any_work(command, flag, tmp_path, capsys, monkeypatch):
    from ptycho.cli import COMMANDS

    monkeypatch.chdir(tmp_path)
    unwritable = "/proc/forbidden/out"
    code = main(_argv_for(COMMANDS[command], flag, unwritable))
    err = capsys.readouterr().err
    assert code == 2, err
    assert err == f"ptycho {command}: error: cannot write {flag} {unwritable} (No such file or directory); " \
        "choose a writable path\n"  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_writable_problem_says_why_and_creates_nothing(tmp_path):
    from ptycho.artifacts import writable_problem

    (tmp_path / "f.txt").write_text("x")
    (tmp_path / "d").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "gone" / "x")
    before = sorted(tmp_path.iterdir())
    assert writable_problem(tmp_path / "new" / "deeper" / "a.json") is None
    assert writable_problem(tmp_path / "new", folder=True) is None
    assert writable_problem(tmp_path / "d", folder=True) is None
    assert writable_problem(tmp_path / "d") == "Is a directory"
    assert writable_problem(tmp_path / "f.txt", folder=True) == "it is a file, not a folder"
    assert writable_problem(tmp_path / "f.txt" / "a.json") == f"{tmp_path / 'f.txt'} is not a folder"
    assert writable_problem(tmp_path / "dangling" / "a.json") is None  # the write will say it
    assert writable_problem("/proc/forbidden.h5") == "No such file or directory"
    assert sorted(tmp_path.iterdir()) == before


def test_every_command_is_declared_once_with_its_function():
    from ptycho.cli import COMMANDS, build_parser
    from ptycho.cli.declare import arg, command

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert list(sub.choices) == list(COMMANDS)
    with pytest.raises(ValueError, match="declared twice"):
        command("inspect", "again")(lambda args, live: None)
    with pytest.raises(ValueError, match="output must be"):
        arg("--out", output="file")


def test_check_offers_the_checklist_and_knows_which_items_run_tensorflow():
    from ptycho.cli import COMMANDS, build_parser
    from ptycho.study import checklist

    parser = build_parser()
    spec = COMMANDS["check"]
    for name in checklist.names():
        args = parser.parse_args(["check", name, "--threshold", "1", "--out", "x.json"])
        assert spec.uses_tensorflow(args) == checklist.get(name).measures
        assert args.context == checklist.Inputs.context and args.loss == checklist.Inputs.loss


# ---------------------------------------------------------------------- bench
@pytest.fixture
def bench_calls(monkeypatch):
    """``jobs.bench``'s arguments, instead of timing anything."""
    from ptycho.study import jobs
    from ptycho.tracking.record import JobRecord

    calls = []

    def fake(dataset, model_jsons, models, train_cfg, modes, config, out, *, precisions=(), sim=None):
        calls.append(dict(dataset=dataset, like=model_jsons, models=models, train=train_cfg, modes=modes,
                          precisions=precisions, config=config, out=out, sim=sim))  # fmt: skip
        return JobRecord()

    monkeypatch.setattr(jobs, "bench", fake)
    return calls


def test_bench_reads_the_studys_config_like_scaling(bench_calls):
    from ptycho.cli.values import study_config
    from ptycho.study import workflow
    from ptycho.study.bench import BenchConfig

    assert main(["bench", "--config", STUDY_CONFIG, "--preset", "smoke"]) == 0
    (call,) = bench_calls
    cfg = study_config(STUDY_CONFIG, "smoke")
    models, modes, precisions = workflow.bench_lists(cfg)  # the smoke preset's: the PINN, off and jit, float32
    assert call["models"] == [workflow.model_config(cfg, k) for k in models] and models == ["pinn"]
    assert call["train"] == workflow.train_config(cfg, REFERENCE, 0, models[0])
    assert list(call["modes"]) == modes and list(call["precisions"]) == precisions
    assert call["sim"] == workflow.simulation_config(cfg) and call["dataset"] is None
    bench = call["config"]
    assert (bench.repeats, bench.warmup) == (cfg["bench"]["repeats"], cfg["bench"]["warmup"])
    assert bench.shared_threads == cfg["train_threads"] and bench.shared
    assert (bench.threads, bench.component_repeats) == (BenchConfig.threads, BenchConfig.component_repeats)


def test_bench_reads_a_resolved_config_json_with_its_numbers_as_numbers(bench_calls, tmp_path):
    """``--config results/<preset>/config.json`` (the pipeline's resolved config): JSON
    numbers such as 1e-06, which YAML 1.1 reads as a string, stay numbers."""
    from ptycho.cli.values import study_config

    resolved = tmp_path / "config.json"  # written the way the resolved_config rule writes it
    assert main(["config", "--json", json.dumps(study_config(STUDY_CONFIG, "smoke")), "--out", str(resolved)]) == 0
    assert '"poisson_eps": 1e-06' in resolved.read_text()
    assert main(["bench", "--config", str(resolved), "--preset", "smoke"]) == 0
    (call,) = bench_calls
    assert call["models"][0].poisson_eps == 1e-06
    assert study_config(str(resolved), "smoke") == study_config(STUDY_CONFIG, "smoke")


def test_bench_flags_override_the_studys_config(bench_calls, tmp_path):
    # Every flag overrides the study's config; rules/checks.smk passes the pipeline's settings so.
    argv = ["bench", "--config", STUDY_CONFIG, "--preset", "smoke", "--models", "pinn", "--modes", "jit", "--precisions", "bf16", "--repeats", "7", "--warmup", "2",
            "--threads-alone", "2", "--shared-threads", "3", "--component-repeats", "4", "--no-shared",
            "--filters", "8", "--loss", "poisson", "--batch-size", "4", "--n", "32", "--object-size", "80",
            "--like", "m.json", "--out", str(tmp_path / "b.json")]  # fmt: skip
    assert main(argv) == 0
    (call,) = bench_calls
    (model,) = call["models"]
    assert (model.kind, model.filters, model.loss) == ("pinn", 8, "poisson")
    assert call["train"].batch_size == 4 and list(call["modes"]) == ["jit"] and call["like"] == ["m.json"]
    assert list(call["precisions"]) == ["mixed_bfloat16"]
    b = call["config"]
    assert (b.repeats, b.warmup, b.threads, b.shared_threads, b.component_repeats, b.shared) == (7, 2, 2, 3, 4, False)
    assert (call["sim"].n, call["sim"].object_size) == (32, 80)


def test_bench_without_the_studys_config_is_one_line(bench_calls, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--models", "pinn"]) == 2
    assert (
        capsys.readouterr().err
        == "ptycho bench: error: cannot read config file config.yaml: No such file or directory\n"
    )
    assert bench_calls == []


def test_the_bench_in_a_job_reads_the_workflows_resolved_config(monkeypatch, tmp_path):
    """`snakemake -s <checkout>/Snakefile -d <folder>` failed at the bench: it read config.yaml
    from the work folder, which has none; a job now reads the config the workflow resolved."""
    import argparse
    import json

    from ptycho.cli.study import _study
    from ptycho.cli.values import study_config

    resolved = study_config(STUDY_CONFIG, "smoke")
    monkeypatch.chdir(tmp_path)  # no config.yaml here
    monkeypatch.setenv("PTYCHO_CONFIG_JSON", json.dumps(resolved))
    assert _study(argparse.Namespace(config=None, preset=None)) == json.loads(json.dumps(resolved))
    assert _study(argparse.Namespace(config=STUDY_CONFIG, preset="smoke"))["preset"] == "smoke"  # named: read
    monkeypatch.delenv("PTYCHO_CONFIG_JSON")
    with pytest.raises(ConfigError, match="config.yaml"):
        _study(argparse.Namespace(config=None, preset=None))
