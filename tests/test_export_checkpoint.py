"""The engines load the checkpoint the identity names: at its revision, when the manifest pins one
(``--revision``; vLLM: vllm/engine/arg_utils.py ``model_group.add_argument("--revision")``; SGLang:
server_args.py ``--revision``, "a branch name, a tag name, or a commit id"), and running the code its
repository keeps when its config or tokenizer is such code (``--trust-remote-code``, vLLM's and SGLang's
flag alike; Moonshot's deploy guidance starts Kimi-K2 with it)."""

import copy
from pathlib import Path

import pytest

from pdplan import names
from pdplan.manifest.export import FORMATS, export_manifest
from tests.test_export_precision import engine_commands, flag_values, planned

ROOT = Path(__file__).resolve().parent.parent
COMMIT = "9216db5781bf21249d130ec9da846c4624c16137"


def pinned(manifest: dict, revision: str) -> dict:
    edited = copy.deepcopy(manifest)
    edited["identity"]["checkpoint"]["revision"] = revision
    return edited


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_pinned_revision_starts_every_engine_at_it(disaggregated, fmt):
    files = export_manifest(pinned(disaggregated, COMMIT), fmt)
    assert flag_values(files, "--revision") == [COMMIT] * engine_commands(files)


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_unknown_revision_leaves_the_engines_on_the_default_branch(disaggregated, fmt):
    files = export_manifest(pinned(disaggregated, "unknown"), fmt)
    assert flag_values(files, "--revision") == [] and engine_commands(files) >= 1


@pytest.mark.parametrize("fmt", FORMATS)
def test_free_text_from_an_older_manifest_is_not_passed_and_the_export_says_so(disaggregated, fmt):
    files = export_manifest(pinned(disaggregated, "weights of June; see ticket 42"), fmt)
    assert flag_values(files, "--revision") == []
    assert any("is not a branch, tag or commit id, so the engines are not given it" in text
               for text in files.values())


@pytest.mark.parametrize("value", ["main", "v1.0", "refs/pr/1", COMMIT, "release_2026-01+fp8"])
def test_branches_tags_pull_requests_and_commits_are_revisions(value):
    assert names.revision(value) is None


@pytest.mark.parametrize("value", ["-rf", "a..b", "two words", "main.lock", "dev/", "a//b", "/main", "", "x" * 256,
                                   "line\nbreak"])
def test_what_git_would_not_take_as_a_ref_is_not_a_revision(value):
    assert names.revision(value) is not None


def test_optimize_refuses_a_revision_the_engines_cannot_take_before_any_work(run_cli, tmp_path):
    code, out, err = run_cli("optimize", ROOT / "traces" / "chat_poisson_2k.csv", "--revision", "main; rm -rf /",
                             "--out", tmp_path / "plan.yaml")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--revision must be a Hugging Face revision" in err and not (tmp_path / "plan.yaml").exists()


def flagged(files: dict[str, str], flag: str) -> int:
    """Engine commands of an export that carry ``flag``."""
    from tests.test_manifest_export import _tokens

    return sum(1 for tokens in _tokens(files) if flag in tokens and ("--tensor-parallel-size" in tokens
                                                                      or "--tp-size" in tokens))


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_checkpoint_whose_code_lives_in_its_repository_is_loaded_with_trust_remote_code(disaggregated, fmt):
    manifest = copy.deepcopy(disaggregated)
    manifest["identity"]["checkpoint"]["trust_remote_code"] = True
    files = export_manifest(manifest, fmt)
    assert flagged(files, "--trust-remote-code") == engine_commands(files) >= 1
    assert any("--trust-remote-code): its config or tokenizer is kept there" in text for text in files.values())


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_checkpoint_of_library_code_runs_none_of_its_repository(disaggregated, fmt):
    files = export_manifest(disaggregated, fmt)
    assert flagged(files, "--trust-remote-code") == 0 and engine_commands(files) >= 1


@pytest.mark.parametrize("fmt", ["vllm", "sglang"])
def test_a_kimi_k2_manifest_written_before_it_was_recorded_still_trusts_its_repository(colocated, fmt):
    manifest = planned(colocated, "kimi-k2", checkpoint=None)
    assert "trust_remote_code" not in manifest["identity"]["checkpoint"]
    files = export_manifest(manifest, fmt)
    assert flagged(files, "--trust-remote-code") == engine_commands(files) >= 1


def test_the_manifest_records_that_kimi_k2s_checkpoint_runs_its_repositorys_code():
    from pdplan.manifest.build import Identity, _identity
    from pdplan.modelref import get_model

    assert _identity(get_model("kimi-k2"), Identity())["checkpoint"]["trust_remote_code"] is True
    assert "trust_remote_code" not in _identity(get_model("deepseek-v3"), Identity())["checkpoint"]
