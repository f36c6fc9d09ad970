"""The evaluation tests' datasets (not a test module): where the shared doc2dial copy lives, and a tiny
two-domain dataset in its format whose answers are sentences of the documents."""

import json
from pathlib import Path

DOC2DIAL = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "doc2dial"

TOPICS = {
    "cars": {
        "licence": "Renew your driving licence online before it expires. The renewal fee is 64 dollars.",
        "plates": "Order replacement number plates at a service centre. Bring the old plates with you.",
        "tests": "Book a driving test after six months with a permit. Tests run on weekdays only.",
        "parking": "Parking permits cost 30 dollars a year. Apply at the city office with proof of address.",
    },
    "money": {
        "pension": "Retirement pension payments start at age 62. Apply three months before you want payments.",
        "refund": "Check a tax refund status online after four weeks. Refunds arrive by direct deposit.",
        "loans": "Student loan repayment starts six months after graduation. Payments depend on income.",
        "disability": "A disability benefit claim needs medical records. Decisions take three to five months.",
    },
}


def write_answer_dataset(folder: Path) -> None:
    """Two domains of four documents, six questions each (three train, one val, two test) answered by a sentence."""
    docs, queries, qrels = [], [], []
    for domain, subjects in TOPICS.items():
        for subject, text in subjects.items():
            doc_id = f"{domain}-{subject}"
            docs.append({"doc_id": doc_id, "domain": domain, "title": subject.title(), "text": text})
            first, second = text.split(". ", 1)
            for q in range(6):
                split = ["train", "train", "train", "val", "test", "test"][q]
                qid = f"{doc_id}-q{q}"
                context = [{"speaker": "user", "text": f"a question about {subject}"}] if q % 2 else []
                answer = first + "." if q % 2 == 0 else second
                queries.append({"query_id": qid, "text": f"what about {subject} {q}?", "domain": domain, "split": split,
                                "context": context, "answer": answer})
                qrels.append({"query_id": qid, "doc_id": doc_id})
    for name, rows in (("docs.jsonl", docs), ("queries.jsonl", queries), ("qrels.jsonl", qrels)):
        (folder / name).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
