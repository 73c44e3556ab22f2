"""XLA_FLAGS settings against none: the study's PINN train step under one mode, interleaved.

    python scripts/xla_flags_speed.py [--mode jit] [--threads 1] [--repeats 40] \
        none xla_cpu_enable_fast_math=true xla_cpu_use_onednn=true

Each setting (an XLA flag without its leading ``--``, or ``none``) gets its own benchmark worker process (XLA reads XLA_FLAGS
once, at start), built like ``ptycho bench``'s; after warm-up one step of each is timed
in turn, ``--repeats`` times, so load drift hits every setting alike. Prints each median
with its ratio to the first setting's (95 % bootstrap interval), the CPU, its dtype flags
and the load. Check that a flag took effect (``--xla_dump_to``, ``ONEDNN_VERBOSE=1``)
before reading its timing: docs/architecture.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="jit")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("settings", nargs="+", help="XLA flags without the leading --, or none")
    args = parser.parse_args()
    settings = {s: "" if s == "none" else f"--{s}" for s in args.settings}
    from ptycho.config import SimulationConfig
    from ptycho.data.simulate import simulate_split
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig
    from ptycho.study.bench import BenchConfig, machine_info
    from ptycho.study.bench.machine import cpu_words, flags_words, load_average
    from ptycho.study.bench.worker import _Worker
    from ptycho.study.stats import bootstrap_ratio, quartiles

    ds = simulate_split(SimulationConfig(n_objects_train=1), "train")  # the study's patches: n 64, gridsize 2
    spec = {
        "dataset": ds,
        "model_cfg": dataclasses.asdict(ModelConfig()),  # the study's network (filters 32, depth 2, mixing 1)
        "train_cfg": dataclasses.asdict(TrainConfig(xla=args.mode)),
        "bench": dataclasses.asdict(BenchConfig()),
        "threads": args.threads,
        "count_clusters": False,
    }
    ctx, workers = multiprocessing.get_context("spawn"), []
    start = load_average()
    try:
        for flags in settings.values():  # a spawned worker inherits os.environ as it is when started
            os.environ["XLA_FLAGS"] = flags
            workers.append(_Worker(ctx, spec))
        for w in workers:
            for _ in range(3):
                w.call("step")
        times = [[] for _ in workers]
        for r in range(args.repeats):
            for i in range(len(workers)) if r % 2 == 0 else reversed(range(len(workers))):
                times[i].append(workers[i].call("step"))
    finally:
        for w in workers:
            w.stop()
    m = machine_info()
    load = " / ".join(f"{v[0]:.2f}" for v in (start, load_average()))
    print(f"{cpu_words(m)}{flags_words(m)}; {args.mode}, {args.threads} thread(s); 1-min load {load} at start / end")
    for setting, t in zip(settings, times, strict=True):
        r = bootstrap_ratio(times[0], t)
        print(f"{setting:45s} {1e3 * quartiles(t)['median']:7.1f} ms  "
              f"{r['ratio']:.3f}x ({r['low']:.3f}-{r['high']:.3f}) vs {args.settings[0]}")  # fmt: skip


if __name__ == "__main__":
    main()
