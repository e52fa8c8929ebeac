"""Is a terminal pane's input line empty? Looked at before relay types a trigger into it.

A trigger typed into a line that holds someone's unsent text would be appended to it, and
its Enter would submit both as one prompt. So relay reads the line the cursor is on
(`tmux capture-pane -e`, one row, with its colours) and types only when that line is an
empty prompt; otherwise the trigger waits (relayd retries it, see relayd.arrival.notify).

The line is split at the cursor:
* left of the cursor must be nothing but a prompt: after dropping box-drawing borders and
  blanks it fully matches `notify.prompt` (config.json). The default knows the agent
  programs' markers (`❯` Claude Code, `›` Codex, `>` Gemini CLI, `>>>`) and a shell prompt
  ending in `$`, `#` or `%` with no blank in it (`me@host:~/src$`).
* at and right of the cursor may stand only borders, blanks and *placeholder* text, which
  programs draw faint or in a colour (Codex's dim "Ask Codex to do anything", Gemini's grey
  "Type your message"); typed text is drawn in the terminal's default colour.

Each program's marker and the fixed lines of its questions are its own module's
(relayd.programs; `Screen.prompt`, `Screen.questions`).

Before anything is typed the program's prompt must be drawn (`prompt_drawn`): left of the
cursor stands a prompt marker or the border of an input box, not an empty row. A program
still starting up takes keys before it draws its input box and shows them later, where
they look like someone's draft. Relay's own trigger left in the input line that way (or
by an Enter the program did not take) is recognised (`holds_trigger`) and only that is
cleared.

No I/O here: `holds_draft(captured_row, cursor_x, prompt)` is tested with plain strings.
"""

from __future__ import annotations

import re
import unicodedata

from relayd.programs.registry import PROGRAMS

# `>` first for Python's `>>>` too, `»` for other REPLs: around the programs' own markers.
_MARKERS = "".join(dict.fromkeys([">", *(p.screen.prompt for p in PROGRAMS.values() if p.screen.prompt), "»"]))
DEFAULT_PROMPT = rf"(?:[{_MARKERS}]+|\S*[$#%])"

_SGR = re.compile(r"\x1b\[([0-9;:]*)m")
_OTHER_ESCAPE = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_BORDER = {chr(c) for c in range(0x2500, 0x25A0)} | {"|"}


def _blank(ch: str) -> bool:
    return ch.isspace() or ch in _BORDER


def bare(text: str) -> str:
    """`text` without blanks and box-drawing borders: what a program's input box holds."""
    return "".join(ch for ch in text if not _blank(ch))


def _cells(row: str) -> list[tuple[str, bool]]:
    """(character, typed-looking) for each screen cell of one captured row: a wide
    character fills two cells; typed-looking means default foreground and not faint."""
    cells: list[tuple[str, bool]] = []
    faint = coloured = False
    pos = 0
    while pos < len(row):
        ch = row[pos]
        if ch == "\x1b":
            sgr = _SGR.match(row, pos)
            if sgr:
                faint, coloured = _apply_sgr(sgr.group(1), faint, coloured)
                pos = sgr.end()
                continue
            other = _OTHER_ESCAPE.match(row, pos)
            pos = other.end() if other else pos + 1
            continue
        pos += 1
        if unicodedata.combining(ch):
            continue
        typed = not (faint or coloured)
        cells.append((ch, typed))
        if unicodedata.east_asian_width(ch) in ("W", "F"):
            cells.append(("", typed))
    return cells


def _apply_sgr(params: str, faint: bool, coloured: bool) -> tuple[bool, bool]:
    codes = [int(p) if p.isdigit() else 0 for p in re.split(r"[;:]", params)] if params else [0]
    i = 0
    while i < len(codes):
        code = codes[i]
        if code == 0:
            faint = coloured = False
        elif code == 2:
            faint = True
        elif code == 22:
            faint = False
        elif code == 39:
            coloured = False
        elif 30 <= code <= 37 or 90 <= code <= 97:
            coloured = True
        elif code == 38:
            coloured = True
            i += 2 if codes[i + 1 : i + 2] == [5] else 4  # 38;5;N or 38;2;R;G;B
        elif code == 48:
            i += 2 if codes[i + 1 : i + 2] == [5] else 4  # a background colour: skip its arguments
        i += 1
    return faint, coloured


def _split(row: str, cursor_x: int) -> tuple[str, str]:
    """(left of the cursor without borders, typed-looking text from the cursor on)."""
    cells = _cells(row.rstrip("\n"))
    left = "".join(ch for ch, _ in cells[:cursor_x])
    right = "".join(ch for ch, typed in cells[cursor_x:] if typed and not _blank(ch))
    return left, right


def prompt_drawn(row: str, cursor_x: int, prompt: str = DEFAULT_PROMPT) -> bool:
    """The cursor row shows a program's prompt: a prompt marker (`prompt`) or an input
    box's border left of the cursor. An empty row is a screen still being drawn."""
    left, _ = _split(row, cursor_x)
    if any(ch in _BORDER for ch in left):
        return True
    before = left.strip()
    return bool(before) and re.fullmatch(prompt, before) is not None


def holds_trigger(row: str, cursor_x: int, trigger: str, prompt: str = DEFAULT_PROMPT) -> bool:
    """The cursor row's input holds exactly `trigger` (relay's own line, left there), after
    a prompt, with nothing typed after the cursor."""
    left, right = _split(row, cursor_x)
    wanted = bare(trigger)
    text = bare(left)
    if right or not wanted or not text.endswith(wanted):
        return False
    head = text[: len(text) - len(wanted)]
    return head == "" or re.fullmatch(prompt, head) is not None


def holds_draft(row: str, cursor_x: int, prompt: str = DEFAULT_PROMPT) -> bool:
    """True unless the pane's cursor row is an empty prompt.

    `row` is that row as `tmux capture-pane -p -e` prints it; `cursor_x` the cursor column.
    (What the draft says is never returned: it is someone's private text, not for logs.)
    """
    cells = _cells(row.rstrip("\n"))
    left = "".join(ch for ch, _ in cells[:cursor_x])
    right = "".join(ch for ch, typed in cells[cursor_x:] if typed)
    before = "".join(ch for ch in left if not _blank(ch) or ch == " ").strip()
    after = "".join(ch for ch in right if not _blank(ch))
    return bool(after) or (bool(before) and re.fullmatch(prompt, before) is None)


# A question on the screen: a numbered choice with the selection marker on it, as every
# agent program draws its permission, trust and review dialogs ("❯ 1. Yes", "● 1. Allow
# once", "› 1. Yes, proceed"), or one of their fixed question lines (each program's
# `Screen.questions`). Typed keys there pick an answer, so relay types nothing while one shows.
_CHOICE = re.compile(r"^[\s│┃|]*[❯›>●▶→*]\s*\d{1,2}[.)]\s+\S", re.MULTILINE)
_QUESTIONS = tuple(dict.fromkeys(phrase for p in PROGRAMS.values() for phrase in p.screen.questions))


def question_on_screen(screen: str) -> str | None:
    """What marks a question or menu on `screen` (the pane's visible rows, plain text), or
    None when none shows. The marker, never the screen's other text, goes into logs."""
    text = screen.replace("\xa0", " ")
    for phrase in _QUESTIONS:
        if phrase in text:
            return repr(phrase)
    found = _CHOICE.search(text)
    return f"a numbered choice {found.group(0).strip()[:12]!r}" if found else None
