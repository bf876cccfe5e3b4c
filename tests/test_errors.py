"""clustercheck.errors: UserError prints as one bounded line; show() quotes any user value briefly."""

from __future__ import annotations

import pytest

from clustercheck.errors import MAX_KEY, UserError, show


def test_show_is_repr_for_ordinary_values():
    assert [show(v) for v in ("16MiB", 4096, 1.5, None, True, [1, "a"], {"a": 1})] == \
        ["'16MiB'", "4096", "1.5", "None", "True", "[1, 'a']", "{'a': 1}"]


def test_show_copes_with_integers_repr_refuses():
    assert show(16 ** 1200 - 1) == "<a number of about 1445 digits>"  # repr() raises beyond 4300 digits
    assert show(-(10 ** 5000)) == "<a number of about 5001 digits>"


def test_show_bounds_long_text_deep_and_wide_values():
    assert len(show("x" * 10_000)) < 70
    nested: list = ["lol"]
    for _ in range(40):
        nested = [nested] * 10  # 10**40 strings if printed in full
    assert len(show(nested)) <= 124
    loop: list = []
    loop.append(loop)
    assert show(loop) == "[[[...]]]"


def test_show_is_one_line():
    assert show("a\nb\rc") == "'a\\nb\\rc'"


def test_user_error_cuts_a_very_long_key():
    text = str(UserError("unknown key", file="s.yaml", line=3, key="k" * 10_000))
    assert text.startswith("s.yaml:3: kkk") and text.endswith("...: unknown key")
    assert len(text) < MAX_KEY + 40


def test_user_error_escapes_every_line_breaking_or_terminal_character():
    text = str(UserError("bad \x1b[2J", file="s.yaml", line=1, key="a\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\t\r\n"))
    assert text == "s.yaml:1: a\\x0b\\x0c\\x1c\\x1d\\x1e\\x85\\u2028\\u2029\\t\\r\\n: bad \\x1b[2J"
    assert text.splitlines() == [text]


def test_an_error_every_item_of_a_check_gets_keeps_its_fields() -> None:
    """The session hands the same failure to each item of a check; each gets a copy that keeps what the
    original carried: a UserError's file, line and key, a RankFailure's answers and failed ranks, the nodes
    an Unreachable (a pool start that lost a node, for a whole localize check) or a NeverJoined names."""
    from clustercheck.errors import NeverJoined, Unreachable
    from clustercheck.run.failure import RankFailure
    from clustercheck.run.session import CheckSession
    from clustercheck.kinds.base import CheckSpec

    check = CheckSpec("c", "all_reduce", "node", {}, (), 60.0, "", "s.yaml", 3)
    for original in (UserError("bad", file="s.yaml", line=3, key="params.sizes"),
                     RankFailure("rank 1 died", {0: {"ok": 1}}, frozenset({1})),
                     Unreachable("n2 stopped answering", ("n2",)), NeverJoined("not run: n3 never joined", ("n3",))):
        from clustercheck.run.launcher import Launcher

        session = CheckSession.__new__(CheckSession)
        session._cache, session.baseline, session.runner, session.over = {check.where: original}, None, None, None
        session.launcher = Launcher()  # the local launcher: its plane never ends, no node is absent
        seen = []
        for _ in range(2):
            with pytest.raises(type(original)) as info:
                session.measure(check, "s::c[n1]", "n1")
            seen.append(info.value)
        assert seen[0] is not original and seen[0] is not seen[1]
        for got in seen:
            assert str(got) == str(original) and vars(got) == vars(original)
