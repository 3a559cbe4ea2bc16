"""How a decode instance takes a prefilled request and answers its first token. Push (SGLang): the prefill sends the
KV once its prefill ends. Pull (TensorRT-LLM, vLLM): the decode reads the KV from the iteration that takes the request
in. The first token is the prefill's, streamed when the request joins the decode's batch (SGLang, TensorRT-LLM), or
the decode's own, sampled again in the first step the request runs in (vLLM); a pool that states only its handoff
answers as it was first verified, the decode's own for a pull.

The closed forms use constant profiles: a prefill batch takes 100 ms, a decode step 20 ms whatever it holds, and
a prompt's KV crosses a 10 GB/s link with 0.5 ms of setup.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan.engines import first_token, handoff
from pdplan.errors import PdplanError
from pdplan.modelref import get_model
from pdplan.sim import Plan, Pool, simulate
from pdplan.sim.planfile import load_plan, plan_to_dict
from pdplan.vocabulary import FirstToken, Handoff
from tests.conftest import ROOT
from tests.handbuilt import handbuilt_profile
from tests.test_sim_data_parallel import wide
from tests.test_sim_system import HETEROGENEOUS, KV, MODEL, PROFILES, assert_same, link, pool, profile, random_trace

PREFILL_S, STEP_S = 0.100, 0.020


def transfer_s(tokens: int) -> float:
    return 0.0005 + tokens * KV / 10e9


TRANSFER_S = transfer_s(1000)


def constant_plan(taken: str, route_s: float = 0.0, first: str | None = None) -> tuple[Plan, dict]:
    """One prefill and one decode instance of constant profiles, the decode taking requests as ``taken`` says and
    answering their first token as ``first`` does (None: as its handoff was first verified)."""
    prefill = profile("a100-80gb", prefill_ms=[(1, [[100.0, 0.0, 0.0]])], decode_ms=[(1, [[20.0, 0.0, 0.0]])])
    plan = Plan(pools=(pool("p", "prefill"), pool("d", "decode", handoff=taken, first_token=first)),
                default_link=link(10.0), route_s=route_s)
    return plan, {prefill.key: prefill}


def run(taken: str, trace: dict, engine: str = "fast", route_s: float = 0.0, first: str | None = None):
    plan, profiles = constant_plan(taken, route_s, first)
    return simulate(trace, plan, profiles, model=MODEL, engine=engine)


def one_request(taken: str, output: int, engine: str = "fast", route_s: float = 0.0, first: str | None = None):
    return run(taken, {"arrival_s": [0.0], "prompt_tokens": [1000], "output_tokens": [output]}, engine, route_s,
               first)


def example_plan_with(path, phase: str, *lines: str):
    """``examples/plan_disagg.yaml`` with ``lines`` on its pool of ``phase``, written to ``path``."""
    text = (ROOT / "examples" / "plan_disagg.yaml").read_text()
    at = text.index(f"phase: {phase}")
    path.write_text(text[:at] + "".join(f"{line}\n    " for line in lines) + text[at:])
    return path


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_pushed_request_has_its_first_token_when_it_joins(engine):
    """TTFT = prefill + transfer; the other 9 tokens take 9 steps: TPOT = 9 × 20 ms / 9."""
    result = one_request(Handoff.PUSH, 10, engine)
    assert result["ttft_s"][0] == pytest.approx(PREFILL_S + TRANSFER_S)
    assert result["tpot_s"][0] == pytest.approx(STEP_S)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_pulled_request_has_its_first_token_one_step_after_it_joins(engine):
    """An idle decode takes the request in at once: TTFT = prefill + transfer + one decode step; the first response
    holds two tokens, so the other 8 of the 9 after the first take 8 steps: TPOT = 8 × 20 ms / 9."""
    result = one_request(Handoff.PULL, 10, engine)
    assert result["ttft_s"][0] == pytest.approx(PREFILL_S + TRANSFER_S + STEP_S)
    assert (result["admission_wait_s"][0], result["first_step_s"][0]) == (0.0, pytest.approx(STEP_S))
    assert result["tpot_s"][0] == pytest.approx(8 * STEP_S / 9)
    assert result["finish_s"][0] == pytest.approx(PREFILL_S + TRANSFER_S + 9 * STEP_S)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_pulled_request_answered_with_the_prefills_token_has_it_when_it_joins(engine):
    """TensorRT-LLM's generation server: an idle decode takes the request in at once and reads its KV, and answers
    the prefill's token as it joins: TTFT = prefill + transfer, no first step; the other 9 tokens take 9 steps."""
    result = one_request(Handoff.PULL, 10, engine, first=FirstToken.PREFILL)
    assert result["ttft_s"][0] == pytest.approx(PREFILL_S + TRANSFER_S)
    assert (result["admission_wait_s"][0], result["first_step_s"][0]) == (0.0, 0.0)
    assert result["tpot_s"][0] == pytest.approx(STEP_S)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_pushed_request_whose_decode_samples_the_first_token_has_it_one_step_after_it_joins(engine):
    result = one_request(Handoff.PUSH, 10, engine, first=FirstToken.DECODE)
    assert result["transfer_start_s"][0] == pytest.approx(PREFILL_S)
    assert result["ttft_s"][0] == pytest.approx(PREFILL_S + TRANSFER_S + STEP_S)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_request_whose_prefill_token_is_its_only_one_finishes_when_it_joins_either_way(engine):
    pushed, pulled = (one_request(taken, 1, engine) for taken in Handoff)
    assert pulled["first_token_s"][0] == pulled["finish_s"][0] == pytest.approx(pushed["finish_s"][0])
    assert pulled["ttft_s"][0] == pytest.approx(PREFILL_S + TRANSFER_S)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_busy_decode_starts_pulling_at_its_next_step_boundary(engine):
    """The first request decodes in 20 ms steps from when it joins, J0 = 100 ms + its transfer. The second arrives at
    100 ms, is prefilled by 200 ms, and is taken in at the first boundary J0 + 20k at or after 200 ms, where its read
    begins; it joins at the first boundary after the read and has its first token one step later. Pushed, its read
    begins at 200 ms."""
    trace = {"arrival_s": [0.0, 0.1], "prompt_tokens": [1000, 500], "output_tokens": [40, 10]}
    joined = PREFILL_S + TRANSFER_S
    boundaries = joined + STEP_S * np.arange(40)
    begin = boundaries[boundaries >= 2 * PREFILL_S][0]
    end = begin + transfer_s(500)
    pulled = run(Handoff.PULL, trace, engine)
    assert pulled["transfer_start_s"][1] == pytest.approx(begin)
    assert pulled["first_token_s"][1] == pytest.approx(boundaries[boundaries >= end][0] + STEP_S)
    answered = run(Handoff.PULL, trace, engine, first=FirstToken.PREFILL)  # the prefill's token, as it joins
    assert answered["first_token_s"][1] == pytest.approx(boundaries[boundaries >= end][0])
    assert run(Handoff.PUSH, trace, engine)["transfer_start_s"][1] == pytest.approx(2 * PREFILL_S)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_pull_waits_for_the_routers_hop_a_push_does_not(engine):
    """With a 5 ms hop from prefill to decode, a pull starts reading after it; a push sends at once and only the
    decode's taking it waits."""
    pulled = one_request(Handoff.PULL, 10, engine, route_s=0.005)
    assert pulled["transfer_start_s"][0] == pytest.approx(PREFILL_S + 0.005)
    assert pulled["ttft_s"][0] == pytest.approx(PREFILL_S + 0.005 + TRANSFER_S + STEP_S)
    assert one_request(Handoff.PUSH, 10, engine, route_s=0.005)["transfer_start_s"][0] == pytest.approx(PREFILL_S)


def test_ttft_is_the_queue_the_prefill_the_exposed_transfer_the_admission_wait_and_the_first_step():
    """Each request's TTFT is its parts, the admission wait the queue before it joins (more decode instances shorten
    it), the first step apart (what a decode that samples the first token adds however many there are)."""
    plan, profiles = constant_plan(Handoff.PULL)
    r = simulate(random_trace(6, n=200, rate_rps=8.0), plan, profiles, model=MODEL)
    parts = (r["prefill_queue_s"] + (r["prefill_end_s"] - r["prefill_start_s"]) + r["exposed_transfer_s"]
             + r["admission_wait_s"] + r["first_step_s"])
    np.testing.assert_allclose(r["ttft_s"], parts, atol=1e-9)
    stepped = r["output_tokens"] > 1
    np.testing.assert_allclose(r["first_step_s"][stepped], STEP_S, atol=1e-9)
    assert np.all(r["first_step_s"][~stepped] == 0.0)
    assert r.summary()["first_step_s_mean"] == pytest.approx(STEP_S * stepped.mean())


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10**6), schedule=st.sampled_from(["request", "layer"]), hashes=st.booleans(),
       route_s=st.sampled_from([0.0, 0.003]), failure=st.sampled_from([(0.0, "retry"), (0.3, "retry"),
                                                                        (0.3, "recompute")]),
       first=st.sampled_from(list(FirstToken)))
def test_compiled_engine_matches_the_oracle_when_decodes_pull(seed, schedule, hashes, route_s, failure, first):
    """Decode pools of one and of four ranks that pull, beside pools pushed to, heterogeneous pools, both schedules,
    prefix hashes, the router's hop, failed reads retried or prefilled again, one-token requests among the rest; the
    four-rank pool answering the prefill's token or sampling its own."""
    decode4 = wide(profile("a100-80gb", kv=6000), 4)
    pulling = [pool(p.name, p.phase, gpu=p.gpu, pp=p.pp, replicas=p.replicas, handoff=Handoff.PULL)
               if p.name == "da" else p for p in HETEROGENEOUS["pools"]]
    pools = (*pulling, pool("dw", "decode", dp=4, replicas=2, handoff=Handoff.PULL, first_token=first))
    plan = Plan(pools=pools, links=HETEROGENEOUS["links"], default_link=HETEROGENEOUS["default_link"],
                transfer_schedule=schedule, route_s=route_s, failure_rate=failure[0], failure_policy=failure[1])
    trace = random_trace(seed, n=120, rate_rps=10.0, hashes=hashes)
    profiles = {**PROFILES, decode4.key: decode4}
    fast, oracle = (simulate(trace, plan, profiles, model=MODEL, seed=seed, engine=engine)
                    for engine in ("fast", "reference"))
    assert_same(fast, oracle)
    for column in ("admission_wait_s", "first_step_s"):  # when each request joined its batch, apart from its token
        np.testing.assert_allclose(fast[column], oracle[column], rtol=0, atol=1e-9, err_msg=column)
    sampled = [2, 3, 5, 6] if first == FirstToken.DECODE else [2, 3]  # da/0, da/1 (and dw/0, dw/1)
    pulled = np.isin(fast["decode_instance"], sampled) & (fast["output_tokens"] > 1)
    assert pulled.any() and np.all(fast["first_token_s"][pulled] > fast["transfer_end_s"][pulled])
    assert np.all(fast["transfer_start_s"][pulled] >= fast["prefill_end_s"][pulled] + route_s - 1e-12)


@pytest.mark.parametrize(("engine", "expected"), [("trtllm", Handoff.PULL), ("vllm", Handoff.PULL),
                                                  ("sglang", Handoff.PUSH), (None, Handoff.PUSH)])
def test_each_engines_decode_takes_a_request_as_its_source_does(engine, expected):
    assert handoff(engine, "decode") == expected
    assert handoff(engine, "prefill") == handoff(engine, "colocated") == Handoff.PUSH


@pytest.mark.parametrize(("engine", "expected"), [("trtllm", FirstToken.PREFILL), ("vllm", FirstToken.DECODE),
                                                  ("sglang", FirstToken.PREFILL), (None, FirstToken.PREFILL)])
def test_each_engines_decode_answers_the_first_token_as_its_source_does(engine, expected):
    assert first_token(engine, "decode") == expected
    assert first_token(engine, "prefill") == first_token(engine, "colocated") == FirstToken.PREFILL


@pytest.mark.parametrize(("taken", "first"), [(Handoff.PUSH, FirstToken.PREFILL), (Handoff.PULL, FirstToken.DECODE)])
def test_a_pool_stating_only_its_handoff_answers_the_first_token_as_it_was_first_verified(taken, first):
    assert pool("d", "decode", handoff=taken).first_token == first


def test_a_plan_file_states_a_decode_pools_first_token_and_writes_it_back_only_off_its_handoffs_default(tmp_path):
    plan = load_plan(example_plan_with(tmp_path / "plan.yaml", "decode", "handoff: pull", "first_token: prefill"))
    assert (plan.pools[1].handoff, plan.pools[1].first_token) == (Handoff.PULL, FirstToken.PREFILL)
    assert plan_to_dict(plan)["pools"][1]["first_token"] == "prefill"
    pulled = load_plan(example_plan_with(tmp_path / "pulled.yaml", "decode", "handoff: pull"))
    assert "first_token" not in plan_to_dict(pulled)["pools"][1]


def test_a_plan_file_states_a_decode_pools_handoff_and_round_trips_it(tmp_path):
    """``handoff`` is optional (default push) and written back only when the decode pulls."""
    plan = load_plan(example_plan_with(tmp_path / "plan.yaml", "decode", "handoff: pull"))
    assert [p.handoff for p in plan.pools] == [Handoff.PUSH, Handoff.PULL]
    assert plan_to_dict(plan)["pools"][1]["handoff"] == "pull"
    assert "handoff" not in plan_to_dict(load_plan(ROOT / "examples" / "plan_disagg.yaml"))["pools"][1]


@pytest.mark.parametrize(("field", "where", "value", "rule"), [
    ("handoff", "prefill", "pull", "applies only to decode pools"), ("handoff", "decode", "pushed", "must be one of"),
    ("first_token", "prefill", "decode", "applies only to decode pools"),
    ("first_token", "decode", "sampled", "must be one of")])
def test_a_handoff_or_first_token_the_pool_cannot_take_names_the_file_and_field(tmp_path, field, where, value, rule):
    index = 0 if where == "prefill" else 1
    with pytest.raises(PdplanError, match=rf"pools\[{index}\]\.{field} {rule}"):
        load_plan(example_plan_with(tmp_path / "plan.yaml", where, f"{field}: {value}"))


def test_a_pool_other_than_decode_refuses_to_pull_naming_its_field():
    with pytest.raises(PdplanError, match="applies to decode pools") as refused:
        pool("p", "prefill", handoff=Handoff.PULL)
    assert refused.value.field == "handoff"


@pytest.mark.parametrize(("taken", "first"), [(Handoff.PUSH, FirstToken.PREFILL), (Handoff.PULL, FirstToken.DECODE),
                                              (Handoff.PULL, FirstToken.PREFILL)])
def test_simulate_says_the_mean_step_a_decode_took_before_first_tokens_only_when_it_took_one(run_cli, tmp_path, taken,
                                                                                              first):
    path = example_plan_with(tmp_path / "plan.yaml", "decode", f"handoff: {taken}", f"first_token: {first}")
    code, out, _ = run_cli("simulate", ROOT / "traces" / "chat_poisson_2k.csv", "--plan", path)
    assert code == 0 and ("decode step before the first token" in out) == (first == FirstToken.DECODE)


def _moved_s(model_name: str, prefill: tuple[int, int], decode: tuple[int, int], engine: str) -> float:
    """How long one 1,000-token prompt's KV takes over a 10 GB/s link from a prefill of (TP, PP) ``prefill`` into a
    decode of (TP, PP) ``decode``, constant profiles."""
    model = get_model(model_name)
    shapes = {phase: handbuilt_profile(model=model.name, gpu="h200-141gb", tp=tp, pp=pp, kv_capacity_tokens=200_000,
                                       max_prefill_batch_tokens=2048, prefill_ms=[(1, [[100.0, 0.0, 0.0]])],
                                       decode_ms=[(1, [[20.0, 0.0, 0.0]])])
              for phase, (tp, pp) in (("prefill", prefill), ("decode", decode))}
    plan = Plan(pools=tuple(Pool(name=phase[0], phase=phase, model=model.name, gpu="h200-141gb", tp=tp, pp=pp)
                            for phase, (tp, pp) in (("prefill", prefill), ("decode", decode))),
                default_link=link(10.0))
    result = simulate({"arrival_s": [0.0], "prompt_tokens": [1000], "output_tokens": [4]}, plan,
                      {p.key: p for p in shapes.values()}, model=model, engine=engine)
    return result["transfer_end_s"][0] - result["transfer_start_s"][0]


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("tp", [1, 2, 8])
def test_an_mla_decode_takes_the_prompts_kv_once_for_each_of_its_tp_ranks(engine, tp):
    """DeepSeek-V3 caches its whole latent on every TP rank, so the link into a TP-``tp`` decode carries the prompt's
    KV ``tp`` times: 1,000 tokens over 10 GB/s take 0.5 ms + tp × 1,000 × its KV bytes per token / 10 GB/s."""
    kv = get_model("deepseek-v3@fp8").kv_bytes_per_token
    assert _moved_s("deepseek-v3@fp8", (8, 1), (tp, 1), engine) == pytest.approx(0.0005 + tp * 1000 * kv / 10e9)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_dep_prefill_sends_all_of_a_tp8_mla_decodes_copies_from_one_gpu(engine):
    """A DeepSeek prefill of attention TP 1 holds the latent on one GPU, which sends its eight copies to a TP8 decode
    over its one NIC, an eighth of the decode's link: 0.5 ms + 8 × 8 × 1,000 × its KV bytes per token / 10 GB/s."""
    kv = get_model("deepseek-v3@fp8").kv_bytes_per_token
    assert _moved_s("deepseek-v3@fp8", (1, 1), (8, 1), engine) == pytest.approx(0.0005 + 64 * 1000 * kv / 10e9)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_tp1_prefill_sends_each_tp4_decode_rank_its_heads_from_one_gpu_per_stage(engine):
    """Llama-2-70B's 8 K/V heads sit on one GPU of each of a TP1 PP2 prefill's two stages, which send a TP4 decode's
    ranks their two each: the KV once, at half the decode's link, 0.5 ms + 2 × 1,000 × its KV bytes / 10 GB/s."""
    assert _moved_s("llama2-70b", (1, 2), (4, 1), engine) == pytest.approx(0.0005 + 2 * 1000 * KV / 10e9)
