"""Plots for people: PNG figures as bytes, written by the command's outputs (a picture where it
beats a table)."""

from __future__ import annotations

import io
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt  # noqa: E402

from pdplan.goodput import Probe  # noqa: E402


def figure_png(fig) -> bytes:
    """A figure as PNG bytes, closed afterwards; fixed metadata keeps the bytes identical across runs."""
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=120, metadata={"Software": None})
    finally:
        plt.close(fig)
    return buffer.getvalue()


def plot_attainment_curve(probes: Sequence[Probe], goodput_rps: float, target: float,
                          title: str, *, ttft_label: str = "TTFT") -> bytes:
    """Attainment a(λ) per clock and joint, the attainment target p, and the goodput found.

    ``ttft_label`` names what the TTFT clock measured (a decode instance alone: its admission wait).
    """
    rates = [p.rate_rps for p in probes]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, values in ((ttft_label, [p.attainment_ttft for p in probes]),
                          ("TPOT", [p.attainment_tpot for p in probes]),
                          ("joint", [p.attainment_joint for p in probes])):
        if any(v is not None for v in values):
            ax.plot(rates, [float("nan") if v is None else v for v in values], marker="o", label=label)
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


def plot_fleets(fleets: Sequence[dict], *, winner: str | None = None) -> bytes:
    """Cost and power per fleet, disaggregated beside colocated (the ``fleets`` rows of optimize).

    A fleet whose disaggregated plan misses the SLO end to end is hatched and labelled MISSES; an
    infeasible one has no bar and says so; the chosen fleet is labelled "chosen".
    """
    names = [f["alias"] or f["fleet"].replace("/", "/\n") for f in fleets]
    x = list(range(len(names)))
    fig, (cost_ax, power_ax) = plt.subplots(1, 2, figsize=(max(9, 1.4 * len(names) + 3), 4.4))
    width = 0.38
    bars = cost_ax.bar([i - width / 2 for i in x], [f["cost_per_hour"] or 0 for f in fleets], width,
                       label="disaggregated")
    cost_ax.bar([i + width / 2 for i in x], [f["colocated_cost_per_hour"] or 0 for f in fleets], width,
                label="colocated")
    power = power_ax.bar(x, [(f["power_w"] or 0) / 1e3 for f in fleets], width * 1.5, color="tab:orange")
    top = max([f["cost_per_hour"] or 0 for f in fleets] + [f["colocated_cost_per_hour"] or 0 for f in fleets] + [1])
    for i, f in enumerate(fleets):
        if not f["feasible"]:
            cost_ax.text(i, 0.02 * top, "infeasible", rotation=90, ha="center", va="bottom", fontsize=8)
        elif not f["meets_slo"]:
            for bar in (bars[i], power[i]):
                bar.set_hatch("//")
                bar.set_edgecolor("tab:red")
            cost_ax.text(i - width / 2, (f["cost_per_hour"] or 0) + 0.02 * top, "MISSES", ha="center",
                         va="bottom", fontsize=8, color="tab:red", rotation=90)
        if winner is not None and f["fleet"] == winner:
            cost_ax.annotate("chosen", (i, top * 1.02), ha="center", fontsize=9, fontweight="bold")
    cost_ax.set_ylim(0, top * 1.15)
    cost_ax.set_ylabel("USD per hour")
    power_ax.set_ylabel("kW (disaggregated, at power limits)")
    for ax in (cost_ax, power_ax):
        ax.set_xticks(x, names, fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    cost_ax.legend(loc="lower left")
    fig.suptitle("Fleets at the target rate (hatched: misses the SLO end to end)")
    fig.tight_layout()
    return figure_png(fig)
