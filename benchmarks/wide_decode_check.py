"""Print pdplan's composed decode step of one attention data-parallel rank next to real disaggregated
measurements: the wide-EP rows of AIConfigurator's ``silicon_sample.csv`` (DeepSeek-R1 at fp8 on H200 or
B200, disaggregated, decode attention DP > 1; SGLang's, and TensorRT-LLM's with ``--engine trtllm``).

Each row's decode worker is TP ``decode_tp_size`` per rank × DP ``decode_attention_dp_size`` with EP
``decode_moe_ep_size``; ``decode_batch_size`` is the batch of one DP rank (the client's concurrency over
the DP ranks). The step is composed at that batch with each request holding isl + osl/2 tokens (the
middle of its decode), both as the operator sum and as the fitted profile. Nothing is fitted to the rows;
a row whose shape no table covers prints the reason. Run: ``python benchmarks/wide_decode_check.py``.
"""

from __future__ import annotations

import sys

import pandas as pd

from pdplan.errors import PdplanError
from pdplan.hardware import get_gpu
from pdplan.latency.compose import tables
from pdplan.latency.compose.profile import _composition, composed_profile
from pdplan.modelref import get_model

GPUS = {"h200_sxm": "h200-141gb", "b200_sxm": "b200-180gb"}


def wide_rows(path, engine: str) -> pd.DataFrame:
    frame = pd.read_csv(path)
    frame = frame[(frame["mode"] == "disagg") & (frame.backend.str.lower() == engine)
                  & frame.system.isin(list(GPUS)) & frame.model_path.str.contains("DeepSeek")
                  & (frame.decode_attention_dp_size > 1) & frame.moe_quant_mode.isin(["fp8", "fp8_block"])]
    return frame.sort_values(["system", "decode_batch_size", "id"])


def main(argv: list[str]) -> int:
    engine = argv[argv.index("--engine") + 1] if "--engine" in argv else "sglang"
    rows = wide_rows(tables.package_root() / "systems" / "silicon_sample.csv", engine)
    model = get_model("deepseek-r1@fp8")
    print(f"{len(rows)} {engine} wide-EP disaggregated fp8 DeepSeek rows "
          f"(aiconfigurator-core {tables.package_version()})")
    for _, row in rows.iterrows():
        gpu = get_gpu(GPUS[row.system])
        tp, dp, ep = int(row.decode_tp_size), int(row.decode_attention_dp_size), int(row.decode_moe_ep_size)
        batch, context = int(row.decode_batch_size), int(row.isl + row.osl / 2)
        head = f"{row.id}: {gpu.name} TP{tp} DP{dp} EP{ep}, rank batch {batch}, context {context}"
        try:
            profile = composed_profile(model, gpu, tp, 1, dp=dp, ep=ep, engine=engine)
            step, _, _ = _composition(model, gpu, tp, 1, engine=engine, engine_version=None,
                                      memory_utilization=0.9, dp=dp, ep=ep)
        except PdplanError as err:
            print(f"{head}: not composed ({err.detail})")
            continue
        summed = step.decode_s(batch, context) * 1e3
        fitted = profile.decode_step_s(batch, batch * context) * 1e3
        print(f"{head}: composed step {summed:.2f} ms (fitted profile {fitted:.2f} ms), "
              f"silicon TPOT {row.silicon_tpot_ms:.2f} ms ({summed / row.silicon_tpot_ms - 1:+.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
