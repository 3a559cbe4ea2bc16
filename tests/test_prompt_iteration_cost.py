"""A profile's prompt iteration cost (``prompt_iteration_s``): the part of the prefill's constant a decode
step does not pay, as when an engine runs its prefill eagerly beside decode steps replayed as CUDA
graphs. A prompt iteration alone pays it through its prefill; a chunked iteration that mixes prompt
chunks with decodes adds it to its decode step once; a decode-only step never pays it."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan.errors import PdplanError
from pdplan.latency.profile import load_profile, profile_to_dict, profile_yaml, save_profile
from pdplan.sim.plan import Plan, Pool
from tests.test_sim_colocated import both_engines, colo_profile, constant_profile, random_trace

P, D, C = 0.100, 0.080, 0.030  # a 100 ms prompt iteration alone (30 ms of it launches), an 80 ms decode step


def chunked(chunk=256, replicas=1) -> Plan:
    return Plan(pools=(Pool(name="c", phase="colocated", model="toy", gpu="toy-gpu", policy="chunked",
                            chunk_tokens=chunk, replicas=replicas),))


def eager(profile, seconds=C):
    return replace(profile, prompt_iteration_s=seconds)


def test_a_mixed_iteration_adds_the_cost_to_its_decode_step_once():
    """r0's prompt runs alone [0, 100 ms], its decode steps take 80 ms, which cover the 70 ms of the
    prompt's constant a decode step can share; r1 arrives at 220 ms and its prompt rides the iteration
    from 260 ms with r0's decode: 80 ms + 30 ms, so its first token is out at 370 ms. Without the cost
    the iteration takes what r1's prompt alone takes, 100 ms."""
    trace = {"arrival_s": [0.0, P + 1.5 * D], "prompt_tokens": [10, 10], "output_tokens": [50, 2]}
    result = both_engines(trace, chunked(), eager(constant_profile(decode_ms=D * 1e3)))
    assert result["first_token_s"].tolist() == pytest.approx([P, P + 2 * D + D + C])
    plain = both_engines(trace, chunked(), constant_profile(decode_ms=D * 1e3))
    assert plain["first_token_s"][1] == pytest.approx(P + 2 * D + P)


def test_a_prompt_alone_pays_only_its_prefill():
    """The cost is part of the prefill's constant already: an idle instance's prompt takes 100 ms."""
    trace = {"arrival_s": [0.0], "prompt_tokens": [10], "output_tokens": [3]}
    result = both_engines(trace, chunked(), eager(constant_profile(decode_ms=D * 1e3)))
    assert result["first_token_s"][0] == pytest.approx(P)
    assert result["finish_s"][0] == pytest.approx(P + 2 * D)  # decode-only steps do not pay it


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6), cost=st.sampled_from([0.001, 0.004]), chunk=st.sampled_from([64, 256, 1024]))
def test_both_engines_agree_request_by_request(seed, cost, chunk):
    both_engines(random_trace(seed, n=60, rate_rps=25.0), chunked(chunk, replicas=2), eager(colo_profile(), cost))


def test_the_profile_file_writes_and_reads_the_cost(tmp_path):
    profile = eager(constant_profile())
    save_profile(profile, tmp_path / "p.yaml")
    assert load_profile(tmp_path / "p.yaml").prompt_iteration_s == pytest.approx(C)
    assert "prompt_iteration_ms" not in profile_to_dict(constant_profile())  # a profile without it reads as before


def test_a_cost_above_the_prefill_of_one_token_is_refused_by_field(tmp_path):
    text = profile_yaml(constant_profile()).replace("decode:", "prompt_iteration_ms: 150\ndecode:", 1)
    (tmp_path / "p.yaml").write_text(text)
    with pytest.raises(PdplanError) as err:
        load_profile(tmp_path / "p.yaml")
    assert err.value.field == "prompt_iteration_ms" and "100 ms" in str(err.value)

