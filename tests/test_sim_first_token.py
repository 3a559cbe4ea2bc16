"""When a disaggregated request's first token reaches its client: when it joins the decode batch, the decode
streaming the prefill's token (SGLang, ``handoff``), or with the first decode step it runs in (TensorRT-LLM and
vLLM, ``decode-step``).

The closed forms use constant profiles: a prefill batch takes 100 ms, a decode step 20 ms whatever it holds, and
a 1,000-token prompt's KV crosses a 10 GB/s link with 0.5 ms of setup.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan.engines import first_token
from pdplan.errors import PdplanError
from pdplan.sim import Plan, simulate
from pdplan.sim.planfile import load_plan, plan_to_dict
from pdplan.vocabulary import FirstToken
from tests.conftest import ROOT
from tests.test_sim_data_parallel import wide
from tests.test_sim_system import HETEROGENEOUS, KV, MODEL, PROFILES, assert_same, link, pool, profile, random_trace

PREFILL_S, STEP_S, TRANSFER_S = 0.100, 0.020, 0.0005 + 1000 * KV / 10e9


def constant_plan(first: str) -> tuple[Plan, dict]:
    """One prefill and one decode instance of constant profiles, the decode handing first tokens as ``first``."""
    prefill = profile("a100-80gb", prefill_ms=[(1, [[100.0, 0.0, 0.0]])], decode_ms=[(1, [[20.0, 0.0, 0.0]])])
    plan = Plan(pools=(pool("p", "prefill"), pool("d", "decode", first_token=first)), default_link=link(10.0))
    return plan, {prefill.key: prefill}


def one_request(first: str, output: int, engine: str = "fast"):
    plan, profiles = constant_plan(first)
    trace = {"arrival_s": [0.0], "prompt_tokens": [1000], "output_tokens": [output]}
    return simulate(trace, plan, profiles, model=MODEL, engine=engine)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_decode_streaming_the_prefills_token_hands_it_over_when_the_request_joins(engine):
    """TTFT = prefill + transfer; the other 9 tokens take 9 steps: TPOT = 9 × 20 ms / 9."""
    result = one_request(FirstToken.HANDOFF, 10, engine)
    assert result["ttft_s"][0] == pytest.approx(PREFILL_S + TRANSFER_S)
    assert result["tpot_s"][0] == pytest.approx(STEP_S)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_decode_that_answers_after_its_step_hands_the_first_token_one_step_later(engine):
    """TTFT = prefill + transfer + one decode step; the first response holds two tokens, so the other 8 of the 9
    after the first take 8 steps: TPOT = 8 × 20 ms / 9."""
    result = one_request(FirstToken.DECODE_STEP, 10, engine)
    assert result["ttft_s"][0] == pytest.approx(PREFILL_S + TRANSFER_S + STEP_S)
    assert (result["admission_wait_s"][0], result["first_step_s"][0]) == (0.0, pytest.approx(STEP_S))
    assert result["tpot_s"][0] == pytest.approx(8 * STEP_S / 9)
    assert result["finish_s"][0] == pytest.approx(PREFILL_S + TRANSFER_S + 9 * STEP_S)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_request_whose_prefill_token_is_its_only_one_finishes_when_it_joins_either_way(engine):
    handed, stepped = (one_request(first, 1, engine) for first in FirstToken)
    assert stepped["first_token_s"][0] == stepped["finish_s"][0] == handed["finish_s"][0]
    assert stepped["ttft_s"][0] == pytest.approx(PREFILL_S + TRANSFER_S)


def test_ttft_is_the_queue_the_prefill_the_exposed_transfer_the_admission_wait_and_the_first_step():
    """Each request's TTFT is its parts, the admission wait the queue before it joins (more decode instances shorten
    it), the first step apart (what a decode-step decode adds however many there are)."""
    plan, profiles = constant_plan(FirstToken.DECODE_STEP)
    r = simulate(random_trace(6, n=200, rate_rps=8.0), plan, profiles, model=MODEL)
    parts = (r["prefill_queue_s"] + (r["prefill_end_s"] - r["prefill_start_s"]) + r["exposed_transfer_s"]
             + r["admission_wait_s"] + r["first_step_s"])
    np.testing.assert_allclose(r["ttft_s"], parts, atol=1e-9)
    stepped = r["output_tokens"] > 1
    np.testing.assert_allclose(r["first_step_s"][stepped], STEP_S, atol=1e-9)
    assert np.all(r["first_step_s"][~stepped] == 0.0)
    assert r.summary()["first_step_s_mean"] == pytest.approx(STEP_S * stepped.mean())


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), schedule=st.sampled_from(["request", "layer"]), hashes=st.booleans())
def test_compiled_engine_matches_the_oracle_when_decodes_hand_first_tokens_with_a_step(seed, schedule, hashes):
    """Decode pools of one and of four ranks handing first tokens with their step, beside pools that hand them on
    joining, heterogeneous pools, both schedules, prefix hashes, one-token requests among the rest."""
    decode4 = wide(profile("a100-80gb", kv=6000), 4)
    stepped = [pool(p.name, p.phase, gpu=p.gpu, pp=p.pp, replicas=p.replicas, first_token=FirstToken.DECODE_STEP)
               if p.name == "da" else p for p in HETEROGENEOUS["pools"]]
    pools = (*stepped, pool("dw", "decode", dp=4, replicas=2, first_token=FirstToken.DECODE_STEP))
    plan = Plan(pools=pools, links=HETEROGENEOUS["links"], default_link=HETEROGENEOUS["default_link"],
                transfer_schedule=schedule)
    trace = random_trace(seed, n=120, rate_rps=10.0, hashes=hashes)
    profiles = {**PROFILES, decode4.key: decode4}
    fast, oracle = (simulate(trace, plan, profiles, model=MODEL, engine=engine) for engine in ("fast", "reference"))
    assert_same(fast, oracle)
    for column in ("admission_wait_s", "first_step_s"):  # when each request joined its batch, apart from its token
        np.testing.assert_allclose(fast[column], oracle[column], rtol=0, atol=1e-9, err_msg=column)
    stepping = np.isin(fast["decode_instance"], [2, 3, 5, 6]) & (fast["output_tokens"] > 1)  # da/0, da/1, dw/0, dw/1
    assert stepping.any() and np.all(fast["first_token_s"][stepping] > fast["transfer_end_s"][stepping])


@pytest.mark.parametrize(("engine", "expected"), [("trtllm", FirstToken.DECODE_STEP), ("vllm", FirstToken.DECODE_STEP),
                                                  ("sglang", FirstToken.HANDOFF), (None, FirstToken.HANDOFF)])
def test_each_engines_decode_hands_the_first_token_as_its_source_does(engine, expected):
    assert first_token(engine, "decode") == expected
    assert first_token(engine, "prefill") == first_token(engine, "colocated") == FirstToken.HANDOFF


def test_a_plan_file_states_the_first_token_on_a_decode_pool_and_round_trips_it(tmp_path):
    """``first_token`` is optional (default handoff) and written back only when it comes with a step."""
    text = (ROOT / "examples" / "plan_disagg.yaml").read_text()
    decode = text.index("phase: decode")
    path = tmp_path / "plan.yaml"
    path.write_text(text[:decode] + "first_token: decode-step\n    " + text[decode:])
    plan = load_plan(path)
    assert [p.first_token for p in plan.pools] == [FirstToken.HANDOFF, FirstToken.DECODE_STEP]
    assert plan_to_dict(plan)["pools"][1]["first_token"] == "decode-step"
    assert "first_token" not in plan_to_dict(load_plan(ROOT / "examples" / "plan_disagg.yaml"))["pools"][1]


@pytest.mark.parametrize(("where", "value", "rule"), [("prefill", "decode-step", "applies only to decode pools"),
                                                      ("decode", "at-once", "must be one of")])
def test_a_first_token_the_pool_cannot_take_names_the_file_and_field(tmp_path, where, value, rule):
    text = (ROOT / "examples" / "plan_disagg.yaml").read_text()
    at = text.index(f"phase: {where}")
    path = tmp_path / "plan.yaml"
    path.write_text(text[:at] + f"first_token: {value}\n    " + text[at:])
    index = 0 if where == "prefill" else 1
    with pytest.raises(PdplanError, match=rf"pools\[{index}\]\.first_token {rule}"):
        load_plan(path)


def test_a_pool_other_than_decode_refuses_a_first_token_with_a_step_naming_its_field():
    with pytest.raises(PdplanError, match="applies to decode pools") as refused:
        pool("p", "prefill", first_token=FirstToken.DECODE_STEP)
    assert refused.value.field == "first_token"


@pytest.mark.parametrize("first", list(FirstToken))
def test_simulate_says_the_mean_step_a_decode_took_before_first_tokens_only_when_it_took_one(run_cli, tmp_path, first):
    plan = (ROOT / "examples" / "plan_disagg.yaml").read_text()
    decode = plan.index("phase: decode")
    path = tmp_path / "plan.yaml"
    path.write_text(plan[:decode] + f"first_token: {first}\n    " + plan[decode:])
    code, out, _ = run_cli("simulate", ROOT / "traces" / "chat_poisson_2k.csv", "--plan", path)
    assert code == 0 and ("decode step before the first token" in out) == (first == FirstToken.DECODE_STEP)
