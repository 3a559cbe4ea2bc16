"""The schedule document ``optimize --windows --out`` writes, and what ``validate`` checks in it.

A ``DeploymentSchedule`` (``pdplan/v1``) freezes a windowed plan: the shape of each pool some window
runs, the node inventory, every window's mode (``workload.mode`` is "changing" when windows
differ), replicas, node map and verdict, every change between
windows with the steps a deployer runs (routes stop and the instance drains before its GPUs are
reused, 0x0FG), the whole-schedule verdict, and the sha256 of every input. It is sealed like a
manifest (rounded floats, per-part hashes, a content hash).

Checks beyond the schema and the hash: each window's pools are of its mode and fit the inventory
(GPUs per type, nodes that exist, GPU indices inside a node, no GPU held twice, TP GPUs per stage
and PP stages per instance, the replicas placed); the changes are exactly the replica differences between
windows; every change runs its steps in order, and every join onto a leaving instance's GPUs
takes them only after that drain ended; every window passed alone and in the whole schedule.
"""

from __future__ import annotations

from collections import Counter

from pdplan import __version__
from pdplan.errors import InternalError
from pdplan.fileio import WRITTEN_DIGITS
from pdplan.manifest.build import input_files, node_map, request_inputs
from pdplan.manifest.check import stale_inputs, tampering
from pdplan.manifest.document import API_VERSION, SCHEDULE_KIND, schema_errors, seal
from pdplan.manifest.node_map import node_map_violations, physical_gpu
from pdplan.manifest.violation import Violation
from pdplan.sim.planfile import wide_fields

LEAVE_STEPS = ["STOP_NEW_ROUTES", "DRAIN_IN_FLIGHT_AND_KV", "RELEASE_GPUS"]
JOIN_STEPS = ["LOAD_WEIGHTS", "START_ROUTES"]
#: Seconds of slack when comparing times written at 6 significant digits.
TIME_SLACK_S = 1e-3


def build_schedule(report, *, timestamp: str | None = None) -> dict:
    """The sealed schedule of ``report``'s chosen windowed plan (a
    :class:`~pdplan.schedule.search.WindowedReport` whose every window passed), with the files and
    seed its request records."""
    chosen = report.chosen
    if chosen is None:
        raise InternalError("only a schedule whose every window passed is written")
    request, s = report.request, chosen.schedule
    files = input_files(request_inputs(request))
    pools = {pool.name: pool for check in chosen.checks for pool in check.plan.pools}
    timeline = chosen.timeline
    doc = {
        "apiVersion": API_VERSION,
        "kind": SCHEDULE_KIND,
        "metadata": {"name": f"{request.model.name} {s.mode} over {len(report.windows)} windows",
                     **({"created": timestamp} if timestamp else {})},
        "identity": {"model": request.model.name, "weights_dtype": request.model.weight_dtype,
                     "kv_cache_dtype": request.model.kv_dtype},
        "workload": {"trace": {**files["trace"], "requests": len(request.workload)}, "slo": request.slo.to_dict(),
                     "windows": len(report.windows), "change_cost_gpu_minutes": report.change_gpu_minutes,
                     "mode": s.mode},
        "shapes": [{"pool": name, "phase": p.phase, "gpu": p.gpu, "tp": p.tp, "pp": p.pp, "gpus_per_instance": p.gpus,
                    **wide_fields(p.dp, p.ep, p.redundant_experts, p.all_to_all), "chunk_tokens": p.chunk_tokens}
                   for name, p in sorted(pools.items())],
        **_spill(chosen.checks),
        "inventory": [{"node_type": n.name, "gpu": n.gpu.name, "gpus_per_node": n.gpus_per_node, "count": n.count}
                      for n in request.cluster.nodes],
        "windows": [{"window": c.window.index, "mode": s.modes[c.window.index], "start_s": c.window.start_s,
                     "end_s": c.window.end_s, "rate_rps": c.window.rate_rps,
                     "replicas": {p.name: p.replicas for p in c.plan.pools},
                     "nodes": node_map(c.solution, request.cluster),
                     "verification": {"passed": c.verification.passed, "joint": c.verification.joint.to_dict()}}
                    for c in chosen.checks],
        "changes": [{"window": c.window, "pool": c.pool, "replica": c.replica, "kind": c.kind, "at_s": c.at_s,
                     "drain_s": c.drain_s, "ready_s": c.ready_s, "took_gpus_of": c.took_gpus_of, "steps": list(c.steps)}
                    for c in timeline.changes],
        "verification": {"rule": request.rule, "seeds": list(chosen.checks[0].verification.seeds),
                         "whole_schedule": {"passed": timeline.passed,
                                            "windows": [{"window": v.window, "passed": v.passed,
                                                         "joint": v.joint.to_dict()} for v in timeline.windows]}},
        "provenance": {"pdplan_version": __version__, "float_precision": f"{WRITTEN_DIGITS} significant digits",
                       "seed": request.seed, "inputs": files},
    }
    return seal(doc)


def _spill(checks) -> dict:
    """With a mixed pool, when work spills to it (the thresholds its windows were verified with)."""
    plan = next((c.plan for c in checks if c.plan.pools_of("mixed")), None)
    return {} if plan is None else {"spill": {"prefill_queue_tokens": plan.spill_tokens,
                                              "decode_kv_share": plan.kv_share}}


def check_schedule(doc: dict, *, trace=None) -> list[Violation]:
    """Every violation of a schedule document (and, given ``trace``, whether it is the trace the
    schedule was planned on); an empty list means it is valid."""
    errors = schema_errors(doc)
    if errors:
        return [Violation(field, message) for field, message in errors]
    found = tampering(doc) + stale_inputs(doc, trace=trace, profiles=None, cluster=None)
    shapes = {s["pool"]: s for s in doc["shapes"]}
    inventory = {n["node_type"]: n for n in doc["inventory"]}
    found += [Violation(f"shapes[{i}].gpus_per_instance", f"TP{s['tp']} × DP{s.get('dp', 1)} × PP{s['pp']} is "
                                                          f"{s['tp'] * s.get('dp', 1) * s['pp']} GPUs")
              for i, s in enumerate(doc["shapes"]) if s["gpus_per_instance"] != s["tp"] * s.get("dp", 1) * s["pp"]]
    for i, window in enumerate(doc["windows"]):
        found += _window(f"windows[{i}]", window, shapes, inventory)
    if any(s["phase"] == "mixed" for s in doc["shapes"]) != ("spill" in doc):
        found.append(Violation("spill", "must be given exactly when a shape is mixed"))
    found += _modes(doc, shapes)
    found += _changes(doc)
    found += _verdicts(doc)
    return found


def _modes(doc: dict, shapes: dict) -> list[Violation]:
    """Each window's pools are of its mode, and the day's mode is the windows' one, or changing."""
    found = []
    for i, window in enumerate(doc["windows"]):
        mode = window.get("mode")  # absent in schedules written before modes could change
        phases = {shapes[pool]["phase"] for pool in window["replicas"] if pool in shapes}
        if mode is not None and (phases == {"colocated"}) != (mode == "colocated"):
            found.append(Violation(f"windows[{i}].mode", f"is {mode}; its pools run {', '.join(sorted(phases))}"))
    modes = {w["mode"] for w in doc["windows"] if "mode" in w}
    expected = modes.pop() if len(modes) == 1 else "changing" if modes else doc["workload"]["mode"]
    if doc["workload"]["mode"] != expected:
        found.append(Violation("workload.mode", f"is {doc['workload']['mode']}; the windows run {expected}"))
    return found


def _window(where: str, window: dict, shapes: dict, inventory: dict) -> list[Violation]:
    """A window's pools fit the inventory and its node map places exactly its replicas."""
    found = [Violation(f"{where}.replicas.{pool}", "is not a pool of shapes") for pool in window["replicas"]
             if pool not in shapes]
    if found:
        return found
    per_gpu = Counter()  # by hardware: a power-capped type runs on its base GPU's nodes
    for pool, replicas in window["replicas"].items():
        per_gpu[physical_gpu(shapes[pool]["gpu"])] += replicas * shapes[pool]["gpus_per_instance"]
    for hardware, used in sorted(per_gpu.items()):
        owned = [n for n in inventory.values() if physical_gpu(n["gpu"]) == hardware]
        if not owned:
            found.append(Violation(f"{where}.replicas", f"uses {hardware} GPUs; the inventory has none"))
        elif all(n["count"] is not None for n in owned):
            total = sum(n["gpus_per_node"] * n["count"] for n in owned)
            if used > total:
                found.append(Violation(f"{where}.replicas",
                                       f"uses {used} {hardware} GPUs; the inventory holds {total}"))
    for j, node in enumerate(window["nodes"]):
        kind = inventory.get(node["node_type"])
        index = node["node"].rpartition("-")[2]
        if kind is None or not index.isdigit() or (kind["count"] is not None and int(index) >= kind["count"]):
            found.append(Violation(f"{where}.nodes[{j}].node", f"{node['node']!r} is not a node of the inventory"))
        elif node["gpus"] != kind["gpus_per_node"]:
            found.append(Violation(f"{where}.nodes[{j}].gpus", f"a {node['node_type']} node has "
                                                               f"{kind['gpus_per_node']} GPUs"))
    pools = {pool: {**{k: v for k, v in shapes[pool].items() if k in ("gpu", "tp", "pp", "dp", "ep")},
                    "replicas": replicas} for pool, replicas in window["replicas"].items()}
    return found + node_map_violations(pools, window["nodes"], at=f"{where}.nodes",
                                       pool_field=lambda name, key: f"{where}.replicas.{name}")


def _changes(doc: dict) -> list[Violation]:
    """The changes are the replica differences, run in order, drains before reuse."""
    windows = doc["windows"]
    changes = doc["changes"]
    pools = {s["pool"] for s in doc["shapes"]}
    found = [Violation(f"changes[{i}]", f"names window {c['window']} of {len(windows)} or a pool not among the shapes")
             for i, c in enumerate(changes) if not 1 <= c["window"] < len(windows) or c["pool"] not in pools]
    for w in range(1, len(windows)):
        before, after = windows[w - 1]["replicas"], windows[w]["replicas"]
        for pool in sorted(set(before) | set(after)):
            delta = after.get(pool, 0) - before.get(pool, 0)
            listed = Counter(c["kind"] for c in changes if c["window"] == w and c["pool"] == pool)
            if (listed["join"], listed["leave"]) != (max(delta, 0), max(-delta, 0)):
                found.append(Violation(f"changes (window {w}, {pool})",
                                       f"lists {listed['join']} joins and {listed['leave']} leaves; the replicas "
                                       f"change by {delta:+d}"))
    for i, change in enumerate(changes):
        where = f"changes[{i}]"
        if change["kind"] == "leave":
            if change["steps"] != LEAVE_STEPS:
                found.append(Violation(f"{where}.steps", f"a leave runs {' → '.join(LEAVE_STEPS)}"))
            if change["drain_s"] is None:
                found.append(Violation(f"{where}.drain_s", "a leave states its drain"))
            continue
        wait = ["WAIT_FOR_DRAIN"] if change["took_gpus_of"] else []
        if change["steps"] != wait + JOIN_STEPS:
            found.append(Violation(f"{where}.steps", f"this join runs {' → '.join(wait + JOIN_STEPS)}"))
        if change["ready_s"] is None or change["ready_s"] + TIME_SLACK_S < change["at_s"]:
            found.append(Violation(f"{where}.ready_s", "a join takes requests at or after its window opens"))
        if change["took_gpus_of"]:
            donor = next((c for c in changes if c["kind"] == "leave" and c["window"] == change["window"]
                          and f"{c['pool']}/{c['replica']}" == change["took_gpus_of"]), None)
            if donor is None:
                found.append(Violation(f"{where}.took_gpus_of", "names no leave of the same window"))
            elif donor["drain_s"] is not None and change["ready_s"] is not None and \
                    change["ready_s"] + TIME_SLACK_S < donor["at_s"] + donor["drain_s"]:
                found.append(Violation(f"{where}.ready_s", f"takes {change['took_gpus_of']}'s GPUs before its "
                                                          "drain ends (drain first)"))
    return found


def _verdicts(doc: dict) -> list[Violation]:
    found = [Violation(f"windows[{i}].verification.passed", "a written schedule passes every window")
             for i, w in enumerate(doc["windows"]) if not w["verification"]["passed"]]
    whole = doc["verification"]["whole_schedule"]
    if not whole["passed"] or len(whole["windows"]) != len(doc["windows"]):
        found.append(Violation("verification.whole_schedule", "a written schedule passes the whole-schedule "
                                                              "simulation in every window"))
    return found

