"""One grid cell's coordinates applied to the base inputs: the workload, cluster and SLO it plans for.

Each dimension changes exactly one thing (see :data:`pdplan.sensitivity.spec.DIMENSIONS`):

* ``prompt_scale``, ``output_scale`` — every length times the factor, rounded, at least 1. A
  trace's own prefix hashes no longer describe scaled prompts and are dropped.
* ``rate`` — the target rate; ``burstiness`` — arrivals replaced by Gamma gaps of that CV at the
  target rate (trace order and lengths kept; drawn from the grid's seed).
* ``prefix_hit`` — prefix hashes in which that share of each prompt's leading whole blocks is
  one of :data:`PREFIX_FAMILIES` shared prefixes (system prompts, few-shot headers) and the rest
  the request's own. A prefill (or colocated) instance's prefix cache that holds the shared
  blocks does not compute them again, and a decode instance's does not receive them (the
  transfer set U \\ V_D): the dimension moves prefill work and the transfer term.
* ``bandwidth`` — every node type's per-GPU inter-node KV bandwidth, in GB/s.
* ``gpu`` — only that GPU type's nodes; ``price_ratio`` — every other GPU type's price per hour
  set to that multiple of the first node type's GPU price.
* ``ttft_scale``, ``tpot_scale`` — the thresholds of that clock times the factor.
* ``failure_rate``, ``route_ms`` — simulated transfer failures and router hop (see
  :mod:`pdplan.sim.engine`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pdplan.errors import PdplanError
from pdplan.hardware import GB, Cluster
from pdplan.slo import SLO
from pdplan.workload import Workload
from pdplan.workload.reshape import gamma_arrivals, replaced

#: Distinct shared prefixes a ``prefix_hit`` workload draws from.
PREFIX_FAMILIES = 8
_UNIQUE_BASE = 1 << 40  # block ids of a request's own blocks start here; shared ones stay below


def cell_workload(workload: Workload, coords: dict, *, rate_rps: float, seed: int) -> Workload:
    """The base workload with the cell's length scales, arrivals and prefix sharing."""
    fields: dict = {}
    prompt = workload.prompt_tokens
    if "prompt_scale" in coords:
        prompt = scaled(prompt, coords["prompt_scale"])
        fields |= {"prompt_tokens": prompt, "hash_values": None, "hash_offsets": None}
    if "output_scale" in coords:
        fields["output_tokens"] = scaled(workload.output_tokens, coords["output_scale"])
    if "burstiness" in coords:
        fields["arrival_s"] = gamma_arrivals(len(workload), rate_rps=rate_rps, cv=coords["burstiness"], rng=seed)
    if "prefix_hit" in coords:
        values, offsets = shared_prefixes(prompt, workload.block_tokens, coords["prefix_hit"], seed=seed)
        fields |= {"hash_values": values, "hash_offsets": offsets}
    return replaced(workload, **fields) if fields else workload


def scaled(lengths: np.ndarray, factor: float) -> np.ndarray:
    """Lengths times ``factor``, rounded half to even, at least 1."""
    return np.maximum(1, np.rint(lengths * factor)).astype(np.int64)


def shared_prefixes(prompt_tokens: np.ndarray, block_tokens: int, fraction: float, *,
                    seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Prefix-hash CSR arrays in which ``floor(fraction · prompt / block)`` leading blocks of each
    request come from one of PREFIX_FAMILIES shared prefixes (drawn from ``seed``) and the rest
    are its own."""
    blocks = -(-prompt_tokens // block_tokens)
    shared = np.floor(fraction * prompt_tokens / block_tokens).astype(np.int64)
    family = np.random.default_rng(seed).integers(0, PREFIX_FAMILIES, size=prompt_tokens.size)
    offsets = np.zeros(prompt_tokens.size + 1, np.int64)
    np.cumsum(blocks, out=offsets[1:])
    position = np.arange(offsets[-1]) - np.repeat(offsets[:-1], blocks)
    is_shared = position < np.repeat(shared, blocks)
    own = _UNIQUE_BASE + np.arange(offsets[-1])
    values = np.where(is_shared, np.repeat(family, blocks) * (1 << 32) + position, own).astype(np.int64)
    return values, offsets


def cell_cluster(cluster: Cluster, coords: dict) -> Cluster:
    """The cluster with the cell's KV bandwidth, GPU type and price ratio."""
    nodes = cluster.nodes
    if "gpu" in coords:
        nodes = tuple(n for n in nodes if n.gpu.name == coords["gpu"])
        if not nodes:
            raise PdplanError(f"vary.gpu {coords['gpu']!r} has no nodes in the cluster (it holds "
                              f"{', '.join(cluster.gpu_types)})", file=cluster.source, field="vary.gpu")
    if "bandwidth" in coords:
        nodes = tuple(replace(n, inter_node_bytes_per_s=coords["bandwidth"] * GB) for n in nodes)
    if "price_ratio" in coords:
        reference = nodes[0].gpu
        nodes = tuple(n if n.gpu.name == reference.name else
                      replace(n, gpu=replace(n.gpu, usd_per_hour=coords["price_ratio"] * reference.usd_per_hour))
                      for n in nodes)
    return replace(cluster, nodes=nodes)


def cell_slo(slo: SLO, coords: dict) -> SLO:
    """The SLO with each clock's thresholds times its scale."""
    scale = {"ttft": coords.get("ttft_scale", 1.0), "tpot": coords.get("tpot_scale", 1.0)}
    return SLO(objectives=tuple(replace(o, threshold_s=o.threshold_s * scale.get(o.metric, 1.0))
                                for o in slo.objectives))
