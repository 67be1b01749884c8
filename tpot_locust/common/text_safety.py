"""User text made safe for where it goes: a terminal, an XML or HTML file, a folder name.

Scenario names, class names and servers' error messages are data, not markup: an escape
sequence in one must not recolour or rewrite the terminal, a control character must not make
``junit.xml`` unreadable (XML 1.0 forbids most C0 characters even as references), and a name
like ``../../x`` must not choose where results are written.
"""

from __future__ import annotations

import re
import unicodedata

# ESC sequences: CSI (ESC [ ... final), OSC (ESC ] ... BEL or ST), and two-byte ESC x;
# the 8-bit CSI (0x9b) too.
_ESCAPE_SEQUENCE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?|\x9b[0-?]*[ -/]*[@-~]?"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -~]?"
)
# C0 and C1 controls, DEL, bidirectional overrides and isolates (they reorder what follows
# on screen), and lone surrogates (unprintable: print() raises on them).
_UNSAFE_TERMINAL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
# What XML 1.0 does not allow anywhere (tab, newline and carriage return it does).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_NOT_SLUG = re.compile(r"[^A-Za-z0-9._-]+")
SLUG_MAX_LENGTH = 64
SLUG_FALLBACK = "run"


def _escaped(match: re.Match[str]) -> str:
    """A character as a visible escape (``\\x1b``, ``\\u202e``): the reader sees it was there."""
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` for a terminal line: escape sequences dropped, every other control
    character (newlines too: one value, one line) shown as an escape."""
    return _UNSAFE_TERMINAL.sub(_escaped, _ESCAPE_SEQUENCE.sub("", str(text)))


def xml_text(text: object) -> str:
    """``text`` with the characters XML 1.0 forbids (even escaped) shown as escapes; the
    XML writer still escapes ``<``, ``&`` and quotes."""
    return _NOT_XML.sub(_escaped, str(text))


def safe_slug(name: str, max_length: int = SLUG_MAX_LENGTH) -> str:
    """A folder name from a user's name: ASCII letters, digits and ``-_.``, no leading dot
    or dash, at most ``max_length`` characters, never empty (``run``)."""
    ascii_text = unicodedata.normalize("NFKD", str(name)).encode("ascii", "ignore").decode()
    slug = _NOT_SLUG.sub("-", ascii_text).lstrip(".-")[:max_length].rstrip(".-")
    return slug or SLUG_FALLBACK
