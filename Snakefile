# Does XLA make physics-informed ptychographic reconstruction faster without making it worse?
#
#   snakemake --cores 8 all                        # the default study (~15 min on 2 cores)
#   snakemake --cores 8 all --config preset=smoke  # the whole pipeline in minutes
#
# simulate -> train (model x xla x seed) -> infer -> stitch -> evaluate
#          -> checklist (accuracy, gradients, convergence, quality, speedup) -> report


configfile: "config.yaml"


include: "rules/common.smk"
include: "rules/simulate.smk"
include: "rules/train.smk"
include: "rules/infer.smk"
include: "rules/evaluate.smk"
include: "rules/checks.smk"
include: "rules/report.smk"


rule all:
    default_target: True
    input:
        REPORTS,


rule datasets:
    input:
        DATASETS,


rule train:
    input:
        MODELS,


rule evaluate:
    input:
        METRICS,


rule report:
    input:
        REPORTS,


onerror:
    shell(f"{PTYCHO} track finish --parent {PARENT} --status FAILED || true")
