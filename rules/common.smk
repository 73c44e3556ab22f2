# Configuration (validated once, here) and the target lists the rules share.
import json
import os
import re
import shlex
import sys

from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod

from ptycho.artifacts import aside, damage, rerun_params  # rerun_params: every rule's params, its outputs' format version
from ptycho.errors import PtychoError
from ptycho.nets.models import SUBJECT, method_of
from ptycho.nets.precision import PRECISIONS as PRECISION_RECORDS
from ptycho.nets.xla import MODES as MODE_RECORDS, compared
from ptycho.study.arms import PATTERN as ARM_PATTERN, parse_arm
from ptycho.study import checklist, run_lock
from ptycho.study.bench.machine import hardware, hardware_environment
from ptycho.study.conditions import checked as checked_conditions, skipped_words as skipped_conditions
from ptycho.study.data_files import data_files
from ptycho.study.workflow import (arm_lists, arms, auto_precision_line, bench_lists, checked_lists, cli_flags, look_plan, precision_warnings, section_for, solver_mode, warm_arms)
from ptycho.study.preflight import (address_space_error, disk_bytes, disk_lines, holes, job_memory, parse_time_checks, report_folder)
from ptycho.study.estimate import calibrated_training_s, seed_cap
from ptycho.study.schedule import (AT_ONCE_ENV, concurrent_jobs, declared_threads, job_threads, training_priority, usable_cores)
from ptycho.tracking import config_hash


try:
    # The config (and every config file read: a key given twice), a results folder that
    # cannot be written (one line, before Snakemake's makedirs), a tracking server that is
    # down, a damaged, lost or read-only store: all stop the run before any job.
    # Overrides are the command line's --config alone: a --configfile is read like config.yaml
    # (Snakemake has merged it into `config`), so a preset's lists win over it.
    # `precision: auto` is resolved for this machine (or the one PTYCHO_CPU_FLAGS and
    # PTYCHO_GPU_CAPABILITY name); its jobs inherit what was detected, so that a cluster
    # job, which parses this workflow again on its node, resolves it as this host did.
    HARDWARE = hardware()
    CFG = parse_time_checks(config, dict(workflow.config_settings.config), config_files=workflow.configfiles, hardware=HARDWARE)
except PtychoError as err:
    sys.stderr.write(f"ptycho workflow: error: {err}\n")
    sys.exit(2)
os.environ.update(hardware_environment(HARDWARE))

if workflow.is_main_process:
    # The run's first lines: the precision chosen for this machine, and why; a named one it only emulates.
    for line in filter(None, [auto_precision_line(CFG)]):
        sys.stderr.write(f"ptycho workflow: {line}\n")
    for line in filter(None, [*precision_warnings(CFG, HARDWARE), skipped_conditions(CFG)]):
        sys.stderr.write(f"ptycho workflow: warning: {line}\n")

R = f"{CFG['results']}/{CFG['preset']}"
# Jobs end when this Snakemake is gone (ptycho.study.run_lock.watch_workflow): set by the main
# process only; a cluster job's own Snakemake (remote mode) keeps the one it inherited.
if workflow.is_main_process:
    os.environ[run_lock.WORKFLOW_ENV] = run_lock.workflow_marker()
# Jobs run `python -m ptycho`. Under `--sdm conda` that is the env's interpreter
# (Snakemake puts the env's bin first on PATH, envs/ptycho.yaml); otherwise the one
# running Snakemake (the venv's), by absolute path. Hooks (onstart, onerror) run in
# Snakemake's own process and always use the latter (SELF).
SELF = f"{shlex.quote(sys.executable)} -m ptycho"  # quoted: a checkout's path may hold a space
IN_CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
PTYCHO = "python -m ptycho" if IN_CONDA else SELF
PARENT = f"{R}/mlflow/parent.json"
#: The results folder's lock while this Snakemake runs jobs (taken in the Snakefile's onstart).
RUN_LOCK = []
CONFIG_JSON = f"{R}/config.json"
HASH = config_hash(CFG)
# Jobs tag their MLflow runs with the config in force, and the parent run logs it.
# Through the environment (local and SLURM jobs inherit it), not params or inputs: either
# would re-run every job on any change.
os.environ.update(PTYCHO_CONFIG_HASH=HASH, PTYCHO_CONFIG_JSON=json.dumps(CFG, sort_keys=True))
ARMS = arms(CFG)
# Each job's memory request (Snakemake's mem_mb: SLURM's --mem) from the estimate of what it
# holds (ptycho.study.resources), never below the rule's floor: a larger study asks for more.
JOB_MB = {job: -(-need // 2**20) for job, need in job_memory(CFG).items()}
CHECK_ITEMS = checklist.names()
# What the bench times: bench.models|xla|precision, each else the study's list.
BENCH = bench_lists(CFG)
# The XLA modes accuracy and gradients compare with off (every mode the study trains or the
# bench times, but off itself), at each of their precisions (each reduced one also vs float32).
CHECKED_MODES, CHECKED_PRECISIONS = checked_lists(CFG)
XLA_MODES = " ".join(compared(CHECKED_MODES))
PRECISIONS = " ".join(CHECKED_PRECISIONS)
# The solver's warm starts: each model's off arm of its first seed (workflow.warm_arms), run in the
# first compared mode of the study (XLA's mode where the solver's work is all physics).
WARM_ARMS = warm_arms(CFG)
WARM_MODE = solver_mode(CFG)
SOLVER = [f"{R}/solver/solve.json", f"{R}/solver/warm_start.json"]
# The operating points the cheap parts also run at (ptycho.study.conditions): name -> settings.
CONDITIONS = checked_conditions(CFG)
# The report's flag only when there are conditions: a study without them runs its report as before.
CONDITIONS_FLAG = "--conditions {input.conditions} " if CONDITIONS else ""
CONDITION_RECORDS = expand(f"{R}/conditions/{{condition}}/{{record}}.json", condition=CONDITIONS, record=["check", "solve"])

# The study's datasets: simulated (the simulate rule), or the user's own files, config `data`
# (the import_data rule reads a CXI file or a ptycho dataset per split). Both rules exist; the
# one not in use writes to a folder nothing asks for, so that Snakemake has one way to make a split.
# The user's files are not exported as CXI again (their geometry is not the `cxi` section's).
DATA = data_files(CFG)
# A measured scan's probe is only an estimate: with data.probe refine (the default), import_data
# writes to data/imported/ and the refine_probe rule writes the splits the study reads, with the
# solver's probe; the rule not in use writes to a folder nothing asks for, as above.
REFINE = bool(DATA) and CFG["data"]["probe"] == "refine"
DATA_DIR = {
    "simulate": f"{R}/data/unused" if DATA else f"{R}/data",
    "import_data": f"{R}/data/imported" if REFINE else f"{R}/data" if DATA else f"{R}/data/unused",
    "refine_probe": f"{R}/data" if REFINE else f"{R}/data/unrefined",
}
#: The refinement's record (the probe's change, the misfit given and refined) when there is one;
#: the report's flag only then, so that a simulated study runs its report as before.
PROBE_RECORD = [f"{R}/solver/probe.json"] if REFINE else []
PROBE_FLAG = "--probe {input.probe} " if REFINE else ""
DATASETS = expand(f"{R}/data/{{split}}.{{ext}}", split=["train", "test"], ext=["h5"] if DATA else ["h5", "cxi"])
MODELS = expand(f"{R}/models/{{arm}}/model.json", arm=ARMS)
METRICS = expand(f"{R}/metrics/{{arm}}.json", arm=ARMS)
# Every reconstruction as ptychodus products (evaluate's and solve's folder outputs): asked for
# by `all`, as nothing reads them, so that a folder made before them gets them too; the arms'
# are FINAL_PRODUCTS (rules/looks.smk: with looks, the added seeds' too).
SOLVER_PRODUCTS = expand(f"{R}/products/solver-{{mode}}", mode=CFG["xla"])
CHECKS = expand(f"{R}/checks/{{item}}.json", item=CHECK_ITEMS)
# The quality item on the user's own data also reads the arms' stitched objects (without a
# ground truth it compares the arms with each other); on simulated data its command is as it was.
QUALITY_STITCHED_FLAG = "--stitched {input.stitched} " if DATA else ""
# Convergence and quality ask "not worse" (one-sided) unless the config asks "the same" (two-sided).
TWO_SIDED = "--two-sided " if CFG["thresholds"]["two_sided"] else ""
# One report per preset and results folder: a smoke try never overwrites the default
# study's report, nor a second results folder the first one's (preflight.report_folder).
REPORT_DIR = report_folder(CFG)
REPORTS = expand(f"{REPORT_DIR}/validation.{{ext}}", ext=["json", "md", "html"])

# Cheap bookkeeping runs on the submitting host, not through the cluster queue.
localrules:
    resolved_config,
    mlflow_parent,
    publish_report,


wildcard_constraints:
    arm=ARM_PATTERN,
    item="|".join(CHECK_ITEMS),
    split="train|test",
    condition="|".join(re.escape(c) for c in CONDITIONS) or "(?!)",


def all_cores():
    """This invocation's --cores (the benchmark job runs alone on all of them); 1 when the
    command gives none (`snakemake --report`, `--lint`), which then runs no job."""
    try:
        return workflow.cores
    except WorkflowError:
        return 1


MACHINE_CORES = usable_cores()


def cpus(n):
    """The threads a job that uses ``n`` CPUs declares (ptycho.study.schedule.declared_threads):
    scaled so that Snakemake, which sums declared threads against --cores, never runs
    more threads than this machine has, whatever --cores says. On a cluster the
    scheduler gives each job its own CPUs: the figure is then ``n`` (or set-threads)."""
    return declared_threads(n, all_cores(), MACHINE_CORES) if workflow.local_exec else n


def trainings_at_once():
    """How many trainings this invocation runs at once (the benchmark's shared context
    reproduces it); one on a cluster, where each job has its own CPUs."""
    return concurrent_jobs(CFG["train_threads"], all_cores(), MACHINE_CORES) if workflow.local_exec else 1


def tf_threads(wildcards, threads):
    """The threads a job really uses, from the figure it was given (the inverse of cpus)."""
    return job_threads(threads, all_cores(), MACHINE_CORES) if workflow.local_exec else threads


def flags(section, *without):
    """'--key value' for every key of a config section (the CLI's own option names), quoted;
    ``without``: keys left out (the probe refinement has no engine to choose)."""
    return cli_flags({k: v for k, v in CFG[section].items() if k not in without})


# The products' geometry (ptycho/study/products.py): the config's cxi section, the data's own
# when simulated, assumed (and said so in each product's comments) for the user's own data.
PRODUCT_GEOMETRY = flags("cxi") + (" --assumed-geometry" if DATA else "")


def model_flags(section, wildcards):
    """'--key value' for the model or train section as the arm's model sees it (per_model)."""
    return cli_flags(section_for(CFG, section, parse_arm(wildcards.arm).model))


def _train_cost(arm):
    """A training's expected cost: epochs x its step's relative time, measured with two
    1-thread jobs at once: the records' cost fields (Method, Mode, Precision)."""
    epochs = section_for(CFG, "train", arm.model)["epochs"]
    return epochs * method_of(arm.model).cost * MODE_RECORDS[arm.mode].cost * PRECISION_RECORDS[arm.precision].cost


def train_priority(wildcards):
    """Longest groups first, seeds in order, the slower mode of a seed first, so that each
    XLA arm trains beside its off pair (ptycho.study.schedule.training_priority), by the
    trainings' seconds this machine's calibration expects, or the records' cost fields."""
    def seconds(arm):
        found = CALIBRATED.get((arm.model, arm.mode, arm.precision))
        return _train_cost(arm) if found is None else found

    return training_priority(parse_arm(wildcards.arm), [parse_arm(a) for a in ARMS], seconds)


def resolved_inputs(wildcards, inputs):
    """A rule's inputs as plain paths: its input functions (a study with looks has some) called."""
    out = []
    for item in inputs:
        if callable(item):
            item = item(wildcards)
        out += [item] if isinstance(item, str) else resolved_inputs(wildcards, item)
    return out


def tracking(rule_name, **tags):
    """CLI options that make a job a child run of this pipeline's MLflow parent run.

    The config hash is not passed here: as a param it would re-run every job on any
    config change; the CLI tags it from the resolved config file at run time instead.
    """
    tags = dict(tags, rule=rule_name)
    return f"--mlflow-parent {PARENT} " + " ".join(f"--mlflow-tag {k}={v}" for k, v in tags.items())


def arm_tags(wildcards):
    """MLflow tags of one arm of the matrix (model, xla, precision, seed), from the {arm} wildcard."""
    return parse_arm(wildcards.arm).tags


# How long the study will take on this machine, before its first job (a dry run too): a
# calibration of a few steps of every arm, cached per machine and config
# (ptycho.study.estimate). Not for the commands that run no job (--lint, --unlock, a
# report), which give no --cores; PTYCHO_CALIBRATE=0 skips it.
NO_JOB_FLAGS = {"--lint", "--unlock", "--report", "--summary", "--detailed-summary", "--list-rules", "--dag", "--rulegraph",
                "--filegraph", "--cleanup-metadata", "--list-changes", "--touch", "--delete-all-output", "--delete-temp-output"}
try:
    RUNS_JOBS = workflow.cores > 0 and not NO_JOB_FLAGS & set(sys.argv)
except WorkflowError:  # no --cores: a command that runs no job
    RUNS_JOBS = False


def _command_options():
    """This command's options as Snakemake reads them (a profile's too), or None where the
    workflow is not parsed from Snakemake's own command line (in-process, as tests do)."""
    import contextlib
    import io

    from snakemake.cli import parse_args

    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return parse_args(sys.argv[1:])[1]
    except (SystemExit, Exception):
        return None


# A run that makes files: not a dry run (-n), --touch, a command that runs no job, or a
# workflow parsed outside Snakemake's command line.
OPTIONS = _command_options() if workflow.is_main_process and RUNS_JOBS else None
MAKES_FILES = OPTIONS is not None and not (OPTIONS.dryrun or OPTIONS.touch)
if workflow.is_main_process and RUNS_JOBS:
    from ptycho.study.estimate import announce

    for line in announce(CFG, CFG["results"], trainings_at_once(), min(CFG["train_threads"], MACHINE_CORES), HARDWARE, record=MAKES_FILES):
        sys.stderr.write(f"ptycho workflow: {line}\n")
# The looks of a study that adds seeds until it decides (config max_seeds, rules/looks.smk):
# ARMS are the first look's; each seeded check judges at the level of the look its item decided at. With
# max_seeds: auto, the cap announce recorded for this study, or this machine's calibration
# fits in the budget (none: no looks).
LOOKS = look_plan(CFG, seed_cap(CFG, R, trainings_at_once(), min(CFG["train_threads"], MACHINE_CORES)))
if workflow.is_main_process and RUNS_JOBS and LOOKS.sequential:
    from ptycho.study.looks import replanned

    if (_replanned := replanned(R, LOOKS)):
        sys.stderr.write(f"ptycho workflow: warning: {_replanned}\n")
# Each planned training's seconds by the calibration announce made (empty without one).
CALIBRATED = calibrated_training_s(CFG, trainings_at_once(), min(CFG["train_threads"], MACHINE_CORES)) if workflow.is_main_process and RUNS_JOBS else {}
