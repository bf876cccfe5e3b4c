"""Checking parsed YAML against what we accept: unknown keys refused, types and ranges checked."""

from __future__ import annotations

import difflib
from typing import Any, Callable, TypeVar

from clustercheck.errors import UserError, show
from clustercheck.units import is_count, is_number
from clustercheck.yamlfile import Mapping

T = TypeVar("T")


class Fields:
    """Reads the keys of one YAML mapping; `done()` refuses any key nobody asked for."""

    def __init__(self, data: object, file: str, path: str, line: int = 0) -> None:
        if not isinstance(data, dict):
            raise UserError(f"expected a mapping, got {_kind(data)}", file=file, line=line or None,
                            key=path or None)
        self.data = data
        self.file = file
        self.path = path
        self.line = getattr(data, "line", 0) or line
        self.seen: set[str] = set()

    def key_path(self, key: str) -> str:
        if not key or key.strip() != key or not key.isprintable():
            key = show(key)  # '' or ' x' would vanish from "file:line: path: message"; quote them
        return f"{self.path}.{key}" if self.path else key

    def line_of(self, key: str) -> int:
        return self.data.line_of(key) if isinstance(self.data, Mapping) else self.line

    def error(self, key: str, message: str) -> UserError:
        return UserError(message, file=self.file, line=self.line_of(key) or None, key=self.key_path(key))

    def get(self, key: str, kind: type[T] | tuple[type, ...], default: Any = ..., *,
            check: Callable[[Any], str | None] | None = None, any_number_form: bool = False) -> Any:
        self.seen.add(key)
        if key in self.data and self.data[key] is None and default is not ...:
            # `iters:` with no value is a mistake (a value lost in an edit), never the default: read as one, it
            # would change what is measured or judged (20 iterations, no ceiling) without a word
            raise self.error(key, "no value (null); give one, or leave the key out for its default")
        if key not in self.data:
            if default is ...:
                typo = difflib.get_close_matches(key, [k for k in self.data if isinstance(k, str)], n=1)
                hint = f" (found {typo[0]!r}: a typo?)" if typo else ""
                raise UserError(f"required key is missing{hint}", file=self.file, line=self.line or None,
                                key=self.key_path(key))
            return default
        value = self.data[key]
        problem = self._number_form(key, value, any_number_form)
        if problem:
            raise self.error(key, problem)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if float in kinds and is_count(value):
            try:
                ok, value = True, float(value)
            except OverflowError:  # e.g. 0x followed by a thousand digits
                raise self.error(key, f"expected a number of sensible size, got {show(value)}") from None
        if not ok:
            want = " or ".join(_NAMES.get(k, k.__name__) for k in kinds)
            raise self.error(key, f"expected {want}, got {_kind(value)}")
        if check is not None:
            problem = check(value)
            if problem:
                raise self.error(key, problem)
        return value

    def _number_form(self, key: str, value: object, any_form: bool = False) -> str | None:
        """Why `value` (or an item of a list) is a number written in a YAML 1.1 form; None when it is not, or
        where the key takes any form (`any_form`: PCI device ids are written in hex)."""
        if any_form or not isinstance(self.data, Mapping):
            return None
        text = self.data.texts.get(key)
        if text is not None:
            return number_form(text, value)
        items = getattr(self.data, "item_texts", {}).get(key)  # `sizes: [010]` is [8] too
        if isinstance(value, list) and items is not None and len(items) == len(value):
            return next((f"item {i + 1}: {p}" for i, (t, v) in enumerate(zip(items, value))
                         if t is not None and (p := number_form(t, v))), None)
        return None

    def done(self) -> None:
        for key in self.data:
            if key not in self.seen:
                hint = difflib.get_close_matches(key, sorted(self.seen), n=1)
                also = f"; did you mean {hint[0]!r}?" if hint else f"; valid keys: {', '.join(sorted(self.seen))}"
                raise self.error(key, f"unknown key{also}")


def number_form(text: str, value: object) -> str | None:
    """A number written in a form YAML 1.1 reads otherwise than it looks: `010` is 8 (octal), `1:30` 90
    (base 60), `1_0` 10, `0x10` 16, `0b11` 3; each would change what is measured without a word. `text` is the
    scalar as written, `value` what YAML made of it."""
    if not is_number(value):
        return None
    digits = text.strip().lstrip("+-")
    why = ("base 60" if ":" in digits else "'_' a digit separator" if "_" in digits else
           "hexadecimal" if digits[:2] in ("0x", "0X") else "binary" if digits[:2] in ("0b", "0B") else
           "octal" if len(digits) > 1 and digits[0] == "0" and digits[1].isdigit() else None)
    if why is None:
        return None
    return (f"{show(text, 30)} is {show(value, 30)} to YAML ({why}): write the number in plain decimal, without a "
            f"leading zero, ':' or '_'")


_NAMES = {str: "text", int: "an integer", float: "a number", bool: "true/false", list: "a list", dict: "a mapping"}


def _kind(value: object) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true/false"
    return _NAMES.get(type(value), type(value).__name__) if not isinstance(value, dict) else "a mapping"


def at_least(lo: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= lo else f"must be >= {lo}, got {show(v)}"


def between(lo: float, hi: float) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"must be between {lo} and {hi}, got {show(v)}"


def one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}; got {show(v)}"
