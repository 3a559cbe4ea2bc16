"""Plots for people: PNG figures as bytes, written by the command's outputs (a picture where it
beats a table)."""

from __future__ import annotations

import io
import itertools
import math
from functools import cache
from typing import TYPE_CHECKING, Sequence

from pdplan.goodput import Probe

if TYPE_CHECKING:
    from pdplan.planner.curves import PlanBar


@cache
def _pyplot():
    """matplotlib's pyplot on the file-only Agg backend (never a window), imported by the first plot: it
    costs a third of a second, which commands that draw nothing should not pay at start-up."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _patch(colour: str, label: str):
    """A legend entry: a swatch of ``colour`` named ``label``."""
    from matplotlib.patches import Patch

    return Patch(color=colour, label=label)


def figure_png(fig) -> bytes:
    """A figure as PNG bytes, closed afterwards; fixed metadata keeps the bytes identical across runs."""
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=120, metadata={"Software": None})
    finally:
        _pyplot().close(fig)
    return buffer.getvalue()


def plot_attainment_curve(probes: Sequence[Probe], goodput_rps: float, target: float,
                          title: str, *, ttft_label: str = "TTFT") -> bytes:
    """Attainment a(λ) per clock and joint, the attainment target p, and the goodput found; a probe
    whose run stopped once its miss was settled is a cross at 0 (its shares are only bounds).

    ``ttft_label`` names what the TTFT clock measured (a decode instance alone: its admission wait).
    """
    whole = [p for p in probes if not p.stopped_early]  # a stopped probe's shares are only bounds
    rates = [p.rate_rps for p in whole]
    fig, ax = _pyplot().subplots(figsize=(7, 4.2))
    for label, values in ((ttft_label, [p.attainment_ttft for p in whole]),
                          ("TPOT", [p.attainment_tpot for p in whole]),
                          ("joint", [p.attainment_joint for p in whole])):
        if any(v is not None for v in values):
            ax.plot(rates, [float("nan") if v is None else v for v in values], marker="o", label=label)
    stopped = [p.rate_rps for p in probes if p.stopped_early]
    if stopped:
        ax.plot(stopped, [0.0] * len(stopped), linestyle="none", marker="x", color="black",
                label="missed (run stopped once settled)")
    ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target:g}")
    ax.axvline(goodput_rps, color="black", linestyle=":", linewidth=1,
               label=f"goodput {goodput_rps:.3g} rps")
    ax.set_xlabel("offered rate (requests/s)")
    ax.set_ylabel("attainment")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower left")
    fig.tight_layout()
    return figure_png(fig)


#: Bar colour per kind of plan in the fleets plot.
KIND_COLOURS = {"disaggregated": "tab:blue", "disaggregated, mixed machines allowed": "tab:green",
                "colocated": "tab:orange"}


def plot_fleets(bars: Sequence[PlanBar]) -> bytes:
    """Cost and power of every fleet's plans, one bar per kind of plan (the bars of
    :func:`pdplan.planner.curves.fleet_bars`). A plan that misses the SLO end to end is hatched
    and labelled MISSES; a kind with no plan says so; the chosen plan's bars are outlined and
    labelled "chosen" in both panels.
    """
    fleets = list(dict.fromkeys(b.fleet for b in bars))
    kinds = [k for k in KIND_COLOURS if any(b.kind == k for b in bars)]
    names = [f.replace("/", "/\n") for f in fleets]
    fig, (cost_ax, power_ax) = _pyplot().subplots(1, 2, figsize=(max(9, 1.4 * len(names) + 3), 4.4))
    width = 0.8 / max(1, len(kinds))
    for ax, value, scale in ((cost_ax, "usd_per_hour", 1.0), (power_ax, "power_w", 1e-3)):
        top = max([(getattr(b, value) or 0) * scale for b in bars] + [1e-9])
        for bar in bars:
            x = fleets.index(bar.fleet) + (kinds.index(bar.kind) - (len(kinds) - 1) / 2) * width
            height = (getattr(bar, value) or 0) * scale
            drawn = ax.bar(x, height, width, color=KIND_COLOURS[bar.kind])[0]
            if getattr(bar, value) is None:
                ax.text(x, 0.02 * top, "no plan", rotation=90, ha="center", va="bottom", fontsize=8)
            elif not bar.passes:
                drawn.set_hatch("//")
                drawn.set_edgecolor("tab:red")
                ax.text(x, height + 0.02 * top, "MISSES", ha="center", va="bottom", fontsize=8, color="tab:red",
                        rotation=90)
            if bar.chosen:
                drawn.set_edgecolor("black")
                drawn.set_linewidth(2)
                ax.annotate("chosen", (x, height + 0.02 * top), ha="center", va="bottom", fontsize=9,
                            fontweight="bold")
        ax.set_ylim(0, top * 1.25)
        ax.set_xticks(range(len(names)), names, fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    cost_ax.set_ylabel("USD per hour")
    power_ax.set_ylabel("kW at power limits")
    fig.legend(handles=[_patch(KIND_COLOURS[k], k) for k in kinds], loc="lower center", ncol=len(kinds),
               fontsize=8)
    fig.suptitle("Fleets at the target rate (hatched: misses the SLO end to end)")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return figure_png(fig)


#: Decision colours of the sensitivity heatmap.
DECISION_COLOURS = {"ENABLE_PD": "#4daf4a", "COLOCATE": "#377eb8", "INFEASIBLE": "#bdbdbd"}
#: Inches per heatmap panel (width, height); the PNG is this times the panel grid at 120 dpi.
PANEL_INCHES = (4.8, 3.6)


def plot_grid(rows: Sequence[dict], x: str, y: str, panels: Sequence[tuple[str, tuple]],
              *, margin_ms: float, show) -> bytes:
    """A sensitivity heatmap over dimensions ``x`` and ``y``: each cell coloured by its decision
    and labelled with ΔT in ms and what each mode's plan costs (:func:`cell_text`); one panel per
    setting of the ``panels`` dimensions. ``show(name, value)`` writes a coordinate as people
    read it."""
    settings = panel_settings(panels)
    columns = min(3, len(settings))
    lines = -(-len(settings) // columns)
    fig, axes = _pyplot().subplots(lines, columns, squeeze=False,
                                   figsize=(PANEL_INCHES[0] * columns, PANEL_INCHES[1] * lines + 0.6))
    xs = _ordered(rows, x)
    ys = _ordered(rows, y)
    for ax, fixed in zip(axes.flat, settings):
        chosen = [r for r in rows if all(r[name] == value for name, value in fixed)]
        for row in chosen:
            i, j = xs.index(row[x]), ys.index(row[y])
            ax.add_patch(_pyplot().Rectangle((i - 0.5, j - 0.5), 1, 1, facecolor=DECISION_COLOURS[row["decision"]],
                                             edgecolor="white", linewidth=2))
            ax.text(i, j, cell_text(row), ha="center", va="center", fontsize=8, linespacing=1.3)
        ax.set_xlim(-0.5, len(xs) - 0.5)
        ax.set_ylim(-0.5, len(ys) - 0.5)
        ax.set_xticks(range(len(xs)), [show(x, v) for v in xs])
        ax.set_yticks(range(len(ys)), [show(y, v) for v in ys])
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.set_title(", ".join(f"{name} {show(name, value)}" for name, value in fixed), fontsize=9)
    for ax in list(axes.flat)[len(settings):]:
        ax.set_visible(False)
    fig.legend(handles=[_patch(c, d) for d, c in DECISION_COLOURS.items()], loc="lower center",
               ncol=3, fontsize=9)
    compared = "verified rate within the budget" if any(r["compare"] == "budget" for r in rows) else "cost per hour"
    fig.suptitle(f"P/D net margin ΔT per request, ms (margin {margin_ms:g} ms)\nand each mode's {compared}",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return figure_png(fig)


#: Size of the one-dimension sensitivity plot, inches at 120 dpi.
LINE_INCHES = (7.0, 4.4)


def plot_grid_line(rows: Sequence[dict], x: str, *, margin_ms: float, show) -> bytes:
    """A sensitivity grid of one dimension ``x``: ΔT per request (ms) along it, each cell a marker
    coloured by its decision (a hollow one at 0 where ΔT does not exist) and labelled with each
    mode's cost per hour or verified rate (:func:`cell_text`), and the declared margin dashed."""
    xs = _ordered(rows, x)
    fig, ax = _pyplot().subplots(figsize=LINE_INCHES)
    deltas = [r["delta_t_ms"] for r in rows]
    known = [(xs.index(r[x]), d) for r, d in zip(rows, deltas) if d is not None]
    if known:
        ax.plot(*zip(*known), color="#555555", linewidth=1, zorder=1)
    for row, delta in zip(rows, deltas):
        i = xs.index(row[x])
        colour = DECISION_COLOURS[row["decision"]]
        ax.scatter([i], [delta or 0.0], s=80, zorder=2, edgecolors=colour,
                   facecolors=colour if delta is not None else "none", linewidths=2)
        ax.annotate(cell_text(row), (i, delta or 0.0), textcoords="offset points", xytext=(0, 10), ha="center",
                    fontsize=7, linespacing=1.2)
    ax.axhline(margin_ms, color="#984ea3", linestyle="--", linewidth=1, label=f"margin {margin_ms:g} ms")
    ax.set_xticks(range(len(xs)), [show(x, v) for v in xs])
    ax.set_xlim(-0.5, len(xs) - 0.5)
    ax.set_xlabel(x)
    ax.set_ylabel("ΔT per request, ms (positive: P/D faster)")
    ax.margins(y=0.35)
    ax.grid(True, alpha=0.3)
    handles = [_patch(c, d) for d, c in DECISION_COLOURS.items()]
    ax.legend(handles=[*handles, *ax.get_legend_handles_labels()[0]], fontsize=8, loc="best")
    compared = "verified rate within the budget" if any(r["compare"] == "budget" for r in rows) else "cost per hour"
    ax.set_title(f"P/D net margin ΔT along {x}, and each mode's {compared}", fontsize=10)
    fig.tight_layout()
    return figure_png(fig)


def cell_text(row: dict) -> str:
    """A heatmap cell's label: ΔT in ms, then what decides beside it for each mode's plan, its
    cost per hour (or, comparing within a budget, its verified rate); "—" where there is none."""
    delta = row["delta_t_ms"]
    lines = ["ΔT —" if delta is None else f"ΔT {delta:+.1f}"]
    for mode, prefix in (("colocated", "colocated"), ("P/D", "pd")):
        if row["compare"] == "budget":
            rate = row[f"{prefix}_rate_rps"]
            lines.append(f"{mode} " + ("—" if rate is None else f"{rate:.3g} req/s"))
        else:
            usd = row[f"{prefix}_usd_per_hour"]
            lines.append(f"{mode} " + ("—" if usd is None else f"${usd:,.2f}"))
    return "\n".join(lines)


def panel_settings(panels: Sequence[tuple[str, tuple]]) -> list[tuple[tuple[str, object], ...]]:
    """Every setting of the panel dimensions (one empty setting when there are none)."""
    names = [name for name, _ in panels]
    return [tuple(zip(names, values)) for values in itertools.product(*(v for _, v in panels))]


def _ordered(rows: Sequence[dict], name: str) -> list:
    """The values of ``name`` in the order the grid lists them."""
    return list(dict.fromkeys(r[name] for r in rows))


#: Size of the optimize plots, inches at 120 dpi.
SHAPES_INCHES = (10.0, 5.0)
COST_INCHES = (7.0, 4.4)


def plot_goodput_per_gpu(shapes: Sequence) -> bytes:
    """Per-instance goodput per GPU of every measured shape, one panel per phase, best first (the
    ``goodput_per_gpu`` of :mod:`pdplan.planner.curves`); the shapes the answer runs are
    highlighted and their labels set in bold."""
    phases = [p for p in ("prefill", "decode", "colocated") if any(s.phase == p for s in shapes)]
    fig, axes = _pyplot().subplots(1, max(1, len(phases)), figsize=SHAPES_INCHES, squeeze=False)
    for ax, phase in zip(axes.flat, phases):
        mine = sorted((s for s in shapes if s.phase == phase), key=lambda s: -s.goodput_per_gpu)
        ax.barh(range(len(mine)), [s.goodput_per_gpu for s in mine],
                color=["tab:orange" if s.chosen else "tab:blue" for s in mine])
        ax.set_yticks(range(len(mine)), [s.label.removeprefix(f"{phase} ") for s in mine], fontsize=6)
        for tick, shape in zip(ax.get_yticklabels(), mine):
            if shape.chosen:
                tick.set_fontweight("bold")
        ax.invert_yaxis()
        ax.set_title(phase)
        ax.grid(True, axis="x", alpha=0.3)
    fig.supxlabel("goodput per GPU (req/s), one instance alone", fontsize=10)
    fig.suptitle("Simulated per-instance goodput per GPU by shape")
    if any(s.chosen for s in shapes):
        fig.legend(handles=[_patch("tab:orange", "shape of the chosen plan")], loc="upper right",
                   fontsize=8)
    fig.tight_layout()
    return figure_png(fig)


def plot_cost_vs_rate(curves: dict, verified: dict, target_rps: float) -> bytes:
    """The integer program's cheapest cost per rate for each mode (``curves``: mode → [(rate,
    $/h or None)]), with the plans verified end to end at the target (``verified``: mode → $/h)."""
    fig, ax = _pyplot().subplots(figsize=COST_INCHES)
    for mode, colour in (("disaggregated", "tab:blue"), ("colocated", "tab:orange")):
        points = [(r, c) for r, c in curves.get(mode, ()) if c is not None]
        if points:
            ax.plot(*zip(*points), marker=".", color=colour, label=f"{mode} (integer program)")
        if verified.get(mode) is not None:
            ax.plot([target_rps], [verified[mode]], marker="o", markersize=9, color=colour, linestyle="none",
                    label=f"{mode}, verified end to end")
    ax.axvline(target_rps, color="grey", linestyle=":", linewidth=1, label=f"target {target_rps:.3g} req/s")
    ax.set_xlabel("rate (requests/s)")
    ax.set_ylabel("USD per hour")
    ax.set_title(f"Cost versus rate of the chosen fleet: {cost_reading(curves)}", fontsize=9, wrap=True)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return figure_png(fig)


def cost_reading(curves: dict) -> str:
    """What the cost curves say, compared at the rates where both modes have a plan: the rates
    between which they cross (and whether splitting starts or stops paying there), or which mode
    costs no more over the whole range when they do not cross."""
    both = [(r, d - c) for (r, d), (_, c) in zip(curves.get("disaggregated", ()), curves.get("colocated", ()))
            if d is not None and c is not None]
    if not both:
        return "no rate where both modes have a plan"
    span = f"{both[0][0]:.3g}–{both[-1][0]:.3g} req/s"
    signed = [(r, math.copysign(1, delta)) for r, delta in both if abs(delta) > 1e-9]
    for (low, before), (high, after) in zip(signed, signed[1:]):
        if before != after:
            turn = "starts to pay" if after < 0 else "stops paying"
            return f"the curves cross between {low:.3g} and {high:.3g} req/s, where splitting {turn}"
    if signed and signed[0][1] < 0:
        return f"disaggregated costs no more than colocated at every rate of {span}"
    return f"colocated costs no more than disaggregated at every rate of {span}"


def plot_schedule(doc: dict) -> bytes:
    """Replicas per pool over the windows (steps) against each window's rate, with the static peak
    plan's GPUs beside the schedule's (the ``optimize --windows`` JSON document); the windows the
    static mean plan misses are shaded in both panels."""
    windows = doc["windows"]
    starts = [w["start_s"] / 3600 for w in windows] + [windows[-1]["end_s"] / 3600]
    fig, (pools, gpus) = _pyplot().subplots(2, 1, figsize=(9, 6), sharex=True)
    for phase in dict.fromkeys(p for w in doc["schedule"]["windows"] for p in w["replicas"]):
        counts = [w["replicas"].get(phase, 0) for w in doc["schedule"]["windows"]]
        pools.stairs(counts, starts, label=f"{phase} replicas", linewidth=2)
    rate = pools.twinx()
    rate.stairs([w["rate_rps"] for w in windows], starts, color="grey", linestyle="--", label="window rate")
    rate.set_ylabel("requests/s")
    pools.set_ylabel("replicas")
    for kind, style in (("schedule", "-"), ("static_peak", ":"), ("static_mean", "--")):
        if doc.get(kind):
            gpus.stairs([w["gpus"] for w in doc[kind]["windows"]], starts, linestyle=style,
                        label=f"{kind.replace('_', ' ')}: {doc[kind]['gpu_hours']:,.1f} GPU-h")
    for ax in (pools, gpus):
        for i, (start, end) in enumerate(static_mean_misses(doc)):
            ax.axvspan(start, end, color="tab:red", alpha=0.12, linewidth=0,
                       label="static mean plan misses" if i == 0 and ax is gpus else None)
        ax.yaxis.set_major_locator(_pyplot().MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
    pools.legend(loc="upper left", fontsize=8)
    rate.legend(loc="upper right", fontsize=8)
    gpus.set_ylabel("GPUs")
    gpus.set_xlabel("hours from the trace's first arrival")
    gpus.legend(fontsize=8)
    fig.suptitle("Replicas per window, verified window by window, against static plans")
    fig.tight_layout()
    return figure_png(fig)


def static_mean_misses(doc: dict) -> list[tuple[float, float]]:
    """(start, end) in hours of each window the static mean plan misses (none without that plan)."""
    mean = doc.get("static_mean")
    if not mean:
        return []
    return [(w["start_s"] / 3600, w["end_s"] / 3600)
            for w, judged in zip(doc["windows"], mean["windows"]) if not judged["passed"]]
