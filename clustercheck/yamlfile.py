"""YAML loading that keeps line numbers and refuses duplicate keys.

Whatever the text holds, `loads` returns plain data or raises a one-line UserError with the file and,
where known, the line: characters YAML does not allow, numbers too long for Python, impossible dates,
nesting deeper than MAX_DEPTH, and merge keys (`<<`) that merge a mapping into itself included.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from clustercheck.errors import UserError, show

MAX_DEPTH = 100  # nested collections; far beyond any suite, far below Python's recursion limit
# Keys merge keys may copy into mappings, in all: a chain `&m2 {<<: *m1, k2: 1}`, `&m3 {<<: *m2, k3: 1}`, ...
# copies 1 + 2 + ... + N keys, quadratic in the file (4,000 links: 132 KB, 18 s, 920 MB). Real merges copy
# a few keys per use: an anchored block of 10 keys merged into 100 checks is 1,000 keys from ~2 KB.
MERGE_KEYS_BASE = 10_000
MERGE_KEYS_PER_CHAR = 2
# Bytes a suite or profile file may hold. The largest shipped is 13 KB and a generated suite of a thousand checks
# a few hundred KB; PyYAML keeps a node per scalar (~350 MB and 10 s of CPU per MB of numbers), so a file past this
# is a mistake (a log, a dump, /dev/zero behind a link), refused before it is read whole or parsed.
MAX_BYTES = 8 << 20
_MERGE = "tag:yaml.org,2002:merge"
_VALUE = "tag:yaml.org,2002:value"  # the `=` key, which PyYAML reads as the string "="


class SyntaxProblem(UserError):
    """Text that is not YAML at all (a character YAML refuses, a bracket left open), as opposed to YAML
    that cannot be built (a 5,000-digit number, 2001-02-30, a duplicate key): `--expect` reads the first
    as plain text."""


class TooLarge(UserError):
    """A regular file over MAX_BYTES: a suite collection still takes it (load_suite then says why)."""


class Mapping(dict):
    """A YAML mapping that remembers where it and each of its keys came from (1-based lines)."""

    line: int = 0
    key_lines: dict[str, int]
    texts: dict[str, str]  # key -> its value as written, where that is a scalar (`010`, not 8; `yes`, not True)
    item_texts: dict[str, list[str | None]]  # key -> a list's items as written (None: an item that is no scalar)

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class _Loader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.merged: dict[int, dict[str, tuple[Node, Node]]] = {}  # id(mapping node) -> its key/value pairs
        self.size = len(stream)
        self.merge_budget = MERGE_KEYS_BASE + MERGE_KEYS_PER_CHAR * self.size  # keys merges may still copy

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels",
                                                  self.peek_event().start_mark)
            node = super().compose_node(parent, index)
            assert node is not None  # only None at the end of a stream, which compose_document never asks for
            return node
        finally:
            self.depth -= 1

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (yaml.YAMLError, UserError, RecursionError):
            raise
        except Exception:  # PyYAML's own constructors: int('1' * 5000), 2001-02-30, !!bool maybe, ...
            kind = node.tag.rpartition(":")[2] or node.tag
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {show(node.value)} as {kind}", node.start_mark) from None


def _key(loader: _Loader, key_node: Node) -> str:
    key = key_node.value if key_node.tag == _VALUE else loader.construct_object(key_node, deep=True)
    if not isinstance(key, str):
        raise UserError("mapping keys must be strings", file=loader.name,
                        line=key_node.start_mark.line + 1, key=show(key))
    return key


def _pairs(loader: _Loader, node: MappingNode, merging: frozenset[int]) -> dict[str, tuple[Node, Node]]:
    """A mapping node's keys -> (key node, value node), merge keys applied as YAML 1.1 says: explicit keys
    override merged ones, and of several merged mappings the first given wins. Unlike PyYAML's
    flatten_mapping this never modifies the nodes, so an anchored mapping reads the same wherever it
    is used, and each mapping is worked out once however often aliases repeat it."""
    done = loader.merged.get(id(node))
    if done is not None:
        return done
    merged: dict[str, tuple[Node, Node]] = {}
    explicit: dict[str, tuple[Node, Node]] = {}
    seen_merge = False
    for key_node, value_node in node.value:
        if key_node.tag != _MERGE:
            key = _key(loader, key_node)
            if key in explicit:
                raise UserError("duplicate key", file=loader.name, line=key_node.start_mark.line + 1, key=key)
            explicit[key] = (key_node, value_node)
            continue
        if seen_merge:
            raise UserError("duplicate key", file=loader.name, line=key_node.start_mark.line + 1, key="<<")
        seen_merge = True
        if isinstance(value_node, MappingNode):
            sources = [value_node]
        elif isinstance(value_node, SequenceNode):
            sources = list(value_node.value)
        else:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                f"expected a mapping or list of mappings for merging, but found {value_node.id}",
                value_node.start_mark)
        for source in reversed(sources):  # the first one given wins: apply it last
            if not isinstance(source, MappingNode):
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"expected a mapping for merging, but found {source.id}", source.start_mark)
            if id(source) in merging:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    "a mapping merges itself (through an alias)", source.start_mark)
            pairs = _pairs(loader, source, merging | {id(source)})
            loader.merge_budget -= len(pairs)
            if loader.merge_budget < 0:  # what is left to copy would grow faster than the file does
                raise UserError(f"merge keys copy more keys than a file of {loader.size} characters can "
                                f"mean (over {MERGE_KEYS_BASE} + {MERGE_KEYS_PER_CHAR} per character): a chain of "
                                f"merges grows quadratically; merge fewer mappings", file=loader.name,
                                line=key_node.start_mark.line + 1, key="<<")
            merged.update(pairs)
    result = {**merged, **explicit}
    loader.merged[id(node)] = result
    return result


def _construct_mapping(loader: _Loader, node: MappingNode) -> Mapping:
    out = Mapping()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    out.texts = {}
    out.item_texts = {}
    for key, (key_node, value_node) in _pairs(loader, node, frozenset({id(node)})).items():
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
        if isinstance(value_node, ScalarNode):
            out.texts[key] = value_node.value
        elif isinstance(value_node, SequenceNode):
            out.item_texts[key] = [n.value if isinstance(n, ScalarNode) else None for n in value_node.value]
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load(path: str | Path, display: str | None = None) -> Any:
    """Parse a YAML file; syntax errors become a UserError with file and line."""
    name = display or str(path)
    return loads(read_text(path, name), name)


_NOT_REGULAR = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def read_text(path: str | Path, name: str) -> str:
    """A regular file's UTF-8 text (after links; newlines as Path.read_text gives them), at most MAX_BYTES, else
    a one-line UserError naming the file. Opened without blocking and checked on the open file, not by name: a
    FIFO would wait for a writer for ever and /dev/zero never ends; read with the bound, not by st_size, which
    a file that grows (or /proc) does not keep."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise UserError(f"cannot read: {exc.strerror or exc}", file=name) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = next((w for test, w in _NOT_REGULAR if test(mode)), "another kind of file")
        raise UserError(f"is {what}, not a regular file of YAML text", file=name)
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(MAX_BYTES + 1)
        except OSError as exc:
            raise UserError(f"cannot read: {exc.strerror or exc}", file=name) from None
    if len(data) > MAX_BYTES:
        raise TooLarge(f"larger than {MAX_BYTES >> 20} MiB, more than any suite or profile holds: not read",
                       file=name)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError("not UTF-8 text", file=name) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # universal newlines, as read_text() read it


def loads(text: str, name: str) -> Any:
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as exc:  # PyYAML checks every character before it parses
        line = text.count("\n", 0, exc.position) + 1 if isinstance(exc.position, int) else None
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        raise SyntaxProblem(f"YAML syntax error: character {ascii(char)} is not allowed in YAML", file=name,
                            line=line) from None
    loader.name = name
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context or "invalid YAML"
        error = SyntaxProblem if isinstance(exc, (yaml.scanner.ScannerError, yaml.parser.ParserError)) else UserError
        raise error(f"YAML syntax error: {problem}", file=name, line=line) from None
    except yaml.YAMLError as exc:
        raise UserError(f"YAML error: {exc}", file=name) from None
    except RecursionError:  # a safety net below MAX_DEPTH (e.g. when called from deep in a stack)
        mark = loader.get_mark()
        raise UserError("YAML nested too deeply", file=name, line=mark.line + 1) from None
    finally:
        loader.dispose()
