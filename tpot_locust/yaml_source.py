"""YAML with positions: every value remembers its file, line and column.

Only ``yaml.SafeLoader`` constructs values (safe_load semantics); the node tree is walked
here so that a validation error can say ``scenarios/x.yaml:14:5: classes.chat.users: ...``.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class Located:
    """The parsed document plus the position of every key path in it."""

    source: str
    data: Any
    positions: dict[str, tuple[int, int]]
    # key path -> the command-line option that set it: its errors name the option, not a line
    overridden: dict[str, str] = field(default_factory=dict)

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
        mark = getattr(error, "problem_mark", None)
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = getattr(error, "problem", None) or str(error)
        raise ScenarioError(source, line, column, "", f"invalid YAML: {problem}") from None
    positions: dict[str, tuple[int, int]] = {}
    if node is None:
        return Located(source, {}, positions)
    data = _construct(node, "", positions, source)
    return Located(source, data, positions)


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
