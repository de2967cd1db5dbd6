"""Hydra's override-grammar errors in words: which override, which character, and how to quote.

Hydra's lexer takes only printable ASCII in an unquoted value. Anything else (``é``, a newline,
a byte of a latin-1 file name, which Python hands on as a lone surrogate) stops it with
``LexerNoViableAltException: <override>`` and a caret on the next line, which names neither the
character nor the fix. Inside quotes the grammar takes any character: ``'key="value"'`` (the
shell's quotes around Hydra's).
"""

from __future__ import annotations

import unicodedata

LEXER_ERROR = "LexerNoViableAltException"


def lexer_error_message(err: BaseException, overrides: list[str]) -> str | None:
    """One line for Hydra's lexer error ``err`` about one of ``overrides``: the override (its
    unprintable characters escaped), the first character the lexer cannot take unquoted, and
    the quoted form to type instead; None for any other error."""
    if LEXER_ERROR not in str(err):
        return None
    override = _failing_override(overrides)
    if override is None:
        return None
    key, _, value = override.partition("=")
    character = next((c for c in override if not _plain(c)), None)
    if character is not None and character in key:  # quotes do not help a key
        shown, described = _shown(override), _described(character)
        return f"{shown}: a key is ASCII (letters, digits, _ and .), not {described}"
    what = f"takes {_described(character)} only" if character else "reads this value only"
    return (
        f"{_shown(override)}: Hydra's override grammar {what} inside quotes: quote the value, "
        f"e.g. {_quoted(key, _shown(value))}"
    )


def _failing_override(overrides: list[str]) -> str | None:
    """The first of ``overrides`` Hydra's parser rejects on its own."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_overrides([override])
        except HydraException:
            return override
    return None


def _plain(character: str) -> bool:
    """Printable ASCII: what the lexer takes unquoted (its own syntax errors aside)."""
    return " " <= character <= "~"


def _described(character: str) -> str:
    """``'é' (U+00E9 LATIN SMALL LETTER E WITH ACUTE)``, ``a newline (\\n)``, or for a byte that
    was not UTF-8 (a surrogate from ``os.fsdecode``) ``the byte 0xe9 (not UTF-8)``."""
    if "\udc80" <= character <= "\udcff":
        return f"the byte 0x{ord(character) - 0xDC00:02x} (not UTF-8)"
    if character == "\n":
        return "a newline (\\n)"
    name = unicodedata.name(character, "")
    shown = _shown(character)
    return f"{shown!r} (U+{ord(character):04X}{' ' + name if name else ''})"


def _shown(text: str) -> str:
    """``text`` on one line: control characters and undecodable bytes escaped, other
    characters (``é``) as they are."""
    out = []
    for character in text:
        if "\udc80" <= character <= "\udcff":
            out.append(f"\\x{ord(character) - 0xDC00:02x}")
        elif not character.isprintable():
            out.append(character.encode("unicode_escape").decode("ascii"))
        else:
            out.append(character)
    return "".join(out)


def _quoted(key: str, value: str) -> str:
    """``'key="value"'``: Hydra's quotes inside the shell's (the other kind where the value
    holds one)."""
    inner, outer = ('"', "'") if '"' not in value else ("'", '"')
    return f"{outer}{key}={inner}{value}{inner}{outer}"
