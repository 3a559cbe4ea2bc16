"""``pdplan validate --resimulate``: re-derive a manifest's verification and compare.

The same plan, the same trace replayed at the same rate with the same seeds and runs, judged
under the manifest's SLO and rule: the simulator is deterministic, so the attainments agree up to
the precision the manifest is written at; a difference above :data:`RESIMULATE_TOLERANCE` means
the plan, the profiles or the trace are not what the manifest claims.
"""

from __future__ import annotations

from pathlib import Path

from pdplan.latency.source import ProfileSource
from pdplan.manifest.plan import manifest_slo, plan_of_manifest
from pdplan.manifest.violation import Violation
from pdplan.sim import simulate
from pdplan.sim.plan import plan_model, plan_profiles
from pdplan.verify import judge, run_record, run_workloads
from pdplan.workload import Workload

#: Absolute tolerance of a re-simulated attainment against the manifest's (same seeds: the runs are
#: deterministic, so only the written precision separates them).
RESIMULATE_TOLERANCE = 0.005


def resimulate(manifest: dict, workload: Workload, source: ProfileSource, *,
               path: Path) -> tuple[dict, list[Violation]]:
    """The re-derived attainment per objective and joint, and where it departs from the manifest;
    ``source`` times the shapes (the CLI builds it with the manifest's engine and composition)."""
    plan = plan_of_manifest(manifest, path)
    profiles = plan_profiles(plan, source)
    verification = manifest["predictions"]["verification"]
    slo = manifest_slo(manifest, path)
    runs = run_workloads(workload, verification["rate_rps"], runs=len(verification["seeds"]),
                         seed=verification["base_seed"], arrivals=manifest["workload"]["arrivals"],
                         min_run_s=verification.get("min_run_s", 0.0))  # older manifests: runs as long as the trace
    model = plan_model(plan)
    records = [run_record(simulate(w, plan, profiles, model=model, seed=verification["base_seed"]), slo,
                          with_summary=False) for w in runs]
    verdict = judge(records, slo, rule=verification["rule"], rate_rps=verification["rate_rps"],
                    seeds=tuple(verification["seeds"]), mode="colocated" if plan.colocated else "disaggregated")
    found = []
    predicted = manifest["predictions"]["attainment"]
    for i, (check, written) in enumerate(zip(verdict.per_objective, predicted["per_objective"])):
        if abs(check.interval.mean - written["mean"]) > RESIMULATE_TOLERANCE:
            found.append(Violation(f"predictions.attainment.per_objective[{i}].mean",
                                   f"re-simulated {check.interval.mean:.4f}, the manifest says {written['mean']:.4f}"))
    if abs(verdict.joint.mean - predicted["joint"]["mean"]) > RESIMULATE_TOLERANCE:
        found.append(Violation("predictions.attainment.joint.mean", f"re-simulated {verdict.joint.mean:.4f}, the "
                                                                    f"manifest says {predicted['joint']['mean']:.4f}"))
    if not verdict.passed:
        found.append(Violation("predictions.verification.passed", "the plan misses its SLO when re-simulated"))
    return {"per_objective": [c.interval.mean for c in verdict.per_objective], "joint": verdict.joint.mean,
            "passed": verdict.passed, "tolerance": RESIMULATE_TOLERANCE}, found
