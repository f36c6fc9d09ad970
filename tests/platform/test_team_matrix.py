"""The cross-team matrix: every URL of the project and every path and method of the API schema, asked by
seven principals against team B's marked data (the ``team_world`` of tests/platform/conftest.py).

``ROWS`` holds one row per URL name: how to fill its parameters with B's objects, what a write sends,
whether the request names one of B's objects, and who may open it. A URL pattern (from the
resolver, less admin/ and static) or an API path and method (from the OpenAPI schema) without a row
fails ``test_every_url_and_every_api_method_has_a_row``.

- Team A's side (anonymous, alice, A's key, A's key after its user left team A, a revoked key): no
  answer is a server error; none shows a ``MARK-B-`` marker (streams are read to the end) nor, on
  the API, the slug of B's expert when the request did not name it; a request that names one of
  B's objects is refused (400, 401, 403, 404 or 405; a console page sends a caller without a
  session to sign in); B's rows are the same after all of their writes, and B's expert was never
  searched.
- B's side (bob, staff): no server error, and B's pages open (200).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from tests.support.routes import api_operations, route_shape, url_patterns

A_SIDE = ["anonymous", "alice", "a_key", "a_key_after_removal", "revoked_key"]
B_SIDE = ["bob", "sam"]
REFUSED = {400, 401, 403, 404, 405}
QUESTION = "when does the bravo office open"
CONVERSATION = "conv_bob_payroll"  # bob's (tests/platform/conftest.py)


@dataclass(frozen=True)
class Ask:
    """One write's body; ``names_b`` overrides the row's (whether it names one of B's objects)."""

    label: str
    data: dict[str, Any] = field(default_factory=dict)
    json: bool = False
    names_b: bool | None = None


@dataclass(frozen=True)
class Row:
    """How the matrix asks one URL name.

    ``fill`` gives the URL's parameters: one dict per object asked for, B's where it takes one (a dict
    with ``"names_b": False`` names one of A's own, read for what it may show of B's). ``names_b``:
    the URL names one of B's objects, so A's side is refused. ``public``: open to anyone by design.
    ``api``: refusals are statuses, never a redirect to sign in. ``methods``: what is sent (the
    schema's methods must be among them). ``bodies``: what a write sends (default: one empty form).
    ``opens``: who GETs B's object with 200. ``query``: appended to GETs. ``signs_out``: the client
    signs in again after it.
    """

    fill: Callable[[Any], list[dict[str, Any]]] = lambda w: [{}]
    names_b: bool = False
    public: bool = False
    api: bool = False
    methods: tuple[str, ...] = ("get", "post")
    bodies: Callable[[Any], list[Ask]] | None = None
    opens: tuple[str, ...] = ()
    query: Callable[[Any], str] = lambda w: ""
    signs_out: bool = False


def b_slug(w) -> list[dict[str, Any]]:
    return [{"slug": w.b_expert.slug}]


def b_jobs(w) -> list[dict[str, Any]]:
    return [{"pk": job.pk} for job in w.b_jobs.values()]


def b_events(w) -> list[dict[str, Any]]:
    return [{"request_id": w.b_answered.request_id}, {"request_id": w.b_unanswered.request_id}]


def b_run(w) -> list[dict[str, Any]]:
    return [{"pk": w.b_run.pk}]


def b_proposal(w) -> list[dict[str, Any]]:
    return [{"pk": w.b_proposals[0].pk}]


def a_proposals(w) -> list[dict[str, Any]]:
    return [{"pk": pk} for pk in w.a_run.proposals.order_by("pk").values_list("pk", flat=True)]


def and_a_own(fill: Callable[[Any], list[dict[str, Any]]], own: Callable[[Any], list[dict[str, Any]]]) -> Callable[[Any], list[dict[str, Any]]]:
    """``fill``'s objects of B's, then A's own objects ``own`` gives (read for what they may show of B's)."""
    return lambda w: fill(w) + [{**kwargs, "names_b": False} for kwargs in own(w)]


def a_file(name: str = "payroll.csv") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, b"text\nhow do I read my payslip\n", content_type="text/csv")


def _messages(content: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content}]


def chat_bodies(w) -> list[Ask]:
    return [
        Ask("names b-desk", {"model": "b-desk", "messages": _messages(QUESTION)}, json=True, names_b=True),
        Ask("names b-desk, streamed", {"model": "b-desk", "messages": _messages(QUESTION), "stream": True}, json=True, names_b=True),
        Ask("continues bob's conversation", {"model": "auto", "messages": _messages(QUESTION), "conversation_id": CONVERSATION}, json=True, names_b=True),
        Ask("continues bob's conversation, streamed", {"model": "auto", "messages": _messages(QUESTION), "conversation_id": CONVERSATION, "stream": True},
            json=True, names_b=True),
        Ask("continues bob's conversation in metadata", {"model": "auto", "messages": _messages(QUESTION), "metadata": {"conversation_id": CONVERSATION}},
            json=True, names_b=True),
        Ask("asks what b-desk answers", {"model": "auto", "messages": _messages(QUESTION)}, json=True),
        Ask("asks what b-desk answers, streamed", {"model": "auto:fast", "messages": _messages(QUESTION), "stream": True}, json=True),
        Ask("asks accurately", {"model": "auto:accurate", "messages": _messages(QUESTION)}, json=True),
    ]


def playground_bodies(w) -> list[Ask]:
    return [
        Ask("asks b-desk", {"question": QUESTION, "mode": "b-desk"}, names_b=True),
        Ask("continues bob's conversation", {"question": QUESTION, "mode": "auto", "conversation_id": CONVERSATION}, names_b=True),
        Ask("asks what b-desk answers", {"question": QUESTION, "mode": "auto"}),
    ]


def feedback_bodies(w) -> list[Ask]:
    return [
        Ask("on bob's answer", {"response_id": w.b_answered.request_id, "rating": "up", "comment": "fine"}, json=True, names_b=True),
        Ask("on B's unanswered question", {"response_id": w.b_unanswered.request_id, "rating": "down"}, json=True, names_b=True),
        Ask("on bob's answer, wrong expert", {"response_id": w.b_answered.request_id, "rating": "down", "suggested_expert": "a-desk"}, json=True,
            names_b=True),
    ]


def review_bodies(w) -> list[Ask]:
    rid = w.b_unanswered.request_id
    return [
        Ask("dismisses B's question", {"request_id": rid, "dismiss": "on"}, names_b=True),
        Ask("labels B's question to b-desk", {"request_id": rid, "expert": "b-desk"}, names_b=True),
        Ask("labels B's question to a-desk", {"request_id": rid, "expert": "a-desk"}, names_b=True),
        # The bulk form answers every caller with a redirect back to the queue (and a message); its write is what is checked.
        Ask("bulk-labels B's questions", {"bulk": "1", "selected": f"{rid},{w.b_answered.request_id}", "expert": "a-desk"}),
    ]


ROWS: dict[str, Row] = {
    # Probes, metrics (served to this machine: the test client is 127.0.0.1) and the API's documentation.
    "healthz": Row(public=True, api=True),
    "readyz": Row(public=True, api=True),
    "metrics": Row(public=True, api=True),
    "schema": Row(public=True, api=True),
    "api-docs": Row(public=True, api=True),
    # Signing in and out.
    "login": Row(public=True),
    "logout": Row(public=True, signs_out=True),
    "password_change": Row(),
    "password_change_done": Row(),
    # The OpenAI-compatible API and the REST API.
    "chat-completions": Row(api=True, bodies=chat_bodies),
    "models": Row(api=True),
    "route": Row(api=True, bodies=lambda w: [Ask("routes a bravo question", {"question": QUESTION, "top_k": 3}, json=True),
                                             Ask("routes with context", {"question": "and the payslips?", "context": [QUESTION]}, json=True)]),
    "feedback": Row(api=True, bodies=feedback_bodies),
    "api-job": Row(api=True, fill=b_jobs, names_b=True, opens=("bob", "sam")),
    "api-queries-import": Row(api=True, bodies=lambda w: [Ask("imports for team B", {"file": a_file(), "team": w.team_b.pk}, names_b=True)]),
    "api-expert-documents": Row(api=True, fill=b_slug, names_b=True, opens=("bob", "sam"),
                                bodies=lambda w: [Ask("uploads to b-desk", {"files": a_file("notes.txt")})]),
    "api-expert-document": Row(api=True, fill=lambda w: [{"slug": w.b_expert.slug, "pk": w.b_document.pk}], names_b=True,
                               methods=("get", "post", "delete"), opens=("bob", "sam")),
    "api-expert-adapter": Row(api=True, fill=b_slug, names_b=True, opens=("sam",)),
    "api-expert-adapter-register": Row(api=True, fill=b_slug, names_b=True),
    # Console pages that span apps.
    "console-overview": Row(),
    "console-playground": Row(bodies=playground_bodies),
    "console-playground-answer": Row(bodies=playground_bodies),
    "console-playground-stream": Row(bodies=playground_bodies),
    "console-heatmap": Row(),
    "console-heatmap-data": Row(query=lambda w: "?window=7d"),
    "console-review": Row(bodies=review_bodies),
    "console-traces": Row(query=lambda w: "?q=payslips"),
    "console-trace": Row(fill=and_a_own(b_events, lambda w: [{"request_id": w.a_answered.request_id}]), names_b=True, opens=("bob", "sam")),
    "console-trace-feedback": Row(fill=b_events, names_b=True, bodies=lambda w: [Ask("thumbs down", {"verdict": "down", "comment": "wrong"}),
                                                                                  Ask("wrong expert", {"verdict": "wrong_expert", "right_expert": "a-desk"})]),
    "console-experts": Row(),
    "console-expert": Row(fill=b_slug, names_b=True, opens=("bob", "sam")),
    "console-expert-fallback": Row(fill=b_slug, names_b=True, bodies=lambda w: [Ask("makes it the fallback", {"fallback": "on"})]),
    "console-expert-public": Row(fill=b_slug, names_b=True, bodies=lambda w: [Ask("makes it public", {"public": "on"})]),
    "console-jobs": Row(),
    "console-job-rows": Row(),
    "console-job": Row(fill=b_jobs, names_b=True, opens=("bob", "sam")),
    "console-job-body": Row(fill=b_jobs, names_b=True, opens=("bob", "sam")),
    "console-job-retry": Row(fill=b_jobs, names_b=True),
    "console-job-cancel": Row(fill=b_jobs, names_b=True),
    "console-keys": Row(),
    "console-key-create": Row(bodies=lambda w: [Ask("scopes a key to b-desk", {"name": "reach b", "scopes": ["b-desk"], "rate_limit_per_minute": 0},
                                                    names_b=True)]),
    "console-key-revoke": Row(fill=lambda w: [{"pk": w.b_key.pk}], names_b=True, opens=("bob", "sam")),
    "console-audit": Row(),
    "console-teams": Row(bodies=lambda w: [Ask("creates a team", {"name": "A's own team"})]),
    "console-team": Row(fill=lambda w: [{"pk": w.team_b.pk}], names_b=True, opens=("sam",),
                        bodies=lambda w: [Ask("joins team B", {"action": "add", "username": "alice"}), Ask("removes bob", {"action": "remove", "username": "bob"})]),
    # Router training: platform-wide, so open to every signed-in user; B's data must not show on it.
    "console-training": Row(),
    "console-training-start": Row(),
    "console-training-compare": Row(query=lambda w: f"?a={w.training_run.pk}&b={w.training_run.pk}"),
    "console-training-run": Row(fill=lambda w: [{"pk": w.training_run.pk}], opens=("bob", "sam")),
    "console-training-curves": Row(fill=lambda w: [{"pk": w.training_run.pk}], opens=("bob", "sam")),
    "console-training-activate": Row(fill=lambda w: [{"pk": w.training_run.pk}]),
    # Experiments, schedules and alarms.
    "console-experiments": Row(bodies=lambda w: [Ask("tests b-desk", {
        "kind": "expert", "expert": "b-desk", "name": "A's test", "control_version": 1, "treatment_version": 2, "split": 0.5,
        "unit": "conversation", "primary_metric": "thumbs_up_rate", "design": "sequential", "baseline": 0.6, "min_effect": 0.2, "alpha": 0.05,
        "power": 0.8}, names_b=True)]),
    "console-experiment": Row(fill=lambda w: [{"pk": w.b_experiment.pk}], names_b=True, opens=("bob", "sam")),
    "console-experiment-action": Row(fill=lambda w: [{"pk": w.b_experiment.pk, "action": a} for a in ("start", "delete")], names_b=True),
    "console-schedules": Row(),
    "console-schedule-edit": Row(fill=lambda w: [{"pk": w.schedule_pk}]),
    "console-schedule-run": Row(fill=lambda w: [{"name": w.schedule_name}]),
    "console-alarms": Row(),
    "console-alarm-ack": Row(fill=lambda w: [{"pk": w.b_alarm.pk}], names_b=True),
    # An expert's adapters and training data.
    "expert-adapters": Row(fill=b_slug, names_b=True, opens=("bob", "sam")),
    "expert-adapters-train": Row(fill=b_slug, names_b=True),
    "expert-adapters-prompt": Row(fill=b_slug, names_b=True, bodies=lambda w: [Ask("replaces the prompt", {
        "system_prompt": "Answer as team A says.", "citation_format": "[{index}]", "activate": "on"})]),
    "expert-version-activate": Row(fill=lambda w: [{"slug": w.b_expert.slug, "version": 2}], names_b=True),
    "expert-training-data": Row(fill=b_slug, names_b=True, opens=("bob", "sam")),
    "expert-training-data-add": Row(fill=b_slug, names_b=True, bodies=lambda w: [Ask("adds an example", {
        "question": "how do I read my payslip", "answer": "Ask team A.", "split": "train"})]),
    "expert-training-data-import": Row(fill=b_slug, names_b=True, bodies=lambda w: [Ask("imports examples", {"file": a_file("examples.jsonl")})]),
    "expert-training-data-delete": Row(fill=lambda w: [{"slug": w.b_expert.slug, "pk": w.b_example.pk}], names_b=True),
    "expert-training-data-grounded": Row(fill=b_slug, names_b=True),
    # Discovery.
    "labeling-runs": Row(),
    "labeling-start": Row(bodies=lambda w: [Ask("clusters team B's queries", {"team": w.team_b.pk, "eps": 0.3, "min_samples": 2, "n_experts": 2},
                                                names_b=True)]),
    "labeling-import": Row(bodies=lambda w: [Ask("imports for team B", {"file": a_file(), "team": w.team_b.pk}, names_b=True)]),
    "labeling-new-department": Row(bodies=lambda w: [Ask("makes a department for team B", {"department-name": "Made by A", "department-team": w.team_b.pk},
                                                         names_b=True)]),
    "labeling-run": Row(fill=and_a_own(b_run, lambda w: [{"pk": w.a_run.pk}]), names_b=True, opens=("bob", "sam")),
    "labeling-unassigned": Row(fill=and_a_own(b_run, lambda w: [{"pk": w.a_run.pk}]), names_b=True, opens=("bob", "sam")),
    "labeling-merge": Row(fill=b_run, names_b=True, bodies=lambda w: [Ask("merges B's proposals", {"proposals": [p.pk for p in w.b_proposals]})]),
    "labeling-move": Row(fill=b_run, names_b=True, bodies=lambda w: [Ask("moves B's queries", {"target": "none", "queries": ""})]),
    "labeling-detach-noise": Row(fill=b_run, names_b=True),
    "labeling-attach-noise": Row(fill=b_run, names_b=True, bodies=lambda w: [Ask("attaches noise", {"max_distance": 1.0})]),
    "labeling-undo": Row(fill=b_run, names_b=True),
    "labeling-finish": Row(fill=b_run, names_b=True),
    "labeling-discard-run": Row(fill=b_run, names_b=True, bodies=lambda w: [Ask("discards B's run", {"confirm": "yes"})]),
    "labeling-proposal-queries": Row(fill=and_a_own(b_proposal, a_proposals), names_b=True, opens=("bob", "sam")),
    "labeling-rename": Row(fill=and_a_own(b_proposal, a_proposals), names_b=True, bodies=lambda w: [Ask("renames it", {"name": "Renamed by A"})]),
    "labeling-split": Row(fill=b_proposal, names_b=True, bodies=lambda w: [Ask("splits it", {"k": 2})]),
    "labeling-discard": Row(fill=and_a_own(b_proposal, a_proposals), names_b=True),
    "labeling-promote": Row(fill=b_proposal, names_b=True, bodies=lambda w: [Ask("promotes it for team A", {
        "name": "Payroll by A", "description": "A's now", "team": w.team_a.pk})]),
    # Discovery through the API: the console's pages and buttons, one endpoint each.
    "api-experts": Row(api=True, methods=("post",), bodies=lambda w: [Ask("makes a department for team B", {"name": "Made by A", "team": w.team_b.name},
                                                                          json=True, names_b=True)]),
    "api-discovery-runs": Row(api=True, bodies=lambda w: [Ask("clusters team B's queries", {"team": w.team_b.name, "n_experts": 2}, json=True,
                                                                  names_b=True)]),
    "api-discovery-run": Row(api=True, fill=and_a_own(b_run, lambda w: [{"pk": w.a_run.pk}]), names_b=True, methods=("get",), opens=("bob", "sam")),
    "api-discovery-unassigned": Row(api=True, fill=and_a_own(b_run, lambda w: [{"pk": w.a_run.pk}]), names_b=True, methods=("get",),
                                    opens=("bob", "sam")),
    "api-discovery-merge": Row(api=True, fill=b_run, names_b=True, methods=("post",),
                               bodies=lambda w: [Ask("merges B's proposals", {"proposals": [p.pk for p in w.b_proposals]}, json=True)]),
    "api-discovery-move": Row(api=True, fill=b_run, names_b=True, methods=("post",), bodies=lambda w: [Ask("moves B's queries", {
        "queries": list(w.b_run.assignments.values_list("query_id", flat=True)), "target": None}, json=True)]),
    "api-discovery-detach-noise": Row(api=True, fill=b_run, names_b=True, methods=("post",)),
    "api-discovery-attach-noise": Row(api=True, fill=b_run, names_b=True, methods=("post",),
                                      bodies=lambda w: [Ask("attaches noise", {"max_distance": 1.0}, json=True)]),
    "api-discovery-undo": Row(api=True, fill=b_run, names_b=True, methods=("post",)),
    "api-discovery-finish": Row(api=True, fill=b_run, names_b=True, methods=("post",)),
    "api-discovery-discard-run": Row(api=True, fill=b_run, names_b=True, methods=("post",)),
    "api-discovery-proposal": Row(api=True, fill=and_a_own(b_proposal, a_proposals), names_b=True, methods=("get",), opens=("bob", "sam")),
    "api-discovery-proposal-queries": Row(api=True, fill=and_a_own(b_proposal, a_proposals), names_b=True, methods=("get",), opens=("bob", "sam")),
    "api-discovery-rename": Row(api=True, fill=and_a_own(b_proposal, a_proposals), names_b=True, methods=("post",),
                                bodies=lambda w: [Ask("renames it", {"name": "Renamed by A"}, json=True)]),
    "api-discovery-split": Row(api=True, fill=b_proposal, names_b=True, methods=("post",), bodies=lambda w: [Ask("splits it", {"k": 2}, json=True)]),
    "api-discovery-discard": Row(api=True, fill=and_a_own(b_proposal, a_proposals), names_b=True, methods=("post",)),
    "api-discovery-promote": Row(api=True, fill=b_proposal, names_b=True, methods=("post",), bodies=lambda w: [Ask("promotes it for team A", {
        "name": "Payroll by A", "description": "A's now", "team": w.team_a.name}, json=True)]),
    # Router training and experiments through the API (training and activating: staff; B's experts counted, not named).
    "api-router-train": Row(api=True, methods=("post",), bodies=lambda w: [Ask("trains a candidate", {"activation": "never", "epochs": 1}, json=True)]),
    "api-router-versions": Row(api=True, methods=("get",)),
    "api-router-version": Row(api=True, fill=lambda w: [{"version": w.training_run.router_version.version}], methods=("get",)),
    "api-router-activate": Row(api=True, fill=lambda w: [{"version": w.training_run.router_version.version}], methods=("post",)),
    "api-experiments": Row(api=True, bodies=lambda w: [Ask("tests b-desk", {
        "kind": "expert", "expert": "b-desk", "name": "A's test", "control_version": 1, "treatment_version": 2}, json=True, names_b=True)]),
    "api-experiment": Row(api=True, fill=lambda w: [{"pk": w.b_experiment.pk}], names_b=True, methods=("get",), opens=("bob", "sam")),
    "api-experiment-action": Row(api=True, fill=lambda w: [{"pk": w.b_experiment.pk, "action": a} for a in ("start", "delete")], names_b=True,
                                 methods=("post",)),
    # Knowledge bases.
    "knowledge-list": Row(),
    "knowledge-reembed": Row(),
    "knowledge-expert": Row(fill=b_slug, names_b=True, opens=("bob", "sam")),
    "knowledge-upload": Row(fill=b_slug, names_b=True, bodies=lambda w: [Ask("uploads to b-desk", {"files": a_file("notes.txt")})]),
    "knowledge-search": Row(fill=b_slug, names_b=True, opens=("bob", "sam")),
    "knowledge-chunking": Row(fill=b_slug, names_b=True, bodies=lambda w: [Ask("re-chunks it", {"chunk_size": 500, "chunk_overlap": 50})]),
    "knowledge-index": Row(fill=b_slug, names_b=True),
    "knowledge-rebuild": Row(fill=b_slug, names_b=True),
    "knowledge-drop": Row(fill=b_slug, names_b=True),
    "knowledge-delete": Row(fill=lambda w: [{"slug": w.b_expert.slug, "pk": w.b_document.pk}], names_b=True),
}


# --- what the matrix covers --------------------------------------------------------------------------

@dataclass(frozen=True)
class Request:
    name: str
    row: Row
    method: str
    url: str
    ask: Ask | None
    url_names_b: bool

    @property
    def names_b(self) -> bool:
        return self.url_names_b if self.ask is None or self.ask.names_b is None else self.ask.names_b

    def __str__(self) -> str:
        return f"{self.method.upper()} {self.url} ({self.name}{', ' + self.ask.label if self.ask else ''})"


def requests(world) -> list[Request]:
    """Every request of the matrix: all GETs first, then the writes (a write may remove what a GET reads)."""
    reads, writes = [], []
    for name, row in ROWS.items():
        for kwargs in row.fill(world):
            names_b = kwargs.pop("names_b", row.names_b)
            url = reverse(name, kwargs=kwargs or None)
            for method in row.methods:
                if method == "get":
                    reads.append(Request(name, row, method, url + row.query(world), None, names_b))
                elif method == "post" and row.bodies is not None:
                    writes += [Request(name, row, method, url, ask, names_b) for ask in row.bodies(world)]
                else:
                    writes.append(Request(name, row, method, url, None, names_b))
    # Signing out goes last: the rest of the matrix asks with the session.
    return reads + sorted(writes, key=lambda r: r.row.signs_out)


def send(client, request: Request) -> tuple[Any, bytes]:
    """Send ``request``; the response and everything it said (headers and body, a stream read to its end)."""
    ask = request.ask
    call = getattr(client, request.method)
    if ask is None:
        response = call(request.url)
    elif ask.json:
        response = call(request.url, data=json.dumps(ask.data), content_type="application/json")
    else:
        response = call(request.url, data=ask.data)
    body = b"".join(response.streaming_content) if getattr(response, "streaming", False) else response.content
    response.close()
    headers = "\n".join(f"{k}: {v}" for k, v in response.items()).encode()
    return response, headers + b"\n" + body


def _marker(said: bytes, marker: str) -> str:
    at = said.find(marker.encode())
    return said[max(0, at - 40) : at + 60].decode(errors="replace").replace("\n", " ")


def a_side_failures(world, principal: str, request: Request, response, said: bytes) -> list[str]:
    """What is wrong with the answer to one of team A's requests (nothing, for a right answer)."""
    status = response.status_code
    if status >= 500:
        return [f"{request}: {status}"]
    failures = []
    if world.marker.encode() in said:
        failures.append(f"{request}: {status} shows B's data to {principal}: ...{_marker(said, world.marker)}...")
    sent = request.url + (json.dumps(request.ask.data, default=str) if request.ask else "")
    if request.row.api and not request.row.public and world.b_expert.slug not in sent and world.b_expert.slug.encode() in said:
        failures.append(f"{request}: {status} names B's expert to {principal}: ...{_marker(said, world.b_expert.slug)}...")
    signed_in = principal in world.users
    if request.row.public:
        return failures
    if not request.row.api and not signed_in:
        if status != 302 or "/login/" not in response.get("Location", ""):
            failures.append(f"{request}: {status}, expected a redirect to sign in for {principal}")
    elif request.names_b and status not in REFUSED:
        failures.append(f"{request}: {status} for {principal}, expected a refusal of B's object")
    return failures


# --- the tests ---------------------------------------------------------------------------------------

def test_every_url_and_every_api_method_has_a_row(capsys):
    patterns = url_patterns()
    names = {name for _, name in patterns}
    missing = sorted({f"{route} (name: {name or 'none: name it'})" for route, name in patterns if name not in ROWS})
    stale = sorted(set(ROWS) - names)
    by_shape = {route_shape(route): name for route, name in reversed(patterns)}  # the first pattern of a route is the one that answers
    operations = api_operations()
    unrouted = [f"{method.upper()} {path}" for path, method in operations if route_shape(path) not in by_shape]
    unasked = [f"{method.upper()} {path} ({by_shape[route_shape(path)]})" for path, method in operations
               if route_shape(path) in by_shape and method not in ROWS.get(by_shape[route_shape(path)], Row(methods=())).methods]
    with capsys.disabled():
        print(f"\nteam matrix: {len(patterns)} URL patterns ({len(names)} names), {len(operations)} API path x methods")
    problems = [*(f"URL without a row: {m}" for m in missing), *(f"row of no URL: {s}" for s in stale),
                *(f"schema path no URL serves: {u}" for u in unrouted), *(f"schema method its row does not send: {u}" for u in unasked)]
    assert not problems, (
        "Every URL and every API path and method needs a row in ROWS of tests/platform/test_team_matrix.py, saying how to fill "
        "its parameters with team B's objects and what A and B may expect:\n" + "\n".join(problems)
    )


@pytest.mark.parametrize("principal", A_SIDE)
def test_team_a_sees_nothing_of_team_b_and_changes_none_of_its_rows(team_world, principal):
    before = team_world.snapshot()
    client = team_world.client(principal)
    failures: list[str] = []
    for request in requests(team_world):
        response, said = send(client, request)
        failures += a_side_failures(team_world, principal, request, response, said)
        if request.row.signs_out and principal in team_world.users:
            client.force_login(team_world.users[principal])
    after = team_world.snapshot()
    failures += [f"{principal} changed B's {name}: {before[name]} -> {after[name]}" for name in before if before[name] != after[name]]
    if "b-desk" in team_world.store.searched:
        failures.append(f"b-desk's knowledge base was searched for {principal}")
    assert not failures, f"{len(failures)} holes:\n" + "\n".join(failures)


@pytest.mark.parametrize("principal", B_SIDE)
def test_team_b_and_staff_open_team_bs_pages_and_nothing_fails(team_world, principal):
    client = team_world.client(principal)
    failures: list[str] = []
    for request in requests(team_world):
        response, _ = send(client, request)
        if response.status_code >= 500:
            failures.append(f"{request}: {response.status_code}")
        elif request.method == "get" and request.names_b and principal in request.row.opens and response.status_code != 200:
            failures.append(f"{request}: {response.status_code} for {principal}, expected 200")
        if request.row.signs_out:
            client.force_login(team_world.users[principal])
    assert not failures, "\n".join(failures)
