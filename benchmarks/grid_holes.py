"""How a measured operator table's unmeasured corner should be filled: each rule against the measurements.

    python benchmarks/grid_holes.py [--systems b200_sxm,gb200,h200_sxm] [--past]

AIConfigurator's attention and MLA tables stop at a total of tokens: at long KV or prompt lengths the
larger batches were never measured, and a composed step reading that corner reads a filled value
(:func:`pdplan.latency.compose.tables.fill_holes`). This leaves out the last measured batch of every
line of those tables (one kernel configuration at one length, the fastest kernel per batch, as a grid
takes it; lines of three or more batches), predicts it from the rest of its line, and prints the
median and p90 absolute error and the median signed error of three rules, per table and engine:

* held: the last value before it (what pdplan did before);
* in proportion: that value scaled by the batch (what a grid does past its axis's measured end);
* along the slope: pdplan's rule, ``fill_holes`` on the line with the point left out.

With ``--past`` it asks the same of a query off a table's size axis (GEMM rows, tokens, batch, message
elements; :meth:`pdplan.latency.compose.tables.Grid.__call__`): each line of the GEMM, generation attention,
MoE, wide-EP MoE and all-reduce tables of B200, GB200, GB300 and H200 has its last one, two and three measured
sizes left out and the largest predicted from the rest, and its smallest left out and predicted from the rest:

* in proportion: the edge scaled by the size (what a grid did off its size axis before);
* along the octave's slope: pdplan's rule past the largest (:func:`pdplan.latency.compose.tables.fill_holes`,
  the rule a grid reads past its edge too);
* held: pdplan's rule below the smallest.

Nothing is fitted: the numbers are the tables' own.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

from pdplan.engines import ENGINES
from pdplan.latency.compose import tables

#: (family folder, file, the column after the batch that makes a line, the configuration columns)
TABLES = {
    "context attention": ("attention", "context_attention_perf.parquet", "isl",
                          ["num_heads", "num_key_value_heads", "head_dim", "window_size", "kv_cache_dtype"]),
    "generation attention": ("attention", "generation_attention_perf.parquet", "step",
                             ["num_heads", "num_key_value_heads", "head_dim", "window_size", "kv_cache_dtype"]),
    "context MLA": ("mla", "context_mla_perf.parquet", "isl", ["num_heads", "kv_cache_dtype", "tp_size"]),
    "generation MLA": ("mla", "generation_mla_perf.parquet", "step", ["num_heads", "kv_cache_dtype", "tp_size"]),
}
DEFAULT_SYSTEMS = ("b200_sxm", "gb200", "h200_sxm")
#: the tables ``--past`` reads: (family folder, file, the size axis); a line is every other column's value
SIZED = {"GEMM": ("gemm", "gemm_perf.parquet", "m"),
         "generation attention": ("attention", "generation_attention_perf.parquet", "batch_size"),
         "MoE": ("moe", "moe_perf.parquet", "num_tokens"),
         "wide-EP MoE context": ("moe", "wideep_context_moe_perf.parquet", "num_tokens"),
         "wide-EP MoE generation": ("moe", "wideep_generation_moe_perf.parquet", "num_tokens"),
         "all-reduce": ("comm", "custom_allreduce_perf.parquet", "message_size")}
PAST_SYSTEMS = ("b200_sxm", "gb200", "gb300", "h200_sxm")
#: columns that name a measurement rather than the kernel's configuration
METADATA = ("framework", "version", "device", "kernel_source", "backend_name", "latency")


def lines(frame: pd.DataFrame, length: str, config: list[str]):
    """Each line of a table: its batches and the fastest latency measured at each (seconds)."""
    keys = [c for c in config + [length] if c in frame.columns]
    best = frame.groupby(keys + ["batch_size"], sort=True)["latency"].min() / 1e3
    for _, line in best.groupby(level=list(range(len(keys)))):
        yield line.index.get_level_values(-1).to_numpy(float), line.to_numpy()


def predictions(batch: np.ndarray, latency: np.ndarray) -> dict[str, float]:
    """The last point of a line predicted from the others by each rule."""
    values = latency.copy()
    values[-1] = np.nan
    tables.fill_holes(values, [batch])
    return {"held": latency[-2], "in proportion": latency[-2] * batch[-1] / batch[-2],
            "along the slope": values[-1]}


def left_out(systems: tuple[str, ...]) -> pd.DataFrame:
    rows = []
    root = tables.package_root() / "systems" / "data"
    for system in systems:
        for engine in ENGINES:
            for name, (family, filename, length, config) in TABLES.items():
                folder = root / system / family / engine
                if not folder.is_dir():
                    continue
                for version in sorted(p.name for p in folder.iterdir() if (p / filename).is_file()):
                    frame = pd.read_parquet(folder / version / filename)
                    for batch, latency in lines(frame, length, config):
                        if len(batch) < 3:
                            continue
                        for rule, value in predictions(batch, latency).items():
                            rows.append({"table": name, "engine": engine, "system": system, "version": version,
                                         "rule": rule, "signed": value / latency[-1] - 1})
    return pd.DataFrame(rows)


def sized_lines(frame: pd.DataFrame, size: str):
    """Each line of a table along its size axis: the sizes and the fastest latency at each."""
    keys = [c for c in frame.columns if c not in METADATA and c != size]
    best = frame.groupby(keys + [size], sort=True)["latency"].min()
    for _, line in best.groupby(level=list(range(len(keys)))):
        yield line.index.get_level_values(-1).to_numpy(float), line.to_numpy()


def off_the_grid(size: np.ndarray, latency: np.ndarray) -> list[tuple[str, int, float, float]]:
    """(side, sizes left out, rule, signed error) of each prediction of a line's largest and smallest size."""
    out = []
    for k in (1, 2, 3):
        if len(size) < k + 2:
            break
        values = latency.copy()
        values[-k:] = np.nan
        tables.fill_holes(values, [size])  # pdplan's rule past a line's last measurement, a grid's past its edge
        for rule, value in (("in proportion", latency[-k - 1] * size[-1] / size[-k - 1]),
                            ("along the octave's slope", values[-1])):
            out.append(("past", k, rule, value / latency[-1] - 1))
    if len(size) >= 3:
        for rule, value in (("in proportion", latency[1] * size[0] / size[1]), ("held", latency[1])):
            out.append(("below", 1, rule, value / latency[0] - 1))
    return out


def left_off(systems: tuple[str, ...]) -> pd.DataFrame:
    rows = []
    root = tables.package_root() / "systems" / "data"
    for system in systems:
        for name, (family, filename, size) in SIZED.items():
            for path in sorted((root / system / family).glob(f"*/*/{filename}")):
                for sizes, latency in sized_lines(pd.read_parquet(path), size):
                    for side, k, rule, signed in off_the_grid(sizes, latency):
                        rows.append({"table": name, "side": side, "left out": k, "rule": rule, "signed": signed})
    return pd.DataFrame(rows)


def print_off_the_grid(systems: tuple[str, ...]) -> int:
    results = left_off(systems)
    if results.empty:
        print("no table lines of three or more sizes in those systems", file=sys.stderr)
        return 2
    print(f"aiconfigurator-core {tables.package_version()}: each line's largest size predicted from the rest with "
          f"its last 1-3 sizes left out, and its smallest with it left out ({', '.join(systems)})\n")
    print(error_table(results, ["table", "side", "left out", "rule"]))
    return 0


def error_table(results: pd.DataFrame, by: list[str]) -> str:
    """Lines, median and p90 absolute error and median signed error of each group's predictions."""
    results = results.assign(error=results["signed"].abs())
    summary = results.groupby(by, sort=True).agg(
        lines=("error", "size"), median=("error", "median"), p90=("error", lambda e: e.quantile(0.9)),
        signed=("signed", "median"))
    pd.set_option("display.width", 200)
    return summary.to_string(float_format=lambda x: f"{x:.1%}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default=None,
                        help="AIConfigurator systems (folders of aiconfigurator_core/systems/data); default "
                             f"{','.join(DEFAULT_SYSTEMS)}, with --past {','.join(PAST_SYSTEMS)}")
    parser.add_argument("--past", action="store_true",
                        help="predict each table line's largest and smallest size instead: the rule off a "
                             "table's size axis")
    args = parser.parse_args(argv)
    if not tables.installed():
        print("needs the optional extra pdplan[aic] (aiconfigurator-core)", file=sys.stderr)
        return 2
    if args.past:
        return print_off_the_grid(tuple(args.systems.split(",")) if args.systems else PAST_SYSTEMS)
    args.systems = args.systems or ",".join(DEFAULT_SYSTEMS)
    results = left_out(tuple(args.systems.split(",")))
    if results.empty:
        print("no table lines of three or more batches in those systems", file=sys.stderr)
        return 2
    print(f"aiconfigurator-core {tables.package_version()}: each line's last measured batch left out and predicted "
          f"from the rest ({', '.join(args.systems.split(','))})\n")
    print(error_table(results, ["table", "engine", "rule"]))
    overall = results["signed"].abs().groupby(results["rule"]).median()
    lines_count = int((results["rule"] == "held").sum())
    print(f"\noverall median absolute error over {lines_count} lines: "
          + ", ".join(f"{rule} {error:.1%}" for rule, error in overall.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
