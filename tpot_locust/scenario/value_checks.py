"""The checks a scenario key runs on its value (``key(check=...)`` in the model): each
takes ``(located, path, value, base_dir)`` and returns the value, or raises the located
error. Numbers finite and in range (``limits``), durations, texts, names, paths, headers.
Sections, stages, bursts and sweeps, which need several keys at once, are ``schema``'s.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from urllib.parse import urlsplit

from tpot_locust.scenario.limits import (
    MAX_DURATION_S,
    MAX_EVENT_BYTES,
    MAX_METRICS_INTERVAL_S,
    MAX_NUMBER,
    MAX_SEED,
    MAX_TOKENS,
    MAX_USERS,
    MIN_EVENT_BYTES,
    MIN_METRICS_INTERVAL_S,
)
from tpot_locust.scenario.yaml_source import Located, ScenarioError

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")
MAX_NAME = 200  # characters of a scenario's name
_TOO_LONG = f"must be <= 30 days ({MAX_DURATION_S:.0f} s)"


def parse_duration(value: object) -> float:
    """Seconds from ``90``, ``"90s"``, ``"2m"`` or ``"1h30m"`` (Locust's -t syntax): finite,
    0 .. 30 days (``MAX_DURATION_S``; a 400-digit integer is refused, never overflows)."""
    if isinstance(value, bool):
        raise ValueError("must be a duration like 30s, 5m or 1h30m")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and math.isnan(value):
            raise ValueError("must be a number, not NaN")
        if value < 0:
            raise ValueError("must be >= 0")
        if value > MAX_DURATION_S:
            raise ValueError(_TOO_LONG)
        return float(value)
    text = str(value).strip()
    match = _DURATION.match(text) if len(text) <= 64 else None
    if not match or not any(match.groups()):
        raise ValueError(f"must be a duration like 30s, 5m or 1h30m, got {_shown(value)}")
    hours, minutes, seconds = (float(part) if part else 0.0 for part in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if not total <= MAX_DURATION_S:
        raise ValueError(_TOO_LONG)
    return total


def _shown(value: object, limit: int = 80) -> str:
    """A value as an error quotes it: a megabyte of text is not repeated whole."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _limit(value: float) -> str:
    return f"{int(value):,}" if value == int(value) else f"{value:g}"


def number(
    located: Located,
    path: str,
    value: object,
    *,
    integer: bool = False,
    minimum: float = 0,
    strict: bool = True,
    maximum: float = MAX_NUMBER,
) -> float:
    """A finite number in ``minimum`` .. ``maximum`` (NaN or infinity wedges the event
    loop's timers; the bounds are compared before any conversion, so a 400-digit integer
    is an error here rather than an ``OverflowError`` later)."""
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise located.error(path, f"must be {'an integer' if integer else 'a number'}")
    if isinstance(value, float) and not math.isfinite(value):
        raise located.error(path, f"must be a finite number, not {value}")
    if value < minimum or (strict and value == minimum):
        raise located.error(path, f"must be {'>' if strict else '>='} {minimum:g}")
    if value > maximum:
        raise located.error(path, f"must be <= {_limit(maximum)}")
    return value


def duration(located: Located, path: str, value: object, *, positive: bool = True) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as error:
        raise located.error(path, str(error)) from None
    if positive and seconds <= 0:
        raise located.error(path, "must be > 0")
    return seconds


def url(located: Located, path: str, value: object, base_dir: Path) -> str:
    if not isinstance(value, str) or "://" not in value or not value.isprintable():
        raise located.error(path, "must be a URL like http://127.0.0.1:8000")
    if " " in value:  # it would go into the request line raw
        raise located.error(path, "a URL has no spaces: percent-encode them (%20)")
    return value


def metrics_url(located: Located, path: str, value: object, base_dir: Path) -> bool | str:
    """``server.metrics``: true (``<host>/metrics``), false (off) or an http(s) URL."""
    if isinstance(value, bool):
        return value
    shape = "must be true, false or a URL like http://127.0.0.1:8000/metrics"
    if not isinstance(value, str) or not value.isprintable() or len(value) > 2048:
        raise located.error(path, shape)
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise located.error(path, shape) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise located.error(path, shape)
    if " " in value:  # it would go into the request line raw
        raise located.error(path, "a URL has no spaces: percent-encode them (%20)")
    return value


GPU_LABEL = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
MAX_GPU_ENDPOINTS = 16


def gpu_metrics(located: Located, path: str, value: object, base_dir: Path) -> dict[str, str]:
    """``server.gpu_metrics``: a DCGM exporter's URL (labelled ``gpu``), or a mapping of
    labels to URLs (one exporter a node); labels name the results' files. A path (``/...``)
    is on the server's own host (a gateway's, the embedded simulator's ``/dcgm/metrics``)."""
    endpoints = {"gpu": value} if isinstance(value, str) else value
    shape = (
        "must be a URL like http://127.0.0.1:9400/metrics (or a path on the server's host, "
        "/dcgm/metrics) or a mapping of labels "
        f"(a-z, 0-9, _ and -, at most 32) to such URLs, at most {MAX_GPU_ENDPOINTS}"
    )
    if not isinstance(endpoints, dict) or not 0 < len(endpoints) <= MAX_GPU_ENDPOINTS:
        raise located.error(path, shape)
    checked: dict[str, str] = {}
    for label, url in endpoints.items():
        where = path if isinstance(value, str) else f"{path}.{label}"
        if not isinstance(label, str) or not GPU_LABEL.fullmatch(label):
            raise located.error(where, shape)
        if isinstance(url, str) and " " in url:  # it would go into the request line raw
            raise located.error(where, "a URL or path has no spaces: percent-encode them (%20)")
        try:
            on_host = isinstance(url, str) and url.startswith("/") and url.isprintable()
            checked_url = (
                url
                if on_host and len(url) <= 2048
                else (not isinstance(url, bool) and metrics_url(located, where, url, base_dir))
            )
        except ScenarioError:
            checked_url = False
        if not isinstance(checked_url, str):
            raise located.error(where, shape)
        checked[label] = url
    return checked


def metrics_interval(located: Located, path: str, value: object, base_dir: Path) -> float:
    """``server.metrics_interval``: seconds between samples."""
    return float(
        number(
            located,
            path,
            value,
            minimum=MIN_METRICS_INTERVAL_S,
            strict=False,
            maximum=MAX_METRICS_INTERVAL_S,
        )
    )


def event_bytes(located: Located, path: str, value: object, base_dir: Path) -> int:
    """``server.max_event_bytes``: one event's size limit, in bytes."""
    return int(
        number(
            located,
            path,
            value,
            integer=True,
            minimum=MIN_EVENT_BYTES,
            strict=False,
            maximum=MAX_EVENT_BYTES,
        )
    )


def plain_text(located: Located, path: str, value: object, base_dir: Path) -> str:
    if isinstance(value, (dict, list)) or value is None:
        raise located.error(path, "must be a name")
    return str(value)


def name(located: Located, path: str, value: object, base_dir: Path) -> str:
    """The scenario's name: printable text (it labels the results folder, junit.xml and the
    terminal: a NUL, a lone surrogate, a newline or an escape sequence breaks them), so
    ``validate`` refuses what ``run`` could not use."""
    text = plain_text(located, path, value, base_dir)
    if not text.strip():
        raise located.error(path, "must not be empty")
    if len(text) > MAX_NAME:
        raise located.error(path, f"must be at most {MAX_NAME} characters")
    if not text.isprintable():
        bad = next(char for char in text if not char.isprintable())
        raise located.error(path, f"must be printable text (found {ascii(bad)})")
    return text


def path_text(located: Located, path: str, value: object) -> str:
    """A file or folder name as given: text without NUL or control characters."""
    if isinstance(value, (dict, list, bool)) or value is None:
        raise located.error(path, "must be a path")
    text = str(value)
    if not text or any(ord(char) < 32 or 0xD800 <= ord(char) <= 0xDFFF for char in text):
        raise located.error(path, "must be a path without control characters")
    return text


def output(located: Located, path: str, value: object, base_dir: Path) -> str:
    return path_text(located, path, value)


def mapping(located: Located, path: str, value: object, base_dir: Path) -> dict[object, object]:
    if not isinstance(value, dict):
        raise located.error(path, "must be a mapping")
    return value


CHOICES_REFUSED = "n > 1 is not measured: each choice would need its own stream timing; remove n"


def extra_body(located: Located, path: str, value: object, base_dir: Path) -> dict[object, object]:
    """Extra request fields. ``n`` other than 1 is refused: the server would interleave
    several choices in one stream, and every token timing here is of one answer."""
    body = mapping(located, path, value, base_dir)
    choices = body.get("n", 1)
    if type(choices) is not int or choices != 1:  # type(): True is no count of choices
        raise located.error(f"{path}.n", CHOICES_REFUSED)
    return body


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110's token


# Headers that frame the request or hop the connection: the client writes them (Host,
# Content-Length) or never sends them; from a scenario, the wire carried two Hosts and a
# chunked Transfer-Encoding over an unchunked body.
FRAMING_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "upgrade",
        "te",
        "trailer",
        "keep-alive",
        "proxy-connection",
    }
)


def headers(located: Located, path: str, value: object, base_dir: Path) -> dict[object, object]:
    """Request headers as HTTP can carry them: token names, latin-1 values without line
    breaks (``validate`` refuses what every request of ``run`` would fail with)."""
    headers = mapping(located, path, value, base_dir)
    for name, item in headers.items():
        where = f"{path}.{name}"
        if not _HEADER_NAME.fullmatch(str(name)):
            raise located.error(where, "a header name is letters, digits and -_.!#$%&'*+^`|~")
        if str(name).lower() in FRAMING_HEADERS:
            raise located.error(
                where,
                f"{name} is the client's to set (it frames the request "
                "or the connection): refused; remove it",
            )
        if isinstance(item, (dict, list)) or item is None:
            raise located.error(where, "a header value is text or a number")
        text = str(item)
        if any(char in text for char in "\r\n\0"):
            raise located.error(where, "a header value must not contain a line break")
        try:
            text.encode("latin-1")
        except UnicodeEncodeError:
            raise located.error(where, "a header value must be latin-1 text") from None
    return headers


MAX_MODEL_NAME = 256  # characters of a model (or adapter) name
MAX_SPLIT_MODELS = 1_000  # models one class's traffic is split over


def model_split(located: Located, path: str, value: object, base_dir: Path) -> dict[str, float]:
    """``classes.<name>.model``: one model name, or model names with weights (a LoRA
    adapter traffic split): printable names, finite weights > 0."""
    if isinstance(value, str):
        weights: dict[object, object] = {value: 1}
    elif isinstance(value, dict) and 0 < len(value) <= MAX_SPLIT_MODELS:
        weights = value
    else:
        raise located.error(
            path,
            "must be a model name, or a mapping of model names to "
            f"weights (at most {MAX_SPLIT_MODELS:,})",
        )
    split = {}
    for name, weight in weights.items():
        where = path if isinstance(value, str) else f"{path}.{name}"
        text = str(name)
        if not 0 < len(text) <= MAX_MODEL_NAME or not text.isprintable():
            raise located.error(
                where, f"a model name is 1 to {MAX_MODEL_NAME} printable characters"
            )
        split[text] = float(number(located, where, weight))
    return split


def env_name(located: Located, path: str, value: object, base_dir: Path) -> str:
    if not IDENTIFIER.fullmatch(str(value)):
        raise located.error(path, "must be the NAME of an environment variable, not a key")
    return str(value)


def flag(located: Located, path: str, value: object, base_dir: Path) -> bool:
    if not isinstance(value, bool):
        raise located.error(path, "must be true or false")
    return value


def positive(located: Located, path: str, value: object, base_dir: Path) -> float:
    return float(number(located, path, value))


def positive_integer(located: Located, path: str, value: object, base_dir: Path) -> int:
    return int(number(located, path, value, integer=True, maximum=MAX_USERS))


def count(located: Located, path: str, value: object, base_dir: Path) -> int:
    return int(number(located, path, value, integer=True, strict=False, maximum=MAX_USERS))


def tokens(located: Located, path: str, value: object, base_dir: Path) -> int:
    return int(number(located, path, value, integer=True, strict=False, maximum=MAX_TOKENS))


def rate(located: Located, path: str, value: object, base_dir: Path) -> float:
    return float(number(located, path, value, strict=False))


def ratio(located: Located, path: str, value: object, base_dir: Path) -> float:
    ratio = number(located, path, value, strict=False)
    if ratio > 1:
        raise located.error(path, "must be <= 1")
    return float(ratio)


def seed(located: Located, path: str, value: object, base_dir: Path) -> int:
    return int(number(located, path, value, integer=True, strict=False, maximum=MAX_SEED))


def duration_key(located: Located, path: str, value: object, base_dir: Path) -> float:
    return duration(located, path, value)


def duration_or_zero(located: Located, path: str, value: object, base_dir: Path) -> float:
    return duration(located, path, value, positive=False)


def whole_seconds(located: Located, path: str, value: object, base_dir: Path) -> float:
    """A duration Locust itself reads (``--stop-timeout``): whole seconds, none after the
    point (its parser refused 1.5 after the simulator had started)."""
    seconds = duration(located, path, value, positive=False)
    if seconds != int(seconds):
        raise located.error(
            path, f"{seconds:g} s: Locust takes whole seconds (e.g. {math.ceil(seconds)}s)"
        )
    return seconds


# What each ``key(check=...)`` of the model runs: (located, path, value, base_dir) -> value.


SWEEP_VARIABLES = ("users", "rate", "speedup")  # closed-loop users, open-loop rate, a trace's


def sweep_variable(located: Located, path: str, value: object, base_dir: Path) -> str:
    if value not in SWEEP_VARIABLES:
        raise located.error(path, f"must be one of {', '.join(SWEEP_VARIABLES)}")
    return str(value)  # one of the names: a str


def sweep_values(located: Located, path: str, value: object, base_dir: Path) -> list[float]:
    if not isinstance(value, list) or not value:
        raise located.error(path, "must be a list of numbers, in increasing order")
    numbers = [number(located, f"{path}.{i}", v) for i, v in enumerate(value)]
    if numbers != sorted(set(numbers)):
        raise located.error(path, "must increase from step to step")
    return numbers
