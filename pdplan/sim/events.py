"""Event priorities: the order in which events at one instant run, in both engines.

At equal times the lower priority runs first (ties then go by insertion order). The order is
part of the model, not an implementation detail:

* arrivals come first, so every request arriving at t is queued before anything at t acts;
* a prefill batch that ends at t hands its requests on before its first stage forms the next
  batch, and that batch forms only after every arrival at t has queued (requests arriving
  together share a batch);
* KV landing at t is queued at its decode instance before that instance's step boundary at t,
  so a request whose KV becomes visible exactly at a boundary joins it; routing at t sees the
  loads before the finishes at t;
* a prefilled request reaching a decode instance that pulls its KV at t does so before that
  instance's boundary at t, so the boundary at t is the iteration that takes it in;
* a failed transfer found out at t goes back to the prefill pool last.

The compiled engine (:mod:`pdplan.sim.fast`, numba) reads these integers as compile-time
constants; the oracle (:mod:`pdplan.sim.reference`) passes them to its event heap.
"""

ARRIVAL = 0           #: a request reaches the router
PREFILL_DONE = 1      #: a prefill batch has passed its last stage
PREFILL_FREE = 2      #: a prefill instance's first stage can take the next batch
KV_VISIBLE = 3        #: a request's KV has landed at its decode instance (and the router handed it on)
PULL = 4              #: a prefilled request reaches a decode instance that pulls its KV (`Handoff.PULL`)
BOUNDARY = 5          #: a decode step, colocated iteration or planned stretch ends (or idle work starts)
TRANSFER_FAILED = 6   #: a KV transfer attempt landed broken (recompute: prefill again)
