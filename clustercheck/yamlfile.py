"""YAML loading that keeps line numbers and refuses duplicate keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from clustercheck.errors import UserError


class Mapping(dict):  # type: ignore[type-arg]
    """A YAML mapping that remembers where it and each of its keys came from (1-based lines)."""

    line: int = 0
    key_lines: dict[str, int]

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class _Loader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> Mapping:
    explicit = sum(k.tag != "tag:yaml.org,2002:merge" for k, _ in node.value)
    loader.flatten_mapping(node)  # merged (<<) pairs now come first; explicit keys may override them
    merged = len(node.value) - explicit
    out = Mapping()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    explicit_keys: set[str] = set()
    for index, (key_node, value_node) in enumerate(node.value):
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            raise UserError("mapping keys must be strings", file=loader.name,
                            line=key_node.start_mark.line + 1, key=str(key))
        if index >= merged:
            if key in explicit_keys:
                raise UserError("duplicate key", file=loader.name, line=key_node.start_mark.line + 1, key=key)
            explicit_keys.add(key)
        elif key in out:
            continue  # of several merged mappings, the first one given wins (YAML merge key spec)
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)  # type: ignore[arg-type]


def load(path: str | Path, display: str | None = None) -> Any:
    """Parse a YAML file; syntax errors become a UserError with file and line."""
    name = display or str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read: {exc.strerror or exc}", file=name) from None
    except UnicodeDecodeError:
        raise UserError("not UTF-8 text", file=name) from None
    return loads(text, name)


def loads(text: str, name: str) -> Any:
    loader = _Loader(text)
    loader.name = name
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise UserError(f"YAML syntax error: {problem}", file=name, line=line) from None
    except yaml.YAMLError as exc:
        raise UserError(f"YAML error: {exc}", file=name) from None
    finally:
        loader.dispose()
