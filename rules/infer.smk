rule infer:
    input:
        model=f"{R}/models/{{arm}}/model.json",
        data=f"{R}/data/test.h5",
        parent=PARENT,
    output:
        f"{R}/reconstructions/{{arm}}.npz",
    log:
        f"{R}/logs/infer/{{arm}}.log",
    benchmark:
        f"{R}/benchmarks/infer/{{arm}}.tsv"
    threads: cpus(CFG["train_threads"])
    resources:
        tf_threads=tf_threads,
        mem_mb=max(4000, JOB_MB["infer"]),
        runtime=30,
    params:
        ptycho=PTYCHO,
        track=lambda w: tracking("infer", **arm_tags(w)),
        **rerun_params("infer"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} --threads {resources.tf_threads} infer --model $(dirname {input.model}) "
        "--dataset {input.data} --out {output} > {log} 2>&1"


rule stitch:
    input:
        recon=f"{R}/reconstructions/{{arm}}.npz",
        data=f"{R}/data/test.h5",
        parent=PARENT,
    output:
        f"{R}/stitched/{{arm}}.npz",
    log:
        f"{R}/logs/stitch/{{arm}}.log",
    benchmark:
        f"{R}/benchmarks/stitch/{{arm}}.tsv"
    threads: cpus(1)
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        ptycho=PTYCHO,
        track=lambda w: tracking("stitch", **arm_tags(w)),
        **rerun_params("stitch"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} stitch --reconstruction {input.recon} --dataset {input.data} --out {output} > {log} 2>&1"
