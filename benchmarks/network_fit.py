"""Fit the collective-communication constants and print the calibration table.

    python benchmarks/network_fit.py [DATA_FOLDER] [--write]

DATA_FOLDER defaults to ../shared/data (the development workspace). ``--write`` regenerates
pdplan/catalog/network.yaml from the fit; without it the script only prints, and checks that
the shipped file matches what the data give.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pdplan.hardware import gpu_catalog
from pdplan.network import GPU_SYSTEMS, calibrate, load_network, network_catalog_path, save_network

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    write = "--write" in argv
    args = [a for a in argv if a != "--write"]
    data = Path(args[0]) if args else ROOT.parent / "shared" / "data"
    fits, sources = calibrate(data / "network")

    gpus = gpu_catalog()
    header = (f"{'system':9} {'collective':10} {'scope':10} {'n':>3} {'nodes':>5} {'alpha_us':>9} "
              f"{'beta_GB/s':>9} {'link_eff':>8} {'points':>6} {'MAPE':>6} {'max_err':>7}")
    print(header)
    print("-" * len(header))
    for f in fits:
        spec_gpu = gpus[{"a100_dgx": "a100-80gb", "h100_dgx": "h100-80gb"}[f.system]]
        link = spec_gpu.nvlink_bytes_per_s if f.scope == "intra_node" else spec_gpu.network_bytes_per_s
        print(f"{f.system:9} {f.collective:10} {f.scope:10} {f.num_workers:3d} "
              f"{f.num_workers // f.devices_per_node:5d} {f.alpha_s * 1e6:9.1f} "
              f"{f.beta_bytes_per_s / 1e9:9.1f} {f.beta_bytes_per_s / link:8.2f} {f.points:6d} "
              f"{f.mape:6.1%} {f.max_error:7.1%}")
    worst = max(fits, key=lambda f: f.mape)
    print(f"\nworst group MAPE {worst.mape:.1%} ({worst.system} {worst.collective} "
          f"{worst.scope} n={worst.num_workers}); link_eff = beta / catalog link bandwidth")
    for gpu, (system, note) in GPU_SYSTEMS.items():
        print(f"  {gpu:15} -> {system}: {note}")

    path = network_catalog_path()
    if write:
        save_network(fits, sources, path)
        print(f"\nwrote {path}")
        return 0
    shipped = load_network(path)
    fresh = {(f.system, f.collective, f.scope, f.num_workers): f for f in fits}
    stale = [key for net in shipped.values() for f in net.fits
             for key in [(f.system, f.collective, f.scope, f.num_workers)]
             if key not in fresh or abs(fresh[key].alpha_s - f.alpha_s) > 1e-9 + 1e-3 * f.alpha_s
             or abs(fresh[key].beta_bytes_per_s / f.beta_bytes_per_s - 1) > 1e-3]
    print("\nshipped network.yaml " + ("matches the data" if not stale else f"is STALE: {stale[:3]}"))
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
