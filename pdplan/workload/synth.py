"""Synthetic traces: length distributions written as specs, and traces drawn from them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pdplan import limits
from pdplan.errors import PdplanError
from pdplan.workload.model import Workload
from pdplan.workload.reshape import diurnal_arrivals, gamma_arrivals, generator

LENGTH_KINDS = ("const", "lognormal", "uniform")

MAX_SPEC_TOKENS = limits.MAX_TOKENS_PER_REQUEST
"""Largest token count a length spec may name or draw: the most one request may have."""

LENGTH_SPEC_HELP = (
    "const:N (every request N tokens); uniform:LO:HI (integers LO..HI inclusive); "
    "lognormal:MEAN:SIGMA[:MAX] (MEAN tokens before rounding, SIGMA of the log; rounded to the "
    f"nearest integer and clipped to [1, MAX], MAX {MAX_SPEC_TOKENS:,} if omitted, the most tokens a "
    "request may have)"
)


@dataclass(frozen=True, kw_only=True)
class LengthDist:
    """A distribution of token counts, written ``KIND:PARAMS`` (see ``LENGTH_SPEC_HELP``)."""

    kind: str
    params: tuple[float, ...]

    def __post_init__(self) -> None:
        if self.kind not in LENGTH_KINDS:
            raise PdplanError(f"unknown length kind {self.kind!r}; expected one of {', '.join(LENGTH_KINDS)}")
        arity = {"const": (1,), "uniform": (2,), "lognormal": (2, 3)}[self.kind]
        if len(self.params) not in arity:
            raise PdplanError(f"{self.kind} takes {' or '.join(map(str, arity))} parameters, "
                              f"got {len(self.params)}")
        self._check_params()

    def _check_params(self) -> None:
        p = self.params
        counts = (p[0], *p[2:]) if self.kind == "lognormal" else p  # lognormal's SIGMA is no count
        if any(abs(v) > MAX_SPEC_TOKENS for v in counts):
            raise PdplanError(f"token counts must be <= {MAX_SPEC_TOKENS:,}, got "
                              f"{':'.join(f'{v:g}' for v in p)}")
        if self.kind == "const" and not (_whole(p[0]) and p[0] >= 1):
            raise PdplanError(f"const N must be an integer >= 1, got {p[0]:g}")
        if self.kind == "uniform" and not (_whole(p[0]) and _whole(p[1]) and 1 <= p[0] <= p[1]):
            raise PdplanError(f"uniform needs integers 1 <= LO <= HI, got {p[0]:g}:{p[1]:g}")
        if self.kind == "lognormal":
            if not (p[0] >= 1 and p[1] >= 0):
                raise PdplanError(f"lognormal needs MEAN >= 1 and SIGMA >= 0, got {p[0]:g}:{p[1]:g}")
            if len(p) == 3 and not (_whole(p[2]) and p[2] >= 1):
                raise PdplanError(f"lognormal MAX must be an integer >= 1, got {p[2]:g}")

    def sample(self, n: int, rng: np.random.Generator | int) -> np.ndarray:
        """n token counts (int64) drawn from ``rng``."""
        rng, p = generator(rng), self.params
        if self.kind == "const":
            return np.full(n, int(p[0]), dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(int(p[0]), int(p[1]), size=n, endpoint=True, dtype=np.int64)
        mean, sigma = p[0], p[1]
        draws = rng.lognormal(mean=math.log(mean) - sigma**2 / 2, sigma=sigma, size=n)
        upper = p[2] if len(p) == 3 else MAX_SPEC_TOKENS
        return np.clip(np.rint(draws), 1, upper).astype(np.int64)


def _whole(value: float) -> bool:
    return float(value).is_integer()


def _finite(text: str) -> float | None:
    """``text`` as a finite number, or None when it is not one."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_length_dist(text: str, *, what: str = "length") -> LengthDist:
    """Parse ``KIND:P1[:P2...]``; errors name ``what`` (e.g. ``--prompt``)."""
    kind, *raw = text.strip().split(":")
    params = tuple(_finite(v) for v in raw)
    if None in params:
        raise PdplanError(f"{what} {text!r}: parameters must be finite numbers ({LENGTH_SPEC_HELP})", field=what)
    try:
        return LengthDist(kind=kind, params=params)
    except PdplanError as err:
        raise PdplanError(f"{what} {text!r}: {err.detail}", field=what) from None


def synthesize(*, n_requests: int, rate_rps: float, prompt: LengthDist, output: LengthDist,
               cv: float = 1.0, rng: np.random.Generator | int, swing: float = 1.0,
               period_s: float = 86_400.0) -> Workload:
    """A synthetic trace: Gamma(cv) arrivals at ``rate_rps`` (Poisson for cv = 1) and i.i.d.
    lengths; with ``swing`` > 1 the rate follows a day curve of that peak-to-trough ratio and
    ``period_s`` (:func:`pdplan.workload.diurnal_arrivals`, mean ``rate_rps``).  Draw order, all
    from ``rng``: arrival gaps, prompt lengths, output lengths."""
    if swing != 1:
        _check_periods(n_requests, rate_rps, period_s)
    rng = generator(rng)
    arrival_s = (gamma_arrivals(n_requests, rate_rps=rate_rps, cv=cv, rng=rng) if swing == 1 else
                 diurnal_arrivals(n_requests, rate_rps=rate_rps, swing=swing, period_s=period_s, cv=cv, rng=rng))
    return Workload(arrival_s=arrival_s, prompt_tokens=prompt.sample(n_requests, rng),
                    output_tokens=output.sample(n_requests, rng), format="synth")


def _check_periods(n_requests: int, rate_rps: float, period_s: float) -> None:
    """The day curve is sampled at a fixed number of points per period, so a period short against
    the trace (0.001 s over a day of requests) would allocate without bound: refuse it first."""
    periods = n_requests / rate_rps / period_s
    if periods > limits.MAX_DIURNAL_PERIODS:
        raise PdplanError(f"--period {period_s:g} s repeats the day curve about {periods:,.0f} times over "
                          f"{n_requests:,} requests at {rate_rps:g} req/s; at most {limits.MAX_DIURNAL_PERIODS:,} "
                          "(a longer --period, or fewer requests)", field="period")
