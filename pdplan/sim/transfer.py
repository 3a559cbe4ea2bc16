"""The two KV transfer schedules of 0x08I as pure functions of layer ready times and durations.

Per-layer streaming on one serialized transfer engine: ``v_l = max(r_l, v_{l−1}) + x_l`` with
``v_{−1}`` the moment the engine is free (0 when idle). Request-level: the whole cache moves after
the last layer is ready, ``C = r_{L−1} + Σ x_l``. Ready [25, 50, 75, 100] ms and 10 ms per
layer give visibility [35, 60, 85, 110] ms against 140 ms.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def layer_visibility(ready_s: Sequence[float], transfer_s: Sequence[float] | float,
                     free_s: float = 0.0) -> np.ndarray:
    """Destination-visible time of each layer under per-layer streaming (0x08I recurrence)."""
    ready = np.asarray(ready_s, dtype=float)
    x = np.broadcast_to(np.asarray(transfer_s, dtype=float), ready.shape)
    visible = np.empty_like(ready)
    previous = free_s
    for layer in range(ready.size):
        previous = max(ready[layer], previous) + x[layer]
        visible[layer] = previous
    return visible


def request_completion(ready_s: Sequence[float], transfer_s: Sequence[float] | float,
                       free_s: float = 0.0) -> float:
    """Completion of a request-level transfer: ``max(r_{L−1}, free) + Σ x_l``."""
    ready = np.asarray(ready_s, dtype=float)
    x = np.broadcast_to(np.asarray(transfer_s, dtype=float), ready.shape)
    return float(max(ready[-1], free_s) + x.sum())


def uniform_layer_ready_s(start_s: float, end_s: float, layers: int) -> np.ndarray:
    """Ready times ``r_l = start + (l+1)/L · (end − start)`` of a prefill spread evenly over layers."""
    return start_s + (np.arange(1, layers + 1) / layers) * (end_s - start_s)
