"""A routed, cited chat answer as ``serving.chat`` returns it, for the console tests (not a test module)."""

from serving import chat, route


def fake_result(question: str = "How do I renew my licence?") -> chat.ChatResult:
    decision = route.Decision(
        experts=[{"slug": "dmv", "score": 0.91}, {"slug": "ssa", "score": 0.07}], router_version=3, embed_ms=12.5, route_ms=0.8,
    )
    passage = {
        "index": 1, "title": "Renewing a driver's license", "text": "You can renew online up to 6 months before it expires.",
        "url": "https://dmv.example.gov/renew", "score": 0.8123, "expert": "dmv", "document_id": 1, "chunk_id": "c1",
    }
    return chat.ChatResult(
        answer="You can renew online up to 6 months before it expires. [1]", expert="dmv", decision=decision,
        citations=[passage], passages=[passage, {**passage, "index": 2, "title": "Fees", "score": 0.41}], grounded=True,
        mode="auto", timings={"embed_ms": 12.5, "route_ms": 0.8, "retrieve_ms": 30.2, "generate_ms": 4.0, "total_ms": 47.5},
        request_id="chatcmpl-test",
    )
