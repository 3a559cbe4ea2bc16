"""Running a plan: flatten its pools into instances, feed requests to an engine, collect records.

Public entry points (re-exported by :mod:`pdplan.sim`):

* :func:`simulate` — a whole plan, disaggregated or colocated;
* :func:`simulate_prefill_instance`, :func:`simulate_decode_instance`,
  :func:`simulate_colocated_instance` — one instance judged alone, for per-phase goodput.

Every function is a pure function of its inputs and its seed: no wall clock is read, and the one
random choice, which KV transfer attempts fail (when a plan states a failure rate), is drawn
from ``seed``, so the same inputs give the same records, bit for bit. Ties go to the lowest
instance index.

Modelling choices, stated once:

* **Prefill batching** — FCFS under ``max_prefill_batch_tokens`` (the pool's, default the
  profile's) without reordering; a prompt longer than the cap runs alone. With PP = k, a batch
  passes k stages of latency/k each, one batch per stage at a time: up to k batches in flight
  and the first stage frees after latency/k (M/D/1 with service D/k, then D in the pipe: the
  inter-op formula of 0x08B for k = 2).
* **KV links** — each decode instance has one ingress that sends booked transfers one at a
  time in booking order (FIFO), each at the bandwidth and setup of its (prefill pool, decode
  pool) link. The request schedule books at prefill end and sends everything then; the layer
  schedule books when the prefill batch starts and streams layers as they are produced (0x08I
  recurrence with v_{-1} = when earlier bookings' bytes are sent, setup paid before the first
  layer). The ingress is work-conserving: it is busy only while it moves bytes, so a streamed
  request waiting for its next layer leaves the gap to later bookings (FIFO over bytes, not
  over time windows; otherwise one long prefill would block its destination's ingress).
* **Transfer failures** — each attempt fails with the plan's ``failure_rate``, found out when
  it lands. ``retry`` sends the whole cache again at once (setup + bytes/bw per failure, the
  ingress held until the last attempt lands); ``recompute`` drops it, the request joins the
  prefill pool again (fewest pending prompt tokens) and is prefilled, routed and sent anew.
  Blocks a failed attempt brought to the destination's prefix cache stay there.
* **Router hop** — the router hands a request to decode only after its prefill returns, so
  decode admission waits until max(KV visible, prefill end + ``route_s``); the KV stream itself
  is not delayed.
* **Prefix reuse** — with prefix hashes, prompt blocks cached at the destination decode
  instance (an LRU of ``prefix_cache_blocks`` blocks, default its KV capacity in blocks) are
  not sent. The cache affects bytes only; KV reservations count the whole prompt.
* **Decode memory** — admission reserves prompt + output tokens of KV and stalls (head of line,
  FIFO) when they do not fit; nothing is ever preempted, so ``preemptions`` is always 0 and the
  closed-form fast path is exact. The KV waiting for admission is held outside the KV capacity
  (in the sender's memory or a staging buffer).
* **Rejection** — a request whose prompt + output exceeds the KV capacity of every instance
  that could serve it is rejected at arrival: no times, fails every clock, counted.
* **Starting work** — an idle instance forms its batch at a boundary event of the same instant,
  after every arrival (or KV landing) of that instant has queued, so simultaneous requests
  share a batch; a request reaching a running decode batch joins at its next step boundary.
* **Decode steps** — continuous batching: requests join and leave at step boundaries; a step
  of B requests costs the decode profile at (1, B, Σctx) with Σctx = Σ (prompt + tokens
  generated so far), so a request's first decode step counts prompt + 1 (the prefill's token
  is its input; the Splitwise importer's reading, step i at prompt + i). The first token comes
  from prefill and is visible at decode admission; output − 1 steps follow.
* **Colocated** — prefill-first (waiting prompts whose KV fits run as one FCFS batch under the
  cap while decodes stall) or chunked (each iteration: one token per active decode, the rest
  of ``chunk_tokens`` to prompt chunks FCFS). A mixed iteration costs decode_step(B, Σctx) +
  (prefill(chunks) − prefill(empty batch)): the prefill constant is the fixed per-iteration
  cost (weights read once, 0x02B) the decode step already pays; a chunk of c tokens after o
  contributes Σl = c and Σl² = (o + c)² − o², so its attention counts the causal pairs of
  the whole prompt across chunks. One iteration at a time (PP profiles are used as
  whole-instance latencies, without pipelining).
* **Instances joining and leaving** — with ``availability``, each instance takes new requests
  only inside its intervals; outside them it finishes what it holds (a drain) and the routers
  choose among the instances that do take requests (all of them, if none does).
* **Routing** — prefill: fewest pending prompt tokens (Splitwise JSQ); decode: smallest
  (routed, unfinished KV tokens) / capacity; colocated: fewest outstanding tokens (prompt +
  output of routed, unfinished requests); ties → lowest index. No Splitwise mixed pool.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from pdplan import limits
from pdplan.errors import PdplanError
from pdplan.modelspec import ModelSpec
from pdplan.profiles import LatencyModel, PhaseProfile
from pdplan.sim import fast
from pdplan.sim.layout import (Layout, Requests, as_requests, cache_capacities, instance_availability,
                               layout_from_plan, layout_single, prefix_block_tokens, rejected_mask)
from pdplan.sim.plan import Plan
from pdplan.sim.reference import run_reference
from pdplan.sim.results import SimResult, derive_columns


# --- the compiled engine -------------------------------------------------------------------------

class _LatencyTable:
    """LatencyModels flattened for the kernels; ``index(model)`` gives a model's number."""

    def __init__(self):
        self.models: list[LatencyModel] = []

    def index(self, model: LatencyModel) -> int:
        for i, known in enumerate(self.models):
            if known is model:
                return i
        self.models.append(model)
        return len(self.models) - 1

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(tab_i, pieces): rows seg_ptr, seg_min, piece_ptr of tab_i; pieces (n, 3) in seconds."""
        seg_ptr, seg_min, piece_ptr, pieces = [0], [], [0], []
        for model in self.models:
            for segment in model.segments:
                seg_min.append(segment.min_batch)
                pieces.extend(segment.pieces_s)
                piece_ptr.append(len(pieces))
            seg_ptr.append(len(seg_min))
        width = max(len(seg_ptr), len(piece_ptr))
        tab_i = np.zeros((3, width), np.int64)
        for row, values in enumerate((seg_ptr, seg_min, piece_ptr)):
            tab_i[row, :len(values)] = values
        return tab_i, np.array(pieces, np.float64).reshape(-1, 3)


def _heap_capacity(n: int, layout: Layout) -> int:
    # live events: ≤ n KV-visible + one planned boundary per instance + PP batches per prefill
    # instance; stale boundaries: ≤ one per request (a cut happens only when a request arrives)
    stages = sum(p.pp for p in layout.profiles)
    return 2 * n + 4 * (len(layout.labels) + stages) + 64


def _request_state(requests: Requests, concurrency: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-request state for the kernels: integer rows ``rq`` and time rows ``rt``. In a closed
    loop the first ``concurrency`` requests arrive at 0 and the others when the kernel
    releases them."""
    n = len(requests)
    rq = np.full((fast.RQ_FIELDS, n), -1, np.int64)
    rq[fast.R_PROMPT] = requests.prompt_tokens
    rq[fast.R_OUTPUT] = requests.output_tokens
    rq[[fast.R_FIN_STEP, fast.R_XBYTES, fast.R_PF_DONE, fast.R_CHUNK, fast.R_FAILS]] = 0
    rt = np.full((fast.RT_FIELDS, n), np.nan)
    if concurrency:
        rt[fast.T_ARRIVAL] = np.inf
        rt[fast.T_ARRIVAL, :concurrency] = 0.0
    else:
        rt[fast.T_ARRIVAL] = requests.arrival_s
    return rq, rt


def _instance_state(profiles: list[PhaseProfile], table: _LatencyTable) -> tuple[np.ndarray, np.ndarray]:
    """Decode / colocated instance state ``di`` (integer rows) and ``df`` (float rows)."""
    di = np.zeros((fast.DI_FIELDS, len(profiles)), np.int64)
    for row in (fast.D_ROOT, fast.D_W_HEAD, fast.D_W_TAIL, fast.D_PF_HEAD, fast.D_PF_TAIL,
                fast.D_IT_FIRST, fast.D_LRU_HEAD, fast.D_LRU_TAIL, fast.D_K_HEAD, fast.D_K_TAIL):
        di[row] = -1
    di[fast.D_CAP] = [p.kv_capacity_tokens for p in profiles]
    di[fast.D_MODEL] = [table.index(p.decode) for p in profiles]
    di[fast.D_M_PREFILL] = [table.index(p.prefill) for p in profiles]
    return di, np.zeros((fast.DF_FIELDS, len(profiles)))


def run_fast(layout: Layout, requests: Requests, concurrency: int = 0, failures: np.ndarray | None = None
             ) -> tuple[dict[str, np.ndarray], np.ndarray, dict, int]:
    """Run the compiled engine; returns raw per-request arrays, busy seconds per instance,
    busy seconds per ingress link and the event count. ``concurrency`` > 0 runs a closed loop
    of that many clients (the requests' arrival times are then ignored, their order kept).
    ``failures`` gives each request's failed KV transfer attempts (none by default)."""
    n = len(requests)
    rejected = np.ascontiguousarray(rejected_mask(layout, requests), dtype=np.bool_)
    rq, rt = _request_state(requests, concurrency)
    if failures is not None:
        rq[fast.R_FAILS] = failures
    cl = np.array([concurrency, min(concurrency, n)], np.int64)
    table = _LatencyTable()
    busy = np.zeros(len(layout.labels))
    links: dict[str, float] = {}
    heap = _heap_capacity(n, layout)

    if layout.mode == "colocated":
        ids = layout.ids("colocated")
        di, df = _instance_state([layout.profiles[i] for i in ids], table)
        di[fast.D_POLICY] = [fast.POLICY_CHUNKED if layout.policy[i] == "chunked"
                             else fast.POLICY_PREFILL_FIRST for i in ids]
        di[fast.D_CHUNK] = [layout.chunk_tokens[i] for i in ids]
        di[fast.D_TOKEN_CAP] = [layout.batch_tokens[i] for i in ids]
        tab_i, pieces = table.arrays()
        events = fast.run_colocated(rq, rt, rejected, tab_i, pieces, di, df, *availability_csr(layout, ids), heap, cl)
        inst = rq[fast.R_P_INST]
        glob = np.where(inst >= 0, ids[np.maximum(inst, 0)], -1)
        busy[ids] = df[fast.F_BUSY]
        return _raw(requests, rejected, rq, rt, glob, glob.copy()), busy, links, int(events)

    pids = layout.ids("prefill")
    dids = np.concatenate([layout.ids("decode"), layout.ids("mixed")])  # mixed machines after decode
    n_dec = len(layout.ids("decode"))
    pprofs = [layout.profiles[i] for i in pids]
    pi = np.zeros((fast.PI_FIELDS, len(pids)), np.int64)
    pi[[fast.P_Q_HEAD, fast.P_Q_TAIL]] = -1
    pi[fast.P_MODEL] = [table.index(p.prefill) for p in pprofs]
    pi[fast.P_PP] = [p.pp for p in pprofs]
    pi[fast.P_CAP] = [layout.batch_tokens[i] for i in pids]
    pi[fast.P_POOL] = [layout.pool_slot[i] for i in pids]
    pf = np.zeros((len(pids), 1 + max([p.pp for p in pprofs], default=1)))
    di, df = _instance_state([layout.profiles[i] for i in dids], table)
    di[fast.D_POOL] = [layout.pool_slot[i] for i in dids]
    di[fast.D_MIXED, n_dec:] = 1
    di[fast.D_POLICY, n_dec:] = fast.POLICY_CHUNKED
    di[fast.D_CHUNK] = [layout.chunk_tokens[i] for i in dids]
    di[fast.D_TOKEN_CAP] = [layout.batch_tokens[i] for i in dids]

    block = prefix_block_tokens(layout, requests) if len(dids) else 0
    n_hash = 0
    hash_vals, hash_ptr = np.zeros(1, np.int64), np.zeros(n + 1, np.int64)
    if requests.has_hashes and len(dids) and len(pids):
        caps = cache_capacities(layout, requests)
        if any(caps):
            unique, dense = np.unique(requests.hash_values, return_inverse=True)
            hash_vals = np.ascontiguousarray(dense.ravel(), dtype=np.int64)
            hash_ptr = np.ascontiguousarray(requests.hash_offsets, dtype=np.int64)
            n_hash = int(unique.size)
            di[fast.D_LRU_CAP, :n_dec] = caps
    lru = np.full((3, max(1, len(dids) * n_hash)), -1, np.int32)
    lru[2] = 0
    link = np.stack([layout.link_bandwidth, layout.link_setup]).astype(np.float64)
    tab_i, pieces = table.arrays()
    events = fast.run_disaggregated(
        rq, rt, rejected, tab_i, pieces, pi, pf, di, df, lru, hash_vals, hash_ptr, n_hash, int(block),
        0 if layout.schedule == "request" else 1, int(layout.layers), int(layout.kv_bytes_per_token),
        link, fast.FAILURE_RECOMPUTE if layout.failure_policy == "recompute" else fast.FAILURE_RETRY,
        float(layout.route_s), *availability_csr(layout, pids), *availability_csr(layout, dids), n_dec,
        int(layout.spill_tokens), float(layout.kv_share), heap + 2 * int(rq[fast.R_FAILS].sum()), cl)
    pinst, dinst = rq[fast.R_P_INST], rq[fast.R_D_INST]
    pglob = np.where(pinst >= 0, pids[np.maximum(pinst, 0)], -1) if len(pids) else np.full(n, -1)
    dglob = np.where(dinst >= 0, dids[np.maximum(dinst, 0)], -1) if len(dids) else np.full(n, -1)
    whole = (pinst < 0) & (dinst >= n_dec)  # ran whole on a mixed machine: both phases there
    pglob = np.where(whole, dglob, pglob)
    busy[pids] = pf[:, 0]
    busy[dids] = df[fast.F_BUSY]
    if len(pids) and len(dids):
        links = {layout.labels[i]: float(b) for i, b in zip(dids, df[fast.F_LINK_BUSY])}
    return _raw(requests, rejected, rq, rt, pglob, dglob), busy, links, int(events)


def availability_csr(layout: Layout, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The intervals of instances ``ids`` for the kernels: pointers (len + 1) and [from, until) rows."""
    spans = [((-np.inf, np.inf),) if layout.availability is None else layout.availability[i] for i in ids]
    ptr = np.zeros(len(spans) + 1, np.int64)
    np.cumsum([len(s) for s in spans], out=ptr[1:])
    rows = np.array([span for s in spans for span in s], np.float64).reshape(-1, 2).T.copy()
    return ptr, rows if rows.size else np.zeros((2, 1))


def _raw(requests: Requests, rejected, rq, rt, prefill_instance, decode_instance) -> dict[str, np.ndarray]:
    return {
        "arrival_s": rt[fast.T_ARRIVAL].copy(), "prompt_tokens": requests.prompt_tokens,
        "output_tokens": requests.output_tokens, "rejected": rejected,
        "prefill_instance": prefill_instance, "decode_instance": decode_instance,
        "prefill_start_s": rt[fast.T_P_START], "prefill_end_s": rt[fast.T_P_END],
        "transfer_start_s": rt[fast.T_X_START], "transfer_end_s": rt[fast.T_X_END],
        "transfer_bytes": rq[fast.R_XBYTES].copy(), "first_token_s": rt[fast.T_FIRST],
        "finish_s": rt[fast.T_FINISH],
    }


def _result(layout: Layout, requests: Requests, raw, busy, links, events, *, seed: int,
            rate_rps: float | None, engine: str) -> SimResult:
    return SimResult(mode=layout.mode, columns=derive_columns(layout.mode, raw),
                     instances=layout.labels, instance_phase=layout.phases, busy_s=busy,
                     link_busy_s=links, events=events, seed=seed, rate_rps=rate_rps, engine=engine)


#: Failed attempts one transfer may have (a draw beyond it is cut, so a run always ends).
MAX_TRANSFER_FAILURES = 16


def transfer_failures(layout: Layout, n: int, seed: int) -> np.ndarray:
    """How many KV transfer attempts of each request fail: independent attempts, each failing
    with ``layout.failure_rate``, so the count is geometric (mean f / (1 − f)); drawn from
    ``seed``, the simulation's only random choice."""
    if layout.mode != "disaggregated" or layout.failure_rate <= 0:
        return np.zeros(n, np.int64)
    draws = np.random.default_rng(seed).geometric(1.0 - layout.failure_rate, size=n) - 1
    return np.minimum(draws, MAX_TRANSFER_FAILURES).astype(np.int64)


def run(layout: Layout, requests: Requests, *, seed: int = 0, rate_rps: float | None = None,
        engine: str = "fast", concurrency: int | None = None) -> SimResult:
    """Run ``layout`` on ``requests`` with the compiled engine or the reference oracle; with
    ``concurrency`` C, as a closed loop of C clients."""
    if concurrency is not None and not (isinstance(concurrency, int) and 1 <= concurrency <= limits.MAX_CONCURRENCY):
        raise PdplanError(f"concurrency must be an integer in [1, {limits.MAX_CONCURRENCY:,}], got {concurrency!r}",
                          field="concurrency")
    failures = transfer_failures(layout, len(requests), seed)
    if engine == "fast":
        raw, busy, links, events = run_fast(layout, requests, concurrency or 0, failures)
    elif engine == "reference":
        raw, busy, links, events = run_reference(layout, requests, concurrency or 0, failures)
    else:
        raise ValueError("engine must be 'fast' or 'reference'")
    # no handoff, no failure: rejected, never decoded, or run whole on one mixed machine
    moved = ~raw["rejected"] & (raw["decode_instance"] >= 0) & (raw["prefill_instance"] != raw["decode_instance"])
    raw["transfer_failures"] = np.where(moved, failures, 0)
    return _result(layout, requests, raw, busy, links, events, seed=seed, rate_rps=rate_rps,
                   engine=engine)


# --- public API ----------------------------------------------------------------------------------

def simulate(workload: Any, plan: Plan, profiles: Mapping, *, model: ModelSpec | None = None,
             seed: int = 0, rate_rps: float | None = None, engine: str = "fast",
             concurrency: int | None = None, availability: Mapping | None = None) -> SimResult:
    """Simulate ``plan`` serving ``workload``.

    ``workload`` is a :class:`pdplan.workload.Workload` or a mapping with ``arrival_s``,
    ``prompt_tokens``, ``output_tokens`` and optionally ``hash_values``, ``hash_offsets``,
    ``block_tokens``. ``profiles`` maps (model, gpu, tp, pp) to :class:`PhaseProfile`
    (e.g. ``pdplan.profiles.shipped_profiles()``); a pool without one raises PdplanError
    naming the plan file and the pool. ``model`` (required for disaggregated plans) gives KV
    bytes per token and the layer count; every pool must serve it. ``rate_rps`` rescales the
    arrivals to that mean rate first (same burst shape). ``seed`` draws the plan's KV transfer
    failures (when its failure rate is above 0; otherwise nothing is random) and is recorded.
    ``engine="reference"`` runs the slow token-by-token oracle.
    ``concurrency`` C runs a closed loop instead: C clients, each sending its next request (in
    trace order) the moment its previous one finishes, as ``vllm bench serve
    --max-concurrency``, genai-perf and AIPerf do; the trace's arrival times are ignored.
    ``availability`` (pool name → per replica, the [from, until) intervals in which it takes new
    requests) runs a pool whose instances join and leave: out of its intervals an instance only
    drains the work it holds; the routers pick among the instances taking requests.
    """
    requests = as_requests(workload, rate_rps=rate_rps, closed_loop=concurrency is not None)
    layout = layout_from_plan(plan, profiles, model)
    if availability is not None:
        layout = dataclasses.replace(layout, availability=instance_availability(plan, availability))
    return run(layout, requests, seed=seed, rate_rps=rate_rps, engine=engine, concurrency=concurrency)


def simulate_pool(workload: Any, profile: PhaseProfile, *, phase: str, replicas: int = 1,
                  policy: str | None = None, chunk_tokens: int | None = None,
                  max_prefill_batch_tokens: int | None = None, seed: int = 0,
                  rate_rps: float | None = None, engine: str = "fast",
                  concurrency: int | None = None) -> SimResult:
    """``replicas`` identical instances of one phase behind the router, with no other phase
    (``concurrency``: a closed loop of that many clients, as in :func:`simulate`).

    The clocks are those of one instance alone (below), per request; routing is the plan's
    (prefill: fewest pending prompt tokens; decode: least KV load; colocated: fewest outstanding
    tokens), so a pool of n replicas shows the pooling gain that n separate instances do not.
    """
    if phase == "colocated":
        if policy not in ("prefill-first", "chunked"):
            raise ValueError("policy must be 'prefill-first' or 'chunked'")
        if (policy == "chunked") != (chunk_tokens is not None):
            raise ValueError("chunk_tokens is required by, and only by, the chunked policy")
        if chunk_tokens is not None and chunk_tokens < 1:
            raise ValueError("chunk_tokens must be >= 1")  # 0 would mean "no chunking" in the layout
    elif phase not in ("prefill", "decode"):
        raise ValueError("phase must be prefill, decode or colocated")
    layout = layout_single(phase, profile, policy=policy, chunk_tokens=chunk_tokens,
                           max_prefill_batch_tokens=max_prefill_batch_tokens, replicas=replicas)
    requests = as_requests(workload, rate_rps=rate_rps, closed_loop=concurrency is not None)
    return run(layout, requests, seed=seed, rate_rps=rate_rps, engine=engine, concurrency=concurrency)


def simulate_prefill_instance(workload: Any, profile: PhaseProfile, *,
                              max_prefill_batch_tokens: int | None = None, seed: int = 0,
                              rate_rps: float | None = None, engine: str = "fast") -> SimResult:
    """One prefill instance alone: ``ttft_s`` is its TTFT contribution, prefill end − arrival
    (queue + batch time); no transfer and no decode (TPOT not measured). The batch cap defaults
    to the profile's, as in a plan's pool."""
    return simulate_pool(workload, profile, phase="prefill", max_prefill_batch_tokens=max_prefill_batch_tokens,
                         seed=seed, rate_rps=rate_rps, engine=engine)


def simulate_decode_instance(workload: Any, profile: PhaseProfile, *, seed: int = 0,
                             rate_rps: float | None = None, engine: str = "fast") -> SimResult:
    """One decode instance alone: requests arrive with their KV visible (and first token made);
    ``admission_wait_s`` (= ``ttft_s``) is the wait for KV memory, ``tpot_s`` the cadence."""
    return simulate_pool(workload, profile, phase="decode", seed=seed, rate_rps=rate_rps, engine=engine)


def simulate_colocated_instance(workload: Any, profile: PhaseProfile, *, policy: str = "prefill-first",
                                chunk_tokens: int | None = None,
                                max_prefill_batch_tokens: int | None = None, seed: int = 0,
                                rate_rps: float | None = None, engine: str = "fast") -> SimResult:
    """One colocated instance alone with ``policy`` "prefill-first" (batch cap defaults to the
    profile's) or "chunked" (needs ``chunk_tokens``)."""
    return simulate_pool(workload, profile, phase="colocated", policy=policy, chunk_tokens=chunk_tokens,
                         max_prefill_batch_tokens=max_prefill_batch_tokens, seed=seed, rate_rps=rate_rps,
                         engine=engine)
