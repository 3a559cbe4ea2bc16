"""The compiled engine: prefill batching, KV links, decode and colocated batching over arrays.

This is the production engine behind :func:`pdplan.sim.simulate`. It is the same model as the
readable token-by-token oracle in :mod:`pdplan.sim.reference` (tests compare them request by
request; the modelling choices are listed in :mod:`pdplan.sim.engine`) written for speed with
numba. Modules, from the bottom up:

* :mod:`.fields` — the rows of the packed state arrays and the integer codes;
* :mod:`.latency` — latency models flattened into arrays, and step times in closed form;
* :mod:`.clock` — the event heap merged with the arrival stream: the one loop head both loops use;
* :mod:`.routing` — which instance takes a request;
* :mod:`.batch` — decode batches joining, stepping and leaving;
* :mod:`.prefix` — prefix caches (LRU, in HBM and a second tier) keyed by the hash chains;
* :mod:`.links` — KV transfers booked on decode ingress links, with prefix reuse;
* :mod:`.colocated` and :mod:`.disaggregated` — the two event loops;
* :mod:`.pack` — a layout and requests in, per-request records out (:func:`run_fast`).

Every kernel is compiled with ``cache=True``: the first run in a fresh install compiles them
(seconds) and later runs load the cache (:func:`_drop_stale_kernels` keeps that cache honest).
"""

import hashlib
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def _drop_stale_kernels() -> None:
    """Delete the package's numba cache when any kernel source changed since it was written.

    Numba checks a cached kernel against its own file only, but an event loop compiles in the
    kernels it calls from the other modules here and the priorities of :mod:`pdplan.sim.events`:
    after editing one of them, the loops' cached code would be stale. Nothing to do in a
    read-only install (numba then caches elsewhere, and an upgrade rewrites every file anyway).
    """
    sources = sorted(_HERE.glob("*.py")) + [_HERE.parent / "events.py"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()
    cache = _HERE / "__pycache__"
    stamp = cache / "kernels.sha256"
    try:
        if stamp.read_text() == digest:
            return
    except OSError:  # no stamp yet: whatever is cached may predate it
        pass
    try:
        cache.mkdir(exist_ok=True)
        for compiled in [*cache.glob("*.nbi"), *cache.glob("*.nbc")]:
            compiled.unlink(missing_ok=True)
        stamp.write_text(digest)
    except OSError:  # read-only: numba does not cache here either
        pass


_drop_stale_kernels()

from pdplan.sim.fast.pack import run_fast  # noqa: E402  (after the cache check, before any kernel loads)

__all__ = ["run_fast"]
