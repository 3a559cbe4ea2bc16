"""Plan files: the examples load, bad files name file, line and field, missing profiles name the pool."""

import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pdplan.errors import PdplanError
from pdplan.hardware import get_gpu
from pdplan.latency.roofline import roofline_profile
from pdplan.latency.wide_roofline import wide_roofline_profile
from pdplan.modelref import get_model
from pdplan.sim import load_plan, simulate
from pdplan.sim.plan import unmatched_profiles
from tests.handbuilt import llama2_70b_a100_tp4

ROOT = Path(__file__).resolve().parent.parent

GOOD = """\
pdplan_plan: 1
transfer:
  schedule: layer
default_link:
  bandwidth_gb_s: 25
  setup_ms: 0.5
pools:
  - name: prefill
    phase: prefill
    model: llama2-70b
    gpu: a100-80gb
    tp: 4
    replicas: 2
  - name: decode
    phase: decode
    model: llama2-70b
    gpu: a100-80gb
    tp: 4
"""


def write(tmp_path, text, name="plan.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_the_example_plans_load():
    disagg = load_plan(ROOT / "examples" / "plan_disagg.yaml")
    colocated = load_plan(ROOT / "examples" / "plan_colocated.yaml")
    assert [p.phase for p in disagg.pools] == ["prefill", "decode"] and disagg.gpus == 16
    assert disagg.transfer_schedule == "layer"
    assert colocated.colocated and colocated.pools[0].chunk_tokens == 512


def test_a_plan_file_converts_gb_per_s_and_ms_once():
    plan = load_plan(ROOT / "examples" / "plan_disagg.yaml")
    link = plan.link("prefill", "decode")
    assert (link.bandwidth_bytes_per_s, link.setup_s) == (25e9, 0.0005)


BAD = [
    ("unknown-top-field", GOOD + "colour: blue\n", 19, "colour is not a known field"),
    ("no-version", GOOD.replace("pdplan_plan: 1\n", ""), None, "missing required field pdplan_plan"),
    ("bad-phase", GOOD.replace("phase: decode", "phase: decoding"), 15,
     "pools[1].phase must be one of colocated, decode, mixed, prefill, got 'decoding'"),
    ("zero-replicas", GOOD.replace("replicas: 2", "replicas: 0"), 13, "pools[0].replicas must be >= 1, got 0"),
    ("bad-schedule", GOOD.replace("schedule: layer", "schedule: stream"), 3,
     "transfer.schedule must be one of layer, request, got 'stream'"),
    ("bad-bandwidth", GOOD.replace("bandwidth_gb_s: 25", "bandwidth_gb_s: 0"), 5,
     "default_link.bandwidth_gb_s must be >= 0.001, got 0"),
    ("no-link", GOOD.replace("default_link:\n  bandwidth_gb_s: 25\n  setup_ms: 0.5\n", ""), None,
     "links has no link from 'prefill' to 'decode' and there is no default_link"),
    ("policy-on-decode", GOOD + "    policy: chunked\n", 19,
     "pools[1].policy applies only to colocated and mixed pools"),
    ("duplicate-pool", GOOD.replace("name: decode", "name: prefill"), 14,
     "pools[1].name must be unique across pools, got 'prefill'"),
    ("only-prefill", GOOD.split("  - name: decode")[0], None,
     "pools of a disaggregated plan need at least one prefill and one decode pool"),
    ("link-to-unknown-pool", GOOD + "links:\n  - {from: prefill, to: decoder, bandwidth_gb_s: 10}\n", 20,
     "links[0].to must name a decode or mixed pool of this plan, got 'decoder'"),
    ("tier-on-decode", GOOD + "    cache_tier: {medium: host, blocks: 10, bandwidth_gb_s: 5}\n", 19,
     "pools[1].cache_tier applies only to prefill pools"),
    ("tier-without-bandwidth", GOOD.replace("    replicas: 2\n", "    replicas: 2\n    cache_tier: {medium: host, "
                                            "blocks: 10}\n"), 14,
     "missing required field pools[0].cache_tier.bandwidth_gb_s"),
    ("negative-cache", GOOD.replace("    replicas: 2\n", "    replicas: 2\n    prefix_cache_blocks: -1\n"), 14,
     "pools[0].prefix_cache_blocks must be >= 0"),
    ("text-cache", GOOD.replace("    replicas: 2\n", "    replicas: 2\n    prefix_cache_blocks: lots\n"), 14,
     "pools[0].prefix_cache_blocks must be an integer"),
    ("unknown-router", GOOD + "router: fastest\n", 19, "router must be one of cache-aware, least-loaded, round-robin"),
    ("chunked-without-chunk", "pdplan_plan: 1\npools:\n  - {name: c, phase: colocated, model: m, gpu: g, "
     "policy: chunked}\n", 3, "missing required field pools[0].chunk_tokens"),
    ("colocated-with-link", "pdplan_plan: 1\ndefault_link: {bandwidth_gb_s: 1}\npools:\n  - {name: c, "
     "phase: colocated, model: m, gpu: g, policy: prefill-first}\n", 2,
     "default_link applies only to disaggregated plans"),
    ("not-a-mapping", "- 1\n- 2\n", None, "top level must be a mapping"),
    ("batch-cap-on-decode", GOOD + "    max_prefill_batch_tokens: 2048\n", 19,
     "pools[1].max_prefill_batch_tokens applies only to prefill and prefill-first colocated pools"),
    ("unknown-engine", GOOD + "profiles: {engine: tgi}\n", 19,
     "profiles.engine must be one of sglang, trtllm, vllm, got 'tgi'"),
    ("compose-not-bool", GOOD + "profiles: {compose: maybe}\n", 19, "profiles.compose must be true or false"),
]


@pytest.mark.parametrize("text, line, message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_plan_file_names_file_line_and_field(tmp_path, text, line, message):
    path = write(tmp_path, text)
    with pytest.raises(PdplanError, match=re.escape(message)) as err:
        load_plan(path)
    where = f"{path}:{line}: " if line is not None else f"{path}"
    assert str(err.value).startswith(where)


def test_a_long_bad_value_is_quoted_cut_in_its_one_line_error(tmp_path):
    path = write(tmp_path, GOOD.replace("    phase: prefill\n", f"    phase: prefill\n    policy: {'x' * 5000}\n", 1))
    with pytest.raises(PdplanError, match=r"pools\[0\]\.policy .*\(5002 characters\)") as err:
        load_plan(path)
    assert len(str(err.value)) < 400


def test_a_pool_without_a_profile_names_the_plan_file_the_pool_and_the_shape(tmp_path):
    path = write(tmp_path, GOOD.replace("gpu: a100-80gb\n    tp: 4\n", "gpu: h100-80gb\n    tp: 8\n", 1))
    profile = llama2_70b_a100_tp4()
    trace = {"arrival_s": [0.0], "prompt_tokens": [10], "output_tokens": [2]}
    with pytest.raises(PdplanError, match=re.escape("pool 'prefill' needs a profile for llama2-70b "
                                                    "h100-80gb TP8 PP1")) as err:
        simulate(trace, load_plan(path), {profile.key: profile}, model=get_model("llama2-70b"))
    assert str(err.value).startswith(str(path))


def test_a_batch_cap_above_the_profiles_is_refused(tmp_path):
    path = write(tmp_path, GOOD.replace("    replicas: 2\n", "    replicas: 2\n    max_prefill_batch_tokens: 4096\n"))
    profile = llama2_70b_a100_tp4()  # allows 2048
    trace = {"arrival_s": [0.0], "prompt_tokens": [10], "output_tokens": [2]}
    with pytest.raises(PdplanError, match="pool 'prefill' asks for prefill batches of up to 4096 tokens "
                                          "but its profile .* allows 2048") as err:
        simulate(trace, load_plan(path), {profile.key: profile}, model=get_model("llama2-70b"))
    assert str(err.value).startswith(str(path))


def test_a_pool_serving_another_model_than_the_simulation_is_refused(tmp_path):
    profile = llama2_70b_a100_tp4()
    trace = {"arrival_s": [0.0], "prompt_tokens": [10], "output_tokens": [2]}
    with pytest.raises(PdplanError, match="serves model 'llama2-70b' but the simulation was given 'opt-13b'"):
        simulate(trace, load_plan(write(tmp_path, GOOD)), {profile.key: profile}, model=get_model("opt-13b"))


def _one_gpu_plan(tmp_path, model: str):
    """GOOD on one H200 per instance, every pool naming ``model`` as the plan file gives it."""
    text = GOOD.replace("llama2-70b", model).replace("a100-80gb", "h200-141gb").replace("tp: 4", "tp: 1")
    return load_plan(write(tmp_path, text))


def _simulated_with(plan, model):
    profile = roofline_profile(model, get_gpu("h200-141gb"), 1, 1)
    trace = {"arrival_s": [0.0, 0.5], "prompt_tokens": [100, 200], "output_tokens": [4, 4]}
    return simulate(trace, plan, {pool.shape: profile for pool in plan.pools}, model=model)


def test_a_plan_may_name_a_quantized_catalog_model_without_its_precision(tmp_path):
    from pdplan.sim.plan import plan_model

    plan = _one_gpu_plan(tmp_path, "gpt-oss-20b")  # its config's MXFP4 makes it gpt-oss-20b@mxfp4
    model = get_model("gpt-oss-20b")
    assert model.name != "gpt-oss-20b"
    assert plan_model(plan) == model
    assert len(_simulated_with(plan, model).requests) == 2


def test_a_plan_may_name_its_model_by_the_model_files_path(tmp_path):
    source = ROOT / "pdplan" / "catalog" / "models" / "llama-3.1-8b.yaml"
    mine = tmp_path / "mine.yaml"
    mine.write_text(source.read_text().replace("name: llama-3.1-8b", "name: my-llama"))
    plan = _one_gpu_plan(tmp_path, str(mine))
    assert len(_simulated_with(plan, get_model(str(mine))).requests) == 2


def test_a_pool_naming_an_unknown_model_names_the_plan_file_and_the_pool(tmp_path):
    from pdplan.sim.plan import plan_model

    path = write(tmp_path, GOOD.replace("model: llama2-70b", "model: no-such-model", 1))
    with pytest.raises(PdplanError, match="unknown model 'no-such-model'") as err:
        plan_model(load_plan(path))
    assert str(err.value).startswith(str(path)) and err.value.field == "pools[0].model"


def test_pools_naming_one_model_two_ways_serve_one_model(tmp_path):
    from pdplan.sim.plan import plan_model

    text = GOOD.replace("model: llama2-70b", "model: gpt-oss-20b", 1).replace("model: llama2-70b",
                                                                               "model: gpt-oss-20b@mxfp4")
    assert plan_model(load_plan(write(tmp_path, text))) == get_model("gpt-oss-20b")


def test_a_plan_built_in_code_names_the_broken_field():
    from pdplan.sim.plan import Plan, Pool

    with pytest.raises(PdplanError, match="pool p: tp, pp and replicas must be >= 1") as err:
        Pool(name="p", phase="prefill", model="llama2-70b", gpu="a100-80gb", tp=0)
    assert err.value.field == "tp"
    pools = (Pool(name="c", phase="colocated", model="llama2-70b", gpu="a100-80gb", policy="prefill-first"),)
    with pytest.raises(PdplanError, match="^plan.yaml: failure_rate must be in") as err:
        Plan(pools=pools, failure_rate=0.9, source="plan.yaml")
    assert err.value.field == "failure_rate"


def test_bad_workload_arrays_name_the_field():
    profile = llama2_70b_a100_tp4()
    plan = load_plan(ROOT / "examples" / "plan_disagg.yaml")
    trace = {"arrival_s": [1.0, 0.0], "prompt_tokens": [10, 10], "output_tokens": [2, 2], "source": "t.csv"}
    with pytest.raises(PdplanError, match="^t.csv: arrival_s must be finite and non-decreasing") as err:
        simulate(trace, plan, {profile.key: profile}, model=get_model("llama2-70b"))
    assert err.value.field == "arrival_s"
    trace = {"arrival_s": [0.0, 1.0], "prompt_tokens": [10, 10], "output_tokens": [2, 0]}
    with pytest.raises(PdplanError, match="output_tokens must be >= 1, got 0") as err:
        simulate(trace, plan, {profile.key: profile}, model=get_model("llama2-70b"))
    assert err.value.field == "output_tokens"


def test_a_loaded_plan_simulates():
    profile = llama2_70b_a100_tp4()
    trace = {"arrival_s": np.arange(5.0), "prompt_tokens": np.full(5, 500), "output_tokens": np.full(5, 20)}
    result = simulate(trace, load_plan(ROOT / "examples" / "plan_disagg.yaml"), {profile.key: profile},
                      model=get_model("llama2-70b"))
    assert result.summary()["served"] == 5


def test_a_plan_round_trips_through_its_file(tmp_path):
    from pdplan.fileio import atomic_write_text, dump_yaml
    from pdplan.sim.planfile import plan_to_dict

    for example in ("plan_disagg.yaml", "plan_colocated.yaml"):
        plan = load_plan(ROOT / "examples" / example)
        atomic_write_text(tmp_path / example, dump_yaml(plan_to_dict(plan)))
        again = load_plan(tmp_path / example)
        assert again.pools == plan.pools and again.links == plan.links
        assert again.default_link == plan.default_link and again.transfer_schedule == plan.transfer_schedule


def test_a_plan_keeps_how_its_shapes_were_timed(tmp_path):
    from dataclasses import replace

    from pdplan.fileio import atomic_write_text, dump_yaml
    from pdplan.sim.planfile import plan_to_dict

    plan = replace(load_plan(ROOT / "examples" / "plan_colocated.yaml"), engine="sglang", engine_version="0.5.14",
                   compose=False)
    atomic_write_text(tmp_path / "p.yaml", dump_yaml(plan_to_dict(plan)))
    again = load_plan(tmp_path / "p.yaml")
    assert (again.engine, again.engine_version, again.compose) == ("sglang", "0.5.14", False)
    assert "profiles" not in plan_to_dict(load_plan(ROOT / "examples" / "plan_colocated.yaml"))


def test_a_pool_with_more_replicas_than_any_fleet_is_refused(tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text((ROOT / "examples" / "plan_disagg.yaml").read_text()
                    .replace("replicas: 2", "replicas: 100000000", 1))
    with pytest.raises(PdplanError, match=r"plan.yaml:\d+: pools\[0\].replicas must be <= 10,000, got 100000000"):
        load_plan(path)


WIDE = """\
pdplan_plan: 1
default_link: {bandwidth_gb_s: 50, setup_ms: 0.5}
pools:
  - {name: p, phase: prefill, model: deepseek-v3@fp8, gpu: h200-141gb, tp: 8, ep: 8}
  - {name: d, phase: decode, model: deepseek-v3@fp8, gpu: h200-141gb, tp: 8}
"""


def test_a_given_profile_of_other_coordinates_than_the_pools_of_its_tp_is_said_to_time_none_of_them(tmp_path):
    split = roofline_profile(get_model("deepseek-v3@fp8"), get_gpu("h200-141gb"), 8, 1)  # experts split over TP
    whole = write(tmp_path, WIDE.replace("tp: 8}", "tp: 8, ep: 8}"))
    said = unmatched_profiles({"tp8.yaml": split}, load_plan(whole).pools)
    assert said == ["tp8.yaml: times deepseek-v3@fp8 h200-141gb TP8 PP1, which no pool here runs; of its model, "
                    "GPU, TP and PP p (h200-141gb TP8 EP8 PP1), d (h200-141gb TP8 EP8 PP1) runs other coordinates, "
                    "timed otherwise (a profile times only its own attention DP, EP and expert slots)"]


def test_a_given_profile_that_times_a_pool_or_no_pool_of_its_tp_is_not_remarked(tmp_path):
    split = roofline_profile(get_model("deepseek-v3@fp8"), get_gpu("h200-141gb"), 8, 1)
    other = roofline_profile(get_model("deepseek-v3@fp8"), get_gpu("h200-141gb"), 4, 2)
    assert unmatched_profiles({"tp8.yaml": split, "tp4.yaml": other}, load_plan(write(tmp_path, WIDE)).pools) == []


def test_a_given_profile_of_other_expert_slots_than_the_pool_is_said_to_time_none(tmp_path):
    dp8 = WIDE.replace("tp: 8, ep: 8}", "tp: 1, dp: 8, ep: 8, redundant_experts: 8}")
    dp8 = dp8.replace("tp: 8}", "tp: 1, dp: 8, ep: 8}")
    without_slots = wide_roofline_profile(get_model("deepseek-v3@fp8"), get_gpu("h200-141gb"), 1, 1, dp=8, ep=8)
    said = unmatched_profiles({"dp8.yaml": without_slots}, load_plan(write(tmp_path, dp8)).pools)
    assert said == []   # it times the decode pool, which has no slots
    slotted = dp8.replace("tp: 1, dp: 8, ep: 8}", "tp: 1, dp: 8, ep: 8, redundant_experts: 8}")
    said = unmatched_profiles({"dp8.yaml": without_slots}, load_plan(write(tmp_path, slotted, "slotted.yaml")).pools)
    assert len(said) == 1 and said[0].startswith("dp8.yaml: times deepseek-v3@fp8 h200-141gb TP1 DP8 EP8 PP1, which")
