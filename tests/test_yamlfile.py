"""clustercheck.yamlfile: line numbers on mappings and keys, duplicate and non-string keys refused,
syntax errors as one-line UserErrors that start with `<file>:<line>:`."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck import yamlfile
from clustercheck.errors import UserError


def write(tmp_path: Path, text: str, name: str = "doc.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def load_error(path: Path, display: str | None = None) -> UserError:
    with pytest.raises(UserError) as info:
        yamlfile.load(path, display)
    return info.value


# -- line numbers ----------------------------------------------------------------------------

def test_top_level_mapping_starts_on_its_first_key_line(tmp_path):
    doc = yamlfile.load(write(tmp_path, "# comment\n\nfirst: 1\nsecond: 2\n"))
    assert isinstance(doc, yamlfile.Mapping)
    assert doc.line == 3


def test_each_key_remembers_its_line(tmp_path):
    doc = yamlfile.load(write(tmp_path, "a: 1\n\nb: 2\n# note\nc:\n  d: 3\n"))
    assert doc.key_lines == {"a": 1, "b": 3, "c": 5}
    assert doc.line_of("b") == 3


def test_nested_mapping_keeps_its_own_lines(tmp_path):
    doc = yamlfile.load(write(tmp_path, "outer:\n  inner:\n    x: 1\n    y: 2\n"))
    inner = doc["outer"]["inner"]
    assert isinstance(inner, yamlfile.Mapping)
    assert inner.line == 3
    assert inner.line_of("y") == 4


def test_mappings_inside_a_list_know_their_lines(tmp_path):
    doc = yamlfile.load(write(tmp_path, "checks:\n  - id: a\n    x: 1\n  - id: b\n    x: 2\n"))
    assert [item.line for item in doc["checks"]] == [2, 4]
    assert doc["checks"][1].line_of("x") == 5


def test_flow_mapping_lines(tmp_path):
    doc = yamlfile.load(write(tmp_path, "a: 1\nb: {c: 1, d: 2}\n"))
    assert doc["b"].line == 2
    assert doc["b"].line_of("d") == 2


def test_line_of_an_absent_key_is_the_mapping_line(tmp_path):
    doc = yamlfile.load(write(tmp_path, "x: 1\nm:\n  a: 1\n"))
    assert doc["m"].line_of("missing") == 3


def test_values_are_plain_python(tmp_path):
    doc = yamlfile.load(write(tmp_path, "n: 4096\nf: 1.5\ns: 16MiB\nl: [1, two]\nb: true\nz:\n"))
    assert doc == {"n": 4096, "f": 1.5, "s": "16MiB", "l": [1, "two"], "b": True, "z": None}


def test_empty_file_loads_as_none(tmp_path):
    assert yamlfile.load(write(tmp_path, "")) is None


# -- duplicate keys --------------------------------------------------------------------------

def test_duplicate_top_level_key_is_refused_with_file_and_line(tmp_path):
    path = write(tmp_path, "a: 1\nb: 2\na: 3\n")
    exc = load_error(path)
    assert str(exc).startswith(f"{path}:3:")
    assert exc.key == "a"
    assert "duplicate" in str(exc)


def test_duplicate_nested_key_is_refused_at_the_second_occurrence(tmp_path):
    path = write(tmp_path, "top:\n  inner:\n    x: 1\n    y: 2\n    x: 3\n")
    exc = load_error(path)
    assert (exc.file, exc.line, exc.key) == (str(path), 5, "x")


def test_duplicate_key_in_flow_mapping_is_refused(tmp_path):
    path = write(tmp_path, "a: 1\nb: {c: 1, c: 2}\n")
    assert str(load_error(path)).startswith(f"{path}:2:")


def test_same_key_in_different_mappings_is_fine(tmp_path):
    doc = yamlfile.load(write(tmp_path, "- id: a\n- id: b\n"))
    assert [d["id"] for d in doc] == ["a", "b"]


def test_merge_key_without_override_is_accepted(tmp_path):
    doc = yamlfile.load(write(tmp_path, "base: &b {a: 1, z: 2}\nx:\n  <<: *b\n  c: 3\n"))
    assert doc["x"] == {"a": 1, "z": 2, "c": 3}


def test_explicit_key_overrides_a_merged_key(tmp_path):
    doc = yamlfile.load(write(tmp_path, "base: &b {a: 1, z: 2}\nx:\n  <<: *b\n  a: 5\n"))
    assert doc["x"] == {"a": 5, "z": 2}


# -- syntax errors ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, line", [
    ("a: 1\nb: c: d\n", 2),                      # mapping values not allowed here
    ("a: 1\nb:\n  - x\n  y: 2\n", 4),             # block sequence/mapping mix
    ("a: 1\n\tb: 2\n", 2),                       # tab indentation
    ("a: 1\nb: \"open\n", 3),                    # unterminated quoted scalar (found at end of stream)
    ("x: 1\ny: *nowhere\n", 2),                  # undefined alias
    ("a: !!python/object:os.system ls\n", 1),    # unsafe tag: SafeLoader refuses it
])
def test_syntax_error_becomes_user_error_with_file_and_line(tmp_path, text, line):
    path = write(tmp_path, text)
    exc = load_error(path)
    assert str(exc).startswith(f"{path}:{line}:"), str(exc)
    assert exc.line == line
    assert "\n" not in str(exc)


def test_syntax_error_uses_the_display_name(tmp_path):
    path = write(tmp_path, "a: [1, 2\nb: 3\n")
    exc = load_error(path, "suites/mine.yaml")
    assert str(exc).startswith("suites/mine.yaml:")
    assert str(path) not in str(exc)


def test_second_document_is_refused(tmp_path):
    path = write(tmp_path, "a: 1\n---\nb: 2\n")
    assert str(load_error(path)).startswith(f"{path}:2:")


def test_missing_file_is_a_user_error_naming_it(tmp_path):
    path = tmp_path / "absent.yaml"
    exc = load_error(path)
    assert str(exc).startswith(f"{path}: ")
    assert "cannot read" in str(exc)


def test_non_utf8_file_is_a_user_error(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    exc = load_error(path)
    assert exc.file == str(path)
    assert "UTF-8" in str(exc)


# -- non-string keys -------------------------------------------------------------------------

@pytest.mark.parametrize("text, shown", [
    ("a: 1\n5: five\n", "5"),
    ("a: 1\ntrue: yes\n", "True"),
    ("a: 1\nnull: nothing\n", "None"),
    ("a: 1\n1.5: x\n", "1.5"),
    ("a: 1\n? [1, 2]\n: pair\n", "[1, 2]"),
])
def test_non_string_key_is_refused_with_line(tmp_path, text, shown):
    path = write(tmp_path, text)
    exc = load_error(path)
    assert str(exc).startswith(f"{path}:2:")
    assert exc.key == shown
    assert "keys must be strings" in str(exc)


def test_non_string_key_in_nested_mapping_is_refused(tmp_path):
    path = write(tmp_path, "env:\n  OK: 1\n  2: two\n")
    assert load_error(path).line == 3


def test_quoted_number_key_is_a_string(tmp_path):
    assert yamlfile.load(write(tmp_path, "'5': five\n")) == {"5": "five"}


# -- found by tests/test_fuzz_inputs.py: input PyYAML turns into exceptions other than YAMLError -----

@pytest.mark.parametrize("text, line, words", [
    ("a: 1\nb: x\x07y\n", 2, "'\\x07' is not allowed"),          # ReaderError, raised before parsing
    ("a: 1\n\x00\n", 2, "'\\x00' is not allowed"),
    ("a: 1\nb: " + "1" * 5000 + "\n", 2, "as int"),                 # int() refuses > 4300 digits
    ("a: 2001-02-30\n", 1, "'2001-02-30' as timestamp"),            # datetime() refuses the day
    ("a: !!bool maybe\n", 1, "'maybe' as bool"),                    # KeyError inside PyYAML
    ("a: !!int\n", 1, "as int"),                                    # IndexError inside PyYAML
    ("a: !!float x\n", 1, "'x' as float"),
    ("a: !!timestamp never\n", 1, "as timestamp"),                  # AttributeError inside PyYAML
    ("a:\n  b: " + "[" * 5000 + "]" * 5000 + "\n", 2, "nested deeper than 100 levels"),  # RecursionError
    ("a: " + "{b: " * 3000 + "1" + "}" * 3000 + "\n", 1, "nested deeper than 100 levels"),
])
def test_values_pyyaml_cannot_construct_are_one_line_user_errors(tmp_path, text, line, words):
    path = write(tmp_path, text)
    exc = load_error(path, "f.yaml")
    assert str(exc).startswith(f"f.yaml:{line}: YAML syntax error: "), str(exc)
    assert words in str(exc)
    assert "\n" not in str(exc) and len(str(exc)) < 200


def test_nesting_up_to_the_limit_is_fine(tmp_path):
    depth = yamlfile.MAX_DEPTH - 1  # the top-level mapping is one level
    doc = yamlfile.load(write(tmp_path, "a: " + "[" * depth + "]" * depth + "\n"))
    assert isinstance(doc["a"], list)


# -- merge keys as YAML 1.1 defines them (PyYAML's flatten_mapping modifies the nodes it merges) -----

def test_of_several_merged_mappings_the_first_wins(tmp_path):
    doc = yamlfile.load(write(tmp_path, "a: &a {x: 1}\nb: &b {x: 2, y: 2}\nc:\n  <<: [*a, *b]\n"))
    assert doc["c"] == {"x": 1, "y": 2}


def test_a_merged_mapping_keeps_its_own_overrides(tmp_path):
    text = "base: &b {x: 1}\nmid: &m\n  <<: *b\n  x: 2\ntop:\n  <<: *m\n"
    doc = yamlfile.load(write(tmp_path, text))
    assert doc["mid"] == {"x": 2} and doc["top"] == {"x": 2}


def test_merging_a_mapping_anchored_inside_the_same_mapping_is_not_a_duplicate(tmp_path):
    doc = yamlfile.load(write(tmp_path, "{a: &m {<<: {k: 0}, k: 1}, <<: *m}\n"))
    assert doc == {"k": 1, "a": {"k": 1}}


def test_merged_keys_remember_where_they_were_written(tmp_path):
    doc = yamlfile.load(write(tmp_path, "base: &b\n  x: 1\ntop:\n  <<: *b\n  y: 2\n"))
    assert doc["top"].key_lines == {"x": 2, "y": 5}


@pytest.mark.parametrize("text, words", [
    ("a: &a {<<: *a}\n", "merges itself"),
    ("a: &a {b: {<<: *a}}\n", "recursive node"),    # the merged b would hold itself
    ("a: {<<: 5}\n", "expected a mapping or list of mappings for merging"),
    ("a: {<<: [{x: 1}, 2]}\n", "expected a mapping for merging"),
])
def test_bad_merges_are_user_errors(tmp_path, text, words):
    exc = load_error(write(tmp_path, text))
    assert words in str(exc) and exc.line == 1


def test_two_merge_keys_in_one_mapping_are_duplicate_keys(tmp_path):
    path = write(tmp_path, "a: &a {x: 1}\nb: &b {y: 1}\nc:\n  <<: *a\n  <<: *b\n")
    exc = load_error(path)
    assert (exc.line, exc.key) == (5, "<<") and "duplicate key" in str(exc)


def test_aliases_that_multiply_are_read_once(tmp_path):
    lines = ["l0: &l0 {a: 1}"] + [f"l{i}: &l{i} {{<<: [{', '.join([f'*l{i - 1}'] * 10)}]}}" for i in range(1, 30)]
    doc = yamlfile.load(write(tmp_path, "\n".join(lines) + "\n"))  # 10**29 merges if expanded
    assert doc["l29"] == {"a": 1}


def test_a_chain_of_merges_is_refused_before_it_grows_quadratically(tmp_path):
    """Each link copies every key before it: 2,000 links copied 2 million keys (4,000: 18.5 s, 920 MB)."""
    lines = ["x:", "  - &m0 {k0: 1}"] + [f"  - &m{i} {{<<: *m{i - 1}, k{i}: 1}}" for i in range(1, 2000)]
    path = write(tmp_path, "\n".join(lines) + "\n")
    exc = load_error(path)
    assert exc.key == "<<" and 3 <= exc.line <= 2001 and "merge keys copy more keys than a file of" in str(exc)


def test_merges_that_copy_a_few_keys_each_are_fine(tmp_path):
    base = "base: &b {" + ", ".join(f"k{i}: {i}" for i in range(10)) + "}\n"
    doc = yamlfile.load(write(tmp_path, base + "".join(f"c{i}: {{<<: *b, id: {i}}}\n" for i in range(1000))))
    assert doc["c999"] == {**{f"k{i}": i for i in range(10)}, "id": 999}  # 10,000 keys merged from 34 KB


# -- what is read: a regular file, at most MAX_BYTES -----------------------------------------

def test_a_file_one_byte_over_the_bound_is_refused_unread(tmp_path):
    path = write(tmp_path, "#" * yamlfile.MAX_BYTES + "\n")  # a comment: valid YAML, were it read whole
    exc = load_error(path, "big.yaml")
    assert str(exc) == "big.yaml: larger than 8 MiB, more than any suite or profile holds: not read"


def test_a_file_of_exactly_the_bound_is_read(tmp_path):
    path = write(tmp_path, "a: 1\n" + "#" * (yamlfile.MAX_BYTES - 6) + "\n")
    assert len(yamlfile.read_text(path, "edge.yaml")) == yamlfile.MAX_BYTES


def test_text_reads_as_before_with_its_newlines_made_one(tmp_path):
    path = tmp_path / "crlf.yaml"
    path.write_bytes(b"\xef\xbb\xbfa: 1\r\nb: 2\rc: 3\n")
    assert yamlfile.load(path) == {"a": 1, "b": 2, "c": 3}
    assert yamlfile.read_text(path, "crlf.yaml") == "\ufeffa: 1\nb: 2\nc: 3\n"  # as Path.read_text gave it


@pytest.mark.parametrize("make, what", [
    # /dev/zero never ends (memory without bound); /dev/null is the same kind of file and ends, so that a
    # regression fails here instead of eating the machine
    (lambda p: p.symlink_to("/dev/null"), "a character device"),
    (lambda p: p.mkdir(), "a directory"),
])
def test_what_is_no_regular_file_is_refused_in_one_line(tmp_path, make, what):
    make(tmp_path / "x.yaml")
    assert str(load_error(tmp_path / "x.yaml", "x.yaml")) == f"x.yaml: is {what}, not a regular file of YAML text"


def test_a_link_to_a_regular_file_is_read(tmp_path):
    (tmp_path / "link.yaml").symlink_to(write(tmp_path, "a: 1\n"))
    assert yamlfile.load(tmp_path / "link.yaml") == {"a": 1}
