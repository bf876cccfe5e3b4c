"""clustercheck.judging.expr: the threshold grammar (operators, precedence, units, spec references) and its
refusals, which are always ExprError with a message that says what was expected."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustercheck.judging.expr import ExprError, Quantity, parse_limit

TABLE = {
    ("nvlink4", "unidirectional"): Quantity(450.0, "GB/s", ("nvlink4 uni",)),
    ("nvlink4", "bidirectional"): Quantity(900.0, "GB/s", ("nvlink4 bi",)),
    ("nvlink4", "links"): Quantity(18.0, "count", ("nvlink4 links",)),
    ("pcie5_x16", "unidirectional"): Quantity(63.02, "GB/s", ("pcie5 uni",)),
}
ROLES = {"nvlink": "nvlink4", "pcie": "pcie5_x16"}


def resolve(name: str, field: str) -> Quantity:
    key = (ROLES.get(name, name), field)
    if key not in TABLE:
        raise KeyError(f"no spec {name!r} with field {field!r}")
    return TABLE[key]


def limit(text: str):
    return parse_limit(text, resolve)


def value(text: str) -> float:
    return limit(text).value


def refused(text: str) -> str:
    with pytest.raises(ExprError) as info:
        limit(text)
    return str(info.value)


# -- operators -------------------------------------------------------------------------------

@pytest.mark.parametrize("op", [">=", "<=", ">", "<", "=="])
def test_each_comparison_operator(op):
    parsed = limit(f"{op} 5")
    assert (parsed.op, parsed.value, parsed.unit, parsed.sources) == (op, 5.0, None, ())


def test_whitespace_is_optional_and_free():
    assert limit(">=5").op == ">="
    assert limit("   <=   5   ").value == 5.0


@pytest.mark.parametrize("text", ["=> 5", "= 5", "=< 5", "!= 5", "5 <= 4", "0.8 * spec.nvlink.unidirectional"])
def test_missing_or_unknown_operator(text):
    assert refused(text)


def test_missing_operator_message_shows_an_example():
    assert "a limit starts with one of" in refused("0.8 * spec.nvlink.unidirectional")


def test_a_second_comparison_is_trailing_junk():
    assert "unexpected '<'" in refused(">= 1 < 2")


# -- arithmetic ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    (">= 1 + 2 * 3", 7.0),
    (">= 2 * 3 + 1", 7.0),
    (">= (1 + 2) * 3", 9.0),
    (">= 10 - 2 - 3", 5.0),        # left-associative
    (">= 8 / 4 / 2", 1.0),         # left-associative
    (">= 8 / (4 / 2)", 4.0),
    (">= 1 + 6 / 3 - 1", 2.0),
    (">= ((2))", 2.0),
    (">= 1.5e3", 1500.0),
    (">= .5", 0.5),
    (">= 3.", 3.0),
    (">= 2E-3", 0.002),
])
def test_precedence_parentheses_and_numbers(text, expected):
    assert value(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("text, expected", [
    (">= -5", -5.0),
    (">= --5", 5.0),
    (">= 3 - -2", 5.0),
    (">= -(1 + 2) * 2", -6.0),
    (">= -2 * -3", 6.0),
])
def test_unary_minus(text, expected):
    assert value(text) == expected


@pytest.mark.parametrize("text, expected", [
    (">= 80%", 0.8),
    (">= 80 %", 0.8),
    (">= 12.5%", 0.125),
    (">= 80% * spec.nvlink.unidirectional", 360.0),
    (">= 100% - 5%", 0.95),
])
def test_percent_is_a_hundredth(text, expected):
    assert value(text) == pytest.approx(expected, rel=1e-15)


# -- spec references -------------------------------------------------------------------------

def test_spec_reference_through_a_hardware_role():
    parsed = limit(">= 0.80 * spec.nvlink.unidirectional")
    assert parsed.value == pytest.approx(360.0)
    assert parsed.unit == "GB/s"
    assert parsed.sources == ("nvlink4 uni",)


def test_spec_reference_by_direct_name():
    parsed = limit(">= spec.nvlink4.bidirectional")
    assert (parsed.value, parsed.unit, parsed.sources) == (900.0, "GB/s", ("nvlink4 bi",))


def test_spec_reference_passes_name_and_field_to_the_resolver():
    asked = []

    def recorder(name, field):
        asked.append((name, field))
        return Quantity(1.0, "GB/s")

    parse_limit(">= spec.pcie.unidirectional + spec . nvlink4 . links", recorder)
    assert asked == [("pcie", "unidirectional"), ("nvlink4", "links")]


def test_sources_of_all_references_are_kept_in_order():
    parsed = limit(">= (spec.nvlink.unidirectional + spec.pcie.unidirectional) / 2")
    assert parsed.sources == ("nvlink4 uni", "pcie5 uni")
    assert parsed.value == pytest.approx((450 + 63.02) / 2)


def test_unary_minus_keeps_unit_and_source():
    parsed = limit("<= -spec.nvlink.unidirectional")
    assert (parsed.value, parsed.unit, parsed.sources) == (-450.0, "GB/s", ("nvlink4 uni",))


def test_resolver_key_error_becomes_expr_error_with_its_message():
    assert "no spec 'nvlink9' with field 'unidirectional'" in refused(">= spec.nvlink9.unidirectional")


def test_resolver_is_not_called_for_plain_numbers():
    def explode(name, field):
        raise AssertionError("resolver called")

    assert parse_limit(">= 2 * 3", explode).value == 6.0


# -- units -----------------------------------------------------------------------------------

def test_number_times_quantity_keeps_the_unit():
    assert limit(">= spec.nvlink.unidirectional * 2").unit == "GB/s"
    assert limit(">= 2 * spec.nvlink.unidirectional").unit == "GB/s"


def test_quantity_divided_by_number_keeps_the_unit():
    parsed = limit(">= spec.nvlink.bidirectional / 2")
    assert (parsed.value, parsed.unit) == (450.0, "GB/s")


def test_quantity_times_quantity_is_refused():
    assert "cannot multiply GB/s by GB/s" in refused(">= spec.nvlink.unidirectional * spec.pcie.unidirectional")


def test_adding_same_units_is_fine():
    parsed = limit(">= spec.nvlink.unidirectional - spec.pcie.unidirectional")
    assert (parsed.value, parsed.unit) == (pytest.approx(386.98), "GB/s")


def test_adding_different_units_is_refused():
    assert "cannot add GB/s and count" in refused(">= spec.nvlink.unidirectional + spec.nvlink.links")


def test_adding_a_number_to_a_quantity_is_refused():
    assert "cannot add GB/s and a plain number" in refused(">= spec.nvlink.unidirectional + 10")
    assert "cannot add a plain number and GB/s" in refused(">= 10 - spec.nvlink.unidirectional")


def test_quantity_over_same_unit_quantity_is_a_plain_number():
    parsed = limit(">= spec.nvlink.unidirectional / spec.nvlink.bidirectional")
    assert (parsed.value, parsed.unit) == (0.5, None)
    assert parsed.sources == ("nvlink4 uni", "nvlink4 bi")


def test_quantity_over_other_unit_is_refused():
    assert "cannot divide GB/s by count" in refused(">= spec.nvlink.unidirectional / spec.nvlink.links")


def test_number_over_quantity_is_refused():
    assert "cannot divide a plain number by GB/s" in refused(">= 1 / spec.nvlink.unidirectional")


# -- malformed expressions -------------------------------------------------------------------

@pytest.mark.parametrize("text, says", [
    ("", "expected a limit such as"),
    ("   ", "expected a limit such as"),
    (">=", "expression ends early"),
    (">= 1 +", "expression ends early"),
    (">= 1 2", "unexpected '2' after the expression"),
    (">= 0.8 spec.nvlink.unidirectional", "unexpected 'spec' after the expression"),
    (">= __import__", "unknown name '__import__'"),
    (">= __import__('os')", "unexpected character"),
    (">= os.system", "unknown name 'os'"),
    (">= x", "unknown name 'x'"),
    (">= spec", "expression ends early; expected '.'"),
    (">= spec.nvlink", "expression ends early; expected '.'"),
    (">= spec.nvlink.unidirectional.__class__", "unexpected '.' after the expression"),
    (">= spec.__class__", "expected '.'"),
    (">= spec . 5 . x", "expected a spec name after 'spec.'"),
    (">= spec.5.x", "expected '.', found '.5'"),
    (">= spec.nvlink.(", "expected a field after 'spec.nvlink.'"),
    (">= 1 / 0", "division by zero"),
    (">= 1 / (2 - 2)", "division by zero"),
    (">= 5 / 0%", "division by zero"),
    (">= (1 + 2", "expected ')'"),
    (">= ((1)", "expected ')'"),
    (">= 1 + 2)", "unexpected ')'"),
    (">= ()", "expected a number, 'spec.<name>.<field>' or '(', found ')'"),
    (">= 1 @ 2", "unexpected character '@'"),
    (">= 1; 2", "unexpected character ';'"),
    (">= 'a'", "unexpected character"),
    (">= 1e400", "not a finite number"),
    (">= 1e308 * 10", "not a finite number"),
    (">= 1e308 / 1e-10", "not a finite number"),
    (">= (80)%", "unexpected '%'"),
])
def test_malformed_expression_is_an_expr_error(text, says):
    message = refused(text)
    assert says in message, message


def test_non_text_is_refused():
    with pytest.raises(ExprError):
        parse_limit(5, resolve)  # type: ignore[arg-type]


def test_expr_error_is_a_value_error():
    assert issubclass(ExprError, ValueError)


def test_deep_nesting_is_an_expr_error_or_a_value():
    text = ">= " + "(" * 400 + "1" + ")" * 400
    try:
        assert parse_limit(text, resolve).value == 1.0
    except ExprError:
        pass


@pytest.mark.parametrize("text", [">= .", "< . spec", ">= 1 + ."])
def test_lone_dot_is_an_expr_error(text):
    with pytest.raises(ExprError):
        parse_limit(text, resolve)


# -- properties ------------------------------------------------------------------------------

finite_positive = st.floats(min_value=1e-150, max_value=1e150, allow_nan=False, allow_infinity=False)


@given(a=finite_positive, b=finite_positive)
def test_product_of_two_numbers(a, b):
    parsed = parse_limit(f">= {a} * {b}", resolve)
    assert parsed.op == ">=" and parsed.unit is None
    assert parsed.value == pytest.approx(a * b, rel=1e-12)
    assert math.isfinite(parsed.value)


GRAMMAR_CHARS = "0123456789.eE%+-*/() <>=specnvlink4unidirectional_x,@'\"[]"


@settings(max_examples=300)
@given(text=st.one_of(st.text(max_size=40), st.text(alphabet=GRAMMAR_CHARS, max_size=40),
                      st.lists(st.sampled_from([">=", "<=", "==", ">", "<", "(", ")", "-", "+", "*", "/", "%",
                                                "1", "2.5", "0", "1e3", "spec", ".", "nvlink", "nvlink4",
                                                "unidirectional", "links", "os", "__import__"]),
                               max_size=15).map(" ".join)))
def test_junk_either_parses_or_is_an_expr_error(text):
    try:
        parsed = parse_limit(text, resolve)
    except ExprError as exc:
        assert str(exc)
    else:
        assert parsed.op in (">=", "<=", "==", ">", "<")
        assert math.isfinite(parsed.value)


def test_long_tokens_are_quoted_briefly_in_errors():
    with pytest.raises(ExprError) as info:
        parse_limit(">= 1 " + "x" * 5000, lambda n, f: Quantity(1.0, None))
    assert "unexpected" in str(info.value) and len(str(info.value)) < 200
