"""Speculative decoding (MTP or a draft model) as a stated acceptance rate: decode steps become the
time per emitted token, for every profile a run uses, recorded where the run can be replayed."""

import dataclasses
import itertools
import json
from pathlib import Path

import pytest

from pdplan.errors import PdplanError
from pdplan.hardware import get_gpu
from pdplan.latency.compose import tables
from pdplan.latency.profile import shipped_profiles
from pdplan.latency.source import ProfileSource
from pdplan.latency.speculative import SpeculativeDecoding, expected_tokens
from pdplan.modelref import get_model
from pdplan.planner.measure import profile_digest
from pdplan.sim.planfile import load_plan
from pdplan.vocabulary import SpeculativeMethod
from tests.handbuilt import handbuilt_profile

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "traces" / "smoke_uniform_200.csv"
PLAN = ROOT / "examples" / "plan_disagg.yaml"
COLOCATED = ROOT / "examples" / "plan_colocated.yaml"
LLAMA2, A100 = get_model("llama2-70b"), get_gpu("a100-80gb")
#: llama2-70b's geometry with one multi-token-prediction module, as DeepSeek-V3 ships one (its measured
#: profiles still apply: profiles are matched by name).
LLAMA2_MTP = dataclasses.replace(LLAMA2, mtp_layers=1)
MTP = SpeculativeDecoding(method=SpeculativeMethod.MTP, acceptance=0.8)
needs_extra = pytest.mark.skipif(not tables.installed(), reason="composed profiles need the optional extra pdplan[aic]")


@pytest.mark.parametrize("acceptance", [0.0, 0.3, 0.8, 0.95])
@pytest.mark.parametrize("draft_tokens", [1, 2, 3, 5])
def test_expected_tokens_per_verify_step_match_enumerating_every_acceptance_sequence(acceptance, draft_tokens):
    # Each draft is accepted (1) or not (0), independently; the step keeps the accepted prefix and adds
    # one token of the target model's own.
    expected = 0.0
    for outcome in itertools.product((0, 1), repeat=draft_tokens):
        probability = 1.0
        for accepted in outcome:
            probability *= acceptance if accepted else 1 - acceptance
        prefix = next((i for i, accepted in enumerate(outcome) if not accepted), draft_tokens)
        expected += probability * (prefix + 1)
    assert expected_tokens(acceptance, draft_tokens) == pytest.approx(expected, rel=1e-12)


def _toy():
    return handbuilt_profile(prefill_ms=[(1, [[20.0, 0.1, 0.0]])], decode_ms=[(1, [[40.0, 0.5, 0.0001]])],
                             kv_capacity_tokens=100_000, max_prefill_batch_tokens=4096)


def test_a_decode_step_becomes_the_time_per_emitted_token_of_a_verify_step_and_its_drafts():
    drafting = SpeculativeDecoding(method=SpeculativeMethod.DRAFT, acceptance=0.5, draft_tokens=1, draft_cost=0.25)
    # By hand, B = 10 requests holding 20,000 tokens: a plain step is 40 + 0.5·10 + 0.0001·20000 = 47 ms.
    # The verify step runs 2 rows per request (40 + 2·5 + 2 = 52 ms), the draft costs 0.25 · 47 = 11.75 ms,
    # and one verify step emits (1 − 0.5²) / (1 − 0.5) = 1.5 tokens: 63.75 / 1.5 = 42.5 ms per token.
    assert drafting.apply(_toy()).decode_step_s(10, 20_000) == pytest.approx(42.5e-3, rel=1e-12)


def test_prefill_is_timed_as_before():
    toy = _toy()
    assert MTP.resolved(80).apply(toy).prefill == toy.prefill


def test_the_profile_says_what_was_applied_with_its_numbers():
    notes = MTP.resolved(80).apply(_toy()).provenance.notes
    assert notes.startswith("hand-built for tests; speculative decoding with multi-token prediction (MTP)")
    assert "1 draft token per verify step, acceptance 0.8, draft cost 0.0125 of a step, 1.8 tokens" in notes


def test_a_dp_ranks_group_part_is_dropped_and_the_profile_says_so():
    rank = dataclasses.replace(_toy(), dp=2, group_decode_points=((1, 0.001), (64, 0.004)))
    drafted = MTP.resolved(80).apply(rank)
    assert drafted.group_decode is None
    assert "as if it carried the slowest rank's batch" in drafted.provenance.notes
    assert "slowest rank" not in MTP.resolved(80).apply(_toy()).provenance.notes


def test_an_mtp_draft_token_costs_one_layer_of_the_models_by_default():
    # AIConfigurator's mtp_scale_factor: a decode iteration is (L + nextn) / L layers' work; llama2-70b has 80.
    assert ProfileSource({}, speculative=MTP).speculative_for(LLAMA2_MTP).draft_cost == 1 / 80


def test_every_profile_the_source_hands_out_is_timed_per_emitted_token():
    measured = shipped_profiles()
    for shape in ((4, 1), (2, 2)):  # the shipped measured profile, and a shape only a roofline times
        plain = ProfileSource(measured, compose=False).profile(LLAMA2, A100, *shape)
        fast = ProfileSource(measured, compose=False, speculative=MTP).profile(LLAMA2_MTP, A100, *shape)
        assert fast.provenance.source == plain.provenance.source == ("measured" if shape == (4, 1) else "roofline")
        by_hand = MTP.resolved(80).apply(plain)
        assert fast.decode_step_s(32, 32_000) == pytest.approx(by_hand.decode_step_s(32, 32_000), rel=1e-12)
        assert fast.decode_step_s(32, 32_000) < plain.decode_step_s(32, 32_000)


def test_a_transformed_profile_keys_its_own_cached_goodputs():
    plain = shipped_profiles()[("llama2-70b", "a100-80gb", 4, 1)]
    assert profile_digest(MTP.resolved(80).apply(plain)) != profile_digest(plain)
    assert profile_digest(MTP.resolved(80).apply(plain)) != profile_digest(
        SpeculativeDecoding(method=SpeculativeMethod.MTP, acceptance=0.7).resolved(80).apply(plain))


@needs_extra
def test_the_composed_profile_is_cached_before_the_transform(tmp_path):
    from pdplan.cache import ResultCache

    cache = ResultCache(tmp_path)
    model = dataclasses.replace(get_model("llama-3.1-70b@fp8"), mtp_layers=1)  # with an MTP module, as DeepSeek-V3
    h100 = get_gpu("h100-80gb")
    fast = ProfileSource({}, speculative=MTP).profile(model, h100, 4, 1, cache=cache)
    plain = ProfileSource({}).profile(model, h100, 4, 1, cache=cache)  # the same key: found, not composed
    assert cache.hits == 1
    assert plain.provenance.source == "composed" and "speculative" not in plain.provenance.notes
    assert fast.decode_step_s(8, 8_000) == pytest.approx(
        MTP.resolved(model.layers).apply(plain).decode_step_s(8, 8_000), rel=1e-5)


@pytest.mark.parametrize("fields,message", [
    ({"acceptance": 1.0}, "--acceptance must be in [0, 1)"),
    ({"acceptance": float("nan")}, "--acceptance must be in [0, 1)"),
    ({"acceptance": 0.5, "draft_tokens": 0}, "--draft-tokens must be between 1 and 16, got 0"),
    ({"acceptance": 0.5, "method": SpeculativeMethod.DRAFT}, "--draft-cost is required with --speculative draft"),
    ({"acceptance": 0.5, "draft_cost": 1.5}, "--draft-cost must be between 0 and 1"),
], ids=["acceptance-one", "acceptance-nan", "no-drafts", "draft-without-cost", "cost-above-a-step"])
def test_a_description_that_cannot_hold_is_refused_naming_the_flag(fields, message):
    with pytest.raises(PdplanError) as err:
        SpeculativeDecoding(**{"method": SpeculativeMethod.MTP, **fields})
    assert err.value.detail.startswith(message)


GOODPUT = ("goodput", TRACE, "--model", "llama2-70b", "--gpu", "a100-80gb", "--tp", "4", "--phase", "decode")


@pytest.mark.parametrize("args,message", [
    (("--speculative", "mtp", "--acceptance", "1"), "Error: --acceptance must be in [0, 1)"),
    (("--speculative", "mtp", "--acceptance", "-0.1"), "Error: --acceptance must be in [0, 1)"),
    (("--speculative", "mtp", "--acceptance", "0.8", "--draft-tokens", "0"),
     "Error: --draft-tokens must be between 1 and 16, got 0"),
    (("--speculative", "draft", "--acceptance", "0.8"), "Error: --draft-cost is required with --speculative draft"),
    (("--acceptance", "0.8",), "Error: --acceptance describes speculative decoding: give --speculative mtp|draft"),
    (("--speculative", "mtp"), "Error: --speculative needs --acceptance"),
    (("--speculative", "eagle", "--acceptance", "0.8"), "Error: --speculative must be one of draft, mtp, got 'eagle'"),
], ids=["acceptance-one", "acceptance-negative", "no-drafts", "draft-without-cost", "acceptance-alone",
        "speculative-without-acceptance", "unknown-method"])
def test_bad_speculative_flags_exit_2_with_one_line_naming_the_flag(run_cli, args, message):
    code, out, err = run_cli(*GOODPUT, *args)
    assert code == 2 and out == ""
    assert err.startswith(message) and err.count("\n") == 1


#: llama2-70b ships no multi-token-prediction layers: a drafter at MTP's cost for it (one layer of 80).
DRAFTER = ("--speculative", "draft", "--acceptance", "0.8", "--draft-cost", "0.0125")


def test_decode_goodput_rises_with_speculative_decoding_and_the_answer_names_it(run_cli):
    runs = {}
    for name, extra in (("plain", ()), ("mtp", DRAFTER)):
        code, out, err = run_cli(*GOODPUT, "--requests-per-probe", "200", "--grid", "0", "--json", *extra)
        assert code == 0, err
        runs[name] = json.loads(out)
    assert runs["plain"]["speculative"] is None
    assert runs["mtp"]["speculative"] == {"method": "draft", "draft_tokens": 1, "acceptance": 0.8,
                                          "draft_cost": 0.0125}
    # at most E / (1 + k·r) = 1.8 / 1.0125 faster: the per-request term grows with the verified rows
    assert 1.3 * runs["plain"]["goodput_rps"] < runs["mtp"]["goodput_rps"] < 1.8 / 1.0125 * runs["plain"]["goodput_rps"]


def _with_speculative(plan: Path, tmp_path: Path, block: str) -> Path:
    out = tmp_path / plan.name
    out.write_text(plan.read_text().replace("pools:", f"profiles:\n  speculative: {block}\npools:", 1))
    return out


def test_a_plan_file_keeps_its_speculative_decoding(tmp_path):
    from pdplan.fileio import atomic_write_text, dump_yaml
    from pdplan.sim.planfile import plan_to_dict

    plan = load_plan(_with_speculative(PLAN, tmp_path, "{method: draft, acceptance: 0.6, draft_tokens: 3, "
                                                       "draft_cost: 0.05}"))
    assert plan.speculative == SpeculativeDecoding(method=SpeculativeMethod.DRAFT, acceptance=0.6, draft_tokens=3,
                                                   draft_cost=0.05)
    atomic_write_text(tmp_path / "again.yaml", dump_yaml(plan_to_dict(plan)))
    assert load_plan(tmp_path / "again.yaml").speculative == plan.speculative
    assert load_plan(PLAN).speculative is None


def test_a_plan_file_refuses_a_certain_acceptance_naming_file_and_field(run_cli, tmp_path):
    plan = _with_speculative(PLAN, tmp_path, "{method: mtp, acceptance: 1}")
    code, _, err = run_cli("simulate", TRACE, "--plan", plan)
    assert code == 2
    assert err.startswith(f"Error: {plan}:") and "profiles.speculative.acceptance must be below 1" in err


def _tpot(run_cli, *args) -> float:
    code, out, err = run_cli("simulate", TRACE, *args, "--json")
    assert code == 0, err
    return json.loads(out)["tpot"]["mean"]


@pytest.mark.parametrize("plan", [PLAN, COLOCATED], ids=["disaggregated", "colocated"])
def test_simulate_replays_the_speculative_decoding_its_plan_records(run_cli, tmp_path, plan):
    recorded = _with_speculative(plan, tmp_path,
                                 "{method: draft, acceptance: 0.8, draft_tokens: 2, draft_cost: 0.0125}")
    flagged = _tpot(run_cli, "--plan", plan, *DRAFTER, "--draft-tokens", "2")
    assert _tpot(run_cli, "--plan", recorded) == flagged < _tpot(run_cli, "--plan", plan)


# --- manifests and exports -----------------------------------------------------------------------

def _drafting(manifest: dict, **record) -> dict:
    """The manifest, resealed as if planned with speculative decoding."""
    import copy

    from pdplan.manifest.document import seal

    found = copy.deepcopy(manifest)
    found["provenance"]["profiles"]["speculative"] = {"method": "mtp", "draft_tokens": 2, "acceptance": 0.8,
                                                      "draft_cost": 0.0125, **record}
    return seal(found)


def test_a_manifest_records_speculative_decoding_for_the_plan_it_rebuilds(disaggregated, tmp_path):
    from pdplan.fileio import dump_yaml
    from pdplan.manifest.plan import read_plan

    path = tmp_path / "m.yaml"
    path.write_text(dump_yaml(_drafting(disaggregated)))
    plan, _ = read_plan(path)
    assert plan.speculative == SpeculativeDecoding(method=SpeculativeMethod.MTP, acceptance=0.8, draft_tokens=2,
                                                   draft_cost=0.0125)


def test_a_manifest_without_speculative_decoding_rebuilds_a_plan_without_it(disaggregated):
    from pdplan.manifest.plan import plan_of_manifest

    assert "speculative" not in disaggregated["provenance"]["profiles"]
    assert plan_of_manifest(disaggregated, "m.yaml").speculative is None


def test_the_manifest_schema_refuses_a_certain_acceptance(disaggregated):
    from pdplan.manifest.document import schema_errors

    assert schema_errors(_drafting(disaggregated)) == []
    assert [field for field, _ in schema_errors(_drafting(disaggregated, acceptance=1.0))] == \
        ["provenance.profiles.speculative.acceptance"]


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


@pytest.mark.parametrize("fmt", ["vllm", "dynamo", "llm-d", "k8s"])
def test_vllm_engines_start_with_mtp_in_vllms_speculative_config(disaggregated, fmt):
    from pdplan.manifest.export import export_manifest
    from tests.test_manifest_export import _tokens

    commands = [c for c in _tokens(export_manifest(_drafting(disaggregated), fmt)) if "--speculative-config" in c]
    assert commands  # every pool, prefill too: vLLM's NIXL handshake compares the MTP setup of both sides
    # vLLM 0.33.0 vllm/config/speculative.py: SpeculativeConfig.method "mtp", num_speculative_tokens
    assert {_flag(c, "--speculative-config") for c in commands} == {'{"method":"mtp","num_speculative_tokens":2}'}


def test_sglang_engines_start_with_mtp_as_an_eagle_chain(disaggregated):
    from pdplan.manifest.export import export_manifest
    from tests.test_manifest_export import _tokens

    commands = [c for c in _tokens(export_manifest(_drafting(disaggregated), "sglang")) if "sglang.launch_server" in c]
    assert commands
    for command in commands:  # SGLang: NEXTN is EAGLE; top-k 1 verifies num_steps + 1 tokens
        assert [_flag(command, f) for f in ("--speculative-algorithm", "--speculative-num-steps",
                                            "--speculative-eagle-topk", "--speculative-num-draft-tokens")] == \
            ["EAGLE", "2", "1", "3"]


@pytest.mark.parametrize("fmt", ["vllm", "sglang", "k8s"])
def test_a_draft_model_plan_is_not_exported_since_the_manifest_cannot_name_the_draft(disaggregated, fmt):
    from pdplan.manifest.export import export_manifest

    with pytest.raises(PdplanError, match="speculative decoding by a draft model, which the manifest does not name"):
        export_manifest(_drafting(disaggregated, method="draft", draft_cost=0.1), fmt)


def test_exports_of_a_plan_without_speculative_decoding_carry_no_speculative_flags(disaggregated):
    from pdplan.manifest.export import export_manifest

    for fmt in ("vllm", "sglang"):
        assert "speculative" not in "".join(export_manifest(disaggregated, fmt).values())


def test_optimize_names_it_in_its_answer_and_its_manifest_records_it(run_cli, tmp_path):
    import yaml

    out = tmp_path / "m.yaml"
    code, stdout, err = run_cli("optimize", TRACE, "--requests-per-probe", "50", "--tp", "4", "--pp", "1",
                                "--mode", "colocated", "--fleet", "AA", "--no-cache", "--json", "--out", out,
                                *DRAFTER)
    assert code == 0, err
    record = {"method": "draft", "draft_tokens": 1, "acceptance": 0.8, "draft_cost": 0.0125}
    assert json.loads(stdout)["provenance"]["speculative"] == record
    assert yaml.safe_load(out.read_text())["provenance"]["profiles"]["speculative"] == record
    code, _, err = run_cli("validate", out, "--trace", TRACE, "--resimulate")
    assert code == 0, err


def test_mtp_is_refused_for_a_model_without_multi_token_prediction_layers(run_cli):
    code, out, err = run_cli(*GOODPUT, "--speculative", "mtp", "--acceptance", "0.8")
    assert code == 2 and out == ""
    assert "--speculative mtp drafts with the checkpoint's multi-token-prediction layers, and llama2-70b has none" \
        in err


def test_deepseek_v3_ships_one_multi_token_prediction_module():
    from pdplan.modelref import get_model

    # config.json num_nextn_predict_layers (deepseek-ai/DeepSeek-V3; moonshotai/Kimi-K2-Instruct)
    assert (get_model("deepseek-v3").mtp_layers, get_model("kimi-k2").mtp_layers) == (1, 0)


def test_validate_refuses_mtp_for_a_checkpoint_without_prediction_layers(disaggregated):
    from pdplan.manifest.check import check_manifest

    assert "mtp" not in disaggregated["identity"]["model"] and "deepseek" not in disaggregated["identity"]["model"]
    found = [v.field for v in check_manifest(_drafting(disaggregated))]
    assert "provenance.profiles.speculative.method" in found
    assert "provenance.profiles.speculative.method" not in [v.field for v in check_manifest(disaggregated)]
