"""What ``pdplan goodput`` prints: an instance's goodput with its attainment curve, or the closed
loops it sustains."""

from __future__ import annotations

import math

from rich.table import Table

from pdplan.cli.output import print_json, stdout
from pdplan.goodput import ClosedLoopGoodput, InstanceGoodput, phase_slo
from pdplan.latency.accuracy import Accuracy, as_dict
from pdplan.slo import SLO
from pdplan.vocabulary import AllToAll

#: How the ranks of an instance with attention DP reach whole experts, in the summary's words.
EXCHANGE_WORDS = {AllToAll.DISPATCH: "dispatch (each token to its experts' GPUs)",
                  AllToAll.GATHER: "gather (every rank's tokens on every GPU)"}


def profile_label(profile, fallback: str | None) -> str:
    """``composed (vllm: operator sum, …)``; a roofline says why nothing better was used."""
    prov = profile.provenance
    if prov.source == "roofline":
        return f"roofline ({fallback})" if fallback else "roofline"
    return f"{prov.source} ({prov.method})"


def render_closed_loop(result: ClosedLoopGoodput, profile, phase: str, objectives: SLO, admission_share: float,
                       source: str, as_json: bool, accuracy: Accuracy | None = None) -> None:
    """The closed-loop answer as JSON, or as a sentence and the table of loops run (with how far the
    profile's source was from measured deployments, as for the open-loop answer)."""
    if as_json:
        print_json({"model": profile.model, "gpu": profile.gpu, "tp": profile.tp, "pp": profile.pp, "phase": phase,
                    "closed_loop": result.to_dict(), "profile": source,
                    "profile_accuracy": as_dict(accuracy), "slo": objectives.to_dict()})
        return
    stdout.print(f"{profile.shape} ({phase}): {result.clients} clients meet the SLO, drawing "
                 f"{result.throughput_rps:.3f} req/s (simulated closed loops; profile {source})",
                 markup=False, highlight=False)
    if accuracy is not None:
        stdout.print(f"accuracy: {accuracy.describe()}", markup=False, highlight=False)
    table = Table(title="Closed loops (attainment: the share of requests within each threshold)")
    for name in ("clients", "req/s", *_attainment_columns(objectives, phase, admission_share), "meets"):
        table.add_column(name, justify="right")
    for p in result.probes:
        table.add_row(str(p.clients), f"{p.throughput_rps:.3f}", _share(p.probe.attainment_ttft),
                      _share(p.probe.attainment_tpot), _share(p.probe.attainment_joint),
                      "yes" if p.probe.meets else "no")
    stdout.print(table)


def render(result: InstanceGoodput, profile, fallback: str | None, objectives: SLO, as_json: bool,
           speculative=None, accuracy: Accuracy | None = None, all_to_all: AllToAll | None = None) -> None:
    """The goodput as JSON (with where the profile came from, how far its source was from measured
    deployments, the speculative decoding it was timed with, how the ranks reached whole experts when they do,
    and the SLO), or as a summary and the attainment curve."""
    if as_json:
        print_json({**result.to_dict(), **({} if all_to_all is None else {"all_to_all": str(all_to_all)}),
                    "profile_source": profile.provenance.source,
                    "profile_method": profile.provenance.method, "profile_fallback": fallback,
                    "profile_accuracy": as_dict(accuracy),
                    "speculative": None if speculative is None else speculative.to_dict(),
                    "slo": objectives.to_dict()})
        return
    source = profile_label(profile, fallback)
    summary = Table(title=f"Goodput of {result.model} {result.shape_label()} ({result.phase})",
                    show_header=False)
    summary.add_column(style="bold")
    summary.add_column(justify="right")
    summary.add_row("goodput", f"{result.goodput_rps:.3f} req/s (simulated{_bound_words(result)})")
    summary.add_row("per GPU", f"{result.goodput_per_gpu:.3f} req/s on {result.gpus} GPUs")
    for label, value in (("M/D/1 bracket", result.md1_rps), ("M/G/1 bracket", result.mg1_rps),
                         (f"{result.phase} saturation", result.saturation_rps)):
        if value is not None:
            summary.add_row(label, f"{value:.3f} req/s (closed form)")
    summary.add_row("SLO", "; ".join(o.label for o in objectives.objectives))
    summary.add_row("profile", source)
    if all_to_all is not None:
        summary.add_row("all-to-all", EXCHANGE_WORDS[all_to_all])
    if accuracy is not None:
        summary.add_row("accuracy", accuracy.describe())
    if speculative is not None:
        summary.add_row("speculative", speculative.describe())
    if result.max_running_requests is not None:
        summary.add_row("running cap", f"{result.max_running_requests} requests per rank (the engine's)")
    per_probe = (f"{result.requests_per_probe} requests" if result.dp == 1 else
                 f"{result.requests_per_probe} requests per rank × {result.dp} ranks, at most the whole trace")
    summary.add_row("probes", f"{len(result.probes)} × {per_probe} "
                              f"({result.settings.arrivals} arrivals, tolerance {result.settings.tolerance_rel:g})")
    stdout.print(summary)
    curve = Table(title="Attainment curve (the share of requests within each threshold)")
    for name in ("rate req/s", *_attainment_columns(objectives, result.phase, result.admission_share), "meets"):
        curve.add_column(name, justify="right")
    for p in result.probes:
        bound = "≤" if p.stopped_early else ""  # a stopped run's shares are upper bounds
        curve.add_row(f"{p.rate_rps:.3f}", _share(p.attainment_ttft, bound), _share(p.attainment_tpot, bound),
                      _share(p.attainment_joint, bound), _verdict(p))
    stdout.print(curve)


def _bound_words(result: InstanceGoodput) -> str:
    """What bounds the goodput from above: the lowest probe that missed (the goodput lies in between), or the
    instance's closed-form saturation throughput, where the SLO held up to it (a probe just above is saturated)."""
    if result.missed_rps is None:
        return ""
    if result.saturation_rps is not None and math.isclose(result.goodput_rps, result.saturation_rps, rel_tol=1e-9):
        return f"; the {result.phase} saturation throughput, above which it is never good"
    return f"; {result.missed_rps:.3f} req/s missed, so it lies in between"


def _attainment_columns(slo, phase: str, admission_share: float) -> tuple[str, str, str]:
    """Headers of the TTFT, TPOT and joint attainment columns, each naming its clock and the
    threshold it is judged on alone; a decode instance's TTFT clock measures its admission wait."""
    judged = phase_slo(slo, phase, admission_share)
    heads = []
    for clock, metric in (("admission wait" if phase == "decode" else "TTFT", "ttft"), ("TPOT", "tpot")):
        threshold = judged.threshold_s(metric)
        heads.append(f"{clock} (share)" if threshold is None else f"{clock} ≤ {threshold * 1e3:g} ms (share)")
    return heads[0], heads[1], "joint (share)"


def _share(value: float | None, bound: str = "") -> str:
    return "—" if value is None else f"{bound}{value:.3f}"


def _verdict(p) -> str:
    if p.meets:
        return "yes"
    if p.saturated:
        return "saturated"
    return "no (settled early)" if p.stopped_early else "no"
