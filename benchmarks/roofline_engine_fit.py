"""Fit the roofline's efficiencies and per-layer overhead per serving engine, on composed step times.

    python benchmarks/roofline_engine_fit.py [--write]

The roofline's fixed cost per layer per iteration was fitted once, on Splitwise's 2023 A100/H100
measurements (260 µs, ``roofline_fit.py``); today's engines run far leaner steps. For each engine
(vLLM, SGLang, TensorRT-LLM) this script times the composition grid of every shape below from
AIConfigurator's measured operators (``pdplan.latency.compose``), and picks the (compute efficiency,
bandwidth efficiency, per-layer overhead) grid point minimising the mean of the prefill and
decode MAPE against them, as ``roofline_fit.py`` does against Splitwise. It prints the fit and its
error per model and GPU; ``--write`` stores it in ``pdplan/catalog/roofline_engines.yaml``, from
which ``profile roofline --engine`` and the fallback roofline of a run with ``--engine`` read it.
Needs the optional extra pdplan[aic]. The silicon validation never feeds this fit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from pdplan.errors import PdplanError
from pdplan.fileio import atomic_write_text, dump_yaml
from pdplan.hardware import get_gpu
from pdplan.latency.compose import tables
from pdplan.latency.compose.profile import composed_points
from pdplan.latency.roofline_fit import CalibrationPoints, calibrate_efficiency, roofline_errors
from pdplan.modelref import get_model
from pdplan.modelspec import shape_rejection

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("llama-3.1-8b", "llama-3.1-8b@fp8", "qwen3-32b", "qwen3-32b@fp8", "llama-3.1-70b@fp8")
GPUS = ("h100-80gb", "h200-141gb", "b200-180gb")
TPS = (1, 2, 4, 8)


def points_for(engine: str) -> CalibrationPoints:
    rows = []
    for name in MODELS:
        model = get_model(name)
        for gpu_name in GPUS:
            gpu = get_gpu(gpu_name)
            for tp in TPS:
                if shape_rejection(model, gpu, tp, 1, gpus_per_node=8, kv_reserve_tokens=16384):
                    continue
                try:
                    points = composed_points(model, gpu, tp, engine=engine)
                except PdplanError as err:
                    print(f"  {engine} {name} {gpu_name} TP{tp}: skipped ({err.detail})")
                    continue
                rows += [(p.phase, name, gpu_name, tp, p.batch_size, *p.features, p.latency_s) for p in points]
    frame = pd.DataFrame(rows, columns=["phase", "model", "gpu", "tp", "batch", "f0", "f1", "f2", "measured_s"])
    return CalibrationPoints(prefill=frame[frame.phase == "prefill"].drop(columns="phase").reset_index(drop=True),
                             decode=frame[frame.phase == "decode"].drop(columns="phase").reset_index(drop=True),
                             outliers=(), sha256="")


def main(argv: list[str]) -> int:
    models = {name: get_model(name) for name in MODELS}
    gpus = {name: get_gpu(name) for name in GPUS}
    fits = {}
    for engine in tables.ENGINES:
        points = points_for(engine)
        efficiency = calibrate_efficiency(points, models, gpus)
        prefill, decode = roofline_errors(points, models, gpus, efficiency)
        print(f"\n{engine}: compute {efficiency.compute:g}, bandwidth {efficiency.bandwidth:g}, "
              f"layer overhead {efficiency.layer_overhead_s * 1e6:g} us; MAPE prefill {np.abs(prefill).mean():.1%}, "
              f"decode {np.abs(decode).mean():.1%} ({len(prefill)} + {len(decode)} points)")
        table = pd.concat([points.prefill[["model", "gpu"]].assign(phase="prefill", err=np.abs(prefill)),
                           points.decode[["model", "gpu"]].assign(phase="decode", err=np.abs(decode))])
        print(table.groupby(["model", "gpu", "phase"])["err"].mean().unstack("phase").to_string(
            float_format=lambda x: f"{x:.1%}"))
        fits[engine] = {"compute_efficiency": efficiency.compute, "bandwidth_efficiency": efficiency.bandwidth,
                        "layer_overhead_us": round(efficiency.layer_overhead_s * 1e6, 6),
                        "mape_prefill": round(float(np.abs(prefill).mean()), 4),
                        "mape_decode": round(float(np.abs(decode).mean()), 4),
                        "points": len(prefill) + len(decode)}
    if "--write" in argv:
        doc = {"pdplan_roofline_engines": 1,
               "method": "grid search (steps of 0.01 and 10 us) minimising the mean of prefill and decode MAPE "
                         "against composed step times (benchmarks/roofline_engine_fit.py)",
               "origin": f"AIConfigurator {tables.package_version()} measured operator tables (Apache-2.0), "
                         "newest engine version per GPU",
               "shapes": f"{', '.join(MODELS)} on {', '.join(GPUS)}, TP {'/'.join(map(str, TPS))}, PP 1",
               "engines": fits}
        path = ROOT / "pdplan" / "catalog" / "roofline_engines.yaml"
        atomic_write_text(path, "# Generated by benchmarks/roofline_engine_fit.py --write; do not edit by hand.\n"
                          + dump_yaml(doc))
        print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
