"""Every command's rendered --help: what it shows of flags and extras."""

from __future__ import annotations

import pytest

from pdplan.cli import _command, unwrap


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


def test_a_docstring_paragraph_becomes_one_line_for_rich_to_wrap_and_list_items_keep_theirs():
    doc = """Summary line
    goes on.

    Second paragraph,
    wrapped in the source.

    - a list item
      continued
    - another
    """
    assert unwrap(doc) == ("Summary line goes on.\n\nSecond paragraph, wrapped in the source.\n\n"
                           "- a list item continued\n- another")


def _command_at(path):
    command = _command()
    for word in path:
        command = command.commands[word]
    return command


@pytest.mark.parametrize("command", _paths(_command()), ids=lambda path: " ".join(path) or "pdplan")
def test_help_paragraphs_carry_no_source_line_breaks(command):
    """Rich wraps each paragraph at the terminal's width; a line break kept from the docstring would
    print a ragged line in the middle of it."""
    for paragraph in (_command_at(command).help or "").split("\n\n"):
        assert all(line.lstrip()[:2] in ("- ", "* ") for line in paragraph.split("\n")[1:]), paragraph
