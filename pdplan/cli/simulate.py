"""`pdplan simulate`: run a plan on a trace and report latency, attainment and load."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from pdplan import limits
from pdplan.cli.options import (
    AcceptanceOpt,
    DraftCostOpt,
    DraftTokensOpt,
    EngineOpt,
    EngineVersionOpt,
    FormatOpt,
    JsonOpt,
    MoeActivationsOpt,
    ProfilesOpt,
    RouterOpt,
    SeedOpt,
    SpeculativeOpt,
    TpotOpt,
    TraceArg,
    TtftOpt,
    check_seed,
    load_workload,
    profile_notices,
    profile_source,
    speculative_from_options,
    within,
)
from pdplan.cli.output import print_json, stderr, stdout
from pdplan.errors import PdplanError
from pdplan.fileio import Outputs
from pdplan.latency.accuracy import accuracy_lines, as_dict
from pdplan.latency.profile import profile_inputs
from pdplan.manifest.plan import read_plan
from pdplan.modelref import model_file
from pdplan.sim import simulate as run_plan
from pdplan.sim.plan import plan_model, plan_profiles
from pdplan.slo import DEFAULT_ATTAINMENT, DEFAULT_TPOT_S, DEFAULT_TTFT_S, parse_threshold_s, slo_from_flags


def simulate(
    trace: TraceArg,
    plan: Annotated[Path, typer.Option("--plan", help="Plan YAML (see examples/plan_disagg.yaml).")],
    rate: Annotated[float | None, typer.Option("--rate", help="Rescale the trace to this mean rate (req/s), "
                                                              "keeping its burst shape; with --concurrency, the "
                                                              "rate that paces the clients.")] = None,
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", help="Closed loop: C clients, each sending its next request (in trace order) when its "
                              "previous one finishes, as vllm bench serve --max-concurrency, genai-perf and "
                              "AIPerf do; arrival times are ignored, unless --rate paces the clients: each "
                              "request is then due at its arrival time rescaled to that rate and sent then or "
                              "when a client frees, whichever is later (vllm bench serve --request-rate R "
                              "--max-concurrency C).", show_default=False)] = None,
    ttft: TtftOpt = None,
    tpot: TpotOpt = None,
    attainment: Annotated[float | None, typer.Option(
        "--attainment", help="Share of requests that must meet each clock; default 0.9, or the manifest's.",
        show_default=False)] = None,
    profiles: ProfilesOpt = None,
    engine: EngineOpt = None,
    engine_version: EngineVersionOpt = None,
    compose: Annotated[bool | None, typer.Option(
        "--compose/--no-compose", help="Compose profiles from measured operators where no measured profile exists "
                                       "(else the roofline); default as the plan file says (true when it is silent).",
        show_default=False)] = None,
    moe_activations: MoeActivationsOpt = None,
    speculative: SpeculativeOpt = None,
    draft_tokens: DraftTokensOpt = None,
    acceptance: AcceptanceOpt = None,
    draft_cost: DraftCostOpt = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write one CSV row per request (atomically).")] = None,
    router: RouterOpt = None,
    early_rejection: Annotated[bool, typer.Option(
        "--early-rejection", help="Reject an arrival at admission when its predicted TTFT at its prefill instance "
                                  "is above the TTFT threshold (Mooncake's early rejection; a plan file may set "
                                  "its own threshold, early_rejection.ttft_ms).")] = False,
    seed: SeedOpt = 0,
    format: FormatOpt = None,
    json: JsonOpt = False,
) -> None:
    """Simulate every request of TRACE on PLAN: TTFT, TPOT, E2E, attainment per clock and joint.

    Joint attainment counts requests meeting both clocks at once; a request with one output
    token has no TPOT and passes that clock. --attainment marks whether the plan meets the SLO.
    """
    within("--rate", rate, 0, limits.MAX_RATE_RPS, above=True)
    within("--concurrency", concurrency, 1, limits.MAX_CONCURRENCY)
    check_seed(seed)
    drafting = speculative_from_options(speculative, draft_tokens, acceptance, draft_cost)
    the_plan, planned = read_plan(plan)  # a manifest's SLO is the default; a plan file has none
    if router is not None:
        if the_plan.colocated:
            raise PdplanError("--router picks a prefill instance; a colocated plan has none", field="router")
        the_plan = dataclasses.replace(the_plan, router=router)
    models = {model_file(pool.model) for pool in the_plan.pools} - {None}
    outputs = Outputs(trace, plan, *profile_inputs(profiles), *sorted(models))
    if out is not None:
        outputs.claim(out, "--out")
    ttft = _planned(planned, "ttft", DEFAULT_TTFT_S) if ttft is None else parse_threshold_s(ttft, "ttft")
    tpot = _planned(planned, "tpot", DEFAULT_TPOT_S) if tpot is None else parse_threshold_s(tpot, "tpot")
    if attainment is None:
        attainment = DEFAULT_ATTAINMENT if planned is None else max(o.attainment for o in planned.objectives)
    slo_from_flags(ttft, tpot, attainment)  # the same checks as goodput/optimize (thresholds > 0, 0 < p <= 1)
    if early_rejection:
        if the_plan.colocated:
            raise PdplanError("--early-rejection rejects at a prefill instance; a colocated plan has none",
                              field="early_rejection")
        the_plan = dataclasses.replace(the_plan, reject_ttft_s=ttft)
    workload = load_workload(trace, format, seed)
    if not workload.has_arrivals and (concurrency is None or rate is not None):
        raise PdplanError("trace has no arrival times; give it arrivals first "
                          "(pdplan trace transform --arrivals poisson --rate R), or run a closed loop with "
                          "--concurrency C and no --rate", file=trace)
    model = plan_model(the_plan)
    # Time the shapes as the plan was timed when it was made, unless a flag says otherwise.
    source = profile_source(profiles, engine or the_plan.engine, engine_version or the_plan.engine_version,
                            the_plan.compose if compose is None else compose, drafting or the_plan.speculative,
                            moe_activations or the_plan.moe_activations)
    shapes = plan_profiles(the_plan, source)
    result = run_plan(workload, the_plan, shapes,
                      model=model, seed=seed, rate_rps=rate, concurrency=concurrency)
    summary = result.summary(ttft, tpot, target=attainment)
    summary["concurrency"] = concurrency
    summary["profiles"] = {p.shape_label(): p.provenance.source for p in shapes.values()}
    summary["profile_accuracy"] = {pool.name: as_dict(source.accuracy(shapes[pool.shape], model, pool.phase, pool.dp))
                                   for pool in the_plan.pools}
    summary["notices"] = [*profile_notices(profiles, the_plan.pools), *result.notes.values()]
    for notice in summary["notices"]:
        stderr.print(f"notice: {notice}", markup=False, highlight=False)
    if out is not None:
        outputs.put(out, result.requests.to_csv(index=False, float_format="%.9g"))
        outputs.commit()
    if json:
        print_json(summary)
    else:
        _render(summary, attainment)


def _planned(slo, metric: str, default: float) -> float:
    """A clock's tightest threshold in the SLO a manifest was planned under, else the default."""
    found = None if slo is None else slo.threshold_s(metric)
    return default if found is None else found


def _render(summary: dict, target: float) -> None:
    loop = "" if summary["concurrency"] is None else f", closed loop of {summary['concurrency']:,} clients"
    table = Table(title=f"Simulated {summary['requests']:,} requests ({summary['mode']}{loop})")
    for name in ("clock", "p50 (ms)", "p90 (ms)", "p99 (ms)", "mean (ms)", "threshold", "attainment", "verdict"):
        table.add_column(name, justify="right")
    thresholds = {"ttft": summary["slo"]["ttft_s"], "tpot": summary["slo"]["tpot_s"]}
    meets = summary["meets_slo"]
    for clock in ("ttft", "tpot", "e2e"):
        stats = summary[clock]
        table.add_row(clock.upper(), *(_ms(stats.get(k)) for k in ("p50", "p90", "p99", "mean")),
                      "—" if thresholds.get(clock) is None else f"{thresholds[clock] * 1e3:g} ms",
                      _share(summary["attainment"].get(clock)), _verdict(meets.get(clock)))
    table.add_row("joint", "", "", "", "", "both at once", _share(summary["attainment"]["joint"]),
                  _verdict(meets["joint"]))
    stdout.print(table)
    short = [clock if clock == "joint" else clock.upper() for clock, ok in meets.items() if not ok]
    stdout.print(f"{'Meets' if meets['joint'] else 'Misses'} the SLO: attainment target {target:g}, the share of "
                 "requests within each threshold and within both at once" + (f"; short on {', '.join(short)}"
                                                                             if short else ""),
                 markup=False, highlight=False)
    facts = Table(show_header=False)
    facts.add_column(style="bold")
    facts.add_column(justify="right")
    facts.add_row("throughput", f"{summary['throughput_rps'] or 0:.3f} req/s")
    facts.add_row("rejected (too large for KV)", f"{summary['rejected'] - summary['rejected_early']:,}")
    if summary["rejected_early"]:
        facts.add_row("rejected early (predicted TTFT miss)", f"{summary['rejected_early']:,}")
    facts.add_row("one-token requests (no TPOT)", f"{summary['single_token_requests']:,}")
    transfer = summary["transfer"]
    if transfer["transfers"]:
        facts.add_row("KV moved", f"{transfer['bytes_total'] / 1e9:.2f} GB in {transfer['transfers']:,} transfers")
        facts.add_row("exposed transfer mean / p99",
                      f"{_ms(transfer['exposed_s_mean'])} / {_ms(transfer['exposed_s_p99'])} ms")
    if "first_step_s_mean" in summary:
        facts.add_row("decode step before the first token, mean", f"{_ms(summary['first_step_s_mean'])} ms "
                                                                   "(first_token: decode)")
    if "prefix_cache" in summary:
        cache = summary["prefix_cache"]
        facts.add_row("prefill prefix cache", f"{cache['hit_rate']:.1%} of prompt tokens hit "
                                              f"({cache['loaded_tokens']:,} tokens loaded from a second tier)")
    if "mixed" in summary:
        mixed = summary["mixed"]
        facts.add_row("mixed pool took", f"{mixed['whole_requests']:,} whole requests, {mixed['decodes']:,} decodes "
                                         f"({_share(mixed['share'])} of requests)")
    if "borrowing" in summary:
        lent = summary["borrowing"]
        facts.add_row("lent machines took", f"{lent['whole_requests_on_decode']:,} whole requests on decode machines, "
                                            f"{lent['whole_requests_on_prefill']:,} whole requests and "
                                            f"{lent['decodes_on_prefill']:,} decodes on prefill machines; "
                                            f"{lent['handoffs_refused']:,} handoffs refused (stale role)")
    for label, value in summary["utilization"]["instances"].items():
        facts.add_row(f"busy {label}", _share(value))
    for label, value in summary["utilization"]["links"].items():
        facts.add_row(f"link into {label}", _share(value))
    stdout.print(facts)
    for line in accuracy_lines(summary["profile_accuracy"].values()):
        stdout.print(line, markup=False, highlight=False)


def _verdict(meets: bool | None) -> str:
    return "" if meets is None else ("meets" if meets else "misses")


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1e3:.1f}"


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"
