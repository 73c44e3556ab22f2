"""MLflow tracking for pipeline jobs: one parent run per study, one child run per job.

The Snakemake pipeline runs each job as its own ``ptycho`` process, up to eight at once,
all writing to the same tracking store, through :class:`mlflow.tracking.MlflowClient`
with explicit run ids (never ``mlflow.start_run``'s process-global stack).

* :mod:`~ptycho.tracking.store`: the URI, opening the store once, retries on locks, the
  server's probes, the experiment, a store that moved;
* :mod:`~ptycho.tracking.journal`: the journal file, written and read in one place;
* :mod:`~ptycho.tracking.record`: what a job logs (``JobRecord``) and each kind of write,
  its journal line and how MLflow receives it (``KINDS``): a new kind is one entry there;
* :mod:`~ptycho.tracking.access`: can runs be recorded there (one line before a long job),
  is a study's store damaged or lost (one line before the workflow's first job);
* :mod:`~ptycho.tracking.provenance`: commit, config hash, source tags, owning process;
* :mod:`~ptycho.tracking.runs`: a job's child run (journaled, offline-capable), a
  record logged on it, system metrics;
* :mod:`~ptycho.tracking.parent`: the study's parent run, its children's table, stale runs
  (replayed if journaled, else KILLED) and orphan parents;
* :mod:`~ptycho.tracking.replay`: journals sent again, or a lost store rebuilt from them;
* :mod:`~ptycho.tracking.job`: a command's child run, opened around it (``--mlflow-parent``).

MLflow is imported inside the functions, so importing this package is cheap.
"""

from ptycho.tracking.access import follow_folder, pinn_arm_runs, preflight, preflight_environment, preflight_store
from ptycho.tracking.job import job_run
from ptycho.tracking.journal import journaled_parent, parent_record
from ptycho.tracking.parent import (
    END_STATUSES,
    Swept,
    close_pipeline,
    end_orphan_parents,
    finish_run,
    finish_study,
    log_children_table,
    start_parent,
    start_pipeline,
    sweep_children,
    sweep_study,
)
from ptycho.tracking.provenance import (
    HOST_TAG,
    PID_START_TAG,
    PID_TAG,
    config_hash,
    git_commit,
    process_identity,
    source_tags,
)
from ptycho.tracking.record import END_REASON_TAG
from ptycho.tracking.replay import Replayed, journal_files, journal_folders, rebuild, replay_journals
from ptycho.tracking.runs import NONFINITE_TAG, Run, child_run, existing_run, system_metrics
from ptycho.tracking.store import JOURNAL_TAG, default_tracking_uri, ensure_store, flatten_params
