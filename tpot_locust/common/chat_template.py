"""A model's chat template, rendered as Hugging Face transformers renders it.

A chat server does not tokenize the messages it is sent but the text its chat template
makes of them (role headers, separators, a generation prompt), so counting a prompt's
tokens as the server does means rendering that template first. The template comes from a
tokenizer folder: ``chat_template.jinja`` (what transformers saves now) or the
``chat_template`` field of ``tokenizer_config.json`` (a string, or a list of
``{name, template}`` of which ``default`` is used). It is rendered the way transformers'
``apply_chat_template`` does: jinja2's ``ImmutableSandboxedEnvironment`` (templates from
the Hub are untrusted code) with ``trim_blocks`` and ``lstrip_blocks``, its globals and
filters, ``messages``, ``add_generation_prompt=True`` and the special tokens of
``tokenizer_config.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2.ext
from jinja2 import Template, nodes
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

from tpot_locust.common.bounded_files import BoundedFileError, read_text

CONFIG_FILE = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"
DEFAULT_TEMPLATE = "default"  # the name transformers uses from a list of named templates
MAX_CONFIG_BYTES = 64 * 1024 * 1024  # a config lists its added tokens: megabytes at most
MAX_TEMPLATE_BYTES = 1024 * 1024  # the longest templates on the Hub are ~20 KB
# The special tokens transformers passes to a template (its ``special_tokens_map``).
SPECIAL_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
    "additional_special_tokens",
)


class ChatTemplateError(ValueError):
    """A chat template that cannot be read, compiled or rendered (the message says why)."""


@dataclass(frozen=True)
class ChatTemplate:
    """A compiled template and the special tokens it is rendered with."""

    source: str  # the file it came from, for messages
    template: Template
    special_tokens: Mapping[str, Any]

    def render(self, messages: list[dict[str, str]]) -> str:
        """The text the server tokenizes for ``messages``, with the generation prompt."""
        variables = {"tools": None, "documents": None, **self.special_tokens}
        try:
            return self.template.render(messages=messages, add_generation_prompt=True, **variables)
        except Exception as error:  # noqa: BLE001 - a template is code: it raises anything
            raise ChatTemplateError(
                f"chat template {self.source} does not render: {_reason(error)}"
            ) from None


def load_chat_template(folder: Path) -> ChatTemplate | None:
    """The chat template of the tokenizer folder ``folder``, or None when it has none (a
    bare ``tokenizer.json``); ``ChatTemplateError`` for one that cannot be used."""
    config_file = folder / CONFIG_FILE
    config = _read_config(config_file) if config_file.exists() else {}
    template_file = folder / TEMPLATE_FILE
    text: str | None
    if template_file.exists():  # transformers reads it over the config's field
        source, text = str(template_file), _read(template_file, MAX_TEMPLATE_BYTES)
    else:
        source, text = str(config_file), _config_template(config_file, config)
    if text is None:
        return None
    return ChatTemplate(source, compile_template(text, source), _special_tokens(config))


def _read(path: Path, max_bytes: int) -> str:
    try:
        return read_text(path, max_bytes)
    except (OSError, BoundedFileError) as error:
        raise ChatTemplateError(f"{path}: {error}") from None


def _read_config(path: Path) -> dict[str, object]:
    try:
        config = json.loads(_read(path, MAX_CONFIG_BYTES))
    except json.JSONDecodeError as error:
        raise ChatTemplateError(f"{path}: not JSON ({error})") from None
    if not isinstance(config, dict):
        raise ChatTemplateError(f"{path}: not a JSON object")
    return config


def _config_template(path: Path, config: dict[str, object]) -> str | None:
    """The config's ``chat_template``: a string, or the ``default`` one of a list of
    ``{name, template}`` (None: no template)."""
    template = config.get("chat_template")
    if template is None or isinstance(template, str):
        return template
    if isinstance(template, list):
        named = {
            item.get("name"): item.get("template") for item in template if isinstance(item, dict)
        }
        chosen = named.get(DEFAULT_TEMPLATE)
        if isinstance(chosen, str):
            return chosen
        names = ", ".join(str(name) for name in named) or "none"
        raise ChatTemplateError(
            f"{path}: chat_template lists templates ({names}) but none named {DEFAULT_TEMPLATE!r}"
        )
    raise ChatTemplateError(f"{path}: chat_template must be a string or a list of templates")


def _special_tokens(config: dict[str, object]) -> dict[str, object]:
    """The config's special tokens as a template sees them: each a string (the config may
    hold ``{"content": ...}``), a list for ``additional_special_tokens``; unset ones left
    out, so that a template reads them as undefined, as under transformers."""
    tokens: dict[str, Any] = {}
    for name in SPECIAL_TOKENS:
        value = config.get(name)
        if isinstance(value, list):
            texts = [_token_text(item) for item in value]
            tokens[name] = [text for text in texts if text is not None]
        elif (text := _token_text(value)) is not None:
            tokens[name] = text
    return tokens


def _token_text(value: object) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def compile_template(text: str, source: str = "chat template") -> Template:
    """``text`` compiled in the sandbox (once per text); ``ChatTemplateError`` when it
    does not compile."""
    try:
        return _compiled(text)
    except Exception as error:  # noqa: BLE001 - jinja2's syntax errors and its own kinds
        reason = _reason(error)
        raise ChatTemplateError(f"chat template {source} does not compile: {reason}") from None


@lru_cache(maxsize=8)
def _compiled(text: str) -> Template:
    return _environment().from_string(text)


@lru_cache(maxsize=1)
def _environment() -> ImmutableSandboxedEnvironment:
    """transformers' environment: the sandbox, ``raise_exception``, a ``tojson`` that
    escapes no HTML, ``strftime_now``, loop controls, the ``generation`` tag, and a
    ``dict`` and a ``namespace`` that give a template nothing more than their values."""
    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols]
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    environment.globals["namespace"] = _TemplateNamespace
    environment.globals["dict"] = _TemplateDict()
    return environment


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _tojson(
    value: object,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _Generation(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` (templates that mark the assistant's
    tokens for training): its body as it is, as transformers renders it untracked."""

    tags = {"generation"}

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return str(caller())


def _checked_name(name: object) -> None:
    if isinstance(name, str) and name.startswith("_"):
        raise SecurityError(f"a template's namespace cannot hold {name!r}")


class _TemplateNamespace(Namespace):
    """jinja2's ``namespace`` refusing underscore names, as transformers' does: a template
    must not reach interpreter internals through one."""

    def __init__(*args: object, **kwargs: object) -> None:
        self, rest = args[0], args[1:]
        attributes = dict(*rest, **kwargs)
        for name in attributes:
            _checked_name(name)
        Namespace.__init__(self, attributes)

    def __setitem__(self, name: str, value: object) -> None:
        _checked_name(name)
        Namespace.__setitem__(self, name, value)


class _TemplateDict:
    """``dict(...)`` and ``dict.fromkeys(...)`` for a template, and no type to poke at."""

    def __call__(self, *args: Any, **kwargs: object) -> dict[object, object]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: object) -> dict[object, object]:
        return dict.fromkeys(*args, **kwargs)


def _reason(error: Exception) -> str:
    """An error as one line: its kind, its message and, from jinja2, the line it names."""
    line = getattr(error, "lineno", None)
    where = f" (template line {line})" if line else ""
    return f"{type(error).__name__}: {str(error)[:300]}{where}"
