# The conventional solver beside the networks (ptycho.study.solve): the data's ceiling,
# and XLA where the work is all physics.


rule solve:
    # Runs alone (all cores): every XLA mode of the study from a flat start, one iteration
    # of each in turn, so that their iteration times are compared under the same conditions.
    input:
        data=f"{R}/data/test.h5",
        parent=PARENT,
    output:
        record=f"{R}/solver/solve.json",
        stitched=expand(f"{R}/stitched/solver-{{mode}}.npz", mode=CFG["xla"]),
        products=[directory(f"{R}/products/solver-{mode}") for mode in CFG["xla"]],
    log:
        f"{R}/logs/solve.log",
    benchmark:
        f"{R}/benchmarks/solve.tsv"
    threads: all_cores()
    resources:
        tf_threads=tf_threads,
        mem_mb=4000,
        runtime=30,
    params:
        ptycho=PTYCHO,
        track=tracking("solve"),
        modes=" ".join(CFG["xla"]),
        flags=flags("solver"),
        stitched=lambda w, output: os.path.dirname(output.stitched[0]),
        products=lambda w, output: os.path.dirname(output.products[0]),
        geometry=PRODUCT_GEOMETRY,
        **rerun_params("solve"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} --threads {resources.tf_threads} solve --dataset {input.data} "
        "--modes {params.modes} {params.flags} --out {output.record} --stitched-dir {params.stitched} "
        "--products-dir {params.products} --name test {params.geometry} > {log} 2>&1"


rule warm_start:
    # The solver started from each network's reconstruction (its off arm, first seed)
    # besides the flat start, in the fastest-compiling XLA mode of the study.
    input:
        data=f"{R}/data/test.h5",
        starts=[f"{R}/stitched/{arm}.npz" for arm in WARM_ARMS.values()],
        parent=PARENT,
    output:
        f"{R}/solver/warm_start.json",
    log:
        f"{R}/logs/warm_start.log",
    benchmark:
        f"{R}/benchmarks/warm_start.tsv"
    threads: all_cores()
    resources:
        tf_threads=tf_threads,
        mem_mb=4000,
        runtime=30,
    params:
        ptycho=PTYCHO,
        track=tracking("warm_start"),
        mode=WARM_MODE,
        flags=flags("solver"),
        starts=lambda w, input: " ".join(f"--start {m}={p}" for m, p in zip(WARM_ARMS, input.starts, strict=True)),
        **rerun_params("warm_start"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} --threads {resources.tf_threads} solve --dataset {input.data} "
        "--modes {params.mode} {params.starts} {params.flags} --out {output} > {log} 2>&1"
