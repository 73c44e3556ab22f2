"""Security: where servers listen, what reaches a shell, what is deserialised, where
outputs may go. (Refusals a user meets are rows of ``tests/test_bad_inputs.py``.)"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from ptycho.errors import ConfigError
from ptycho.study.preflight import results_folder
from ptycho.study.workflow import check_shell_safe, cli_flags, load_schema, resolve

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
    # The user's own data files may have any name (a space, an accent): the one rule that
    # reads them passes them quoted, and check_shell_safe leaves them alone.
    quoted = {"data.train", "data.test"}
    assert quoted <= set(found)
    assert "{input.source:q}" in (ROOT / "rules" / "simulate.smk").read_text()
    for path, spec in found.items():
        safe = r"\^(\[A-Za-z0-9\])?\[A-Za-z0-9[_@%+=:,./-]*\][+*]\$"  # ^[A-Za-z0-9...]+$, or a first character then *
        assert path in quoted or "enum" in spec or re.fullmatch(safe, spec.get("pattern", "")), path


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
    assert "return cli_flags(" in common.split("def flags(")[1].split("\ndef ")[0] and "parse_time_checks(" in common


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


# ------------------------------------------- untrusted files: read inside, bounded
# (the CLI's one-line refusals of each are rows of tests/test_bad_inputs.py)
@pytest.fixture
def small_memory(monkeypatch):
    """A machine of 8 GiB: the read budget is 4 GiB."""
    import ptycho.data.untrusted as untrusted

    monkeypatch.setattr(untrusted, "memory_bytes", lambda: 8 * 2**30)
    return untrusted


class mock_spy:  # noqa: N801 - a context manager, named as used
    """Record the calls of ``owner.name`` (still calling it) while the block runs."""

    def __init__(self, owner, name):
        self.owner, self.name, self.calls = owner, name, []

    def __enter__(self):
        from unittest import mock

        real = getattr(self.owner, self.name)
        calls = self.calls

        def spy(*args, **kwargs):
            calls.append(mock.call(*args, **kwargs))
            return real(*args, **kwargs)

        self.patch = mock.patch.object(self.owner, self.name, spy)
        self.patch.start()
        return self

    def __exit__(self, *exc):
        self.patch.stop()


def test_the_issue_bomb_is_refused_by_the_memory_bound_before_it_is_read(files, tmp_path, small_memory):
    """#34's file: gzip detector data declaring 4,194,304 x 32 x 32 (16 GiB, a few KB on
    disk), which made numpy allocate 16 GiB; nothing is read now, whatever the machine."""
    import h5py
    import numpy as np

    from ptycho.data.dataset import read_dataset
    from ptycho.errors import DatasetError

    path = tmp_path / "bomb.h5"
    path.write_bytes(files["train"].read_bytes())
    with h5py.File(path, "a") as f:
        del f["diffraction"]
        f.create_dataset("diffraction", shape=(4194304, 32, 32), dtype="uint32", chunks=(1024, 32, 32), compression=9)
    assert path.stat().st_size < 1_000_000
    read = mock_spy(h5py.Dataset, "__getitem__")
    with read, pytest.raises(DatasetError) as err:
        read_dataset(path)
    message = str(err.value)
    assert "array 'diffraction' declares shape (4194304, 32, 32) uint32 (16.0 GiB), more than the 4.0 GiB" in message
    assert "(50% of the 8.0 GiB this process may use)" in message and "\n" not in message
    assert all(np.prod(call.args[0].shape or ()) < 1000 for call in read.calls), "a large array was read"


def test_a_dataset_file_that_reads_another_file_is_refused_by_every_reader(files, tmp_path):
    import h5py

    from ptycho.data.dataset import read_attributes, read_dataset
    from ptycho.errors import DatasetError

    path = tmp_path / "ext.h5"
    path.write_bytes(files["train"].read_bytes())
    with h5py.File(path, "a") as f:
        shape, dtype = f["positions"].shape, f["positions"].dtype
        del f["positions"]
        f.create_dataset("positions", shape=shape, dtype=dtype, external=[("/etc/passwd", 0, 102400)])
    for read in (read_dataset, read_attributes):
        with pytest.raises(DatasetError, match=r"dataset '/positions' keeps its bytes in another file .*/etc/passwd"):
            read(path)


def test_soft_links_are_followed_as_far_as_hdf5_follows_them_and_no_further(tmp_path):
    """CXI's own soft links and dangling ones are fine; a chain longer than HDF5's limit
    of 16 (which HDF5 itself cannot read) is a loop, found without recursion."""
    import h5py
    import numpy as np

    from ptycho.data.untrusted import check_hdf5
    from ptycho.errors import DatasetError

    for links, ok in ((16, True), (17, False)):
        path = tmp_path / f"chain{links}.h5"
        with h5py.File(path, "w") as f:
            f["d"] = np.arange(3)
            f["g/s0"] = h5py.SoftLink("/d")
            for i in range(1, links):
                f[f"g/s{i}"] = h5py.SoftLink(f"s{i - 1}")  # relative, as CXI writers also do
            f["dangling"] = h5py.SoftLink("/nowhere/at/all")
            f["g/self"] = f["g"]  # a hard-link cycle: walked once
        with h5py.File(path, "r") as f:
            if ok:
                check_hdf5(f, str(path))
                assert list(f[f"g/s{links - 1}"][()]) == [0, 1, 2]
            else:
                with pytest.raises(DatasetError, match=r"soft link '/g/s16' never reaches an object"):
                    check_hdf5(f, str(path))


def test_json_depth_is_counted_outside_strings_and_bounded():
    from ptycho.data.untrusted import MAX_JSON_DEPTH, json_depth, loads_json
    from ptycho.errors import DatasetError

    assert json_depth('{"a": [1, {"b": "[[[[{{{"}], "c": "\\"]]]"}') == 3
    assert json_depth("[]" * 1000) == 1 and json_depth("") == 0
    nested = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert loads_json(nested, "f", "it") == json.loads(nested)
    with pytest.raises(DatasetError, match="it nests JSON 65 levels deep, more than the 64"):
        loads_json("[" + nested + "]", "f", "it")
    with pytest.raises(DatasetError, match="more than the 1.0 KiB ptycho reads"):
        loads_json('"' + "x" * 2000 + '"', "f", "it", max_bytes=1024)


def test_attributes_are_bounded_before_they_are_read(files, tmp_path):
    import h5py
    import numpy as np

    from ptycho.data.dataset import read_attributes
    from ptycho.errors import DatasetError

    path = tmp_path / "attr.h5"
    path.write_bytes(files["train"].read_bytes())
    with h5py.File(path, "a") as f:
        f.attrs["notes"] = np.zeros(300_000)
    with pytest.raises(DatasetError, match=r"attribute 'notes' declares shape \(300000,\) float64 \(2.3 MiB\)"):
        read_attributes(path)
    with h5py.File(path, "a") as f:
        del f.attrs["notes"]
        f.attrs["config"] = "[" * 200_000 + "]" * 200_000  # the deep JSON of #34, in a dataset file
        f.attrs["digest"] = f.attrs["digest"]
    from ptycho.data.dataset import read_dataset

    with pytest.raises(DatasetError, match="attribute 'config' nests JSON 200000 levels deep"):
        read_dataset(path)


def test_a_scan_beyond_the_side_bound_is_refused_before_its_blank_object(pair):
    """Measured data whose positions (metres read as pixels, say) span 10^7 px: one line
    naming the geometry, not a 800 TB np.zeros."""
    from ptycho.data.npz import dataset_from_arrays
    from ptycho.errors import DatasetError

    ds = pair["train"]
    pos = ds.positions * 1e5
    with pytest.raises(DatasetError, match=r"the scan spans .* object pixels, more than the 65536 per side"):
        dataset_from_arrays("m.cxi", ds.amplitude, ds.probe, None, pos)
    assert dataset_from_arrays("m.cxi", ds.amplitude, ds.probe, None, ds.positions).objects.shape[0] == 1


def test_npz_headers_bound_every_reader_of_npz(tmp_path):
    """An NPZ member whose header declares more than the member holds, or more than the
    memory: refused from the header, by the NPZ import, the provenance check and the
    training state alike (np.load would allocate what the header says first)."""
    import io
    import zipfile

    import numpy as np
    from numpy.lib import format as npformat

    from ptycho.data.provenance import recorded_digest
    from ptycho.data.untrusted import Budget, check_npz, npz_headers
    from ptycho.errors import PtychoError
    from ptycho.nets.state import load_train_state

    def npz(path, shape):
        header = io.BytesIO()
        npformat.write_array_header_2_0(header, {"descr": "<f8", "fortran_order": False, "shape": shape})
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("header.npy", header.getvalue() + bytes(80))
            z.writestr("dataset_digest.npy", header.getvalue() + bytes(80))

    npz(tmp_path / "big.npz", (2**20, 2**20))  # 8 TiB
    npz(tmp_path / "short.npz", (1000,))  # 8000 bytes declared, 80 held
    for name, fragment in (("big.npz", r"\(8.0 TiB\), more than the"), ("short.npz", "but its member holds 80 B")):
        path = str(tmp_path / name)
        with pytest.raises(PtychoError, match=fragment):
            npz_headers(path, Budget(path))
        with pytest.raises(PtychoError, match=fragment):
            check_npz(path)
        assert recorded_digest(path) is None
        with pytest.raises(PtychoError, match=fragment):
            load_train_state(tmp_path / name)
    np.savez(tmp_path / "ok.npz", dataset_digest=np.array("abc"), x=np.zeros((3, 4)))
    assert npz_headers(str(tmp_path / "ok.npz"), Budget("ok"))["x"] == ((3, 4), np.dtype("f8"))
    assert recorded_digest(tmp_path / "ok.npz") == "abc"


def test_a_model_json_nested_too_deep_is_one_line(tmp_path):
    from ptycho.errors import PtychoError
    from ptycho.nets.state import load_meta

    (tmp_path / "model.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(PtychoError, match="model.json: it nests JSON 200000 levels deep, more than the 64"):
        load_meta(tmp_path)


@pytest.fixture(scope="module")
def saved_networks(tmp_path_factory) -> list[Path]:
    """model.keras files of every architecture ptycho builds (poolings, mixing, precision):
    what check_model_file must accept."""
    from ptycho.nets.models import build_network

    root = tmp_path_factory.mktemp("networks")
    out = []
    for i, (pooling, mixing, precision, depth) in enumerate(
        [("avg", 1, "float32", 2), ("max", 0, "mixed_bfloat16", 1), ("strided", 2, "float32", 3)]
    ):
        net = build_network(16, 4, 1, 4, pooling, 0, depth=depth, mixing=mixing, precision=precision)
        path = root / f"net{i}" / "model.keras"
        path.parent.mkdir()
        net.save(path)
        out.append(path)
    return out


def test_every_network_ptycho_builds_passes_the_model_check(saved_networks):
    from ptycho.nets.infer import load_network
    from ptycho.nets.state import check_model_file

    for path in saved_networks:
        check_model_file(path)
        assert load_network(path.parent).count_params() > 0


def _rewrite(path: Path, out: Path, **members: bytes) -> None:
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for name in src.namelist():
            dst.writestr(name, members.pop(name, src.read(name)))
        for name, data in members.items():
            dst.writestr(name, data)


def test_a_model_that_is_not_what_ptycho_train_wrote_is_refused_before_keras(saved_networks, tmp_path, monkeypatch):
    import io

    import h5py
    import keras

    from ptycho.errors import PtychoError
    from ptycho.nets.state import check_model_file

    source = saved_networks[0]
    with zipfile.ZipFile(source) as z:
        config = json.loads(z.read("config.json"))
        weights = z.read("model.weights.h5")
    monkeypatch.setattr(keras.models, "load_model", lambda *a, **k: pytest.fail("Keras saw the file"))

    def refused(match: str, **members: bytes) -> None:
        path = tmp_path / "model.keras"
        _rewrite(source, path, **members)
        with pytest.raises(PtychoError, match=match) as err:
            check_model_file(path)
        assert "\n" not in str(err.value) and "train it again" in str(err.value)

    layers = config["config"]["layers"]
    embedding = json.loads(json.dumps(config))
    embedding["config"]["layers"][1]["class_name"] = "Embedding"
    refused(
        "is a Embedding, not one of the layers ptycho's networks are made of",
        **{"config.json": json.dumps(embedding).encode()},
    )
    wide = json.loads(json.dumps(config))
    conv = next(i for i, layer in enumerate(layers) if layer["class_name"] == "Conv2D")
    wide["config"]["layers"][conv]["build_config"]["input_shape"][-1] = 2**20
    wide["config"]["layers"][conv]["config"]["filters"] = 2**20
    refused(
        r"asks for a variable of shape \(3, 3, 1048576, 1048576\) float32 \(36.0 TiB\), more than the",
        **{"config.json": json.dumps(wide).encode()},
    )
    refused("it holds 'assets/x.bin'", **{"assets/x.bin": b"x"})
    refused("nests JSON 100 levels deep", **{"config.json": ("[" * 100 + "]" * 100).encode()})
    extra = io.BytesIO(weights)
    with h5py.File(extra, "a") as f:
        f.create_dataset("layers/more/vars/0", shape=(2**20, 2**10), dtype="float32", chunks=True, compression="gzip")
    refused(
        r"its model.weights.h5 declares 4.0 GiB of weights, more than the .* its layers hold",
        **{"model.weights.h5": extra.getvalue()},
    )
    linked = io.BytesIO(weights)
    with h5py.File(linked, "a") as f:
        f["layers/stolen"] = h5py.ExternalLink("/etc/passwd", "/x")
    refused("is an external link to /etc/passwd:/x, which ptycho refuses", **{"model.weights.h5": linked.getvalue()})
    # a zip bomb: 64 MiB of zeros deflated to 64 KB, on a machine of 32 MiB
    import ptycho.data.untrusted as untrusted

    monkeypatch.setattr(untrusted, "memory_bytes", lambda: 32 * 2**20)
    refused("zip members declare .* uncompressed .*: a zip bomb", **{"metadata.json": bytes(64 * 2**20)})
