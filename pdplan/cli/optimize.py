"""`pdplan optimize`: colocated or disaggregated, which shapes, how many, on which nodes, verified."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Callable, Iterator

import typer
import yaml
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pdplan import limits
from pdplan.cache import ResultCache, default_cache_dir
from pdplan.candidates import DEFAULT_DPS, DEFAULT_PPS, DEFAULT_TPS
from pdplan.cli.optimize_render import render
from pdplan.cli.options import (
    MODEL_HELP,
    AcceptanceOpt,
    AdmissionShareOpt,
    ArrivalsOpt,
    AttainmentOpt,
    ComposeOpt,
    DraftCostOpt,
    DraftTokensOpt,
    DtypeOpt,
    EngineOpt,
    EngineVersionOpt,
    FormatOpt,
    JsonOpt,
    KvDtypeOpt,
    MoeActivationsOpt,
    ProfilesOpt,
    RedundantExpertsOpt,
    RequestsOpt,
    RouterOpt,
    SeedOpt,
    SloFileOpt,
    SpeculativeOpt,
    ToleranceOpt,
    TpotOpt,
    TraceArg,
    TtftOpt,
    check_seed,
    choice,
    load_workload,
    profile_source,
    search_settings,
    slo_from_options,
    speculative_from_options,
    within,
)
from pdplan.cli.output import stderr
from pdplan.cli.schedule_render import render as render_schedule
from pdplan.errors import PdplanError
from pdplan.fileio import Outputs, dump_yaml
from pdplan.goodput import SearchSettings
from pdplan.hardware import MAX_GPUS_PER_NODE, default_cluster_path, load_cluster
from pdplan.latency.profile import profile_inputs
from pdplan.manifest import Identity, Release, build_manifest
from pdplan.manifest.build import UNKNOWN
from pdplan.manifest.export import FORMATS as EXPORT_FORMATS
from pdplan.manifest.export import refusals as export_refusals
from pdplan.manifest.schedule import build_schedule
from pdplan.modelref import get_model, model_file
from pdplan.modelspec import DEFAULT_MODEL
from pdplan.parallel import available_cpus
from pdplan.placement import ALIASES, ANY, resolve_fleets
from pdplan.planner import PlanReport, PlanRequest, report_to_dict
from pdplan.planner import optimize as run_optimize
from pdplan.planner.curves import cost_curves, fleet_bars, goodput_per_gpu
from pdplan.planner.plans import Spill
from pdplan.planner.report import windowed_to_dict
from pdplan.planner.request import Inputs
from pdplan.planner.target import target_rate as plan_rate
from pdplan.planner.windowed import MAX_CHANGE_GPU_MINUTES, check_windowed, trace_windows
from pdplan.plots import plot_cost_vs_rate, plot_fleets, plot_goodput_per_gpu, plot_schedule
from pdplan.schedule import plan_windows
from pdplan.schedule.search import DEFAULT_CHANGE_GPU_MINUTES
from pdplan.schedule.windows import windows_file
from pdplan.sim.layout import routing_notice
from pdplan.slo import DEFAULT_ATTAINMENT
from pdplan.vocabulary import Affinity, Connector, Mode, Objective, PoolShapes, Redundancy, Rule


def optimize(
    trace: TraceArg,
    model: Annotated[str, typer.Option(
        "--model", help=MODEL_HELP)] = DEFAULT_MODEL,
    dtype: DtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    profiles: ProfilesOpt = None,
    engine: EngineOpt = None,
    engine_version: EngineVersionOpt = None,
    compose: ComposeOpt = True,
    moe_activations: MoeActivationsOpt = None,
    speculative: SpeculativeOpt = None,
    draft_tokens: DraftTokensOpt = None,
    acceptance: AcceptanceOpt = None,
    draft_cost: DraftCostOpt = None,
    cluster: Annotated[Path | None, typer.Option(
        "--cluster", help=f"Cluster YAML; default the shipped example ({default_cluster_path()}).")] = None,
    ttft: TtftOpt = None,
    tpot: TpotOpt = None,
    attainment: AttainmentOpt = DEFAULT_ATTAINMENT,
    slo: SloFileOpt = None,
    target_rate: Annotated[float | None, typer.Option(
        "--target-rate", help="Rate the plan must serve (req/s); default the trace's mean rate.")] = None,
    peak: Annotated[bool, typer.Option("--peak", help="Plan for the trace's busiest minute (with --windows: each "
                                                      "window's).")] = False,
    windows: Annotated[str | None, typer.Option(
        "--windows", help="Plan each window of the trace at its own rate under one inventory (its mode, shapes "
                          "and replicas; --mode auto lets windows switch between colocated and P/D): a length "
                          "(1h, 30m, 900s) or a file of window starts in seconds, one per line.")] = None,
    change_cost: Annotated[float, typer.Option(
        "--change-cost", help="With --windows: GPU-minutes each GPU of an instance joining or leaving a pool "
                              "loses (draining on the way out, loading weights on the way in; a flip from one "
                              "phase to the other, a reshape and a mode switch do both)."
                              )] = DEFAULT_CHANGE_GPU_MINUTES,
    fleet: Annotated[str, typer.Option(
        "--fleet", help="GPU types per pool: any (free choice), all (every prefill/decode GPU pair the "
                        "cluster holds, power-capped decode included), a pair PREFILL_GPU/DECODE_GPU, or "
                        f"Splitwise's {', '.join(ALIASES)}.")] = ANY.name,
    objective: Annotated[Objective, choice(
        "--objective", Objective, help="cost, gpus or power (minimised at the target rate), or goodput (maximised "
                                       "within --max-gpus/--max-cost/--max-power).")] = PlanRequest.objective,
    mode: Annotated[Mode, choice(
        "--mode", Mode, help="auto: the better of P/D and colocated; disaggregated or colocated: answer with that "
                             "mode (both are still verified, and the margin says what the other would "
                             "save).")] = PlanRequest.mode,
    affinity: Annotated[Affinity, choice(
        "--affinity", Affinity, help="KV path: high (handoffs cross nodes), low (prefill and decode stages share "
                                     "nodes, DistServe's low affinity) or auto (the better of "
                                     "both).")] = PlanRequest.affinity,
    tp: Annotated[list[int] | None, typer.Option(
        "--tp", help=f"Tensor-parallel degrees to consider (repeatable); default {', '.join(map(str, DEFAULT_TPS))}.",
        show_default=False)] = None,
    pp: Annotated[list[int] | None, typer.Option(
        "--pp", help=f"Pipeline-parallel degrees to consider (repeatable); default {', '.join(map(str, DEFAULT_PPS))}.",
        show_default=False)] = None,
    dp: Annotated[list[int] | None, typer.Option(
        "--dp", help="Attention data-parallel sizes to consider for a mixture-of-experts model (repeatable): each "
                     "DP above 1 adds wide-EP shapes of TP x DP GPUs, every routed expert whole on one GPU "
                     "(EP = TP x DP), on one node or over whole nodes (SGLang --attn-dp-size, vLLM "
                     "--data-parallel-size); default 1 (none).", show_default=False)] = None,
    redundant_experts: RedundantExpertsOpt = PlanRequest.redundant_experts,
    pool_shapes: Annotated[PoolShapes, choice(
        "--pool-shapes", PoolShapes, help="one: one shape per phase and GPU type, as deployers run pools; mixed: "
                                          "let the program mix shapes in a pool.")] = PlanRequest.pool_shapes,
    redundancy: Annotated[Redundancy, choice(
        "--redundancy", Redundancy, help="none, instance or node: the plan must also pass with any one instance "
                                         "(or node) of each pool lost, verified by "
                                         "simulation.")] = PlanRequest.redundancy,
    seeds: Annotated[int, typer.Option(
        "--seeds", help="Verification runs: the trace replayed at the target rate, then Poisson resamples "
                        "of it; each objective gets a 95% interval over the runs.")] = PlanRequest.runs,
    jobs: Annotated[int, typer.Option(
        "--jobs", help="Processes that compose profiles, bisect goodputs and sample pool curves (one shape each) "
                       "and run a fleet's searches (one mode and node affinity each); the answer is the same for "
                       "any number. 0: as many as the CPUs this process may "
                       "use.")] = PlanRequest.jobs,
    min_run: Annotated[float, typer.Option(
        "--min-run", help="Seconds of arrivals each verification run lasts at least: a trace that, rescaled to "
                          "the target rate, arrives in less is replayed back to back (burst shape kept, at most "
                          "1,500,000 requests a run), so the empty start and the final drain do not flatter the "
                          "plan. 0: the trace once.")] = PlanRequest.min_run_s,
    verify_rule: Annotated[Rule, choice(
        "--verify-rule", Rule, help="lower: a plan passes when each objective's interval lower end meets its "
                                    "target; mean: when its mean does.")] = PlanRequest.rule,
    max_gpus: Annotated[int | None, typer.Option("--max-gpus", help="GPU budget.")] = None,
    max_cost: Annotated[float | None, typer.Option("--max-cost", help="Budget in USD per hour.")] = None,
    max_power: Annotated[float | None, typer.Option("--max-power", help="Budget in watts (power limits).")] = None,
    link_headroom: Annotated[float, typer.Option(
        "--link-headroom", help="Share of a KV link's bandwidth the handoff may use.")] = PlanRequest.link_headroom,
    time_limit: Annotated[float, typer.Option(
        "--time-limit", help="CP-SAT time limit per solve, seconds.")] = PlanRequest.time_limit_s,
    max_rounds: Annotated[int, typer.Option(
        "--max-rounds", help="End-to-end checks per fleet, mode and node affinity: misses raise the failing "
                             "pool, passes try cheaper plans.")] = PlanRequest.max_checks,
    arrivals: ArrivalsOpt = SearchSettings.arrivals,
    requests_per_probe: RequestsOpt = SearchSettings.requests_per_probe,
    tolerance: ToleranceOpt = SearchSettings.tolerance_rel,
    admission_share: AdmissionShareOpt = PlanRequest.admission_share,
    seed: SeedOpt = PlanRequest.seed,
    format: FormatOpt = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Write the deployment manifest of the chosen plan (pdplan validate / diff / export read it, "
                      "and so does pdplan simulate --plan); only a verified plan is written. With --windows: the "
                      "schedule (each window's pools and node map, every change drained first; validate "
                      "reads it).")] = None,
    checkpoint: Annotated[str | None, typer.Option(
        "--checkpoint", help="Manifest identity: checkpoint id, the Hugging Face repository or path the engines "
                             "load. Default: the catalog model's repository; a model YAML's hf_repo; the "
                             "repository whose hub-cache snapshot holds a config.json; else unknown, which "
                             "export refuses.")] = None,
    revision: Annotated[str, typer.Option(
        "--revision", help="Manifest identity: the checkpoint's revision (branch, tag or commit id), which the "
                           "exports pass to the engines' --revision. Default: the commit of a config.json's "
                           "hub-cache snapshot; else unknown, the repository's default branch.")] = UNKNOWN,
    tokenizer: Annotated[str, typer.Option(
        "--tokenizer", help="Manifest identity: tokenizer id and revision.")] = UNKNOWN,
    adapter: Annotated[str, typer.Option("--adapter", help="Manifest identity: LoRA adapter, or none.")] = UNKNOWN,
    position: Annotated[str, typer.Option("--position", help="Manifest identity: position/RoPE policy.")] = UNKNOWN,
    connector: Annotated[Connector, choice(
        "--connector", Connector, sort=False,
        help=f"KV connector the manifest names: {', '.join(Connector)}.")] = Release.connector,
    timestamp: Annotated[bool, typer.Option(
        "--timestamp", help="Record the creation time in the manifest (it is then no longer byte-identical "
                            "across runs).")] = False,
    mixed: Annotated[bool, typer.Option(
        "--mixed", help="Let P/D plans add Splitwise's mixed pool: machines that take either phase when it "
                        "is short, which the integer program counts in both phases and places on nodes. The "
                        "plan with mixed machines is searched and verified end to end like the others and is "
                        "the answer when it is the best; the plain P/D plan is reported beside it.")] = False,
    borrow: Annotated[bool, typer.Option(
        "--borrow", help="Also search P/D plans whose dedicated machines may be lent to the other phase past "
                         "the spill thresholds (Splitwise's borrowing: a decode machine runs prompts while the "
                         "prefill queues are long, a prefill machine decodes while the decode KV is full, each "
                         "returning when that work drains). Verified end to end like the others and the answer "
                         "when it is the best; the plain P/D plan is reported beside it.")] = False,
    mixed_max: Annotated[int, typer.Option(
        "--mixed-max", help="Mixed pool: the most mixed instances a plan may add (Splitwise's mixed pool is a "
                            "buffer beside the prefill and decode pools).")] = PlanRequest.mixed_max,
    mixed_spill_tokens: Annotated[int, typer.Option(
        "--mixed-spill-tokens",
        help="Mixed pool and borrowing: a request runs whole on a mixed (or lent) machine when the shortest "
             "prefill queue holds more pending prompt tokens than this.")] = Spill().prefill_queue_tokens,
    mixed_kv_share: Annotated[float, typer.Option(
        "--mixed-kv-share",
        help="Mixed pool and borrowing: a prefilled request decodes on a mixed (or lent) machine when its "
             "decode instance's routed KV would pass this share of its capacity.")] = Spill().decode_kv_share,
    router: RouterOpt = None,
    early_rejection: Annotated[bool, typer.Option(
        "--early-rejection", help="P/D plans reject an arrival at admission when its predicted TTFT at its prefill "
                                  "instance (the queue ahead plus its own prefill) is above the SLO's TTFT "
                                  "threshold, as Mooncake does; a rejected request counts as a miss.")] = False,
    plot: Annotated[Path | None, typer.Option(
        "--plot", help="Folder for PNG plots: fleets.png (cost and power per fleet), goodput_per_gpu.png (each "
                       "shape's simulated goodput per GPU by phase), cost_vs_rate.png (the chosen fleet's cost "
                       "per rate, P/D beside colocated).")] = None,
    explain: Annotated[bool, typer.Option("--explain", help="List rejected shapes and why.")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Recompute every goodput and check.")] = False,
    cache_dir: Annotated[Path | None, typer.Option(
        "--cache-dir", help=f"Result cache folder; default {default_cache_dir()} "
                            "(or $PDPLAN_CACHE_DIR).")] = None,
    json: JsonOpt = False,
) -> None:
    """Find the cheapest plan that passes its own end-to-end simulation: colocated or P/D, shapes,
    replicas, nodes.

    Every candidate shape's goodput, alone and as a pool behind the router, is simulated on the
    trace (cached on disk); CP-SAT places replicas on the cluster's nodes per fleet, mode and node
    affinity; each proposal is simulated end to end (routing, KV transfer, admission) on several
    runs, misses raise the failing pool and passes try cheaper plans. Only a plan that passes is the
    answer; when none does, the closest is shown with what it misses, and the exit code is 1.
    Defaults: llama2-70b; each shape timed by its shipped measured profile, else composed from
    vLLM's measured operators (the optional extra pdplan\\[aic]), else by a roofline; the example
    A100 + H100 cluster; p90 TTFT <= 1 s and p90 TPOT <= 100 ms at the trace's mean rate.
    """
    _check_flags(objective=objective, target_rate=target_rate, peak=peak, windows=windows, change_cost=change_cost,
                 fleet=fleet, affinity=affinity, redundancy=redundancy, budgets=(max_gpus, max_cost, max_power),
                 link_headroom=link_headroom, time_limit=time_limit, seeds=seeds, min_run=min_run, jobs=jobs,
                 max_rounds=max_rounds, tps=tp, pps=pp, dps=dp, mixed=(mixed_max, mixed_spill_tokens, mixed_kv_share),
                 borrow=borrow)
    drafting = speculative_from_options(speculative, draft_tokens, acceptance, draft_cost)
    identity = Identity(checkpoint=checkpoint, revision=revision, tokenizer=tokenizer, adapter=adapter,
                        position=position)
    outputs = Outputs(trace, cluster, *profile_inputs(profiles), slo, model_file(model), windows_file(windows))
    if out is not None:
        outputs.claim(out, "--out")
    if plot is not None:
        outputs.claim(plot, "--plot", folder=True)
    check_seed(seed)
    settings = search_settings(tolerance, requests_per_probe, arrivals)
    workload = load_workload(trace, format, seed)
    cut = None if windows is None else trace_windows(
        workload, trace, windows, peak=peak,
        notify=lambda notice: stderr.print(f"notice: {notice}", markup=False, highlight=False))
    rate = plan_rate(workload, trace, given=target_rate, objective=objective, peak=peak, windowed=cut is not None)
    the_cluster = load_cluster(cluster or default_cluster_path())
    request = PlanRequest(
        workload=workload, model=get_model(model, dtype=dtype, kv_dtype=kv_dtype), cluster=the_cluster,
        profiles=profile_source(profiles, engine, engine_version, compose, drafting, moe_activations),
        slo=slo_from_options(ttft, tpot, attainment, slo), target_rps=rate, fleets=resolve_fleets(fleet, the_cluster),
        objective=objective, affinity=affinity, settings=settings, admission_share=admission_share,
        link_headroom=link_headroom, max_gpus=max_gpus, max_usd_per_hour=max_cost, max_power_w=max_power,
        time_limit_s=time_limit, max_checks=max_rounds, runs=seeds, min_run_s=min_run,
        jobs=jobs or available_cpus(),
        rule=verify_rule, redundancy=redundancy,
        pool_shapes=pool_shapes, mode=mode, connector=connector, mixed=mixed, mixed_max=mixed_max, borrow=borrow,
        spill=Spill(prefill_queue_tokens=mixed_spill_tokens, decode_kv_share=mixed_kv_share),
        tps=tuple(sorted(set(tp))) if tp else DEFAULT_TPS, pps=tuple(sorted(set(pp))) if pp else DEFAULT_PPS,
        dps=tuple(sorted(set(dp))) if dp else DEFAULT_DPS, redundant_experts=redundant_experts,
        router=router or PlanRequest.router,
        early_rejection=early_rejection,
        seed=seed, inputs=Inputs(trace=trace, cluster=cluster, profiles=() if profiles is None else (profiles,),
                                 model=model_file(model)))
    for notice in (routing_notice(request.router, workload.has_prefix_hashes), the_cluster.hosts_notice(),
                   the_cluster.racks_notice()):
        if notice is not None:
            stderr.print(f"notice: {notice}", markup=False, highlight=False)
    cache = ResultCache(cache_dir, enabled=not no_cache,
                        warn=lambda message: stderr.print(f"warning: {message}", markup=False, highlight=False))
    created = datetime.now(timezone.utc).isoformat(timespec="seconds") if timestamp else None
    with progress_bar(json) as advance:
        if cut is not None:
            windowed = plan_windows(request, cut, change_gpu_minutes=change_cost, cache=cache, progress=advance)
        else:
            report = run_optimize(request, cache=cache, progress=advance)
    if cut is not None:
        if out is not None and windowed.chosen is not None:
            outputs.put(out, dump_yaml(build_schedule(windowed, timestamp=created)))
        _windowed_output(windowed, outputs, plot, json)
        return
    document = report_to_dict(report)
    if report.answer is not None:
        text = dump_yaml(build_manifest(report, identity=identity, release=Release(connector=connector),
                                        timestamp=created))
        document["export_refusals"] = refused = export_refusals(yaml.safe_load(text))  # the file export would read
        for formats, why in _by_reason(refused):
            stderr.print(f"notice: pdplan export would refuse this plan ({formats}): {why}", markup=False,
                         highlight=False)
        if out is not None:
            outputs.put(out, text)
        if plot is not None:
            _plots(report, document, plot, outputs)
        outputs.commit()
    render(report, document, explain, json)
    if report.answer is None:
        raise typer.Exit(1)


def _by_reason(refused: dict[str, str]) -> list[tuple[str, str]]:
    """The export refusals as (formats, reason), one per reason, in the formats' order: "every format" when all
    refuse alike."""
    grouped: dict[str, list[str]] = {}
    for fmt, why in refused.items():
        grouped.setdefault(why, []).append(fmt)
    return [("every format" if len(formats) == len(EXPORT_FORMATS) else "--format " + ", ".join(formats), why)
            for why, formats in grouped.items()]


@contextmanager
def progress_bar(quiet: bool) -> Iterator[Callable[[str, int, int], None]]:
    """A transient progress bar on stderr (none with --json or off a terminal), and its update."""
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=stderr, transient=True, disable=quiet or not stderr.is_terminal) as progress:
        task = progress.add_task("measuring shapes", total=None)
        yield lambda label, done, total: progress.update(task, description=label, completed=done, total=total)


def _plots(report: PlanReport, document: dict, plot: Path, outputs: Outputs) -> None:
    """--plot: the fleets, each shape's goodput per GPU, and (at a target rate) cost against rate."""
    outputs.put(plot / "fleets.png", plot_fleets(fleet_bars(report)), "--plot")
    outputs.put(plot / "goodput_per_gpu.png", plot_goodput_per_gpu(goodput_per_gpu(report)), "--plot")
    rate = report.request.target_rps
    if rate is not None:
        fleet = report.fleet
        verified = {r.mode: r.best.solution.usd_per_hour for r in (fleet.disaggregated, fleet.colocated)
                    if r.best is not None}
        outputs.put(plot / "cost_vs_rate.png", plot_cost_vs_rate(cost_curves(report), verified, rate), "--plot")


def _windowed_output(windowed, outputs: Outputs, plot: Path | None, json: bool) -> None:
    """Write the schedule's plot, print it, and exit 1 when no schedule passes every window."""
    document = windowed_to_dict(windowed)
    if windowed.chosen is not None:
        if plot is not None:
            outputs.put(plot / "schedule.png", plot_schedule(document), "--plot")
        outputs.commit()
    render_schedule(windowed, document, json)
    if windowed.chosen is None:
        raise typer.Exit(1)


def _check_flags(*, objective: Objective, target_rate: float | None, peak: bool, windows: str | None,
                 change_cost: float, fleet: str, affinity: Affinity, redundancy: Redundancy, budgets: tuple,
                 link_headroom: float, time_limit: float, seeds: int, min_run: float, jobs: int, max_rounds: int,
                 tps: list[int] | None,
                 pps: list[int] | None, dps: list[int] | None, mixed: tuple[int, int, float], borrow: bool) -> None:
    """Flag values the planner cannot use, named by flag, before any work is done."""
    if peak and target_rate is not None:
        raise PdplanError("give --peak or --target-rate, not both", field="target_rate")
    if windows is not None:
        check_windowed(objective=objective, target_rate=target_rate, fleet=fleet, affinity=affinity,
                       redundancy=redundancy, budgets=budgets, borrow=borrow)
        within("--change-cost", change_cost, 0, MAX_CHANGE_GPU_MINUTES)
    mixed_max, spill_tokens, kv_share = mixed
    within("--mixed-max", mixed_max, 1, limits.MAX_GPUS)
    within("--mixed-spill-tokens", spill_tokens, 0, limits.MAX_KV_TOKENS)
    within("--mixed-kv-share", kv_share, 0, 1, above=True)
    if objective == Objective.GOODPUT and (target_rate is not None or peak):
        raise PdplanError("--objective goodput finds the highest rate itself; drop --target-rate/--peak",
                          field="target_rate")
    max_gpus, max_cost, max_power = budgets
    within("--target-rate", target_rate, 0, limits.MAX_RATE_RPS, above=True)
    within("--max-gpus", max_gpus, 1, limits.MAX_GPUS)  # a budget of nothing holds no plan: said before any work
    within("--max-cost", max_cost, 0, limits.MAX_USD_PER_HOUR, above=True)
    within("--max-power", max_power, 0, limits.MAX_WATTS, above=True)
    within("--link-headroom", link_headroom, 0, 1, above=True)
    within("--time-limit", time_limit, 0, limits.MAX_TIME_LIMIT_S, above=True)
    within("--seeds", seeds, 1, limits.MAX_RUNS)
    within("--min-run", min_run, 0, limits.MAX_RUN_S)
    within("--jobs", jobs, 0, limits.MAX_JOBS)
    within("--max-rounds", max_rounds, 1, limits.MAX_CHECKS)
    for values, flag, high in ((tps, "--tp", MAX_GPUS_PER_NODE), (pps, "--pp", limits.MAX_PIPELINE_STAGES),
                               (dps, "--dp", limits.MAX_GPUS)):
        for value in values or ():
            within(flag, value, 1, high)
