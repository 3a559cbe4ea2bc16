"""Pool capacity c(n): the rate n replicas of one shape sustain behind the router, per phase.

DistServe's replica rule (0x08C) sizes a pool as ``n = ceil(R / g)``, with g the goodput of one
instance alone: n instances are assumed to serve n·g. That throws away the pooling gain. One
instance must keep its queue short at every moment on its own; n instances behind a
shortest-queue router absorb each other's bursts, so the p90 wait at a given utilisation falls as
n grows and c(n) > n·c(1) (a shared M/G/n queue beats n separate M/G/1 queues at equal load).

The model (docs/design.md, "Pool capacity c(n)"):

* **Samples.** c(n) is the goodput (the same bisection over simulated rates, the phase judged
  alone against its share of the SLO) of a pool of n replicas, each probe carrying
  ``requests_per_probe`` requests per replica, at n = 1, 2, 4, 8, … until the pool serves the
  rate the planner may ask of it, the cluster cannot hold more, or its rate per replica is within
  the bisection's resolution of one instance's saturation throughput (no larger pool can beat
  that). A doubling that gains little is no reason to stop: on a bursty trace the gain can stall
  and resume once pools are larger than the bursts (bloom-176b prefill on the Azure code trace,
  per replica 0.57, 0.56, 0.70, 0.95, 1.45 req/s at n = 2 … 32). Colocated instances of
  attention DP ranks are the exception: every step synchronises the ranks, so a prompt chunk on
  one rank stalls the decodes of all of them, and that interference grows with the rate each
  instance takes, whatever the pool around it. Their per-replica rate stays flat (DeepSeek-R1 on
  the Azure conversation trace, TP1 DP16: 2.46, 2.42, 2.42, 2.50, 2.54, 2.65 req/s at n = 1 … 32;
  TP1 DP32: 2.23, 2.16, 2.16, 2.16, 2.23), and each sample simulates the whole trace over
  hundreds of ranks, so their sampling stops after two successive samples that gain no more than
  the bisection's resolution per replica (``stop_when_flat``). c(1) is the instance goodput.
* **Between samples**, each stretch from a sample a to the next sample b is one line through the
  origin, c(n) = n · r, with r the per-replica rate a reached, e(a) = c(a)/a, lowered if need be
  so that c(b − 1) ≤ c(b) and the pool never beats n × one instance's saturation throughput:
  never above what a measured pool size achieved per replica, so the integer program does not
  claim capacity no simulation showed. While pooling makes e grow with n, c is monotone.
* **Beyond the largest sample**, c(n) = n · e(largest): extrapolated at the last measured
  efficiency (conservative while efficiency still grows; the end-to-end verification is the
  judge either way).

Lines through the origin make the program's capacity a piecewise-linear function of n with
one boolean per stretch, whose LP relaxation is tight; a lookup table per count was not.

Samples are cached on disk like instance goodputs, one entry per (shape, n).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from pdplan.errors import InternalError

#: The largest pool simulated per shape; beyond it c(n) extrapolates at its per-replica rate.
MAX_SAMPLED_REPLICAS = 32


@dataclass(frozen=True, kw_only=True)
class PoolCurve:
    """Sampled pool capacities of one shape, interpolated as the module docstring states."""

    samples: tuple[tuple[int, float], ...]   #: (replicas, capacity rps), replicas ascending from 1
    saturation_rps: float | None = None      #: one instance's closed-form limit (None: colocated)

    def __post_init__(self):
        sizes = [n for n, _ in self.samples]
        if not sizes or sizes[0] != 1 or sizes != sorted(set(sizes)):
            raise InternalError("samples must start at 1 replica and rise strictly")
        if any(not (math.isfinite(c) and c >= 0) for _, c in self.samples):
            raise InternalError("sampled capacities must be finite and >= 0")

    @classmethod
    def linear(cls, goodput_rps: float) -> "PoolCurve":
        """n · g: DistServe's replica rule, no pooling gain."""
        return cls(samples=((1, goodput_rps),))

    @property
    def largest_sampled(self) -> int:
        return self.samples[-1][0]

    def capacity_rps(self, n: int) -> float:
        """c(n) for any n >= 0 (c(0) = 0): n × the per-replica rate of n's stretch."""
        if n <= 0:
            return 0.0
        first = max(size for size, _ in self.samples if size <= n)
        return n * self._stretch_rate(first)

    def _stretch_rate(self, first: int) -> float:
        """The per-replica rate of the stretch that starts at sample ``first``: the lower of the
        bounded rates at its two ends (see :meth:`_bounded`), so the stretch is one line."""
        later = [size for size, _ in self.samples if size > first]
        ends = [first] if not later else [first, later[0] - 1]
        return min(self._bounded(end) / end for end in ends)

    def _bounded(self, n: int) -> float:
        """n × the per-replica rate of the largest sample up to n, capped by every larger
        sample (more replicas never serve less) and by n × one instance's saturation."""
        below = max((s for s in self.samples if s[0] <= n), key=lambda s: s[0])
        value = n * below[1] / below[0]
        for size, capacity in self.samples:
            if size >= n:
                value = min(value, capacity)
        if self.saturation_rps is not None:
            value = min(value, n * self.saturation_rps)
        return value

    def segments(self, bound: int) -> list[tuple[int, int, float]]:
        """c(n) for n up to ``bound`` as lines through the origin, for the integer program:
        (first n, last n, rate per replica), one per stretch from a sample to the next."""
        starts = [n for n, _ in self.samples if n <= bound]
        return [(first, (starts[i + 1] - 1) if i + 1 < len(starts) else bound, self._stretch_rate(first))
                for i, first in enumerate(starts)]

    def replicas_for(self, rate_rps: float, limit: int) -> int | None:
        """The fewest replicas whose capacity reaches ``rate_rps`` (None beyond ``limit``)."""
        if rate_rps <= 0:
            return 0
        per_replica = max(c / n for n, c in self.samples)
        if self.saturation_rps is not None:
            per_replica = min(per_replica, self.saturation_rps)
        if per_replica <= 0 or rate_rps / per_replica > limit:
            return None
        n = max(1, math.floor(rate_rps / per_replica))  # no n below this can reach the rate
        while n <= limit:
            if self.capacity_rps(n) >= rate_rps * (1 - 1e-12):
                return n
            n += 1
        return None

    def to_dict(self) -> dict:
        return {"samples": [{"replicas": n, "capacity_rps": c} for n, c in self.samples],
                "saturation_rps_per_instance": self.saturation_rps}


def sample_sizes(up_to: int) -> list[int]:
    """Pool sizes sampled after n = 1: 2, 4, 8, … up to ``up_to`` (itself included when it is
    not a power of two) and never beyond :data:`MAX_SAMPLED_REPLICAS`."""
    up_to = min(up_to, MAX_SAMPLED_REPLICAS)
    sizes, n = [], 2
    while n < up_to:
        sizes.append(n)
        n *= 2
    if up_to >= 2:
        sizes.append(up_to)
    return sizes


def build_curve(single_rps: float, saturation_rps: float | None, *, wanted_rps: float, most_replicas: int,
                sample: Callable[[int, float], float], resolution: float = 0.0,
                stop_when_flat: bool = False) -> PoolCurve:
    """Sample c(n) at growing pool sizes until a pool reaches ``wanted_rps``, the cluster cannot
    hold more (``most_replicas``), or the pool's rate per replica is within ``resolution`` (the
    bisection's own, relative) of one instance's saturation throughput: larger pools extrapolate
    at that rate, and the curve never beats saturation anyway. With ``stop_when_flat`` (colocated
    instances of DP ranks, see the module docstring) it also stops after two successive samples
    whose rate per replica is no more than ``resolution`` above the best before them.
    ``sample(n, start_rps)`` simulates one pool size, its search starting at the rate the largest
    smaller sample reached per replica."""
    samples = [(1, single_rps)]
    if single_rps > 0:
        needed = PoolCurve(samples=((1, single_rps),)).replicas_for(wanted_rps, most_replicas) or most_replicas
        best, flat = single_rps, 0  # the best rate per replica so far; samples in a row not above it
        for n in sample_sizes(needed):
            before = samples[-1][1] / samples[-1][0]
            samples.append((n, sample(n, n * before)))
            if samples[-1][1] >= wanted_rps or samples[-1][1] <= 0:
                break  # enough; or a pool that serves nothing (a shape on the edge of its SLO)
            per_replica = samples[-1][1] / n
            if saturation_rps and per_replica >= saturation_rps * (1 - resolution):
                break  # saturated: more replicas add capacity at this rate each, and no more
            if stop_when_flat:
                flat = flat + 1 if per_replica <= best * (1 + resolution) else 0
                best = max(best, per_replica)
                if flat == 2:
                    break  # no pooling gain at two doublings: larger pools extrapolate at this rate
    return PoolCurve(samples=tuple(samples), saturation_rps=saturation_rps)
