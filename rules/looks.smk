# Seeds added until the verdict decides (ptycho/study/looks.py; config max_seeds): a
# checkpoint per look. Look k judges convergence, quality and speed on the seeds so far at
# the look's own level (alpha spent over the looks planned); while one is
# INCONCLUSIVE it names seeds to add, Snakemake trains, scores and looks again, and the
# figures and the report read the arms of the look that stopped (FINAL_*), each seeded
# check those of the look its item decided at (per_item_arm). Without
# max_seeds there is no look and nothing here runs.
from ptycho.artifacts import read_json
from ptycho.study.looks import Look, arms_with_seeds, deciding


def _look(k):
    """Look k's record (Snakemake runs the look first when it is not made yet)."""
    return Look.from_json(read_json(checkpoints.look.get(k=k).output[0], "look"))


def look_arms(k):
    """The arms look k judges: the configured ones at the first look, then the seeds the look before named."""
    return ARMS if k == 0 else arms_with_seeds(ARMS, _look(k - 1).next_seeds)


def _last_look():
    """The look that stopped the study (Snakemake runs each one before it until then)."""
    k = 0
    while not (look := _look(k)).stop:
        k += 1
    return look


def looks_taken():
    """The records of the looks up to the one that stopped the study (none without max_seeds)."""
    return [f"{R}/looks/{i}.json" for i in range(_last_look().index + 1)] if LOOKS.sequential else []


def final_arms():
    """The arms the figures and report show: the configured ones, or the seeds of the look that stopped."""
    return arms_with_seeds(ARMS, _last_look().seeds) if LOOKS.sequential else ARMS


def per_final_arm(pattern):
    """``pattern`` for each arm the verdict judges: a list without looks, else an input function."""
    if not LOOKS.sequential:
        return expand(pattern, arm=ARMS)
    return lambda w: expand(pattern, arm=final_arms())


FINAL_MODELS = per_final_arm(f"{R}/models/{{arm}}/model.json")
FINAL_METRICS = per_final_arm(f"{R}/metrics/{{arm}}.json")
FINAL_STITCHED = per_final_arm(f"{R}/stitched/{{arm}}.npz")
FINAL_RECONSTRUCTIONS = per_final_arm(f"{R}/reconstructions/{{arm}}.npz")
FINAL_PRODUCTS = per_final_arm(f"{R}/products/{{arm}}")
LOOK_RECORDS = (lambda w: looks_taken()) if LOOKS.sequential else []
LOOKS_FLAG = "--looks {input.looks} " if LOOKS.sequential else ""


def _deciding(item):
    """The look whose seeds and level judge a seeded item (convergence, quality, speedup):
    the one it decided at, else the one that stopped the study (ptycho.study.looks.deciding)."""
    return deciding([_look(i) for i in range(_last_look().index + 1)], item)


def per_item_arm(pattern, item):
    """``pattern`` for each arm whose seeds judge ``item``: a list without looks, else an input function."""
    if not LOOKS.sequential:
        return expand(pattern, arm=ARMS)
    return lambda w: expand(pattern, arm=arms_with_seeds(ARMS, _deciding(item).seeds))


def item_alpha(item):
    """The error rate ``item``'s check judges at: the study's alpha, or the level of the look that decides it."""
    return (lambda w: LOOKS.level(_deciding(item).index)) if LOOKS.sequential else LOOKS.alpha


# Only with max_seeds: a checkpoint in the workflow, even one nothing asks for, makes
# Snakemake ignore --allowed-rules (tests/test_workflow_guards.py runs the report job alone).
if LOOKS.sequential:

    checkpoint look:
        input:
            models=lambda w: expand(f"{R}/models/{{arm}}/model.json", arm=look_arms(int(w.k))),
            metrics=lambda w: expand(f"{R}/metrics/{{arm}}.json", arm=look_arms(int(w.k))),
            stitched=lambda w: expand(f"{R}/stitched/{{arm}}.npz", arm=look_arms(int(w.k))) if DATA else [],
            previous=lambda w: [f"{R}/looks/{int(w.k) - 1}.json"] if int(w.k) > 0 else [],
            parent=PARENT,
        output:
            f"{R}/looks/{{k}}.json",
        log:
            f"{R}/logs/looks/{{k}}.log",
        benchmark:
            f"{R}/benchmarks/looks/{{k}}.tsv"
        wildcard_constraints:
            k=r"\d+",
        threads: cpus(1)
        resources:
            mem_mb=2000,
            runtime=10,
        params:
            ptycho=PTYCHO,
            track=lambda w: tracking("look", look=w.k),
            plan=json.dumps(LOOKS.to_json(), sort_keys=True),
            levels=LOOKS.levels,  # the levels it judges at; judged at others, a look is made again
            thresholds=json.dumps(CFG["thresholds"], sort_keys=True),
            margin=CFG["thresholds"]["convergence_max_rel"],
            sided=TWO_SIDED,
            stitched=lambda w, input: f"--stitched {' '.join(input.stitched)} " if input.stitched else "",
            previous=lambda w, input: f"--previous {input.previous} " if input.previous else "",
            **rerun_params("look"),
        conda:
            "../envs/ptycho.yaml"
        shell:
            "{params.ptycho} {params.track} look --index {wildcards.k} --plan {params.plan:q} --thresholds {params.thresholds:q} "
            "--margin {params.margin} {params.sided}{params.previous}--models {input.models} --metrics {input.metrics} {params.stitched}"
            "--out {output} > {log} 2>&1"
