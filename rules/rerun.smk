# A rerun checks what the report stands on: an output lost while results made from it
# remain (a killed forced job) is made again, with what depends on it (workflow.holes).
def _arm_files(*patterns):
    return {arm: [p.format(R=R, arm=arm) for p in patterns] for arm in ARMS}


HOLES = holes([
    {"": [*DATASETS, CONFIG_JSON]},
    {"": [f"{R}/bench/bench.json", SOLVER[0], f"{R}/checks/gradients.json"],
     **_arm_files("{R}/models/{arm}/model.json", "{R}/models/{arm}/model.keras")},
    {"": [f"{R}/checks/{item}.json" for item in ("accuracy", "convergence", "speedup")],
     **_arm_files("{R}/reconstructions/{arm}.npz")},
    {"": [SOLVER[1]], **_arm_files("{R}/stitched/{arm}.npz")},
    _arm_files("{R}/metrics/{arm}.json"),
    {"": [f"{R}/checks/quality.json", *rules.figures.output]},
    {"": list(rules.report.output)},
    {"": REPORTS},
])
if HOLES:
    sys.stderr.write(
        f"ptycho workflow: {len(HOLES)} output(s) are missing (lost, or new in this version of the pipeline) while results made from them remain "
        f"({', '.join(os.path.relpath(p, R) for p in HOLES[:4])}{', ...' if len(HOLES) > 4 else ''}): "
        "their jobs and all that depends on them run again\n"
    )
