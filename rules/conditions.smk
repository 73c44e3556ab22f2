# The study's cheap parts at other operating points (config `conditions`,
# ptycho.study.conditions): each condition's own test split, the trained networks' accuracy
# and the loss gradients there with its loss, the networks applied to it and scored, and the
# solver on it. The report's Conditions section reads the records.


rule simulate_condition:
    # The study's simulation with the condition's dose and test stride (same seed: the same
    # test object); the test split alone, since nothing trains there.
    input:
        PARENT,
    output:
        f"{R}/conditions/{{condition}}/test.h5",
    log:
        f"{R}/logs/conditions/{{condition}}/simulate.log",
    benchmark:
        f"{R}/benchmarks/conditions/{{condition}}/simulate.tsv"
    threads: cpus(1)
    resources:
        mem_mb=max(2000, JOB_MB["simulate"]),
        runtime=10,
    params:
        ptycho=PTYCHO,
        flags=lambda w: cli_flags(CONDITIONS[w.condition]["simulation"]),
        track=lambda w: tracking("simulate_condition", condition=w.condition),
        **rerun_params("simulate_condition"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} simulate --quiet --test {output} {params.flags} > {log} 2>&1"


rule condition:
    input:
        models=MODELS,
        data=f"{R}/conditions/{{condition}}/test.h5",
        parent=PARENT,
    output:
        f"{R}/conditions/{{condition}}/check.json",
    log:
        f"{R}/logs/conditions/{{condition}}/check.log",
    benchmark:
        f"{R}/benchmarks/conditions/{{condition}}/check.tsv"
    threads: cpus(1)
    resources:
        mem_mb=3000,
        runtime=30,
    params:
        ptycho=PTYCHO,
        track=lambda w: tracking("condition", condition=w.condition),
        modes=XLA_MODES,
        precisions=PRECISIONS,
        thresholds=json.dumps(CFG["thresholds"], sort_keys=True),
        **rerun_params("condition"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} condition --name {wildcards.condition} --dataset {input.data} "
        "--models {input.models} --modes {params.modes} --precisions {params.precisions} "
        "--thresholds {params.thresholds:q} --out {output} > {log} 2>&1"


rule solve_condition:
    # One thread, in the solver's mode (the warm starts'): the data's ceiling at the
    # condition; XLA's effect on the solver is the solve job's.
    input:
        data=f"{R}/conditions/{{condition}}/test.h5",
        parent=PARENT,
    output:
        f"{R}/conditions/{{condition}}/solve.json",
    log:
        f"{R}/logs/conditions/{{condition}}/solve.log",
    benchmark:
        f"{R}/benchmarks/conditions/{{condition}}/solve.tsv"
    threads: cpus(1)
    resources:
        tf_threads=tf_threads,
        mem_mb=4000,
        runtime=30,
    params:
        ptycho=PTYCHO,
        track=lambda w: tracking("solve_condition", condition=w.condition),
        mode=WARM_MODE,
        flags=flags("solver"),
        **rerun_params("solve_condition"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} --threads {resources.tf_threads} solve --dataset {input.data} "
        "--modes {params.mode} {params.flags} --out {output} > {log} 2>&1"
