"""Property tests for the chat payload serializer: any JSON body is accepted or refused with field errors, never a crash."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework import serializers

from serving.api.serializers import ChatCompletionRequestSerializer, FeedbackRequestSerializer, RouteRequestSerializer

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool", "robot", 7])},
    optional={"content": st.one_of(st.text(max_size=50), st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"])},
                                                                                         optional={"text": JSON}), max_size=3), JSON)},
)
PAYLOAD = st.fixed_dictionaries({}, optional={
    "model": st.one_of(st.just("auto"), st.text(max_size=70), JSON),
    "messages": st.one_of(st.lists(MESSAGE, max_size=5), JSON),
    "stream": JSON, "stream_options": JSON, "temperature": JSON, "max_tokens": JSON, "user": JSON,
    "conversation_id": JSON, "metadata": JSON,
})


@FAST
@given(payload=st.one_of(PAYLOAD, JSON))
def test_any_chat_payload_is_valid_or_has_field_errors(payload):
    serializer = ChatCompletionRequestSerializer(data=payload)
    if serializer.is_valid():
        data = serializer.validated_data
        assert isinstance(data["question"], str)
        assert data["question"].strip()
        assert isinstance(data["history"], list)
        assert isinstance(data["conversation_id"], str)
    else:
        assert serializer.errors


@FAST
@given(question=st.text(min_size=1, max_size=200).filter(lambda s: s.strip()), history=st.lists(st.text(max_size=20), max_size=3))
def test_the_question_is_the_last_user_message(question, history):
    messages = [{"role": "user", "content": h or "x"} for h in history] + [{"role": "user", "content": question}, {"role": "assistant", "content": "ok"}]
    serializer = ChatCompletionRequestSerializer(data={"messages": messages})
    assert serializer.is_valid(), serializer.errors
    assert serializer.validated_data["question"] == question.strip()


@FAST
@given(payload=st.one_of(JSON, st.fixed_dictionaries({}, optional={"question": JSON, "top_k": JSON, "response_id": JSON, "rating": JSON, "comment": JSON})))
def test_route_and_feedback_payloads_are_valid_or_have_field_errors(payload):
    for serializer_class in (RouteRequestSerializer, FeedbackRequestSerializer):
        serializer = serializer_class(data=payload)
        assert serializer.is_valid() or serializer.errors


class _DeepCopied(ChatCompletionRequestSerializer):
    """DRF's own behaviour: every instance gets deep copies of the declared fields."""

    def get_fields(self):
        return serializers.Serializer.get_fields(self)


@FAST
@given(payload=st.one_of(PAYLOAD, JSON))
def test_shallow_copied_fields_validate_as_drfs_deep_copies_do(payload):
    lean, deep = ChatCompletionRequestSerializer(data=payload), _DeepCopied(data=payload)
    assert lean.is_valid() == deep.is_valid()
    assert lean.errors == deep.errors
    if not lean.errors:
        assert lean.validated_data == deep.validated_data


def test_each_instance_binds_its_own_fields_and_leaves_the_declared_ones_unbound():
    first, second = ChatCompletionRequestSerializer(data={}), ChatCompletionRequestSerializer(data={})
    assert first.fields["model"] is not second.fields["model"]
    assert first.fields["model"].parent is first
    assert second.fields["model"].parent is second
    declared = ChatCompletionRequestSerializer._declared_fields["model"]
    assert getattr(declared, "parent", None) is None
    assert declared.source is None


def test_concurrent_validations_keep_their_own_data_and_errors():
    def check(i: int) -> None:
        good = ChatCompletionRequestSerializer(data={"messages": [{"role": "user", "content": f"question {i}"}], "conversation_id": f"c{i}"})
        assert good.is_valid(), good.errors
        assert good.validated_data["question"] == f"question {i}"
        assert good.validated_data["conversation_id"] == f"c{i}"
        bad = ChatCompletionRequestSerializer(data={"messages": [{"role": "robot", "content": "x"}], "temperature": i + 3})
        assert not bad.is_valid()
        assert set(bad.errors) == {"messages", "temperature"}

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(check, range(400)))
