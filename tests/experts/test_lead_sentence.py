"""The model's prompt names the sentence the extractive answer would quote (prompting.LEAD_SENTENCE)."""

from __future__ import annotations

from experts.generation.base import GenerationRequest
from experts.generation.extractive import ExtractiveGenerator, first_choices
from experts.generation.transformers import TransformersGenerator
from experts.ml.extractive import Passage, quoted
from experts.ml.prompting import render_passages

# The model writes its answers: free decoding, no lead sentence, no shortlist (the product chooses among the scorer's).
WRITES = {"decoding": "free", "lead_sentence": False, "select_shortlist": 0}
QUESTION = "How do I renew my driver license online?"
FILLER = "Offices are open Monday to Friday from nine to five. Parking is free for visitors with a permit. " * 3
PASSAGES = [
    Passage(text=f"{FILLER}You can renew your driver license online with MyDMV if it expired less than two years ago.",
            title="Renewing your license", score=0.8, chunk_id="dmv-1"),
    Passage(text="Vehicle registration stickers are mailed within ten days.", title="Registration", score=0.5, chunk_id="dmv-2"),
]


def _request() -> GenerationRequest:
    return GenerationRequest(question=QUESTION, expert="dmv", passages=list(PASSAGES))


def test_the_lead_is_the_best_sentence_the_extractive_answer_quotes():
    best = first_choices(_request(), 1)
    place, sentence = best[0].passage, quoted(best[0].text)
    answer = ExtractiveGenerator().generate(_request())
    assert (place, sentence) == (1, "You can renew your driver license online with MyDMV if it expired less than two years ago.")
    assert answer.selection["quoted"][0]["text"] == sentence
    assert sentence in answer.text  # completed by the next best sentences, in the page's order


def test_prompt_passages_keep_and_name_the_lead_only_when_asked():
    with_lead = TransformersGenerator.from_settings(base_model="unused", passage_chars=120, lead_sentence=True, decoding="free", select_shortlist=0).prompt_passages(_request())
    assert with_lead[0].lead.startswith("You can renew your driver license online")
    assert with_lead[0].lead in with_lead[0].text  # kept although the cut leaves room for little else
    assert with_lead[1].lead == ""
    assert "Best matching sentence (passage 1, cite as [1]): You can renew" in render_passages(with_lead)

    plain = TransformersGenerator.from_settings(base_model="unused", **WRITES, passage_chars=120).prompt_passages(_request())
    assert all(p.lead == "" for p in plain)
    assert "Best matching sentence" not in render_passages(plain)


def test_weak_passages_have_no_lead():
    weak = GenerationRequest(question=QUESTION, expert="dmv", passages=[Passage(text="Unrelated words here, nothing else.", score=0.01)])
    assert first_choices(weak, 1) == []
    assert TransformersGenerator.from_settings(base_model="unused", lead_sentence=True, decoding="free", select_shortlist=0).prompt_passages(weak)[0].lead == ""


def test_the_vllm_payload_names_the_lead_when_it_is_on():
    from experts.generation.vllm import VllmGenerator

    gen = VllmGenerator("http://vllm.invalid", base_model_name="base", lead_sentence=False)
    assert "Best matching sentence" not in gen.payload(_request(), stream=False)["messages"][-1]["content"]
    gen = VllmGenerator("http://vllm.invalid", base_model_name="base")  # on, as the in-process backend's prompts
    user = gen.payload(_request(), stream=False)["messages"][-1]["content"]
    assert "Best matching sentence (passage 1, cite as [1]): You can renew your driver license online" in user


def test_with_select_decoding_the_cut_keeps_every_sentence_of_the_shortlist(monkeypatch):
    """The extractive answer's first choices are what select decoding's model judges: the cut keeps them all."""

    request = _request()
    best = first_choices(request, 2)
    assert len(best) == 2
    gen = TransformersGenerator.from_settings(base_model="unused", passage_chars=120, lead_sentence=True, decoding="select", select_shortlist=2)
    shown = gen.prompt_passages(request)
    for r in best:
        assert r.text in shown[r.passage - 1].text
    assert shown[best[0].passage - 1].lead == best[0].text  # the first is the lead
    # free decoding keeps only the lead, as before
    free = TransformersGenerator.from_settings(base_model="unused", passage_chars=60, lead_sentence=True, select_shortlist=2, decoding="free").prompt_passages(request)
    assert best[0].text in free[best[0].passage - 1].text


def test_a_lead_under_a_section_heading_is_kept_in_the_cut():
    headed = Passage(text=f"{FILLER}Online renewals\nYou can renew your driver license online with MyDMV if it expired less than two years ago.",
                     title="Renewing your license", score=0.8, chunk_id="dmv-3")
    request = GenerationRequest(question=QUESTION, expert="dmv", passages=[headed])
    shown = TransformersGenerator.from_settings(base_model="unused", passage_chars=150, lead_sentence=True, decoding="free", select_shortlist=0).prompt_passages(request)
    assert shown[0].lead == "You can renew your driver license online with MyDMV if it expired less than two years ago."  # quoted: no heading
    assert "Online renewals\nYou can renew your driver license online" in shown[0].text  # kept as the passage has it


def test_the_cut_keeps_the_shortlist_from_every_passage_shown_not_only_the_first_three():
    """Shown four passages, the model judges sentences of all four (plan_selection): the cut keeps them wherever they are."""

    others = [Passage(text=f"{FILLER}Registration stickers are mailed within ten days.", title=f"Other {i}", score=0.6, chunk_id=f"o-{i}")
              for i in range(3)]
    request = GenerationRequest(question=QUESTION, expert="dmv", passages=[*others, PASSAGES[0]])
    best = first_choices(request, 2, max_passages=4)
    assert best[0].passage == 4  # the answer sits in the fourth passage
    shown = TransformersGenerator.from_settings(base_model="unused", max_passages=4, passage_chars=60, lead_sentence=True, decoding="select", select_shortlist=2).prompt_passages(request)
    for r in best:
        assert r.text in shown[r.passage - 1].text
    assert shown[3].lead == best[0].text
