rule validation_report:
    input:
        checks=CHECKS,
        metrics=METRICS,
        models=MODELS,
        recon=expand(f"{R}/reconstructions/{{arm}}.npz", arm=ARMS),
        config=CONFIG_JSON,
        parent=PARENT,
    output:
        report("reports/validation.html", caption="../docs/report-caption.rst", category="Validation"),
        "reports/validation.md",
        "reports/validation.json",
    log:
        f"{R}/logs/report.log",
    threads: 1
    params:
        ptycho=PTYCHO,
        track=tracking("report"),
    conda:
        "../envs/ptycho.yaml"
    shell:
        "{params.ptycho} {params.track} report --checks {input.checks} --metrics {input.metrics} --models {input.models} "
        "--reconstructions {input.recon} --config-json {input.config} --out-dir reports "
        "--finish-parent {input.parent} > {log} 2>&1"
