"""Choose ``knowledge.ml.spelling.KNOWN_WORDS_MIN``: below it a question's words are too few of the documents' to be in their language.

English questions against their documents' words (``knowledge.ml.spelling.Vocabulary.known_share``): the demo's question
log (demo/queries.jsonl, the 60 demo documents) and doc2dial's validation user turns (its 273 documents); questions in
other languages against the demo's documents: ``FOREIGN``, translations of demo questions written for this choice
(tests/platform/test_demo_pipeline.py asks others). Printed: each set's lowest shares (English) or highest (foreign),
then how many English questions collections of fewer documents turn away (``VOCABULARY_MIN``).

    PYTHONPATH=platform:. python tools/choose_known_words.py ../shared/datasets/doc2dial
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

FOREIGN = [
    "Wie lange habe ich Zeit, nach einem Umzug nach New York einen neuen Führerschein zu beantragen?",
    "Kostet ein REAL ID Ausweis mehr als ein normaler Führerschein?",
    "Ab welchem Alter kann ich meine Rente von der Sozialversicherung beziehen?",
    "Wie beantrage ich Studienbeihilfe für Veteranen?",
    "¿Cuánto tiempo tengo para cambiar mi licencia de conducir después de mudarme a Nueva York?",
    "¿Cómo solicito los beneficios de jubilación del Seguro Social?",
    "Comment puis-je renouveler mon permis de conduire en ligne ?",
    "Quel âge faut-il avoir pour toucher une pension de retraite de la sécurité sociale ?",
    "Come posso richiedere un prestito federale per studenti?",
    "Hoe vraag ik een uitkering aan voor veteranen?",
    "搬到纽约后, 我需要多长时间换驾照?",
    "如何申请社会保障退休福利?",
    "退役軍人の教育給付金はどうやって申請しますか?",
    "Как подать заявление на студенческий кредит?",
]


def main(doc2dial: Path) -> None:
    from evaluation.datasets import read_jsonl
    from knowledge.ml import spelling
    from knowledge.ml.spelling import UNKNOWN_WORDS_MIN, Vocabulary

    demo = Path(__file__).resolve().parents[1] / "demo"
    demo_words = Vocabulary.from_texts(f"{r['title']}\n{r['text']}" for f in sorted((demo / "documents").glob("*.jsonl")) for r in read_jsonl(f))
    doc2dial_words = Vocabulary.from_texts(f"{r['title']}\n{r['text']}" for r in read_jsonl(doc2dial / "docs.jsonl"))
    sets = {
        "demo question log (English)": (demo_words, [r["text"] for r in read_jsonl(demo / "queries.jsonl")]),
        "doc2dial validation turns (English)": (doc2dial_words, [r["text"] for r in read_jsonl(doc2dial / "queries.jsonl") if r["split"] == "val"]),
        "foreign questions": (demo_words, FOREIGN),
    }
    for name, (words, questions) in sets.items():
        counts = [(words.known_words(q), q[:60]) for q in questions]
        # one unknown word may be a name or a greeting ("yes sir", "hg"): the rule judges questions with UNKNOWN_WORDS_MIN or more
        shares = sorted((round(known / total, 3), q) for (known, total), q in counts if total - known >= UNKNOWN_WORDS_MIN)
        print(f"{name}: {len(counts)} questions, {len(shares)} with {UNKNOWN_WORDS_MIN}+ unknown words; "
              f"{'highest' if name.startswith('foreign') else 'lowest'} shares of known words: {(shares[::-1] if name.startswith('foreign') else shares)[:3]}")
        for cut in (0.5, 0.6, 0.65, 0.7, 0.8):
            print(f"  below {cut}: {sum(s < cut for s, _ in shares)}")
    # VOCABULARY_MIN: how many English questions smaller collections turn away (three random draws of each size)
    english, rng = sets["demo question log (English)"][1], random.Random(0)
    spelling.VOCABULARY_MIN = 0
    for name, texts in (("demo", [f"{r['title']}\n{r['text']}" for f in sorted((demo / "documents").glob("*.jsonl")) for r in read_jsonl(f)]),
                        ("doc2dial", [f"{r['title']}\n{r['text']}" for r in read_jsonl(doc2dial / "docs.jsonl")])):
        for size in (10, 20, 40):
            drawn = [Vocabulary.from_texts(rng.sample(texts, size)) for _ in range(3)]
            turned = [(len(v), sum(not v.shares_language(q) for q in english)) for v in drawn]
            print(f"{size} {name} documents: (words, English questions turned away without VOCABULARY_MIN) {turned}")

if __name__ == "__main__":
    main(Path(sys.argv[1]))
