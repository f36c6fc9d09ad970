"""Every console action of discovery, review, promotion, router training and experiments has a REST endpoint.

The console's actions are read from the code: each POST handler of the Discovery, training and experiment
pages and each review action kind a person performs. A new one without an entry in
``API_FOR`` (or whose endpoint is not a POST of the OpenAPI schema) fails here.
"""

from __future__ import annotations

from django.urls import URLPattern

import labeling.urls
import routing.experiments.urls
import routing.urls
from labeling.choices import ReviewActionKind
from routing.forms import TrainRouterForm
from tests.support.routes import api_operations, route_shape, url_patterns

# Console URL name -> the API URL name that does the same.
API_FOR = {
    "labeling-start": "api-discovery-runs",
    "labeling-import": "api-queries-import",
    "labeling-new-department": "api-experts",
    "labeling-merge": "api-discovery-merge",
    "labeling-move": "api-discovery-move",
    "labeling-detach-noise": "api-discovery-detach-noise",
    "labeling-attach-noise": "api-discovery-attach-noise",
    "labeling-undo": "api-discovery-undo",
    "labeling-finish": "api-discovery-finish",
    "labeling-discard-run": "api-discovery-discard-run",
    "labeling-rename": "api-discovery-rename",
    "labeling-split": "api-discovery-split",
    "labeling-discard": "api-discovery-discard",
    "labeling-promote": "api-discovery-promote",
    "console-training-start": "api-router-train",
    "console-training-activate": "api-router-activate",
    "console-experiments": "api-experiments",
    "console-experiment-action": "api-experiment-action",
}
# Review action kinds -> the console URL that performs them (ALIGN is scripted only: the demo's loader aligns with known labels).
CONSOLE_FOR_KIND = {
    ReviewActionKind.RENAME: "labeling-rename", ReviewActionKind.MERGE: "labeling-merge", ReviewActionKind.SPLIT: "labeling-split",
    ReviewActionKind.DISCARD: "labeling-discard", ReviewActionKind.MOVE: "labeling-move", ReviewActionKind.DETACH_NOISE: "labeling-detach-noise",
    ReviewActionKind.ATTACH_NOISE: "labeling-attach-noise", ReviewActionKind.PROMOTE: "labeling-promote", ReviewActionKind.FINISH: "labeling-finish",
    ReviewActionKind.DISCARD_RUN: "labeling-discard-run",
}
SCRIPTED_KINDS = {ReviewActionKind.ALIGN}


def console_actions() -> set[str]:
    """The URL names of the console pages of discovery, router training and experiments that take a POST."""
    patterns = [*labeling.urls.urlpatterns, *routing.urls.urlpatterns, *routing.experiments.urls.urlpatterns]
    return {p.name for p in patterns if isinstance(p, URLPattern) and hasattr(p.callback.view_class, "post")}


def test_every_console_action_has_an_api_endpoint_in_the_schema():
    actions = console_actions()
    routes = {name: route_shape(route) for route, name in url_patterns()}
    posts = {route_shape(path) for path, method in api_operations() if method == "post"}
    without = sorted(actions - set(API_FOR))
    undocumented = sorted(api for api in API_FOR.values() if routes.get(api) not in posts)

    assert {"labeling-merge", "console-training-activate", "console-experiment-action"} <= actions  # the walk finds the console's actions
    assert not without, f"console actions without an API endpoint (add one, and its row in API_FOR): {without}"
    assert not undocumented, f"API endpoints missing from the OpenAPI schema as a POST: {undocumented}"


def test_every_review_action_kind_a_person_performs_is_a_console_action_with_an_endpoint():
    kinds = set(ReviewActionKind) - SCRIPTED_KINDS

    assert kinds == set(CONSOLE_FOR_KIND), f"review action kinds without a console URL here: {sorted(kinds - set(CONSOLE_FOR_KIND))}"
    assert set(CONSOLE_FOR_KIND.values()) <= console_actions()
    assert set(CONSOLE_FOR_KIND.values()) <= set(API_FOR)


def test_the_api_documents_every_activation_policy_of_the_consoles_training_form():
    from drf_spectacular.generators import SchemaGenerator

    schemas = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    activation = schemas["TrainRouter"]["properties"]["activation"]["allOf"][0]["$ref"]
    enum = schemas[activation.rsplit("/", 1)[1]]["enum"]

    assert set(enum) == {value for value, _ in TrainRouterForm.base_fields["activation"].choices}
