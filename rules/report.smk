# Figures (one job, PNGs with captions for `snakemake --report`) and the validation report.
from ptycho.study.report import figures as report_figures

FIGURES = [name for name, _, _ in report_figures()]


rule figures:
    input:
        data=f"{R}/data/test.h5",
        stitched=FINAL_STITCHED,
        metrics=FINAL_METRICS,
        models=FINAL_MODELS,
        bench=f"{R}/bench/bench.json",
        recon=FINAL_RECONSTRUCTIONS,
        solver=SOLVER,
        parent=PARENT,
    output:
        [report(f"{R}/figures/{name}.png", caption=f"../ptycho/captions/{name}.rst", category="Figures")
         for name in FIGURES],
        [f"{R}/figures/{name}.svg" for name in FIGURES],
    log:
        f"{R}/logs/figures.log",
    benchmark:
        f"{R}/benchmarks/figures.tsv"
    threads: cpus(1)
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        ptycho=PTYCHO,
        track=tracking("figures"),
        out=lambda w, output: os.path.dirname(output[0]),
        **rerun_params("figures"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} figures --dataset {input.data} --stitched {input.stitched} "
        "--metrics {input.metrics} --models {input.models} --bench {input.bench} "
        "--reconstructions {input.recon} --solver {input.solver} --out-dir {params.out} > {log} 2>&1"


# The report job writes into the results folder (STAGED); publish_report then copies the
# finished report to reports/. Snakemake deletes a job's declared outputs before it runs
# and again when it fails, so a report job whose outputs were reports/ itself lost the
# previous report to any failure (a read-only or damaged store, kill -9, a bad input).
# Now a failed or killed report job leaves reports/ as it was, and a report there is only
# ever replaced by a complete new one (ptycho.study.report.publish).
STAGED = f"{R}/report"


rule report:
    input:
        checks=CHECKS,
        metrics=FINAL_METRICS,
        models=FINAL_MODELS,
        recon=FINAL_RECONSTRUCTIONS,
        looks=LOOK_RECORDS,
        figures=expand(f"{R}/figures/{{name}}.png", name=FIGURES),
        config=CONFIG_JSON,
        solver=SOLVER,
        conditions=CONDITION_RECORDS,
        probe=PROBE_RECORD,
        parent=PARENT,
    output:
        expand(f"{STAGED}/validation.{{ext}}", ext=["html", "md", "json"]),
    log:
        f"{R}/logs/report.log",
    threads: cpus(1)
    params:
        ptycho=PTYCHO,
        track=tracking("report"),
        benchmarks=f"{R}/benchmarks",
        out=lambda w, output: os.path.dirname(output[0]),
        **rerun_params("report"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} report --checks {input.checks} --metrics {input.metrics} --models {input.models} "
        "--reconstructions {input.recon} --figures {input.figures} --config-json {input.config} --out-dir {params.out} "
        "--finish-parent {input.parent} --benchmarks {params.benchmarks} --solver {input.solver} "
        f"{CONDITIONS_FLAG}{PROBE_FLAG}{LOOKS_FLAG}> {{log}} 2>&1"


rule publish_report:
    # The last step: the complete staged report copied into reports/ (milliseconds, no
    # MLflow). Interrupted, it is redone from the staged copy alone. It also lists the
    # report job's own inputs: Snakemake rebuilds a missing intermediate file only when a
    # job downstream of it must run, so after a failed report job (its staged outputs
    # deleted) the published report, if older than the study's results, is what makes
    # the next run redo the report instead of saying "Nothing to be done".
    input:
        staged=expand(f"{STAGED}/validation.{{ext}}", ext=["html", "md", "json"]),
        sources=lambda w: resolved_inputs(w, rules.report.input),
    output:
        report(f"{REPORT_DIR}/validation.html", caption="../ptycho/captions/validation.rst", category="Validation"),
        f"{REPORT_DIR}/validation.md",
        f"{REPORT_DIR}/validation.json",
    log:
        f"{R}/logs/publish_report.log",
    params:
        ptycho=PTYCHO,
        staged=lambda w, input: os.path.dirname(input.staged[0]),
        out=lambda w, output: os.path.dirname(output[0]),
        **rerun_params("publish_report"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} publish-report --report-dir {params.staged} --out-dir {params.out} > {log} 2>&1"
