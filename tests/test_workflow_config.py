"""Pipeline configuration: schema, presets, precedence, one-line errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from ptycho.config import SimulationConfig
from ptycho.data.cxi import CxiGeometry
from ptycho.errors import ConfigError
from ptycho.nets.models import ModelConfig
from ptycho.nets.train import TrainConfig
from ptycho.solvers.engines import SolverConfig
from ptycho.study.arms import arm_name, parse_arm
from ptycho.study.workflow import arms, load_schema, resolve

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def base():
    return yaml.safe_load((ROOT / "config.yaml").read_text())


@pytest.mark.parametrize(
    ("section", "cls", "derived"),
    [
        ("simulation", SimulationConfig, set()),
        ("model", ModelConfig, {"kind"}),
        ("train", TrainConfig, {"xla", "seed", "precision"}),  # the arm's axes
        ("cxi", CxiGeometry, set()),
        ("solver", SolverConfig, set()),
    ],
)
def test_each_dataclass_has_exactly_the_schemas_keys_and_defaults(section, cls, derived):
    props = load_schema()["properties"][section]["properties"]
    fields = {f.name: f.default for f in dataclasses.fields(cls)}
    assert set(props) == set(fields) - derived
    for key, spec in props.items():
        assert spec["default"] == fields[key], key
        assert type(fields[key]) is (float if spec.get("type") == "number" else type(spec["default"])), key


def test_the_commands_defaults_are_the_studys_network_and_training(base):
    """``python -m ptycho train`` with no flags trains what the report is about."""
    from ptycho.study.workflow import model_config, simulation_config, solver_config, train_config

    cfg = resolve(base)
    assert SimulationConfig() == simulation_config(cfg) and SolverConfig() == solver_config(cfg)
    assert ModelConfig() == model_config(cfg, "pinn")
    assert ModelConfig(kind="baseline") == model_config(cfg, "baseline")
    assert TrainConfig() == train_config(cfg, "jit", 0, "pinn")
    assert (ModelConfig().filters, ModelConfig().depth, ModelConfig().loss, TrainConfig().epochs) == (32, 2, "mae", 20)


def test_config_yaml_holds_only_choices_the_schema_does_not_make(base):
    """Settings live in the schema; config.yaml keeps the study's deliberate choices."""
    assert set(base) <= {
        "preset",
        "study",
        "results",
        "models",
        "xla",
        "precision",
        "seeds",
        "max_seeds",
        "conditions",
        "train_threads",
        "per_model",
        "bench",
    } | {
        "thresholds",
        "presets",
    }
    assert not {"simulation", "model", "train", "solver", "cxi"} & set(base)
    assert set(base.get("bench", {})) <= {"models", "xla", "precision"}  # what the study times, not how


def test_the_schema_ships_with_the_package():
    import tomllib

    from ptycho.config import SCHEMA_FILE

    assert SCHEMA_FILE.parent == Path(__import__("ptycho").__file__).parent and SCHEMA_FILE.is_file()
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert SCHEMA_FILE.name in package_data["ptycho"]
    assert not (ROOT / "schemas").exists()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ModelConfig(filters=0), "config key 'model.filters' = 0 is out of range; allowed: [1, 512]"),
        (
            lambda: ModelConfig(kind="unet"),
            "config key 'model.kind' = 'unet' is not allowed; choose one of pinn, baseline",
        ),
        (
            lambda: TrainConfig(learning_rate=5.0),
            "config key 'train.learning_rate' = 5.0 is out of range; allowed: [1e-08, 1.0]",
        ),
        (
            lambda: TrainConfig(seed=-1),
            "config key 'train.seed' = -1 is out of range; allowed: [0, 4294967295]",
        ),
        (
            lambda: TrainConfig(epochs=2, warmup_epochs=3.0),
            "config key 'train.warmup_epochs' = 3.0 is out of range; allowed: [0.0, 2.0]",
        ),
        (lambda: SolverConfig(step=10.0), "config key 'solver.step' = 10.0 is out of range; allowed: [1e-06, 4.0]"),
        (lambda: SimulationConfig(n=63), "config key 'n' = 63 must be even; use 64"),
        (lambda: SimulationConfig(spacing=65), "config key 'spacing' = 65 is out of range; allowed: [1, 64]"),
    ],
)
def test_a_dataclass_checks_its_values_against_the_schema_in_one_line(build, message):
    with pytest.raises(ConfigError) as err:
        build()
    assert str(err.value) == message


def test_the_dataclass_checks_read_every_keyword_the_schema_sections_use():
    # ptycho.config.check_value knows these keywords; a new one must be taught to it first.
    known = {"type", "default", "description", "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
    known |= {"multipleOf", "pattern"}
    schema = load_schema()
    for section in ("simulation", "model", "train", "solver"):
        for key, spec in schema["properties"][section]["properties"].items():
            assert set(spec) <= known, (section, key, set(spec) - known)
    assert (
        set(schema["properties"]["seeds"]["items"]) <= known and set(schema["properties"]["models"]["items"]) <= known
    )


@pytest.mark.parametrize(("flags", "short"), [(("avx2", "avx512_bf16"), "-bf16"), (("avx2",), "")])
def test_default_config_resolves_and_builds_every_arm(base, flags, short):
    from ptycho.nets.precision import Hardware

    cfg = resolve(base, hardware=Hardware(flags))
    assert cfg["preset"] == "default"
    # the PINN in off and physics at the machine's native precision (bfloat16 with avx512_bf16,
    # else float32), three seeds; the baseline, the quality reference, once at float32
    assert arms(cfg) == [f"pinn-{x}{short}-s{s}" for x in ("off", "physics") for s in (0, 1, 2)] + ["baseline-off-s0"]
    assert cfg["train"]["epochs"] == 20 and cfg["per_model"]["baseline"]["train"]["epochs"] == 6
    assert cfg["simulation"]["probe_kind"] == "defocused"
    assert cfg["simulation"]["stride_test"] == 10  # schema default filled in


def test_the_smoke_preset_keeps_its_own_matrix_and_narrows_to_one_model(base):
    from ptycho.study.workflow import bench_lists

    smoke = resolve(base, {"preset": "smoke"})
    assert arms(smoke) == [f"{m}-{x}-s0" for m in ("pinn", "baseline") for x in ("off", "jit")]
    assert bench_lists(smoke) == (["pinn"], ["off", "jit"], ["float32"])
    pinn_only = resolve(base, {"preset": "smoke", "models": ["pinn"]})  # the store-rebuild drill's
    assert arms(pinn_only) == ["pinn-off-s0", "pinn-jit-s0"] and bench_lists(pinn_only)[0] == ["pinn"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"models": ["baseline"]},
            "config key 'models' = ['baseline'] has no pinn, the model whose XLA speed and quality the study measures; "
            "add it (models=[pinn,baseline])",
        ),
        (
            {"xla": ["physics"]},
            "config key 'xla' = ['physics'] has no off, the reference every XLA mode is compared with at the same "
            "precision; add it (xla=[off,physics])",
        ),
        (
            {"xla": ["off"]},
            "config key 'xla' = ['off'] trains no XLA mode, so there is no pair to compare; add one (xla=[off,physics])",
        ),
        (
            {"per_model": {"pinn": {"xla": ["jit", "auto"]}}},
            "config key 'per_model.pinn.xla' = ['jit', 'auto'] has no off",
        ),
        ({"bench": {"models": ["baseline"]}}, "config key 'bench.models' = ['baseline'] does not time the PINN"),
        ({"bench": {"xla": ["off"]}}, "config key 'bench.xla' = ['off'] times no XLA mode"),
    ],
)
def test_a_matrix_that_cannot_answer_is_refused_naming_the_fix(base, overrides, message):
    """Not measured is not "XLA made it worse": a study without the PINN, without off, or
    with off alone would report its items FAIL for want of a pair; it is refused instead."""
    with pytest.raises(ConfigError) as err:
        resolve(base, {"preset": "smoke", **overrides})
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_the_baseline_may_train_off_alone(base):
    cfg = resolve(base, {"preset": "smoke", "per_model": {"baseline": {"xla": ["off"]}}})
    assert "baseline-off-s0" in arms(cfg) and "baseline-jit-s0" not in arms(cfg)


def test_preset_overrides_config_yaml_and_command_line_overrides_preset(base):
    smoke = resolve(base, {"preset": "smoke"})
    assert smoke["simulation"]["n"] == 32 and smoke["train"]["epochs"] == 2
    assert smoke["simulation"]["gridsize"] == 2  # untouched keys keep config.yaml's value
    tweaked = resolve(base, {"preset": "smoke", "train": {"epochs": 3}})
    assert tweaked["train"]["epochs"] == 3 and tweaked["simulation"]["n"] == 32


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            {"train": {"epoch": 3}},
            "config key 'train': Additional properties are not allowed ('epoch' was unexpected); allowed keys:",
        ),
        ({"train": {"epochs": "ten"}}, "config key 'train.epochs': 'ten' is not of type 'integer'"),
        ({"train": {"epochs": 0}}, "config key 'train.epochs': 0 is less than the minimum of 1"),
        ({"models": ["pinn", "unet"]}, "config key 'models.1': 'unet' is not allowed; choose one of pinn, baseline"),
        (
            {"preset": "huge"},
            "config key 'preset': 'huge' has no block under 'presets'; add one to config.yaml or choose one of default, smoke, lowdose, siemens, paper",
        ),
        ({"simulation": {"n": 51}}, "config key 'simulation.n': 51 is not a multiple of 2"),
        (
            {"simulation": {"n": 36}, "model": {"depth": 3}},
            "config key 'simulation.n' = 36 is not a multiple of 8, which the pinn needs (model.depth = 3",
        ),
        (
            {"simulation": {"n": 40}, "per_model": {"baseline": {"model": {"depth": 4}}}},
            "config key 'simulation.n' = 40 is not a multiple of 16, which the baseline needs "
            "(per_model.baseline.model.depth = 4",
        ),
        ({"xla": ["off", "fast"]}, "config key 'xla.1': 'fast' is not allowed; choose one of off, jit, auto, physics"),
        ({"xla": [True, "jit"]}, "config key 'xla': [True, 'jit'] names a mode twice"),
        ({"xla": []}, "config key 'xla': [] is empty; list at least 1 value(s)"),
        (
            {"bench": {"context": "busy"}},
            "config key 'bench.context': 'busy' is not allowed; choose one of alone, shared",
        ),
    ],
)
def test_bad_config_is_one_line_naming_the_key(base, override, message):
    with pytest.raises(ConfigError) as err:
        resolve(base, override)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(message)


def test_dataclass_checks_also_run_at_the_edge(base):
    # object too small for the patch: only the dataclass knows that combination
    with pytest.raises(ConfigError, match="object_size"):
        resolve(base, {"simulation": {"object_size": 60}})


def test_arm_names_round_trip_and_refuse_what_is_not_an_arm():
    assert parse_arm(arm_name("baseline", "physics", 3)) == ("baseline", "physics", 3, "float32")
    assert arm_name("pinn", False, 0) == "pinn-off-s0" and arm_name("pinn", True, 0) == "pinn-jit-s0"  # legacy booleans
    with pytest.raises(ValueError, match="not an arm name"):
        parse_arm("pinn-xla-s0")


def test_every_mode_is_an_accepted_config_value_and_booleans_keep_working(base):
    every = resolve(base, {"xla": ["off", "jit", "auto", "physics"], "precision": ["float32"], "seeds": [0]})
    assert arms(every)[:4] == ["pinn-off-s0", "pinn-jit-s0", "pinn-auto-s0", "pinn-physics-s0"]
    assert resolve(base, {"xla": [True, False]})["xla"] == ["jit", "off"]


def test_command_line_scalars_arrive_as_strings_and_are_retyped(base):
    # what Snakemake hands over for: --config preset=smoke train="{epochs: 3, learning_rate: 2e-3}" xla="[false,true]"
    cfg = resolve(
        base, {"preset": "smoke", "train": {"epochs": "3", "learning_rate": "2e-3"}, "xla": ["false", "true"]}
    )
    assert cfg["train"]["epochs"] == 3 and cfg["train"]["learning_rate"] == 0.002 and cfg["xla"] == ["off", "jit"]
    # YAML 1.1 reads a bare off as false: it still means the off mode
    assert resolve(base, {"xla": ["off", "physics"]})["xla"] == ["off", "physics"]


def test_mode_pairs_match_each_mode_with_the_off_arm_of_its_model_and_seed_only():
    from ptycho.study.arms import Arm, mode_pairs

    names = ["pinn-jit-s0", "pinn-off-s0", "pinn-physics-s0", "baseline-jit-s0", "pinn-jit-s1", "baseline-off-s1"]
    assert [(p.key, p.arm.name, p.reference.name) for p in mode_pairs(names)] == [
        ("pinn-s0-jit", "pinn-jit-s0", "pinn-off-s0"),
        ("pinn-s0-physics", "pinn-physics-s0", "pinn-off-s0"),
    ]
    assert Arm.of_meta({"model": {"kind": "baseline"}, "train": {"xla": False, "seed": 2}}).name == "baseline-off-s2"
    assert Arm.of_meta({"model": {"kind": "pinn"}, "train": {"xla": "auto", "seed": 0}}).name == "pinn-auto-s0"


def test_the_schema_offers_exactly_the_modes_of_ptycho_xla():
    """The YAML lists the registry's modes for its readers (validation takes them from the
    registry itself, ptycho.study.workflow.registry_choices)."""
    from ptycho.config import schema
    from ptycho.nets.xla import MODES

    assert schema()["properties"]["xla"]["items"]["anyOf"][0]["enum"] == list(MODES)
    assert load_schema()["properties"]["xla"]["items"]["anyOf"][0]["enum"] == list(MODES)


def test_the_schema_offers_exactly_the_network_kinds_of_their_records():
    """Each network kind is a Method record (ptycho.nets.models.METHODS), which the code that
    treats the kinds differently reads; the schema lists their names."""
    from ptycho.config import schema
    from ptycho.nets.models import METHODS, MODEL_KINDS, method_of

    assert schema()["properties"]["models"]["items"]["enum"] == list(METHODS) == list(MODEL_KINDS)
    assert method_of("pinn").physics and method_of("pinn").grouped
    assert not method_of("baseline").physics and not method_of("baseline").grouped
    with pytest.raises(ValueError, match="unknown model kind 'pinn2'; choose one of pinn, baseline"):
        method_of("pinn2")


def test_arm_names_and_pairs_follow_the_modes_of_ptycho_xla(monkeypatch):
    """Arms, their wildcard pattern and pairing read ptycho.nets.xla.MODES when used: a mode
    registered after import is in them (tests/test_axis_records.py follows one further)."""
    import ptycho.nets.xla
    import ptycho.study.arms as arms_module

    new = ptycho.nets.xla.MODES["jit"]._replace(name="newmode", description="a test mode")
    monkeypatch.setitem(ptycho.nets.xla.MODES, "newmode", new)
    assert "newmode" in arms_module.PATTERN
    assert [p.key for p in arms_module.mode_pairs(["pinn-off-s0", "pinn-newmode-s0"])] == ["pinn-s0-newmode"]


def test_bench_command_copies_no_default_of_the_study():
    """``ptycho bench`` without flags times the study's network: its shape and batch flags
    default to nothing, and the study's config (the schema's defaults) fills them in."""
    from ptycho.cli import build_parser

    args = build_parser().parse_args(["bench"])
    assert {
        k: getattr(args, k) for k in ("filters", "pooling", "depth", "mixing", "loss", "batch_size")
    } == dict.fromkeys(("filters", "pooling", "depth", "mixing", "loss", "batch_size"))


@pytest.mark.parametrize("cores", [1, 2, 3, 8, 64])
@pytest.mark.parametrize("machine", [1, 2, 4, 16])
@pytest.mark.parametrize("threads", [1, 2, 4])
def test_declared_threads_never_let_jobs_share_a_cpu_whatever_the_cores_given(threads, cores, machine):
    from ptycho.study.schedule import declared_threads, job_threads

    declared = declared_threads(threads, cores, machine)
    used = job_threads(declared, cores, machine)
    usable = min(cores, machine)
    assert 1 <= declared <= cores  # Snakemake would cap a larger figure anyway
    assert used == min(threads, usable)  # each job gets what it asked for, up to the CPUs there are
    # Snakemake starts jobs while their declared threads fit --cores: as many as
    # cores // declared, each using `used` threads, never more than the machine's CPUs.
    assert (cores // declared) * used <= usable
    # ... and, when --cores is a multiple of the CPUs used, exactly as many as fit.
    if cores % usable == 0:
        assert cores // declared == usable // used


def test_per_model_sections_override_the_shared_ones_for_that_model_only(base):
    from ptycho.study.workflow import model_config, train_config

    cfg = resolve(base, {"per_model": {"baseline": {"model": {"filters": 8}, "train": {"epochs": 2}}}})
    assert model_config(cfg, "baseline").filters == 8 and train_config(cfg, "off", 0, "baseline").epochs == 2
    assert model_config(cfg, "pinn").filters == cfg["model"]["filters"]
    assert train_config(cfg, "off", 0, "pinn").epochs == cfg["train"]["epochs"]
    with pytest.raises(ConfigError, match=r"unknown config key 'per_model\.baseline\.model\.filterz'"):
        resolve(base, {"per_model": {"baseline": {"model": {"filterz": 8}}}})
    with pytest.raises(ConfigError, match="per_model"):
        resolve(base, {"per_model": {"pinnn": {"model": {"filters": 8}}}})


#: Roomy values for the fields other fields' limits depend on, so that a probe of one
#: field meets only that field's own check (object_size >= n + spacing, spacing <= n, ...).
ROOMY = {"simulation": {"object_size": 8192}, "model": {}, "train": {"epochs": 100_000}, "cxi": {}, "solver": {}}
#: ... and for probing object_size itself, a patch that fits in the smallest object.
SMALL = {"object_size": {"n": 16, "spacing": 1}}


def _probes(spec: dict) -> list[tuple[object, bool, str]]:
    """(value, schema accepts it, which limit) at and just beyond each limit of a property."""
    out = []
    integer = spec.get("type") == "integer"

    def nudge(limit):  # the smallest step that crosses a limit
        return 1 if integer else 1e-9 * max(1.0, abs(limit))

    if "minimum" in spec:
        out += [(spec["minimum"], True, "minimum"), (spec["minimum"] - nudge(spec["minimum"]), False, "minimum")]
    if "maximum" in spec:
        out += [(spec["maximum"], True, "maximum"), (spec["maximum"] + nudge(spec["maximum"]), False, "maximum")]
    if "exclusiveMinimum" in spec:
        limit = spec["exclusiveMinimum"]
        out += [(limit, False, "exclusiveMinimum"), (limit + nudge(limit), True, "exclusiveMinimum")]
    if "multipleOf" in spec:
        m = spec["multipleOf"]
        base = spec.get("minimum", m)
        out.append((base + (m // 2 if integer else m / 2), False, "multipleOf"))
    for value in spec.get("enum", []):
        out.append((value, True, "enum"))
    if "enum" in spec and all(isinstance(v, str) for v in spec["enum"]):
        out.append(("no-such-choice", False, "enum"))
    return out


@pytest.mark.parametrize(
    ("section", "cls"),
    [
        ("simulation", SimulationConfig),
        ("model", ModelConfig),
        ("train", TrainConfig),
        ("cxi", CxiGeometry),
        ("solver", SolverConfig),
    ],
)
def test_the_dataclasses_accept_exactly_what_the_schema_accepts_at_every_limit(section, cls):
    # The dataclasses check their values against the schema with ptycho.config's own
    # reader (the CLI builds them without jsonschema), the workflow with jsonschema: at
    # every minimum, maximum, step and choice both must give one verdict.
    from jsonschema import Draft202012Validator

    from ptycho.config import from_dict

    props = load_schema()["properties"][section]["properties"]
    disagree = []
    for key, spec in props.items():
        for value, accepted, limit in _probes(spec):
            assert Draft202012Validator(spec).is_valid(value) == accepted, (key, value, limit)
            try:
                from_dict(cls, {**ROOMY[section], **SMALL.get(key, {}), key: value})
                built = True
            except ConfigError:
                built = False
            if built != accepted:
                disagree.append(
                    f"{section}.{key}={value!r} ({limit}): schema {'accepts' if accepted else 'refuses'}, "
                    f"{cls.__name__} {'builds' if built else 'refuses'}"
                )
    assert disagree == []


def test_precision_arms_name_parse_and_tag_with_float32_reading_as_before(base):
    from ptycho.study.arms import Arm

    two = {"precision": ["float32", "mixed_bfloat16"], "xla": ["off", "jit"], "models": ["pinn"], "seeds": [0]}
    assert arms(resolve(base, two)) == ["pinn-off-s0", "pinn-jit-s0", "pinn-off-bf16-s0", "pinn-jit-bf16-s0"]
    arm = parse_arm("baseline-physics-fp16-s2")
    assert arm == Arm("baseline", "physics", 2, "mixed_float16") and arm.name == "baseline-physics-fp16-s2"
    assert parse_arm("pinn-jit-s0").precision == "float32"
    assert arm.tags == {"model": "baseline", "xla": "physics", "precision": "mixed_float16", "seed": "2"}
    assert arm.label() == "Baseline, XLA physics, float16, seed 2"
    assert Arm.of_tags(arm.tags) == arm and Arm.of_tags({"rule": "check"}) is None
    assert [parse_arm("pinn-jit-s0").run_name(r) for r in ("train", "evaluate")] == [
        "pinn-jit-s0",
        "pinn-jit-s0-evaluate",
    ]
    with pytest.raises(ValueError, match="not an arm name"):
        parse_arm("pinn-jit-fp32-s0")  # float32 is written without a word: one name per arm
    meta = {"model": {"kind": "pinn"}, "train": {"xla": "jit", "seed": 1, "precision": "mixed_bfloat16"}}
    assert Arm.of_meta(meta).name == "pinn-jit-bf16-s1"
    assert Arm.of_meta({"model": {"kind": "pinn"}, "train": {"xla": "off", "seed": 0}}).name == "pinn-off-s0"


def test_pairs_compare_modes_at_one_precision_and_precisions_in_one_mode():
    from ptycho.study.arms import pairs

    names = ["pinn-off-s0", "pinn-jit-s0", "pinn-off-bf16-s0", "pinn-jit-bf16-s0", "pinn-physics-bf16-s0"]
    got = [(p.axis, p.key, p.group, p.arm.name, p.reference.name, p.words()) for p in pairs(names)]
    assert got == [
        ("mode", "pinn-s0-jit", "pinn-jit", "pinn-jit-s0", "pinn-off-s0", "PINN jit - off"),
        (
            "mode",
            "pinn-s0-jit-bf16",
            "pinn-jit-bf16",
            "pinn-jit-bf16-s0",
            "pinn-off-bf16-s0",
            "PINN jit - off (bfloat16)",
        ),
        (
            "mode",
            "pinn-s0-physics-bf16",
            "pinn-physics-bf16",
            "pinn-physics-bf16-s0",
            "pinn-off-bf16-s0",
            "PINN physics - off (bfloat16)",
        ),
        (
            "precision",
            "pinn-s0-off-bf16-vs-fp32",
            "pinn-off-bf16-vs-fp32",
            "pinn-off-bf16-s0",
            "pinn-off-s0",
            "PINN bfloat16 - float32 (off)",
        ),
        (
            "precision",
            "pinn-s0-jit-bf16-vs-fp32",
            "pinn-jit-bf16-vs-fp32",
            "pinn-jit-bf16-s0",
            "pinn-jit-s0",
            "PINN bfloat16 - float32 (jit)",
        ),
    ]  # physics-bf16 has no float32 physics arm: no precision pair for it


@pytest.mark.parametrize("value", ["bfloat16", "float64", "fp8"])
def test_an_unknown_precision_is_one_line_in_config_and_cli(base, value, capsys):
    from ptycho.cli import main

    with pytest.raises(ConfigError) as err:
        resolve(base, {"precision": [value]})
    assert "precision" in str(err.value) and "\n" not in str(err.value)
    assert main(["train", "--precision", value, "--dataset", "x.h5", "--out", "m"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "precision" in lines[0] and "float32" in lines[0], lines


def test_a_preset_of_the_users_own_is_a_block_under_presets(base):
    """A new block under ``presets:`` is a preset (7816575's schema enum refused every
    name but smoke, default and paper, while its message told the user to add one)."""
    mine = dict(base, presets=dict(base["presets"], mine={"seeds": [3], "train": {"epochs": 1}}))
    cfg = resolve(mine, {"preset": "mine"})
    assert cfg["preset"] == "mine" and cfg["seeds"] == [3] and cfg["train"]["epochs"] == 1
    with pytest.raises(ConfigError, match="characters that are not allowed"):  # a folder name, shell-safe
        resolve(dict(base, presets={"../up": {}}), {"preset": "../up"})


def test_a_precision_the_cpu_only_emulates_is_one_warning_line(base):
    from ptycho.nets.precision import Hardware
    from ptycho.study.workflow import precision_warnings

    cfg = resolve(base, {"precision": ["float32", "mixed_bfloat16", "mixed_float16"]})
    zen4 = precision_warnings(cfg, Hardware(("avx2", "avx512f", "avx512_bf16")))
    assert len(zen4) == 1 and zen4[0].startswith("precision mixed_float16: this CPU has none of avx512_fp16")
    avx2 = precision_warnings(cfg, Hardware(("avx2",)))
    assert [w.split(":")[0] for w in avx2] == ["precision mixed_bfloat16", "precision mixed_float16"]
    assert all("\n" not in w and "precision=[auto]" in w for w in avx2)
    assert precision_warnings(cfg, Hardware(("amx_bf16", "amx_fp16"))) == []
    float32 = {"precision": ["float32"], "bench": {"precision": ["float32"]}}
    assert precision_warnings(resolve(base, float32), Hardware(("avx2",))) == []  # float32 needs nothing


@pytest.mark.parametrize("spelling", ["./qa/base", "qa//base", "qa/base/", "qa/./base"])
def test_a_results_folder_has_one_spelling(base, spelling):
    """./qa/base, qa//base or qa/base/ gave 598 Snakemake warnings and published the report again."""
    assert resolve(base, {"results": spelling})["results"] == "qa/base"


def test_a_long_results_path_gives_a_report_folder_name_a_file_system_takes(tmp_path):
    # Issue 47: a legal 253-character results name flattened to 'qa-<253>' (256 bytes)
    # and the report job died with a 66-line OSError. Cut, and told apart by a hash.
    from ptycho.study.preflight import NAME_MAX, report_folder

    long_a, long_b = "qa/" + "a" * 253, "qa/" + "a" * 252 + "b"
    names = [Path(report_folder({"results": r, "preset": "smoke"})).parent.name for r in (long_a, long_b)]
    assert all(len(n.encode()) <= NAME_MAX for n in names) and names[0] != names[1]
    (tmp_path / names[0]).mkdir()  # the file system takes it
    assert report_folder({"results": "runs/b", "preset": "smoke"}) == "reports/runs-b/smoke"  # short ones as they were


def test_data_keys_without_files_are_no_data_of_the_users_own(base):
    # data.n and data.reduce have defaults, so the resolved 'data' section is never empty:
    # only its files make a study on the user's own data (the default run once dropped its
    # conditions and warned that they are not run on 'your own data').
    from ptycho.study import conditions
    from ptycho.study.data_files import data_files
    from ptycho.study.report import data_sentence

    cfg = resolve(base, {})
    assert cfg["data"] == {"n": 0, "reduce": "crop", "probe": "refine"} and data_files(cfg) == {}
    assert conditions.checked(cfg) and conditions.skipped_words(cfg) == ""
    assert data_sentence({"config": cfg, "items": {"quality": {"evidence": {}}}}) == ""
    own = resolve(base, {"data": {"train": "a.cxi", "test": "a.cxi"}})
    assert conditions.checked(own) == {} and "not run on your own data" in conditions.skipped_words(own)
