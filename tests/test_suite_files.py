"""What a suite file may be: a regular file of at most yamlfile.MAX_BYTES. A FIFO named like a suite is never
waited on (collection, `clustercheck run x.yaml`), and a file over the bound is refused by load_suite in one
line, never left out of a collection in silence."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from clustercheck import yamlfile
from clustercheck.errors import UserError
from clustercheck.suite.load import found_suite, is_suite_file, load_suite


def test_a_fifo_in_suites_is_no_suite_and_is_not_waited_on(tmp_path: Path) -> None:
    (tmp_path / "suites").mkdir()
    fifo = tmp_path / "suites" / "x.yaml"
    os.mkfifo(fifo)
    answers: list[bool] = []
    worker = threading.Thread(target=lambda: answers.append(found_suite(fifo)), daemon=True)
    worker.start()
    worker.join(120)
    if worker.is_alive():  # blocked opening it: a writer lets it go, and the test fails rather than hangs
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(30)
        raise AssertionError("found_suite waited on a FIFO named x.yaml")
    assert answers == [False]
    with pytest.raises(UserError) as info:
        load_suite(fifo, "suites/x.yaml")
    assert str(info.value) == "suites/x.yaml: is a FIFO, not a regular file of YAML text"


def test_a_suite_over_the_bound_is_taken_and_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("checks:\n  - id: c\n    measure: all_reduce\n" + "#" * yamlfile.MAX_BYTES + "\n")
    assert is_suite_file(path)  # collected, so that load_suite says why
    with pytest.raises(UserError) as info:
        load_suite(path, "big.yaml")
    assert str(info.value) == "big.yaml: larger than 8 MiB, more than any suite or profile holds: not read"
