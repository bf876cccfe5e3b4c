"""The JSON reports hold no lone surrogate escape (jq and strict parsers refuse "\\ud800" and with it the
whole results.json, ctrf.json or sla.json, on exactly the run whose message held one): a surrogate in a
string or a key is written as backslash text, whatever else the document holds stays as it was."""

from __future__ import annotations

import io
import json
import re

from clustercheck.report.jsontext import json_bytes, write_json

# a \uD8xx escape, not backslash text that reads like one (an escaped backslash before "ud800")
ESCAPED_SURROGATE = re.compile(rb"(?<!\\)(?:\\\\)*\\u[dD][89a-fA-F]")


def _strict(raw: bytes) -> object:
    """Parse as a strict reader does: a lone surrogate escape is an error, not a character."""
    assert not ESCAPED_SURROGATE.search(raw), raw
    return json.loads(raw.decode("utf-8"))


def test_a_lone_surrogate_in_a_message_is_backslash_text() -> None:
    assert _strict(json_bytes({"m": "a\ud800b"})) == {"m": "a\\ud800b"}
    assert _strict(json_bytes({"m": ["x\udcff", {"deep": "\udfff"}]})) == {"m": ["x\\udcff", {"deep": "\\udfff"}]}


def test_a_lone_surrogate_in_a_key_is_backslash_text_and_the_writer_agrees() -> None:
    doc = {"notes": {"n1\ud800": "said \udc80", "n2": float("nan")}, "ok": "plain é 😀"}
    out = io.BytesIO()
    write_json(doc, out)
    assert out.getvalue() == json_bytes(doc)
    parsed = json.loads(json_bytes(doc))
    assert parsed == {"notes": {"n1\\ud800": "said \\udc80", "n2": "NaN"}, "ok": "plain é 😀"}


def test_text_without_surrogates_is_the_very_object() -> None:
    from clustercheck.report.jsontext import _finite

    doc = {"a": ["x", {"b": "é 😀"}], "c": 1.5}
    assert _finite(doc) is doc
