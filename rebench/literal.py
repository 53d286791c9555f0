"""Text from an attempt, shown as text: one place decides how agent bytes reach a terminal or a page.

An agent writes its tool calls, their output, its model's words, its notes and submission, and
(through the environment it ran) even names the store keeps; a file the harness did not write
(a foreign database, a snapshot) is no better. None of it may steer the operator's terminal or
report: no Rich markup is read in it (an unbalanced `[/x]` must not crash a command, a `[link=…]`
must not become a hyperlink), and no control character reaches the terminal (escape sequences,
OSC 8 links, C1 codes, bidi overrides that reorder what the operator reads). `literal` turns each
such character into a visible escape (`\\x1b`, `\\u202e`), so the text stays readable and the
attack stays visible; `LiteralConsole` is the console every command prints through, so a caller
cannot forget; `markdown_literal` does the same for Markdown files. `--json` output does not come
here: it keeps the stored bytes exactly (JSON escapes control characters itself).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, JustifyMethod, OverflowMethod, RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
"""Characters that reorder the text around them on screen (Trojan Source, CVE-2021-42574)."""
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029" + _BIDI + "]")
"""The control characters (Unicode's Cc: C0 but tab and newline, DEL, C1), the line and paragraph
separators, and the bidi marks and overrides."""


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def literal(value: object) -> str:
    """`value` as a string whose every character prints as itself: control characters (all C0 but
    newline and tab, DEL, C1) and bidi or line-separator marks become visible escapes."""
    return _UNSAFE.sub(_escape, value if isinstance(value, str) else str(value))


def literal_text(value: object, style: str | Style = "") -> Text:
    """A rich Text of `value` shown literally (no markup read), in `style`."""
    return Text(literal(value), style=style)


_MARKDOWN = re.compile(r"([\\`*_\[\]<>!|~&:$])")
"""What Markdown (CommonMark with GitHub's tables, autolinks and `$` math) reads as syntax inside a line."""


def markdown_literal(value: object, *, cell: bool = True) -> str:
    """`value` for a Markdown file: control characters escaped as `literal` does, every character
    Markdown could read as syntax (links, images, HTML, emphasis, code, table pipes, math) backslash-escaped,
    and, in a table `cell`, line breaks as spaces (a newline would end the row)."""
    text = _MARKDOWN.sub(r"\\\1", literal(value))
    return " ".join(text.split()) if cell else text


def html_literal(value: object) -> str:
    """`value` for an HTML page: control characters escaped as `literal` does, then HTML-escaped
    (quotes too, so it is safe in an attribute)."""
    return html.escape(literal(value), quote=True)


def _without_link(style: Style | None) -> Style | None:
    if style is None or not style.link:
        return style
    return style.update_link(None)


class LiteralConsole(Console):
    """A rich Console that never reads markup, emoji codes or highlighting into a string it prints,
    and escapes control characters in every string and Text, whoever built it.

    The program's own styling goes in as Text (`Text.assemble(("error:", "bold red"), " ", message)`)
    or as Style arguments, never as markup in a string. The final pass over what is rendered is a
    guard for a Text built elsewhere from agent bytes: it escapes what is left and drops hyperlinks;
    rich's own cursor moves (a live view's control segments) pass untouched.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("markup", False)
        kwargs.setdefault("emoji", False)
        kwargs.setdefault("highlight", False)
        super().__init__(*args, **kwargs)

    def render_str(self, text: str, *, style: str | Style = "", justify: JustifyMethod | None = None,
                   overflow: OverflowMethod | None = None, emoji: bool | None = None,
                   markup: bool | None = None, highlight: bool | None = None,
                   highlighter: Any = None) -> Text:
        """The string as plain Text: `markup`, `emoji` and `highlight` are accepted and ignored, so
        no call site can turn interpretation back on for a string that came from an attempt."""
        return Text(literal(text), style=style, justify=justify, overflow=overflow)

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control:
                yield segment
            else:
                text = segment.text
                yield Segment(literal(text) if _UNSAFE.search(text) else text, _without_link(segment.style))
