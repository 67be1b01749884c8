"""The simulator's routes: each API's path, the models lists, the plain GET pages, and the
one method each is served with (a path not here is a 404, another method a 405)."""

from __future__ import annotations

from ..apis import dialects
from ..apis.dialect import Dialect

API_BY_PATH: dict[str, str] = {dialect.path: dialect.name for dialect in dialects()}
# a models list per path, in the shape of the first API that names it
MODELS_BY_PATH: dict[str, Dialect] = {}
for _dialect in dialects():
    if _dialect.models_path is not None:
        MODELS_BY_PATH.setdefault(_dialect.models_path, _dialect)
ROUTES: dict[str, str] = {
    **dict.fromkeys(API_BY_PATH, "POST"),
    **dict.fromkeys(MODELS_BY_PATH, "GET"),
    "/health": "GET",
    "/metrics": "GET",
    "/dcgm/metrics": "GET",
}
