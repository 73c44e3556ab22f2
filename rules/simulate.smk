rule resolved_config:
    # Re-runs whenever the resolved configuration changes (it is a param); the parent
    # run logs it once and the report reads it.
    output:
        CONFIG_JSON,
    log:
        f"{R}/logs/resolved_config.log",
    params:
        ptycho=PTYCHO,
        config=json.dumps(CFG, sort_keys=True),
        **rerun_params("resolved_config"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} config --json {params.config:q} --out {output} > {log} 2>&1"


rule mlflow_parent:
    # One parent run per results folder, created once; jobs of later invocations (after
    # a config change) log under it too. No inputs and no params on purpose: when a job
    # must re-run, Snakemake skips the params checks of everything downstream of it,
    # and every job is downstream of this one. So the config it logs comes through the
    # environment (PTYCHO_CONFIG_JSON, set in common.smk), like the config hash. Its
    # format version's param (none at version 1) would re-run the whole study.
    output:
        PARENT,
    log:
        f"{R}/logs/mlflow_parent.log",
    params:
        **rerun_params("mlflow_parent"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        f"{PTYCHO} track start --out {{output}} > {{log}} 2>&1"


rule simulate:
    input:
        PARENT,
    output:
        train=f"{DATA_DIR['simulate']}/train.h5",
        test=f"{DATA_DIR['simulate']}/test.h5",
    log:
        f"{R}/logs/simulate.log",
    benchmark:
        f"{R}/benchmarks/simulate.tsv"
    threads: cpus(1)
    resources:
        mem_mb=max(2000, JOB_MB["simulate"]),
        runtime=10,
    params:
        ptycho=PTYCHO,
        flags=flags("simulation"),
        track=tracking("simulate"),
        **rerun_params("simulate"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} simulate --quiet --train {output.train} --test {output.test} {params.flags} > {log} 2>&1"


rule import_data:
    # The study on the user's own data (config `data`): each split read from its CXI file or
    # ptycho dataset, validated, and written where simulate writes; the file is the input, so
    # a changed file re-runs it and what depends on it.
    input:
        source=lambda w: DATA[w.split],
        parent=PARENT,
    output:
        f"{DATA_DIR['import_data']}/{{split}}.h5",
    log:
        f"{R}/logs/import_data/{{split}}.log",
    benchmark:
        f"{R}/benchmarks/import_data/{{split}}.tsv"
    threads: cpus(1)
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        ptycho=PTYCHO,
        gridsize=CFG["simulation"]["gridsize"],
        n=CFG["data"]["n"],
        reduce=CFG["data"]["reduce"],
        track=lambda w: tracking("import_data", split=w.split),
        **rerun_params("import_data"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} import-data {input.source:q} --split {wildcards.split} "
        "--gridsize {params.gridsize} --n {params.n} --reduce {params.reduce} --out {output} > {log} 2>&1"


rule refine_probe:
    # Measured data (config data.probe: refine): the solver refines the file's probe estimate on
    # the training split (object and probe together, from a flat object) and writes both splits
    # again with it, so that the PINN trains, and everything is scored, with the solver's probe.
    # Everything waits for it: all cores, in the solver's mode.
    input:
        train=f"{DATA_DIR['import_data']}/train.h5",
        test=f"{DATA_DIR['import_data']}/test.h5",
        parent=PARENT,
    output:
        train=f"{DATA_DIR['refine_probe']}/train.h5",
        test=f"{DATA_DIR['refine_probe']}/test.h5",
        record=PROBE_RECORD[0] if REFINE else f"{R}/data/unrefined/probe.json",
    log:
        f"{R}/logs/refine_probe.log",
    benchmark:
        f"{R}/benchmarks/refine_probe.tsv"
    threads: all_cores()
    resources:
        tf_threads=tf_threads,
        mem_mb=4000,
        runtime=30,
    params:
        ptycho=PTYCHO,
        mode=WARM_MODE,
        flags=flags("solver", "engine"),  # the refinement is the apg engine's whatever the study's
        track=tracking("refine_probe"),
        **rerun_params("refine_probe"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} --threads {resources.tf_threads} refine-probe --dataset {input.train} "
        "--write {input.train}={output.train} --write {input.test}={output.test} --mode {params.mode} "
        "{params.flags} --out {output.record} > {log} 2>&1"


rule export_cxi:
    # The field's file format: each split as CXI 1.6 in physical units (config: cxi),
    # for ptychodus and other CXI readers. Nothing downstream reads it.
    input:
        data=f"{R}/data/{{split}}.h5",
        parent=PARENT,
    output:
        f"{R}/data/{{split}}.cxi",
    log:
        f"{R}/logs/export_cxi/{{split}}.log",
    threads: cpus(1)
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        ptycho=PTYCHO,
        flags=flags("cxi"),
        track=lambda w: tracking("export_cxi", split=w.split),
        **rerun_params("export_cxi"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} export-cxi {input.data} --out {output} {params.flags} > {log} 2>&1"
