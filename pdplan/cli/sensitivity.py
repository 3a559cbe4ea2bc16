"""`pdplan sensitivity grid`: where P/D beats the best colocated plan, and by what net margin."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pdplan import limits
from pdplan.cache import default_cache_dir
from pdplan.cli.options import (
    AcceptanceOpt,
    ComposeOpt,
    DraftCostOpt,
    DraftTokensOpt,
    EngineOpt,
    EngineVersionOpt,
    JsonOpt,
    MoeActivationsOpt,
    RouterOpt,
    SpeculativeOpt,
    choice,
    load_workload,
    profile_source,
    speculative_from_options,
    within,
)
from pdplan.cli.output import stderr
from pdplan.cli.sensitivity_render import render
from pdplan.errors import PdplanError
from pdplan.fileio import Outputs
from pdplan.hardware import default_cluster_path, load_cluster
from pdplan.modelref import get_model
from pdplan.planner.target import target_rate
from pdplan.plots import plot_grid, plot_grid_line
from pdplan.sensitivity import DIMENSIONS, Base, GridSpec, check_executor, load_spec, parse_vary, run_grid, with_vary
from pdplan.sim.layout import routing_notice
from pdplan.slo import parse_threshold_s, slo_from_flags
from pdplan.vocabulary import Affinity, Executor, FailurePolicy

app = typer.Typer(help="Sensitivity of the P/D decision to workload, topology, faults and prices.",
                  no_args_is_help=True)

DIMENSION_HELP = "; ".join(f"{d.name} ({d.unit}): {d.help}" for d in DIMENSIONS.values())


@app.command("grid")
def grid(
    spec: Annotated[Path | None, typer.Argument(
        help="Grid file (pdplan_grid: 1): base inputs and the dimensions to vary; flags override it.",
        show_default=False)] = None,
    trace: Annotated[Path | None, typer.Option("--trace", help="Request trace (overrides the grid file's).")] = None,
    vary: Annotated[list[str] | None, typer.Option(
        "--vary", help=f"NAME=v1,v2,… (repeatable): a dimension and its values. Dimensions: {DIMENSION_HELP}.",
        show_default=False)] = None,
    margin: Annotated[float, typer.Option(
        "--margin", help="Net margin (ms per request) P/D must exceed to be enabled in a cell.")] = 0.0,
    budget: Annotated[float | None, typer.Option(
        "--budget", help="Compare by the highest verified rate within this many USD per hour instead of the "
                         "cheapest plan at the target rate.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model (overrides the grid file's).")] = None,
    cluster: Annotated[Path | None, typer.Option("--cluster", help="Cluster YAML (overrides the grid file's).")] = None,
    profiles: Annotated[Path | None, typer.Option(
        "--profiles", help="Measured profiles (overrides the grid file's).")] = None,
    engine: EngineOpt = None,
    engine_version: EngineVersionOpt = None,
    compose: ComposeOpt = True,
    moe_activations: MoeActivationsOpt = None,
    speculative: SpeculativeOpt = None,
    draft_tokens: DraftTokensOpt = None,
    acceptance: AcceptanceOpt = None,
    draft_cost: DraftCostOpt = None,
    target_rate: Annotated[float | None, typer.Option(
        "--target-rate", help="Rate every cell plans for, req/s (a rate dimension overrides it); default the "
                              "trace's mean rate.")] = None,
    ttft: Annotated[str | None, typer.Option("--ttft", help="TTFT threshold, e.g. 1s or 500ms.")] = None,
    tpot: Annotated[str | None, typer.Option("--tpot", help="TPOT threshold, e.g. 100ms.")] = None,
    attainment: Annotated[float | None, typer.Option("--attainment", help="Share of requests within each "
                                                     "threshold.")] = None,
    fleet: Annotated[str | None, typer.Option("--fleet", help="GPU types per pool, as optimize --fleet.")] = None,
    affinity: Annotated[Affinity | None, choice(
        "--affinity", Affinity, help="KV path: high (handoffs cross nodes, the grid's default, so the bandwidth "
                                     "dimension is the path they take), low or auto.")] = None,
    failure_policy: Annotated[FailurePolicy | None, choice(
        "--failure-policy", FailurePolicy, help="What a failed KV transfer costs: retry (resend) or recompute "
                                                "(prefill again).")] = None,
    router: RouterOpt = None,
    seeds: Annotated[int | None, typer.Option("--seeds", help="Verification runs per check.")] = None,
    max_rounds: Annotated[int | None, typer.Option(
        "--max-rounds", help="End-to-end checks per fleet, mode and affinity in each cell.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed of every draw (arrivals, prefixes, "
                                             "failures).")] = None,
    jobs: Annotated[int, typer.Option("--jobs", help="Cells run at once (local processes, or a local Ray's "
                                      "CPUs).")] = os.cpu_count() or 1,
    executor: Annotated[Executor, choice(
        "--executor", Executor, help="local (a process pool) or ray (tasks on a Ray cluster; pip install "
                                     "'pdplan\\[ray]').")] = Executor.LOCAL,
    address: Annotated[str | None, typer.Option(
        "--address", help="Ray cluster address (ray://host:10001 or host:6379); default a local Ray.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="CSV with one row per cell.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Heatmap PNG: decision as colour; in each cell ΔT "
                                              "and each mode's cost per hour (its verified rate with "
                                              "--budget). A grid of one dimension: ΔT along it, each cell "
                                              "coloured by its decision.")] = None,
    plot_axes: Annotated[str | None, typer.Option(
        "--plot-axes", help="X,Y: the two dimensions of the heatmap (default the first two); the others "
                            "become panels.")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Recompute every goodput and check.")] = False,
    cache_dir: Annotated[Path | None, typer.Option(
        "--cache-dir", help=f"Result cache folder; default {default_cache_dir()}.")] = None,
    json: JsonOpt = False,
) -> None:
    """Where P/D beats the best colocated plan, cell by cell, and by what net margin per request.

    Every cell is planned both ways, each plan verified end to end, and decided ENABLE_PD,
    COLOCATE or INFEASIBLE with ΔT = T_saved − T_transfer_exposed − T_route − T_failure (ms per
    request) measured from the cell's simulations: T_saved is the interference the split removes
    (colocated latency minus P/D with free handoffs); the other terms are what the real links,
    transfer failures and the router's hop add back. ENABLE_PD needs the P/D plan passing and,
    when a colocated plan passes too, ΔT above --margin and P/D no more expensive (with --budget:
    serving a higher verified rate).
    """
    within("--margin", margin, -1e6, 1e6)
    within("--budget", budget, 0, limits.MAX_USD_PER_HOUR, above=True)
    within("--jobs", jobs, 1, 1024)
    check_executor(executor, address)
    drafting = speculative_from_options(speculative, draft_tokens, acceptance, draft_cost)
    the_spec = load_spec(spec) if spec is not None else GridSpec()
    the_spec = with_vary(override(the_spec, trace=trace, model=model, cluster=cluster, profiles=profiles,
                                  target_rate=target_rate, fleet=fleet, affinity=affinity,
                                  failure_policy=failure_policy, router=router, seeds=seeds, max_rounds=max_rounds,
                                  seed=seed),
                         [parse_vary(text) for text in vary or ()])
    if the_spec.trace is None:
        raise PdplanError("give a trace: --trace T or a grid file with trace:", field="trace")
    outputs = Outputs(spec, *the_spec.files)
    for path, flag in ((out, "--out"), (plot, "--plot")):
        if path is not None:
            outputs.claim(path, flag)
    axes = heatmap_axes(the_spec, plot_axes) if plot is not None else None
    base = load_base(the_spec, ttft=ttft, tpot=tpot, attainment=attainment, margin_ms=margin, budget=budget,
                     cache_dir=cache_dir, use_cache=not no_cache,
                     timing=dict(engine=engine, engine_version=engine_version, compose=compose, speculative=drafting,
                                 moe_activations=moe_activations))
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=stderr, transient=True, disable=json or not stderr.is_terminal) as progress:
        task = progress.add_task("grid cells", total=the_spec.cells)
        result = run_grid(base, the_spec.dimensions, jobs=jobs, executor=executor, address=address,
                          progress=lambda done, total: progress.update(task, completed=done, total=total))
    rows = result.rows()
    if out is not None:
        outputs.put(out, result.csv(), "--out")
    if plot is not None:
        x, y = axes
        show = lambda name, value: DIMENSIONS[name].show(value)  # noqa: E731
        panels = tuple((n, v) for n, v in the_spec.dimensions if n not in (x, y))
        outputs.put(plot, plot_grid_line(rows, x, margin_ms=margin, show=show) if y is None else
                    plot_grid(rows, x, y, panels, margin_ms=margin, show=show), "--plot")
    outputs.commit()
    render(result, base, json)


def override(spec: GridSpec, **flags) -> GridSpec:
    """The grid file's settings with every flag that was given in their place."""
    given = {key: value for key, value in flags.items() if value is not None}
    within("--target-rate", given.get("target_rate"), 0, limits.MAX_RATE_RPS, above=True)
    within("--seeds", given.get("seeds"), 1, limits.MAX_RUNS)
    within("--max-rounds", given.get("max_rounds"), 1, limits.MAX_CHECKS)
    within("--seed", given.get("seed"), 0, limits.MAX_SEED)
    return replace(spec, **given)


def heatmap_axes(spec: GridSpec, text: str | None) -> tuple[str, str | None]:
    """The heatmap's two dimensions: ``--plot-axes X,Y`` or the grid's first two; a grid of one
    dimension is drawn along it (Y None)."""
    names = [name for name, _ in spec.dimensions]
    if text is None:
        return (names[0], None) if len(names) == 1 else (names[0], names[1])
    axes = [a.strip() for a in text.split(",")]
    if len(axes) != 2 or axes[0] == axes[1] or any(a not in names for a in axes):
        raise PdplanError(f"--plot-axes must name two of the grid's dimensions ({', '.join(names)}), got {text!r}",
                          field="plot_axes")
    return axes[0], axes[1]


def load_base(spec: GridSpec, *, ttft: str | None, tpot: str | None, attainment: float | None, margin_ms: float,
              budget: float | None, cache_dir: Path | None, use_cache: bool, timing: dict) -> Base:
    """The loaded inputs every cell starts from; ``timing`` holds the profile source's engine, engine version,
    composition, speculative decoding and MoE activation precision (:func:`pdplan.cli.options.profile_source`)."""
    workload = load_workload(spec.trace, None, spec.seed)
    hashed = workload.has_prefix_hashes or any(name == "prefix_hit" for name, _ in spec.dimensions)
    notice = routing_notice(spec.router, hashed)
    if notice is not None:
        stderr.print(f"notice: {notice}", markup=False, highlight=False)
    rate = target_rate(workload, spec.trace, given=spec.target_rate)
    slo = slo_from_flags(parse_threshold_s(ttft, "ttft") if ttft else spec.slo["ttft_ms"] / 1e3,
                         parse_threshold_s(tpot, "tpot") if tpot else spec.slo["tpot_ms"] / 1e3,
                         spec.slo["attainment"] if attainment is None else attainment)
    return Base(workload=workload, model=get_model(spec.model),
                cluster=load_cluster(spec.cluster or default_cluster_path()),
                profiles=profile_source(spec.profiles, **timing), slo=slo, target_rps=rate, fleet=spec.fleet,
                affinity=spec.affinity, failure_policy=spec.failure_policy, router=spec.router, runs=spec.seeds,
                max_checks=spec.max_rounds, seed=spec.seed, margin_ms=margin_ms, budget_usd_per_hour=budget,
                cache_dir=None if cache_dir is None else str(cache_dir), use_cache=use_cache)
