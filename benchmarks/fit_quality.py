"""Held-out fit quality of the profiles fitted from Splitwise's perf_model.csv.

    python benchmarks/fit_quality.py [DATA_FOLDER] [--model NAME] [--quick]

DATA_FOLDER defaults to ../shared/data (the development workspace); --model to llama2-70b. For
each shape and phase it prints the basis the fit chose, the grid points fitted, the points left
out as outliers, and the leave-one-out MAPE and max error of the chosen basis (the numbers the
profiles record, and the ones the ≤ 10% acceptance bound applies to). Unless --quick, it also
prints the "selection held out" MAPE: the basis choice is redone without each held-out point
(nested leave-one-out), which shows how much choosing among bases on the same folds flatters the
recorded error. Exits 1 if a recorded held-out MAPE exceeds 10%.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from pdplan.latency.fit import DECODE, PREFILL, fit_phase, selection_heldout_errors
from pdplan.latency.importers import read_splitwise

ROOT = Path(__file__).resolve().parent.parent
BOUND = 0.10


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    args = [a for a in argv if a != "--quick"]
    model = "llama2-70b"
    if "--model" in args:
        at = args.index("--model")
        model = args[at + 1]
        del args[at:at + 2]
    data = Path(args[0]) if args else ROOT.parent / "shared" / "data"
    source = data / "profiles" / "splitwise_perf_model.csv"
    shapes = [s for s in read_splitwise(source) if s.model == model]
    if not shapes:
        print(f"no {model} shapes in {source}", file=sys.stderr)
        return 2

    started = time.perf_counter()
    nested_head = "" if quick else " | sel. held out"
    print(f"Held-out fit quality, {model}, from {source.name} (leave-one-out over distinct grid points)\n")
    print(f"| shape | phase | basis | points | outliers | held-out MAPE | max error{nested_head} |")
    print("|---|---|---|---:|---:|---:|---:|" + ("" if quick else "---:|"))
    worst = 0.0
    for shape in shapes:
        for phase in (PREFILL, DECODE):
            fit = fit_phase(shape.points, phase, what=shape.shape)
            worst = max(worst, fit.heldout_mape)
            nested = ""
            if not quick:
                errors = selection_heldout_errors(shape.points, phase, what=shape.shape)
                nested = f" | {np.nanmean(np.abs(errors)):.1%}"
            print(f"| {shape.gpu} TP{shape.tp} | {phase} | {fit.basis} | {fit.grid_points} "
                  f"| {len(fit.outliers)} | {fit.heldout_mape:.1%} | {fit.heldout_max_error:.1%}"
                  f"{nested} |")
    print(f"\nworst held-out MAPE {worst:.1%} (bound {BOUND:.0%}); "
          f"{time.perf_counter() - started:.1f} s")
    return 0 if worst <= BOUND else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
