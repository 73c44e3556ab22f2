# Does XLA make physics-informed ptychographic reconstruction faster without making it worse?
#
#   snakemake --cores 8 all                        # the default study (about 35 min on 2 cores)
#   snakemake --cores 8 all --config preset=smoke  # the whole pipeline in minutes
#
# simulate -> train (model x xla x seed) -> infer -> stitch -> evaluate
#          -> solve (the iterative solver, every XLA mode; warm-started from the networks)
#          -> conditions (other doses, overlaps, losses: accuracy, gradients, the networks, the solver)
#          -> checklist (accuracy, gradients, convergence, quality, speedup) -> report


import os


# The work folder's config.yaml, else the one beside this Snakefile (a run with -d elsewhere).
configfile: "config.yaml" if os.path.exists("config.yaml") else os.path.join(workflow.basedir, "config.yaml")


include: "rules/common.smk"
include: "rules/simulate.smk"
include: "rules/train.smk"
include: "rules/infer.smk"
include: "rules/evaluate.smk"
include: "rules/looks.smk"
include: "rules/checks.smk"
include: "rules/solve.smk"
include: "rules/conditions.smk"
include: "rules/report.smk"
include: "rules/rerun.smk"


rule all:
    default_target: True
    input:
        REPORTS,
        DATASETS,
        FINAL_PRODUCTS,
        SOLVER_PRODUCTS,
        # A hole asked for by name is made, and every job downstream of it sees an
        # updated input and runs again: as --forcerun would, for the lost files only.
        HOLES,


rule datasets:
    input:
        DATASETS,


rule models:  # every arm trained (with looks: the seeds of the look that stopped)
    input:
        FINAL_MODELS,


rule metrics:  # every arm reconstructed, stitched and scored
    input:
        FINAL_METRICS,


onsuccess:
    # The answer, where `make all` ends: the verdict, XLA's speed, XLA's quality, the
    # precision's effect, and the report's path (when this run has a report).
    if os.path.exists(f"{REPORT_DIR}/validation.json"):
        from ptycho.study.report import print_answer

        print_answer(f"{REPORT_DIR}/validation.json")


onerror:
    # The parent run ends FAILED after a sweep (below), so that a killed job's run does not
    # stay RUNNING until the next start; with the tracking server gone, one line names the replay.
    shell(f"{SELF} track finish --parent {PARENT} --status FAILED || true")


onstart:
    # This results folder's own lock (ptycho.study.run_lock), before any job and held until
    # Snakemake exits: a second run here, even after `snakemake --unlock`, is one line
    # naming the live one. Taken here, not at parse time: a dry run, --unlock or --lint
    # (which parse too, and run no hook) must not be refused while a run is live.
    try:
        RUN_LOCK.append(run_lock.hold(R))
        run_lock.check_no_live_jobs(R)  # the jobs of a Snakemake killed outright, still ending
    except PtychoError as err:
        sys.stderr.write(f"ptycho workflow: error: {err}\n")
        raise SystemExit(2)
    # Room on the results folder's device: on a full disk even the jobs' logs are lost.
    DISK_ERROR, DISK_WARNING = disk_lines(R, disk_bytes(CFG))
    if DISK_ERROR:
        sys.stderr.write(f"ptycho workflow: error: {DISK_ERROR}\n")
        raise SystemExit(2)
    if DISK_WARNING:
        sys.stderr.write(f"ptycho workflow: warning: {DISK_WARNING}\n")
    # An address-space limit (ulimit -v) the trainings cannot run under; here, where the
    # executor is known: a cluster's nodes do not share the submitting host's limit.
    if workflow.local_exec and (TOO_LITTLE := address_space_error(CFG)):
        sys.stderr.write(f"ptycho workflow: error: {TOO_LITTLE}\n")
        raise SystemExit(2)
    # Each training records the schedule it ran in (schedule.AT_ONCE_ENV): through the
    # environment, not a param, so that a rerun with another --cores trains nothing again;
    # set here, where the executor is known (at parse time a cluster run looks local), and
    # inherited by every job, local or submitted.
    os.environ[AT_ONCE_ENV] = str(trainings_at_once())
    # A job killed outright (kill -9, out of memory) cannot close its MLflow run: before
    # any job starts, runs of earlier attempts whose process is gone are marked KILLED
    # with the reason as a tag, and runs whose job went on without the tracking server
    # get their journal replayed instead (each job also does this when it starts).
    if os.path.exists(PARENT):
        shell(f"{SELF} track sweep --parent {PARENT} || true")
        # A parent run is one study: after a config change, a new one (the old keeps its
        # params and verdict; parent.json keeps its time, so no finished job re-runs).
        shell(f"{SELF} track start --renew --out {PARENT} || true")
