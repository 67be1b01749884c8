"""The percentiles and their keys have one home (``common/percentiles.py``, issue 47): no
other module spells the list of keys or its own key function."""

from __future__ import annotations

import ast
import re

from tests.conftest import ROOT
from tpot_locust.common.percentiles import PERCENTILE_KEYS, PERCENTILES, percentile_key

KEY = re.compile(r"^p\d+(\.\d+)?$")


def test_the_keys_are_the_percentiles() -> None:
    assert PERCENTILE_KEYS == ("p50", "p90", "p99", "p99.9", "p99.99")
    assert [percentile_key(p) for p in PERCENTILES] == list(PERCENTILE_KEYS)


def test_no_other_module_spells_the_keys_or_a_key_function() -> None:
    spelt = []
    for path in (ROOT / "tpot_locust").rglob("*.py"):
        if path.name == "percentiles.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Tuple):
                keys = [
                    e.value
                    for e in node.elts
                    if isinstance(e, ast.Constant)
                    and isinstance(e.value, str)
                    and KEY.match(e.value)
                ]
                if len(keys) >= 4:  # a list of the percentiles, not a chosen few
                    spelt.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.FunctionDef) and node.name == "_key":
                spelt.append(f"{path.name}:{node.lineno} def {node.name}")
    assert not spelt, f"take them from common/percentiles.py: {spelt}"
