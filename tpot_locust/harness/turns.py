"""One turn of a conversation as ``ChatUser.converse`` sends it: sessions, dataset
conversations and trace replays each plan their turns, and one loop sends them. A module
of its own so that the traffic module (imported by the plugin, which the users module
imports) can plan trace turns without importing the users."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PlannedTurn:
    """One turn of a conversation, as ``ChatUser.converse`` sends it."""

    text: str  # the new user message
    tokens: int  # its prompt tokens (ours)
    max_tokens: int
    intended_ns: int | None = None  # its open-loop arrival time, if it is one
    last: bool = True  # no later turn needs its answer's text
    whole_context: bool = False  # its text is the conversation so far: sent alone, no history
