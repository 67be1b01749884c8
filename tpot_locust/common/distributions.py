"""Seeded distributions for prompt/output lengths and simulated timings.

A spec is either a plain number (fixed) or a mapping with a ``dist`` key, e.g.
``{"dist": "uniform", "min": 100, "max": 300}``. The same specs appear in scenario files,
in user-class attributes and in simulator options, so they are parsed in one place.
"""

from __future__ import annotations

import csv
import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, Protocol, cast

from tpot_locust.common.bounded_files import (
    DISTRIBUTION_FILE_MAX_BYTES,
    BoundedFileError,
    read_lines,
)

__all__ = [
    "Distribution",
    "DistributionSpec",
    "Fixed",
    "Uniform",
    "Normal",
    "LogNormal",
    "Exponential",
    "Empirical",
    "parse_distribution",
    "DistributionError",
    "MAX_VALUE",
]

# Every number of a distribution (a value, a bound, a mean, a stddev, an empirical length)
# is finite and at most this: lengths are tokens and times are ms or s, and 10 million of
# either is past any test; NaN or infinity would reach a sleep or a length as is.
MAX_VALUE = 10_000_000


class DistributionError(ValueError):
    """A distribution spec is malformed; ``key`` names the offending field."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class Distribution(Protocol):
    def sample(self, rng: random.Random) -> float: ...

    @property
    def mean(self) -> float: ...


# A length or a time as code writes it (a user class's attribute): a number, a mapping with
# a ``dist`` key, or a distribution itself
DistributionSpec = int | float | Distribution | Mapping[str, object]


@dataclass(frozen=True)
class Fixed:
    value: float

    def sample(self, rng: random.Random) -> float:
        return self.value

    @property
    def mean(self) -> float:
        return self.value


@dataclass(frozen=True)
class Uniform:
    min: float
    max: float

    def sample(self, rng: random.Random) -> float:
        return rng.uniform(self.min, self.max)

    @property
    def mean(self) -> float:
        return (self.min + self.max) / 2


@dataclass(frozen=True)
class Normal:
    """Normal, resampled until the value is at least ``floor`` (lengths must be >= 1)."""

    mean_value: float
    stddev: float
    floor: float = 1.0

    def sample(self, rng: random.Random) -> float:
        for _ in range(64):
            value = rng.gauss(self.mean_value, self.stddev)
            if value >= self.floor:
                return value
        return max(self.floor, self.mean_value)

    @property
    def mean(self) -> float:
        return self.mean_value


@dataclass(frozen=True)
class LogNormal:
    """Log-normal given by the mean and stddev of the values themselves (not of the log)."""

    mean_value: float
    stddev: float

    def sample(self, rng: random.Random) -> float:
        sigma2 = math.log(1 + (self.stddev / self.mean_value) ** 2)
        mu = math.log(self.mean_value) - sigma2 / 2
        return rng.lognormvariate(mu, math.sqrt(sigma2))

    @property
    def mean(self) -> float:
        return self.mean_value


@dataclass(frozen=True)
class Exponential:
    mean_value: float

    def sample(self, rng: random.Random) -> float:
        return rng.expovariate(1.0 / self.mean_value)

    @property
    def mean(self) -> float:
        return self.mean_value


@dataclass(frozen=True)
class Empirical:
    """Values drawn uniformly from a list, e.g. the lengths of a production trace."""

    values: tuple[float, ...]

    def sample(self, rng: random.Random) -> float:
        return rng.choice(self.values)

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)


def load_empirical(path: Path, field: str | None) -> Empirical:
    """Lengths from a JSONL or CSV file: a numeric ``field``, or the word count of a text one.

    A text field (a real prompt) counts about one token per word, as our synthetic prompts do.
    The file is read with bounds (``DISTRIBUTION_FILE_MAX_BYTES``, a line-length cap): a
    device or a huge file is refused before it fills memory.
    """
    try:
        lines = list(read_lines(path, DISTRIBUTION_FILE_MAX_BYTES))
    except BoundedFileError as error:
        reason = str(error).removeprefix("cannot read: ")
        message = f"cannot read {path}: {reason}" if reason != str(error) else f"{path}: {error}"
        raise DistributionError(message, "file") from None
    values = [_length(path, number, value, field) for number, value in _rows(path, lines, field)]
    if not values:
        raise DistributionError(f"{path}: no values", "file")
    return Empirical(tuple(values))


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a number")


def _rows(path: Path, lines: list[tuple[int, str]], field: str | None) -> list[tuple[int, object]]:
    """Each row with its number (CSV: the row after the header; JSONL: the line)."""
    if path.suffix.lower() == ".csv":
        try:
            return list(enumerate(csv.DictReader(text for _, text in lines), start=1))
        except csv.Error as error:
            raise DistributionError(f"{path}: not CSV ({error})", "file") from None
    rows = []
    for number, text in lines:
        if not text.strip():
            continue
        try:
            rows.append((number, json.loads(text, parse_constant=_refuse_constant)))
        except (ValueError, RecursionError) as error:
            raise DistributionError(f"{path}: not JSON lines ({error})", "file") from None
    return rows


def _length(path: Path, number: int, row: object, field: str | None) -> float:
    value = row.get(field) if isinstance(row, dict) and field else row
    if isinstance(value, str):
        text = value
        try:
            value = float(text)
        except ValueError:
            value = float(len(text.split()))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_VALUE:
        raise DistributionError(
            f"{path} row {number}: no positive {field or 'value'} (finite, <= {MAX_VALUE:,})",
            "field",
        )
    return float(value)


def _number(spec: Mapping[str, object], key: str, *, positive: bool = True) -> float:
    if key not in spec:
        raise DistributionError("is required", key)
    value = spec[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DistributionError(f"must be a number, got {_short(value)}", key)
    _check_range(value, key)
    if positive and value <= 0:
        raise DistributionError("must be > 0", key)
    if not positive and value < 0:
        raise DistributionError("must be >= 0", key)
    return float(value)


def _check_range(value: float, key: str | None = None) -> None:
    """Finite and at most ``MAX_VALUE`` (compared before any float conversion: a 400-digit
    integer overflows a float)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise DistributionError("must be a finite number", key)
    if abs(value) > MAX_VALUE:
        raise DistributionError(f"must be <= {MAX_VALUE:,}", key)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_KEYS: dict[str, set[str]] = {
    "fixed": {"value"},
    "uniform": {"min", "max"},
    "normal": {"mean", "stddev"},
    "lognormal": {"mean", "stddev"},
    "exponential": {"mean"},
    "empirical": {"file", "field"},
}


def parse_distribution(spec: object, base_dir: Path | None = None) -> Distribution:
    """Build a distribution from a number or a ``{"dist": ...}`` mapping.

    ``base_dir`` resolves an empirical distribution's relative ``file`` (the scenario's folder).
    """
    if isinstance(spec, bool):
        raise DistributionError(f"must be a number or a distribution, got {spec!r}")
    if isinstance(spec, (int, float)):
        _check_range(spec)
        if spec <= 0:
            raise DistributionError("must be > 0")
        return Fixed(float(spec))
    if not isinstance(spec, Mapping):
        raise DistributionError(f"must be a number or a distribution mapping, got {_short(spec)}")
    kind = spec.get("dist", "fixed")
    if not isinstance(kind, str) or kind not in _KEYS:
        raise DistributionError(
            f"unknown distribution {_short(kind)}; one of {sorted(_KEYS)}", "dist"
        )
    unknown = sorted(str(key) for key in set(spec) - _KEYS[kind] - {"dist"})
    if unknown:
        raise DistributionError(f"unknown key for {kind}", unknown[0])
    if kind == "fixed":
        return Fixed(_number(spec, "value"))
    if kind == "empirical":
        if not isinstance(spec.get("file"), str):
            raise DistributionError("is required (a JSONL or CSV file of lengths)", "file")
        path = Path(spec["file"])
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        field = spec.get("field")
        return load_empirical(path, str(field) if field is not None else None)
    if kind == "uniform":
        low, high = _number(spec, "min", positive=False), _number(spec, "max")
        if high < low:
            raise DistributionError("must be >= min", "max")
        return Uniform(low, high)
    if kind == "normal":
        return Normal(_number(spec, "mean"), _number(spec, "stddev", positive=False))
    if kind == "lognormal":
        return LogNormal(_number(spec, "mean"), _number(spec, "stddev", positive=False))
    return Exponential(_number(spec, "mean"))


def as_distribution(value: object, base_dir: Path | None = None) -> Distribution:
    """Accept an already-built distribution as well as a spec (a user class's are taken
    once per class: ``harness.users.user_settings``)."""
    if hasattr(value, "sample") and hasattr(value, "mean"):
        return cast(Distribution, value)  # duck-typed, as the protocol is
    return parse_distribution(value, base_dir)


def sample_int(dist: Distribution, rng: random.Random, minimum: int = 1) -> int:
    """Lengths are whole tokens, never below ``minimum`` nor above ``MAX_VALUE`` (a
    log-normal's tail, or a distribution built in code, cannot overflow a length)."""
    value = dist.sample(rng)
    if not math.isfinite(value):
        value = float(MAX_VALUE) if value > 0 else float(minimum)
    return max(minimum, min(MAX_VALUE, round(value)))
