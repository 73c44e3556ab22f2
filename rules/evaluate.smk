rule evaluate:
    # Also every object as a ptychodus product (ptycho/data/ptychodus.py), with the
    # network's training losses: the reconstruction in the tool users open it with.
    input:
        stitched=f"{R}/stitched/{{arm}}.npz",
        data=f"{R}/data/test.h5",
        model=f"{R}/models/{{arm}}/model.json",
        parent=PARENT,
    output:
        metrics=f"{R}/metrics/{{arm}}.json",
        products=directory(f"{R}/products/{{arm}}"),
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
        geometry=PRODUCT_GEOMETRY,
        **rerun_params("evaluate"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} evaluate --stitched {input.stitched} --dataset {input.data} "
        "--out {output.metrics} --product-dir {output.products} --model {input.model} --name {wildcards.arm} "
        "{params.geometry} > {log} 2>&1"
