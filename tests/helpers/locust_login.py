"""Locustfile with ``--web-login`` wired up (a secret key, a user loader that knows nobody):
every page of the web UI, ours included, then needs a login."""

from locust import events

import tpot_locust.plugin  # noqa: F401  (records and reports our metrics)
from tpot_locust import ChatUser


class Stream(ChatUser):
    prompt_tokens = 16
    output_tokens = 16


@events.init.add_listener
def _login(environment, **_kwargs):
    if environment.web_ui is not None:
        environment.web_ui.app.config["SECRET_KEY"] = "test-only"
        environment.web_ui.login_manager.user_loader(lambda user_id: None)
