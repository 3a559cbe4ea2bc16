"""Every command's rendered --help: what it shows of flags and extras."""

from __future__ import annotations

import pytest

from pdplan.cli import _command


def _paths(command, path=()) -> list[tuple[str, ...]]:
    """Every command's words after ``pdplan``, groups included (the app itself is ``()``)."""
    subs = getattr(command, "commands", {})
    return [path] + [p for name, sub in sorted(subs.items()) for p in _paths(sub, (*path, name))]



@pytest.mark.parametrize("command,extra", [(("profile", "compose"), "'pdplan[aic]'"),
                                           (("sensitivity", "grid"), "'pdplan[ray]'"),
                                           (("goodput",), "pdplan[aic]"), (("optimize",), "pdplan[aic]")],
                         ids=lambda value: " ".join(value) if isinstance(value, tuple) else None)
def test_help_names_the_optional_extras_with_their_brackets(run_cli, command, extra):
    code, out, _ = run_cli(*command, "--help")
    assert code == 0 and extra in out


def test_optimize_help_says_a_shape_without_a_measured_profile_is_composed_before_a_roofline(run_cli):
    words = " ".join(run_cli("optimize", "--help")[1].split())
    assert ("each shape timed by its shipped measured profile, else composed from vLLM's measured operators "
            "(the optional extra pdplan[aic]), else by a roofline") in words


@pytest.mark.parametrize("command", _paths(_command()), ids=lambda path: " ".join(path) or "pdplan")
def test_help_shows_no_value_for_a_flag(run_cli, command):
    code, out, _ = run_cli(*command, "--help")
    assert code == 0 and "--help" in out and "<bool>" not in out
