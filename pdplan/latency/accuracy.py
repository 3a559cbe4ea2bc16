"""How a latency source measures up against real deployments.

``benchmarks/silicon_validation.py`` replays every supported row of NVIDIA's measured deployments
(AIConfigurator's ``silicon_sample.csv``: the mean TTFT and TPOT of a model served by vLLM, SGLang or
TensorRT-LLM at a fixed concurrency) through the simulator and, with ``--accuracy-out``, writes each
row's signed error (simulated / measured − 1) to ``data/silicon_accuracy.json``, shipped with pdplan,
grouped by source, engine, model family and layout.
A plan timed by a source that was replayed there reports the errors of the rows like it: the same
source (composed from operator tables), the same serving engine, the same model family (dense or
mixture-of-experts) and the same layout (aggregated TP, aggregated with attention DP, or
disaggregated). The figures are derived from those rows (median and p90 of the absolute error, median
of the signed one), never applied to the plan: they say how far a verified plan's simulated clocks
were from measured ones, not how to correct them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

FILE = "silicon_accuracy.json"
#: what the shipped rows are grouped by: a plan's pool reads the group like it
KEY = ("source", "engine", "family", "layout")
#: the median signed error from which the report advises calibrating with a pilot run
BIASED = 0.25
LAYOUTS = {"agg": "aggregated", "agg-dp": "aggregated with attention DP", "disagg": "disaggregated"}


@dataclass(frozen=True)
class ClockError:
    """One clock's error over the rows: median and p90 of |simulated / measured − 1|, and the median
    signed error (below 0: simulated shorter than measured)."""

    median: float
    p90: float
    bias: float

    @classmethod
    def of(cls, signed: np.ndarray) -> "ClockError":
        return cls(median=float(np.median(np.abs(signed))), p90=float(np.quantile(np.abs(signed), 0.9)),
                   bias=float(np.median(signed)))

    def describe(self) -> str:
        side = "short" if self.bias < 0 else "long"
        return (f"off by {self.median:.0%} at the median and {self.p90:.0%} at p90, simulated {abs(self.bias):.0%} "
                f"{side} at the median")

    def to_dict(self) -> dict:
        return {"median_abs_error": self.median, "p90_abs_error": self.p90, "median_signed_error": self.bias}

    @classmethod
    def from_dict(cls, data: dict) -> "ClockError":
        return cls(median=data["median_abs_error"], p90=data["p90_abs_error"], bias=data["median_signed_error"])


@dataclass(frozen=True)
class Accuracy:
    """The replayed rows of one (source, engine, family, layout) and their errors."""

    source: str
    engine: str
    family: str
    layout: str
    rows: int
    ttft: ClockError
    tpot: ClockError

    def describe(self) -> str:
        advice = ("; a pilot run of your deployment corrects the profile (pdplan profile compose, then "
                  "pdplan profile calibrate)" if self.biased else "")
        return (f"{self.source} {self.engine} steps replayed against {self.rows} measured deployments of "
                f"{self.family} models, {LAYOUTS[self.layout]} (NVIDIA's silicon_sample.csv): "
                f"mean TTFT {self.ttft.describe()}; mean TPOT {self.tpot.describe()}{advice}")

    @property
    def biased(self) -> bool:
        """A clock simulated :data:`BIASED` or more off on the typical row (the median signed error): the
        report then advises correcting the profile with a pilot run before trusting its verdict."""
        return max(abs(self.ttft.bias), abs(self.tpot.bias)) >= BIASED

    def to_dict(self) -> dict:
        return {"source": self.source, "engine": self.engine, "family": self.family, "layout": self.layout,
                "rows": self.rows, "ttft": self.ttft.to_dict(), "tpot": self.tpot.to_dict(),
                "measurements": _shipped()["measurements"]}

    @classmethod
    def from_dict(cls, data: dict) -> "Accuracy":
        return cls(source=data["source"], engine=data["engine"], family=data["family"], layout=data["layout"],
                   rows=data["rows"], ttft=ClockError.from_dict(data["ttft"]), tpot=ClockError.from_dict(data["tpot"]))


def as_dict(found: Accuracy | None) -> dict | None:
    """An accuracy as the JSON documents carry it (None where none was replayed)."""
    return None if found is None else found.to_dict()


def accuracy_lines(found) -> list[str]:
    """The ``accuracy:`` lines of an output, from its pools' accuracy documents (None skipped): one per
    distinct group, in the pools' order."""
    return list(dict.fromkeys(f"accuracy: {Accuracy.from_dict(doc).describe()}" for doc in found if doc is not None))


def layout_of(phase: str, dp: int) -> str:
    """The validation's layout of a pool: a colocated pool is aggregated (with attention DP when its
    instance has DP ranks), a prefill, decode or mixed pool is part of a disaggregated plan."""
    if phase == "colocated":
        return "agg-dp" if dp > 1 else "agg"
    return "disagg"


def accuracy_for(source: str, engine: str, moe: bool, layout: str, *, engine_rooflines: bool) -> Accuracy | None:
    """The replayed rows like a plan's pool, or None when none were (a measured or calibrated
    profile, an engine or layout the measurements lack). ``engine_rooflines``: a roofline profile
    carries the engine's fitted efficiencies (``--engine``), else the Splitwise 2023 calibration."""
    if source == "roofline" and engine_rooflines:
        source = "roofline-engine"
    family = "moe" if moe else "dense"
    found = _errors().get((source, engine, family, layout))
    if found is None:
        return None
    ttft, tpot = found
    return Accuracy(source=source, engine=engine, family=family, layout=layout, rows=len(ttft),
                    ttft=ClockError.of(ttft), tpot=ClockError.of(tpot))


@cache
def _shipped() -> dict:
    return json.loads((resources.files("pdplan") / "data" / FILE).read_text())


@cache
def _errors() -> dict[tuple[str, str, str, str], tuple[np.ndarray, np.ndarray]]:
    """Each (source, engine, family, layout)'s signed TTFT and TPOT errors, from the shipped rows."""
    return {tuple(group[k] for k in KEY): (np.array(group["ttft_error"]), np.array(group["tpot_error"]))
            for group in _shipped()["groups"]}
