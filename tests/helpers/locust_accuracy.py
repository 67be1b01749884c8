"""Locustfile for the accuracy test: 8 users, one request each of 200 forced tokens."""

from locust import constant

import tpot_locust.plugin  # noqa: F401  (records and reports our metrics)
from tpot_locust import ChatUser


class Accuracy(ChatUser):
    wait_time = constant(1000)  # one session per user within the test's run time
    prompt_tokens = 64
    output_tokens = 200
    turns = 1
