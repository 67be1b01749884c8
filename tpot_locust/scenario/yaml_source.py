"""YAML with positions: every value remembers its file, line and column.

Only ``yaml.SafeLoader`` constructs values (safe_load semantics); the node tree is walked
here so that a validation error can say ``scenarios/x.yaml:14:5: classes.chat.users: ...``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ScenarioError(ValueError):
    """A scenario problem, formatted as ``file:line:column: key.path: message``."""

    def __init__(self, source: str, line: int, column: int, path: str, message: str) -> None:
        location = f"{source}:{line}:{column}" if line else source  # line 0: not from a file
        super().__init__(f"{location}: {path}: {message}" if path else f"{location}: {message}")
        self.source, self.line, self.column, self.path = source, line, column, path


class ScenarioErrors(ScenarioError):
    """Every problem found in one document, one per line, in the order of the file."""

    def __init__(self, errors: list[ScenarioError]) -> None:
        ordered = sorted(errors, key=lambda error: (error.source, error.line, error.column))
        first = ordered[0]
        super().__init__(first.source, first.line, first.column, first.path, "")
        self.args = ("\n".join(str(error) for error in ordered),)
        self.errors = ordered


def did_you_mean(key: str, allowed: Iterable[str]) -> str:
    """`` (did you mean ttft_ms?)`` for a key one or two edits from an allowed one."""
    close = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


@dataclass(frozen=True)
class Located:
    """The parsed document plus the position of every key path in it.

    Validation keeps going past an error (``keep_going``) and raises every one it found at
    the end (``raise_problems``), so one ``validate`` shows all that is wrong in a file.
    """

    source: str
    data: Any
    positions: dict[str, tuple[int, int]]
    # key path -> the command-line option that set it: its errors name the option, not a line
    overridden: dict[str, str] = field(default_factory=dict)
    problems: list[ScenarioError] = field(default_factory=list)

    @contextmanager
    def keep_going(self) -> Iterator[None]:
        """Note an error raised inside and go on with the next part of the document."""
        try:
            yield
        except ScenarioErrors as errors:
            self.problems.extend(errors.errors)
        except ScenarioError as error:
            self.problems.append(error)

    def raise_problems(self) -> None:
        if self.problems:
            raise ScenarioErrors(list(self.problems))

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
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ScenarioError(source, 1, 1, "", f"cannot read: {error.strerror or error}") from None
    return parse_located(text, source)


def parse_located(text: str, source: str) -> Located:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        raise yaml_error(error, source) from None
    positions: dict[str, tuple[int, int]] = {}
    if node is None:
        return Located(source, {}, positions)
    data = _construct(node, "", positions, source)
    return Located(source, data, positions)


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


def _construct(
    node: yaml.Node, path: str, positions: dict[str, tuple[int, int]], source: str
) -> Any:
    positions[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = _scalar(key_node)
            key_text = str(key)
            child = f"{path}.{key_text}" if path else key_text
            if key_text in result:
                line, column = key_node.start_mark.line + 1, key_node.start_mark.column + 1
                raise ScenarioError(source, line, column, child, "duplicate key")
            result[key_text] = _construct(value_node, child, positions, source)
            positions[child] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [
            _construct(item, f"{path}.{index}", positions, source)
            for index, item in enumerate(node.value)
        ]
    return _scalar(node)


def _scalar(node: yaml.Node) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()
