"""Locustfile for distributed tests; output length from TPOT_TEST_OUTPUT_TOKENS."""

import os

import tpot_locust.plugin  # noqa: F401  (records and reports our metrics)
from tpot_locust import ChatUser


class Stream(ChatUser):
    prompt_tokens = 16
    output_tokens = int(os.environ.get("TPOT_TEST_OUTPUT_TOKENS", "60"))
