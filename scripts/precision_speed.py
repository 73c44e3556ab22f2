"""float32 against mixed bfloat16: the default study's PINN train step, per XLA mode, interleaved.

    python scripts/precision_speed.py [--threads 1] [--modes off physics jit] [--repeats 30]

Every (mode, precision) trainer is built and warmed up first, then one step of each is
timed in turn, ``--repeats`` times, so that the machine's load falls on every arm alike;
medians are printed with their ratios, with the CPU model, its bfloat16 flags and the
load. A quick look before ``ptycho bench`` measures precision as an axis of its own.
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--modes", nargs="+", default=["off", "physics", "jit"])
    parser.add_argument("--precisions", nargs="+", default=["float32", "mixed_bfloat16"])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    os.environ["TF_NUM_INTRAOP_THREADS"] = str(args.threads)
    os.environ["TF_NUM_INTEROP_THREADS"] = "1"
    from ptycho.nets.xla import xla_flags_environment

    os.environ.update(xla_flags_environment())
    import numpy as np

    from ptycho.config import SimulationConfig
    from ptycho.data.simulate import simulate_split
    from ptycho.nets.models import ModelConfig
    from ptycho.nets.train import TrainConfig, Trainer, prepare
    from ptycho.study.bench import machine_info
    from ptycho.study.bench.machine import cpu_words

    ds = simulate_split(SimulationConfig(n_objects_train=1), "train")  # the study's patches: n 64, gridsize 2
    data = prepare(ds, "pinn")
    idx = np.arange(TrainConfig().batch_size)
    batch = (data.inputs[idx], data.offsets[idx], {k: v[idx] for k, v in data.targets.items()})
    arms = {}
    for mode in args.modes:
        for precision in args.precisions:
            t = Trainer(
                ModelConfig(),  # the study's network (filters 32, depth 2, mixing 1, MAE)
                TrainConfig(xla=mode, precision=precision),
                ds.n,
                data.inputs.shape[-1],
                ds.probe,
                data.physics,
            )
            for _ in range(3):
                t.train_step(*batch).numpy()
            arms[(mode, precision)] = (t, [])
    for _ in range(args.repeats):
        for t, times in arms.values():
            start = time.perf_counter()
            t.train_step(*batch).numpy()
            times.append(time.perf_counter() - start)
    m = machine_info()
    flags = [f for f in ("avx512_bf16", "amx_bf16") if f in open("/proc/cpuinfo").read()]
    print(
        f"{cpu_words(m)}, bfloat16 flags: {', '.join(flags) or 'none'}; {args.threads} thread(s); load {os.getloadavg()}"
    )
    median = {key: float(np.median(times)) for key, (_, times) in arms.items()}
    ref = median[(args.modes[0], args.precisions[0])]
    for (mode, precision), value in median.items():
        print(
            f"{mode:8s} {precision:15s} {1e3 * value:7.1f} ms  {ref / value:.2f}x {args.modes[0]} {args.precisions[0]}"
        )


if __name__ == "__main__":
    main()
