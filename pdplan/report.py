"""Plots for people: PNG figures written atomically (a picture where it beats a table)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt  # noqa: E402

from pdplan.errors import PdplanError  # noqa: E402
from pdplan.goodput import Probe  # noqa: E402


def save_figure(fig, path: str | Path) -> None:
    """Save a figure as PNG via a temp file and a rename, so no partial image is left behind."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".png", dir=target.parent)
    except OSError as err:
        raise PdplanError(f"cannot write plot: {err.strerror}", file=path) from None
    os.close(fd)
    try:
        # Fixed metadata keeps the bytes identical across runs.
        fig.savefig(tmp, format="png", dpi=120, metadata={"Software": None})
        os.replace(tmp, target)
    finally:
        plt.close(fig)
        Path(tmp).unlink(missing_ok=True)


def plot_attainment_curve(probes: Sequence[Probe], goodput_rps: float, target: float,
                          title: str, path: str | Path) -> None:
    """Attainment a(λ) per clock and joint, the attainment target p, and the goodput found."""
    rates = [p.rate_rps for p in probes]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, values in (("TTFT", [p.attainment_ttft for p in probes]),
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
