rule resolved_config:
    # Re-runs whenever the resolved configuration changes (its hash is a param); only
    # the report reads it.
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
    # One parent run per results folder, created once; jobs of later invocations (after
    # a config change) log under it too. No inputs and no params on purpose: when a job
    # must re-run, Snakemake skips the params checks of everything downstream of it,
    # and every job is downstream of this one.
    output:
        PARENT,
    log:
        f"{R}/logs/mlflow_parent.log",
    conda:
        "../envs/ptycho.yaml"
    run:
        from ptycho.tracking import start_pipeline

        start_pipeline(CFG, CFG["results"], CFG["study"], f"{CFG['study']}-{CFG['preset']}",
                       {"preset": CFG["preset"]}, output[0], log[0])


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
    threads: cpus(1)
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
