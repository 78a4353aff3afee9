"""The one rule every message is laid out by, and the console that applies it: the
command's consoles (cli/console.py) and the compile path's notices (routing/tuning.py) print
through `message_console`, so a line reads the same whoever prints it.

Every line of text a console prints (a note, an error, a progress line, a summary, the
estimate under a table) is a message, laid out by `message_lines`: MessageConsole's `print`
applies it to whatever text it is given. Tables and other renderables draw themselves; text
printed with soft_wrap=True (JSON, a path, the help) is printed as it is.

Imports rich only.
"""

from __future__ import annotations

import os
import re
import sys

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text


def _width(stream) -> int | None:
    """The width to draw at: COLUMNS where it is a positive number; else a terminal's own
    (None: rich asks it as it draws); else 80. COLUMNS=0, as some CI runners and shells set
    it, is no width: rich would read it and draw at 0 columns, which prints nothing at all,
    errors and --json included."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if stream is None or not stream.isatty():
        return 80
    if not columns.isdigit():  # unset or not a number: rich leaves it alone
        return None
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (OSError, ValueError, AttributeError):
        return 80


# A line that starts so is the command's last word (an error, an interruption, why it
# failed): never broken, so that grep or a script reading stderr gets it whole, as one line.
ONE_LINE = "autotune: "
# The label a message starts with ("note: ", "cached: "): its continuation lines are
# indented under the text after it; a line without one continues two columns in.
_LABEL = re.compile(r"[a-z]+: ")
_WORD = re.compile(r"[^ ]+")
# a number stays with the words beside it ("tuned 0.0939 ms", "9 candidates"): never a break there
_NUMBER = re.compile(r"[(\[]?[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def message_lines(text: "str | Text", width: int) -> Text:
    """`text` laid out at `width` columns: each of its lines broken at spaces (never inside a
    word, an aside in brackets or beside a number, unless that alone is wider than a line),
    each line after the first indented under the text after the message's label, no line
    ending in a space. A line that starts with ONE_LINE is left whole. A word wider than the
    line (a path) is kept whole on a line of its own: the terminal folds it."""
    text = Text(text) if isinstance(text, str) else text
    lines = [line for part in text.split("\n", allow_blank=True) for line in _wrap(part, max(width, 20))]
    return Text("\n").join(lines)


def _wrap(line: Text, width: int) -> list[Text]:
    plain = line.plain.rstrip()
    line = line[:len(plain)]
    if plain.startswith(ONE_LINE) or cell_len(plain) <= width:
        return [line]
    lead = len(plain) - len(plain.lstrip(" "))
    label = _LABEL.match(plain, lead)
    indent = min(lead + (len(label.group()) if label else 2), width // 2)
    units = _units(plain, lead + (len(label.group()) if label else 0), width - indent)
    rows: list[list[tuple[int, int]]] = [[units[0]]]
    used = cell_len(plain[:units[0][1]])
    for start, end in units[1:]:
        gap = cell_len(plain[rows[-1][-1][1]:start])
        size = cell_len(plain[start:end])
        if used + gap + size <= width:
            rows[-1].append((start, end))
            used += gap + size
        else:
            rows.append([(start, end)])
            used = indent + size
    first, *rest = rows
    return [line[:first[-1][1]]] + [Text(" " * indent) + line[row[0][0]:row[-1][1]] for row in rest]


def _units(plain: str, text_start: int, room: int) -> list[tuple[int, int]]:
    """(start, end) of each run of text a line may not break inside, from the label's first
    word to the end: words joined where a bracket is open or beside a number, the label to
    the word after it; a run wider than `room` falls back to its words."""
    words = [(m.start(), m.end()) for m in _WORD.finditer(plain)]
    units: list[list[tuple[int, int]]] = []
    depth, glue = 0, False
    for start, end in words:
        word = plain[start:end]
        number = bool(_NUMBER.fullmatch(word))
        if units and (depth > 0 or glue or number):
            units[-1].append((start, end))
        else:
            units.append([(start, end)])
        depth = max(0, depth + word.count("(") + word.count("[") - word.count(")") - word.count("]"))
        glue = number or end <= text_start
    spans: list[tuple[int, int]] = []
    for unit in units:
        if len(unit) > 1 and cell_len(plain[unit[0][0]:unit[-1][1]]) > room:
            label = [word for word in unit[:-1] if word[1] <= text_start]  # with the next word still
            spans += [(unit[0][0], unit[len(label)][1])] + unit[len(label) + 1:]
        else:
            spans.append((unit[0][0], unit[-1][1]))
    return spans


class MessageConsole(Console):
    """A rich Console whose `print` lays out text (str or Text, not soft_wrap=True) by
    `message_lines` at the console's width; anything else is rich's."""

    def print(self, *objects, sep: str = " ", soft_wrap: bool | None = None, markup: bool | None = None,
              highlight: bool | None = None, emoji: bool | None = None, **options) -> None:
        if soft_wrap or not objects or not all(isinstance(o, (str, Text)) for o in objects):
            super().print(*objects, sep=sep, soft_wrap=soft_wrap, markup=markup, highlight=highlight,
                          emoji=emoji, **options)
            return
        text = Text(sep).join(o if isinstance(o, Text) else
                              self.render_str(o, markup=markup, highlight=highlight, emoji=emoji)
                              for o in objects)
        super().print(message_lines(text, self.width), soft_wrap=True, **options)


def message_console(stderr: bool, quiet: bool = False) -> MessageConsole:
    """A console on stdout or stderr. Without a terminal (a pipe, a file), it draws 80
    columns, as a terminal of the usual width shows: what a script or a log keeps reads the
    same. COLUMNS overrides both (`_width`; 0 is no width). Text is laid out by
    `message_lines` (see the module)."""
    stream = sys.stderr if stderr else sys.stdout
    return MessageConsole(stderr=stderr, highlight=False, width=_width(stream), quiet=quiet)
