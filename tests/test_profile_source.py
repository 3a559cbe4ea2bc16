"""Which evidence times a shape: a measured profile, else a composed one, else the roofline."""

import pytest

from pdplan.errors import PdplanError
from pdplan.hardware import get_gpu
from pdplan.latency.compose import tables
from pdplan.latency.profile import shipped_profiles
from pdplan.latency.roofline import roofline_profile
from pdplan.latency.source import ProfileSource
from pdplan.modelref import get_model

needs_extra = pytest.mark.skipif(not tables.installed(), reason="composed profiles need the optional extra pdplan[aic]")
LLAMA2, LLAMA31 = get_model("llama2-70b"), get_model("llama-3.1-70b@fp8")
H100 = get_gpu("h100-80gb")


def test_a_measured_profile_is_used_for_its_own_shape():
    measured = shipped_profiles()
    assert ProfileSource(measured).profile(LLAMA2, H100, 4, 1) is measured[("llama2-70b", "h100-80gb", 4, 1)]


def test_a_measured_profile_never_stands_in_for_another_precision():
    user = roofline_profile(LLAMA2, H100, 4, 1, compute_efficiency=0.3)
    fp8 = get_model("llama2-70b@fp8")
    got = ProfileSource({user.key: user}, compose=False).profile(fp8, H100, 4, 1)
    assert got is not user and got.model == "llama2-70b@fp8"


@needs_extra
def test_an_unmeasured_shape_is_composed_for_the_chosen_engine():
    got = ProfileSource(shipped_profiles(), engine="sglang").profile(LLAMA31, H100, 4, 1)
    assert got.provenance.source == "composed" and got.provenance.method.startswith("sglang:")


def test_without_the_extra_an_unmeasured_shape_falls_back_to_the_roofline_and_says_why(monkeypatch):
    monkeypatch.setattr(tables, "installed", lambda: False)
    source = ProfileSource(shipped_profiles())
    assert source.profile(LLAMA31, H100, 4, 1).provenance.source == "roofline"
    assert source.fallback_reason(LLAMA31.name, "h100-80gb", 4, 1) == \
        "operator tables not installed (pip install 'pdplan[aic]')"
    assert "rooflines (Splitwise 2023 calibration) (operator tables not installed" in source.describe()


@needs_extra
def test_a_gpu_without_tables_falls_back_to_the_roofline_with_the_reason():
    source = ProfileSource({})
    assert source.profile(LLAMA2, get_gpu("h100-80gb-pcap"), 4, 1).provenance.source == "roofline"
    assert "no AIConfigurator operator data for h100-80gb-pcap" in source.fallback_reason(
        "llama2-70b", "h100-80gb-pcap", 4, 1)


@needs_extra
def test_an_engine_version_the_user_asked_for_must_exist():
    with pytest.raises(PdplanError, match=r"no vllm 0.9.0 operator data for h100-80gb"):
        ProfileSource({}, engine_version="0.9.0").profile(LLAMA31, H100, 4, 1)


def test_composition_off_means_measured_else_roofline():
    source = ProfileSource({}, compose=False)
    assert source.profile(LLAMA31, H100, 4, 1).provenance.source == "roofline"
    assert source.fallback_reason(LLAMA31.name, "h100-80gb", 4, 1) is None


def test_an_unknown_engine_is_refused_with_the_known_ones():
    with pytest.raises(PdplanError, match=r"unknown engine 'tgi' \(known: vllm, sglang, trtllm\)"):
        ProfileSource({}, engine="tgi")


def test_user_profiles_add_to_the_shipped_ones_and_win_where_both_have_a_shape(tmp_path):
    from pdplan.cli.options import measured_profiles
    from pdplan.latency.profile import save_profile

    mine = roofline_profile(LLAMA2, H100, 4, 1, compute_efficiency=0.3)   # a shape the shipped set has
    new = roofline_profile(LLAMA2, H100, 8, 2)                             # and one it lacks
    for profile in (mine, new):
        save_profile(profile, tmp_path / f"{profile.tp}_{profile.pp}.yaml")
    merged = measured_profiles(tmp_path)
    assert set(shipped_profiles()) | {new.key} == set(merged)
    assert merged[mine.key].prefill_time_s([2048]) == pytest.approx(mine.prefill_time_s([2048]), rel=1e-5)
    assert merged[("llama2-70b", "a100-80gb", 4, 1)] is shipped_profiles()[("llama2-70b", "a100-80gb", 4, 1)]


@needs_extra
def test_a_composed_profile_comes_back_from_the_cache_unchanged(tmp_path):
    from pdplan.cache import ResultCache
    from pdplan.latency.profile import profile_to_dict

    cold, warm = ResultCache(tmp_path), ResultCache(tmp_path)
    first = ProfileSource({}).profile(LLAMA31, H100, 4, 1, cache=cold)
    again = ProfileSource({}).profile(LLAMA31, H100, 4, 1, cache=warm)
    assert (cold.hits, cold.misses, warm.hits, warm.misses) == (0, 1, 1, 0)
    assert profile_to_dict(again) == profile_to_dict(first)
