"""Collective-communication cost: the α–β model, its fit, and the shipped constants."""

import numpy as np
import pytest

from pdplan.errors import PdplanError
from pdplan.hardware import gpu_catalog
from pdplan.network import (
    calibrate,
    collective_time_s,
    fit_alpha_beta,
    load_measurements,
    network_for,
    transfer_factor,
)


def test_ring_all_reduce_moves_two_n_minus_one_over_n_of_the_buffer():
    assert transfer_factor("all_reduce", 2) == 1.0
    assert transfer_factor("all_reduce", 8) == 1.75


def test_send_recv_moves_the_buffer_once():
    assert transfer_factor("send_recv", 2) == 1.0


def test_collective_time_is_alpha_plus_bytes_over_beta():
    """8-GPU ring, 64 MiB, α = 30 µs, β = 350 GB/s: 30 µs + 1.75 · 67108864 / 3.5e11 s."""
    t = collective_time_s(30e-6, 350e9, "all_reduce", 8, 64 * 2**20)
    assert t == pytest.approx(30e-6 + 1.75 * 67108864 / 3.5e11, rel=1e-12)


def test_fit_recovers_alpha_and_beta_from_exact_times():
    sizes = np.array([2048, 65536, 2**20, 2**24, 2**26], dtype=float)
    times = 25e-6 + 1.75 * sizes / 300e9
    alpha, beta = fit_alpha_beta(sizes, times, 1.75)
    assert alpha == pytest.approx(25e-6, rel=1e-9)
    assert beta == pytest.approx(300e9, rel=1e-9)


def test_all_reduce_over_one_gpu_is_free():
    assert network_for("h100-80gb").all_reduce_s(1, 2**20) == 0.0


def test_all_reduce_uses_the_shipped_fit_for_its_group():
    net = network_for("h100-80gb")
    fit = net.fit_for("all_reduce", 8, intra_node=True)
    size = 16 * 2**20
    assert net.all_reduce_s(8, size) == pytest.approx(fit.alpha_s + 1.75 * size / fit.beta_bytes_per_s)


def test_unmeasured_group_size_uses_the_next_larger_group_with_its_own_ring_factor():
    net = network_for("a100-80gb")
    fit8 = net.fit_for("all_reduce", 8, intra_node=True)
    assert net.fit_for("all_reduce", 6, intra_node=True) is fit8
    assert net.all_reduce_s(6, 1e6) == pytest.approx(fit8.alpha_s + (10 / 6) * 1e6 / fit8.beta_bytes_per_s)


def test_cross_node_send_is_slower_than_in_node_for_a_large_message():
    net = network_for("a100-80gb")
    assert net.send_recv_s(64 * 2**20, intra_node=False) > 10 * net.send_recv_s(64 * 2**20, intra_node=True)


def test_unmeasured_scope_is_refused_not_extrapolated():
    with pytest.raises(PdplanError, match=r"no inter-node all-reduce measurement for 16 GPUs on "
                                          r"h100_dgx \(GPU h100-80gb; measured group sizes: none\)"):
        network_for("h100-80gb").all_reduce_s(16, 1e6, intra_node=False)


def test_group_larger_than_any_measured_is_refused():
    with pytest.raises(PdplanError, match="measured group sizes: 2, 4, 8"):
        network_for("h100-80gb").all_reduce_s(16, 1e6)


def test_every_catalog_gpu_has_network_constants():
    assert sorted(g for g in gpu_catalog() if network_for(g)) == sorted(gpu_catalog())


@pytest.mark.parametrize("gpu", ["h200-141gb", "h100-80gb-pcap"])
def test_stand_in_gpus_say_they_use_h100_constants(gpu):
    net = network_for(gpu)
    assert net.system == "h100_dgx"
    assert "not measured" in net.note and "h100-80gb's constants" in net.note


def test_unknown_gpu_is_refused_by_name():
    with pytest.raises(PdplanError, match=r"no collective-communication constants for GPU 'tpu-v5' "
                                          r"\(known: a100-80gb, b200-180gb, b300-288gb, gb200-185gb, gb300-288gb, "
                                          r"h100-80gb, h100-80gb-pcap, h200-141gb\)"):
        network_for("tpu-v5")


def test_measurement_file_without_the_time_column_names_it(tmp_path):
    path = tmp_path / "all_reduce.csv"
    path.write_text("num_workers,size,devices_per_node\n2,2048,2\n")
    with pytest.raises(PdplanError, match=r"all_reduce.csv: missing column 'time_stats.all_reduce.mean'"):
        load_measurements(path, "all_reduce")


def test_measurement_file_with_a_bad_size_names_the_row(tmp_path):
    path = tmp_path / "send_recv.csv"
    path.write_text("num_workers,size,devices_per_node,time_stats.send_recv.mean\n"
                    "2,2048,2,0.01\n2,-5,2,0.02\n")
    with pytest.raises(PdplanError, match=r"send_recv.csv:3: size must be a number > 0, got -5"):
        load_measurements(path, "send_recv")


# --- against the measurements (../shared/data) ----------------------------------------------------

@pytest.fixture(scope="module")
def fresh_fits(shared_data):
    fits, sources = calibrate(shared_data / "network")
    return {(f.system, f.collective, f.scope, f.num_workers): f for f in fits}, sources


def test_shipped_constants_are_the_fit_of_the_data(fresh_fits):
    fits, sources = fresh_fits
    shipped = {(f.system, f.collective, f.scope, f.num_workers): f
               for gpu in ("a100-80gb", "h100-80gb") for f in network_for(gpu).fits}
    assert shipped.keys() == fits.keys()
    for key, fit in fits.items():
        assert shipped[key].alpha_s == pytest.approx(fit.alpha_s, rel=1e-3, abs=1e-10), key
        assert shipped[key].beta_bytes_per_s == pytest.approx(fit.beta_bytes_per_s, rel=1e-3), key


def test_in_node_all_reduce_reproduces_measured_means_within_12_percent(shared_data):
    """Mean absolute relative error of the shipped α–β ring model over every measured size."""
    for system, gpu in (("a100_dgx", "a100-80gb"), ("h100_dgx", "h100-80gb")):
        frame = load_measurements(shared_data / "network" / system / "all_reduce.csv", "all_reduce")
        inside = frame[frame.devices_per_node == frame.num_workers]
        net = network_for(gpu)
        for n, group in inside.groupby("num_workers"):
            predicted = np.array([net.all_reduce_s(int(n), s) for s in group["size"]])
            mape = np.abs(predicted / group["time_s"].to_numpy() - 1).mean()
            assert mape <= 0.12, (system, n, mape)


def test_every_measured_group_is_fitted_within_30_percent(fresh_fits):
    fits, _ = fresh_fits
    assert len(fits) == 14
    assert max(f.mape for f in fits.values()) <= 0.30
