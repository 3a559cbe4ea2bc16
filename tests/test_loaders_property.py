"""Every loader, fed random bytes or random numeric extremes, either reads the input or raises one
PdplanError whose message is one line; nothing else escapes, and what it reads is in range."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pdplan import limits
from pdplan.errors import PdplanError
from pdplan.hardware import load_cluster
from pdplan.latency.importers import read_points_csv, read_splitwise
from pdplan.latency.profile import load_profile
from pdplan.modelcatalog import load_model
from pdplan.sim.planfile import load_plan
from pdplan.slo import load_slo
from pdplan.workload import load_trace

LOADERS = {
    "trace.csv": load_trace,
    "trace.jsonl": load_trace,
    "cluster.yaml": load_cluster,
    "plan.yaml": load_plan,
    "slo.yaml": load_slo,
    "model.yaml": load_model,
    "profile.yaml": load_profile,
    "splitwise.csv": read_splitwise,
    "points.csv": lambda path: read_points_csv(path, model="llama2-70b", gpu="h100-80gb"),
}
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def load(tmp_path: Path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    try:
        return LOADERS[name](path)
    except PdplanError as err:
        assert "\n" not in str(err) and str(err).strip(), repr(str(err))
        return None


@pytest.mark.parametrize("name", list(LOADERS))
@SETTINGS
@given(data=st.binary(max_size=600))
def test_random_bytes_are_read_or_refused_in_one_line(tmp_path, name, data):
    load(tmp_path, name, data)


TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=300)


@pytest.mark.parametrize("name", list(LOADERS))
@SETTINGS
@given(text=TEXT)
def test_random_text_is_read_or_refused_in_one_line(tmp_path, name, text):
    load(tmp_path, name, text.encode())


EXTREME = st.one_of(
    st.integers(min_value=-(2**200), max_value=2**200).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda x: repr(x) if math.isfinite(x) else
                                                         {"nan": ".nan", "inf": ".inf", "-inf": "-.inf"}[repr(x)]),
    st.sampled_from(["9" * 5000, "1.0e+308", "-1.0e+308", "0", "-1", "1e308", "0x7fffffffffffffff"]),
)


@SETTINGS
@given(count=EXTREME, gb_s=EXTREME, pue=EXTREME, price=EXTREME)
def test_cluster_numbers_at_the_edges(tmp_path, count, gb_s, pue, price):
    text = (f"nodes:\n  - {{name: n, gpu: h100-80gb, gpus_per_node: 8, intra_node_gb_s: {gb_s}, "
            f"inter_node_gb_s: 50, count: {count}}}\nprices: {{h100-80gb: {price}}}\npue: {pue}\n")
    cluster = load(tmp_path, "cluster.yaml", text.encode())
    if cluster is not None:
        node = cluster.nodes[0]
        assert 1 <= cluster.pue <= limits.MAX_PUE and node.count <= limits.MAX_NODES
        assert node.gpu.usd_per_hour <= limits.MAX_USD_PER_GPU_HOUR


@SETTINGS
@given(tp=EXTREME, replicas=EXTREME, bandwidth=EXTREME, setup=EXTREME)
def test_plan_numbers_at_the_edges(tmp_path, tp, replicas, bandwidth, setup):
    text = ("pdplan_plan: 1\npools:\n"
            f"  - {{name: p, phase: prefill, model: llama2-70b, gpu: h100-80gb, tp: {tp}, replicas: {replicas}}}\n"
            "  - {name: d, phase: decode, model: llama2-70b, gpu: h100-80gb, tp: 4}\n"
            f"default_link: {{bandwidth_gb_s: {bandwidth}, setup_ms: {setup}}}\n")
    plan = load(tmp_path, "plan.yaml", text.encode())
    if plan is not None:
        assert plan.pools[0].tp <= limits.MAX_GPUS_PER_INSTANCE_STAGE
        assert plan.default_link.bandwidth_bytes_per_s <= limits.MAX_BANDWIDTH_GB_S * 1e9


@SETTINGS
@given(threshold=EXTREME, share=EXTREME)
def test_slo_numbers_at_the_edges(tmp_path, threshold, share):
    text = f"objectives:\n  - {{metric: ttft, threshold_ms: {threshold}, attainment: {share}}}\n"
    slo = load(tmp_path, "slo.yaml", text.encode())
    if slo is not None:
        objective = slo.objectives[0]
        assert 0 < objective.threshold_s <= limits.MAX_LATENCY_MS / 1e3 and 0 < objective.attainment <= 1


@SETTINGS
@given(arrival=EXTREME, prompt=EXTREME, output=EXTREME)
def test_trace_numbers_at_the_edges(tmp_path, arrival, prompt, output):
    text = f"arrival_s,prompt_tokens,output_tokens\n0,5,5\n{arrival},{prompt},{output}\n"
    workload = load(tmp_path, "trace.csv", text.encode())
    if workload is not None:
        assert workload.prompt_tokens.max() <= limits.MAX_TOKENS_PER_REQUEST
        assert workload.output_tokens.max() <= limits.MAX_TOKENS_PER_REQUEST
        assert abs(workload.arrival_s).max() <= limits.MAX_TRACE_SECONDS
