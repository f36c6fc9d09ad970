"""Rebuild the bundled demo (``demo/``) from the doc2dial files in ``../shared/datasets/doc2dial``.

The demo keeps, for each of the four agencies, the 15 documents with the most dialogue-opening
questions and every dialogue-opening question grounded in them. Run from the repository root:

    python tools/build_demo.py [--source ../shared/datasets/doc2dial]
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

AGENCIES = {
    "dmv": ("New York State DMV", "https://dmv.ny.gov"),
    "ssa": ("Social Security Administration", "https://www.ssa.gov"),
    "va": ("Veterans Affairs", "https://www.va.gov"),
    "studentaid": ("Federal Student Aid", "https://studentaid.gov"),
}
DOCS_PER_AGENCY = 15


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source", default="../shared/datasets/doc2dial")
    parser.add_argument("--out", default="demo")
    args = parser.parse_args()
    src, out = Path(args.source), Path(args.out)
    queries = [json.loads(line) for line in open(src / "queries.jsonl")]
    gold = {}
    for line in open(src / "qrels.jsonl"):
        row = json.loads(line)
        gold[row["query_id"]] = row["doc_id"]
    docs = {d["doc_id"]: d for d in (json.loads(line) for line in open(src / "docs.jsonl"))}
    first = [q for q in queries if q["is_first_turn"]]
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
                handle.write(json.dumps({"id": doc_id, "title": d["title"], "text": d["text"], "metadata": {"agency": agency}}) + "\n")
    with open(out / "queries.jsonl", "w") as handle:
        for q in first:
            if gold[q["query_id"]] in keep:
                handle.write(json.dumps({"text": q["text"], "label": q["domain"], "split": q["split"], "conversation": q["dial_id"]}) + "\n")
    with open(out / "agencies.json", "w") as handle:
        json.dump({k: {"name": v[0], "site": v[1]} for k, v in AGENCIES.items()}, handle, indent=2)


if __name__ == "__main__":
    main()
