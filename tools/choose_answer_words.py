"""Choose ``experts.ml.extractive.ANSWER_WORDS`` on a dataset's validation split, by recall, through the product.

The dataset is loaded into a throw-away workspace as ``evaluate answers`` loads it (``evaluation.workspace``),
then every validation question with a reference answer is asked through serving's chat path (``auto``, the
extractive generator) once per budget. Printed per budget: recall (the share of the reference's content words
the answer holds), token F1, median and mean words, junk rate. The rule: the budget with the best recall
of ``BUDGETS``, which stop at 60 (issue 55: complete answers bounded at about 60 words; a sentence longer than the
budget is cut to it, so no answer runs past it).

    PYTHONPATH=platform:. DJANGO_SETTINGS_MODULE=switchboard.settings python tools/choose_answer_words.py ../shared/datasets/doc2dial
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BUDGETS = (0, 30, 45, 50, 55, 60)


def main(folder: Path) -> None:
    from evaluation.scoring import scored, summarise
    from evaluation.workspace import Dataset, ask, load
    from experts.generation import extractive as generator

    data = Dataset.read(folder)
    questions = [q for q in data.questions("val") if q.get("answer")]
    loaded = load(data, say=print)
    results = {}
    for budget in BUDGETS:
        generator.ANSWER_WORDS = budget
        rows = [scored(ask(q, "auto"), q, {}, loaded.experts[q["domain"]]) for q in questions]
        figures = summarise(rows)
        results[budget] = figures
        print(budget, json.dumps({k: figures[k] for k in ("recall", "f1", "words", "mean_words", "junk_rate", "abstained")}), flush=True)
    print("chosen:", max(BUDGETS, key=lambda b: (results[b]["recall"], -b)))


if __name__ == "__main__":
    import django

    django.setup()
    from evaluation.workspace import isolated

    if sys.argv[-1] == "--in-place":  # the child, in the workspace made for it
        main(Path(sys.argv[1]))
    else:  # load the dataset into a throw-away workspace, as evaluate answers does
        sys.exit(isolated([str(Path(sys.argv[1]).resolve()), "--in-place"], program=[sys.executable, str(Path(__file__).resolve())]))
