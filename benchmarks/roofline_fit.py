"""Calibrate the roofline's efficiency factors against Splitwise's measurements and print the error.

    python benchmarks/roofline_fit.py [DATA_FOLDER]

DATA_FOLDER defaults to ../shared/data. Prints the grid optimum, the error of the shipped
defaults (pdplan.latency.roofline.DEFAULT_EFFICIENCY) per GPU and TP, the pure two-factor roofline for
comparison, held-out shapes (bloom-176b, the capped H100), and the measured power-cap slowdown. Exits 1
when the shipped defaults are not the grid optimum.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from pdplan.hardware import gpu_catalog
from pdplan.latency.roofline import DEFAULT_EFFICIENCY, MEASURED_COMPUTE_SLOWDOWN
from pdplan.latency.roofline_fit import calibrate_efficiency, load_splitwise_points, roofline_errors
from pdplan.modelref import get_model

ROOT = Path(__file__).resolve().parent.parent


def _report(name, points, model, gpus, efficiency) -> None:
    prefill, decode = roofline_errors(points, model, gpus, efficiency)
    print(f"\n{name}: compute {efficiency.compute:g}, bandwidth {efficiency.bandwidth:g}, "
          f"layer overhead {efficiency.layer_overhead_s * 1e6:g} us")
    print(f"  prefill MAPE {np.abs(prefill).mean():6.1%}  max {np.abs(prefill).max():6.1%}  "
          f"({len(prefill)} points)")
    print(f"  decode  MAPE {np.abs(decode).mean():6.1%}  max {np.abs(decode).max():6.1%}  "
          f"({len(decode)} points)")
    table = pd.concat([
        points.prefill[["gpu", "tp"]].assign(phase="prefill", err=np.abs(prefill), bias=prefill),
        points.decode[["gpu", "tp"]].assign(phase="decode", err=np.abs(decode), bias=decode)])
    summary = table.groupby(["gpu", "tp", "phase"], sort=True)[["err", "bias"]].mean().unstack("phase")
    print("  MAPE and mean signed error (predicted/measured - 1) by shape:")
    for (gpu, tp), row in summary.iterrows():
        print(f"    {gpu:10} TP{tp}  prefill {row[('err', 'prefill')]:6.1%} ({row[('bias', 'prefill')]:+6.1%})"
              f"  decode {row[('err', 'decode')]:6.1%} ({row[('bias', 'decode')]:+6.1%})")


def main(argv: list[str]) -> int:
    data = Path(argv[0]) if argv else ROOT.parent / "shared" / "data"
    path = data / "profiles" / "splitwise_perf_model.csv"
    model, gpus = get_model("llama2-70b"), gpu_catalog()
    points = load_splitwise_points(path)
    print(f"{path.name} sha256 {points.sha256}")
    print(f"points: {len(points.prefill)} prefill, {len(points.decode)} decode; outliers dropped:")
    for outlier in points.outliers:
        print(f"  {outlier}")

    best = calibrate_efficiency(points, model, gpus)
    pure = calibrate_efficiency(points, model, gpus, max_overhead_s=0.0)
    _report("grid optimum", points, model, gpus, best)
    _report("shipped DEFAULT_EFFICIENCY", points, model, gpus, DEFAULT_EFFICIENCY)
    _report("pure two-factor roofline (no per-layer cost)", points, model, gpus, pure)

    print("\nheld out (not used by the calibration), shipped defaults:")
    for name, held_gpus in (("bloom-176b", ("a100-80gb", "h100-80gb", "h100-80gb-pcap")),
                            ("llama2-70b", ("h100-80gb-pcap",))):
        held = load_splitwise_points(path, name, held_gpus)
        prefill, decode = roofline_errors(held, get_model(name), gpus)
        print(f"  {name:10} on {', '.join(held_gpus)}: prefill MAPE {np.abs(prefill).mean():.1%} "
              f"(max {np.abs(prefill).max():.1%}, {len(prefill)} points), decode MAPE "
              f"{np.abs(decode).mean():.1%} (max {np.abs(decode).max():.1%}, {len(decode)} points)")

    raw = pd.read_csv(path)
    keys = ["model", "tensor_parallel", "prompt_size", "batch_size", "token_size"]
    means = raw.groupby(keys + ["hardware"])[["prompt_time", "token_time"]].mean().reset_index()
    for capped, base in (("h100-80gb-pcap", "h100-80gb"),):
        pair = means[means.hardware == base].merge(means[means.hardware == capped], on=keys)
        ratio = pair.prompt_time_y / pair.prompt_time_x
        token = pair.token_time_y / pair.token_time_x
        print(f"\n{capped} / {base}: prompt-time ratio median {ratio.median():.4f} "
              f"[{ratio.min():.4f}, {ratio.max():.4f}], token-time ratio "
              f"[{token.min():.4f}, {token.max():.4f}] over {len(pair)} points; "
              f"shipped slowdown {MEASURED_COMPUTE_SLOWDOWN[capped]}")

    if best != DEFAULT_EFFICIENCY:
        print("\nDEFAULT_EFFICIENCY is not the grid optimum: update pdplan/latency/roofline.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
