"""Text for the user: strings read from files others write, made safe to print, and
counted nouns.

A cache entry's key, uid, params or device name may hold anything JSON can: ESC, CR,
backspace, a right-to-left override. Printed raw, they move the cursor, rewrite the line
or recolour the terminal, so what `cache show` lists need not be what the file holds.
`printable` escapes every character that is not printable as repr does (\\x1b, \\r,
\\u202e); such text reaches rich as a `Text` or with markup off (a uid "[red]x" would
otherwise be drawn red, and "[/]" can raise).

Imports neither rich nor torch.
"""

from __future__ import annotations

from typing import Any


def printable(value: Any) -> str:
    """`value` as text, each non-printable character written as its escape."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def not_utf8(exc: UnicodeDecodeError) -> str:
    """A file that is not UTF-8 text, as every reader says it (a cache, an import, a --from
    list): where its first bad byte is, never Python's codec message."""
    return f"not UTF-8 text (byte {exc.start})"


def article(word: str) -> str:
    """`word` after "a" or "an" as it is spoken by its first letter: "an int", "a float"."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


def plural(count: int, one: str, many: str | None = None) -> str:
    """"1 candidate", "2 candidates", "0 candidates"; `many` where adding "s" is wrong
    ("entry", "entries")."""
    return f"{count} {one if count == 1 else (many or one + 's')}"
