"""`pdplan goodput`: the highest rate one instance shape sustains within the SLO."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from pdplan import limits
from pdplan.cli.options import (
    within,
    choice,
    AdmissionShareOpt,
    ArrivalsOpt,
    AttainmentOpt,
    DtypeOpt,
    KvDtypeOpt,
    FormatOpt,
    GridOpt,
    JsonOpt,
    ProfilesOpt,
    RequestsOpt,
    SeedOpt,
    SloFileOpt,
    ToleranceOpt,
    TpotOpt,
    TraceArg,
    TtftOpt,
    load_workload,
    profile_source,
    ComposeOpt,
    EngineOpt,
    EngineVersionOpt,
    search_settings,
    slo_from_options,
)
from pdplan.cli.output import print_json, stderr, stdout
from pdplan.errors import PdplanError
from pdplan.fileio import Outputs
from pdplan.goodput import DEFAULT_ADMISSION_SHARE, InstanceGoodput, SearchSettings, closed_loop_goodput, instance_goodput, phase_slo
from pdplan.hardware import MAX_GPUS_PER_NODE, get_gpu
from pdplan.modelspec import get_model, model_file
from pdplan.profiles import profile_inputs
from pdplan.report import plot_attainment_curve
from pdplan.slo import DEFAULT_ATTAINMENT
from pdplan.vocabulary import INSTANCE_PHASES, Phase, Policy



def goodput(
    trace: TraceArg,
    model: Annotated[str, typer.Option("--model", help="Model name from the catalog, or a model YAML.")],
    gpu: Annotated[str, typer.Option("--gpu", help="GPU type from the catalog.")],
    phase: Annotated[Phase, choice("--phase", INSTANCE_PHASES, help="prefill, decode or colocated.")],
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel degree.")] = 1,
    pp: Annotated[int, typer.Option("--pp", help="Pipeline-parallel degree.")] = 1,
    dtype: DtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    policy: Annotated[Policy, choice(
        "--policy", Policy, help="Colocated scheduling: chunked or prefill-first.")] = Policy.PREFILL_FIRST,
    chunk: Annotated[int | None, typer.Option("--chunk", help="Chunked-prefill token budget per iteration.")] = None,
    ttft: TtftOpt = None,
    tpot: TpotOpt = None,
    attainment: AttainmentOpt = DEFAULT_ATTAINMENT,
    slo: SloFileOpt = None,
    profiles: ProfilesOpt = None,
    engine: EngineOpt = None,
    engine_version: EngineVersionOpt = None,
    compose: ComposeOpt = True,
    arrivals: ArrivalsOpt = SearchSettings.arrivals,
    requests_per_probe: RequestsOpt = SearchSettings.requests_per_probe,
    tolerance: ToleranceOpt = SearchSettings.tolerance_rel,
    grid: GridOpt = 6,
    admission_share: AdmissionShareOpt = DEFAULT_ADMISSION_SHARE,
    seed: SeedOpt = SearchSettings.seed,
    format: FormatOpt = None,
    closed_loop: Annotated[bool, typer.Option(
        "--closed-loop", help="Probe closed loops instead of rates: the most concurrent clients (each sending its "
                              "next request when its last ends, as benchmark tools do) whose run meets the SLO, "
                              "and the throughput they draw.")] = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write the attainment curve as a PNG.")] = None,
    json: JsonOpt = False,
) -> None:
    """Goodput of one instance: the highest rate at which every SLO objective holds (DistServe).

    Prefill is judged on TTFT, decode on TPOT plus its admission wait (a share of TTFT), colocated
    on both. The search starts at the queueing bracket (M/D/1 and M/G/1 on the TTFT threshold)
    and bisects over simulated probes; a decode instance is never good above its saturation
    throughput. Defaults: p90 TTFT <= 1 s and p90 TPOT <= 100 ms.
    """
    within("--tp", tp, 1, MAX_GPUS_PER_NODE)
    within("--pp", pp, 1, limits.MAX_PIPELINE_STAGES)
    within("--chunk", chunk, 1, limits.MAX_KV_TOKENS)
    if (policy == "chunked") != (chunk is not None) or phase != "colocated" and chunk is not None:
        raise PdplanError("--chunk goes with --phase colocated --policy chunked, and that policy needs it",
                          field="chunk")
    outputs = Outputs(trace, *profile_inputs(profiles), slo, model_file(model))
    if plot is not None:
        outputs.claim(plot, "--plot")
    objectives = slo_from_options(ttft, tpot, attainment, slo)
    settings = search_settings(tolerance, requests_per_probe, arrivals, seed, grid)
    workload = load_workload(trace, format)
    if not workload.has_arrivals:  # probes of a lengths-only trace are Poisson; record what was run
        settings = search_settings(tolerance, requests_per_probe, "poisson", seed, grid)
    spec, device = get_model(model, dtype=dtype, kv_dtype=kv_dtype), get_gpu(gpu)
    source = profile_source(profiles, engine, engine_version, compose)
    profile = source.profile(spec, device, tp, pp)
    fallback = source.fallback_reason(spec.name, device.name, tp, pp)
    if closed_loop:
        if plot is not None:
            raise PdplanError("--plot draws the attainment curve over rates; a closed-loop search has none",
                              field="plot")
        _closed_loop(workload, profile, phase, objectives, settings, policy, chunk, admission_share,
                     profile_label(profile, fallback), json)
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=stderr, transient=True,
                  disable=json or not stderr.is_terminal) as progress:
        task = progress.add_task(f"probing {profile.shape} ({phase})", total=None)
        result = instance_goodput(
            workload, profile, phase=phase, slo=objectives, settings=settings,
            policy=policy if phase == "colocated" else None, chunk_tokens=chunk,
            admission_share=admission_share,
            on_probe=lambda p: progress.update(task, description=f"probed {p.rate_rps:.3g} rps"))
    if plot is not None:
        outputs.put(plot, plot_attainment_curve(
            result.probes, result.goodput_rps, min(o.attainment for o in objectives.objectives),
            f"{profile.shape} {phase}", ttft_label="admission wait (TTFT share)" if phase == "decode" else "TTFT"))
        outputs.commit()
    if json:
        print_json({**result.to_dict(), "profile_source": profile.provenance.source,
                    "profile_method": profile.provenance.method, "profile_fallback": fallback,
                    "slo": objectives.to_dict()})
    else:
        _render(result, profile_label(profile, fallback), objectives)


def profile_label(profile, fallback: str | None) -> str:
    """``composed (vllm: operator sum, …)``; a roofline says why nothing better was used."""
    prov = profile.provenance
    if prov.source == "roofline":
        return f"roofline ({fallback})" if fallback else "roofline"
    return f"{prov.source} ({prov.method})"


def _closed_loop(workload, profile, phase, objectives, settings, policy, chunk, admission_share, source: str,
                 as_json: bool) -> None:
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=stderr, transient=True, disable=as_json or not stderr.is_terminal) as progress:
        task = progress.add_task(f"closed loops on {profile.shape} ({phase})", total=None)
        result = closed_loop_goodput(
            workload, profile, phase=phase, slo=objectives, settings=settings,
            policy=policy if phase == "colocated" else None, chunk_tokens=chunk, admission_share=admission_share,
            on_probe=lambda p: progress.update(task, description=f"ran {p.clients} clients"))
    if as_json:
        print_json({"model": profile.model, "gpu": profile.gpu, "tp": profile.tp, "pp": profile.pp, "phase": phase,
                    "closed_loop": result.to_dict(), "profile": source, "slo": objectives.to_dict()})
        return
    stdout.print(f"{profile.shape} ({phase}): {result.clients} clients meet the SLO, drawing "
                 f"{result.throughput_rps:.3f} req/s (simulated closed loops; profile {source})",
                 markup=False, highlight=False)
    table = Table(title="Closed loops (attainment: the share of requests within each threshold)")
    for name in ("clients", "req/s", *_attainment_columns(objectives, phase, admission_share), "meets"):
        table.add_column(name, justify="right")
    for p in result.probes:
        table.add_row(str(p.clients), f"{p.throughput_rps:.3f}", _share(p.probe.attainment_ttft),
                      _share(p.probe.attainment_tpot), _share(p.probe.attainment_joint), "yes" if p.probe.meets else "no")
    stdout.print(table)


def _render(result: InstanceGoodput, source: str, objectives) -> None:
    summary = Table(title=f"Goodput of {result.model} {result.gpu} TP{result.tp} PP{result.pp} ({result.phase})",
                    show_header=False)
    summary.add_column(style="bold")
    summary.add_column(justify="right")
    missed = "" if result.missed_rps is None else f"; {result.missed_rps:.3f} req/s missed, so it lies in between"
    summary.add_row("goodput", f"{result.goodput_rps:.3f} req/s (simulated{missed})")
    summary.add_row("per GPU", f"{result.goodput_per_gpu:.3f} req/s on {result.gpus} GPUs")
    for label, value in (("M/D/1 bracket", result.md1_rps), ("M/G/1 bracket", result.mg1_rps),
                         (f"{result.phase} saturation", result.saturation_rps)):
        if value is not None:
            summary.add_row(label, f"{value:.3f} req/s (closed form)")
    summary.add_row("SLO", "; ".join(o.label for o in objectives.objectives))
    summary.add_row("profile", source)
    summary.add_row("probes", f"{len(result.probes)} × {result.requests_per_probe} requests "
                              f"({result.settings.arrivals} arrivals, tolerance {result.settings.tolerance_rel:g})")
    stdout.print(summary)
    curve = Table(title="Attainment curve (the share of requests within each threshold)")
    for name in ("rate req/s", *_attainment_columns(objectives, result.phase, result.admission_share), "meets"):
        curve.add_column(name, justify="right")
    for p in result.probes:
        curve.add_row(f"{p.rate_rps:.3f}", _share(p.attainment_ttft), _share(p.attainment_tpot),
                      _share(p.attainment_joint), "yes" if p.meets else ("saturated" if p.saturated else "no"))
    stdout.print(curve)


def _attainment_columns(slo, phase: str, admission_share: float) -> tuple[str, str, str]:
    """Headers of the TTFT, TPOT and joint attainment columns, each naming its clock and the
    threshold it is judged on alone; a decode instance's TTFT clock measures its admission wait."""
    judged = phase_slo(slo, phase, admission_share)
    heads = []
    for clock, metric in (("admission wait" if phase == "decode" else "TTFT", "ttft"), ("TPOT", "tpot")):
        threshold = judged.threshold_s(metric)
        heads.append(f"{clock} (share)" if threshold is None else f"{clock} ≤ {threshold * 1e3:g} ms (share)")
    return heads[0], heads[1], "joint (share)"


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"
