"""How often a study decides "not worse" when XLA changes nothing, by its seeds and looks.

    python scripts/look_chance.py [--sd 0.021] [--margin 0.02] [--plans 3 5 7 3,5,7 3,5,7,9,11]

A plan is the seeds per arm at each look (``3,5,7``: 3 seeds, then 5, then 7, as
``seeds: [0, 1, 2]`` with ``max_seeds: 7`` plans them); a single number is one look. For
each plan and each way of spending the error rate over its looks (Kim & DeMets' power
family, ``rho`` 1 near Pocock's constant level, 3 near O'Brien & Fleming's, the study's
:data:`~ptycho.study.stats.SPENDING_RHO`), it draws 40,000 studies of identical arms
whose paired differences scatter by ``--sd`` and prints the per-look levels, the share
of studies whose one-sided bound (the paired t bound the quality and convergence items
read) clears ``-margin`` at some look, and the seeds per arm they trained on average.
The default ``--sd`` is the amplitude SSIM's paired spread on the default study (Intel
AMX, bf16, 7 seeds; docs/report.md), ``--margin`` the study's ``quality_max_ssim_diff``.
docs/report.md ("How the looks spend the error rate") has what this printed.
"""

from __future__ import annotations

import argparse

from ptycho.study.stats import ALPHA, SPENDING_RHO, decision_chance, sequential_levels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sd", type=float, default=0.021, help="paired differences' spread (amplitude SSIM)")
    parser.add_argument("--margin", type=float, default=0.02, help="the non-inferiority margin")
    parser.add_argument("--plans", nargs="+", default=["3", "5", "7", "3,5,7", "3,5,7,9,11"])
    args = parser.parse_args()
    print(f"identical arms, paired sd {args.sd}, margin {args.margin}, alpha {ALPHA}")
    for text in args.plans:
        sizes = tuple(int(n) for n in text.split(","))
        for rho in (1, SPENDING_RHO) if len(sizes) > 1 else (None,):
            levels = sequential_levels(ALPHA, sizes, rho) if rho else (ALPHA,)
            p, seeds = decision_chance(sizes, levels, args.sd, args.margin, studies=40_000)
            shape = f"rho {rho}" if rho else "one look"
            print(
                f"seeds {text:>12} ({shape:>8}): levels {' '.join(f'{v:.4f}' for v in levels)}; "
                f"decides NOT WORSE {100 * p:.0f} %, {seeds:.1f} seeds per arm on average"
            )


if __name__ == "__main__":
    main()
