"""HTML made harmless with nh3 (Rust's ammonia): for indexing (text only) and for display (a safe subset).

Documents come from people outside the platform's control. Before their text is indexed, every
script, style, event handler and embedded object goes, content and all; before any stored text is
shown as HTML (it normally is not: templates escape it), only a small set of formatting tags
without attributes may remain.
"""

from __future__ import annotations

import html

import nh3

# Elements dropped with everything inside them (nh3 keeps the text of other removed tags).
DROP_WITH_CONTENT = frozenset({"script", "style", "noscript", "template", "svg", "math", "iframe", "object", "embed", "canvas", "select", "textarea", "head"})
# What display keeps: structure and emphasis, no attributes except a link's target (rel is forced).
DISPLAY_TAGS = frozenset({"p", "br", "ul", "ol", "li", "strong", "em", "b", "i", "code", "pre", "blockquote", "h1", "h2", "h3", "h4", "h5", "h6",
                          "table", "thead", "tbody", "tr", "th", "td", "a"})
# Structure the document parser reads (headings, lists, tables, paragraphs), without attributes.
STRUCTURE_TAGS = DISPLAY_TAGS | frozenset({"html", "body", "div", "section", "article", "main", "aside", "header", "footer", "nav", "span", "hr",
                                           "dl", "dt", "dd", "figure", "figcaption", "address", "caption"})


def clean_structure(markup: str) -> str:
    """HTML with scripts, styles, handlers and embeds removed but its structure kept (what the parser walks next)."""
    return nh3.clean(markup, tags=set(STRUCTURE_TAGS), clean_content_tags=set(DROP_WITH_CONTENT), attributes={}, link_rel=None, strip_comments=True)


def strip_tags(markup: str) -> str:
    """The text of an HTML fragment: every tag removed, scripts and styles with their content, entities decoded."""
    return html.unescape(nh3.clean(markup, tags=set(), clean_content_tags=set(DROP_WITH_CONTENT), attributes={}, strip_comments=True))


def clean_for_display(markup: str) -> str:
    """A safe subset of HTML for showing rich text: formatting tags only, links with http(s) targets and rel=noopener."""
    return nh3.clean(markup, tags=set(DISPLAY_TAGS), clean_content_tags=set(DROP_WITH_CONTENT), attributes={"a": {"href"}},
                     url_schemes={"http", "https", "mailto"}, link_rel="noopener noreferrer nofollow", strip_comments=True)
