"""Memory estimated before any job (ptycho.study.resources), and a job that runs out of
memory reported in one line (ptycho.cli)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ptycho.cli import OUT_OF_MEMORY, is_out_of_memory, main
from ptycho.config import SimulationConfig
from ptycho.errors import ConfigError
from ptycho.physics.scan import grid_scan
from ptycho.study import jobs
from ptycho.study.preflight import job_memory
from ptycho.study.resources import (
    GIB,
    PYTHON_BYTES,
    check_memory,
    machine_memory_bytes,
    scan_size,
    simulate_bytes,
)
from ptycho.study.workflow import resolve, simulation_config

ROOT = Path(__file__).resolve().parents[1]
#: The issue's configuration: about 60 GB of objects alone, and 4 million patterns per object.
HUGE = {"simulation": {"n_objects_train": 1000, "object_size": 2048, "stride_train": 1}}
MACHINE = 24 * GIB


@pytest.fixture(scope="module")
def base() -> dict:
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def test_the_issues_configuration_is_refused_in_one_line(base):
    cfg = resolve(base, HUGE)
    with pytest.raises(ConfigError) as info:
        check_memory(simulation_config(cfg), job_memory(cfg), MACHINE, "this machine")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("the simulate job would need about ")
    assert "GiB of memory" in message and "more than the 24.0 GiB of this machine" in message
    assert "1000 objects of 2048x2048 px" in message
    for key in ("simulation.n_objects_train", "simulation.object_size", "simulation.stride_train"):
        assert key in message
    assert job_memory(cfg)["simulate"] > 1000 * MACHINE


@pytest.mark.parametrize("preset", ["smoke", "default", "paper"])
def test_the_presets_fit_on_a_24_gib_machine(base, preset):
    cfg = resolve(base, {"preset": preset})
    check_memory(simulation_config(cfg), job_memory(cfg), MACHINE, "this machine")
    estimates = job_memory(cfg)
    assert set(estimates) == {"simulate", "train", "infer"}
    assert all(0 < need < 8 * GIB for need in estimates.values())


def test_the_limit_is_the_estimate_itself(base):
    """Refused only above the estimate: one byte less memory than it, refused; as much, not."""
    cfg = resolve(base, {"preset": "smoke"})
    need = max(job_memory(cfg).values())
    check_memory(simulation_config(cfg), job_memory(cfg), need, "this machine")
    with pytest.raises(ConfigError, match="more than the"):
        check_memory(simulation_config(cfg), job_memory(cfg), need - 1, "this machine")


def test_only_the_job_over_the_limit_is_named_with_the_keys_of_its_split(base):
    cfg = resolve(base, {})
    need = job_memory(cfg)
    job = max(need, key=need.get)
    split = "test" if job == "infer" else "train"
    with pytest.raises(ConfigError) as info:
        check_memory(simulation_config(cfg), job_memory(cfg), sorted(need.values())[-2], "the cgroup")
    message = str(info.value)
    assert message.startswith(f"the {job} job would need about ") and "of the cgroup;" in message
    assert f"({split} split: " in message and f"simulation.n_objects_{split}" in message
    assert not any(f"the {other} job" in message for other in need if other != job)


@pytest.mark.parametrize(
    "size, n, stride, gridsize, spacing",
    [(196, 64, 4, 2, 4), (196, 64, 10, 2, 4), (72, 32, 8, 1, 4), (100, 16, 3, 2, 5), (64, 32, 1, 2, 2)],
)
def test_scan_size_counts_what_grid_scan_builds(size, n, stride, gridsize, spacing):
    scan = grid_scan(size, n, stride, gridsize, spacing)
    counted = scan_size(size, n, stride, gridsize, spacing)
    assert (counted.positions, counted.groups, counted.channels) == (len(scan.positions), *scan.groups.shape)


def test_the_estimate_grows_with_the_objects_and_one_over_the_stride_squared():
    def sim(**kw) -> int:
        return simulate_bytes(SimulationConfig(object_size=392, **kw)) - PYTHON_BYTES

    # linear in the number of training objects: the same step for every added object
    by_objects = [sim(n_objects_train=k) for k in (2, 4, 8)]
    assert by_objects[2] - by_objects[1] == pytest.approx(2 * (by_objects[1] - by_objects[0]), rel=1e-6)
    # each object's 6889 patterns of 64 x 64 px cost 72 bytes per pixel at the peak
    per_object = (by_objects[1] - by_objects[0]) / 2
    assert per_object == pytest.approx(72 * 83**2 * 64**2, rel=0.02)
    # halving the stride: about four times the patterns, so about four times the memory
    # (one pattern per group: at gridsize 2 a stride below 2 x spacing shares patterns
    # between groups, and the simulation computes each once)
    by_stride = [sim(n_objects_train=4, stride_train=s, gridsize=1) for s in (16, 8, 4, 2)]
    for coarse, fine in zip(by_stride, by_stride[1:], strict=False):
        assert 3.5 < fine / coarse < 4.5


def test_the_training_estimate_grows_with_one_over_the_stride_squared(base):
    """Each halving of the stride adds about four times what the previous one added."""
    sim = {"object_size": 392, "n_objects_train": 8, "gridsize": 1}
    train = [
        job_memory(resolve(base, {"models": ["pinn"], "simulation": {**sim, "stride_train": s}}))["train"]
        for s in (4, 2, 1)
    ]
    assert 3.5 < (train[2] - train[1]) / (train[1] - train[0]) < 4.5


def test_the_training_estimate_grows_with_the_training_split(base):
    small = job_memory(resolve(base, {"simulation": {"n_objects_train": 2}}))
    large = job_memory(resolve(base, {"simulation": {"n_objects_train": 8}}))
    assert large["train"] > small["train"] and large["simulate"] > small["simulate"]
    assert large["infer"] == small["infer"]  # the test split is unchanged


def test_machine_memory_is_at_most_the_physical_memory():
    import psutil

    assert 0 < machine_memory_bytes() <= psutil.virtual_memory().total


# ------------------------------------------------------------- out of memory in a job
def _simulate(tmp_path: Path) -> list[str]:
    return ["simulate", "--quiet", "--train", str(tmp_path / "t.h5"), "--test", str(tmp_path / "u.h5")]


def test_a_memory_error_in_a_command_is_one_line_and_its_own_exit_code(tmp_path, monkeypatch, capsys):
    def boom(*args, **kwargs):
        raise MemoryError(
            "Unable to allocate 59.6 GiB for an array with shape (1000, 2048, 2048) and data type complex128"
        )

    monkeypatch.setattr(jobs, "simulate", boom)
    assert main(_simulate(tmp_path)) == OUT_OF_MEMORY
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("ptycho simulate: error: out of memory (Unable to allocate 59.6 GiB for an array")
    assert "simulation.n_objects_train" in err and "mem_mb" in err
    assert OUT_OF_MEMORY not in (0, 1, 2, 130)
    assert not (tmp_path / "t.h5").exists()


def test_an_empty_memory_error_still_says_memory(tmp_path, monkeypatch, capsys):
    def boom(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(jobs, "simulate", boom)
    assert main(_simulate(tmp_path)) == OUT_OF_MEMORY
    assert capsys.readouterr().err.startswith("ptycho simulate: error: out of memory (MemoryError; ")


def test_other_errors_are_not_taken_for_memory(tmp_path, monkeypatch):
    class ResourceExhaustedError(RuntimeError):  # TensorFlow's, by name
        pass

    assert is_out_of_memory(ResourceExhaustedError("OOM when allocating tensor with shape[16,64,64,64]"))
    assert not is_out_of_memory(ResourceExhaustedError("quota of file handles exhausted"))

    def boom(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(jobs, "simulate", boom)
    with pytest.raises(RuntimeError, match="a bug"):
        main(_simulate(tmp_path))


def test_a_real_allocation_failure_is_one_line(tmp_path):
    """A real process under an address-space limit (``ulimit -v``), with a simulation
    that needs more: NumPy's MemoryError becomes the one line and exit code 3."""
    import resource

    limit = 2 * GIB  # the imports fit; the 4 GiB of the simulation do not

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    cmd = [sys.executable, "-m", "ptycho", *_simulate(tmp_path), "--object-size", "392", "--n-objects-train", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=cap, cwd=tmp_path, timeout=300)
    assert proc.returncode == OUT_OF_MEMORY, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ptycho simulate: error: out of memory (Unable to allocate")
    assert not list(tmp_path.glob("*.h5"))


def test_a_tensorflow_job_under_an_address_space_limit_says_what_a_crash_would_mean():
    """TensorFlow out of address space ends in native code (exit 134 or 139), where no
    Python error can name memory: the log's first line does, beforehand."""
    import resource

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (8 * GIB, 8 * GIB))

    code = "from ptycho.cli import address_space_note as n; print(n('train'))"
    capped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, preexec_fn=cap, timeout=120)
    assert capped.stdout.startswith("ptycho train: note: this process may use 8.0 GiB of address space (ulimit -v)")
    assert "std::bad_alloc (exit 134)" in capped.stdout and "out of memory" in capped.stdout


def test_a_tensorflow_job_under_a_limit_it_cannot_start_in_is_one_line_and_so_is_the_workflow(tmp_path):
    """Under ulimit -v of 1.9 GiB a training aborted in native code (exit 134, a 64-line
    dump; 127 or 139 at other limits) before its first step. TensorFlow's own reservation
    is known: the job says so in one line, exit 3, before importing it, and the workflow
    refuses the study before its first job (not at parse time: a cluster's nodes do not
    share the submitting host's limit, and --unlock or --lint need no training)."""
    import resource

    from ptycho.runtime import TF_ADDRESS_SPACE_BYTES

    limit = TF_ADDRESS_SPACE_BYTES - GIB // 2

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    train = [sys.executable, "-m", "ptycho", "train", "--dataset", "absent.h5", "--out", "m"]
    proc = subprocess.run(train, capture_output=True, text=True, preexec_fn=cap, cwd=tmp_path, timeout=120)
    assert proc.returncode == OUT_OF_MEMORY, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [
        "ptycho train: error: out of memory before the start: this process may use 2.0 GiB of address space "
        "(ulimit -v), less than the 2.5 GiB TensorFlow reserves to start, whatever the job; raise the limit "
        "(ulimit -v, or a cgroup memory limit instead: it counts memory used, not reserved)"
    ]
    assert not (tmp_path / "m").exists()

    from test_pipeline import _workdir

    work = _workdir(tmp_path / "work")

    def workflow_errors(*args: str) -> list[str]:
        """The error lines of a capped Snakemake run of the smoke study's first file."""
        run = subprocess.run(
            [sys.executable, "-m", "snakemake", "--cores", "2", *args],
            capture_output=True, text=True, preexec_fn=cap, cwd=work, timeout=300,
        )  # fmt: skip
        assert run.returncode == 2, run.stderr[-3000:]
        return [x for x in run.stderr.splitlines() if x.startswith("ptycho workflow: error:")]

    first = ("results/smoke/config.json", "--config", "preset=smoke")
    assert workflow_errors(*first) == [
        "ptycho workflow: error: this process may use 2.0 GiB of address space (ulimit -v), less than the 2.5 GiB "
        "TensorFlow reserves to start, whatever the job; raise the limit (ulimit -v, or a cgroup memory limit "
        "instead: it counts memory used, not reserved); no training could start"
    ]

    # Above TensorFlow's floor but below what a smoke training reserves and uses (measured:
    # it aborted at 2.57 GiB, ran at 2.77): refused before the first job, naming the job.
    limit = int(2.6 * GIB)
    errors = workflow_errors(*first)
    assert len(errors) == 1 and errors[0].startswith("ptycho workflow: error: the train job would need about 2.8 GiB")
    assert "more than the 2.6 GiB of address space this process may use (ulimit -v)" in errors[0]
    assert not (work / "results/smoke/config.json").exists()
    lint = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint"],
        capture_output=True,
        text=True,
        preexec_fn=cap,
        cwd=work,
        timeout=300,
    )
    assert lint.returncode == 0, lint.stderr[-3000:]  # a command that runs no job is not refused
