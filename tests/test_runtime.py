"""TensorFlow's start-up lines in job logs, and the device a job records."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ptycho.runtime import filter_native_lines

#: What TensorFlow 2.21 printed on import on this machine (the full wheel), verbatim.
STARTUP = """WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1795415050.602884     972 port.cc:153] oneDNN custom operations are on. You may see slightly different numerical results.
I0000 00:00:1795415050.603182     972 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
I0000 00:00:1795415050.643469     972 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use available CPU instructions.
To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow with the appropriate compiler flags.
W0000 00:00:1795415051.000000     972 some_op.cc:10] a real warning
/x/y.py:3: UserWarning: a Python warning
  warnings.warn("a Python warning")
E0000 00:00:1795415053.195584     972 cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR (303)
"""


PYTHON_WARNING = ["/x/y.py:3: UserWarning: a Python warning", '  warnings.warn("a Python warning")']


@pytest.mark.parametrize(
    ("level", "kept"),
    [
        (1, ["W0000", *PYTHON_WARNING, "E0000"]),
        (2, [*PYTHON_WARNING, "E0000"]),
        (3, [*PYTHON_WARNING, "E0000"]),  # errors are always kept
    ],
)
def test_native_lines_below_the_level_go_and_errors_and_python_warnings_stay(level, kept):
    out = filter_native_lines(STARTUP, level)
    assert [line[:5] if line.startswith(("W0000", "E0000")) else line for line in out.splitlines()] == kept


def test_level_zero_keeps_everything():
    assert filter_native_lines(STARTUP, 0) == STARTUP


def test_a_tensorflow_job_starts_without_native_noise_and_records_its_device():
    """What every TensorFlow job does first (``ptycho.cli.main``): nothing on stderr on a
    machine without a GPU with the locked CPU TensorFlow, at the jobs' default level."""
    code = (
        "from ptycho.runtime import device_info, import_tensorflow; import_tensorflow(); "
        "info = device_info(); print(info['device'], info['gpu_count'], info['cuda_build'])"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr
    device, gpus, cuda = result.stdout.split()
    assert (device, gpus) == ("CPU", "0")  # this machine has no GPU
    assert cuda == "False"  # tensorflow-cpu: no CUDA code, so no cuInit error line
