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
from typing import Any, Protocol

__all__ = [
    "Distribution",
    "Fixed",
    "Uniform",
    "Normal",
    "LogNormal",
    "Exponential",
    "Empirical",
    "parse_distribution",
    "DistributionError",
]


class DistributionError(ValueError):
    """A distribution spec is malformed; ``key`` names the offending field."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class Distribution(Protocol):
    def sample(self, rng: random.Random) -> float: ...

    @property
    def mean(self) -> float: ...


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
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise DistributionError(f"cannot read {path}: {error.strerror or error}", "file") from None
    if path.suffix.lower() == ".csv":
        rows: list[Any] = list(csv.DictReader(text.splitlines()))
    else:
        try:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as error:
            raise DistributionError(f"{path}: not JSON lines ({error})", "file") from None
    values: list[float] = []
    for number, row in enumerate(rows, start=1):
        value = row.get(field) if isinstance(row, dict) and field else row
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                value = float(len(value.split()))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise DistributionError(f"{path} row {number}: no positive {field or 'value'}", "field")
        values.append(float(value))
    if not values:
        raise DistributionError(f"{path}: no values", "file")
    return Empirical(tuple(values))


def _number(spec: Mapping[str, Any], key: str, *, positive: bool = True) -> float:
    if key not in spec:
        raise DistributionError("is required", key)
    value = spec[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DistributionError(f"must be a number, got {value!r}", key)
    if positive and value <= 0:
        raise DistributionError("must be > 0", key)
    if not positive and value < 0:
        raise DistributionError("must be >= 0", key)
    return float(value)


_KEYS: dict[str, set[str]] = {
    "fixed": {"value"},
    "uniform": {"min", "max"},
    "normal": {"mean", "stddev"},
    "lognormal": {"mean", "stddev"},
    "exponential": {"mean"},
    "empirical": {"file", "field"},
}


def parse_distribution(spec: Any, base_dir: Path | None = None) -> Distribution:
    """Build a distribution from a number or a ``{"dist": ...}`` mapping.

    ``base_dir`` resolves an empirical distribution's relative ``file`` (the scenario's folder).
    """
    if isinstance(spec, bool):
        raise DistributionError(f"must be a number or a distribution, got {spec!r}")
    if isinstance(spec, (int, float)):
        if spec <= 0:
            raise DistributionError("must be > 0")
        return Fixed(float(spec))
    if not isinstance(spec, Mapping):
        raise DistributionError(f"must be a number or a distribution mapping, got {spec!r}")
    kind = spec.get("dist", "fixed")
    if kind not in _KEYS:
        raise DistributionError(f"unknown distribution {kind!r}; one of {sorted(_KEYS)}", "dist")
    unknown = set(spec) - _KEYS[kind] - {"dist"}
    if unknown:
        raise DistributionError(f"unknown key for {kind}", sorted(unknown)[0])
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


def as_distribution(value: Any, base_dir: Path | None = None) -> Distribution:
    """Accept an already-built distribution as well as a spec."""
    if hasattr(value, "sample") and hasattr(value, "mean"):
        return value
    return parse_distribution(value, base_dir)


def sample_int(dist: Distribution, rng: random.Random, minimum: int = 1) -> int:
    """Lengths are whole tokens and never below ``minimum``."""
    return max(minimum, round(dist.sample(rng)))
