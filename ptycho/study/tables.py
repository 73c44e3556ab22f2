"""Tables of the study: built once as ``(title, header, rows)`` of strings, rendered as
text (the console), Markdown or HTML (the report). Builders live with what they show
(a checklist item, the bench); this module only formats cells and renders."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

#: A table: (title, may be empty; header; rows of cells, all strings).
Table = tuple[str, list[str], list[list[str]]]


def fmt(value: Any) -> str:
    """One cell: 4 significant digits, ``n/a`` for NaN or None, yes/no for booleans."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:
            return "n/a"
        return f"{value:.4g}"
    return "n/a" if value is None else str(value)


def to_text(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, for a terminal."""
    widths = (
        [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)] if rows else list(map(len, header))
    )
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def to_markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def to_html(header: Sequence[str], rows: Sequence[Sequence[str]], status_col: int | None = None) -> str:
    """A table; cells of ``status_col`` reading PASS, FAIL or INCONCLUSIVE get that class (coloured by the page's CSS)."""
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = []
    for r in rows:
        cells = []
        for i, c in enumerate(r):
            cls = f' class="{c.lower()}"' if i == status_col and c in ("PASS", "FAIL", "INCONCLUSIVE") else ""
            cells.append(f"<td{cls}>{esc(c)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
