# The validation checklist: one job, one JSON record per item (ptycho/study/checklist/<item>.py).
# Rule names are the commands they run (check <item>) and the runs' MLflow "rule" tags.


rule check_accuracy:
    input:
        models=MODELS,
        data=f"{R}/data/test.h5",
        parent=PARENT,
    output:
        f"{R}/checks/accuracy.json",
    log:
        f"{R}/logs/checks/accuracy.log",
    benchmark:
        f"{R}/benchmarks/checks/accuracy.tsv"
    threads: cpus(1)
    resources:
        mem_mb=3000,
        runtime=15,
    params:
        ptycho=PTYCHO,
        track=tracking("check_accuracy"),
        threshold=CFG["thresholds"]["accuracy_max_abs"],
        roundoffs=CFG["thresholds"]["accuracy_precision_roundoffs"],
        modes=XLA_MODES,
        precisions=PRECISIONS,
        **rerun_params("check_accuracy"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} check accuracy --threshold {params.threshold} --models {input.models} "
        "--modes {params.modes} --precisions {params.precisions} --precision-threshold {params.roundoffs} "
        "--dataset {input.data} --out {output} > {log} 2>&1"


rule check_gradients:
    input:
        PARENT,
    output:
        f"{R}/checks/gradients.json",
    log:
        f"{R}/logs/checks/gradients.log",
    benchmark:
        f"{R}/benchmarks/checks/gradients.tsv"
    threads: cpus(1)
    resources:
        mem_mb=3000,
        runtime=15,
    params:
        ptycho=PTYCHO,
        track=tracking("check_gradients"),
        threshold=CFG["thresholds"]["gradients_max_rel"],
        roundoffs=CFG["thresholds"]["gradients_precision_roundoffs"],
        modes=XLA_MODES,
        precisions=PRECISIONS,
        loss=section_for(CFG, "model", SUBJECT)["loss"],
        nphotons=CFG["simulation"]["nphotons"],
        **rerun_params("check_gradients"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} check gradients --threshold {params.threshold} --loss {params.loss} --nphotons {params.nphotons} "
        "--modes {params.modes} --precisions {params.precisions} --precision-threshold {params.roundoffs} "
        "--out {output} > {log} 2>&1"


rule check_convergence:
    input:
        models=per_item_arm(f"{R}/models/{{arm}}/model.json", "convergence"),
        looks=LOOK_RECORDS,  # the deciding look's level is the check's alpha (item_alpha)
        parent=PARENT,
    output:
        f"{R}/checks/convergence.json",
    log:
        f"{R}/logs/checks/convergence.log",
    benchmark:
        f"{R}/benchmarks/checks/convergence.tsv"
    threads: cpus(1)
    params:
        ptycho=PTYCHO,
        track=tracking("check_convergence"),
        threshold=CFG["thresholds"]["convergence_max_rel"],
        sided=TWO_SIDED,
        alpha=item_alpha("convergence"),
        **rerun_params("check_convergence"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} check convergence --threshold {params.threshold} --alpha {params.alpha} {params.sided}--models {input.models} "
        "--out {output} > {log} 2>&1"


rule check_quality:
    # On the user's own data the arms' stitched objects too: without a ground truth each
    # arm's data misfit, half-scan resolution (relative margin: --margin) and reconstruction
    # are judged against its reference arm's (checklist/agreement.py).
    input:
        metrics=per_item_arm(f"{R}/metrics/{{arm}}.json", "quality"),
        models=per_item_arm(f"{R}/models/{{arm}}/model.json", "quality"),
        stitched=per_item_arm(f"{R}/stitched/{{arm}}.npz", "quality") if DATA else [],
        looks=LOOK_RECORDS,
        parent=PARENT,
    output:
        f"{R}/checks/quality.json",
    log:
        f"{R}/logs/checks/quality.log",
    benchmark:
        f"{R}/benchmarks/checks/quality.tsv"
    threads: cpus(1)
    params:
        ptycho=PTYCHO,
        track=tracking("check_quality"),
        threshold=CFG["thresholds"]["quality_max_ssim_diff"],
        margin=CFG["thresholds"]["convergence_max_rel"],
        sided=TWO_SIDED,
        alpha=item_alpha("quality"),
        **rerun_params("check_quality"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} check quality --threshold {params.threshold} --margin {params.margin} --alpha {params.alpha} "
        "{params.sided}--metrics {input.metrics} "
        f"--models {{input.models}} {QUALITY_STITCHED_FLAG}--out {{output}} > {{log}} 2>&1"


rule bench:
    # Runs alone (all cores); it times the arms alone AND in the pipeline's own schedule:
    # as many step loops at once as trainings run at once here (ptycho.study.bench).
    input:
        data=f"{R}/data/train.h5",
        models=MODELS,
        parent=PARENT,
    output:
        f"{R}/bench/bench.json",
    log:
        f"{R}/logs/bench.log",
    benchmark:
        f"{R}/benchmarks/bench.tsv"
    threads: all_cores()
    resources:
        tf_threads=tf_threads,
        mem_mb=6000,
        runtime=60,
    params:
        ptycho=PTYCHO,
        track=tracking("bench"),
        models=" ".join(BENCH[0]),
        modes=" ".join(BENCH[1]),
        precisions=" ".join(BENCH[2]),
        repeats=CFG["bench"]["repeats"],
        warmup=CFG["bench"]["warmup"],
        shared_threads=CFG["train_threads"],
        shared_jobs=trainings_at_once(),
        train_batches=" ".join(map(str, CFG["bench"]["train_batches"])),
        infer_batches=" ".join(map(str, CFG["bench"]["infer_batches"])),
        batch_repeats=CFG["bench"]["batch_repeats"],
        sweep_precisions=" ".join(arm_lists(CFG, SUBJECT)[1]),
        **rerun_params("bench"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        # Every setting as a flag from the resolved config, not the config file as an input:
        # a job downstream of results/<preset>/config.json would re-run on any config change
        # (a threshold), and the benchmark is the pipeline's longest job.
        "{params.ptycho} {params.track} bench --models {params.models} --modes {params.modes} --precisions {params.precisions} --repeats {params.repeats} "
        "--warmup {params.warmup} --threads-alone {resources.tf_threads} --shared-threads {params.shared_threads} --shared-jobs {params.shared_jobs} "
        "--train-batches {params.train_batches} --infer-batches {params.infer_batches} --batch-repeats {params.batch_repeats} "
        "--sweep-precisions {params.sweep_precisions} "
        "--dataset {input.data} --like {input.models} --out {output} > {log} 2>&1"


rule check_speedup:
    input:
        bench=f"{R}/bench/bench.json",
        models=per_item_arm(f"{R}/models/{{arm}}/model.json", "speedup"),
        looks=LOOK_RECORDS,
        parent=PARENT,
    output:
        f"{R}/checks/speedup.json",
    log:
        f"{R}/logs/checks/speedup.log",
    benchmark:
        f"{R}/benchmarks/checks/speedup.tsv"
    threads: cpus(1)
    params:
        ptycho=PTYCHO,
        track=tracking("check_speedup"),
        threshold=CFG["thresholds"]["speedup_min"],
        context=CFG["bench"]["context"],
        margin=CFG["thresholds"]["convergence_max_rel"],
        alpha=item_alpha("speedup"),
        **rerun_params("check_speedup"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} check speedup --threshold {params.threshold} --bench {input.bench} "
        "--context {params.context} --margin {params.margin} --alpha {params.alpha} --models {input.models} --out {output} > {log} 2>&1"
