"""Property tests for the chat payload serializer: any JSON body is accepted or refused with field errors, never a crash."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
