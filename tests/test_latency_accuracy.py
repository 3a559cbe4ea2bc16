"""How a latency source measures up against measured deployments: the rows pdplan ships from its
replay of NVIDIA's silicon_sample.csv (benchmarks/silicon_validation.py --accuracy-out), and what a
plan reports from them."""

import json
import statistics
from importlib import resources

import pytest
import yaml

from pdplan.errors import PdplanError
from pdplan.latency.accuracy import KEY, Accuracy, accuracy_for, layout_of
from pdplan.latency.compose import tables


def shipped() -> dict:
    return json.loads((resources.files("pdplan") / "data" / "silicon_accuracy.json").read_text())


def group(source: str, engine: str, family: str, layout: str) -> dict:
    return next(g for g in shipped()["groups"] if tuple(g[k] for k in KEY) == (source, engine, family, layout))


def test_the_shipped_rows_are_grouped_by_source_engine_family_and_layout():
    doc = shipped()
    assert "silicon_sample.csv" in doc["measurements"]
    groups = doc["groups"]
    assert len({tuple(g[k] for k in KEY) for g in groups}) == len(groups)
    assert sum(len(g["ttft_error"]) for g in groups) > 2000
    assert {g["engine"] for g in groups} == {"vllm", "sglang", "trtllm"}
    assert {g["family"] for g in groups} == {"dense", "moe"}
    assert {g["layout"] for g in groups} <= {"agg", "agg-dp", "disagg"}
    for g in groups:
        assert len(g["ttft_error"]) == len(g["tpot_error"]) > 0
        assert min(g["ttft_error"] + g["tpot_error"]) > -1  # simulated / measured − 1


@pytest.mark.parametrize("key", [("composed", "vllm", "dense", "agg"), ("composed", "sglang", "moe", "disagg"),
                                 ("composed", "trtllm", "moe", "agg")])
def test_a_pools_figures_are_the_median_and_p90_of_the_rows_like_it(key):
    source, engine, family, layout = key
    rows = group(*key)
    found = accuracy_for(source, engine, family == "moe", layout, engine_rooflines=False)
    assert found.rows == len(rows["ttft_error"]) > 0
    for clock, error in (("ttft", found.ttft), ("tpot", found.tpot)):
        signed = rows[f"{clock}_error"]
        absolute = [abs(x) for x in signed]
        assert error.median == pytest.approx(statistics.median(absolute))
        assert error.bias == pytest.approx(statistics.median(signed))
        if len(absolute) > 1:  # the 90th percentile with linear interpolation between order statistics
            assert error.p90 == pytest.approx(statistics.quantiles(absolute, n=10, method="inclusive")[8])


def test_the_aggregated_moe_rows_one_instance_replays_meet_the_moe_issues_targets():
    """Every aggregated mixture-of-experts row replayed on one instance of TP (composed, every engine): median
    absolute error at most 30% for mean TTFT and 20% for mean TPOT, nothing fitted to them. The file is what the
    simulator gives today (the slow test below replays a row of each group)."""
    rows = [g for g in shipped()["groups"] if (g["source"], g["family"], g["layout"]) == ("composed", "moe", "agg")]
    ttft = [abs(x) for g in rows for x in g["ttft_error"]]
    tpot = [abs(x) for g in rows for x in g["tpot_error"]]
    assert len(ttft) >= 900 and {g["engine"] for g in rows} == {"vllm", "sglang", "trtllm"}
    assert statistics.median(ttft) <= 0.30 and statistics.median(tpot) <= 0.20


def test_measured_and_calibrated_profiles_were_never_replayed():
    for source in ("measured", "calibrated"):
        assert accuracy_for(source, "vllm", False, "agg", engine_rooflines=False) is None


def test_a_roofline_with_the_engines_efficiencies_reads_the_rows_replayed_with_them():
    fitted = accuracy_for("roofline", "vllm", False, "agg", engine_rooflines=True)
    splitwise = accuracy_for("roofline", "vllm", False, "agg", engine_rooflines=False)
    assert fitted.source == "roofline-engine" and splitwise.source == "roofline"
    assert fitted.tpot != splitwise.tpot


def test_a_pools_layout_is_the_validations():
    assert layout_of("colocated", 1) == "agg"
    assert layout_of("colocated", 8) == "agg-dp"
    assert {layout_of(phase, 1) for phase in ("prefill", "decode", "mixed")} == {"disagg"}


def test_an_accuracy_reads_back_from_its_dict():
    found = accuracy_for("composed", "sglang", True, "disagg", engine_rooflines=False)
    assert Accuracy.from_dict(found.to_dict()) == found


def test_the_sentence_says_which_way_the_simulated_clock_errs():
    found = accuracy_for("composed", "sglang", True, "disagg", engine_rooflines=False)
    text = found.describe()
    assert f"{found.rows} measured deployments of moe models, disaggregated" in text
    assert f"simulated {abs(found.ttft.bias):.0%} short" in text  # the first token comes too early


def test_a_manifests_pools_carry_the_accuracy_of_the_rows_like_them(manifests):
    reported = 0
    for path in manifests.values():
        manifest = yaml.safe_load(path.read_text())
        engine = manifest["provenance"]["profiles"]["serving_engine"]
        for pool in manifest["pools"]:
            expected = accuracy_for(pool["profile"]["source"], engine, False, layout_of(pool["phase"], pool["dp"]),
                                    engine_rooflines=False)
            if expected is None:
                assert "accuracy" not in pool["profile"]
                continue
            found = pool["profile"]["accuracy"]
            assert (found["layout"], found["rows"]) == (expected.layout, expected.rows)
            assert found["ttft"]["median_abs_error"] == pytest.approx(expected.ttft.median, rel=1e-5)
            reported += 1
    assert reported  # the colocated answer is timed by composition, replayed for dense models under vLLM


@pytest.mark.slow
@pytest.mark.skipif(not tables.installed(), reason="the replay composes profiles: it needs pdplan[aic]")
def test_the_shipped_errors_are_what_the_simulator_gives_today(benchmark):
    """The first replayable row of every composed group, replayed now, has the error the file ships:
    a change to the simulator or the composition that moves the clocks must rewrite the file
    (``benchmarks/silicon_validation.py --accuracy-out pdplan/data/silicon_accuracy.json``)."""
    validation = benchmark("silicon_validation")
    rows = benchmark("silicon_rows").supported_rows(tables.package_root() / "systems" / "silicon_sample.csv")
    rows = rows.assign(source="composed", engine=rows["backend"], layout=rows["mode"],
                       family=validation.family(rows["model"]))
    rows = rows.sort_values([*KEY, *validation.ROW_ORDER], kind="stable")
    checked = 0
    for g in shipped()["groups"]:
        if g["source"] != "composed":
            continue
        for _, row in rows[(rows[list(KEY)] == [g[k] for k in KEY]).all(axis=1)].iterrows():
            try:
                ttft, tpot = validation.replay(row, "composed")
            except PdplanError:
                continue  # the validation skips it too
            assert ttft / row["silicon_ttft_ms"] - 1 == pytest.approx(g["ttft_error"][0], rel=2e-3, abs=1e-4)
            assert tpot / row["silicon_tpot_ms"] - 1 == pytest.approx(g["tpot_error"][0], rel=2e-3, abs=1e-4)
            checked += 1
            break
    assert checked == sum(g["source"] == "composed" for g in shipped()["groups"])


def test_a_source_a_quarter_off_advises_calibrating_with_a_pilot_run():
    moe = accuracy_for("composed", "sglang", True, "disagg", engine_rooflines=False)
    dense = accuracy_for("composed", "vllm", False, "agg", engine_rooflines=False)
    assert moe.biased and "pdplan profile calibrate" in moe.describe()  # TTFT simulated more than half short
    assert not dense.biased and "calibrate" not in dense.describe()
