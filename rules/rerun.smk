# A rerun checks what the report stands on: an output lost while results made from it
# remain (a killed forced job) is made again, with what depends on it (preflight.holes).
from ptycho.study.looks import recorded_arms

# an added seed's lost model is a hole like a configured one's
LOOKED_ARMS = recorded_arms(R, LOOKS, ARMS)


def _arm_files(*patterns):
    return {arm: [p.format(R=R, arm=arm) for p in patterns] for arm in LOOKED_ARMS}


def _condition_files(*rule_names):
    """Each checked condition's outputs of these rules, read from the rules themselves, as
    a group of its own (like an arm: a condition new to the config is no hole)."""
    return {
        f"condition:{c}": [str(o).format(condition=c) for r in rule_names for o in getattr(rules, r).output]
        for c in CONDITIONS
    }


STAGES = [
    {"": [*DATASETS, CONFIG_JSON, *PROBE_RECORD], **_condition_files("simulate_condition")},
    {"": [f"{R}/bench/bench.json", SOLVER[0], f"{R}/checks/gradients.json"],
     **_arm_files("{R}/models/{arm}/model.json", "{R}/models/{arm}/model.keras")},
    {"": [f"{R}/checks/{item}.json" for item in ("accuracy", "convergence", "speedup")],
     **_arm_files("{R}/reconstructions/{arm}.npz"), **_condition_files("condition", "solve_condition")},
    {"": [SOLVER[1]], **_arm_files("{R}/stitched/{arm}.npz")},
    _arm_files("{R}/metrics/{arm}.json"),
    {"": [f"{R}/checks/quality.json", *rules.figures.output]},
    {"": list(rules.report.output)},
    {"": REPORTS},
]
# An output damaged after its job (a zip, HDF5 or JSON file cut short: every job writes
# atomically, so a copy or a full disk under cp did it) is a hole too: a run moves it aside to
# <name>.damaged, its bytes kept, and makes it again; a dry run, --touch, or a run refused by a
# live one in this folder (run_lock) says so and changes nothing.
DAMAGED = []
if workflow.is_main_process and RUNS_JOBS:
    DAMAGED = [(p, why) for stage in STAGES for paths in stage.values() for p in paths if (why := damage(p))]
if DAMAGED:
    MOVES = MAKES_FILES and not run_lock.held(R)
    if MOVES:
        try:
            for p, _ in DAMAGED:
                os.replace(p, aside(p, ".damaged"))
        except OSError as err:
            sys.stderr.write(
                f"ptycho workflow: error: cannot move the damaged output {p} aside ({err.strerror}); remove it by hand, then run again\n"
            )
            sys.exit(2)
    sys.stderr.write(
        f"ptycho workflow: {len(DAMAGED)} output(s) are damaged "
        f"({'; '.join(f'{os.path.relpath(p, R)}: {why}' for p, why in DAMAGED[:3])}{'; ...' if len(DAMAGED) > 3 else ''}): "
        + ("each is moved aside to <name>.damaged and made again\n" if MOVES else
           "a run moves each aside to <name>.damaged and makes it again (this plan does not show those jobs)\n")
    )
HOLES = holes(STAGES, gone={p for p, _ in DAMAGED})
if HOLES:
    sys.stderr.write(
        f"ptycho workflow: {len(HOLES)} output(s) are missing (lost, damaged, or new in this version of the pipeline) while results made from them remain "
        f"({', '.join(os.path.relpath(p, R) for p in HOLES[:4])}{', ...' if len(HOLES) > 4 else ''}): "
        "their jobs and all that depends on them run again\n"
    )
