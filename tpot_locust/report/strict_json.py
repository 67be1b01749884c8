"""Our JSON files written strictly: whole or not at all (a reader never sees half of one),
and only what JSON holds (NaN and infinity become null, named as problems) — Python's
``json`` would write NaN, which other readers refuse.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tpot_locust.common.results_files import write_file
from tpot_locust.common.run_facts import RunFacts, json_default


def write_json(path: Path, data: Mapping[str, object], problems: list[str] | None = None) -> None:
    """Write ``data`` as strict JSON (via a temporary file, so a reader never sees half of
    it): a number JSON cannot hold (NaN, infinity) becomes null, named in ``problems``."""
    safe = json_safe(data, "", [] if problems is None else problems)
    write_file(path, json.dumps(safe, indent=2, default=json_default) + "\n")


def json_safe(value: Any, key: str, problems: list[str]) -> Any:
    if isinstance(value, RunFacts):  # the summary's "run": facts still, their numbers safe
        return RunFacts.from_json(json_safe(value.to_json(), key, problems))
    if isinstance(value, float) and not math.isfinite(value):
        problems.append(f"{key or '(top level)'}: {value} written as null")
        return None
    if isinstance(value, dict):
        return {
            str(k): json_safe(v, f"{key}.{k}" if key else str(k), problems)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [json_safe(v, f"{key}[{i}]", problems) for i, v in enumerate(value)]
    if isinstance(value, str | int | bool) or value is None:
        return value
    if isinstance(value, float):
        return value
    try:  # numpy scalars and the like
        return json_safe(value.item(), key, problems)
    except AttributeError:
        problems.append(f"{key}: {type(value).__name__} written as text")
        return str(value)
