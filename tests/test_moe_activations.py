"""The precision MXFP4 experts take their activations in, stated once (``--moe-activations``) and carried from
the composition to the plan, the manifest, its checks and the commands that start the engines.

vLLM feeds gpt-oss's experts BF16 activations on Blackwell unless told MXFP8 (0.33.0:
``--quantization-config {"moe":{"activation":"mxfp8"}}``; its earlier releases:
``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``); SGLang quantizes them to MXFP8 there unless
``--flashinfer-mxfp4-moe-precision bf16`` (SGLang 0.5.23, read in its wheel:
``flashinfer_mxfp4_moe_precision: Literal["default", "bf16", "fp8"]`` in arg_groups/fields/exec_.py).
"""

import copy
import json

import pytest

from pdplan.errors import PdplanError
from pdplan.fileio import atomic_write_text, dump_yaml
from pdplan.hardware import get_gpu
from pdplan.latency.source import ProfileSource
from pdplan.manifest.check import check_manifest
from pdplan.manifest.export import FORMATS, export_manifest
from pdplan.modelref import get_model
from pdplan.sim.planfile import load_plan, plan_to_dict
from tests.conftest import ROOT
from tests.test_export_precision import planned
from tests.test_manifest_export import _tokens

VLLM_FORMATS = tuple(fmt for fmt in FORMATS if fmt != "sglang")
#: vLLM 0.33.0 (read in its wheel): a pre-quantized checkpoint's MoE activation override, ``QUANT_KEY_NAMES["mxfp8"]``
#: in vllm/config/quantization.py, with which ``select_mxfp4_moe_backend`` prefers FLASHINFER_TRTLLM_MXFP4_MXFP8.
MXFP8_CONFIG = {"moe": {"activation": "mxfp8"}}


def timed_at(manifest: dict, activations: str | None) -> dict:
    """``manifest`` planned for gpt-oss-120b, its experts composed at ``activations`` (None: the default)."""
    edited = planned(manifest, "gpt-oss-120b", checkpoint=None)
    if activations is not None:
        edited["provenance"]["profiles"]["moe_activations"] = activations
    return edited


def vllm_commands(files: dict[str, str]) -> list[list[str]]:
    return [tokens for tokens in _tokens(files) if "--tensor-parallel-size" in tokens]


def quantization_configs(tokens: list[str]) -> list[dict]:
    return [json.loads(tokens[i + 1]) for i, t in enumerate(tokens) if t == "--quantization-config"]


@pytest.mark.parametrize("fmt", VLLM_FORMATS)
def test_a_plan_composed_with_mxfp8_experts_starts_vllm_with_its_mxfp8_kernel(colocated, fmt):
    commands = vllm_commands(export_manifest(timed_at(colocated, "mxfp8"), fmt))
    assert commands and all(quantization_configs(tokens) == [MXFP8_CONFIG] for tokens in commands)


@pytest.mark.parametrize("fmt", VLLM_FORMATS)
@pytest.mark.parametrize("activations", [None, "bf16"])
def test_vllms_default_bf16_experts_need_no_override(colocated, fmt, activations):
    commands = vllm_commands(export_manifest(timed_at(colocated, activations), fmt))
    assert commands and all(quantization_configs(tokens) == [] for tokens in commands)


@pytest.mark.parametrize(("activations", "flags"), [("bf16", [["--flashinfer-mxfp4-moe-precision", "bf16"]]),
                                                     ("mxfp8", []), (None, [])])
def test_sglang_is_told_bf16_experts_and_left_at_its_mxfp8_default(colocated, activations, flags):
    commands = [tokens for tokens in _tokens(export_manifest(timed_at(colocated, activations), "sglang"))
                if "--tp-size" in tokens]
    assert commands
    for tokens in commands:
        found = [tokens[i:i + 2] for i, t in enumerate(tokens) if t == "--flashinfer-mxfp4-moe-precision"]
        assert found == flags


def test_validate_refuses_mxfp8_experts_on_a_gpu_before_blackwell(colocated):
    manifest = timed_at(colocated, "mxfp8")
    assert "fp4" not in get_gpu(manifest["pools"][0]["gpu"]).dtypes
    found = [v for v in check_manifest(manifest) if v.field == "provenance.profiles.moe_activations"]
    assert found and "Blackwell" in found[0].message


def test_validate_refuses_an_activation_precision_for_experts_that_take_none(colocated):
    manifest = copy.deepcopy(colocated)  # llama2-70b: dense, bf16
    manifest["provenance"]["profiles"]["moe_activations"] = "bf16"
    found = [v for v in check_manifest(manifest) if v.field == "provenance.profiles.moe_activations"]
    assert found and "MXFP4 experts only" in found[0].message


def test_a_plan_file_states_the_precision_and_round_trips_it(tmp_path):
    text = (ROOT / "examples" / "plan_disagg.yaml").read_text()
    path = tmp_path / "plan.yaml"
    path.write_text(text.replace("pdplan_plan: 1", "pdplan_plan: 1\nprofiles:\n  moe_activations: mxfp8", 1))
    plan = load_plan(path)
    assert plan.moe_activations == "mxfp8" and plan_to_dict(plan)["profiles"] == {"moe_activations": "mxfp8"}
    atomic_write_text(tmp_path / "again.yaml", dump_yaml(plan_to_dict(plan)))
    assert load_plan(tmp_path / "again.yaml").moe_activations == "mxfp8"
    path.write_text(text.replace("pdplan_plan: 1", "pdplan_plan: 1\nprofiles:\n  moe_activations: fp8", 1))
    with pytest.raises(PdplanError, match=r"profiles\.moe_activations must be one of"):
        load_plan(path)


def test_mxfp8_experts_asked_on_hopper_are_refused_not_timed_another_way():
    """The engine would refuse to start, so no roofline stands in for the composition."""
    pytest.importorskip("aiconfigurator_core", reason="composed profiles need the optional extra pdplan[aic]")
    source = ProfileSource({}, engine="vllm", moe_activations="mxfp8")
    with pytest.raises(PdplanError, match="Blackwell") as refused:
        source.profile(get_model("gpt-oss-120b"), get_gpu("h100-80gb"), 1, 1)
    assert refused.value.field == "moe_activations" and not source.fallbacks


def test_a_precision_for_a_model_without_mxfp4_experts_is_refused_before_any_profile():
    with pytest.raises(PdplanError, match="MXFP4 experts only") as refused:
        ProfileSource({}, moe_activations="bf16").profile(get_model("llama-3.1-8b"), get_gpu("b200-180gb"), 1, 1)
    assert refused.value.field == "moe_activations"
