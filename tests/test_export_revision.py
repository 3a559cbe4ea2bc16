"""The checkpoint's revision reaches the engines: a manifest that pins one starts every engine with
``--revision`` (vLLM: vllm/engine/arg_utils.py ``model_group.add_argument("--revision")``; SGLang:
server_args.py ``--revision``, "a branch name, a tag name, or a commit id"), so prefill and decode
load the weights the plan names."""

import copy
from pathlib import Path

import pytest

from pdplan import names
from pdplan.manifest.export import FORMATS, export_manifest
from tests.test_export_precision import engine_commands, flag_values

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
