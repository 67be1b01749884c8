"""Locustfile for session tests: multi-turn chat and completions, one session per user."""

from locust import constant

import tpot_locust.plugin  # noqa: F401  (records and reports our metrics)
from tpot_locust import ChatUser, CompletionsUser


class Conversation(ChatUser):
    wait_time = constant(1000)
    prompt_tokens = 40
    followup_tokens = 10
    output_tokens = 20
    turns = 3
    think_time = 0.05


class Completion(CompletionsUser):
    wait_time = constant(1000)
    prompt_tokens = 30
    output_tokens = 15
