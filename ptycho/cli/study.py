"""Study commands: bench, scaling, check, look, condition, figures, report, config, machines."""

from __future__ import annotations

import argparse
import dataclasses

from ptycho.cli.declare import Live, arg, command
from ptycho.cli.values import (
    error_rate,
    fraction,
    json_object,
    mode,
    nonnegative_int,
    positive,
    positive_int,
    precision,
    study_config,
)
from ptycho.config import choices, spec
from ptycho.nets.models import LOSSES, MODEL_KINDS, POOLINGS, SUBJECT
from ptycho.nets.precision import PRECISIONS
from ptycho.nets.xla import COMPARED, MODES, REFERENCE
from ptycho.study import checklist, jobs
from ptycho.study.conditions import CONDITIONS
from ptycho.study.results import StudyResults
from ptycho.tracking.record import JobRecord

_PRESET = spec("preset")["default"]
#: The study's configuration, as ``scaling`` and ``bench`` read it (flags override it).
STUDY = (
    arg(
        "--config",
        help="the study's config (default: the workflow's resolved config inside a job, PTYCHO_CONFIG_JSON; "
        "else config.yaml)",
    ),
    arg("--preset", help=f"its preset to time (default: the workflow's, else {_PRESET})"),
)


def _study(args: argparse.Namespace) -> dict:
    """The study's resolved config: a job of the workflow reads the one the workflow resolved
    (``PTYCHO_CONFIG_JSON``: its config file, preset and command line, wherever the job runs:
    ``snakemake -s <checkout>/Snakefile -d <folder>`` has no config.yaml in the folder);
    otherwise ``--config`` (default config.yaml) at ``--preset``."""
    import os

    given = os.environ.get("PTYCHO_CONFIG_JSON") if args.config is None else None
    if given:
        config = json_object(given, "PTYCHO_CONFIG_JSON", "unset it or pass --config")
        if args.preset in (None, config.get("preset")):
            return config
    return study_config(args.config or "config.yaml", args.preset or _PRESET)


#: ``bench`` flags that override the study's ``model`` section (every model's).
_SHAPE = ("filters", "pooling", "depth", "mixing", "loss")
_STUDY_DEFAULT = "(default: the study's)"


@command(
    "bench",
    "time every XLA mode and precision vs off at float32: compile, step alone and shared, components, "
    "memory, inference, FLOP/s against the machine's peak",
    *STUDY,
    arg("--dataset", help="dataset to time on (default: simulate the study's train split)"),
    arg("--object-size", type=int, help=f"object side when simulating {_STUDY_DEFAULT}"),
    arg("--n", type=int, help=f"patch side when simulating {_STUDY_DEFAULT}"),
    arg(
        "--models",
        nargs="+",
        choices=MODEL_KINDS,
        help="models to time (default: the study's bench.models, else models)",
    ),
    arg("--filters", type=int, help=f"encoder filters {_STUDY_DEFAULT}"),
    arg("--pooling", choices=POOLINGS, help=f"encoder pooling {_STUDY_DEFAULT}"),
    arg("--depth", type=int, help=f"encoder pooling levels {_STUDY_DEFAULT}"),
    arg("--mixing", type=int, help=f"code mixing layers {_STUDY_DEFAULT}"),
    arg("--loss", choices=LOSSES, help=f"PINN loss {_STUDY_DEFAULT}"),
    arg(
        "--like",
        nargs="+",
        metavar="MODEL_JSON",
        help="time the architecture, loss and batch size of these trained models (model.json), "
        "instead of --filters/--pooling/--depth/--mixing/--loss/--batch-size",
    ),
    arg("--batch-size", type=int, help=f"training batch {_STUDY_DEFAULT}"),
    arg(
        "--modes",
        nargs="+",
        type=mode,
        help=f"XLA modes to time ({', '.join(MODES)}); {REFERENCE} is always added (default: the study's bench.xla, else xla)",
    ),
    arg(
        "--precisions",
        nargs="+",
        type=precision,
        help=f"network precisions to time ({', '.join(PRECISIONS)}); float32 is always added "
        "(default: the study's bench.precision, else precision)",
    ),
    arg("--warmup", type=int, help="untimed steps first (default: the study's bench.warmup)"),
    arg("--repeats", type=int, help="timed steps per arm and context (default: the study's bench.repeats)"),
    arg("--component-repeats", type=int, help="timed calls of each step component (default: the benchmark's)"),
    arg("--threads-alone", type=int, help="intra-op threads per arm alone (default: all cores)"),
    arg(
        "--shared-threads",
        type=int,
        help="intra-op threads per arm in the pipeline's schedule (default: the study's train_threads)",
    ),
    arg(
        "--shared-jobs",
        type=positive_int,
        help="arms stepping at once in the shared context: the trainings the workflow runs at once "
        "(default: every arm at once)",
    ),
    arg("--no-shared", action="store_true", help="time the arms alone only"),
    arg(
        "--train-batches",
        nargs="*",
        type=positive_int,
        help="training batch sizes timed beside the study's, alone (default: the study's bench.train_batches)",
    ),
    arg(
        "--infer-batches",
        nargs="*",
        type=positive_int,
        help="inference batch sizes timed beside the study's (default: the study's bench.infer_batches)",
    ),
    arg(
        "--batch-repeats",
        type=int,
        help="timed calls per arm and batch size (default: the study's bench.batch_repeats)",
    ),
    arg(
        "--sweep-precisions",
        nargs="+",
        type=precision,
        help="the precisions whose arms the batch sweep times (default: those the study trains the PINN at)",
    ),
    arg("--out", output=True, help="also write the full result as JSON"),
    system_metrics=True,  # TensorFlow runs in its workers
)
def cmd_bench(args: argparse.Namespace, live: Live) -> JobRecord:
    from ptycho.config import SimulationConfig, from_dict
    from ptycho.study import workflow
    from ptycho.study.bench import BenchConfig

    study = _study(args)
    bench_models, bench_modes, bench_precisions = workflow.bench_lists(study)
    kinds = args.models or bench_models
    shape = {k: getattr(args, k) for k in _SHAPE if getattr(args, k) is not None}
    models = [dataclasses.replace(workflow.model_config(study, k), **shape) for k in kinds]
    train_cfg = workflow.train_config(study, REFERENCE, 0, kinds[0])
    if args.batch_size is not None:
        train_cfg = dataclasses.replace(train_cfg, batch_size=args.batch_size)
    given = {
        "warmup": study["bench"]["warmup"] if args.warmup is None else args.warmup,
        "repeats": study["bench"]["repeats"] if args.repeats is None else args.repeats,
        "component_repeats": args.component_repeats,
        "threads": args.threads_alone,
        "shared_threads": study["train_threads"] if args.shared_threads is None else args.shared_threads,
        "shared_jobs": args.shared_jobs,
        "train_batches": tuple(study["bench"]["train_batches"] if args.train_batches is None else args.train_batches),
        "infer_batches": tuple(study["bench"]["infer_batches"] if args.infer_batches is None else args.infer_batches),
        "batch_repeats": study["bench"]["batch_repeats"] if args.batch_repeats is None else args.batch_repeats,
        "sweep_precisions": tuple(args.sweep_precisions or workflow.arm_lists(study, SUBJECT)[1]),
    }
    config = BenchConfig(shared=not args.no_shared, **{k: v for k, v in given.items() if v is not None})
    sim = None
    if not args.dataset:
        size = {k: getattr(args, k) for k in ("n", "object_size") if getattr(args, k) is not None}
        sim = from_dict(SimulationConfig, {**study["simulation"], **size}, "simulation")
    modes = args.modes or bench_modes
    precisions = args.precisions or bench_precisions
    return jobs.bench(
        args.dataset, args.like or (), models, train_cfg, modes, config, args.out, precisions=precisions, sim=sim
    )


@command(
    "scaling",
    "time simulation, one training epoch and stitching at several data sizes",
    *STUDY,
    arg("--sizes", nargs="+", type=int, default=[1, 2, 4], help="objects per split (default: 1 2 4)"),
    arg("--out", output=True, help="also write the result as JSON"),
    tensorflow=True,
)
def cmd_scaling(args: argparse.Namespace, live: Live) -> JobRecord:
    study = _study(args)
    return jobs.scaling(study, study["preset"], args.sizes, args.out)


@command(
    "config",
    "write a resolved configuration (JSON text) to a file, atomically",
    arg("--json", required=True, help="the configuration, a JSON object"),
    arg("--out", required=True, output=True),
)
def cmd_config(args: argparse.Namespace, live: Live) -> JobRecord:
    from ptycho.artifacts import write_json

    config = json_object(args.json, "--json", "pass a JSON object")
    write_json(args.out, config)
    return JobRecord(summary=f"{args.out}: resolved configuration (preset {config.get('preset', '?')})")


@command(
    "check",
    "measure and judge one validation checklist item",
    arg("item", choices=checklist.names()),
    arg("--threshold", type=float, required=True),
    arg("--models", nargs="*", default=[], help="model.json files (accuracy, convergence, quality, speedup)"),
    arg("--dataset", help="test split the trained models are run on (accuracy)"),
    arg("--metrics", nargs="*", default=[], help="metrics JSON files (quality)"),
    arg(
        "--stitched",
        nargs="*",
        default=[],
        help="stitched objects of every arm (quality on measured data: each arm against its reference arm)",
    ),
    arg("--bench", help="bench JSON (speedup)"),
    arg(
        "--loss", choices=LOSSES, default=checklist.Inputs.loss, help="PINN loss (gradients; the study passes its own)"
    ),
    arg(
        "--nphotons",
        type=positive,
        default=checklist.Inputs.nphotons,
        help="mean photons per pattern of the batch the gradients are checked on (gradients; the study passes its own)",
    ),
    arg(
        "--modes",
        nargs="+",
        type=mode,
        default=list(COMPARED),
        help=f"XLA modes compared with {REFERENCE} (accuracy, gradients; default: all)",
    ),
    arg(
        "--precisions",
        nargs="+",
        type=precision,
        default=["float32"],
        help="network precisions (accuracy, gradients: modes compared at each; each reduced one vs float32)",
    ),
    arg(
        "--precision-threshold",
        type=float,
        help="limit of every reduced-precision comparison, in unit round-offs of the precision (accuracy, "
        "gradients; default: the schema's thresholds.<item>_precision_roundoffs)",
    ),
    arg(
        "--context",
        choices=choices("bench.context"),
        default=spec("bench.context")["default"],
        help="the benchmark context the speedup verdict falls back on when no XLA pair was trained (speedup)",
    ),
    arg(
        "--margin",
        type=fraction,
        default=checklist.Inputs.margin,
        help="the study's relative margin (it passes thresholds.convergence_max_rel): the time-to-quality target, "
        "the reference's final validation loss above its floor plus this fraction of its loss drop (speedup); on "
        "measured data, how much worse an arm's data misfit and half-scan resolution may be (quality)",
    ),
    arg(
        "--alpha",
        type=error_rate,
        default=checklist.Inputs.alpha,
        help="the error rate of each verdict, one-sided (it passes thresholds.alpha): quality and convergence judge "
        "by the 1 - 2 alpha and 1 - alpha intervals, speed by the 1 - alpha one (default: %(default)s)",
    ),
    arg(
        "--two-sided",
        action="store_true",
        help="judge convergence and quality as equivalence within +-threshold (default: non-inferiority, "
        "not worse by more than the threshold; the study passes thresholds.two_sided)",
    ),
    arg("--out", required=True, output=True),
    tensorflow=lambda args: checklist.get(args.item).measures,
)
def cmd_check(args: argparse.Namespace, live: Live) -> JobRecord:
    return jobs.check(
        args.item,
        args.threshold,
        args.out,
        results=StudyResults(
            models=args.models or (),
            metrics=args.metrics or (),
            stitched=args.stitched or (),
            dataset=args.dataset,
            bench=args.bench,
        ),
        modes=args.modes,
        precisions=args.precisions,
        precision_threshold=args.precision_threshold,
        loss=args.loss,
        nphotons=args.nphotons,
        context=args.context,
        margin=args.margin,
        two_sided=args.two_sided,
        alpha=args.alpha,
    )


@command(
    "look",
    "one look of a study that adds seeds until it decides: convergence, quality and speed judged on the seeds "
    "so far at the plan's level for that look, and whether to stop or which seeds to add",
    arg("--index", type=nonnegative_int, required=True, help="the look's number, from 0"),
    arg("--plan", required=True, help="JSON object of the plan: seeds per model, max_seeds, seeds_per_look, alpha"),
    arg("--models", nargs="+", required=True, help="model.json files of the look's trained arms"),
    arg("--metrics", nargs="+", required=True, help="metrics JSON files of the look's arms"),
    arg("--stitched", nargs="*", default=[], help="stitched objects of every arm (measured data)"),
    arg("--thresholds", default="{}", help="JSON object of the study's thresholds (default: the schema's)"),
    arg(
        "--margin", type=fraction, default=checklist.Inputs.margin, help="the study's relative margin (check --margin)"
    ),
    arg("--two-sided", action="store_true", help="judge convergence and quality as equivalence (check --two-sided)"),
    arg("--previous", help="the look before's record (.json): the items it had decided keep their decision"),
    arg("--out", required=True, output=True, help="the look's record (.json)"),
)
def cmd_look(args: argparse.Namespace, live: Live) -> JobRecord:
    return jobs.look(
        args.index,
        json_object(args.plan, "--plan", "pass the plan as JSON (ptycho.study.looks.Plan.to_json)"),
        json_object(args.thresholds, "--thresholds", "pass the study's thresholds section as JSON"),
        args.out,
        previous=args.previous,
        results=StudyResults(models=args.models, metrics=args.metrics, stitched=args.stitched or ()),
        margin=args.margin,
        two_sided=args.two_sided,
    )


@command(
    "condition",
    "the cheap checks at one condition (dose, overlap, loss): the trained networks' accuracy at inference and "
    "the loss gradients under every XLA mode and precision, and the networks applied to its test split, scored",
    arg("--name", required=True, choices=sorted(CONDITIONS), help="the condition (ptycho/study/conditions.py)"),
    arg("--dataset", required=True, help="the condition's test split (.h5, 'ptycho simulate --test')"),
    arg("--models", nargs="+", required=True, help="model.json files of the study's trained arms"),
    arg("--modes", nargs="+", type=mode, default=list(COMPARED), help=f"XLA modes compared with {REFERENCE}"),
    arg("--precisions", nargs="+", type=precision, default=["float32"], help="network precisions"),
    arg(
        "--thresholds",
        default="{}",
        help="JSON object of the study's thresholds (accuracy_max_abs, gradients_max_rel and their "
        "*_precision_roundoffs; default: the schema's)",
    ),
    arg("--out", required=True, output=True, help="the condition's record (.json)"),
    tensorflow=True,
)
def cmd_condition(args: argparse.Namespace, live: Live) -> JobRecord:
    return jobs.condition(
        args.name, args.dataset, args.models, args.out, modes=args.modes, precisions=args.precisions,
        thresholds=json_object(args.thresholds, "--thresholds", "pass the study's thresholds section as JSON"),
    )  # fmt: skip


_SOLVER_HELP = "'ptycho solve' records: every mode from a flat start, then (optional) the warm starts"


@command(
    "figures",
    "draw the report's figures (PNG) from the pipeline's outputs",
    arg("--dataset", required=True, help="the test split (ground truth)"),
    arg("--stitched", nargs="+", required=True, help=".npz files written by 'ptycho stitch'"),
    arg("--metrics", nargs="+", required=True, help="metrics JSON files (FRC curves)"),
    arg("--models", nargs="+", required=True, help="model.json files of the arms (loss curves)"),
    arg("--bench", required=True, help="the benchmark's JSON (step times, speedup intervals)"),
    arg("--out-dir", required=True, output="folder"),
    arg("--solver", nargs="*", help=_SOLVER_HELP),
    arg("--reconstructions", nargs="*", help="'ptycho infer' outputs: the networks' seconds per object"),
)
def cmd_figures(args: argparse.Namespace, live: Live) -> JobRecord:
    results = StudyResults(
        models=args.models,
        metrics=args.metrics,
        stitched=args.stitched,
        reconstructions=args.reconstructions or (),
        dataset=args.dataset,
        bench=args.bench,
        solver=args.solver or (),
    )
    return jobs.figures(results, args.out_dir)


@command(
    "report",
    "assemble validation.{json,md,html} in --out-dir (the workflow writes results/<preset>/report/, "
    "then 'publish-report' copies it to reports/<preset>)",
    arg("--checks", nargs="+", required=True),
    arg("--metrics", nargs="+", required=True),
    arg("--models", nargs="+", required=True),
    arg("--reconstructions", nargs="*"),
    arg("--figures", nargs="*", help="PNG files written by 'ptycho figures' (embedded in the HTML)"),
    arg("--config-json", required=True),
    arg("--out-dir", default="reports", output="folder"),
    arg("--finish-parent", help="parent JSON: attach the report and mark the parent run FINISHED"),
    arg("--benchmarks", help="folder of the jobs' Snakemake benchmark TSVs: the report says where the time went"),
    arg("--solver", nargs="*", help=_SOLVER_HELP),
    arg(
        "--conditions",
        nargs="*",
        help="the conditions' records: <condition>/check.json ('ptycho condition') and <condition>/solve.json",
    ),
    arg("--probe", help="'ptycho refine-probe' record: measured data's probe, refined by the solver"),
    arg("--looks", nargs="*", help="'ptycho look' records of a study that added seeds until it decided"),
)
def cmd_report(args: argparse.Namespace, live: Live) -> JobRecord:
    from ptycho.artifacts import read_json

    parent = read_json(args.finish_parent) if args.finish_parent else {}
    results = StudyResults(
        models=args.models,
        metrics=args.metrics,
        reconstructions=args.reconstructions or (),
        checks=args.checks,
        solver=args.solver or (),
        conditions=args.conditions or (),
        probe=args.probe,
        looks=args.looks or (),
    )
    return jobs.report(results, args.figures or (), args.benchmarks, read_json(args.config_json), args.out_dir, parent)


@command(
    "publish-report",
    "copy a finished report (validation.{json,md,html}) into place, atomically: the workflow's last step, "
    "so that a failed report job never deletes the previous report",
    arg("--report-dir", required=True, help="the folder 'ptycho report' wrote (the results folder's report/)"),
    arg("--out-dir", required=True, output="folder", help="where the report is read (reports/<preset>)"),
)
def cmd_publish_report(args: argparse.Namespace, live: Live) -> JobRecord:
    from ptycho.study.report import publish

    paths = publish(args.report_dir, args.out_dir)
    return JobRecord(summary=f"{paths['html']}: report published from {args.report_dir}")


@command(
    "machines",
    "set the study's answers from runs on different machines side by side, per machine kind: XLA vs off at the "
    "same precision, the precision's own effect, quality, verdict and the setting resolved (a Markdown table)",
    arg(
        "sources",
        nargs="+",
        metavar="SOURCE",
        help="a results folder (results, results/default), a report folder or its validation.json, or an MLflow "
        "tracking URI (sqlite:///results/mlflow.db, http://host:5000) whose finished parent runs carry the report",
    ),
    arg("--preset", help="only the reports of this preset (a store or results folder may hold several studies)"),
    arg("--out", output=True, help="also write the table to this Markdown file"),
    arg("--json", output=True, metavar="FILE", help="also write the rows and recommendations to this JSON file"),
)
def cmd_machines(args: argparse.Namespace, live: Live) -> JobRecord:
    from ptycho.study import machines

    reports = machines.load(args.sources, preset=args.preset)
    return JobRecord(summary=machines.write(reports, args.out, args.json).rstrip("\n"))
