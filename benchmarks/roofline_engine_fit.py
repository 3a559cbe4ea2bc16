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

Then, per engine, the terms of the wide expert-parallel roofline the datasheet does not give
(:mod:`pdplan.latency.wide_roofline`): the fixed dispatch-and-combine cost per MoE layer of the
prefill (DeepEP's normal kernels) and of the decode (its low-latency ones), in steps of 5 µs, and
the expert factor, the routed experts' time over their balanced share (steps of 0.05), the grid
point minimising the same mean MAPE against one DP rank's composed steps of DeepSeek-V3 (FP8 and
FP4) at every GPU and DP (= EP, attention TP 1) the engine's wide-EP tables hold, with the engine's
dense fit above.
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
WIDE_MODELS = ("deepseek-v3", "deepseek-v3@fp4")
WIDE_GPUS = ("h100-80gb", "h200-141gb", "b200-180gb", "gb200-185gb")
WIDE_DPS = (4, 8, 16, 32)
A2A_LAYER_US = np.arange(0.0, 3000.1, 5.0)
EXPERT_FACTORS = np.round(np.arange(1.0, 4.001, 0.05), 2)


def shapes(models, gpus, sizes):
    """(name, model, GPU name, GPU, size) for every model, GPU and size."""
    for name in models:
        model = get_model(name)
        for gpu_name in gpus:
            for size in sizes:
                yield name, model, gpu_name, get_gpu(gpu_name), size


def points_for(engine: str) -> CalibrationPoints:
    rows = []
    for name, model, gpu_name, gpu, tp in shapes(MODELS, GPUS, TPS):
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


def wide_parts(engine: str, efficiency) -> pd.DataFrame:
    """Per composed wide point: the phase, the composed seconds, and the roofline's own part, balanced
    routed experts, all-to-all bytes and MoE layers (the fitted terms multiply and add to these)."""
    from pdplan.latency.wide_roofline import WideRoofline

    rows = []
    for name, model, gpu_name, gpu, dp in shapes(WIDE_MODELS, WIDE_GPUS, WIDE_DPS):
        try:
            points = composed_points(model, gpu, 1, engine=engine, dp=dp, ep=dp)
        except PdplanError:
            continue
        step = WideRoofline(model=model, gpu=gpu, tp=1, dp=dp, ep=dp, efficiency=efficiency,
                            gpus_per_node=gpu.nvlink_domain)
        for p in points:
            b = p.batch_size
            parts = (step.prefill_parts(b, round(p.features[1] / b)) if p.phase == "prefill"
                     else step.decode_parts(b, round(p.features[2] / b)))
            rows.append((p.phase, f"{name} {gpu_name} DP{dp}", p.latency_s, *parts, model.moe_layers))
    return pd.DataFrame(rows, columns=["phase", "shape", "measured_s", "own", "group", "wire", "moe_layers"])


def fit_wide(parts: pd.DataFrame) -> tuple[float, float, float, float, float]:
    """(prefill a2a µs per MoE layer, decode a2a µs per MoE layer, expert factor, MAPE prefill, MAPE decode) at
    the grid point of least mean MAPE: for each factor each phase's own a2a cost is its best, the phases
    sharing only the factor."""
    errors = {}
    for phase in ("prefill", "decode"):
        rows = parts[parts.phase == phase]
        measured = rows.measured_s.to_numpy()
        predicted = ((rows.own + rows.wire).to_numpy()[None, None, :]
                     + EXPERT_FACTORS[None, :, None] * rows.group.to_numpy()[None, None, :]
                     + A2A_LAYER_US[:, None, None] * 1e-6 * rows.moe_layers.to_numpy()[None, None, :])
        errors[phase] = (np.abs(predicted - measured) / measured).mean(axis=2)   # (a2a, factor)
    best = {phase: err.min(axis=0) for phase, err in errors.items()}
    j = int(np.argmin(best["prefill"] + best["decode"]))
    i_pre, i_dec = (int(np.argmin(errors[phase][:, j])) for phase in ("prefill", "decode"))
    return (float(A2A_LAYER_US[i_pre]), float(A2A_LAYER_US[i_dec]), float(EXPERT_FACTORS[j]),
            float(best["prefill"][j]), float(best["decode"][j]))


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
        parts = wide_parts(engine, efficiency)
        if parts.empty:
            print(f"{engine}: no wide-EP tables for {', '.join(WIDE_MODELS)}; no wide-EP fit")
            continue
        a2a_prefill, a2a_decode, factor, wide_prefill, wide_decode = fit_wide(parts)
        shapes = sorted(set(parts["shape"]))
        print(f"{engine} wide EP: dispatch and combine {a2a_prefill:g} us (prefill) and {a2a_decode:g} us (decode) per "
              f"MoE layer, expert factor {factor:g}; MAPE prefill {wide_prefill:.1%}, decode {wide_decode:.1%} "
              f"({len(parts)} points: {', '.join(shapes)})")
        fits[engine].update({"wide_a2a_prefill_us": a2a_prefill, "wide_a2a_decode_us": a2a_decode,
                             "wide_expert_factor": factor,
                             "wide_mape_prefill": round(wide_prefill, 4), "wide_mape_decode": round(wide_decode, 4),
                             "wide_points": len(parts), "wide_shapes": shapes})
    if "--write" in argv:
        doc = {"pdplan_roofline_engines": 1,
               "method": "grid search (steps of 0.01 and 10 us) minimising the mean of prefill and decode MAPE "
                         "against composed step times (benchmarks/roofline_engine_fit.py)",
               "origin": f"AIConfigurator {tables.package_version()} measured operator tables (Apache-2.0), "
                         "newest engine version per GPU",
               "shapes": f"{', '.join(MODELS)} on {', '.join(GPUS)}, TP {'/'.join(map(str, TPS))}, PP 1",
               "wide_method": "grid search (steps of 5 us and 0.05) of the wide-EP roofline's dispatch-and-combine "
                              "cost per MoE layer (prefill, decode) and expert factor, minimising the mean of "
                              "prefill and decode MAPE against one DP rank's composed steps (wide_shapes per engine)",
               "engines": fits}
        path = ROOT / "pdplan" / "catalog" / "roofline_engines.yaml"
        atomic_write_text(path, "# Generated by benchmarks/roofline_engine_fit.py --write; do not edit by hand.\n"
                          + dump_yaml(doc))
        print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
