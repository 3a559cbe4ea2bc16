"""Field rows of the compiled engine's state arrays, and its integer codes.

State lives in a few 2-D arrays with one row per field (``rq[R_PROMPT, r]``, ``di[D_B, i]``):
numba reference-counts every array a function receives, so the kernels take a handful of
packed arrays instead of dozens of separate ones (that counting was half the run time).
Queues and the active decode set are threaded through per-request link fields.
"""

from __future__ import annotations

# per-request integers rq[field, r]
(R_PROMPT, R_OUTPUT, R_Q_NEXT, R_W_NEXT, R_CHILD, R_SIBLING, R_FIN_STEP, R_P_INST, R_D_INST,
 R_XBYTES, R_PF_DONE, R_CHUNK, R_PF_NEXT, R_FAILS, R_RANK, R_CACHED, R_LOADED, R_EPOCH, R_REFUSED, R_ROOM,
 R_D_RANK) = range(21)
RQ_FIELDS = 21
#   Q_NEXT: prefill queue link (kept after dequeue: a batch is a run of it); W_NEXT: waiting
#   queue link at decode / colocated; CHILD, SIBLING, FIN_STEP: the active-batch heap;
#   PF_DONE, CHUNK, PF_NEXT: chunked prefill progress, this iteration's chunk, prefilling list;
#   FAILS: KV transfer attempts of the request still to fail (drawn by the engine); RANK: the
#   prefill rank (a column of ``pq``) holding it; CACHED, LOADED: prompt tokens its prefill
#   instance's prefix cache held (not computed), and of those the ones loaded from the second tier;
#   EPOCH: the role epoch of the instance its KV was booked to (:mod:`.borrowing`), REFUSED: its
#   handoffs refused there for a stale epoch; ROOM: its bootstrap room (drawn by the engine), whose
#   value modulo DP names its prefill rank on an instance that routes by room (P_ROOM_RANK); D_RANK: the rank (a
#   column of ``di``) of its decode instance its KV is booked to, whose ingress carries it

# per-request times rt[field, r]
T_ARRIVAL, T_P_START, T_P_END, T_X_START, T_X_END, T_FIRST, T_FINISH, T_JOIN, T_DUE = range(9)
RT_FIELDS = 9
#   JOIN: when the request joined its decode batch (its first token then, or with the first step it runs in);
#   DUE: in a closed loop, when its client may send it at the earliest (a rate-limited benchmark's schedule; 0:
#   as soon as a client is free)

# prefill instances pi[field, p]; pf[p, 0] is busy seconds, pf[p, 1 + s] when stage s frees;
# FREE_PENDING: a "first stage free" event is on the heap; RANK0, DP: its ranks are columns
# RANK0 .. RANK0 + DP of ``pq``; PENDING counts the prompt tokens left to compute; LRU_*: its
# prefix cache in HBM (head, tail, count, capacity), TIER_*: the second tier's (:mod:`.prefix`)
(P_PENDING, P_MODEL, P_PP, P_CAP, P_POOL, P_FREE_PENDING, P_RANK0, P_DP, P_LRU_HEAD, P_LRU_TAIL, P_LRU_COUNT,
 P_LRU_CAP, P_TIER_HEAD, P_TIER_TAIL, P_TIER_COUNT, P_TIER_CAP, P_MAX_RUN, P_LENT, P_COL, P_M_GROUP,
 P_ROOM_RANK) = range(21)
PI_FIELDS = 21
#   MAX_RUN: the prompts one rank's batch takes at most (the pool's max_running_requests); LENT:
#   lent to decode (:mod:`.borrowing`), COL: its column in ``di`` while lent (-1: it cannot be lent);
#   M_GROUP: the group part of a DP instance's prefill (:func:`.latency.group_s`; -1: none); ROOM_RANK: 1 when
#   a prompt's rank is its bootstrap room modulo DP (SGLang's P/D prefill), 0: the fewest outstanding requests

# prefill ranks pq[field, k]: the FCFS queue (head, tail, linked by Q_NEXT) and the requests
# queued or being prefilled there (the rank router's view)
Q_HEAD, Q_TAIL, Q_OUT = range(3)
PQ_FIELDS = 3

# decode and colocated instances di[field, i]
(D_B, D_S, D_STEPS, D_RESERVED, D_CAP, D_LOAD, D_RUN_K, D_VERSION, D_ROOT, D_MODEL, D_POOL,
 D_W_HEAD, D_W_TAIL, D_MODE, D_M_PREFILL, D_POLICY, D_CHUNK, D_TOKEN_CAP, D_PF_HEAD, D_PF_TAIL,
 D_IT_FIRST, D_IT_N, D_LRU_HEAD, D_LRU_TAIL, D_LRU_COUNT, D_LRU_CAP, D_MIXED, D_K_HEAD, D_K_TAIL,
 D_LEAD, D_DP, D_OUT, D_IT_KIND, D_INST, D_RUNNING, D_MAX_RUN, D_HOME, D_LENT, D_EPOCH, D_PENDING,
 D_HOST, D_M_GROUP_P, D_M_GROUP_D, D_IT_TOKENS, D_RECV_N, D_RECV_C, D_U_HEAD, D_U_TAIL, D_WAIT_N, D_WAIT_TOK,
 D_WAIT_C, D_WAIT_J, D_ADP_N, D_ADP_W, D_ADP_C, D_ADP_BC, D_ADP_K, D_ADP_MODE, D_PULL, D_JOIN_HEAD,
 D_DECODE_FIRST, D_TURN, D_NEXT_RANK) = range(63)
DI_FIELDS = 63
#   B active requests, S context tokens they hold, STEPS run so far, RESERVED KV tokens, CAP KV
#   capacity, LOAD the router's view (prompt + output of routed, unfinished requests), RUN_K
#   steps planned for the current stretch, VERSION bumped to cancel a planned boundary, ROOT of
#   the active heap; MODE (idle, starting, running); colocated: prefill model, POLICY, CHUNK budget, TOKEN_CAP, the
#   prefilling list, the prefill-first batch (IT_FIRST, IT_N; IT_N = decode rows of a chunked
#   iteration); decode: prefix-LRU head, tail, count, capacity; MIXED: a Splitwise mixed machine
#   (colocated scheduling in a disaggregated plan), K_HEAD/K_TAIL its requests whose KV arrived.
#   Columns are attention data-parallel ranks: an instance is DP columns from its LEAD column on
#   (DP set there). B, S, STEPS, RESERVED, CAP, ROOT, the queues, OUT (requests queued or running
#   on the rank: its router's view), IT_FIRST, IT_N and IT_KIND (what the rank runs this
#   iteration) are the rank's; LOAD, RUN_K, VERSION, MODE, the LRU, POOL and the df rows are the
#   instance's, on its lead column (INST: the instance's number, which places its LRU in ``lru``).
#   RUNNING counts the rank's admitted, unfinished requests (prefilling or decoding), MAX_RUN how
#   many it may run at once (the pool's max_running_requests; unlimited: NO_RUNNING_CAP).
#   Without data parallelism every column leads itself.
#   Borrowing (:mod:`.borrowing`): HOME is the machine's own role (HOME_DECODE, HOME_MIXED, or
#   HOME_PREFILL: a prefill instance's column, used only while it is lent to decode), LENT whether
#   it is lent now, EPOCH its role epoch, PENDING the prompt tokens it has still to prefill (queued
#   or partly done), HOST a prefill-home column's prefill instance (-1 otherwise).
#   M_GROUP_P, M_GROUP_D: a DP instance's group parts for prompt and decode work (-1: none);
#   IT_TOKENS the prompt tokens a rank's iteration computes (its prefill batch's or its chunks').
#   RECV_N: a colocated instance's decode steps between receives of new requests (SGLang's
#   --scheduler-recv-interval; 0 or 1: every iteration), RECV_C the decode steps since its last
#   receive (mod RECV_N), U_HEAD/U_TAIL its requests that arrived during a decode stretch and are not
#   yet received (linked by W_NEXT, then spliced onto the waiting queue at a receive).
#   WAIT_N, WAIT_TOK: a colocated instance's batch waiting (TensorRT-LLM's; 0: off): while it decodes,
#   its prompt work is held until WAIT_N iterations held it or its tokens plus one per decode reach
#   WAIT_TOK; WAIT_C the iterations held since prompts last ran, WAIT_J the step of the current stretch
#   from which its iterations hold prompts (-1: none do).
#   ADP_N, ADP_W: a colocated DP instance's attention-DP balance (TensorRT-LLM's timeout_iters and
#   batching_wait_iters; both 0: off), ADP_C and ADP_BC its two counters (iterations counted towards the
#   timeout, and held while every rank had prompts), ADP_K the most steps its current stretch may run
#   before the balance releases held prompts (-1: no limit), ADP_MODE how that stretch's steps move the
#   counters (ADP_COUNT, ADP_BATCH, ADP_RESET).
#   PULL: a decode instance pulls its requests' KV (1: it reads the KV from the iteration that takes a request in;
#   0: pushed, :class:`pdplan.vocabulary.Handoff`); DECODE_FIRST: it samples its requests' first token in the first
#   step they run in (1) or streams the prefill's as they join (0, :class:`pdplan.vocabulary.FirstToken`);
#   JOIN_HEAD the rank's waiting head before a boundary's joins,
#   from which the requests that joined run along W_NEXT to the head after them; TURN: its requests take its
#   ranks in turn (1, SGLang's round_robin) or the fewest outstanding (0), NEXT_RANK the lead's next in turn.

# decode and colocated instance floats df[field, i]
F_RUN_T0, F_BUSY, F_LINK_FREE, F_LINK_BUSY, F_IT_S, F_PROMPT_S = range(6)
DF_FIELDS = 6
#   LINK_FREE, LINK_BUSY: each rank's KV ingress, when it is free and the seconds it moved KV
#   IT_S: the seconds of the prompt work a rank planned for this iteration (-1: none); PROMPT_S the
#   profile's prompt_iteration_s, the part of its prefill constant a mixed iteration's decode step never shares

# the loop state ``cl`` (floats; the counts and indices in it are whole): a closed loop's clients
# and its next request to release, then a stop on misses (:func:`.clock.settled`): the time row a
# request's TTFT ends at (-1: no TTFT stop), the TTFT threshold, the TTFT misses allowed, the first
# request not yet judged on TTFT, the TTFT misses counted; the TPOT threshold (inf: no TPOT stop),
# the TPOT misses allowed and counted; the request whose arrival the run stopped at (-1: none)
(CL_CLIENTS, CL_NEXT, CL_TTFT_ROW, CL_TTFT_S, CL_TTFT_ALLOWED, CL_JUDGED, CL_TTFT_MISSED, CL_TPOT_S,
 CL_TPOT_ALLOWED, CL_TPOT_MISSED, CL_STOPPED) = range(11)

# how an arrival picks its prefill instance (:class:`pdplan.vocabulary.Router`)
ROUTER_LEAST_LOADED = 0
ROUTER_ROUND_ROBIN = 1
ROUTER_CACHE_AWARE = 2

# where a prefix block sits in an instance's cache (:mod:`.prefix`)
ABSENT = 0
IN_HBM = 1
IN_TIER = 2

# a rank's running cap when the plan states none (its KV is then the only limit)
NO_RUNNING_CAP = 2**62

# what a failed KV transfer costs: resend the cache, or run the prefill again
FAILURE_RETRY = 0
FAILURE_RECOMPUTE = 1

# colocated policies and modes
POLICY_PREFILL_FIRST = 0
POLICY_CHUNKED = 1
# An idle instance does not start work the moment a request reaches it: it plans a boundary at
# the same time (priority BOUNDARY), so that requests arriving at that same instant join the batch.
IDLE = 0
DECODE_RUN = 1
ITERATION = 2
STARTING = 3
HELD = 4  # a prefill machine lent to decode, still draining its prompts: its column waits
# a machine's own role under borrowing
HOME_DECODE = 0
HOME_MIXED = 1
HOME_PREFILL = 2

# how the steps of a colocated DP instance's decode stretch move its attention-DP balance counters: each
# counts towards the timeout (mod ADP_N), each is held while every rank has prompts (ADP_BC up), or each
# resets the count (some rank has no decode)
ADP_COUNT = 0
ADP_BATCH = 1
ADP_RESET = 2

# what one colocated rank runs in an iteration of its instance
IT_NONE = 0
IT_PREFILL = 1
IT_CHUNKS = 2
IT_STEP = 3
