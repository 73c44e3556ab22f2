rule evaluate:
    input:
        stitched=f"{R}/stitched/{{arm}}.npz",
        data=f"{R}/data/test.h5",
        parent=PARENT,
    output:
        f"{R}/metrics/{{arm}}.json",
    log:
        f"{R}/logs/evaluate/{{arm}}.log",
    benchmark:
        f"{R}/benchmarks/evaluate/{{arm}}.tsv"
    threads: cpus(1)
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        ptycho=PTYCHO,
        track=lambda w: tracking("evaluate", **arm_tags(w)),
        **rerun_params("evaluate"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} evaluate --stitched {input.stitched} --dataset {input.data} --out {output} > {log} 2>&1"
