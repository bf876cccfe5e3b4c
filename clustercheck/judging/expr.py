"""The threshold expression grammar: a small, safe parser (no eval).

    limit   := OP sum                          OP is one of >= <= > < ==
    sum     := product (('+' | '-') product)*
    product := unary (('*' | '/') unary)*
    unary   := '-' unary | atom
    atom    := NUMBER ['%'] | 'spec' '.' NAME '.' NAME | '(' sum ')'

Numbers are dimensionless; a `spec.<name>.<field>` reference carries the unit and source of a
spec-table value, and `<name>` may be a hardware role of the platform (e.g. `nvlink` -> `nvlink4`).
A quantity may be scaled by numbers and added to quantities of the same unit, nothing else.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

from clustercheck.errors import show

OPS = (">=", "<=", "==", ">", "<")
MAX_DEPTH = 50  # parentheses and unary minus; keeps the recursive parser far from Python's stack limit
_TOKEN = re.compile(r"\s*(?:(?P<num>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"
                    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>>=|<=|==|[-+*/().%<>]))")


class ExprError(ValueError):
    """A malformed or ill-typed expression; the message says what was expected."""


@dataclass(frozen=True)
class Quantity:
    value: float
    unit: str | None  # None: a plain number
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class Parsed:
    op: str
    value: float
    unit: str | None
    sources: tuple[str, ...]
    percent: bool = False  # a number was written with '%' (a share: of a spec value, or a limit in %)


Resolver = Callable[[str, str], Quantity]  # (spec name or role, field) -> Quantity


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExprError(f"unexpected character {text[pos:].strip()[:1]!r} at position {pos + 1}")
        out.append(m.group(m.lastgroup or "op"))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str, resolve: Resolver) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.depth = 0
        self.resolve = resolve
        self.percent = False

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, what: str = "more") -> str:
        tok = self.peek()
        if tok is None:
            raise ExprError(f"expression ends early; expected {what}")
        self.i += 1
        return tok

    def expect(self, tok: str) -> None:
        found = self.take(repr(tok))
        if found != tok:
            raise ExprError(f"expected {tok!r}, found {show(found)}")

    def limit(self) -> Parsed:
        op = self.peek()
        if op not in OPS:
            raise ExprError(f"a limit starts with one of {' '.join(OPS)}, e.g. '>= 0.80 * spec.nvlink.unidirectional'")
        self.take()
        q = self.sum()
        if self.peek() is not None:
            raise ExprError(f"unexpected {show(self.peek())} after the expression")
        if not math.isfinite(q.value):
            raise ExprError("the limit is not a finite number")
        return Parsed(op, q.value, q.unit, q.sources, self.percent)

    def sum(self) -> Quantity:
        left = self.product()
        while self.peek() in ("+", "-"):
            sign = 1.0 if self.take() == "+" else -1.0
            right = self.product()
            if left.unit != right.unit:
                raise ExprError(f"cannot add {_u(left.unit)} and {_u(right.unit)}")
            left = Quantity(left.value + sign * right.value, left.unit, left.sources + right.sources)
        return left

    def product(self) -> Quantity:
        left = self.unary()
        while self.peek() in ("*", "/"):
            op = self.take()
            right = self.unary()
            if op == "*":
                if left.unit and right.unit:
                    raise ExprError(f"cannot multiply {left.unit} by {right.unit}")
                left = Quantity(left.value * right.value, left.unit or right.unit, left.sources + right.sources)
            else:
                if right.unit and right.unit != left.unit:
                    raise ExprError(f"cannot divide {_u(left.unit)} by {right.unit}")
                if right.value == 0:
                    raise ExprError("division by zero")
                unit = None if right.unit else left.unit
                left = Quantity(left.value / right.value, unit, left.sources + right.sources)
        return left

    def unary(self) -> Quantity:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExprError(f"expression nested deeper than {MAX_DEPTH} levels")
        try:
            if self.peek() == "-":
                self.take()
                q = self.unary()
                return Quantity(-q.value, q.unit, q.sources)
            return self.atom()
        finally:
            self.depth -= 1

    def atom(self) -> Quantity:
        tok = self.take("a number, 'spec.<name>.<field>' or '('")
        if tok == "(":
            q = self.sum()
            self.expect(")")
            return q
        if tok[0].isdigit() or tok[0] == "." and len(tok) > 1:
            value = float(tok)
            if self.peek() == "%":
                self.take()
                value /= 100
                self.percent = True
            return Quantity(value, None)
        if tok == "spec":
            self.expect(".")
            name = self._name("a spec name after 'spec.'")
            self.expect(".")
            field = self._name(f"a field after 'spec.{name}.'")
            try:
                return self.resolve(name, field)
            except KeyError as exc:
                raise ExprError(str(exc.args[0])) from None
        if tok[0].isalpha() or tok[0] == "_":
            raise ExprError(f"unknown name {show(tok)}; only numbers and spec.<name>.<field> are allowed")
        raise ExprError(f"expected a number, 'spec.<name>.<field>' or '(', found {show(tok)}")

    def _name(self, what: str) -> str:
        tok = self.take(what)
        if not (tok[0].isalpha() or tok[0] == "_"):
            raise ExprError(f"expected {what}, found {show(tok)}")
        return tok


def _u(unit: str | None) -> str:
    return unit or "a plain number"


def parse_limit(text: str, resolve: Resolver) -> Parsed:
    """Parse '>= 0.80 * spec.nvlink.unidirectional' into op, value, unit and sources."""
    if not isinstance(text, str) or not text.strip():
        raise ExprError("expected a limit such as '>= 0.80 * spec.nvlink.unidirectional'")
    return _Parser(text, resolve).limit()
