"""What counts as a secret, and how it is kept out of everything the tool shows or saves.

One home for it, so that the wire (a server echoing a key), the saved scenario, the
summary's run info and the console all redact the same things the same way:

- ``is_secret_name``: a header, body or scenario key whose value is a credential (names
  with key, token, auth, secret, credential, password, cookie, signature, session in
  them), but not the scenario's counts and settings that merely contain such a word
  (``max_tokens``, ``tokenizer``, ``first_token``, ``api_key_env``...);
- ``redact_url``: a URL without its userinfo password (``http://user:[redacted]@host``)
  and without the values of secret-named query parameters (``?api_key=[redacted]``);
- ``redact_mapping``: a document (scenario, run info) with those values replaced, a
  secret-named block (``auth: {bearer: ...}``) replaced whole;
- ``redact_text``: free text (a server's error message) without given secret values,
  credentials in URLs, ``Bearer`` tokens or values shaped like a known credential
  (``sk-...``, ``hf_...``: ``redact_shapes``), under whatever key they stand.

Nothing here raises on odd input: a redaction that fails would lose the message it guards.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from typing import overload
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 4  # shorter values would redact ordinary words of a message
MIN_CUT_CHARS = 2  # the shortest start of a secret, at a message's end, taken for one

# Whole words (after splitting on separators and camelCase) that name a credential.
_SECRET_WORDS = frozenset(
    {
        "key",
        "keys",
        "apikey",
        "token",
        "secret",
        "secrets",
        "password",
        "passwd",
        "pwd",
        "pass",
        "passphrase",
        "cookie",
        "cookies",
        "signature",
        "sig",
        "session",
        "sessionid",
        "credential",
        "credentials",
        "cred",
        "creds",
        "auth",
        "authorization",
        "bearer",
        "jwt",
        "csrf",
        "xsrf",
    }
)
# Parts of a joined word that name one (``xapikey``, ``clientsecret``, ``accesstoken``).
_SECRET_PARTS = ("apikey", "secret", "passw", "credential", "cookie", "signature", "auth")
_SECRET_SUFFIXES = ("token", "key", "creds", "session", "sessionid")
# Names that contain such a word but hold no secret: token counts and timeouts of the
# scenario schema, and settings that name where a secret is (an environment variable).
_NOT_SECRET_NAMES = frozenset({"api_key_env", "first_token", "first_token_timeout"})
_NOT_SECRET_LAST_WORDS = frozenset({"env", "tokens", "tokenizer", "timeout"})

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#@\s]*)@")
# A credential after an Authorization scheme: 8+ token characters, a digit among them (so
# that "Bearer authentication required" stays readable).
_AUTH_SCHEME = re.compile(r"\b(?P<scheme>Bearer|Basic)\s+(?=[\w.~+/=-]*\d)[\w.~+/=-]{8,}")


# Values shaped like a known credential, redacted wherever they stand (a key pasted into
# ``extra_body.user`` appeared in the console, report.html and scenario.yaml): OpenAI's and
# Anthropic's ``sk-``, Hugging Face's ``hf_``, GitHub's, AWS access key ids, Google API
# keys, Slack tokens and JWTs.
_SECRET_SHAPES = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{8,}|hf_[A-Za-z0-9]{8,}|gh[pousr]_[A-Za-z0-9]{16,}"
    r"|github_pat_[A-Za-z0-9_]{16,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"
)


def _words(name: str) -> list[str]:
    return [word for word in _WORD_SPLIT.split(_CAMEL.sub("_", name).lower()) if word]


def is_secret_name(name: object) -> bool:
    """Whether a value stored under ``name`` (a header, a body or scenario key, a query
    parameter) is a credential."""
    if not isinstance(name, str) or not name:
        return False
    words = _words(name)
    if not words or "_".join(words) in _NOT_SECRET_NAMES or words[-1] in _NOT_SECRET_LAST_WORDS:
        return False
    for word in words:
        if word in _SECRET_WORDS or any(part in word for part in _SECRET_PARTS):
            return True
        if word.endswith(_SECRET_SUFFIXES) and not word.endswith(("monkey", "turkey")):
            return True
    return False


@overload
def redact_url(url: str) -> str: ...
@overload
def redact_url(url: None) -> None: ...


def redact_url(url: str | None) -> str | None:
    """``url`` with the password of its userinfo (a lone user name too: it may be a token)
    and the values of secret-named query parameters replaced by ``[redacted]``; anything
    else, the rest of the URL included, unchanged (None too: a run without a host)."""
    if not isinstance(url, str) or ("@" not in url and "?" not in url):
        return url
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unclosed IPv6 bracket: redact by pattern alone
        return _URL_USERINFO.sub(_redacted_userinfo, url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        netloc = _redacted_userinfo_text(userinfo) + "@" + hostport
    query = _redacted_query(parts.query)
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _redacted_userinfo_text(userinfo: str) -> str:
    user, colon, _ = userinfo.partition(":")
    return f"{user}:{REDACTED}" if colon else REDACTED


def _redacted_userinfo(match: re.Match[str]) -> str:
    return match["scheme"] + _redacted_userinfo_text(match["userinfo"]) + "@"


def _redacted_query(query: str) -> str:
    if not query:
        return query
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(is_secret_name(name) for name, _ in pairs):
        return query
    return urlencode(
        [(name, REDACTED if is_secret_name(name) else value) for name, value in pairs], safe="[]"
    )


def redact_mapping(value: object) -> object:
    """A copy of a document (mappings, lists, scalars) with the value of every
    secret-named key replaced whole (a block too), URLs redacted and ``Bearer`` tokens
    removed from strings; for documents that are saved or shown."""
    if isinstance(value, Mapping):
        return {key: _redacted_entry(key, item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact_mapping(item) for item in value]
    if isinstance(value, str):
        return _redacted_string(value)
    return value


def _redacted_entry(key: object, item: object) -> object:
    if is_secret_name(key) and item is not None and not isinstance(item, bool):
        return REDACTED
    return redact_mapping(item)


def _redacted_string(text: str) -> str:
    if "://" in text and not any(space in text for space in " \t\r\n"):
        return redact_shapes(redact_url(text))  # its userinfo, secret query parameters
    return redact_text(text)


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without any of ``secrets`` (values of at least four characters), the
    credentials of URLs in it, or ``Bearer``/``Basic`` credentials."""
    for secret in sorted(
        {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True
    ):
        if secret in text:
            text = text.replace(secret, REDACTED)
    if "@" in text and "://" in text:
        text = _URL_USERINFO.sub(_redacted_userinfo, text)
    if "Bearer" in text or "Basic" in text:
        text = _AUTH_SCHEME.sub(lambda m: f"{m['scheme']} {REDACTED}", text)
    text = redact_shapes(text)
    return _without_cut_secret(text, secrets)


def redact_shapes(text: str) -> str:
    """``text`` without values shaped like a known credential (``_SECRET_SHAPES``)."""
    return _SECRET_SHAPES.sub(REDACTED, text)


def _without_cut_secret(text: str, secrets: Iterable[str]) -> str:
    """``text`` without the start of a secret it ends in: a server's message cut to a
    length before it reached us can end in the first characters of an echoed key."""
    for secret in secrets:
        if not secret or len(secret) < MIN_SECRET_CHARS:
            continue
        for length in range(len(secret) - 1, MIN_CUT_CHARS - 1, -1):
            if text.endswith(secret[:length]):
                return text[:-length] + REDACTED
    return text


def header_secrets(headers: Mapping[str, str]) -> list[str]:
    """The secret values a request's headers carry: every secret-named header's value, the
    credential after an ``Authorization`` scheme, and a ``Basic`` pair's password."""
    secrets: list[str] = []
    for name, value in headers.items():
        if not value or not is_secret_name(name):
            continue
        secrets.append(value)
        scheme, _, credential = value.strip().partition(" ")
        if credential and scheme.lower() in ("bearer", "basic", "token"):
            secrets.append(credential.strip())
        if scheme.lower() == "basic":
            secrets.extend(_basic_parts(credential.strip()))
    return secrets


def _basic_parts(credential: str) -> list[str]:
    """``user:password`` of a Basic credential, and the password (a server may echo the
    decoded form)."""
    try:
        decoded = base64.b64decode(credential, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return []
    _, colon, password = decoded.partition(":")
    return [decoded, password] if colon else [decoded]
