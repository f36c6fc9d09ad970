"""The extractive answer picks relevant sentences, cites them, and admits when it found nothing."""

import pytest

from experts.ml.extractive import NOT_FOUND, Passage, extractive_answer, quoted, set_aside_share, split_sentences
from experts.ml.junk import looks_like_menu

PASSAGES = [
    Passage(text="You can renew your driver licence online. Renewal costs 64 dollars. Offices open at nine.", title="Renewals", score=0.7),
    Passage(text="Retirement benefits start at 62. You can apply online for retirement benefits.", title="Retirement", score=0.5),
]


def test_it_answers_from_the_best_sentences_with_citations(encoder):
    answer = extractive_answer("How much does licence renewal cost?", PASSAGES, encoder.encode, max_sentences=2)
    assert answer.grounded
    assert "64 dollars" in answer.text
    assert "[1]" in answer.text
    assert answer.citations[0].title == "Renewals"


def test_a_documents_own_footnote_numbers_never_pass_for_citations(encoder):
    noted = [Passage(text="Renewal costs 64 dollars [4]. Offices open at nine [12].", title="Renewals", score=0.7), PASSAGES[1]]
    answer = extractive_answer("How much does licence renewal cost?", noted, encoder.encode, max_sentences=1)
    assert "64 dollars" in answer.text
    assert "[4]" not in answer.text
    assert answer.text.endswith("[1]")


def test_the_answer_quotes_a_sentence_without_its_sections_heading_line(encoder):
    sectioned = [Passage(text="Fee to replace a licence\nThe fee to replace a licence is 17 dollars. Offices open at nine.", title="Fees", score=0.7)]
    answer = extractive_answer("How much is it to replace a licence?", sectioned, encoder.encode, max_sentences=1)
    assert answer.text == "The fee to replace a licence is 17 dollars. [1]"
    assert answer.selection["quoted"][0]["text"] == "The fee to replace a licence is 17 dollars."


@pytest.mark.parametrize(("sentence", "expected"), [
    ("Recovered vehicles\nIf your vehicle is recovered, call the police.", "If your vehicle is recovered, call the police."),
    ("Heading\n\n\"Quoted\" advice [3] follows.", "\"Quoted\" advice follows."),
    # A line that breaks a sentence, or one that ends as a sentence does, is no heading.
    ("Documents in your spouse's name if\nyou share a last name.", "Documents in your spouse's name if\nyou share a last name."),
    ("Step 2: bring these:\nProof of identity.", "Step 2: bring these:\nProof of identity."),
    ("One sentence alone.", "One sentence alone."),
    ("If your vehicle is recovered , call the police : they cancel the alarm .", "If your vehicle is recovered, call the police: they cancel the alarm."),
    ("Pay $ 17.50 - or less ; see (page 2) .", "Pay $17.50 - or less; see (page 2)."),
    ("Plates are $ 25 a set, $ 12.50 for one; a rating of at least 30 % (not 30 people).", "Plates are $25 a set, $12.50 for one; a rating of at least 30% (not 30 people)."),
    # Hyphenated words and numbers the extraction split apart are joined again; a dash between clauses stays.
    ("Call 800 - 669 - 8477 or use DIAL - IN for a non - driver ID , a one - time code .", "Call 800-669-8477 or use DIAL-IN for a non-driver ID, a one-time code."),
    ("Bring the fasteners - we supply none .", "Bring the fasteners - we supply none."),
    ("A service - connected disability, a full - time work - study job, an out - of - state license ; benefits - and more .",
     "A service-connected disability, a full-time work-study job, an out-of-state license; benefits - and more."),
    # A contraction's or a possessive's lost apostrophe is put back; a lone letter that can be no such ending stays.
    ("If you re sure you don t need it, you ll file the service member s form. I m done.",
     "If you're sure you don't need it, you'll file the service member's form. I'm done."),
    ("Walk 10 m north; Medicare Part B s rules; Vitamin D.", "Walk 10 m north; Medicare Part B s rules; Vitamin D."),
    # A download link's label glued into the prose is the page's link, not its text.
    ("Fill out VA Form 22-8691. Download VA Form 22-8691 PDF If you have questions, call us.", "Fill out VA Form 22-8691. If you have questions, call us."),
    ("Download VA Form 20-0996 PDF", ""),
    # A link's title run into its description is parted from it; a brand's capital inside a word is not.
    ("EligibilitySee if you're eligible. About GI Bill benefitsLearn how it works.", "Eligibility: See if you're eligible. About GI Bill benefits: Learn how it works."),
    ("Use YouTube, PowerPoint or eFile. Getting there.", "Use YouTube, PowerPoint or eFile. Getting there."),
    ("EligibilityIf you served, apply. ChecklistIt will help. Write to ThankYou@ssa.gov or LinkedIn.",
     "Eligibility: If you served, apply. Checklist: It will help. Write to ThankYou@ssa.gov or LinkedIn."),
    # A parenthesis the sentence does not both open and close is the sentence beside it's; so is a missing capital.
    ("One plate; e.g. motorcycles) You pay (a fee) later.) Or (see", "One plate; e.g. motorcycles You pay (a fee) later. Or see"),
    ("The Sweet v. Cal. ), is a lawsuit.", "The Sweet v. Cal., is a lawsuit."),
    ("Do not drive a car that is not insured. you could be arrested, fined etc. and more.",
     "Do not drive a car that is not insured. You could be arrested, fined etc. and more."),
    # "Learn more about ..." is a link's label: up to its stop, the end, or the prose run into it; in a sentence it stays.
    ("We can help. Learn more about your coverage If you need help, call us. Learn more about urgent care",
     "We can help. If you need help, call us."),
    ("You can learn more about it online. Learn about GI Bill eligibility.", "You can learn more about it online. Learn about GI Bill eligibility."),
    # A label opening the sentence is parted from it, or dropped when it opens with a link's verb (not a name, "Part A" or
    # "Sign In": the test below).
    ("Apply Online The easiest way is online. Note We may use one document twice.", "The easiest way is online. Note We may use one document twice."),
    ("Note We may use one document for two purposes.", "Note: We may use one document for two purposes."),
    ("Refill your prescriptions We may cover services you need.", "Refill your prescriptions: We may cover services you need."),
    ("Learn about the Yellow Ribbon Program If you qualify, you can transfer 36 months.", "If you qualify, you can transfer 36 months."),
    # A page's own controls kept beside a heading are dropped with it.
    ("Choosing a School \nshare link You have a variety of college options.",
     "You have a variety of college options."),
])
def test_what_an_answer_quotes_of_a_sentence(sentence, expected):
    assert quoted(sentence) == expected


def test_a_sentence_that_opens_with_a_name_part_a_or_a_links_sign_in_keeps_its_words_together():
    for sentence in ("New York State residents age 16 or over can apply.", "Sign In to your account below.",
                     "For Direct PLUS Loans the rate is fixed.", "Hospital insurance Part A helps pay for care.", "Your Address - If it changed, write."):
        assert quoted(sentence) == sentence


def test_it_says_so_when_retrieval_is_weak(encoder):
    weak = [Passage(text=p.text, title=p.title, score=0.1) for p in PASSAGES]
    answer = extractive_answer("How much does licence renewal cost?", weak, encoder.encode, min_score=0.25)
    assert answer.text == NOT_FOUND
    assert not answer.grounded
    assert answer.citations == []


def test_it_handles_no_passages(encoder):
    assert extractive_answer("anything", [], encoder.encode).text == NOT_FOUND


def test_the_chunk_cache_gives_the_same_answer_and_skips_re_encoding(encoder):
    from experts.ml.extractive import ChunkSentenceCache

    chunks = [Passage(text=p.text, title=p.title, score=p.score, chunk_id=f"c{i}") for i, p in enumerate(PASSAGES)]
    cache = ChunkSentenceCache(10)
    calls: list[int] = []

    def embed(texts):
        calls.append(len(texts))
        return encoder.encode(texts)

    question = "How much does licence renewal cost?"
    plain = extractive_answer(question, chunks, encoder.encode, max_sentences=2)
    first = extractive_answer(question, chunks, embed, max_sentences=2, cache=cache)
    again = extractive_answer(question, chunks, embed, max_sentences=2, cache=cache)
    assert first.text == plain.text == again.text
    assert [c.title for c in again.citations] == [c.title for c in plain.citations]
    assert calls[1] == 1  # only the question: the chunks' sentences came from the cache
    assert len(cache) == 2
    assert cache.hits == 2
    changed = [Passage(text=chunks[0].text + " Renewal by post costs 70 dollars.", title="Renewals", score=0.7, chunk_id="c0"), chunks[1]]
    extractive_answer(question, changed, embed, max_sentences=2, cache=cache)
    assert calls[2] > 1  # new text under the same chunk id is split and encoded again


def test_sentence_vectors_from_index_time_stand_in_for_encoding(encoder):
    import numpy as np

    from experts.ml.extractive import split_sentences
    from knowledge.ml.sentences import pack_vectors, unpack_vectors

    question = "How much does licence renewal cost?"
    plain = extractive_answer(question, PASSAGES, encoder.encode, max_sentences=2)
    def reader(text):
        packed = pack_vectors(encoder.encode(split_sentences(text)))
        return lambda: unpack_vectors(packed, encoder.dimension)

    indexed = [Passage(text=p.text, title=p.title, score=p.score, sentence_vectors=reader(p.text)) for p in PASSAGES]
    calls: list[list[str]] = []

    def embed(texts):
        calls.append(list(texts))
        return encoder.encode(texts)

    answer = extractive_answer(question, indexed, embed, max_sentences=2)
    assert calls == [[question]]  # only the question was encoded
    assert answer.text == plain.text
    from experts.ml.extractive import ChunkSentenceCache

    reads: list[int] = []
    counted = Passage(text=PASSAGES[0].text, title="Renewals", score=0.7, chunk_id="c0",
                      sentence_vectors=lambda: reads.append(1) or encoder.encode(split_sentences(PASSAGES[0].text)))
    cache = ChunkSentenceCache(10)
    for _ in range(2):
        extractive_answer(question, [counted], embed, max_sentences=2, cache=cache)
    assert reads == [1]  # read when the chunk is first seen, not again once cached
    stale = [Passage(text=PASSAGES[0].text, title="Renewals", score=0.7, sentence_vectors=lambda: np.zeros((1, encoder.dimension), np.float32))]
    calls.clear()
    extractive_answer(question, stale, embed, max_sentences=2)
    assert len(calls[0]) > 1  # vectors that do not match the split are not used: the sentences are encoded
    other_model = [Passage(text=PASSAGES[0].text, title="Renewals", score=0.7,
                           sentence_vectors=lambda: np.ones((len(split_sentences(PASSAGES[0].text)), 3), np.float32))]
    calls.clear()
    assert "64 dollars" in extractive_answer(question, other_model, embed, max_sentences=2).text
    assert len(calls) == 2  # another encoder's vectors (another dimension): encoded again


def test_packed_vectors_round_trip_in_half_precision_and_bad_input_is_refused():
    import numpy as np

    from knowledge.ml.sentences import pack_vectors, unpack_vectors

    vectors = np.random.default_rng(0).normal(size=(3, 8)).astype(np.float32)
    back = unpack_vectors(pack_vectors(vectors), 8)
    assert back.shape == (3, 8)
    assert not back.flags.writeable
    np.testing.assert_allclose(back, vectors, atol=2e-3)
    assert unpack_vectors(pack_vectors(vectors), 5) is None  # 48 bytes are not rows of 5
    assert unpack_vectors("not base64!", 8) is None


def test_the_best_sentence_is_completed_by_the_next_best_ones_that_fit_each_once_in_page_order(encoder):
    page = [Passage(text="Renewal costs 64 dollars for a licence. Offices open at nine on weekdays. Parking is free behind the building. "
                         "You can pay the renewal fee by card or cheque.", title="Renewals", score=0.7),
            Passage(text="A licence is valid for eight years. Renewal costs 64 dollars for a licence.", title="Licences", score=0.6)]
    question = "How much does licence renewal cost and can I pay by card?"

    alone = extractive_answer(question, page, encoder.encode, max_sentences=1)
    completed = extractive_answer(question, page, encoder.encode, max_sentences=1, max_words=20)
    longer = extractive_answer(question, page, encoder.encode, max_sentences=1, max_words=30)

    assert alone.text == "You can pay the renewal fee by card or cheque. [1]"
    # The runner-up sentence fills the answer up, and it reads in the page's order, one citation mark for the passage.
    assert completed.selection["runner_up"]["text"] == "Renewal costs 64 dollars for a licence."
    assert completed.text == "Renewal costs 64 dollars for a licence. You can pay the renewal fee by card or cheque. [1]"
    assert completed.selection["completed_with"] == 1
    # Within 30 words: the second passage's copy of the fee sentence is quoted once, a sentence too long to fit is passed over.
    assert longer.text.count("Renewal costs 64 dollars") == 1
    assert len(longer.text.replace("[1]", "").replace("[2]", "").split()) <= 30
    assert longer.text.endswith("[2]")
    assert [c.title for c in longer.citations] == ["Renewals", "Licences"]


def test_the_best_sentences_passage_leads_the_answer_even_when_another_passage_was_retrieved_first(encoder):
    first = Passage(text="Offices open at nine on weekdays. Parking is free behind the building.", title="Offices", score=0.8)
    second = Passage(text="Renewal costs 64 dollars for a licence.", title="Renewals", score=0.6)

    answer = extractive_answer("How much does licence renewal cost?", [first, second], encoder.encode, max_sentences=1, max_words=30)

    assert answer.text.startswith("Renewal costs 64 dollars for a licence. [1]")
    assert answer.citations[0].title == "Renewals"


def test_a_navigation_menu_is_never_quoted_even_when_it_matches_best(encoder):
    menu = "Renew licence Online Services Renewal Fees Licence Renewal Forms Contact Us About Renewal Offices"
    page = [Passage(text=f"{menu}\n\nRenewal of a licence costs 64 dollars in any office.", title="Renewals", score=0.7)]
    only_menu = [Passage(text=menu, title="Renewals", score=0.7)]

    answer = extractive_answer("licence renewal fees online", page, encoder.encode, max_sentences=1)

    assert "64 dollars" in answer.text
    assert answer.selection["set_aside_as_junk"] == 1
    assert extractive_answer("licence renewal fees online", only_menu, encoder.encode, max_sentences=1).text == NOT_FOUND


def test_a_line_that_introduces_what_it_does_not_hold_is_never_quoted(encoder):
    page = [Passage(text="Renewal fees for a licence:\n\nshow mydmv button in megamenu:\n\nRenewal of a licence costs 64 dollars in any office.",
                    title="Renewals", score=0.7)]

    answer = extractive_answer("licence renewal fees", page, encoder.encode, max_sentences=1, max_words=60)

    assert answer.text == "Renewal of a licence costs 64 dollars in any office. [1]"
    assert answer.selection["set_aside_as_junk"] == 2
    assert set_aside_share([page[0].text]) > 0.5


def test_no_line_of_a_passage_that_is_a_menu_is_quoted_and_the_next_passage_answers(encoder):
    menu = Passage(text="- Renew your licence online\n- Replace a lost licence\n- Licence renewal fees\n- About licence renewal offices",
                   title="Licence services", score=0.9)
    page = Passage(text="Fees\nRenewing a licence online costs 64 dollars.", title="Renewals", score=0.6)

    answer = extractive_answer("licence renewal fees online", [menu, menu, menu, page], encoder.encode, max_sentences=1, max_passages=3)

    assert answer.text == "Renewing a licence online costs 64 dollars. [1]"
    assert answer.citations == [page]


@pytest.mark.parametrize(("passage", "menu"), [
    ("Home\nLicences\nRegistrations\nContact us", True),
    ("- Renew your licence online\n\n- Replace a lost licence\n\n- Licence fees\n\n- Change your address", True),
    ("Home\nLicences\nContact us", False),  # three lines: a heading and a short list
    ("Bring these documents:\n- your licence\n- proof of address\n- the fee", False),  # a list its first line introduces
    ("Renew online\nA licence is renewed online.\nFees\nIt costs 64 dollars.", False),
])
def test_a_menu_is_four_lines_or_more_without_a_sentence_or_a_list_they_introduce(passage, menu):
    assert looks_like_menu(passage) is menu


def test_a_sentence_is_not_cut_at_a_middle_initial_a_months_abbreviation_us_or_po_but_is_after_a_named_part():
    text = ("Under the William D. Ford Federal Direct Loan Program you default after 270 days. The deadline is Oct. 1 this year. "
            "You can enroll in Medicare Part B. If you enroll late, you pay more each month. Be a U.S. Citizen or ask the U.S. "
            "Department of State. Write to NYS DMV, P.O. Box 2700, Albany. Or the Production BureauP.O. Box 2688, Albany.")
    assert split_sentences(text) == ["Under the William D. Ford Federal Direct Loan Program you default after 270 days.",
                                     "The deadline is Oct. 1 this year.", "You can enroll in Medicare Part B.",
                                     "If you enroll late, you pay more each month.", "Be a U.S. Citizen or ask the U.S. Department of State.",
                                     "Write to NYS DMV, P.O. Box 2700, Albany.", "Or the Production BureauP.O. Box 2688, Albany."]


def test_a_download_label_alone_is_never_the_answer(encoder):
    label = Passage(text="Download VA Form 20-0996 PDF", title="Higher-Level Review", score=0.9)
    prose = Passage(text="To request a Higher-Level Review, fill out VA Form 20-0996 and send it to us.", title="Higher-Level Review", score=0.8)
    # Asked in the label's own words, the label scores best of all, yet quotes to nothing.
    answer = extractive_answer("Download VA Form 20-0996 PDF", [label, prose], encoder.encode)
    assert answer.text.startswith("To request a Higher-Level Review")
