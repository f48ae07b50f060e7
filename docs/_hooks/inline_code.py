"""MkDocs hook (`hooks:` in mkdocs.yml): inline code breaks only at its spaces, never at a hyphen.

A browser breaks `--dataset_name` after `--` and `1e-3` after `1e-`. This hook marks each short word of inline code
(`--dataset_name`, `1e-3`, `trl-ext`: up to `LONGEST` characters between spaces) with the class `md-token`, which
`docs/stylesheets/extra.css` keeps on one line: the span itself when it is one word, else a `<span>` per word inside
it, so `--eval_strategy steps` still wraps at its space. A longer word wraps as before, so no line overflows the page.
Code blocks (`<pre>`) and code with markup inside are left alone; the text, and so what a reader copies, is unchanged.
CSS alone cannot do it: `white-space: nowrap` on every span overflows with the long ones, and `display: inline-block`
lets the punctuation after a span start the next line."""

from __future__ import annotations

import re

LONGEST = 40
"""The longest word kept whole, in characters of its HTML (`&lt;` counts four)."""

PRE = re.compile(r"<pre\b.*?</pre>", re.DOTALL)
CODE = re.compile(r"<code>([^<]+)</code>")
WORD = re.compile(r"\S+")


def _mark(match: re.Match) -> str:
    text = match[1]
    if WORD.fullmatch(text):
        return f'<code class="md-token">{text}</code>' if len(text) <= LONGEST else match[0]
    words = WORD.sub(lambda w: f'<span class="md-token">{w[0]}</span>' if len(w[0]) <= LONGEST else w[0], text)
    return f"<code>{words}</code>"


def mark_tokens(html: str) -> str:
    """`html` with the words of its inline code marked `md-token` (outside `<pre>` blocks)."""
    out, last = [], 0
    for block in PRE.finditer(html):
        out += [CODE.sub(_mark, html[last : block.start()]), block[0]]
        last = block.end()
    return "".join(out) + CODE.sub(_mark, html[last:])


def on_page_content(html: str, page, config, files) -> str:  # the MkDocs hook
    return mark_tokens(html)
