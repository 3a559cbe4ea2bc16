"""Service-level objectives: which latency clock, what threshold, met by what share of requests."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pdplan import limits
from pdplan.errors import InternalError, PdplanError
from pdplan.fileio import load_yaml
from pdplan.schema import Fields

METRICS = ("e2e", "tpot", "ttft")
#: The SLO when none is given: p90 TTFT <= 1 s and p90 TPOT <= 100 ms.
DEFAULT_TTFT_S, DEFAULT_TPOT_S, DEFAULT_ATTAINMENT = 1.0, 0.1, 0.9


@dataclass(frozen=True, kw_only=True)
class Objective:
    """``attainment`` of requests must see ``metric`` ≤ ``threshold_s`` (e.g. p90 TTFT ≤ 250 ms)."""

    metric: str
    threshold_s: float
    attainment: float

    def __post_init__(self):
        if self.metric not in METRICS:
            raise InternalError(f"metric must be one of {', '.join(METRICS)}, got {self.metric!r}")
        if not self.threshold_s > 0:
            raise InternalError(f"threshold_s must be > 0, got {self.threshold_s!r}")
        if not 0 < self.attainment <= 1:
            raise InternalError(f"attainment must be in (0, 1], got {self.attainment!r}")

    @property
    def label(self) -> str:
        return f"p{self.attainment * 100:g} {self.metric.upper()} <= {self.threshold_s * 1e3:g} ms"


@dataclass(frozen=True, kw_only=True)
class SLO:
    """All objectives a plan must meet at once; Splitwise checks p50, p90 and p99 of each clock."""

    objectives: tuple[Objective, ...]

    def __post_init__(self):
        if not self.objectives:
            raise InternalError("an SLO needs at least one objective")

    def for_metric(self, metric: str) -> tuple[Objective, ...]:
        return tuple(o for o in self.objectives if o.metric == metric)

    def threshold_s(self, metric: str) -> float | None:
        """The tightest threshold on ``metric``, used for per-request joint attainment."""
        found = [o.threshold_s for o in self.for_metric(metric)]
        return min(found) if found else None

    def to_dict(self) -> list[dict]:
        return [{"metric": o.metric, "threshold_s": o.threshold_s, "attainment": o.attainment}
                for o in self.objectives]


#: A plain number above this many seconds is almost surely milliseconds typed without a unit.
PLAIN_SECONDS_LIMIT = {"ttft": 60.0, "tpot": 5.0, "e2e": 3600.0}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s)?\s*$")


def parse_threshold_s(text: str | float, metric: str) -> float:
    """A latency threshold from a flag: ``2s``, ``50ms`` or a plain number of seconds.

    A plain number above :data:`PLAIN_SECONDS_LIMIT` for its clock is refused with a hint: a
    TTFT of 2000 s or a TPOT of 50 s is a millisecond value typed without its unit.
    """
    flag = f"--{metric}"
    match = _DURATION.match(str(text))
    if match is None:
        raise PdplanError(f"{flag} must be a duration such as 2s, 50ms or 0.5 (seconds), got {text!r}",
                          field=metric)
    number, unit = float(match.group(1)), match.group(2)
    seconds = number / 1e3 if unit == "ms" else number
    if not (math.isfinite(seconds) and seconds > 0):
        raise PdplanError(f"{flag} must be > 0, got {text!r}", field=metric)
    if unit is None and number > PLAIN_SECONDS_LIMIT[metric]:
        raise PdplanError(f"{flag} {text} reads as {number:g} seconds; plain numbers are seconds, so for "
                          f"milliseconds write {flag} {match.group(1)}ms", field=metric)
    return seconds


def slo_from_flags(ttft_s: float | None, tpot_s: float | None, attainment: float,
                   e2e_s: float | None = None) -> SLO:
    """The common case: one threshold per clock, one attainment fraction for all."""
    if not 0 < attainment <= 1:
        raise PdplanError(f"--attainment must be in (0, 1], got {attainment!r}", field="attainment")
    objectives = []
    for metric, value in (("ttft", ttft_s), ("tpot", tpot_s), ("e2e", e2e_s)):
        if value is None:
            continue
        if not (math.isfinite(value) and value > 0):
            raise PdplanError(f"--{metric} must be a finite number of seconds > 0, got {value!r}", field=metric)
        objectives.append(Objective(metric=metric, threshold_s=value, attainment=attainment))
    if not objectives:
        raise PdplanError("no SLO given: pass --ttft and/or --tpot (seconds) or --slo FILE", field="slo")
    return SLO(objectives=tuple(objectives))


def load_slo(path: str | Path) -> SLO:
    """Read an SLO YAML: ``objectives: [{metric: ttft, threshold_ms: 250, attainment: 0.9}, …]``."""
    top = Fields(load_yaml(path, what="SLO file"), path)
    top.reject_unknown({"objectives"})
    objectives = []
    for item in top.items("objectives"):
        item.reject_unknown({"metric", "threshold_ms", "attainment"})
        objectives.append(objective_from_fields(item))
    return SLO(objectives=tuple(objectives))


def objective_from_fields(item: Fields) -> Objective:
    """One objective as SLO files and manifests write it: ``{metric, threshold_ms, attainment}``."""
    threshold_s = item.number("threshold_ms", minimum=0, exclusive=True, maximum=limits.MAX_LATENCY_MS) / 1e3
    if not threshold_s > 0:  # a positive millisecond count so small that it is no time in seconds
        raise item.fail("threshold_ms", "must be a latency > 0 in seconds too", item.data["threshold_ms"])
    return Objective(metric=item.string("metric", choices=list(METRICS)), threshold_s=threshold_s,
                     attainment=item.number("attainment", minimum=0, exclusive=True, maximum=1))


def attainment(values_s: np.ndarray, threshold_s: float) -> float:
    """a = mean(1{metric ≤ τ}) over requests (0x08C); NaN values (no such clock) pass."""
    values = np.asarray(values_s, dtype=float)
    if len(values) == 0:
        return float("nan")
    return float(np.mean(np.isnan(values) | (values <= threshold_s)))


def miss_budget(n: int, share: float) -> int:
    """The most of ``n`` requests that may miss a clock while :func:`attainment` still reaches
    ``share``: the largest m with (n − m) / n ≥ share, compared in floating point as
    :func:`attainment` compares (0x08C's a ≥ target, counted)."""
    misses = max(0, min(n, n - math.ceil(share * n)))
    while misses > 0 and (n - misses) / n < share:
        misses -= 1
    while misses < n and (n - misses - 1) / n >= share:
        misses += 1
    return misses


def meets(slo: SLO, metrics: dict[str, np.ndarray]) -> bool:
    """Whether every objective holds on these per-request clocks (``{"ttft": array, …}``)."""
    return all(attainment(metrics[o.metric], o.threshold_s) >= o.attainment for o in slo.objectives)
