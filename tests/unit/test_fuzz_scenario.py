"""Fuzzing the scenario loader: whatever the file and the ``--set`` overrides hold (aliases
and anchors, NaN and infinity, huge integers, deep nesting, unknown keys, wrong types),
``load_scenario`` returns a ``Scenario`` or raises ``ScenarioError``, never another
exception, and within a bounded time."""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tpot_locust.scenario.limits import MAX_DURATION_S, MAX_TOKENS, MAX_USERS
from tpot_locust.scenario.loader import load_scenario
from tpot_locust.scenario.model import Scenario
from tpot_locust.scenario.parsed_values import ParsedDistribution
from tpot_locust.scenario.yaml_source import ScenarioError

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
SECONDS_PER_EXAMPLE = 5.0

SPECIAL = [
    ".nan",
    ".NaN",
    ".inf",
    "-.inf",
    "+.inf",
    "1" + "0" * 400,
    "-" + "9" * 400,
    "1e999",
    "0x7fffffffffffffffff",
    "2020-02-30",
    "2020-01-01",
    "~",
    "null",
    "true",
    "no",
    "''",
    '"\\0"',
    '"\\ud800"',
    '"\\e[31m"',
    "*a",
    "*b",
    "*c",
    "-1",
    "0",
    "1",
    "0.5",
    "1e-300",
    "30s",
    "1h30m",
    "99999999h",
    "15ms",
    "0.1%",
    "chat",
    "poisson",
    "gamma",
    "users",
    "/dev/zero",
    "nope.jsonl",
    "{dist: normal, mean: .nan, stddev: 1}",
    "{dist: uniform, min: 1, max: .inf}",
    "{dist: empirical, file: /dev/zero}",
    "{dist: lognormal, mean: 1" + "0" * 50 + ", stddev: 1}",
    "[*a, *a, *a, *a]",
    "!!python/name:os.system",
    "!!binary AAAA",
    "!!set {a, b}",
    "<<",
    "? [a]",
]
KEYS = [
    "name",
    "duration",
    "warmup",
    "cooldown",
    "spawn_rate",
    "seed",
    "output",
    "description",
    "server",
    "classes",
    "simulator",
    "slo",
    "stages",
    "bursts",
    "sweep",
    "host",
    "timeouts",
    "total",
    "idle",
    "first_token",
    "connect",
    "users",
    "rate",
    "arrival",
    "burstiness",
    "max_in_flight",
    "prompt_tokens",
    "output_tokens",
    "turns",
    "think_time",
    "wait_time",
    "shared_prefix_tokens",
    "shared_prefix_ratio",
    "dataset",
    "trace",
    "speedup",
    "dist",
    "mean",
    "stddev",
    "min",
    "max",
    "value",
    "file",
    "class",
    "count",
    "at",
    "every",
    "start",
    "tpot",
    "ttft",
    "p99",
    "error_rate",
    "vary",
    "values",
    "limit",
    "chat",
]
CLASS_KEYS = KEYS[19:35]
OVERRIDE_PATHS = [
    "duration",
    "warmup",
    "seed",
    "name",
    "server.timeouts.total",
    "server.timeouts.idle",
    "classes.chat.users",
    "classes.chat.output_tokens",
    "classes.chat.think_time",
    "classes.chat.extra_body",
    "classes.chat",
    "slo.tpot.p99",
    "bursts",
    "stages",
    "x.y.z",
]

key_text = st.one_of(st.sampled_from(KEYS), st.text("abcxyz_.-0123456789", min_size=1, max_size=12))
scalar = st.one_of(
    st.sampled_from(SPECIAL),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12).map(
        lambda text: '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    ),
)


def _collection(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Flow-style lists and mappings, some of them anchored (``&a``) for aliases to use."""
    anchor = st.sampled_from(["", "", "&a ", "&b ", "&c "])
    listed = st.lists(children, max_size=6).map(lambda items: "[" + ", ".join(items) + "]")
    mapped = st.dictionaries(key_text, children, max_size=6).map(
        lambda items: "{" + ", ".join(f"{k}: {v}" for k, v in items.items()) + "}"
    )
    return st.tuples(anchor, st.one_of(listed, mapped)).map("".join)


GOOD = ["1", "2", "4", "0.5", "30s", "2s", "{dist: uniform, min: 1, max: 5}", "chat"]
value = st.one_of(st.sampled_from(GOOD), st.recursive(scalar, _collection, max_leaves=30))
deep = st.integers(min_value=0, max_value=3000).map(lambda n: "[" * n + "]" * n)
class_body = st.dictionaries(st.sampled_from(CLASS_KEYS), st.one_of(value, deep), max_size=3).map(
    lambda body: {"users": "1", **body}
)
top_keys = [key for key in KEYS[:16] if key != "classes"]
document = st.tuples(
    st.dictionaries(st.sampled_from(["chat", "b", "1x"]), class_body, max_size=2),
    st.dictionaries(st.sampled_from(top_keys), st.one_of(value, deep), max_size=3),
).map(lambda parts: {"classes": parts[0], **parts[1]})
override = st.tuples(st.sampled_from(OVERRIDE_PATHS), st.one_of(value, deep)).map("=".join)


def _render(data: dict) -> str:
    """Block style at the top (anchors set there are used further down), flow below."""
    lines = []
    for key, item in data.items():
        if isinstance(item, dict):
            lines.append(f"{key}:")
            for name, body in item.items():
                lines.append(f"  {name}:")
                lines.extend(f"    {k}: {v}" for k, v in body.items())
        else:
            lines.append(f"{key}: {item}")
    return "\n".join(lines) + "\n"


def _check(text: str, overrides: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.yaml"
        path.write_text(text, encoding="utf-8")
        started = time.monotonic()
        try:
            scenario = load_scenario(path, overrides)
        except ScenarioError as error:
            assert str(error)  # one message, every problem named
        else:
            _assert_bounded(scenario)
        assert time.monotonic() - started < SECONDS_PER_EXAMPLE


def _assert_bounded(scenario: Scenario) -> None:
    """What loads is finite and in range: nothing to wedge or overflow later."""
    assert isinstance(scenario, Scenario)
    assert math.isfinite(scenario.duration_s) and 0 < scenario.duration_s <= MAX_DURATION_S
    assert 0 <= scenario.warmup_s <= MAX_DURATION_S and 0 <= scenario.cooldown_s <= MAX_DURATION_S
    for traffic in scenario.classes:
        assert 0 <= traffic.users <= MAX_USERS
        assert 0 <= traffic.shared_prefix_tokens <= MAX_TOKENS
        assert traffic.rate is None or math.isfinite(traffic.rate)
        for spec in (
            traffic.prompt_tokens,
            traffic.output_tokens,
            traffic.think_time,
            traffic.wait_time,
            traffic.followup_tokens,
        ):
            if spec not in (None, 0, 0.0):  # else parsed by the schema, once
                assert isinstance(spec, ParsedDistribution) and math.isfinite(spec.mean)
    timeouts = vars(scenario.server.timeouts).values()
    assert all(t is None or math.isfinite(t) for t in timeouts)
    assert scenario.name.isprintable()


@FUZZ
@given(document, st.lists(override, max_size=3))
@example({"classes": {"chat": {"users": "1", "think_time": ".nan"}}}, [])
@example({"classes": {"chat": {"users": "1"}}, "duration": "&a [*a]"}, [])
@example({"classes": {"chat": {"users": "1"}}}, ["duration=.inf", "warmup=.nan"])
def test_any_document_loads_or_is_refused(data: dict, overrides: list[str]) -> None:
    _check(_render(data), overrides)


@FUZZ
@given(st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=300))
@example("a: &a [*a]")
@example("[" * 5000)
@example("&a [" + ", ".join(["*a"] * 9) + "]")
def test_any_text_loads_or_is_refused(text: str) -> None:
    _check(text, [])


@settings(FUZZ, max_examples=40)
@given(st.integers(min_value=2, max_value=9), st.integers(min_value=2, max_value=12))
def test_alias_bombs_of_any_shape_are_refused(width: int, levels: int) -> None:
    names = [f"n{i}" for i in range(levels)]
    lines = [f"{names[0]}: &{names[0]} [{', '.join(['x'] * width)}]"]
    for previous, name in zip(names, names[1:], strict=False):
        lines.append(f"{name}: &{name} [{', '.join([f'*{previous}'] * width)}]")
    text = "classes:\n  chat: {users: 1}\n" + "\n".join(lines) + "\n"
    _check(text, [f"classes.chat.extra_body={{x: [{', '.join(['x'] * width)}]}}"])
