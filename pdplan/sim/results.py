"""What a simulation returns: one record per request and the summary against two SLO clocks.

Clocks (docs/design.md, "Clocks and units"):

* TTFT = arrival → first token visible. Disaggregated: prefill queue + prefill + exposed
  transfer + decode admission wait + first step; the first token is streamed by the decode instance
  once the KV is published, so ``first_token_s`` is the decode admission time (``first_step_s`` 0), or
  the end of the first step the request runs in where the decode samples it again (``first_token: decode``,
  :func:`pdplan.engines.first_token`; ``first_step_s`` that step). Where the decode pool pulls (``handoff:
  pull``, :func:`pdplan.engines.handoff`) the exposed transfer includes the wait for the decode's iteration
  that starts the read. Colocated: the end of the iteration that completes the prompt.
* TPOT = (finish − first token) / (output − 1). A request with one output token has no TPOT
  (NaN in the records) and passes the TPOT clock; the summary counts such requests.
* E2E = finish − arrival.
* Exposed transfer = KV fully visible at decode − prefill end (0 would mean fully hidden).
* Admission wait = joining the decode batch − KV fully visible: the queue a decode adds, which
  more decode instances shorten (``verify.failing_phase`` reads it); the first step is apart.

Single-instance runs fill the columns they can: a prefill instance alone has no decode, so its
``ttft_s`` is prefill end − arrival (queue + prefill, its TTFT contribution) and TPOT is not
measured; a decode instance alone receives requests with their KV visible at arrival, so its
``ttft_s`` is the admission wait.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from pdplan.vocabulary import SimMode

#: per-request columns, in the order of ``SimResult.requests``
COLUMNS = (
    "arrival_s", "prompt_tokens", "output_tokens",
    "prefill_instance", "prefill_start_s", "prefill_end_s",
    "decode_instance", "transfer_start_s", "transfer_end_s", "transfer_bytes",
    "first_token_s", "finish_s",
    "ttft_s", "tpot_s", "e2e_s", "prefill_queue_s", "exposed_transfer_s", "admission_wait_s", "first_step_s",
    "preemptions", "rejected", "transfer_failures", "prefill_cached_tokens", "prefill_loaded_tokens",
    "rejected_early", "handoffs_refused",
)

MODES = tuple(SimMode)


def _percentiles(values: np.ndarray) -> dict:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(values.mean())}


def _clean(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


@dataclass(frozen=True, kw_only=True, eq=False)
class SimResult:
    """Per-request records, per-instance and per-link busy time, and how the run was set up.

    Instance ids in ``prefill_instance`` / ``decode_instance`` index ``instances`` (labels
    ``"<pool>/<replica>"``); a colocated request has the same id in both, -1 means none.
    """

    mode: str                        #: "disaggregated", "colocated", "prefill" or "decode"
    columns: dict[str, np.ndarray]   #: per-request arrays, keys ``COLUMNS``
    instances: tuple[str, ...]       #: instance labels, indexed by instance id
    instance_phase: tuple[str, ...]  #: phase of each instance
    busy_s: np.ndarray               #: seconds each instance computed (PP: averaged over stages)
    link_busy_s: dict[str, float]    #: seconds each decode instance's ingress moved KV: its ranks' mean
    events: int                      #: events the engine processed
    seed: int = 0
    rate_rps: float | None = None    #: arrival rate the trace was rescaled to, if any
    engine: str = "fast"             #: "fast" (compiled) or "reference" (token-by-token oracle)
    notes: dict = field(default_factory=dict)
    #: the arrival a stop ended the run at (:class:`pdplan.sim.engine.MissStop`): the records
    #: hold what happened before it; None when the run went to the end
    stopped_s: float | None = None
    borrow: bool = False             #: dedicated machines could be lent to the other phase (borrowing)

    def __post_init__(self):
        assert self.mode in MODES, f"mode must be one of {', '.join(MODES)}, got {self.mode!r}"  # set by the engine

    def __len__(self) -> int:
        return int(self.columns["arrival_s"].size)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    @cached_property
    def requests(self) -> pd.DataFrame:
        """One row per request, columns ``COLUMNS`` (times in seconds, NaN where not reached)."""
        return pd.DataFrame({name: self.columns[name] for name in COLUMNS})

    @property
    def span_s(self) -> float:
        """First arrival → last completion (finish, or prefill end for a prefill-only run)."""
        arrival = self.columns["arrival_s"]
        end = self.columns["prefill_end_s"] if self.mode == "prefill" else self.columns["finish_s"]
        end = end[np.isfinite(end)]
        if arrival.size == 0 or end.size == 0:
            return 0.0
        return float(max(end.max(), arrival.max()) - arrival.min())

    def attainment_masks(self, ttft_s: float | None, tpot_s: float | None) -> dict[str, np.ndarray]:
        """Per-request pass/fail on each clock and on both (the joint mask is per request).

        Rejected requests fail every clock; a one-token request passes TPOT. A clock whose
        threshold is None, or that the run does not measure, passes every served request.
        """
        c = self.columns
        served = ~c["rejected"]
        ttft_ok = served.copy()
        if ttft_s is not None:
            ttft_ok &= c["ttft_s"] <= ttft_s
        tpot_ok = served.copy()
        if tpot_s is not None and self.mode != "prefill":
            tpot_ok &= (c["output_tokens"] == 1) | (c["tpot_s"] <= tpot_s)
        return {"ttft": ttft_ok, "tpot": tpot_ok, "joint": ttft_ok & tpot_ok}

    def summary(self, ttft_s: float | None = None, tpot_s: float | None = None, target: float | None = None) -> dict:
        """Distribution of each clock, attainment against the thresholds (seconds), load; with a
        ``target`` attainment, whether each clock and the joint meet it.

        Shape::

            {"mode", "requests", "served", "rejected", "rejected_early", "single_token_requests",
             "ttft": {p50, p90, p99, mean}, "tpot": {...}, "e2e": {...},
             "slo": {"ttft_s", "tpot_s"},
             "attainment": {"ttft", "tpot", "joint"},       # fractions of all requests
             "meets_slo": {"ttft", "tpot", "joint"},        # only with a target: attainment >= target
             "throughput_rps", "span_s",
             "utilization": {"instances": {label: fraction}, "links": {label: fraction}},
             "transfer": {"transfers", "bytes_total", "exposed_s_mean", "exposed_s_p99"},
             "admission_wait_s_mean", "preemptions", "events", "events_per_request",
             "first_step_s_mean",                           # only when a decode took a step before first tokens
             "mixed": {"whole_requests", "decodes", "share"},   # only with a mixed pool
             "borrowing": {"whole_requests_on_decode", "whole_requests_on_prefill", "decodes_on_prefill",
                           "handoffs_refused"},
                                                            # only when the plan borrows
             "prefix_cache": {"prompt_tokens", "cached_tokens", "loaded_tokens", "hit_rate"}}
                                                            # only when a prefill cache hit

        ``rejected`` counts every request turned away (too large for any instance's KV, or rejected
        at admission on a predicted TTFT miss, which ``rejected_early`` counts alone).
        Percentiles are over served requests (TPOT: those with more than one output token);
        ``None`` stands for a value that does not exist (JSON-safe). Attainment divides by all
        requests, rejected ones included; ``joint`` counts requests meeting both clocks.
        """
        c = self.columns
        n = len(self)
        served = ~c["rejected"]
        masks = self.attainment_masks(ttft_s, tpot_s)
        span = self.span_s
        util = {label: _clean(self.busy_s[i] / span) if span > 0 else None
                for i, label in enumerate(self.instances)}
        links = {label: _clean(busy / span) if span > 0 else None
                 for label, busy in self.link_busy_s.items()}
        moved = np.isfinite(c["transfer_end_s"])
        exposed = c["exposed_transfer_s"][moved]
        wait = c["admission_wait_s"][np.isfinite(c["admission_wait_s"])]
        shares = {k: float(v.mean()) if n else None for k, v in masks.items()}
        verdict = {} if target is None else {"meets_slo": {k: v is not None and v >= target for k, v in shares.items()}}
        return {
            "mode": self.mode,
            "requests": n,
            "served": int(served.sum()),
            "rejected": int((~served).sum()),
            "rejected_early": int(c["rejected_early"].sum()),
            "single_token_requests": int((served & (c["output_tokens"] == 1)).sum()),
            "ttft": _percentiles(c["ttft_s"][served]),
            "tpot": _percentiles(c["tpot_s"][served]),
            "e2e": _percentiles(c["e2e_s"][served]),
            "slo": {"ttft_s": ttft_s, "tpot_s": tpot_s},
            "attainment": shares,
            **verdict,
            "throughput_rps": _clean(served.sum() / span) if span > 0 else None,
            "span_s": span,
            "utilization": {"instances": util, "links": links},
            "transfer": {
                "transfers": int(moved.sum()),
                "bytes_total": int(c["transfer_bytes"].sum()),
                "exposed_s_mean": _clean(exposed.mean()) if exposed.size else None,
                "exposed_s_p99": _clean(np.percentile(exposed, 99)) if exposed.size else None,
            },
            "admission_wait_s_mean": _clean(wait.mean()) if wait.size else None,
            "preemptions": int(c["preemptions"].sum()),
            "events": self.events,
            "events_per_request": self.events / n if n else None,
            **self._first_step(),
            **self._mixed(),
            **self._borrowing(),
            **self._prefix_cache(),
        }

    def _first_step(self) -> dict:
        """The mean first step decodes took to sample a request's first token (``first_step_s``), over
        the requests that joined a decode batch; nothing when none took one."""
        step = self.columns["first_step_s"]
        joined = step[np.isfinite(step)]
        return {"first_step_s_mean": _clean(joined.mean())} if joined.size and joined.max() > 0 else {}

    def _prefix_cache(self) -> dict:
        """Prompt tokens the prefill instances' prefix caches held (not computed), those loaded from
        a second tier, and the hit rate over the prompt tokens that reached prefill; nothing when no
        prompt hit."""
        c = self.columns
        cached = int(c["prefill_cached_tokens"].sum())
        if cached == 0:
            return {}
        prefilled = (c["prefill_instance"] >= 0) & ~c["rejected"]
        prompt = int(c["prompt_tokens"][prefilled].sum())
        return {"prefix_cache": {"prompt_tokens": prompt, "cached_tokens": cached,
                                 "loaded_tokens": int(c["prefill_loaded_tokens"].sum()),
                                 "hit_rate": cached / prompt if prompt else None}}

    def _borrowing(self) -> dict:
        """With borrowing: requests run whole on a lent machine (a decode machine lent to prefill, or
        a prefill machine lent to decode that took a spilled arrival), decodes handed off to a
        prefill machine lent to decode, and handoffs refused for a stale role epoch; nothing without."""
        if not self.borrow:
            return {}
        c = self.columns
        phase = np.array(self.instance_phase + ("",))[c["decode_instance"]]  # -1 (none) reads ""
        whole = (c["prefill_instance"] == c["decode_instance"]) & (c["decode_instance"] >= 0)
        return {"borrowing": {"whole_requests_on_decode": int((whole & (phase == "decode")).sum()),
                              "whole_requests_on_prefill": int((whole & (phase == "prefill")).sum()),
                              "decodes_on_prefill": int((~whole & (phase == "prefill")).sum()),
                              "handoffs_refused": int(c["handoffs_refused"].sum())}}

    def _mixed(self) -> dict:
        """With a mixed pool: requests it ran whole (spilled at arrival) and decodes it took (spilled
        from full decode instances), and their share of all requests; nothing without one."""
        mixed = [i for i, phase in enumerate(self.instance_phase) if phase == "mixed"]
        if not mixed:
            return {}
        c = self.columns
        on = np.isin(c["decode_instance"], mixed)
        whole = on & (c["prefill_instance"] == c["decode_instance"])
        return {"mixed": {"whole_requests": int(whole.sum()), "decodes": int((on & ~whole).sum()),
                          "share": float(on.mean()) if len(on) else None}}


def derive_columns(mode: str, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Add the clocks (ttft, tpot, e2e, waits) to an engine's raw per-request times."""
    c = dict(raw)
    arrival = c["arrival_s"]
    first, finish = c["first_token_s"], c["finish_s"]
    join = c.pop("join_s")
    output = c["output_tokens"]
    with np.errstate(invalid="ignore", divide="ignore"):
        if mode == "prefill":
            c["ttft_s"] = c["prefill_end_s"] - arrival
        else:
            c["ttft_s"] = first - arrival
        c["tpot_s"] = np.where(output > 1, (finish - first) / np.maximum(output - 1, 1), np.nan)
        c["e2e_s"] = finish - arrival
        c["prefill_queue_s"] = c["prefill_start_s"] - arrival
        c["exposed_transfer_s"] = c["transfer_end_s"] - c["prefill_end_s"]
        if mode == "disaggregated":
            c["admission_wait_s"] = join - c["transfer_end_s"]
        elif mode == "decode":
            c["admission_wait_s"] = join - arrival
        else:
            c["admission_wait_s"] = np.full(arrival.size, np.nan)
        c["first_step_s"] = first - join if mode in ("disaggregated", "decode") else np.full(arrival.size, np.nan)
    for name in ("preemptions", "prefill_cached_tokens", "prefill_loaded_tokens", "handoffs_refused"):
        c.setdefault(name, np.zeros(arrival.size, np.int64))
    c.setdefault("rejected_early", np.zeros(arrival.size, bool))
    return {name: c[name] for name in COLUMNS}
