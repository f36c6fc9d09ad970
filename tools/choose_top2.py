"""Choose ``serving.breadth``'s thresholds (top-2 answers and clarifying questions) on doc2dial's validation split.

Every validation question is routed as ``auto`` routes it in a throw-away workspace and its signals
(``serving.breadth.Signals``) written to ``OUT``. Each doc2dial question belongs to one agency, so two
answers or a question back is a false alarm: for each ``CLOSE``, ``STRONG_MATCH`` and ``MATCH_GAP`` are
the loosest within ``FALSE_ALARMS``, and the ``CLOSE`` that flags the most wins. ``PART_CONFIDENT`` (a question
that asks two, split between two experts: ``breadth.split_between``) is the loosest on ``PART_GRID`` that splits
none of the validation questions.

    PYTHONPATH=platform:. DJANGO_SETTINGS_MODULE=switchboard.settings python tools/choose_top2.py ../shared/datasets/doc2dial demo/questions.jsonl
    python tools/choose_top2.py --signals /tmp/top2_signals.json   # choose again from the written signals
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

FALSE_ALARMS = 0.05  # at most this share of single-agency validation questions answered twice, and as many asked back
OUT = Path("/tmp/top2_signals.json")
CLOSES = [round(0.1 + 0.05 * i, 2) for i in range(11)]
MATCHES = [round(0.4 + 0.01 * i, 2) for i in range(31)]
GAPS = [round(0.005 * i, 3) for i in range(21)]
PART_GRID = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def main(folder: Path, questions_file: Path) -> None:
    from evaluation.datasets import read_jsonl, user_turns
    from evaluation.workspace import Dataset, load
    from experts.ml.answer_type import parts
    from serving.breadth import signals
    from serving.route import route

    def routed_parts(question: str) -> list[list]:
        """Each part of a question that asks two as ``breadth.split_between`` routes it: [top expert, its probability, abstained]."""
        asked = parts(question)
        if len(asked) < 2:
            return []
        found = [route(part, top_k=2) for part in asked]
        return [[*max(d.raw_scores.items(), key=lambda kv: kv[1]), d.abstained] for d in found]

    data = Dataset.read(folder)
    load(data, say=print)
    rows = []
    for q in data.questions("val"):
        earlier = user_turns(q)
        d = route(q["text"], top_k=2, context=earlier or None)
        rows.append({"set": "val", "kind": "single", "domain": q["domain"], "context": bool(earlier), "parts": routed_parts(q["text"]),
                     **_dict(signals(d, q["text"]))})
    for q in read_jsonl(questions_file):
        earlier = user_turns(q)
        d = route(q["question"], top_k=2, context=earlier or None)
        rows.append({"set": "questions", "kind": q["kind"], "domain": q.get("domain"), "choices": q.get("choices"), "context": bool(earlier),
                     "question": q["question"], "parts": routed_parts(q["question"]), **_dict(signals(d, q["question"]))})
    OUT.write_text(json.dumps(rows, indent=1))
    print(f"{len(rows)} questions' signals written to {OUT}")
    choose(rows)


def choose(rows: list[dict]) -> None:
    """Print, for each ``CLOSE``, the thresholds the budgets allow and what they do to the question file; then the choice."""
    from serving import breadth
    from serving.breadth import Signals

    fields = ("first", "second", "p_first", "p_second", "match_first", "match_second")
    val = [Signals(*(r[f] for f in fields)) for r in rows if r["set"] == "val" and r.get("match_second") is not None]
    asked = [(r, Signals(*(r[f] for f in fields))) for r in rows if r["set"] == "questions" and r.get("match_second") is not None]

    def rate(outcome: str) -> float:
        return sum(breadth.decide(s, conversation=False) == outcome for s in val) / len(val)

    best = None
    for close in CLOSES:
        breadth.CLOSE, breadth.MATCH_GAP = close, -1.0
        strong = next(m for m in MATCHES if (setattr(breadth, "STRONG_MATCH", m), rate(breadth.BOTH))[1] <= FALSE_ALARMS)
        gap = max([g for g in GAPS if (setattr(breadth, "MATCH_GAP", g), rate(breadth.CLARIFY))[1] <= FALSE_ALARMS] or [-1.0])
        breadth.MATCH_GAP = gap
        both, clarify = rate(breadth.BOTH), rate(breadth.CLARIFY)
        got = [(r["kind"], breadth.decide(s, conversation=r["context"])) for r, s in asked]
        kinds = {o: sorted(k for k, d in got if d == o) for o in (breadth.BOTH, breadth.CLARIFY)}
        print(f"CLOSE {close}: STRONG_MATCH {strong}, MATCH_GAP {gap}: validation two answers {both:.3f}, asked back {clarify:.3f}; "
              f"question file: two answers {kinds[breadth.BOTH]}, asked back {kinds[breadth.CLARIFY]}")
        if best is None or both + clarify > best[0] + 1e-9:
            best = (both + clarify, close, strong, gap)
    print(f"chosen: CLOSE {best[1]}, STRONG_MATCH {best[2]}, MATCH_GAP {best[3]}")

    def split(row: dict, at: float) -> bool:
        found = row.get("parts") or []
        return bool(found) and all(p >= at and not abstained for _, p, abstained in found) and len({slug for slug, _, _ in found}) == 2

    asking_two = [r for r in rows if r["set"] == "val" and r.get("parts")]
    for at in PART_GRID:
        print(f"PART_CONFIDENT {at}: validation questions that ask two split {sum(split(r, at) for r in asking_two)} of {len(asking_two)}; "
              f"question file split: {sorted(r['kind'] for r in rows if r['set'] == 'questions' and split(r, at))}")
    print(f"chosen: PART_CONFIDENT {min(at for at in PART_GRID if not any(split(r, at) for r in asking_two))}")


def _dict(found) -> dict:
    return found.as_dict() if found is not None else {}


if __name__ == "__main__":
    import django

    django.setup()
    from evaluation.workspace import isolated

    if sys.argv[1] == "--signals":
        choose(json.loads(Path(sys.argv[2]).read_text()))
    elif sys.argv[-1] == "--in-place":  # the child, in the workspace made for it
        main(Path(sys.argv[1]), Path(sys.argv[2]))
    else:  # load the dataset into a throw-away workspace, as evaluate answers does
        sys.exit(isolated([str(Path(sys.argv[1]).resolve()), str(Path(sys.argv[2]).resolve()), "--in-place"],
                          program=[sys.executable, str(Path(__file__).resolve())]))
