"""Argument types shared by every subcommand's parser (and the pytest plugin's options): a value that must
not be empty, and a path that must not be empty. `Path('')` is `.`, so an empty path would silently mean
the working directory: `--thresholds ''` searched it for profiles, `compare --out ''` looked for runs in it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable


def given(option: str) -> Callable[[str], str]:
    """A value that must not be empty: `--platform ''` is a mistake, not 'detect'."""
    def check(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{option} needs a value, got an empty one")
        return text
    return check


def hostlist_of(option: str) -> Callable[[str], str]:
    """A Slurm hostlist (`node[01-04,07]`), checked as it is given: a malformed one, or one that names no
    host (`,`), is one line at the command line, not a BadHostlist traceback from wherever it is first
    expanded, nor an empty list read as none given."""
    def check(text: str) -> str:
        import hostlist

        try:
            names = hostlist.expand_hostlist(given(option)(text))
        except hostlist.BadHostlist as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
        if not names:  # `,` expands to nothing: read as no list at all, it meant every node
            raise argparse.ArgumentTypeError(f"{text!r} names no host")
        return text
    return check


def seconds(option: str, most: float) -> Callable[[str], float]:
    """A number of seconds above 0 and at most `most`: NaN compares false with every deadline, so a wait
    given `nan` (or `inf`) never ended."""
    def check(text: str) -> float:
        try:
            value = float(given(option)(text))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not 0 < value <= most:
            raise argparse.ArgumentTypeError(f"{text!r}: must be above 0 and at most {most:g} seconds")
        return value
    return check


def path(option: str) -> Callable[[str], Path]:
    """A file or directory option: an empty one is refused, never read as the working directory."""
    def check(text: str) -> Path:
        return Path(given(option)(text))
    return check


def refuse_empty_paths(parser: argparse.ArgumentParser) -> None:
    """Every `type=Path` argument of `parser` and its subcommands' parsers refuses an empty value, each
    named by its flag (or its metavar, for a positional): declared once here, so that no subcommand's
    path option (probe --input, sign --key, ...) can miss it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases share a parser
                refuse_empty_paths(sub)
        elif action.type is Path:
            action.type = path(_name(action))


def _name(action: Any) -> str:
    if action.option_strings:
        return str(max(action.option_strings, key=len))  # --input, not -i
    return str(action.metavar or action.dest)
