"""Reading a pane's cursor row: an empty prompt, or someone's unsent text (relayd.arrival.paneinput).

The Claude Code rows are what `tmux capture-pane -p -e` printed for Claude Code 2.1.332's
input box; the real programs in real tmux are in test_notify.py and test_pane_draft_claude.py.
"""

from __future__ import annotations

import pytest

from relayd.arrival.paneinput import DEFAULT_PROMPT, holds_draft

CLAUDE_EMPTY = "❯\xa0\x1b[7m \x1b[0m\x1b[39m\x1b[49m\n"
CLAUDE_DRAFT = "\x1b[39m❯\xa0my half-typed draft\x1b[7m \x1b[0m\n"
CLAUDE_CURSOR_INSIDE = "❯\xa0my half-typed dr\x1b[7ma\x1b[0m\x1b[39m\x1b[49mft\n"
CLAUDE_CURSOR_AT_START = "❯\xa0\x1b[7ma\x1b[0m\x1b[39m\x1b[49mft\n"


@pytest.mark.parametrize(
    ("row", "cursor_x", "draft"),
    [
        (CLAUDE_EMPTY, 2, False),
        (CLAUDE_DRAFT, 21, True),
        (CLAUDE_CURSOR_INSIDE, 18, True),  # the person moved the cursor back into their text
        (CLAUDE_CURSOR_AT_START, 2, True),  # all the text is right of the cursor
        ("", 0, False),  # a fresh line (a program reading stdin without a prompt)
        ("> ", 2, False),
        (">>> ", 4, False),
        ("me@host:~/src$ ", 15, False),
        ("me@host:~/src$ git sta", 22, True),
        ("root@box:/# ", 12, False),
        ("› \x1b[2mAsk Codex to do anything\x1b[22m", 2, False),  # a faint placeholder
        ("│ > \x1b[38;2;108;112;134mType your message or @path/to/file\x1b[39m   │", 4, False),  # grey placeholder, boxed
        ("│ > fix the login bug                     │", 21, True),
        ("│ > fix the login bug                     │", 4, True),
        ("\x1b[1m\x1b[32mme@host\x1b[0m:\x1b[34m~\x1b[0m$ ", 10, False),  # a coloured shell prompt
        ("> 日本語", 8, True),  # wide characters fill two cells each
        ("> 日本語", 2, True),
        ("a stray line of output", 0, True),  # typed-looking text on the cursor's row
    ],
)
def test_the_cursor_row_is_an_empty_prompt_or_a_draft(row: str, cursor_x: int, draft: bool) -> None:
    assert holds_draft(row, cursor_x) is draft


def test_a_prompt_of_ones_own_is_recognised_with_notify_prompt() -> None:
    row = "➜  src git:(main) "
    assert holds_draft(row, len(row))
    assert not holds_draft(row, len(row), DEFAULT_PROMPT + r"|➜ .*\)")
    assert holds_draft(row + "make", len(row) + 4, DEFAULT_PROMPT + r"|➜ .*\)")


def test_claude_codes_held_message_dialog_is_a_question() -> None:
    """Claude Code 2.1.332 asks the person about a peer message it holds, Deny preselected
    (its title, as the dialog draws it): a trigger's Enter there would deny the message."""
    from relayd.arrival.paneinput import question_on_screen

    screen = "╭─ Held message from another session ──────╮\n│ Deliver it to Claude?                    │\n╰──────────────────────────────────────────╯\n"
    assert question_on_screen(screen) == repr("Held message from another session")
