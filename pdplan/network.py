"""Collective-communication cost: the time of an all-reduce or a send/recv between GPUs.

Every collective costs ``α + k · bytes / β``: a fixed latency α plus the bytes each GPU moves
over an effective bandwidth β. For a ring all-reduce over n GPUs each GPU moves
``k = 2(n−1)/n`` times the buffer (reduce-scatter then all-gather; NCCL's "bus bandwidth"
convention); a point-to-point send/recv moves it once (``k = 1``).

α and β are fitted per measured system (``a100_dgx``, ``h100_dgx``), collective, scope (inside
one node or across nodes) and group size, from the collective timings Vidur recorded on DGX
machines (``network/{a100_dgx,h100_dgx}/{all_reduce,send_recv}.csv``; ``size`` is the buffer in
bytes, times are the per-kernel NCCL time in ms). The fitted constants ship in
``catalog/network.yaml`` with the source file's sha256, the fit method and its error;
``benchmarks/network_fit.py`` regenerates them. Each GPU type of the catalog names the system
whose constants it uses and says so when that is a stand-in (a capped or a newer GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from pdplan.errors import InternalError, PdplanError
from pdplan.fileio import atomic_write_text, dump_yaml, load_yaml, sha256_file
from pdplan.hardware import GPU
from pdplan.schema import Fields

COLLECTIVES = ("all_reduce", "send_recv")
SCOPES = ("intra_node", "inter_node")
FORMAT_VERSION = 1
FIT_METHOD = ("least squares on relative error (nnls on rows divided by the measured time) of "
              "t = alpha + k*size/beta, k = 2(n-1)/n for all_reduce (ring), 1 for send_recv; "
              "target time_stats.<op>.mean")


def transfer_factor(collective: str, num_workers: int) -> float:
    """Bytes each GPU moves per buffer byte: ``2(n−1)/n`` for a ring all-reduce, 1 for send/recv.

    The ring all-reduce is a reduce-scatter and an all-gather, each moving ``(n−1)/n`` of the
    buffer per GPU (Patarasuk & Yuan 2009; NCCL's performance notes call ``2(n−1)/n · S / t``
    the bus bandwidth).
    """
    if collective == "all_reduce":
        return 2.0 * (num_workers - 1) / num_workers
    if collective == "send_recv":
        return 1.0
    raise InternalError(f"collective must be one of {', '.join(COLLECTIVES)}, got {collective!r}")


def collective_time_s(alpha_s: float, beta_bytes_per_s: float, collective: str, num_workers: int,
                      size_bytes: float) -> float:
    """Hockney's α–β model ``t = α + k · size / β`` with k from :func:`transfer_factor`."""
    return alpha_s + transfer_factor(collective, num_workers) * size_bytes / beta_bytes_per_s


@dataclass(frozen=True, kw_only=True)
class CollectiveFit:
    """Fitted α and β of one collective, scope and group size on one measured system."""

    system: str                 #: measured system, e.g. "a100_dgx"
    collective: str             #: "all_reduce" or "send_recv"
    scope: str                  #: "intra_node" or "inter_node"
    num_workers: int            #: GPUs in the group
    devices_per_node: int       #: GPUs of the group on each node
    alpha_s: float              #: fixed latency, seconds
    beta_bytes_per_s: float     #: effective (bus) bandwidth, bytes/s
    points: int                 #: measurements the fit used
    mape: float                 #: mean absolute relative error over those points, fraction
    max_error: float            #: largest absolute relative error, fraction

    def __post_init__(self):
        if self.collective not in COLLECTIVES:
            raise InternalError(f"collective must be one of {', '.join(COLLECTIVES)}")
        if self.scope not in SCOPES:
            raise InternalError(f"scope must be one of {', '.join(SCOPES)}")
        if self.num_workers < 2 or self.devices_per_node < 1:
            raise InternalError("num_workers must be >= 2 and devices_per_node >= 1")
        if self.alpha_s < 0 or not self.beta_bytes_per_s > 0:
            raise InternalError("alpha_s must be >= 0 and beta_bytes_per_s > 0")

    def time_s(self, size_bytes: float, num_workers: int | None = None) -> float:
        """Seconds for one collective of ``size_bytes`` (over ``num_workers``, default the fit's)."""
        n = self.num_workers if num_workers is None else num_workers
        return collective_time_s(self.alpha_s, self.beta_bytes_per_s, self.collective, n,
                                 size_bytes)


@dataclass(frozen=True, kw_only=True)
class GpuNetwork:
    """The collective costs one GPU type uses, and which measured system they come from."""

    gpu: str
    system: str            #: measured system whose constants apply
    note: str              #: "measured" or why a stand-in is used
    fits: tuple[CollectiveFit, ...]

    def fit_for(self, collective: str, num_workers: int, *, intra_node: bool) -> CollectiveFit:
        """The fit for this group: the measured size, else the smallest measured larger group.

        A group larger than any measured one, or a scope never measured, is refused: the
        model does not extrapolate α to more GPUs or onto links nobody timed.
        """
        scope = "intra_node" if intra_node else "inter_node"
        candidates = sorted((f for f in self.fits if f.collective == collective and f.scope == scope),
                            key=lambda f: f.num_workers)
        for fit in candidates:
            if fit.num_workers >= num_workers:
                return fit
        measured = ", ".join(str(f.num_workers) for f in candidates) or "none"
        raise PdplanError(f"no {scope.replace('_', '-')} {collective.replace('_', '-')} measurement "
                          f"for {num_workers} GPUs on {self.system} (GPU {self.gpu}; measured group "
                          f"sizes: {measured})", field="gpu")

    def all_reduce_s(self, num_workers: int, size_bytes: float, *, intra_node: bool = True) -> float:
        """Seconds for a ring all-reduce of ``size_bytes`` over ``num_workers`` GPUs (0 for one)."""
        if num_workers < 1:
            raise InternalError("num_workers must be >= 1")
        if num_workers == 1:
            return 0.0
        return self.fit_for("all_reduce", num_workers, intra_node=intra_node).time_s(
            size_bytes, num_workers)

    def send_recv_s(self, size_bytes: float, *, intra_node: bool) -> float:
        """Seconds to send ``size_bytes`` from one GPU to another."""
        return self.fit_for("send_recv", 2, intra_node=intra_node).time_s(size_bytes)


# --- fitting -------------------------------------------------------------------------------------

_MEASUREMENT_COLUMNS = ("num_workers", "size", "devices_per_node")


def load_measurements(path: str | Path, collective: str) -> pd.DataFrame:
    """One Vidur collective CSV, validated: ``size`` (bytes), ``time_s`` (the mean), group shape."""
    if collective not in COLLECTIVES:
        raise InternalError(f"collective must be one of {', '.join(COLLECTIVES)}")
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise PdplanError("network measurements not found", file=path) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise PdplanError(f"cannot parse network measurements: {err}", file=path) from None
    mean = f"time_stats.{collective}.mean"
    for column in (*_MEASUREMENT_COLUMNS, mean):
        if column not in frame.columns:
            raise PdplanError(f"missing column {column!r}", file=path, field=column)
    for column in (*_MEASUREMENT_COLUMNS, mean):
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = ~(values > 0)
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise PdplanError(f"{column} must be a number > 0, got {frame[column].tolist()[row]!r}",
                              file=path, line=row + 2, field=column)
    return pd.DataFrame({
        "num_workers": frame["num_workers"].astype(int),
        "devices_per_node": frame["devices_per_node"].astype(int),
        "size": frame["size"].astype(float),
        "time_s": frame[mean].astype(float) / 1e3,
    })


def fit_alpha_beta(sizes: np.ndarray, times_s: np.ndarray, factor: float) -> tuple[float, float]:
    """α ≥ 0 and β > 0 minimising Σ((α + factor·size/β − t)/t)², by non-negative least squares.

    The model is linear in (α, 1/β); dividing each row by its measured time makes the residual
    the relative error, so a 2 KiB message counts as much as a 64 MiB one.
    """
    sizes = np.asarray(sizes, dtype=float)
    times_s = np.asarray(times_s, dtype=float)
    design = np.column_stack([np.ones_like(sizes), factor * sizes]) / times_s[:, None]
    (alpha, inv_beta), _ = nnls(design, np.ones_like(times_s))
    if inv_beta <= 0:
        raise PdplanError("measured time does not grow with size; no bandwidth can be fitted")
    return float(alpha), float(1.0 / inv_beta)


def fit_measurements(frame: pd.DataFrame, system: str, collective: str) -> list[CollectiveFit]:
    """One fit per group shape (num_workers, devices_per_node) in a loaded measurement table.

    A group is inside one node when all its GPUs are on one node (``devices_per_node ==
    num_workers``); otherwise it spans ``num_workers / devices_per_node`` nodes.
    """
    fits = []
    for (workers, per_node), group in frame.groupby(["num_workers", "devices_per_node"], sort=True):
        workers, per_node = int(workers), int(per_node)
        factor = transfer_factor(collective, workers)
        alpha, beta = fit_alpha_beta(group["size"].to_numpy(), group["time_s"].to_numpy(), factor)
        predicted = alpha + factor * group["size"].to_numpy() / beta
        error = np.abs(predicted / group["time_s"].to_numpy() - 1)
        fits.append(CollectiveFit(
            system=system, collective=collective,
            scope="intra_node" if per_node >= workers else "inter_node",
            num_workers=workers, devices_per_node=per_node, alpha_s=alpha, beta_bytes_per_s=beta,
            points=len(group), mape=float(error.mean()), max_error=float(error.max())))
    return fits


def calibrate(data_folder: str | Path, systems: tuple[str, ...] = ("a100_dgx", "h100_dgx")
              ) -> tuple[list[CollectiveFit], dict[str, dict[str, dict[str, str]]]]:
    """Fit every collective CSV under ``data_folder/<system>/``; returns fits and source records."""
    folder = Path(data_folder)
    fits, sources = [], {}
    for system in systems:
        sources[system] = {}
        for collective in COLLECTIVES:
            path = folder / system / f"{collective}.csv"
            fits += fit_measurements(load_measurements(path, collective), system, collective)
            sources[system][collective] = {"file": f"network/{system}/{collective}.csv",
                                           "sha256": sha256_file(path)}
    return fits, sources


# --- catalog -------------------------------------------------------------------------------------

#: Which measured system's constants each catalog GPU uses, and why when it is a stand-in.
GPU_SYSTEMS = {
    "a100-80gb": ("a100_dgx", "measured on DGX A100 (NVLink 3, HDR InfiniBand)"),
    "h100-80gb": ("h100_dgx", "measured on DGX H100 (NVLink 4, ConnectX-7)"),
    "h100-80gb-pcap": ("h100_dgx", "not measured under a power cap; uses h100-80gb's constants "
                                   "(assumes the cap slows the SMs, not NVLink or the NIC)"),
    "h200-141gb": ("h100_dgx", "not measured; uses h100-80gb's constants (same NVLink 4 and "
                               "ConnectX-7 per GPU in the GPU catalog)"),
    "b200-180gb": ("h100_dgx", "not measured; uses h100-80gb's constants, a conservative stand-in "
                               "(NVLink 5 carries twice NVLink 4's bandwidth)"),
    "gb200-185gb": ("h100_dgx", "not measured; uses h100-80gb's constants, a conservative stand-in "
                                "(NVLink 5 carries twice NVLink 4's bandwidth; groups above 8 GPUs were never timed)"),
    "b300-288gb": ("h100_dgx", "not measured; uses h100-80gb's constants, a conservative stand-in "
                               "(NVLink 5 carries twice NVLink 4's bandwidth)"),
    "gb300-288gb": ("h100_dgx", "not measured; uses h100-80gb's constants, a conservative stand-in "
                                "(NVLink 5 carries twice NVLink 4's bandwidth; groups above 8 GPUs were never timed)"),
}


def network_to_dict(fits: list[CollectiveFit], sources: dict) -> dict:
    """The content of ``catalog/network.yaml`` (µs and GB/s, as people read them)."""
    return {
        "pdplan_network": FORMAT_VERSION,
        "method": FIT_METHOD,
        "origin": "microsoft/vidur data/profiling/network/ (MIT), via ../shared/data/network",
        "sources": sources,
        "gpus": {gpu: {"system": system, "note": note} for gpu, (system, note) in GPU_SYSTEMS.items()},
        "fits": [{
            "system": f.system, "collective": f.collective, "scope": f.scope,
            "num_workers": f.num_workers, "devices_per_node": f.devices_per_node,
            "alpha_us": round(f.alpha_s * 1e6, 4), "beta_gb_s": round(f.beta_bytes_per_s / 1e9, 4),
            "points": f.points, "mape": round(f.mape, 4), "max_error": round(f.max_error, 4),
        } for f in fits],
    }


def save_network(fits: list[CollectiveFit], sources: dict, path: str | Path) -> None:
    """Write the fitted constants atomically."""
    atomic_write_text(path, "# Generated by benchmarks/network_fit.py --write; do not edit by hand.\n"
                      + dump_yaml(network_to_dict(fits, sources)))


def load_network(path: str | Path) -> dict[str, GpuNetwork]:
    """Read a network constants file into one :class:`GpuNetwork` per GPU type."""
    top = Fields(load_yaml(path, what="network constants"), path)
    top.reject_unknown({"pdplan_network", "method", "origin", "sources", "gpus", "fits"})
    top.integer("pdplan_network", minimum=FORMAT_VERSION, maximum=FORMAT_VERSION)
    by_system: dict[str, list[CollectiveFit]] = {}
    for spec in top.items("fits"):
        fit = CollectiveFit(
            system=spec.string("system"),
            collective=spec.string("collective", choices=list(COLLECTIVES)),
            scope=spec.string("scope", choices=list(SCOPES)),
            num_workers=spec.integer("num_workers", minimum=2),
            devices_per_node=spec.integer("devices_per_node", minimum=1),
            alpha_s=spec.number("alpha_us", minimum=0) / 1e6,
            beta_bytes_per_s=spec.number("beta_gb_s", minimum=0, exclusive=True) * 1e9,
            points=spec.integer("points", minimum=1),
            mape=spec.number("mape", minimum=0),
            max_error=spec.number("max_error", minimum=0),
        )
        by_system.setdefault(fit.system, []).append(fit)
    gpus = top.mapping("gpus")
    networks = {}
    for name in gpus.data:
        entry = gpus.mapping(name)
        system = entry.string("system", choices=sorted(by_system))
        networks[str(name)] = GpuNetwork(gpu=str(name), system=system, note=entry.string("note"),
                                         fits=tuple(by_system[system]))
    return networks


def network_catalog_path() -> Path:
    return Path(str(resources.files("pdplan") / "catalog" / "network.yaml"))


@cache
def network_catalog() -> dict[str, GpuNetwork]:
    """The shipped constants, by GPU type name."""
    return load_network(network_catalog_path())


def network_for(gpu: GPU | str) -> GpuNetwork:
    """Collective costs for a GPU type; a type without constants is refused by name."""
    name = gpu if isinstance(gpu, str) else gpu.name
    catalog = network_catalog()
    if name not in catalog:
        raise PdplanError(f"no collective-communication constants for GPU {name!r} (known: "
                          f"{', '.join(sorted(catalog))})", field="gpu")
    return catalog[name]
