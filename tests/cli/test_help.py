"""``tidemark ... --help`` says what every command does and what every argument means: a command
whose help showed only its usage line left the user to guess what it deletes, which instants it
takes, and what its arguments are."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from tidemark.cli.main import build_parser, main


def commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command and subcommand of ``parser``, as the words that name it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield (*prefix, name)
                yield from commands(child, (*prefix, name))


def command_parser(words: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = build_parser()
    for word in words:
        (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = subparsers.choices[word]
    return parser


def summaries(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    """Each subcommand's one-line summary in ``parser``'s list of commands."""
    found: dict[str, str | None] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update({choice.dest: choice.help for choice in action._get_subactions()})
    return found


ALL = sorted(commands(build_parser()))


def test_every_command_is_walked() -> None:
    # the walk itself finds the commands a user sees (else the tests below check nothing)
    assert {("timeline",), ("savepoint", "create"), ("table", "read"), ("log", "inspect")} <= set(ALL)


@pytest.mark.parametrize("words", ALL, ids=" ".join)
def test_every_command_says_what_it_does(words: tuple[str, ...]) -> None:
    parser = command_parser(words)
    assert (parser.description or "").strip(), f"tidemark {' '.join(words)} has no description"
    assert summaries(command_parser(words[:-1])).get(words[-1]), f"tidemark {' '.join(words)} has no summary"


@pytest.mark.parametrize("words", [(), *ALL], ids=lambda w: " ".join(w) or "tidemark")
def test_every_argument_has_a_help_text(words: tuple[str, ...]) -> None:
    bare = [
        "/".join(a.option_strings) or a.dest
        for a in command_parser(words)._actions
        if not isinstance(a, argparse._SubParsersAction) and not (a.help and a.help.strip())
    ]
    assert not bare, f"tidemark {' '.join(words)}: no help text for {bare}"


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (("rollback",), ["pending", "latest completed"]),
        (("compact",), ["pending compaction", "finished first"]),
        (("clean",), ["left pending", "finished first", "--dry-run"]),
        (("restore",), ["base files and log files", "deleted"]),
    ],
    ids=["rollback", "compact", "clean", "restore"],
)
def test_help_tells_what_the_command_takes_and_does(
    words: tuple[str, ...], says: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*words, "--help"])
    assert exit_.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for phrase in says:
        assert phrase in shown
