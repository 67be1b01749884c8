"""Plain Locust entry point: ``locust -f locustfiles/chat.py --host http://127.0.0.1:8000``.

Streams multi-turn chat sessions; the TPOT report prints when Locust quits, and
``--tpot-out DIR`` also writes summary.json and histograms.json. Edit the attributes (or
subclass ``ChatUser`` in your own locustfile) to change the traffic.
"""

import tpot_locust.plugin  # noqa: F401  (records and reports our metrics)
from tpot_locust import ChatUser


class Chat(ChatUser):
    prompt_tokens = {"dist": "uniform", "min": 128, "max": 512}
    output_tokens = 128
    turns = 2
    think_time = 0.2
