rule train:
    input:
        data=f"{R}/data/train.h5",
        parent=PARENT,
    output:
        model=f"{R}/models/{{arm}}/model.keras",
        meta=f"{R}/models/{{arm}}/model.json",
    log:
        f"{R}/logs/train/{{arm}}.log",
    benchmark:
        f"{R}/benchmarks/train/{{arm}}.tsv"
    threads: cpus(CFG["train_threads"])
    priority: train_priority
    resources:
        tf_threads=tf_threads,
        mem_mb=max(6000, JOB_MB["train"]),
        runtime=120,
    params:
        ptycho=PTYCHO,
        arm=lambda w: arm_tags(w),
        model_flags=lambda w: model_flags("model", w),
        train_flags=lambda w: model_flags("train", w),
        track=lambda w: tracking("train", **arm_tags(w)),
        **rerun_params("train"),
    conda:
        "../envs/ptycho.yaml"
    # --resume: after a kill, a NaN or Ctrl-C, continue from the state in
    # models/<arm>/checkpoint/ (not a declared output, so Snakemake keeps it).
    # --on-diverge record: a NaN loss ends the run FAILED but writes the last good state
    # as the model, marked FAILED in model.json, so the report shows the failed arm.
    shell:
        "{params.ptycho} {params.track} --threads {resources.tf_threads} train --quiet --resume --on-diverge record "
        "--dataset {input.data} "
        "--out $(dirname {output.meta}) --kind {params.arm[model]} --xla {params.arm[xla]} --seed {params.arm[seed]} "
        "--precision {params.arm[precision]} "
        "{params.model_flags} {params.train_flags} > {log} 2>&1"
