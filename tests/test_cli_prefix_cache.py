"""The command line's prefix caching, routers and early rejection: flags, notices, refusals."""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "traces" / "chat_poisson_2k.csv"
DISAGG = ROOT / "examples" / "plan_disagg.yaml"


def test_a_cache_aware_router_on_a_trace_without_hashes_says_so_once_and_routes_by_load(run_cli):
    code, out, err = run_cli("simulate", TRACE, "--plan", DISAGG, "--router", "cache-aware", "--json")
    _, plain, _ = run_cli("simulate", TRACE, "--plan", DISAGG, "--json")
    routing = [line for line in err.split("notice:")[1:] if "router" in line and "prefix hashes" in line]
    assert code == 0 and len(routing) == 1
    aware = json.loads(out)
    assert aware["notices"] == [err.removeprefix("notice: ").strip()]
    assert aware["ttft"] == json.loads(plain)["ttft"]


def test_a_router_for_a_colocated_plan_is_refused_in_one_line(run_cli):
    code, out, err = run_cli("simulate", TRACE, "--plan", ROOT / "examples" / "plan_colocated.yaml",
                             "--router", "round-robin")
    assert (code, out) == (2, "") and err.count("\n") == 1 and "colocated plan" in err


def test_an_unknown_router_is_refused_naming_the_flag(run_cli):
    code, _, err = run_cli("simulate", TRACE, "--plan", DISAGG, "--router", "fastest")
    assert code == 2 and err.strip() == "Error: --router must be one of cache-aware, least-loaded, round-robin, " \
                                        "got 'fastest'"


def test_early_rejection_turns_away_arrivals_predicted_to_miss_and_counts_them_apart(run_cli):
    args = ("simulate", TRACE, "--plan", DISAGG, "--rate", "8", "--ttft", "300ms", "--json")
    code, out, _ = run_cli(*args, "--early-rejection")
    rejecting, plain = json.loads(out), json.loads(run_cli(*args)[1])
    assert code == 0 and rejecting["rejected_early"] > 0 and plain["rejected_early"] == 0
    assert rejecting["rejected"] == rejecting["rejected_early"] + plain["rejected"]
    assert rejecting["ttft"]["p90"] < plain["ttft"]["p90"]  # the queue it would have joined stays short


def test_a_plan_with_a_negative_early_rejection_threshold_names_the_field(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(DISAGG.read_text() + "early_rejection: {ttft_ms: -5}\n")
    code, _, err = run_cli("simulate", TRACE, "--plan", plan)
    assert code == 2 and "early_rejection.ttft_ms must be > 0" in err


def test_simulate_reports_the_prefill_cache_hit_rate_on_mooncake(run_cli, shared_data, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(DISAGG.read_text().replace("name: llama2-70b 2P+2D a100 TP4", "name: cached\nrouter: cache-aware"))
    code, out, err = run_cli("simulate", shared_data / "traces" / "mooncake_conversation_trace.jsonl", "--plan", plan,
                             "--rate", "0.2", "--json")
    cache = json.loads(out)["prefix_cache"]
    assert code == 0 and 0 < cache["hit_rate"] < 1 and cache["loaded_tokens"] == 0
    assert err.count("notice:") == 1 and "arrival times lie on a 3 s grid" in err  # Mooncake's, spread for replay


def test_optimize_verifies_and_records_the_router_and_early_rejection_it_was_given(run_cli, tmp_path):
    """The plans optimize verifies route by --router and reject early at the SLO's TTFT threshold;
    the manifest records both, and simulate --plan on it runs them again."""
    import yaml

    from tests.conftest import IDENTITY, MIXED_CLUSTER

    trace, cluster, out = tmp_path / "chat600.csv", tmp_path / "a100x2.yaml", tmp_path / "m.yaml"
    trace.write_text("".join(TRACE.read_text().splitlines(keepends=True)[:601]))
    cluster.write_text(MIXED_CLUSTER)
    code, _, err = run_cli("optimize", trace, "--tp", "2", "--tp", "4", "--pp", "1", "--target-rate", "2",
                           "--ttft", "1", "--tpot", "0.1", "--cluster", cluster, "--mode", "disaggregated",
                           "--router", "cache-aware", "--early-rejection", "--cache-dir", tmp_path / "cache",
                           "--out", out, *IDENTITY, "--json")
    routing = [line for line in err.split("notice:")[1:] if "router" in line and "prefix hashes" in line]
    assert code == 0 and len(routing) == 1
    transfer = yaml.safe_load(out.read_text())["transfer"]
    assert transfer["router"] == "cache-aware" and transfer["early_rejection"] == {"ttft_ms": 1000.0}
    code, out_json, err = run_cli("simulate", trace, "--plan", out, "--json")
    assert code == 0 and "cache-aware router needs prefix hashes" in err
    assert json.loads(out_json)["notices"]
