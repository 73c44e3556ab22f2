"""The order in which the workflow starts its trainings (``ptycho.study.schedule.training_priority``),
followed through a simulation of Snakemake's local scheduler: whenever a slot is free, the
ready job of the highest priority starts."""

import pytest

from ptycho.study.arms import Arm
from ptycho.study.schedule import training_priority

# A PINN epoch's seconds on the 2-core AVX2 EPYC of 2026-12-02, two trainings at once.
EPOCH_S = {"off": 104.0, "physics": 95.0, "jit": 120.0}


def seconds(arm: Arm) -> float:
    return 20 * EPOCH_S[arm.mode] * (0.5 if arm.model == "baseline" else 1.0)


def run(arms, slots, priority):
    """Each arm's (start, end) when ``slots`` jobs run at once, highest priority first (the
    test refuses ties, which Snakemake would break either way)."""
    waiting = sorted(arms, key=priority, reverse=True)
    assert len({priority(a) for a in arms}) == len(arms), "two trainings share a priority"
    running, times, now = [], {}, 0.0
    while waiting or running:
        while waiting and len(running) < slots:
            arm = waiting.pop(0)
            times[arm] = (now, now + seconds(arm))
            running.append(arm)
        now = min(times[a][1] for a in running)
        running = [a for a in running if times[a][1] > now]
    return times


def overlap(a, b):
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def study(seeds, modes=("off", "physics"), precision="float32"):
    pinn = [Arm("pinn", m, s, precision) for s in seeds for m in modes]
    return pinn + [Arm("baseline", "off", s, precision) for s in seeds[:1]]


@pytest.mark.parametrize("n_seeds", [3, 5])
def test_each_xla_arm_trains_beside_its_off_pair_however_many_seeds(n_seeds):
    arms = study(list(range(n_seeds)))
    times = run(arms, 2, lambda a: training_priority(a, arms, seconds))
    difference = seconds(Arm("pinn", "off", 0)) - seconds(Arm("pinn", "physics", 0))
    for s in range(n_seeds):
        off, physics = times[Arm("pinn", "off", s)], times[Arm("pinn", "physics", s)]
        # side by side for all of the faster arm but at most one pair's difference
        assert overlap(off, physics) >= seconds(Arm("pinn", "physics", s)) - difference - 1e-9, s
    # the baseline starts last, once a PINN arm ends, and the study takes no longer than before
    assert times[Arm("baseline", "off", 0)][0] == max(t[0] for t in times.values())


def test_started_faster_first_the_pairs_drift_apart_seed_by_seed():
    """The check above fails for the faster mode of a seed first (what the tie of the modes of a
    seed gave the AVX2 run of 2026-12-02): the offset grows by one pair's difference per seed."""
    arms = study(list(range(5)))

    def faster_first(a):
        p = training_priority(a, arms, seconds)
        return p - 2 * (p % 100) + 1  # the rank within the seed turned round

    times = run(arms, 2, faster_first)
    offsets = [times[Arm("pinn", "off", s)][0] - times[Arm("pinn", "physics", s)][0] for s in range(5)]
    assert offsets == pytest.approx([0, 180, 360, 540, 720])
    assert overlap(times[Arm("pinn", "off", 4)], times[Arm("pinn", "physics", 4)]) < 1200


def test_the_longest_group_starts_first_then_seeds_in_order_then_the_slower_mode():
    arms = study([0, 1], modes=("off", "jit")) + study([0, 1], modes=("off", "jit"), precision="mixed_bfloat16")

    def bf16_slower(a):
        return seconds(a) * (2 if a.precision == "mixed_bfloat16" else 1)

    order = sorted(arms, key=lambda a: training_priority(a, arms, bf16_slower), reverse=True)
    # ranks, not seconds: Snakemake's MILP scheduler would lose a step of 1 beside 1e9
    assert max(training_priority(a, arms, bf16_slower) for a in arms) < 10**6
    assert [(a.model, a.mode, a.seed, a.precision) for a in order[:4]] == [
        ("pinn", "jit", 0, "mixed_bfloat16"),
        ("pinn", "off", 0, "mixed_bfloat16"),
        ("pinn", "jit", 1, "mixed_bfloat16"),
        ("pinn", "off", 1, "mixed_bfloat16"),
    ]


def test_the_seeds_a_look_adds_come_after_the_planned_ones_and_keep_their_pairs():
    arms = study([0, 1, 2])
    added = [Arm("pinn", m, s) for s in (3, 4) for m in ("off", "physics")]  # a look adds two seeds at once
    assert max(training_priority(a, arms, seconds) for a in added) < min(
        training_priority(a, arms, seconds) for a in arms[:-1]
    )
    times = run(added, 2, lambda a: training_priority(a, arms, seconds))  # ties refused there too
    for s in (3, 4):
        off, physics = times[Arm("pinn", "off", s)], times[Arm("pinn", "physics", s)]
        assert overlap(off, physics) >= seconds(Arm("pinn", "physics", s)) - 180 - 1e-9, s


def test_modes_of_equal_cost_stay_distinct():
    arms = study([0, 1, 2])
    same = [training_priority(a, arms, lambda a: 1.0) for a in arms if a.model == "pinn"]
    assert len(set(same)) == len(same)
