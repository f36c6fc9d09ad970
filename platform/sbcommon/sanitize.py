"""HTML made harmless with nh3 (Rust's ammonia) before the document parser reads it.

Documents come from people outside the platform's control. Before their text is indexed, every
script, style, event handler and embedded object goes, content and all, and no attribute remains.
Stored text is never shown as HTML: templates escape it.
"""

from __future__ import annotations

import nh3

# Elements dropped with everything inside them (nh3 keeps the text of other removed tags).
DROP_WITH_CONTENT = frozenset({"script", "style", "noscript", "template", "svg", "math", "iframe", "object", "embed", "canvas", "select", "textarea", "head"})
# Structure the document parser reads (headings, lists, tables, paragraphs, emphasis), without attributes.
STRUCTURE_TAGS = frozenset({
    "p", "br", "ul", "ol", "li", "strong", "em", "b", "i", "code", "pre", "blockquote", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tr", "th", "td", "a", "html", "body", "div", "section", "article", "main", "aside", "header", "footer",
    "nav", "span", "hr", "dl", "dt", "dd", "figure", "figcaption", "address", "caption",
})


def clean_structure(markup: str) -> str:
    """HTML with scripts, styles, handlers and embeds removed but its structure kept (what the parser walks next)."""
    return nh3.clean(markup, tags=set(STRUCTURE_TAGS), clean_content_tags=set(DROP_WITH_CONTENT), attributes={}, link_rel=None, strip_comments=True)

