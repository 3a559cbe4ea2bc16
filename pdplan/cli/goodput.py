"""`pdplan goodput`: the highest rate one instance shape sustains within the SLO."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Callable, Iterator

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from pdplan import limits
from pdplan.cli.goodput_render import profile_label, render, render_closed_loop
from pdplan.cli.options import (
    MODEL_HELP,
    AcceptanceOpt,
    AdmissionShareOpt,
    AllToAllOpt,
    ArrivalsOpt,
    AttainmentOpt,
    ComposeOpt,
    DpOpt,
    DraftCostOpt,
    DraftTokensOpt,
    DtypeOpt,
    EngineOpt,
    EngineVersionOpt,
    EpOpt,
    FormatOpt,
    GridOpt,
    JsonOpt,
    KvDtypeOpt,
    MoeActivationsOpt,
    ProfilesOpt,
    RedundantExpertsOpt,
    RequestsOpt,
    SeedOpt,
    SloFileOpt,
    SpeculativeOpt,
    ToleranceOpt,
    TpotOpt,
    TraceArg,
    TtftOpt,
    check_seed,
    checked_all_to_all,
    choice,
    load_workload,
    profile_notices,
    profile_source,
    rank_ep,
    search_settings,
    slo_from_options,
    speculative_from_options,
    within,
)
from pdplan.cli.output import stderr
from pdplan.engines import all_to_all as engine_all_to_all
from pdplan.engines import rank_router, running_cap
from pdplan.errors import PdplanError
from pdplan.fileio import Outputs
from pdplan.goodput import (
    DEFAULT_ADMISSION_SHARE,
    DEFAULT_SEED,
    SearchSettings,
    closed_loop_goodput,
    instance_goodput,
    probe_settings,
)
from pdplan.hardware import MAX_GPUS_PER_NODE, get_gpu
from pdplan.latency.profile import profile_inputs
from pdplan.modelref import get_model, model_file
from pdplan.plots import plot_attainment_curve
from pdplan.shape import InstanceShape
from pdplan.sim.plan import Pool
from pdplan.slo import DEFAULT_ATTAINMENT
from pdplan.vocabulary import INSTANCE_PHASES, Phase, Policy


def goodput(
    trace: TraceArg,
    model: Annotated[str, typer.Option("--model", help=MODEL_HELP)],
    gpu: Annotated[str, typer.Option("--gpu", help="GPU type from the catalog.")],
    phase: Annotated[Phase, choice("--phase", INSTANCE_PHASES, help="prefill, decode or colocated.")],
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel degree.")] = 1,
    pp: Annotated[int, typer.Option("--pp", help="Pipeline-parallel degree.")] = 1,
    dp: DpOpt = 1,
    ep: EpOpt = None,
    redundant_experts: RedundantExpertsOpt = 0,
    all_to_all: AllToAllOpt = None,
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
    moe_activations: MoeActivationsOpt = None,
    speculative: SpeculativeOpt = None,
    draft_tokens: DraftTokensOpt = None,
    acceptance: AcceptanceOpt = None,
    draft_cost: DraftCostOpt = None,
    arrivals: ArrivalsOpt = SearchSettings.arrivals,
    requests_per_probe: RequestsOpt = SearchSettings.requests_per_probe,
    tolerance: ToleranceOpt = SearchSettings.tolerance_rel,
    grid: GridOpt = 6,
    admission_share: AdmissionShareOpt = DEFAULT_ADMISSION_SHARE,
    seed: SeedOpt = DEFAULT_SEED,
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
    throughput. An instance with --dp ranks is probed with --requests-per-probe requests per rank,
    reaching its experts as optimize runs the engine's instance of that phase unless --all-to-all says.
    Defaults: p90 TTFT <= 1 s and p90 TPOT <= 100 ms.
    """
    within("--tp", tp, 1, MAX_GPUS_PER_NODE)
    within("--pp", pp, 1, limits.MAX_PIPELINE_STAGES)
    ep = rank_ep(tp, pp, dp, ep)
    within("--redundant-experts", redundant_experts, 0, limits.MAX_GPUS)
    if all_to_all is not None:
        all_to_all = checked_all_to_all(all_to_all, tp, dp, ep)
    within("--chunk", chunk, 1, limits.MAX_KV_TOKENS)
    if (policy == "chunked") != (chunk is not None) or phase != "colocated" and chunk is not None:
        raise PdplanError("--chunk goes with --phase colocated --policy chunked, and that policy needs it",
                          field="chunk")
    outputs = Outputs(trace, *profile_inputs(profiles), slo, model_file(model))
    if plot is not None:
        outputs.claim(plot, "--plot")
    objectives = slo_from_options(ttft, tpot, attainment, slo)
    drafting = speculative_from_options(speculative, draft_tokens, acceptance, draft_cost)
    check_seed(seed)
    settings = search_settings(tolerance, requests_per_probe, arrivals, grid)
    workload = load_workload(trace, format, seed)
    settings = probe_settings(workload, settings)  # record what was run
    spec, device = get_model(model, dtype=dtype, kv_dtype=kv_dtype), get_gpu(gpu)
    source = profile_source(profiles, engine, engine_version, compose, drafting, moe_activations)
    shape = InstanceShape(gpu=device.name, tp=tp, pp=pp, dp=dp, ep=ep)
    if all_to_all is None:  # as optimize runs the engine's instance of this phase on the GPU's hosts
        all_to_all = engine_all_to_all(source.serving_engine, phase, shape, device.gpus_per_host,
                                       fabric=device.nvlink_fabric)
    profile = source.profile(spec, device, tp, pp, dp=dp, ep=ep, all_to_all=all_to_all,
                             redundant_experts=redundant_experts)
    if profiles is not None:  # a profile of the user's this instance's coordinates do not take is said
        instance = Pool(name=f"the {phase} instance", phase=phase, model=spec.name, gpu=device.name, tp=tp, pp=pp,
                        dp=dp, ep=ep, all_to_all=all_to_all, redundant_experts=redundant_experts,
                        **({"policy": policy, "chunk_tokens": chunk} if phase == "colocated" else {}))
        for notice in profile_notices(profiles, [instance]):
            stderr.print(f"notice: {notice}", markup=False, highlight=False)
    fallback = source.fallback_reason(spec.name, device.name, tp, pp, dp=dp, ep=ep)
    accuracy = source.accuracy(profile, spec, phase, dp)
    ranks = rank_router(source.serving_engine, phase, dp)  # SGLang's P/D prefill: by bootstrap room
    cap = running_cap(source.serving_engine, phase, shape, all_to_all, device.gpus_per_host,
                      0 if drafting is None else drafting.draft_tokens, gpu=device, chunk_tokens=chunk)
    if closed_loop:
        if plot is not None:
            raise PdplanError("--plot draws the attainment curve over rates; a closed-loop search has none",
                              field="plot")
        with spinner(f"closed loops on {profile.shape} ({phase})", json) as say:
            loops = closed_loop_goodput(workload, profile, phase=phase, slo=objectives, settings=settings, seed=seed,
                                        policy=policy, chunk_tokens=chunk, admission_share=admission_share,
                                        on_probe=lambda p: say(f"ran {p.clients} clients"), rank_router=ranks,
                                        max_running_requests=cap)
        render_closed_loop(loops, profile, phase, objectives, admission_share, profile_label(profile, fallback),
                           json, accuracy)
        return
    with spinner(f"probing {profile.shape} ({phase})", json) as say:
        result = instance_goodput(workload, profile, phase=phase, slo=objectives, settings=settings, seed=seed,
                                  policy=policy, chunk_tokens=chunk, admission_share=admission_share,
                                  on_probe=lambda p: say(f"probed {p.rate_rps:.3g} rps"), rank_router=ranks,
                                  max_running_requests=cap)
    if plot is not None:
        outputs.put(plot, plot_attainment_curve(
            result.probes, result.goodput_rps, min(o.attainment for o in objectives.objectives),
            f"{profile.shape} {phase}", ttft_label="admission wait (TTFT share)" if phase == "decode" else "TTFT"))
        outputs.commit()
    exchanges = shape.exchanges_tokens
    render(result, profile, fallback, objectives, json, source.speculative_for(spec), accuracy,
           all_to_all if exchanges else None)


@contextmanager
def spinner(what: str, quiet: bool) -> Iterator[Callable[[str], None]]:
    """A transient spinner on stderr saying ``what`` (none with --json or off a terminal), and its update."""
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=stderr, transient=True, disable=quiet or not stderr.is_terminal) as progress:
        task = progress.add_task(what, total=None)
        yield lambda description: progress.update(task, description=description)
