"""AIConfigurator's measured operator tables, read from the installed ``aiconfigurator-core``.

NVIDIA's AIConfigurator measures every operator a transformer step runs — GEMMs per precision,
context (prefill) and generation (decode) attention, the engine's custom all-reduce and NCCL —
on each GPU system, for each serving engine and version, and ships the measurements as parquet
tables (Apache-2.0) in ``aiconfigurator_core/systems/data/<system>/<family>/<engine>/<version>/``.
pdplan reads them in place (optional extra ``pdplan[aic]``; nothing is copied into pdplan) and
interpolates inside each measured grid:

* GEMM latency at (m, n, k) — trilinear in (m, n, k): exact for a latency proportional to
  n·k at fixed m (both the weight-read and the compute regime), linear in m between grid rows;
* context attention at (batch, prompt length) — bilinear in (batch, length²), since its work
  grows with the causal pairs; generation attention at (batch, KV length) — bilinear, its work
  being the KV read, batch × length;
* all-reduce at (GPUs, elements) — linear in the message size (α + size/β between points); a group past the
  GPU counts measured inside one NVLink domain (GB200 NVL72's tables stop at a tray of 4) is NCCL's largest
  measured one scaled by the ring's traffic, as AIConfigurator scales it (:func:`all_reduce`).

Outside a grid, along a table's first axis — a size: GEMM rows, tokens, batch, message elements — a
query below the smallest measured size reads it (a kernel's floor) and one past the largest continues
along the slope of the last octave measured (:func:`octave_below`); along any other axis the nearest
edge is scaled linearly in the coordinate that left it (a GEMM with n above the largest measured n
costs n/n_max times the edge). Every such query is counted so the profile's provenance can say so.
Inside a grid a table leaves holes: the attention tables stop at a total of tokens (TensorRT-LLM's
B200 generation lines at 64 requests of 16,384 KV tokens, at 8 of 131,072), so the grid's upper
corner was never measured. A hole between measured points is interpolated; one past a line's last
measurement continues along the same slope (:func:`fill_holes`), and a query that reads it is counted
too. Among kernels measured for one point the fastest is used: the engine's autotuner picks it.

Why not scale a size in proportion, as a weight dimension is: a kernel is proportional to its rows
only once it is compute-bound, and many tables end before that (SGLang's wide-EP MoE generation table
on GB300 stops at 128 tokens per GPU, where EP 4 still reads its experts' weights: 0.454 ms at 256
tokens, 0.463 at 512). Leaving out each line's last one to three measured sizes in AIConfigurator
0.12.0's B200, GB200, GB300 and H200 tables (GEMM, generation attention, MoE, wide-EP MoE, all-reduce)
and predicting them from the rest, the octave's slope misses by 1–30% at the median where scaling in
proportion misses by 3–378% (the wide-EP MoE generation lines at 8× their last measurement: 30%
against 378%), and holding the smallest measured value below a line misses by 2–7% where scaling
down misses by 47–50% (``benchmarks/grid_holes.py --past``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from pdplan.engines import ENGINES
from pdplan.errors import PdplanError
from pdplan.fileio import load_yaml

#: pdplan GPU type -> AIConfigurator system. A power-capped type has no tables of its own.
SYSTEMS = {"a100-80gb": "a100_sxm", "h100-80gb": "h100_sxm", "h200-141gb": "h200_sxm",
           "b200-180gb": "b200_sxm", "gb200-185gb": "gb200", "b300-288gb": "b300_sxm", "gb300-288gb": "gb300"}
#: pdplan weight precision -> the GEMM table's dtype column (per-tensor FP8, NVFP4).
GEMM_DTYPES = {"bf16": "bfloat16", "fp8": "fp8", "fp4": "nvfp4"}
KV_DTYPES = {"bf16": "bfloat16", "fp8": "fp8"}
EXTRA = "pip install 'pdplan[aic]'"


def aiconfigurator_root() -> Path | None:
    """The installed aiconfigurator_core package's folder, None without the extra."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def package_root() -> Path:
    """The installed aiconfigurator_core package, or a clear error naming the extra."""
    root = aiconfigurator_root()
    if root is None:
        raise PdplanError(f"operator-level profiles read AIConfigurator's measured tables, which come with the "
                          f"optional extra: {EXTRA}", field="engine")
    return root


def installed() -> bool:
    return importlib.util.find_spec("aiconfigurator_core") is not None


def package_version() -> str:
    return importlib.metadata.version("aiconfigurator-core")


def version_key(version: str) -> tuple:
    """Order engine versions as releases: 0.5.6.post2 < 0.5.10 < 0.5.14; 1.3.0rc5 < 1.3.0rc20 < 1.3.0."""
    release = re.match(r"[\d.]+", version)
    numbers = tuple(int(x) for x in release.group(0).strip(".").split(".")) if release else ()
    rest = version[release.end():] if release else version
    pre = re.match(r"\.?(a|b|rc|dev)(\d*)", rest)
    post = re.match(r"\.?post(\d*)", rest)
    stage = (0, pre.group(1), int(pre.group(2) or 0)) if pre else (1, "", int(post.group(1) or 0) if post else 0)
    return numbers, stage


# --- one table --------------------------------------------------------------------------------------

@dataclass
class Extrapolated:
    """Queries that left a measured grid, by operator, for the provenance."""

    counts: dict[str, int] = field(default_factory=dict)

    def note(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def text(self) -> str:
        return "; ".join(f"{what} ({n} queries)" for what, n in sorted(self.counts.items()))


def _bracket(axis: np.ndarray, x: float) -> tuple[int, int, float, float]:
    """Indices of the grid values around x, the weight of the upper one, and the linear scale
    to apply when x lies outside the grid (1 inside)."""
    if x <= axis[0]:
        return 0, 0, 0.0, x / axis[0] if x < axis[0] else 1.0
    if x >= axis[-1]:
        return len(axis) - 1, len(axis) - 1, 0.0, x / axis[-1] if x > axis[-1] else 1.0
    hi = int(np.searchsorted(axis, x))
    lo = hi - 1
    return lo, hi, (x - axis[lo]) / (axis[hi] - axis[lo]), 1.0


class Grid:
    """Latencies (seconds) on a full grid of coordinates; missing points are filled from their
    neighbours (:func:`fill_holes`), so the fastest-kernel grid has no holes. ``extended`` marks the
    points filled past a line's last measurement, which a query reading them records."""

    def __init__(self, axes: tuple[np.ndarray, ...], values: np.ndarray, name: str, columns: tuple[str, ...],
                 transforms: tuple = (), extended: np.ndarray | None = None):
        self.axes, self.values, self.name, self.columns = axes, values, name, columns
        self.transforms = transforms or tuple(None for _ in axes)
        self.extended = np.zeros(values.shape, bool) if extended is None else extended

    @classmethod
    def from_frame(cls, frame, columns: tuple[str, ...], name: str, transforms: tuple = ()) -> "Grid":
        best = frame.groupby(list(columns), sort=True)["latency"].min()   # fastest kernel per point
        axes = tuple(np.array(sorted(frame[c].unique()), dtype=float) for c in columns)
        values = np.full(tuple(len(a) for a in axes), np.nan)
        index = tuple(np.searchsorted(axes[i], best.index.get_level_values(i).to_numpy(float))
                      for i in range(len(columns)))
        values[index] = best.to_numpy() / 1e3   # tables hold milliseconds
        extended = fill_holes(values, axes)
        return cls(axes, values, name, columns, transforms, extended)

    def __call__(self, point: tuple[float, ...], log: Extrapolated) -> float:
        """Multilinear interpolation at ``point``. Off the grid along the first axis (a size) the smallest
        measured size is held below it and the largest continued above it along the last octave's slope;
        off the grid along another axis the edge is scaled linearly (module docstring)."""
        size, axis = point[0], self.axes[0]
        if size < axis[0]:
            log.note(self._off_size("below", "held at the smallest"))
            return self._interpolate((axis[0], *point[1:]), log)
        if size > axis[-1] and len(axis) > 1:
            top = self._interpolate((axis[-1], *point[1:]), log)
            lower = octave_below(axis, np.arange(len(axis)))
            below = self._interpolate((axis[lower], *point[1:]), Extrapolated())  # counted once, with the top
            log.note(self._off_size("past", "continued along its slope"))
            return float(continued_past((axis[lower], below), (axis[-1], top), size))
        return self._interpolate(point, log)

    def _off_size(self, side: str, rule: str) -> str:
        """The note a query off the size axis leaves (formatted only then: a grid is read on every step)."""
        axis = self.axes[0]
        return f"{self.name} {self.columns[0]} {side} the measured {axis[0]:g}–{axis[-1]:g}, {rule}"

    def _interpolate(self, point: tuple[float, ...], log: Extrapolated) -> float:
        corners, scale = [], 1.0
        for axis, x, transform, column in zip(self.axes, point, self.transforms, self.columns):
            lo, hi, w, s = _bracket(axis, x)
            if transform == "square" and lo != hi:  # interpolate in x² (attention's causal pairs)
                w = (x * x - axis[lo] ** 2) / (axis[hi] ** 2 - axis[lo] ** 2)
            if s != 1.0:
                scale *= s
                edge = f"{axis[0]:g}–{axis[-1]:g}"
                log.note(f"{self.name} {column} outside the measured {edge}, scaled linearly")
            corners.append(((lo, 1.0 - w), (hi, w)) if lo != hi else ((lo, 1.0),))
        total, beyond = 0.0, False
        for combo in np.ndindex(*(len(c) for c in corners)):
            weight, index = 1.0, []
            for axis_corners, pick in zip(corners, combo):
                i, wi = axis_corners[pick]
                weight *= wi
                index.append(i)
            if weight:
                total += weight * self.values[tuple(index)]
                beyond = beyond or bool(self.extended[tuple(index)])
        if beyond:
            log.note(f"{self.name} past its measured points, continued along their slope")
        return total * scale


def fill_holes(values: np.ndarray, axes: list[np.ndarray]) -> np.ndarray:
    """Fill unmeasured points along the first axis (the token count or batch): linearly between
    measured ones, held at the first below it (a kernel's floor), and past the last along the slope
    of its last octave (:func:`_continued`); then, for lines of the first axis with no measurement at
    all, the same along each further axis in turn (a table may skip a whole sequence length at one
    batch size: vLLM's MLA context table at 128 tokens). A point no axis reaches stays NaN.
    Returns where the values were continued past a line's last measurement.

    Why the slope: the attention tables stop at a total of tokens, so at long KV lengths the larger
    batches were never measured, and there the kernel's time still grows with the batch (it reads
    batch × length of KV). Leaving out the last measured batch of each line of AIConfigurator
    0.12.0's attention and MLA tables (B200, GB200 and H200, every engine and version: 118,527
    lines) and predicting it from the rest: held at the one before, 47% median error; scaled in
    proportion to the batch, 6.7%; along the last two's slope, 2.2% (``benchmarks/grid_holes.py``)."""
    extended = np.zeros(values.shape, bool)
    for k, axis in enumerate(axes):
        moved, marks = np.moveaxis(values, k, -1), np.moveaxis(extended, k, -1)
        lines, flags = moved.reshape(-1, len(axis)), marks.reshape(-1, len(axis))
        for line, flag in zip(lines, flags):
            known = np.isfinite(line)
            if known.any() and not known.all():
                measured = np.flatnonzero(known)
                past = np.arange(len(axis)) > measured[-1]
                line[~known] = np.interp(axis[~known], axis[known], line[known])
                line[past] = _continued(axis, line, measured, past)
                flag[past] = True
        values[...] = np.moveaxis(lines.reshape(moved.shape), -1, k)
        extended[...] = np.moveaxis(flags.reshape(marks.shape), -1, k)
    return extended


def _continued(axis: np.ndarray, line: np.ndarray, measured: np.ndarray, past: np.ndarray) -> np.ndarray:
    """A line's values at the points ``past`` its last measurement (``measured``: where it has one): along the
    slope of its last octave of measurements, never falling (held where it has one)."""
    last = measured[-1]
    if len(measured) < 2:
        return np.full(past.sum(), line[last])
    before = octave_below(axis, measured)
    return continued_past((axis[before], line[before]), (axis[last], line[last]), axis[past])


def continued_past(before: tuple[float, float], last: tuple[float, float], sizes):
    """The values at ``sizes`` past a line's ``last`` (size, value) point, along the slope from ``before``, never
    falling (held where the line falls)."""
    slope = max(0.0, (last[1] - before[1]) / (last[0] - before[0]))
    return last[1] + slope * (np.asarray(sizes, dtype=float) - last[0])


def octave_below(axis: np.ndarray, measured: np.ndarray) -> int:
    """Where a line's slope past its last measurement is read from: the measured point at or below half the
    last one's size, the nearest such (the one before the last where none is). On a grid of doublings that is
    the last two; on a dense one (GEMM rows 4,352 and 4,353) a neighbour one row away would make noise a slope."""
    last = measured[-1]
    octave = measured[:-1][axis[measured[:-1]] <= axis[last] / 2]
    return int(octave[-1]) if len(octave) else int(measured[-2])


# --- one system, engine and version -----------------------------------------------------------------

def source_text(system: str, engine: str, versions: dict[str, str]) -> str:
    """Which measured files a composition reads, for its provenance."""
    used = ", ".join(f"{table} {version}" for table, version in sorted(versions.items()))
    return f"AIConfigurator {package_version()} tables for {system}/{engine} ({used})"


FILES = {"gemm": ("gemm", "gemm_perf.parquet"),
         "context_attention": ("attention", "context_attention_perf.parquet"),
         "generation_attention": ("attention", "generation_attention_perf.parquet"),
         "all_reduce": ("comm", "custom_allreduce_perf.parquet")}
#: Tables only mixture-of-experts and latent-attention models read (:mod:`pdplan.latency.compose.moe`);
#: kept apart from :data:`FILES` so a dense model's version choice never looks at them.
MODEL_FILES = {"moe": ("moe", "moe_perf.parquet"),
               "mla_context_module": ("mla", "mla_context_module_perf.parquet"),
               "mla_generation_module": ("mla", "mla_generation_module_perf.parquet"),
               "context_mla": ("mla", "context_mla_perf.parquet"),
               "generation_mla": ("mla", "generation_mla_perf.parquet"),
               "mla_bmm": ("mla_bmm", "mla_bmm_perf.parquet"),
               # Wide expert parallelism (attention DP + EP, :mod:`pdplan.latency.compose.wide`).
               "wideep_context_moe": ("moe", "wideep_context_moe_perf.parquet"),
               "wideep_generation_moe": ("moe", "wideep_generation_moe_perf.parquet"),
               "wideep_moe": ("moe", "wideep_moe_perf.parquet"),
               "wideep_context_mla": ("mla", "wideep_context_mla_perf.parquet"),
               "wideep_generation_mla": ("mla", "wideep_generation_mla_perf.parquet"),
               "wideep_context_mlp": ("mlp", "wideep_context_mlp_perf.parquet"),
               "wideep_generation_mlp": ("mlp", "wideep_generation_mlp_perf.parquet"),
               "wideep_deepep_normal": ("comm", "wideep_deepep_normal_perf.parquet"),
               "wideep_deepep_ll": ("comm", "wideep_deepep_ll_perf.parquet"),
               "moe_a2a": ("comm", "moe_a2a_perf.parquet"),
               "trtllm_alltoall": ("comm", "trtllm_alltoall_perf.parquet"),
               # NCCL's collectives, one table per system and NCCL release (its "engine" folder is ``nccl``).
               "nccl": ("comm", "nccl_perf.parquet")}


def system_for(gpu: str) -> str:
    if gpu not in SYSTEMS:
        raise PdplanError(f"no AIConfigurator operator data for {gpu} (it measures "
                          f"{', '.join(sorted(SYSTEMS))})", field="gpu")
    return SYSTEMS[gpu]


def versions_with(system: str, engine: str, table: str) -> list[str]:
    """Engine versions (oldest first) with ``table`` (:data:`FILES` or :data:`MODEL_FILES`) measured on ``system``."""
    family, filename = FILES[table] if table in FILES else MODEL_FILES[table]
    folder = package_root() / "systems" / "data" / system / family / engine
    found = [p.name for p in folder.iterdir() if (p / filename).is_file()] if folder.is_dir() else []
    return sorted(found, key=version_key)


def not_above(versions: list[str], ceiling: str | None) -> list[str]:
    """The versions a request for ``ceiling`` may use, oldest first (None: all)."""
    return [v for v in versions if ceiling is None or version_key(v) <= version_key(ceiling)]


def available_versions(gpu: str, engine: str) -> dict[str, list[str]]:
    """Engine versions measured per table on ``gpu`` (oldest first)."""
    return {table: versions_with(system_for(gpu), engine, table) for table in FILES}


def choose_versions(gpu: str, engine: str, version: str | None) -> dict[str, str]:
    """Per table the requested version, else the newest measured one not above it (tables are
    collected per release, so an older table stands in for one not re-measured)."""
    if engine not in ENGINES:
        raise PdplanError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})", field="engine")
    found = available_versions(gpu, engine)
    measured = sorted({v for versions in found.values() for v in versions}, key=version_key)
    if not measured:
        raise PdplanError(f"AIConfigurator has no {engine} operator data for {gpu}", field="engine")
    if version is not None and version not in measured:
        raise PdplanError(f"no {engine} {version} operator data for {gpu} (measured: {', '.join(measured)})",
                          field="engine_version")
    chosen = {}
    for table in ("gemm", "context_attention", "generation_attention"):
        older = not_above(found[table], version)
        if not older:
            raise PdplanError(f"no {table.replace('_', ' ')} table for {engine} {version or ''} on {gpu} "
                              f"(measured: {', '.join(found[table]) or 'none'})", field="engine_version")
        chosen[table] = older[-1]
    older = not_above(found["all_reduce"], version)
    if older:
        chosen["all_reduce"] = older[-1]
    return chosen


@dataclass(frozen=True)
class SystemSpec:
    """The constants AIConfigurator's own analytic formulas use for this system."""

    mem_bw: float              #: bytes/s
    mem_scale: float           #: empirical fraction of mem_bw a memory-bound kernel reaches
    mem_latency_s: float       #: empirical constant latency of a memory-bound kernel
    p2p_latency_s: float
    inter_node_bw: float
    intra_node_bw: float
    sm_version: int = 0        #: CUDA compute capability × 10 (90 Hopper, 100 Blackwell); 0 when unstated
    nccl_version: str | None = None  #: the NCCL release whose collectives the system's tables time


@cache
def system_spec(system: str) -> SystemSpec:
    path = package_root() / "systems" / f"{system}.yaml"
    data = load_yaml(path, what="AIConfigurator system file")
    gpu, node, misc = data["gpu"], data["node"], data.get("misc") or {}
    return SystemSpec(mem_bw=float(gpu["mem_bw"]), mem_scale=float(gpu["mem_bw_empirical_scaling_factor"]),
                      mem_latency_s=float(gpu["mem_empirical_constant_latency"]),
                      p2p_latency_s=float(node["p2p_latency"]), inter_node_bw=float(node["inter_node_bw"]),
                      intra_node_bw=float(node["intra_node_bw"]), sm_version=int(gpu.get("sm_version", 0)),
                      nccl_version=str(misc["nccl_version"]) if misc.get("nccl_version") else None)


#: Columns older tables lack, with the value they mean (no sliding window; no kernel named).
OPTIONAL_COLUMNS = {"window_size": 0, "kernel_source": ""}


def _read(system: str, engine: str, table: str, version: str, columns: list[str]):
    import pandas as pd  # pyarrow reads parquet; it comes with the extra
    import pyarrow.parquet as pq

    family, filename = FILES[table] if table in FILES else MODEL_FILES[table]
    path = package_root() / "systems" / "data" / system / family / engine / version / filename
    try:
        present = set(pq.read_schema(path).names)
        missing = [c for c in columns if c not in present and c not in OPTIONAL_COLUMNS]
        if missing:
            raise PdplanError(f"operator table lacks column {missing[0]!r}", file=path, field=missing[0])
        frame = pd.read_parquet(path, columns=[c for c in columns if c in present])
    except (OSError, ValueError) as err:  # pyarrow's errors derive from these
        raise PdplanError(f"unreadable operator table ({' '.join(str(err).split())[:200]})", file=path) from None
    for column, value in OPTIONAL_COLUMNS.items():
        if column in columns and column not in frame:
            frame[column] = value
    return frame


@cache
def gemm_grid(system: str, engine: str, version: str, dtype: str) -> Grid:
    grid = gemm_grid_of(system, engine, version, GEMM_DTYPES[dtype])
    if grid is None:
        measured = sorted(k for k, v in GEMM_DTYPES.items() if v in set(
            _read(system, engine, "gemm", version, ["gemm_dtype"])["gemm_dtype"]))
        raise PdplanError(f"no {dtype} GEMM measurements for {engine} {version} on {system} "
                          f"(measured: {', '.join(measured)})", field="dtype")
    return grid


@cache
def gemm_grid_of(system: str, engine: str, version: str, table_dtype: str) -> Grid | None:
    """The GEMM grid of one ``gemm_dtype`` of the table (``fp8_block`` included), None when unmeasured."""
    frame = _read(system, engine, "gemm", version, ["gemm_dtype", "m", "n", "k", "latency"])
    frame = frame[frame["gemm_dtype"] == table_dtype]
    return None if frame.empty else Grid.from_frame(frame, ("m", "n", "k"), "GEMM")


@cache
def attention_lines(system: str, engine: str, version: str, phase: str, head_dim: int,
                    kv_dtype: str, window: int = 0) -> dict[tuple[int, int], Grid]:
    """Per measured (query heads, KV heads) pair, the latency grid over (batch, length); ``window``
    selects the rows of a sliding-window kernel (0: full attention)."""
    table = f"{phase}_attention"
    length = "isl" if phase == "context" else "step"
    frame = _read(system, engine, table, version,
                  ["batch_size", length, "num_heads", "num_key_value_heads", "head_dim", "kv_cache_dtype",
                   "window_size", "latency"])
    frame = frame[(frame["head_dim"] == head_dim) & (frame["window_size"] == window)
                  & (frame["kv_cache_dtype"] == KV_DTYPES[kv_dtype])]
    if frame.empty:
        windowed = f" and a {window}-token sliding window" if window else ""
        raise PdplanError(f"no {phase} attention measurements for head dim {head_dim}{windowed} with a {kv_dtype} "
                          f"KV cache for {engine} {version} on {system}", field="model")
    transforms = (None, "square" if phase == "context" else None)
    return {(int(q), int(kv)): Grid.from_frame(part, ("batch_size", length), f"{phase} attention", transforms)
            for (q, kv), part in frame.groupby(["num_heads", "num_key_value_heads"])}


def attention_s(lines: dict[tuple[int, int], Grid], q_heads: int, kv_heads: int, batch: float, length: float,
                log: Extrapolated) -> float:
    """Attention time for a head configuration: its own measured line, else the lines with the
    same query-to-KV head ratio interpolated (or scaled) linearly in the query heads, the work
    being proportional to them at a fixed ratio."""
    if (q_heads, kv_heads) in lines:
        return lines[q_heads, kv_heads]((batch, length), log)
    same = sorted(q for q, kv in lines if q * kv_heads == kv * q_heads)
    if not same:
        ratios = sorted({f"{q}:{kv}" for q, kv in lines})
        raise PdplanError(f"no attention measurement with {q_heads} query heads per {kv_heads} KV heads' ratio "
                          f"(measured head pairs: {', '.join(ratios[:12])}…)", field="model")
    log.note(f"attention for {q_heads}/{kv_heads} heads interpolated between measured head counts")
    at = lambda q: lines[q, q * kv_heads // q_heads]((batch, length), log)  # noqa: E731
    below = [q for q in same if q < q_heads]
    above = [q for q in same if q > q_heads]
    if below and above:
        lo, hi = below[-1], above[0]
        w = (q_heads - lo) / (hi - lo)
        return (1 - w) * at(lo) + w * at(hi)
    nearest = above[0] if above else below[-1]
    return at(nearest) * q_heads / nearest


@cache
def all_reduce_grid(system: str, engine: str, version: str) -> Grid:
    frame = _read(system, engine, "all_reduce", version, ["num_gpus", "message_size", "latency"])
    return Grid.from_frame(
        frame.rename(columns={"message_size": "elements"}).loc[:, ["elements", "num_gpus", "latency"]],
        ("elements", "num_gpus"), "all-reduce")


@cache
def nccl_grid(system: str, op: str, dtype: str) -> tuple[Grid, str] | None:
    """NCCL's ``op`` (all_gather, reduce_scatter, …) at (GPUs, elements of ``dtype``: "half" or "int8") on
    ``system``, from the release its system file names (``misc.nccl_version``, as AIConfigurator reads it), and
    that release; None where the system names none or its table lacks the op. An all-gather's elements are its
    gathered output, a reduce-scatter's its input, as AIConfigurator's ``query_nccl`` takes them."""
    version = system_spec(system).nccl_version
    if version is None or version not in versions_with(system, "nccl", "nccl"):
        return None
    frame = _read(system, "nccl", "nccl", version, ["op_name", "nccl_dtype", "num_gpus", "message_size", "latency"])
    rows = frame[(frame.op_name == op) & (frame.nccl_dtype == dtype)]
    if rows.empty:
        return None
    frame = rows.rename(columns={"message_size": "elements"}).loc[:, ["elements", "num_gpus", "latency"]]
    grid = Grid.from_frame(frame, ("elements", "num_gpus"), f"NCCL {op.replace('_', '-')}")
    return grid, version


def measured_group_sizes(grid: Grid) -> tuple[int, ...]:
    return tuple(int(x) for x in grid.axes[1])


def ring_traffic_scale(gpus: int, measured: int) -> float:
    """How much longer a bandwidth-bound ring all-reduce over ``gpus`` GPUs takes than over ``measured`` at the
    same link bandwidth: each GPU sends 2(n − 1)/n of the message (Patarasuk and Yuan, "Bandwidth optimal
    all-reduce algorithms for clusters of workstations", JPDC 2009), so the ratio of (n − 1)/n. AIConfigurator
    scales its measured all-reduces beyond their largest GPU count by this ratio times the bandwidths' (its
    ``query_custom_allreduce_scaled`` and ``query_nccl_scaled``); inside one NVLink domain the bandwidths are
    equal."""
    return (gpus - 1) / gpus * measured / (measured - 1)


@dataclass(frozen=True)
class Collective:
    """A collective over ``gpus`` GPUs as a function of its elements: measured over that many, or beyond the GPU
    counts measured in one NVLink domain, over the most measured, scaled by :func:`ring_traffic_scale`."""

    grid: Grid
    op: str         #: all_reduce, all_gather, reduce_scatter
    gpus: int
    measured: int
    table: str      #: "all_reduce" (the engine's own all-reduce table) or "nccl"
    version: str

    def label(self) -> str:
        if self.measured == self.gpus:
            return f"{self.table} {self.version}"
        return f"NCCL {self.version}'s {self.op.replace('_', '-')} over {self.measured} GPUs scaled to {self.gpus}"

    def __call__(self, elements: float, log: Extrapolated) -> float:
        if self.measured == self.gpus:
            return self.grid((elements, self.gpus), log)
        log.note(f"{self.op.replace('_', '-')} over {self.gpus} GPUs: NCCL's over {self.measured} scaled by the "
                 "ring's traffic, (n - 1)/n, in one NVLink domain (AIConfigurator's rule past the GPUs it measured)")
        return ring_traffic_scale(self.gpus, self.measured) * self.grid((elements, self.measured), log)


def nccl_collective(system: str, op: str, dtype: str, gpus: int, nvlink_domain: int) -> Collective | None:
    """NCCL's ``op`` over ``gpus`` GPUs of an NVLink domain of ``nvlink_domain`` (:func:`nccl_grid`): measured, or
    past every group its table measured but inside the domain (GB200 NVL72, measured inside one compute tray), the
    largest measured scaled as AIConfigurator scales it (:class:`Collective`); None where neither holds."""
    found = nccl_grid(system, op, dtype)
    if found is None:
        return None
    grid, version = found
    sizes = measured_group_sizes(grid)
    if gpus in sizes:
        return Collective(grid, op, gpus, gpus, "nccl", version)
    if gpus > nvlink_domain or gpus < max(sizes):
        return None
    return Collective(grid, op, gpus, max(sizes), "nccl", version)


def all_reduce_sizes(system: str, engine: str, version: str | None) -> tuple[int, ...]:
    """The GPU counts the engine's all-reduce table measured (none without one), for a refusal to name."""
    return () if version is None else measured_group_sizes(all_reduce_grid(system, engine, version))


#: Systems whose NVLink switch fabric another system shares, and what stands in: GB200 NVL72 and GB300 NVL72 join
#: their 72 GPUs through the same NVLink 5 switch trays (900 GB/s per GPU each way, their system files), and
#: AIConfigurator measured the engines' all-reduces across trays on GB300 only (TensorRT-LLM's MNNVL one- and
#: two-shot kernels, SGLang's and vLLM's custom all-reduce, over 8 and 16 GPUs).
FABRIC_SIBLINGS = {"gb200": "gb300"}


def all_reduce(system: str, engine: str, version: str | None, gpus: int, nvlink_domain: int) -> Collective | None:
    """The all-reduce over ``gpus`` GPUs of an NVLink domain of ``nvlink_domain``: the engine's table where it measured
    that many; else the same engine's table of the system sharing its NVLink fabric (:data:`FABRIC_SIBLINGS`) at a
    release not above ``version`` where that one measured them; else NCCL's past its measured groups inside the domain
    (:func:`nccl_collective`), as AIConfigurator times a TP beyond a GB200 tray (its ``query_custom_allreduce_scaled``);
    None where none holds."""
    if gpus in all_reduce_sizes(system, engine, version):
        return Collective(all_reduce_grid(system, engine, version), "all_reduce", gpus, gpus, "all_reduce", version)
    sibling = FABRIC_SIBLINGS.get(system)
    if sibling is not None and version is not None:
        for measured in reversed(not_above(versions_with(sibling, engine, "all_reduce"), version)):
            if gpus in all_reduce_sizes(sibling, engine, measured):
                return Collective(all_reduce_grid(sibling, engine, measured), "all_reduce", gpus, gpus,
                                  f"all_reduce ({sibling}'s over its same NVLink fabric)", measured)
    found = nccl_collective(system, "all_reduce", "half", gpus, nvlink_domain)
    return found if found is not None and found.measured < gpus else None
