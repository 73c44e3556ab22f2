"""Where a pair's paths part: one XLA mode against ``off`` from one seed, at one precision.

    python scripts/pair_paths.py step RESULTS_DIR [--precision mixed_bfloat16] [--seed 0] [--steps 40]
    python scripts/pair_paths.py free RESULTS_DIR [--precision mixed_bfloat16] [--seed 0] [--steps 245]
    python scripts/pair_paths.py score RESULTS_DIR ARM [ARM ...]

RESULTS_DIR is a finished study's ``results/<preset>`` (its ``data/train.h5`` and, for
``score``, its ``models/<arm>/``). The mode compared is ``--mode`` (default physics).

* ``step``: both trainers start every step from ``off``'s weights and optimiser state and
  take the same batch; prints how far the two updates differ (over the update's norm),
  their cosine and norm ratio. A difference with no direction is two roundings of one step.
* ``free``: both run free from the same seed; prints the distance between their weights
  over the distance travelled from the start, and both validation losses, at steps 1 to
  245. How many steps a pair shares its path.
* ``score``: each recorded model's validation loss evaluated by an ``off`` and a mode
  trainer alike: whether the arms' loss curves could differ by how they are read.

docs/report.md ("Where the seed-to-seed spread comes from") has what these printed on the
default study.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np

READINGS = (1, 3, 10, 30, 61, 122, 184, 245)


def _setup(results: Path, precision: str, seed: int, modes: tuple[str, ...]):
    from ptycho.data.dataset import read_dataset
    from ptycho.nets.inputs import prepare
    from ptycho.nets.train import _split, configs_from_meta, epoch_batches
    from ptycho.nets.trainer import Trainer

    # The study's PINN configuration, as its first recorded PINN training has it.
    first = sorted((results / "models").glob("pinn-*/model.json"))[0]
    model_cfg, train_cfg = configs_from_meta(json.loads(first.read_text()))
    train_cfg = dataclasses.replace(train_cfg, seed=seed, precision=precision)
    ds = read_dataset(results / "data" / "train.h5")
    data = prepare(ds, "pinn")
    rng = np.random.default_rng(train_cfg.seed)
    split = _split(len(data.inputs), train_cfg, rng)
    trainers = tuple(
        Trainer(
            model_cfg,
            dataclasses.replace(train_cfg, xla=m),
            ds.n,
            data.inputs.shape[-1],
            ds.probe,
            data.physics,
            split.steps,
        )
        for m in modes
    )

    def batches():
        """The training's batches in its order: each epoch a fresh shuffle (ptycho.nets.train)."""
        while True:
            yield from epoch_batches(split, rng, train_cfg.batch_size)

    return trainers, data, split, batches()


def _flat(trainer) -> np.ndarray:
    return np.concatenate([v.numpy().astype(np.float64).ravel() for v in trainer.variables])


def step(args) -> None:
    (off, mode), data, _, batches = _setup(args.results, args.precision, args.seed, ("off", args.mode))
    rows = []
    for _ in range(args.steps):
        for mine, theirs in ((mode.variables, off.variables), (mode.optimizer.variables, off.optimizer.variables)):
            for v, a in zip(mine, theirs, strict=True):
                v.assign(a)
        before = _flat(off)
        batch = data.batch(next(batches))
        off.train_step(*batch)
        mode.train_step(*batch)
        d_off, d_mode = _flat(off) - before, _flat(mode) - before
        norm = np.linalg.norm(d_off)
        rows.append(
            (
                np.linalg.norm(d_mode - d_off) / norm,
                d_off @ d_mode / norm / np.linalg.norm(d_mode),
                np.log(np.linalg.norm(d_mode) / norm),
            )
        )
    a = np.array(rows)
    print(
        f"{args.precision} seed {args.seed}, {args.mode} vs off, one step from the same state, {len(a)} steps: "
        f"update difference over the update median {np.median(a[:, 0]):.2e}, cosine min {a[:, 1].min():.8f}, "
        f"log norm ratio mean {a[:, 2].mean():+.2e} (standard error {a[:, 2].std(ddof=1) / np.sqrt(len(a)):.1e})"
    )


def free(args) -> None:
    from ptycho.nets.train import evaluate

    (off, mode), data, split, batches = _setup(args.results, args.precision, args.seed, ("off", args.mode))
    start = _flat(off)
    for k in range(1, args.steps + 1):
        batch = data.batch(next(batches))
        off.train_step(*batch)
        mode.train_step(*batch)
        if k in READINGS or k == args.steps:
            w_off, w_mode = _flat(off), _flat(mode)
            v_off, v_mode = evaluate(off, data, split.val), evaluate(mode, data, split.val)
            print(
                f"{args.precision} seed {args.seed} step {k}: distance over travelled "
                f"{np.linalg.norm(w_mode - w_off) / np.linalg.norm(w_off - start):.2e}; validation loss off "
                f"{v_off:.5f} {args.mode} {v_mode:.5f} (log ratio {np.log(v_mode / v_off):+.4f})",
                flush=True,
            )


def score(args) -> None:
    import keras

    from ptycho.data.dataset import read_dataset
    from ptycho.nets.inputs import prepare
    from ptycho.nets.train import _split, configs_from_meta, evaluate
    from ptycho.nets.trainer import Trainer

    ds = read_dataset(args.results / "data" / "train.h5")
    data = prepare(ds, "pinn")
    for arm in args.arms:
        folder = args.results / "models" / arm
        meta = json.loads((folder / "model.json").read_text())
        model_cfg, train_cfg = configs_from_meta(meta)
        split = _split(len(data.inputs), train_cfg, np.random.default_rng(train_cfg.seed))
        weights = keras.models.load_model(folder / "model.keras", compile=False).get_weights()
        losses = {}
        for m in ("off", args.mode):
            t = Trainer(
                model_cfg,
                dataclasses.replace(train_cfg, xla=m),
                ds.n,
                data.inputs.shape[-1],
                ds.probe,
                meta["physics"],
                split.steps,
            )
            t.network.set_weights(weights)
            t.log_scale.assign(meta["physics"]["log_scale"])
            losses[m] = evaluate(t, data, split.val)
        print(
            f"{arm}: recorded {meta['val_curve'][-1]['val_loss']:.6f}; evaluated by off {losses['off']:.6f}, "
            f"by {args.mode} {losses[args.mode]:.6f} (relative {losses[args.mode] / losses['off'] - 1:+.1e})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    for name in ("step", "free", "score"):
        p = sub.add_parser(name)
        p.add_argument("results", type=Path)
        p.add_argument("--mode", default="physics")
        if name == "score":
            p.add_argument("arms", nargs="+")
        else:
            p.add_argument("--precision", default="mixed_bfloat16")
            p.add_argument("--seed", type=int, default=0)
            p.add_argument("--steps", type=int, default=40 if name == "step" else 245)
    args = parser.parse_args()
    {"step": step, "free": free, "score": score}[args.what](args)


if __name__ == "__main__":
    main()
