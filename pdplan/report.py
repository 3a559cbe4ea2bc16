"""Plots for people: PNG figures written atomically (a picture where it beats a table)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt  # noqa: E402

from pdplan.fileio import atomic_output  # noqa: E402
from pdplan.goodput import Probe  # noqa: E402


def save_figure(fig, path: str | Path) -> None:
    """Save a figure as PNG atomically; fixed metadata keeps the bytes identical across runs."""
    try:
        with atomic_output(path, suffix=".png") as tmp:
            fig.savefig(tmp, format="png", dpi=120, metadata={"Software": None})
    finally:
        plt.close(fig)


def plot_attainment_curve(probes: Sequence[Probe], goodput_rps: float, target: float,
                          title: str, path: str | Path, *, ttft_label: str = "TTFT") -> None:
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
    save_figure(fig, path)
