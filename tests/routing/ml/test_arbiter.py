"""Serving-time arbitration: load penalty over a sliding window, capacity limits, abstention, failover."""

import threading

import pytest

from routing.ml.arbiter import Arbiter, LoadWindow, default_load_penalty


def test_the_window_keeps_only_the_last_n_choices():
    window = LoadWindow(4)
    for expert in ["a", "a", "a", "b", "b", "b"]:
        window.record(expert)
    assert window.load_array(["a", "b", "c"]).tolist() == [0.25, 0.75, 0.0]  # the last 4 of 4 slots


def test_the_window_counts_every_record_from_many_threads():
    window = LoadWindow(100_000)

    def work():
        for _ in range(1000):
            window.record("a")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert window.load_array(["a"]).tolist() == [0.08]


def test_an_overloaded_expert_is_penalised_by_lambda_times_its_excess_load():
    window = LoadWindow(10)
    for _ in range(8):
        window.record("busy")
    arbiter = Arbiter(window=window, load_penalty=0.15)
    decision = arbiter.decide({"busy": 0.50, "idle": 0.45}, top_k=1, record=False)
    # loads 0.8 and 0.0, mean 0.4: busy 0.50 - 0.15*0.4 = 0.44, idle 0.45 + 0.06 = 0.51
    assert dict(decision.ranked) == pytest.approx({"busy": 0.44, "idle": 0.51})
    assert decision.chosen == ["idle"]


def test_adjusted_scores_stay_between_0_and_1_and_keep_the_unclipped_order():
    window = LoadWindow(10)
    for _ in range(10):
        window.record("busy")
    # loads 1, 0, 0 (mean 1/3), λ 0.15: sure 0.9998 + 0.05 and busy 0.0001 - 0.1 leave [0, 1]; idle 0.0001 + 0.05 does not
    decision = Arbiter(window=window, load_penalty=0.15).decide({"busy": 0.0001, "sure": 0.9998, "idle": 0.0001}, top_k=3, record=False)
    assert decision.chosen == ["sure", "idle", "busy"]
    assert dict(decision.ranked) == pytest.approx({"sure": 1.0, "idle": 0.0501, "busy": 0.0})


def test_a_clear_preference_survives_the_penalty():
    window = LoadWindow(10)
    for _ in range(10):
        window.record("busy")
    decision = Arbiter(window=window).decide({"busy": 0.9, "idle": 0.1}, top_k=1, record=False)
    assert decision.chosen == ["busy"]


def test_an_expert_over_capacity_is_skipped_to_the_next_but_stays_in_the_failover_list():
    window = LoadWindow(10)
    for _ in range(7):
        window.record("a")
    arbiter = Arbiter(window=window, load_penalty=0.0, capacity=0.6)
    decision = arbiter.decide({"a": 0.7, "b": 0.2, "c": 0.1}, top_k=2)
    assert decision.chosen == ["b", "c"]
    assert [e for e, _ in decision.ranked] == ["b", "c", "a"]  # "a" skipped to the end
    assert window.load_array(["b"]).tolist() == [0.1]  # the choice that was served is what the window records


def test_capacity_is_ignored_when_every_expert_is_over_it():
    window = LoadWindow(4)
    for expert in ["a", "a", "b", "b"]:
        window.record(expert)
    decision = Arbiter(window=window, load_penalty=0.0, capacity=0.25).decide({"a": 0.6, "b": 0.4}, top_k=1, record=False)
    assert decision.chosen == ["a"]
    assert [e for e, _ in decision.ranked] == ["a", "b"]  # none skipped


def test_below_the_threshold_the_decision_abstains_and_records_no_load():
    window = LoadWindow(10)
    arbiter = Arbiter(window=window, abstain_threshold=0.5)
    low = arbiter.decide({"a": 0.6, "b": 0.4}, top_k=2, score=0.3)
    high = arbiter.decide({"a": 0.6, "b": 0.4}, top_k=2, score=0.7)
    assert low.abstained
    assert [e for e, _ in low.ranked] == ["a", "b"]
    assert not high.abstained
    assert window.load_array(["a", "b"]).tolist() == [0.1, 0.0]  # one record


@pytest.mark.parametrize("top_k", [0, 4])
def test_top_k_outside_one_to_three_is_refused(top_k):
    with pytest.raises(ValueError, match="top_k"):
        Arbiter().decide({"a": 1.0}, top_k=top_k)


def test_no_experts_is_refused():
    with pytest.raises(ValueError, match="no experts"):
        Arbiter().decide({}, top_k=1)


def test_lambda_is_015_below_200_experts_and_shrinks_above():
    assert default_load_penalty(10) == 0.15
    assert default_load_penalty(199) == 0.15
    assert default_load_penalty(400) == pytest.approx(0.075)
