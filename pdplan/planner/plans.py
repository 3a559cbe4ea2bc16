"""A placed solution as a simulator plan, and the plans left after losing an instance or a node."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace

from pdplan.engines import DEFAULT_ENGINE, first_token, handoff, rank_router
from pdplan.hardware import Cluster
from pdplan.modelspec import ModelSpec
from pdplan.placement import Candidate, Solution, instance_link_bytes_per_s
from pdplan.shape import wide_slots
from pdplan.sim import Link, Plan, Pool
from pdplan.sim.plan import lendable
from pdplan.sim.planfile import plan_to_dict

#: KV link setup cost per transfer (RDMA registration and signalling), an assumption.
LINK_SETUP_S = 0.5e-3


def pool_name(cand: Candidate) -> str:
    """``decode-h200-141gb-tp8-pp1``; a wide shape adds its DP and EP: ``decode-h200-141gb-tp1-pp1-dp16-ep16``."""
    wide = f"-dp{cand.dp}-ep{cand.ep}" if cand.is_wide else ""
    return f"{cand.phase}-{cand.gpu}-tp{cand.tp}-pp{cand.pp}{wide}"


@dataclass(frozen=True, kw_only=True)
class Spill:
    """When work spills to a mixed pool (Splitwise's thresholds, simulated request by request)."""

    prefill_queue_tokens: int = 8192   #: arrivals run whole on a mixed machine above this prefill queue
    decode_kv_share: float = 1.0       #: decodes move to one when their decode instance's KV would pass this


def plan_of(solution: Solution, *, model: ModelSpec, cluster: Cluster, mode: str, affinity: str,
            transfer_schedule: str, name: str, failure_rate: float = 0.0, failure_policy: str = "retry",
            route_s: float = 0.0, spill: Spill = Spill(), router: str = "least-loaded",
            reject_ttft_s: float | None = None, borrow: bool = False, engine: str = DEFAULT_ENGINE,
            redundant_experts: int = 0) -> Plan:
    """The placement as a simulator plan: one pool per shape, links at the bandwidth of the path
    the placement gives them (:func:`link_path`) from every prefill pool to every pool that
    decodes (decode and mixed), with the transfer failures and router hop the plan must survive,
    the spill thresholds of a mixed pool (or of borrowing, ``borrow``: its lent machines' handoffs then
    take the plan's default link, :func:`lent_link`), the prefill router, how a prefill instance with attention
    DP puts a prompt on a rank under ``engine`` (:func:`pdplan.engines.rank_router`), how a decode instance takes a
    prefilled request and where its first token comes from (:func:`pdplan.engines.handoff`,
    :func:`pdplan.engines.first_token`), the early-rejection threshold, and on every pool with attention DP the
    ``redundant_experts`` slots its shapes were timed with."""
    shapes = {}  # pool → the candidate shape it runs
    for cand, replicas in sorted(solution.replicas.items(),
                                 key=lambda kv: (kv[0].phase, kv[0].gpu, kv[0].tp, kv[0].pp, kv[0].dp, kv[0].ep)):
        chunked = cand.phase in ("colocated", "mixed")
        extra = {"policy": "chunked", "chunk_tokens": cand.chunk_tokens} if chunked else {}
        pool = Pool(name=pool_name(cand), phase=cand.phase, model=model.name, gpu=cand.gpu, tp=cand.tp, pp=cand.pp,
                    rank_router=rank_router(engine, cand.phase, cand.dp), handoff=handoff(engine, cand.phase),
                    first_token=first_token(engine, cand.phase),
                    dp=cand.dp, ep=cand.ep, all_to_all=cand.all_to_all, max_running_requests=cand.max_running_requests,
                    redundant_experts=wide_slots(cand.dp, redundant_experts), replicas=replicas, **extra)
        shapes[pool] = cand
    pools = tuple(shapes)
    if mode == "colocated":
        return Plan(pools=pools, name=name)
    links = [Link(from_pool=src.name, to_pool=dst.name, setup_s=LINK_SETUP_S,
                  bandwidth_bytes_per_s=path_bytes_per_s(solution, cluster, shapes[src], shapes[dst],
                                                         link_path(solution, affinity, shapes[src], shapes[dst])))
             for src in pools if src.phase == "prefill" for dst in pools if dst.phase in ("decode", "mixed")]
    borrow = borrow and lendable(pools)
    thresholds = ({"spill_tokens": spill.prefill_queue_tokens, "kv_share": spill.decode_kv_share}
                  if solution.mixed or borrow else {})
    if borrow:
        thresholds |= {"borrow": True, "default_link": lent_link(solution, cluster, affinity)}
    return Plan(pools=pools, links=tuple(links), transfer_schedule=transfer_schedule, name=name,
                failure_rate=failure_rate, failure_policy=failure_policy, route_s=route_s, router=router,
                reject_ttft_s=reject_ttft_s, **thresholds)


def lent_path(solution: Solution, affinity: str) -> str:
    """The path a handoff to a prefill instance lent to decode takes (borrowing): from one prefill
    instance to another, ``intra-node`` only when every pair of prefill shapes stays on one node
    (:func:`link_path`)."""
    prefill = [cand for cand in solution.replicas if cand.phase == "prefill"]
    return "intra-node" if all(link_path(solution, affinity, a, b) == "intra-node"
                               for a in prefill for b in prefill) else "inter-node"


def lent_link(solution: Solution, cluster: Cluster, affinity: str) -> Link:
    """The link of :func:`lent_path`, at the slowest prefill shape's ingress on it: every handoff to
    a lent prefill instance takes it (the plan's default link)."""
    path = lent_path(solution, affinity)
    return Link(from_pool=None, to_pool=None, setup_s=LINK_SETUP_S,
                bandwidth_bytes_per_s=min(path_bytes_per_s(solution, cluster, cand, cand, path)
                                          for cand in solution.replicas if cand.phase == "prefill"))


def link_path(solution: Solution, affinity: str, prefill: Candidate, decoding: Candidate) -> str:
    """The path a KV handoff from a ``prefill`` instance to a ``decoding`` one (decode or mixed)
    takes: ``intra-node`` at low affinity (a segment holds prefill stage j and decode stage j on one
    node, 0x08D) or when every instance of both shapes sits on one and the same node, whatever
    instance the router pairs; else ``inter-node``."""
    if affinity == "low":
        return "intra-node"
    nodes = {node for i in solution.instances if i.candidate in (prefill, decoding) for node in i.stage_nodes}
    return "intra-node" if len(nodes) == 1 else "inter-node"


def path_bytes_per_s(solution: Solution, cluster: Cluster, prefill: Candidate, decode: Candidate,
                     path: str) -> float:
    """Ingress bandwidth of one decoding instance (decode or mixed) of this shape on ``path`` (see
    :func:`link_path`) from one ``prefill`` instance: the slowest among the node types its instances landed on
    (the sim has one link per pool); inside a node each GPU its NVLink share, across nodes each GPU its NIC, and
    where the two shapes landed on more than one node type, at most each GPU's share of the network between
    types (a node type's ``scale_out_bytes_per_s``: two GB200 racks hand off over their NICs, not NVLink). How much
    of it one request's KV fills is the simulator's to derive (:func:`pdplan.handoff.request_kv_bytes_per_s`)."""
    landed = {i.node_type for i in solution.instances if i.candidate == decode}
    nodes = [n for n in cluster.nodes if n.name in landed]
    if path == "intra-node":
        return min(decode.gpus * n.intra_node_bytes_per_s for n in nodes)
    ingress = min(instance_link_bytes_per_s(n, decode.gpus) for n in nodes)
    both = landed | {i.node_type for i in solution.instances if i.candidate == prefill}
    if len(both) < 2:
        return ingress
    across = [decode.gpus * n.scale_out_bytes_per_s for n in cluster.nodes
              if n.name in both and n.scale_out_bytes_per_s is not None]
    return min([ingress, *across])


def plan_key(plan: Plan) -> str:
    """What a plan's simulation depends on (its name does not)."""
    return json.dumps({**plan_to_dict(plan), "name": None}, sort_keys=True)


@dataclass(frozen=True, kw_only=True)
class Loss:
    """One instance or node lost, and the plan left behind."""

    label: str                 #: what was lost, e.g. "node h100-dgx-0"
    left: Plan | None          #: None when a phase lost its last instance
    emptied: str | None = None  #: that phase


def without(plan: Plan, lost: Counter, label: str) -> Loss:
    """``plan`` with ``lost[pool name]`` replicas removed from each pool."""
    pools = tuple(replace(p, replicas=p.replicas - lost[p.name]) for p in plan.pools if p.replicas > lost[p.name])
    emptied = sorted({p.phase for p in plan.pools} - {p.phase for p in pools} - {"mixed"})  # mixed is extra
    if emptied:
        return Loss(label=label, left=None, emptied=emptied[0])
    names = {p.name for p in pools}
    links = tuple(link for link in plan.links if link.from_pool in names and link.to_pool in names)
    return Loss(label=label, left=replace(plan, pools=pools, links=links))


def losses(solution: Solution, plan: Plan, redundancy: str) -> list[Loss]:
    """Each distinct way of losing one instance (``instance``) or one node (``node``), as the
    plan left behind. Instances of one shape are interchangeable, and so are nodes holding the
    same shapes, so each distinct loss is simulated once."""
    if redundancy == "none":
        return []
    if redundancy == "instance":
        return [without(plan, Counter({pool_name(cand): 1}), f"one {cand.label} instance")
                for cand in sorted(solution.replicas, key=lambda c: c.label)]
    on_node: dict[str, Counter] = {}
    for inst in solution.instances:
        for node in set(inst.stage_nodes):
            on_node.setdefault(node, Counter())[pool_name(inst.candidate)] += 1
    seen, out = set(), []
    for node in sorted(on_node, key=lambda n: (n.rsplit("-", 1)[0], int(n.rsplit("-", 1)[1]))):
        signature = tuple(sorted(on_node[node].items()))
        if signature not in seen:
            seen.add(signature)
            out.append(without(plan, on_node[node], f"node {node}"))
    return out
