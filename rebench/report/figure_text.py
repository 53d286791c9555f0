"""Text on a figure, shown as written: an attempt's agent and environment names reach the plots'
titles, legends and labels, and matplotlib reads `$...$` in them as mathtext (an agent named
`$\\frac{$` stopped the whole report with a parse error) and warns on stderr with the raw control
characters of a glyph it lacks. Every text artist goes through rebench.literal and parses no math."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.text import Text

from rebench.literal import literal


def literal_figure(figure: Figure) -> Figure:
    """Escape control characters in every text of `figure` and turn mathtext off; call it before a
    layout pass or a save, after the last label was set."""
    for text in figure.findobj(Text):
        text.set_text(literal(text.get_text()))
        text.set_parse_math(False)
    return figure
