"""A user's requests in its API's own words: the API a class speaks, the body (model,
lengths, ``extra_body``), the headers (the key from the environment), and the model each
conversation names.

Why its own room: ``ChatUser`` is what Locust drives; what a request says is the API's and
the class's settings' business, the same for every turn that sends it (issue 47, item 4).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping
from typing import Any, Protocol

from tpot_locust.apis import dialect_named
from tpot_locust.apis.dialect import BodyOptions, Dialect, refuse_several_choices
from tpot_locust.common import env_vars
from tpot_locust.harness.users.model_lookup import first_listed_model, lookup_timeout
from tpot_locust.harness.users.model_split import ModelSplit
from tpot_locust.harness.users.user_context import user_context
from tpot_locust.harness.users.user_settings import RequestSettings, UserSettings
from tpot_locust.wire.http_client import HTTPConnection

# the first listed model, asked once per process for each (host, models path)
_MODELS: dict[tuple[str, str], str] = {}
# each user class's split over models (model_split): one round robin per class
_SPLITS: weakref.WeakKeyDictionary[type, ModelSplit] = weakref.WeakKeyDictionary()


def request_dialect(class_name: str, api: str, extra_body: Mapping[str, object]) -> Dialect:
    """The API ``api`` names (``apis.API_NAMES``), as the class ``class_name`` speaks it; an
    ``extra_body`` it could not measure (several choices) is refused before any request."""
    dialect = dialect_named(api)
    refuse_several_choices(class_name, extra_body)
    return dialect


class BodyUser(Protocol):
    """What a request's body and headers read of a user: its class's settings, read at
    each use (a test's settings retune the class), and where it runs."""

    @property
    def environment(self) -> Any: ...
    @property
    def host(self) -> str | None: ...
    def current_settings(self) -> UserSettings: ...


class RequestBodies:
    """One user's requests: its API (``dialect``) over its connection (for the models
    list), and the model of its current conversation (``session_model``)."""

    def __init__(self, user: BodyUser, dialect: Dialect, connection: HTTPConnection) -> None:
        self.user = user
        self.dialect = dialect
        self.connection = connection
        self.session_model: str | None = None  # this conversation's, from model_split

    @property
    def settings(self) -> RequestSettings:
        """The class's request settings, as they are now."""
        return self.user.current_settings().request

    def choose_model(self) -> None:
        """The next conversation's model, when the class splits its traffic over models;
        one round robin per class in this process, begun at this worker's index."""
        weights = self.settings.model_split
        if not weights:
            self.session_model = None
            return
        cls = type(self.user)
        split = _SPLITS.get(cls)
        if split is None or split.weights != weights:  # first, or retuned
            share = user_context(self.user.environment).process_share
            split = _SPLITS[cls] = ModelSplit(weights, share[0] if share else 0)
        self.session_model = split.pick()

    def encoded(self, history: list[dict[str, str]], max_tokens: int) -> bytes:
        """The body as sent; raises what the model lookup raises (``model_name``)."""
        return json.dumps(self.body(history, max_tokens)).encode()

    def body(self, history: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
        """The request in the API's own words (``apis``), then ``extra_body`` over it."""
        settings, dialect = self.settings, self.dialect
        model = self.session_model
        if model is None and (dialect.models_path or settings.model):
            model = self.model_name()
        options = BodyOptions(
            model=model,
            max_tokens=max_tokens,
            ignore_eos=settings.ignore_eos,
            force_min_tokens=settings.force_min_tokens,
            include_usage=settings.include_usage,
        )
        body = dialect.body(history, options)
        body.update(settings.extra_body)
        return body

    def asked_tokens(self, max_tokens: int) -> int | None:
        """The output tokens a request asks for: ``max_tokens``, unless ``extra_body`` sets
        a length of its own (``max_completion_tokens``, ``num_predict``, ...): then unknown."""
        for key in self.settings.extra_body:
            name = str(key).lower()
            if ("max" in name and "token" in name) or name == "num_predict":
                return None
        return max_tokens

    def headers(self, request_id: str) -> dict[str, str]:
        settings = self.settings
        env_name = settings.api_key_env
        key = env_vars.named_by_user(env_name) if env_name else None
        return {
            "Content-Type": "application/json",
            "Accept": self.dialect.media_types[0],
            "X-Request-Id": request_id,
            **self.dialect.headers(key or None),
            **settings.headers,
        }

    def model_name(self) -> str:
        """The class's model, or the first the server lists; raises ``StreamError``
        (``model_lookup``)."""
        if model := self.settings.model:
            return model
        where = (self.user.host or "", self.dialect.models_path or "")
        cached = _MODELS.get(where)
        if cached is None:
            cached = _MODELS[where] = first_listed_model(
                self.connection,
                self.dialect,
                self.headers("models"),
                lookup_timeout(self.user.current_settings().limits.first_token),
            )
        return cached
