"""From a layout and requests to the kernels' arrays and back to per-request records."""

from __future__ import annotations

import numpy as np

from pdplan.latency.profile import PhaseProfile
from pdplan.sim.fast import fields
from pdplan.sim.fast.colocated import run_colocated
from pdplan.sim.fast.disaggregated import run_disaggregated
from pdplan.sim.fast.latency import LatencyTable
from pdplan.sim.fast.prefix import cache_tables
from pdplan.sim.layout import (
    Layout,
    Requests,
    batch_drain_s,
    cache_capacities,
    prefix_block_tokens,
    rejected_mask,
)
from pdplan.vocabulary import Router

_HOMES = {"decode": fields.HOME_DECODE, "mixed": fields.HOME_MIXED, "prefill": fields.HOME_PREFILL}
_ROUTERS = {Router.LEAST_LOADED: fields.ROUTER_LEAST_LOADED, Router.ROUND_ROBIN: fields.ROUTER_ROUND_ROBIN,
            Router.CACHE_AWARE: fields.ROUTER_CACHE_AWARE}


def _heap_capacity(n: int, layout: Layout) -> int:
    # live events: ≤ n KV-visible (or, towards a decode that pulls, a pull before it) + one planned boundary per
    # instance + PP batches per prefill instance; stale boundaries: ≤ one per request (a cut happens only when a
    # request arrives)
    stages = sum(p.pp for p in layout.profiles)
    ranks = sum(p.dp for p in layout.profiles)
    return (3 if layout.pull else 2) * n + 4 * (ranks + stages) + 64


def _request_state(requests: Requests, concurrency: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-request state for the kernels: integer rows ``rq`` and time rows ``rt``. In a closed
    loop each request is due at its arrival time (all 0 unless a rate paces the clients): the first
    ``concurrency`` arrive when due, the others when the kernel releases them, not before due."""
    n = len(requests)
    rq = np.full((fields.RQ_FIELDS, n), -1, np.int64)
    rq[fields.R_PROMPT] = requests.prompt_tokens
    rq[fields.R_OUTPUT] = requests.output_tokens
    rq[[fields.R_FIN_STEP, fields.R_XBYTES, fields.R_PF_DONE, fields.R_CHUNK, fields.R_FAILS, fields.R_CACHED,
        fields.R_LOADED, fields.R_EPOCH, fields.R_REFUSED, fields.R_ROOM]] = 0
    rt = np.full((fields.RT_FIELDS, n), np.nan)
    if concurrency:
        rt[fields.T_DUE] = requests.arrival_s
        rt[fields.T_ARRIVAL] = np.inf
        rt[fields.T_ARRIVAL, :concurrency] = requests.arrival_s[:concurrency]
    else:
        rt[fields.T_ARRIVAL] = requests.arrival_s
    return rq, rt


def group_index(table: LatencyTable, model) -> int:
    """The number of a DP instance's group part in the latency table; -1 without one."""
    return -1 if model is None else table.index(model)


def _rank_columns(profiles: list[PhaseProfile]) -> tuple[np.ndarray, np.ndarray]:
    """Each instance as ``dp`` columns: (the instance of each column, each instance's lead column)."""
    dps = [p.dp for p in profiles]
    inst = np.repeat(np.arange(len(profiles), dtype=np.int64), dps)
    lead = np.zeros(len(profiles), np.int64)
    np.cumsum(dps[:-1], out=lead[1:])
    return inst, lead


def _instance_state(profiles: list[PhaseProfile], table: LatencyTable, per_instance: dict[int, list]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Decode / colocated state ``di`` (integer rows) and ``df`` (float rows), one column per rank;
    ``per_instance`` gives rows whose value is the instance's (one per instance). Returns them with
    the instance of each column and the lead column of each instance."""
    inst, lead = _rank_columns(profiles)
    di = np.zeros((fields.DI_FIELDS, inst.size), np.int64)
    for row in (fields.D_ROOT, fields.D_W_HEAD, fields.D_W_TAIL, fields.D_PF_HEAD, fields.D_PF_TAIL,
                fields.D_IT_FIRST, fields.D_LRU_HEAD, fields.D_LRU_TAIL, fields.D_K_HEAD, fields.D_K_TAIL,
                fields.D_U_HEAD, fields.D_U_TAIL, fields.D_WAIT_J, fields.D_ADP_K, fields.D_JOIN_HEAD):
        di[row] = -1
    rows = {fields.D_CAP: [p.kv_capacity_tokens for p in profiles],
            fields.D_MODEL: [table.index(p.decode) for p in profiles],
            fields.D_M_PREFILL: [table.index(p.prefill) for p in profiles],
            fields.D_M_GROUP_P: [group_index(table, p.group_prefill) for p in profiles],
            fields.D_M_GROUP_D: [group_index(table, p.group_decode) for p in profiles],
            fields.D_DP: [p.dp for p in profiles], fields.D_LEAD: lead,
            fields.D_INST: np.arange(len(profiles)), **per_instance}
    for row, values in rows.items():
        di[row] = np.asarray(values, np.int64)[inst]
    df = np.zeros((fields.DF_FIELDS, inst.size))
    df[fields.F_PROMPT_S] = np.array([p.prompt_iteration_s for p in profiles], np.float64)[inst]
    return di, df, inst, lead


def _loop_state(layout: Layout, concurrency: int, n: int, stop) -> np.ndarray:
    """``cl`` (:mod:`.fields`): the closed loop's clients and next release, and the stop's
    thresholds and allowances (none: nothing is ever settled)."""
    cl = np.zeros(fields.CL_STOPPED + 1)
    cl[[fields.CL_CLIENTS, fields.CL_NEXT]] = concurrency, min(concurrency, n)
    cl[[fields.CL_TTFT_ROW, fields.CL_STOPPED]] = -1
    cl[[fields.CL_TTFT_S, fields.CL_TPOT_S, fields.CL_TTFT_ALLOWED, fields.CL_TPOT_ALLOWED]] = np.inf
    if stop is not None:
        if stop.ttft_s is not None:
            cl[fields.CL_TTFT_ROW] = fields.T_P_END if layout.mode == "prefill" else fields.T_FIRST
            cl[[fields.CL_TTFT_S, fields.CL_TTFT_ALLOWED]] = stop.ttft_s, stop.ttft_misses
        if stop.tpot_s is not None:
            cl[[fields.CL_TPOT_S, fields.CL_TPOT_ALLOWED]] = stop.tpot_s, stop.tpot_misses
    return cl


def run_fast(layout: Layout, requests: Requests, concurrency: int = 0, failures: np.ndarray | None = None,
             stop=None, rooms: np.ndarray | None = None) -> tuple[dict[str, np.ndarray], np.ndarray, dict, int, int]:
    """Run the compiled engine; returns raw per-request arrays, busy seconds per instance,
    busy seconds per ingress link, the event count and the request whose arrival the run
    stopped at (-1: it ran to the end). ``concurrency`` > 0 runs a closed loop of that many
    clients (the requests' arrival times are then ignored, their order kept). ``failures``
    gives each request's failed KV transfer attempts (none by default), ``rooms`` its bootstrap room (for the
    prefill instances that route by room; :func:`pdplan.sim.engine.bootstrap_rooms`). ``stop``
    (:class:`pdplan.sim.engine.MissStop`) ends the run once its misses settle it
    (:func:`pdplan.sim.fast.clock.settled`)."""
    n = len(requests)
    rejected = np.ascontiguousarray(rejected_mask(layout, requests), dtype=np.bool_)
    too_large = rejected.copy()  # the kernels add the early rejections
    rq, rt = _request_state(requests, concurrency)
    if failures is not None:
        rq[fields.R_FAILS] = failures
    if rooms is not None:
        rq[fields.R_ROOM] = rooms
    cl = _loop_state(layout, concurrency, n, stop)
    table = LatencyTable()
    busy = np.zeros(len(layout.labels))
    links: dict[str, float] = {}
    heap = _heap_capacity(n, layout)

    if layout.mode == "colocated":
        ids = layout.ids("colocated")
        waits, balances = [layout.waits(i) for i in ids], [layout.balance(i) for i in ids]
        di, df, col, lead = _instance_state([layout.profiles[i] for i in ids], table, {
            fields.D_POLICY: [fields.POLICY_CHUNKED if layout.policy[i] == "chunked"
                              else fields.POLICY_PREFILL_FIRST for i in ids],
            fields.D_CHUNK: [layout.chunk_tokens[i] for i in ids],
            fields.D_TOKEN_CAP: [layout.batch_tokens[i] for i in ids], fields.D_MAX_RUN: _running_caps(layout, ids),
            fields.D_RECV_N: [layout.receive_every(i) for i in ids],
            fields.D_WAIT_N: [n for n, _ in waits], fields.D_WAIT_TOK: [tokens for _, tokens in waits],
            fields.D_ADP_N: [n for n, _ in balances], fields.D_ADP_W: [w for _, w in balances],
            fields.D_TURN: [layout.ranks_in_turn(i) for i in ids]})
        block = prefix_block_tokens(layout, requests)
        caps = cache_capacities(layout, requests, "colocated") if requests.has_hashes and block else [0] * len(ids)
        n_hash, hash_vals, hash_ptr = (_dense_hashes(requests) if any(caps)
                                       else (0, np.zeros(1, np.int64), np.zeros(n + 1, np.int64)))
        di[fields.D_LRU_CAP, lead] = caps
        tab_i, pieces = table.arrays()
        events = run_colocated(rq, rt, rejected, tab_i, pieces, di, df, cache_tables(caps, n_hash), hash_vals,
                               hash_ptr, n_hash, int(block), *availability_csr(layout, ids[col]), heap, cl)
        inst = rq[fields.R_P_INST]
        glob = np.where(inst >= 0, ids[col[np.maximum(inst, 0)]], -1)
        busy[ids] = df[fields.F_BUSY, lead]
        raw = _raw(requests, rejected, rq, rt, glob, glob.copy())
        raw["prefill_cached_tokens"] = rq[fields.R_CACHED].copy()
        return raw, busy, links, int(events), int(cl[fields.CL_STOPPED])

    pids = layout.ids("prefill")
    dids = layout.receivers()  # decode, then mixed machines, then prefill instances that may be lent
    n_dec = len(layout.ids("decode"))
    pprofs = [layout.profiles[i] for i in pids]
    pi = np.zeros((fields.PI_FIELDS, len(pids)), np.int64)
    pcol, pi[fields.P_RANK0] = _rank_columns(pprofs)
    pi[fields.P_DP] = [p.dp for p in pprofs]
    pi[[fields.P_LRU_HEAD, fields.P_LRU_TAIL, fields.P_TIER_HEAD, fields.P_TIER_TAIL]] = -1
    pq = np.zeros((fields.PQ_FIELDS, max(1, pcol.size)), np.int64)
    pq[[fields.Q_HEAD, fields.Q_TAIL]] = -1
    pi[fields.P_MODEL] = [table.index(p.prefill) for p in pprofs]
    pi[fields.P_M_GROUP] = [group_index(table, p.group_prefill) for p in pprofs]
    pi[fields.P_PP] = [p.pp for p in pprofs]
    pi[fields.P_CAP] = [layout.batch_tokens[i] for i in pids]
    pi[fields.P_POOL] = [layout.pool_slot[i] for i in pids]
    pi[fields.P_MAX_RUN] = _running_caps(layout, pids)
    pi[fields.P_ROOM_RANK] = [layout.routes_by_room(i) for i in pids]
    pf = np.zeros((len(pids), 1 + max([p.pp for p in pprofs], default=1)))
    homes = [_HOMES[layout.phases[i]] for i in dids]
    mixed = [int(h != fields.HOME_DECODE) for h in homes]  # a prefill instance's column runs only when lent
    host = {int(i): k for k, i in enumerate(pids)}
    di, df, col, lead = _instance_state([layout.profiles[i] for i in dids], table, {
        fields.D_POOL: [layout.receiver(i) for i in dids], fields.D_MIXED: mixed,
        fields.D_POLICY: [fields.POLICY_CHUNKED if m or layout.borrow else fields.POLICY_PREFILL_FIRST for m in mixed],
        fields.D_CHUNK: [layout.chunk_tokens[i] or layout.borrow_chunk_tokens * layout.borrow for i in dids],
        fields.D_TOKEN_CAP: [layout.batch_tokens[i] for i in dids], fields.D_MAX_RUN: _running_caps(layout, dids),
        fields.D_HOME: homes, fields.D_HOST: [host.get(int(i), -1) for i in dids],
        fields.D_PULL: [int(layout.pulls(i)) for i in dids],
        fields.D_DECODE_FIRST: [int(layout.samples_first_token(i)) for i in dids],
        fields.D_TURN: [layout.ranks_in_turn(i) for i in dids]})
    dec_cols = int(np.searchsorted(col, n_dec))  # decode ranks' columns come first, then mixed machines'
    pi[fields.P_COL] = -1
    for k, i in enumerate(dids):
        if layout.phases[i] == "prefill":
            pi[fields.P_COL, host[int(i)]] = lead[k]

    block = prefix_block_tokens(layout, requests) if len(dids) or len(pids) else 0
    n_hash = 0
    hash_vals, hash_ptr = np.zeros(1, np.int64), np.zeros(n + 1, np.int64)
    pload = np.zeros(max(1, len(pids)))
    if requests.has_hashes and block:
        # the decode side's cache saves transfers, so it matters only behind a prefill pool
        dcaps = cache_capacities(layout, requests, "decode") if len(pids) else [0] * n_dec
        pcaps = cache_capacities(layout, requests, "prefill")
        tiers = [layout.tier(i) for i in pids]
        if any(dcaps) or any(pcaps) or any(t is not None and t.blocks for t in tiers):
            n_hash, hash_vals, hash_ptr = _dense_hashes(requests)
            di[fields.D_LRU_CAP, lead[:n_dec]] = dcaps
            pi[fields.P_LRU_CAP] = pcaps
            pi[fields.P_TIER_CAP] = [0 if t is None else t.blocks for t in tiers]
            pload[:len(pids)] = [0.0 if t is None else layout.kv_bytes_per_token / t.bandwidth_bytes_per_s
                                 for t in tiers]
    lru = cache_tables(di[fields.D_LRU_CAP, lead], n_hash)
    plru = cache_tables(pi[fields.P_LRU_CAP] + pi[fields.P_TIER_CAP], n_hash)
    link = np.stack([layout.link_bandwidth, layout.link_setup]).astype(np.float64)
    tab_i, pieces = table.arrays()
    events = run_disaggregated(
        rq, rt, rejected, tab_i, pieces, pi, pq, pf, pload, plru, _ROUTERS[layout.router],
        np.inf if layout.reject_ttft_s is None else float(layout.reject_ttft_s),
        np.append(batch_drain_s(layout, requests), 0.0),  # never empty: the kernel takes an array
        di, df, lru, hash_vals, hash_ptr, n_hash, int(block),
        0 if layout.schedule == "request" else 1, int(layout.layers), int(layout.kv_bytes_per_token),
        link, fields.FAILURE_RECOMPUTE if layout.failure_policy == "recompute" else fields.FAILURE_RETRY,
        float(layout.route_s), *availability_csr(layout, pids), *availability_csr(layout, dids[col]), dec_cols,
        int(layout.spill_tokens), float(layout.kv_share), int(layout.borrow),
        heap + 2 * int(rq[fields.R_FAILS].sum()) + 4 * len(dids), cl)
    pinst, dinst = rq[fields.R_P_INST], rq[fields.R_D_INST]
    pglob = np.where(pinst >= 0, pids[np.maximum(pinst, 0)], -1) if len(pids) else np.full(n, -1)
    dglob = np.where(dinst >= 0, dids[col[np.maximum(dinst, 0)]], -1) if len(dids) else np.full(n, -1)
    whole = (pinst < 0) & (dinst >= 0) & (len(pids) > 0)  # ran whole on a mixed or lent machine
    pglob = np.where(whole, dglob, pglob)
    busy[pids] = pf[:, 0]
    busy[dids] += df[fields.F_BUSY, lead]  # a lent prefill instance's decoding adds to its prefills
    if len(pids) and len(dids):
        # an instance's ingress is its ranks', each 1/DP of it: their mean busy time (col: each column's instance)
        per_instance = np.bincount(col, weights=df[fields.F_LINK_BUSY], minlength=len(dids)) / di[fields.D_DP, lead]
        links = {layout.labels[i]: float(b) for i, b in zip(dids, per_instance)}
    raw = _raw(requests, rejected, rq, rt, pglob, dglob)
    raw["prefill_cached_tokens"], raw["prefill_loaded_tokens"] = rq[fields.R_CACHED].copy(), rq[fields.R_LOADED].copy()
    raw["rejected_early"] = rejected & ~too_large
    raw["handoffs_refused"] = rq[fields.R_REFUSED].copy()
    return raw, busy, links, int(events), int(cl[fields.CL_STOPPED])


def _running_caps(layout: Layout, ids) -> list[int]:
    """Each instance's running cap per rank as the kernels compare it (no cap: NO_RUNNING_CAP)."""
    return [layout.running_cap(i) or fields.NO_RUNNING_CAP for i in ids]


def _dense_hashes(requests: Requests) -> tuple[int, np.ndarray, np.ndarray]:
    """The requests' prefix blocks renumbered 0 .. n_hash − 1: (n_hash, values, offsets)."""
    unique, dense = np.unique(requests.hash_values, return_inverse=True)
    return (int(unique.size), np.ascontiguousarray(dense.ravel(), dtype=np.int64),
            np.ascontiguousarray(requests.hash_offsets, dtype=np.int64))


def availability_csr(layout: Layout, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The intervals of instances ``ids`` for the kernels: pointers (len + 1) and [from, until) rows."""
    spans = [((-np.inf, np.inf),) if layout.availability is None else layout.availability[i] for i in ids]
    ptr = np.zeros(len(spans) + 1, np.int64)
    np.cumsum([len(s) for s in spans], out=ptr[1:])
    rows = np.array([span for s in spans for span in s], np.float64).reshape(-1, 2).T.copy()
    return ptr, rows if rows.size else np.zeros((2, 1))


def _raw(requests: Requests, rejected, rq, rt, prefill_instance, decode_instance) -> dict[str, np.ndarray]:
    return {
        "arrival_s": rt[fields.T_ARRIVAL].copy(), "prompt_tokens": requests.prompt_tokens,
        "output_tokens": requests.output_tokens, "rejected": rejected,
        "prefill_instance": prefill_instance, "decode_instance": decode_instance,
        "prefill_start_s": rt[fields.T_P_START], "prefill_end_s": rt[fields.T_P_END],
        "transfer_start_s": rt[fields.T_X_START], "transfer_end_s": rt[fields.T_X_END],
        "transfer_bytes": rq[fields.R_XBYTES].copy(), "first_token_s": rt[fields.T_FIRST],
        "join_s": rt[fields.T_JOIN],
        "finish_s": rt[fields.T_FINISH],
    }
