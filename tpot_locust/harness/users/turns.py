"""One turn of a conversation as ``ChatUser.converse`` sends it: sessions, dataset
conversations and trace replays each plan their turns (``PlannedTurn``, and for a dataset
the entry each process sends: ``dataset_position``), a burst prepares its requests before
their send time (``PreparedTurn``), and one loop sends them. A module of its own so that the
traffic module (imported by the plugin, which the users module imports) can plan trace
turns without importing the users."""

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


@dataclass(frozen=True)
class PreparedTurn:
    """A request built before its send time (``ChatUser.prepare_turn``)."""

    history: list[dict[str, str]]
    max_tokens: int
    prompt_tokens: int
    body: bytes


def dataset_position(taken: int, index: int, count: int, size: int) -> int:
    """The entry a process sends as its ``taken``-th: every ``count``-th from ``index``, so
    the run's processes together send the file in order, none twice a round."""
    return (index + taken * count) % size
