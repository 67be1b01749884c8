"""What a user sends, turn by turn: its sessions' user messages (synthetic, a dataset's, a
trace's), their token counts and each turn's ``max_tokens``.

Why its own room: ``ChatUser`` is what Locust drives; planning turns is drawing lengths and
text from the class's settings, which needs neither Locust nor the wire (issue 47, item 4).
"""

from __future__ import annotations

import random
import weakref
from collections.abc import Callable, Iterator
from typing import Protocol

import gevent

from tpot_locust.common.cooperation import let_streams_run
from tpot_locust.common.distributions import Distribution, sample_int
from tpot_locust.common.tokens import Tokenizer, load_tokenizer
from tpot_locust.harness.users.turns import PlannedTurn
from tpot_locust.harness.users.user_settings import TurnSettings, UserSettings
from tpot_locust.scenario.datasets import Conversation
from tpot_locust.scenario.prompts import WORDS, blocks_text, synthetic_text

# each user class's shared prefix (shared_prefix_tokens): the same text for all its sessions
_PREFIXES: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()


class PlanUser(Protocol):
    """What planning reads of a user: its class's settings (``ChatUser.current_settings``:
    parsed once per class, anew after a test's settings retune it), and its seeded random
    stream."""

    rng: random.Random

    def current_settings(self) -> UserSettings: ...


class TurnPlanner:
    """One user's turns, drawn from its class's settings with its random stream."""

    def __init__(self, user: PlanUser) -> None:
        self.user = user

    @property
    def rng(self) -> random.Random:
        return self.user.rng

    @property
    def settings(self) -> TurnSettings:
        """The class's turn settings, as they are now (read at each use: a test's settings
        retune the class)."""
        return self.user.current_settings().turns

    def session_turns(
        self,
        t_intended_ns: int | None,
        prompt_tokens: Distribution | None,
        output_tokens: Distribution | None,
        turns: int | None,
    ) -> Iterator[PlannedTurn]:
        """The class's synthetic turns: the first of ``prompt_tokens`` (else the class's),
        later ones of ``followup_tokens``, think time between."""
        settings = self.settings
        first_spec = prompt_tokens if prompt_tokens is not None else settings.prompt_tokens
        followup = settings.followup_tokens
        count = max(int(turns or settings.turns), 1)
        for turn in range(count):
            if turn:
                self._think()
            spec = first_spec if turn == 0 or followup is None else followup
            text, new_tokens = self.user_message(spec, first=turn == 0, pause=let_streams_run)
            yield PlannedTurn(
                text,
                new_tokens,
                self.max_tokens(output_tokens),
                t_intended_ns if turn == 0 else None,
                turn + 1 == count,
            )

    def dataset_turns(
        self, turns: Conversation, t_intended_ns: int | None, output_tokens: Distribution | None
    ) -> Iterator[PlannedTurn]:
        """A dataset's conversation, its user turns in order, each turn's answer the
        server's (its recorded answer's length, or the length given with it, is
        ``max_tokens``), think time between."""
        for number, turn in enumerate(turns):
            if number:
                self._think()
            if turn.output_tokens is not None:
                max_tokens = turn.output_tokens
            elif turn.answer is not None:
                max_tokens = max(self.count_tokens(turn.answer, len(turn.answer.split())), 1)
            else:
                max_tokens = self.max_tokens(output_tokens)
            tokens = self.count_tokens(turn.text, len(turn.text.split()))
            yield PlannedTurn(
                turn.text,
                tokens,
                max_tokens,
                t_intended_ns if number == 0 else None,
                number + 1 == len(turns),
            )

    def _think(self) -> None:
        """The class's think time between two turns (none: no pause at all)."""
        if (think_time := self.settings.think_time) is not None:
            gevent.sleep(think_time.sample(self.rng))

    def user_message(
        self, spec: Distribution, first: bool, pause: Callable[[], None] | None = None
    ) -> tuple[str, int]:
        """A new user message of ``spec`` tokens (the shared prefix first, if any)."""
        rng = self.rng
        new_tokens = sample_int(spec, rng)
        prefix = self._shared_prefix() if first else ""
        if (exact := self.tokenizer()) is not None:  # exactly new_tokens after the prefix
            text = exact.text_of(new_tokens, rng, WORDS, prefix, pause)
            return text, new_tokens + (exact.count_prefix(prefix) if prefix else 0)
        text = synthetic_text(new_tokens, rng, pause)
        if prefix:
            return f"{prefix} {text}", new_tokens + self.settings.shared_prefix_tokens
        return text, new_tokens

    def trace_message(
        self,
        prompt: str | None,
        input_tokens: int | None,
        blocks: tuple[int, ...] = (),
        block_tokens: int = 0,
    ) -> tuple[str, int]:
        """A trace's user message: its own text, synthetic text of its length, or (a
        published trace's prefix blocks) the text of each block in turn, so that requests
        sharing leading blocks share that much leading text, in every process."""
        if prompt is not None:  # without a tokenizer the simulator's count; a server's differs
            return prompt, self.count_tokens(prompt, len(prompt.split()))
        tokens = int(input_tokens or 1)
        if blocks and block_tokens:
            text = blocks_text(blocks, block_tokens, tokens, self.tokenizer())
            return text, self.count_tokens(text, tokens)
        rng = self.rng
        if (exact := self.tokenizer()) is not None:
            return exact.text_of(tokens, rng, WORDS, pause=let_streams_run), tokens
        return synthetic_text(tokens, rng, let_streams_run), tokens

    def max_tokens(self, output_tokens: Distribution | None = None) -> int:
        length = output_tokens if output_tokens is not None else self.settings.output_tokens
        return sample_int(length, self.rng)

    def tokenizer(self) -> Tokenizer | None:
        name = self.settings.tokenizer
        return load_tokenizer(name) if name else None

    def count_tokens(self, text: str, estimate: int) -> int:
        """The tokens of ``text`` by the class's tokenizer; without one, ``estimate``."""
        exact = self.tokenizer()
        return exact.count(text) if exact is not None else estimate

    def served_prompt_tokens(
        self, history: list[dict[str, str]], counted: int, templated: bool
    ) -> int:
        """The prompt as the server counts it: with a tokenizer that has a chat template,
        and an API whose server applies it (``templated``), the messages' tokens plus
        those the template adds (``Tokenizer.template_tokens``); else ``counted``, the
        messages' own."""
        exact = self.tokenizer() if templated else None
        if exact is None or not history:
            return counted
        added = exact.template_tokens(tuple(message["role"] for message in history))
        return counted if added is None else counted + added

    def _shared_prefix(self) -> str:
        """The class's common prefix (same text for every session of the class), or ""."""
        settings = self.settings
        if not settings.shared_prefix_tokens or self.rng.random() >= settings.shared_prefix_ratio:
            return ""
        cls = type(self.user)
        prefix = _PREFIXES.get(cls)
        if prefix is None:
            exact, seeded = self.tokenizer(), random.Random(cls.__name__)
            prefix = (
                exact.text_of(settings.shared_prefix_tokens, seeded, WORDS)
                if exact
                else synthetic_text(settings.shared_prefix_tokens, seeded)
            )
            _PREFIXES[cls] = prefix
        return prefix
