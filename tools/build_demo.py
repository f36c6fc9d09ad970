"""Rebuild the bundled demo (``demo/``) from the doc2dial files in ``../shared/datasets/doc2dial``.

The demo keeps, for each of the four agencies, the 15 documents with the most dialogue-opening
questions and every dialogue-opening question grounded in them (with doc2dial's gold ``answer``).
Run from the repository root: ``python tools/build_demo.py [--source ../shared/datasets/doc2dial]``.
``clean_text`` puts back the spaces and apostrophes doc2dial's HTML extraction dropped
("benefitsTransfer", "don t"), keeps the names written that way (``KEEP``) and drops the DMV pages'
template lines.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

AGENCIES = {
    "dmv": ("New York State DMV", "https://dmv.ny.gov"),
    "ssa": ("Social Security Administration", "https://www.ssa.gov"),
    "va": ("Veterans Affairs", "https://www.va.gov"),
    "studentaid": ("Federal Student Aid", "https://studentaid.gov"),
}
DOCS_PER_AGENCY = 15
# Names written in camel case on the agencies' pages: never split (every other lower-to-upper join is an artefact).
KEEP = frozenset("""
    AccessVA AmeriCorps BeThere BorrowerDefense CareerScope DeVos DoD eBenefits FedBizOpps FedEx FedLoan GeriPACT HealthCare
    HealtheVet LinkedIn MasterCard MetLife milConnect MyDMV MyLicense MyMoney mySocial myStudentAid MyVA311 OnGuard OneSource
    PaySign PowerPoint SafeHelpline StudentAid StudentLoanSupport ThankYou VetSuccess VitalChek WyoTech YouTube
    TnnnnnC TnnnnnnC TnnnnnT TnnnnnnT nnnSBVa nnnSBVan
""".split())
# Fields of the DMV pages' template that doc2dial's extraction kept as text.
TEMPLATE_LINES = frozenset({'show mydmv button in megamenu:', 'show "do it online" button in megamenu:', "disable this transaction?:", "yes or no survey:"})
_ADDRESS = re.compile(r"\S+@\S+|https?://\S+|\b[\w.-]+\.(?:gov|com|org|edu|net|us)\b\S*", re.I)
_CAMEL = re.compile(r"[A-Za-z0-9]*[a-z][A-Z][A-Za-z0-9]*")
# doc2dial's text also lost its apostrophes ("you re", "don t", "the school s"): put them back where the
# letters left can only be a contraction or a possessive.
_APOSTROPHES = (
    (re.compile(r"\b(do|does|did|is|are|was|were|have|has|had|wo|would|could|should|ca|must|need)n t\b", re.I), r"\1n't"),  # don t, can t, won t
    (re.compile(r"\b(you|we|they|who|what) re\b", re.I), r"\1're"),
    (re.compile(r"\b(I|you|we|they|who) (ve|ll|d)\b", re.I), r"\1'\2"),
    (re.compile(r"\b(it|that|there) ll\b", re.I), r"\1'll"),
    (re.compile(r"\b(I) m\b", re.I), r"\1'm"),
    (re.compile(r"(?<=[A-Za-z]) s\b"), "'s"),  # it s, that s, the school s, Parkinson s
)
# ... and wrote quoted words with a space inside each quote mark (" Replace, Renew ... Enhanced "): close them
# up where the marks open after a space and close before one, so a quote's words never join another's.
_QUOTES = ((re.compile(r'(?<![^\s(\[])"[ \t]+([^"\n]*?[^"\s])[ \t]+"(?=[\s.,;:!?)\]]|$)'), r'"\1"'),)
# ... and a space before every comma, semicolon and colon ("retire , you"), and around the hyphens of
# numbers ("1 - 800 - 772 - 1213").
_SPACING = (
    (re.compile(r"(?<=[A-Za-z0-9)\"'%]) (?=[,;:](?:\s|$))"), ""),
    (re.compile(r"(?<=\d) - (?=\d)"), "-"),
)
_JOINS = (
    (re.compile(r"(?<=\d)(?=[A-Z][a-z]{2,})"), " "),  # "Box 4444Janesville", "Suite 6Utica"
    (re.compile(r"(?<=[a-z]{3})(?=\d{3,}\b)"), " "),  # "Motor Vehicles207 Genesee Street"
    (re.compile(r"(?<=[a-z][!?])(?=[A-Z][a-z])"), " "),  # "your driver license!We suspend"
)


def _split_camel(match: re.Match[str]) -> str:
    word = match.group(0)
    if word in KEEP:
        return word
    kept = [(m.start(), m.start() + len(name)) for name in KEEP for m in re.finditer(re.escape(name), word)]
    out, last = [], 0
    for i in range(1, len(word)):
        if word[i - 1].islower() and word[i].isupper() and not any(a < i < b for a, b in kept):
            out.append(word[last:i])
            last = i
    return " ".join([*out, word[last:]])


def clean_text(text: str) -> str:
    """doc2dial text with its run-together elements separated and the DMV template's lines removed (see the module docstring)."""
    text = text.replace("have amySocial", "have a mySocial")
    pieces, last = [], 0
    for address in _ADDRESS.finditer(text):
        pieces.append(_clean_words(text[last : address.start()]))
        pieces.append(address.group(0))
        last = address.end()
    pieces.append(_clean_words(text[last:]))
    lines = "".join(pieces).split("\n")
    return "\n".join(line for line in lines if line.strip().lower() not in TEMPLATE_LINES)


def _clean_words(text: str) -> str:
    text = _CAMEL.sub(_split_camel, text)
    for pattern, separator in _JOINS + _APOSTROPHES + _QUOTES + _SPACING:
        text = pattern.sub(separator, text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source", default="../shared/datasets/doc2dial")
    parser.add_argument("--out", default="demo")
    args = parser.parse_args()
    src, out = Path(args.source), Path(args.out)
    gold = {row["query_id"]: row["doc_id"] for row in map(json.loads, open(src / "qrels.jsonl"))}
    docs = {d["doc_id"]: d for d in map(json.loads, open(src / "docs.jsonl"))}
    first = [q for q in map(json.loads, open(src / "queries.jsonl")) if q["is_first_turn"]]
    per_doc = collections.Counter(gold[q["query_id"]] for q in first)
    keep: set[str] = set()
    for agency in AGENCIES:
        ranked = sorted((d for d in docs.values() if d["domain"] == agency), key=lambda d: (-per_doc[d["doc_id"]], d["doc_id"]))
        keep.update(d["doc_id"] for d in ranked[:DOCS_PER_AGENCY])
    (out / "documents").mkdir(parents=True, exist_ok=True)
    for agency in AGENCIES:
        with open(out / "documents" / f"{agency}.jsonl", "w") as handle:
            for doc_id in sorted(k for k in keep if docs[k]["domain"] == agency):
                d = docs[doc_id]
                name, site = AGENCIES[agency]
                source = f"doc2dial: the {name} page \u201c{d['title']}\u201d ({site.removeprefix('https://')})"
                handle.write(json.dumps({"id": doc_id, "title": d["title"], "text": clean_text(d["text"]), "metadata": {"agency": agency, "source": source}}) + "\n")
    with open(out / "queries.jsonl", "w") as handle:
        for q in first:
            if gold[q["query_id"]] in keep:
                row = {"text": q["text"], "label": q["domain"], "split": q["split"], "conversation": q["dial_id"]}
                if q.get("answer"):  # the agent's grounded reply (a span of the document): adapters learn from it
                    row["answer"] = " ".join(clean_text(q["answer"]).split())
                handle.write(json.dumps(row) + "\n")
    with open(out / "agencies.json", "w") as handle:
        json.dump({k: {"name": v[0], "site": v[1]} for k, v in AGENCIES.items()}, handle, indent=2)


if __name__ == "__main__":
    main()
