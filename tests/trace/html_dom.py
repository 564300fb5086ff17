"""A small DOM for the report pages' tests (stdlib ``html.parser``): every element with its
attributes, text and enclosing ``<section>``, and whether the tags balance."""

from __future__ import annotations

from html.parser import HTMLParser

import attrs

VOID = frozenset({"meta", "br", "hr", "img", "input", "link", "wbr"})


@attrs.define
class Element:
    tag: str
    attrs: dict[str, str]
    section: int  # the index of the enclosing <section>, -1 outside any
    text: str = ""

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


class Dom(HTMLParser):
    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self.stack: list[Element] = []
        self.sections = -1
        self.sections_kind: list[str] = []  # each <section>'s data-kind
        self.in_section = -1
        self.unbalanced: list[str] = []
        self.feed(text)
        self.close()
        self.unbalanced += [e.tag for e in self.stack]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "section":
            self.sections += 1
            self.in_section = self.sections
            self.sections_kind.append(dict(attrs).get("data-kind") or "")
        e = Element(tag, {k: v or "" for k, v in attrs}, self.in_section)
        self.elements.append(e)
        if tag not in VOID:
            self.stack.append(e)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append(Element(tag, {k: v or "" for k, v in attrs}, self.in_section))

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1].tag != tag:
            self.unbalanced.append(f"/{tag}")
            return
        self.stack.pop()
        if tag == "section":
            self.in_section = -1

    def handle_data(self, data: str) -> None:
        for e in self.stack:
            e.text += data

    def having(self, cls: str, section: int | None = None) -> list[Element]:
        return [e for e in self.elements if cls in e.classes
                and (section is None or e.section == section)]

    def by_id(self, ident: str) -> Element | None:
        return next((e for e in self.elements if e.attrs.get("id") == ident), None)
