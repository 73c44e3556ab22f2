rule resolved_config:
    # Re-runs whenever the resolved configuration changes (its hash is a param).
    output:
        CONFIG_JSON,
    log:
        f"{R}/logs/resolved_config.log",
    params:
        config_hash=HASH,
    conda:
        "../envs/ptycho.yaml"
    run:
        from ptycho.artifacts import write_json

        write_json(output[0], CFG)


rule mlflow_parent:
    # One parent run per results folder: created once, then every job of every later
    # invocation (re-runs after a config change included) logs under it. ancient():
    # a rewritten config.json must not re-run the parent, hence every job.
    input:
        ancient(CONFIG_JSON),
    output:
        PARENT,
    log:
        f"{R}/logs/mlflow_parent.log",
    params:
        ptycho=PTYCHO,
        preset=CFG["preset"],
        # results/<preset>/mlflow/parent.json -> results: the store is results/mlflow.db
        results=lambda w, output: os.path.dirname(os.path.dirname(os.path.dirname(output[0]))),
        study=CFG["study"],
        name=f"{CFG['study']}-{CFG['preset']}",
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} track start --config-json {input} --experiment {params.study} "
        "--run-name {params.name} --results {params.results} --tag preset={params.preset} --out {output} > {log} 2>&1"


rule simulate:
    input:
        PARENT,
    output:
        train=f"{R}/data/train.h5",
        test=f"{R}/data/test.h5",
    log:
        f"{R}/logs/simulate.log",
    benchmark:
        f"{R}/benchmarks/simulate.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        ptycho=PTYCHO,
        flags=flags("simulation"),
        track=tracking("simulate"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} simulate --quiet --train {output.train} --test {output.test} {params.flags} > {log} 2>&1"
