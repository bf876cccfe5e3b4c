"""What the agents' pods say through the API, read by JobPods and api (tests/fake_kube.py for the server):
indices, text the API hands back, pods that cannot be read, and two pods for one index."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

pytest.importorskip("kubernetes")


@pytest.mark.parametrize("raw, index", [("3", 3), ("²", None), ("٣", None), ("-1", None), ("", None), ("1234567", None)])
def test_a_completion_index_is_ascii_digits_only(raw: str, index: int | None) -> None:
    from clustercheck.run.k8s import api

    pod = SimpleNamespace(metadata=SimpleNamespace(annotations={api.INDEX_ANNOTATION: raw}, labels={}))
    assert api.index_of(pod) == index
