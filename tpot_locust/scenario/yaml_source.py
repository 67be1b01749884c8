"""YAML with positions: every value remembers its file, line and column.

Only ``yaml.SafeLoader`` constructs values (safe_load semantics); the node tree is walked
here so that a validation error can say ``scenarios/x.yaml:14:5: classes.chat.users: ...``.

Bounded, for a file or a ``--set`` value from anyone (the web UI's form included): at most
``MAX_SOURCE_BYTES`` of text, ``MAX_DEPTH`` levels of nesting, ``MAX_NODES`` values built
(counted through aliases, so a "billion laughs" alias bomb stops early), keys of at most
``MAX_KEY`` characters, ``MAX_EXPANDED_CHARS`` of key paths and texts in all once
aliases are expanded (a long key above an alias bomb is repeated in every path under it,
a long text aliased 100,000 times would be written out, or sent, 100,000 times), no alias
inside itself, and at most ``MAX_PROBLEMS`` problems listed.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from yaml.composer import ComposerError

from tpot_locust.common.bounded_files import SCENARIO_FILE_MAX_BYTES, BoundedFileError, read_text

MAX_SOURCE_BYTES = SCENARIO_FILE_MAX_BYTES  # 1 MiB: a scenario file, or one --set value
MAX_DEPTH = 64  # levels of nesting (a scenario needs about 6)
MAX_NODES = 100_000  # values built, aliases expanded (a scenario has about a hundred)
MAX_PROBLEMS = 100  # problems listed; past them, one line says how many more
MAX_HINT_KEY = 64  # longer keys get no "did you mean" (difflib is quadratic in length)
MAX_KEY = 1024  # characters of one key (YAML's own limit for a plain key)
MAX_EXPANDED_CHARS = 16 * 1024 * 1024  # characters of all key paths and texts, expanded


class ScenarioError(ValueError):
    """A scenario problem, formatted as ``file:line:column: key.path: message``."""

    def __init__(self, source: str, line: int, column: int, path: str, message: str) -> None:
        location = f"{source}:{line}:{column}" if line else source  # line 0: not from a file
        shown = path if len(path) <= 200 else f"{path[:120]}...{path[-60:]}"
        super().__init__(f"{location}: {shown}: {message}" if path else f"{location}: {message}")
        self.source, self.line, self.column, self.path = source, line, column, path


class ScenarioErrors(ScenarioError):
    """Every problem found in one document, one per line, in the order of the file;
    ``dropped``: how many more were found past ``MAX_PROBLEMS`` (one line says so)."""

    def __init__(self, errors: list[ScenarioError], dropped: int = 0) -> None:
        ordered = sorted(errors, key=lambda error: (error.source, error.line, error.column))
        first = ordered[0]
        super().__init__(first.source, first.line, first.column, first.path, "")
        lines = [str(error) for error in ordered]
        if dropped:
            lines.append(f"... {dropped} more problems not shown")
        self.args = ("\n".join(lines),)
        self.errors = ordered
        self.dropped = dropped


class Problems(list):  # type: ignore[type-arg]
    """The problems of one document: the first ``MAX_PROBLEMS`` kept, the rest counted, so
    a file of a million unknown keys costs a bounded report, not gigabytes of errors."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0

    def append(self, error: ScenarioError) -> None:
        if len(self) < MAX_PROBLEMS:
            super().append(error)
        else:
            self.dropped += 1

    def extend(self, errors: Iterable[ScenarioError]) -> None:
        for error in errors:
            self.append(error)

    @property
    def full(self) -> bool:
        return len(self) >= MAX_PROBLEMS


def did_you_mean(key: str, allowed: Iterable[str]) -> str:
    """`` (did you mean ttft_ms?)`` for a key one or two edits from an allowed one (keys
    longer than ``MAX_HINT_KEY`` get none: matching costs the square of the length)."""
    if len(key) > MAX_HINT_KEY:
        return ""
    close = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


@dataclass(frozen=True)
class Located:
    """The parsed document plus the position of every key path in it.

    Validation keeps going past an error (``keep_going``) and raises every one it found at
    the end (``raise_problems``), so one ``validate`` shows all that is wrong in a file.
    """

    source: str
    data: object
    positions: dict[str, tuple[int, int]]
    # key path -> the command-line option that set it: its errors name the option, not a line
    overridden: dict[str, str] = field(default_factory=dict)
    problems: Problems = field(default_factory=Problems)

    @contextmanager
    def keep_going(self) -> Iterator[None]:
        """Note an error raised inside and go on with the next part of the document."""
        try:
            yield
        except ScenarioErrors as errors:
            self.problems.extend(errors.errors)
            self.problems.dropped += errors.dropped
        except ScenarioError as error:
            self.problems.append(error)

    def raise_problems(self) -> None:
        if self.problems:
            raise ScenarioErrors(list(self.problems), self.problems.dropped)

    def error(self, path: str, message: str) -> ScenarioError:
        prefix = path
        while prefix:
            if prefix in self.overridden:
                return ScenarioError(self.overridden[prefix], 0, 0, path, message)
            prefix = prefix.rsplit(".", 1)[0] if "." in prefix else ""
        line, column = self._position(path)
        return ScenarioError(self.source, line, column, path, message)

    def _position(self, path: str) -> tuple[int, int]:
        while path not in self.positions and "." in path:
            path = path.rsplit(".", 1)[0]
        return self.positions.get(path, (1, 1))


def load_located(path: Path) -> Located:
    return parse_located(read_source(path), str(path))


def read_source(path: Path) -> str:
    """A scenario file's text, read with bounds (a regular file of at most
    ``MAX_SOURCE_BYTES``: ``/dev/zero`` or a 50 MB description is refused at once)."""
    try:
        return read_text(path, MAX_SOURCE_BYTES)
    except BoundedFileError as error:
        raise ScenarioError(str(path), 1, 1, "", f"{error} (a scenario file)") from None


def parse_located(text: str, source: str) -> Located:
    """``text`` (a file's or one ``--set`` value's) parsed with every bound of this module."""
    if (
        len(text) > MAX_SOURCE_BYTES
        or len(text.encode("utf-8", "surrogatepass")) > MAX_SOURCE_BYTES
    ):
        raise ScenarioError(source, 1, 1, "", f"longer than the limit of {MAX_SOURCE_BYTES} bytes")
    try:
        node = _compose(text)
    except yaml.YAMLError as error:
        raise yaml_error(error, source) from None
    except RecursionError:  # not expected past the depth check; never a traceback
        raise ScenarioError(source, 1, 1, "", f"nested deeper than {MAX_DEPTH} levels") from None
    positions: dict[str, tuple[int, int]] = {}
    if node is None:
        return Located(source, {}, positions)
    data = _Builder(source, positions).build(node, "", 0)
    return Located(source, data, positions)


def _compose(text: str) -> yaml.Node | None:
    loader = _BoundedLoader(text)  # its reader checks the characters: a YAMLError too
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader's composer, refusing nesting past ``MAX_DEPTH`` as it goes (composing is
    recursive: 5,000 levels were a ``RecursionError``)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                # types-PyYAML leaves the parser's methods untyped
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def yaml_error(error: yaml.YAMLError, source: str) -> ScenarioError:
    """Where the parser noticed the problem and, when it differs, where the construct it was
    reading began: an unclosed ``[`` is noticed lines after the line that opened it."""
    mark = getattr(error, "problem_mark", None)
    line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    message = f"invalid YAML: {getattr(error, 'problem', None) or error}"
    opened = getattr(error, "context_mark", None)
    context = getattr(error, "context", None)
    if opened is not None and context and (opened.line + 1, opened.column + 1) != (line, column):
        what = context.removeprefix("while ").removeprefix("parsing ").removeprefix("scanning ")
        message += f" ({what} that started at line {opened.line + 1}, column {opened.column + 1})"
    return ScenarioError(source, line, column, "", message)


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


class _Builder:
    """The node tree as plain data, with the position of every key path. Aliases are
    expanded (a path under one has its own position), so each value built is counted
    against ``MAX_NODES``, and an alias met inside its own anchor is refused."""

    def __init__(self, source: str, positions: dict[str, tuple[int, int]]) -> None:
        self.source, self.positions = source, positions
        self.built = 0
        self.chars = 0  # of key paths and texts, aliases expanded
        self.open: set[int] = set()  # the collections being built (an alias to one recurses)
        self.constructor = yaml.SafeLoader("")

    def error(self, node: yaml.Node, path: str, message: str) -> ScenarioError:
        return ScenarioError(self.source, *_mark(node), path, message)

    def build(self, node: yaml.Node, path: str, depth: int) -> object:
        self.built += 1
        if self.built > MAX_NODES:
            raise self.error(node, path, f"more than {MAX_NODES:,} values (aliases expanded)")
        self.count_chars(node, path, len(path))
        if depth > MAX_DEPTH:
            raise self.error(
                node, path, f"nested deeper than {MAX_DEPTH} levels (aliases expanded)"
            )
        self.positions[path] = _mark(node)
        if not isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            value = self.scalar(node, path)
            if isinstance(value, (str, bytes)):
                self.count_chars(node, path, len(value))
            return value
        if id(node) in self.open:
            raise self.error(node, path, "an alias inside its own anchor (recursive)")
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self.mapping(node, path, depth)
            return [self.build(item, f"{path}.{i}", depth + 1) for i, item in enumerate(node.value)]
        finally:
            self.open.discard(id(node))

    def count_chars(self, node: yaml.Node, path: str, count: int) -> None:
        self.chars += count
        if self.chars > MAX_EXPANDED_CHARS:
            raise self.error(
                node,
                path,
                f"more than {MAX_EXPANDED_CHARS:,} characters of keys and texts (aliases expanded)",
            )

    def mapping(self, node: yaml.MappingNode, path: str, depth: int) -> dict[str, object]:
        result: dict[str, object] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.error(
                    key_node, path, "a key must be a plain value, not a mapping or a list"
                )
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise self.error(
                    key_node, path, "merge keys (<<) are not supported: write the keys out"
                )
            key_text = str(self.scalar(key_node, path))
            if len(key_text) > MAX_KEY:
                raise self.error(key_node, path, f"a key longer than {MAX_KEY:,} characters")
            child = f"{path}.{key_text}" if path else key_text
            if key_text in result:
                raise self.error(key_node, child, "duplicate key")
            result[key_text] = self.build(value_node, child, depth + 1)
            self.positions[child] = _mark(key_node)
        return result

    def scalar(self, node: yaml.Node, path: str) -> object:
        """safe_load's value for a scalar (a bad date or a 5,000-digit integer is an error
        at its line, not a traceback)."""
        try:
            return self.constructor.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as error:
            problem = getattr(error, "problem", None) or error
            raise self.error(node, path, f"invalid value: {problem}") from None
