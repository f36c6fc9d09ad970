"""The vLLM backend: answers come from a vLLM OpenAI-compatible server with one LoRA adapter per expert.

vLLM runs as its own process (``manage.py serve_experts``); this module only speaks its HTTP API. Each
request's ``model`` is the expert's adapter name or ``VLLM_BASE_MODEL_NAME``; an unknown adapter (404)
is an ``AdapterError``, and serving then asks for the base model, so any one-model OpenAI-compatible
server works. Connection errors and 5xx are retried ``RETRIES`` times with backoff, never a 4xx or a
read timeout; anything unusable is a ``GenerationError``. With ``VLLM_SELECT`` answers are chosen as
in-process (``prompt_logprobs`` over this host's tokenizer). ``register`` loads an adapter into a
running server and never unloads one.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
from django.conf import settings

from experts.ml.citations import CitationStream
from experts.ml.extractive import NOT_FOUND, Answer, Passage
from experts.ml.lora_examples import Example
from experts.ml.prompting import LEAD_SENTENCE, PASSAGE_CHARS, SHOWN_PASSAGES, STOP_AT_PARAGRAPH, build_messages, parse_answer
from experts.ml.selection import DECODING, SHORTLIST, Selected, SelectionPlan, decide, plan_selection

from .base import AdapterError, AdapterRef, GenerationError, GenerationRequest, GenerationTimeout, GenerationUnavailable
from .extractive import scorer_spec
from .selecting import check_decoding, chosen_answer, kept_choices, selects, sentence_scorer, shown_passages, stream_chosen, weak

logger = logging.getLogger(__name__)

_RETRY_STATUSES = frozenset({500, 502, 503, 504})
# Retries of a connection error or a 5xx answer, the first after ``backoff_s``, each wait doubled: not a tuned
# figure, enough to ride out a server restarting its engine without holding a request for long.
RETRIES = 2


class VllmGenerator:
    """``Generator`` over a vLLM server; one instance per process (it keeps a connection pool)."""

    name = "vllm"

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout_s: float | None = None,
        retries: int | None = None,
        base_model_name: str | None = None,
        max_tokens: int | None = None,
        min_score: float | None = None,
        backoff_s: float = 0.25,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        decoding: str | None = None,
        lead_sentence: bool = LEAD_SENTENCE,
        tokenizer: Any = None,
    ):
        self.base_url = (base_url or settings.VLLM_URL).rstrip("/")
        self.timeout_s = float(timeout_s if timeout_s is not None else settings.VLLM_TIMEOUT_S)
        self.retries = max(0, int(retries if retries is not None else RETRIES))
        self.base_model_name = base_model_name if base_model_name is not None else (settings.VLLM_BASE_MODEL_NAME or settings.BASE_MODEL)
        self.max_tokens = int(max_tokens or settings.VLLM_MAX_TOKENS)
        # Below this best-passage score the answer is an honest "not found", as in the extractive backend.
        self.min_score = float(min_score if min_score is not None else settings.EXTRACTIVE_MIN_SCORE)
        self.backoff_s = backoff_s
        self._sleep = sleep
        # What the model is shown and how answers are chosen: as the in-process backend (generation.selecting);
        # chosen answers only where the server's LoRA path gives prompt log-probabilities (VLLM_SELECT)
        self.decoding = check_decoding(decoding if decoding is not None else DECODING if settings.VLLM_SELECT else "free")
        self.max_passages, self.passage_chars, self.lead_sentence = SHOWN_PASSAGES, PASSAGE_CHARS, bool(lead_sentence)
        self.select_shortlist, self.scorer_spec = SHORTLIST, scorer_spec()
        # the shortlist kept in the cut passages follows the adapters' training prompts (selection.DECODING), not VLLM_SELECT
        self.kept_choices = kept_choices(DECODING, self.select_shortlist)
        self.stop_at_paragraph = STOP_AT_PARAGRAPH
        self._tokenizer = tokenizer  # the base model's, for chosen answers; loaded on first use when None
        self._no_tokenizer = False  # set once loading it failed: answers are written freely
        self._max_len: dict[str, int] = {}  # served model -> its max_model_len (from /v1/models)
        key = api_key if api_key is not None else settings.VLLM_API_KEY
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        # A short connect timeout: a server that is down should fail over in well under a second.
        timeout = httpx.Timeout(self.timeout_s, connect=min(self.timeout_s, 3.0))
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout, transport=transport)

    # --- the Generator protocol ------------------------------------------------------------------

    def generate(self, request: GenerationRequest) -> Answer:
        if weak(request, self.min_score):
            return Answer(text=NOT_FOUND, citations=[], grounded=False)
        if self._selects(request):
            return chosen_answer(request, self.select(request), max_passages=self.max_passages, stop_at_paragraph=self.stop_at_paragraph,
                                 min_score=self.min_score)
        response = self._send("POST", "/v1/chat/completions", json=self.payload(request, stream=False), what=self._what(request),
                              adapter=request.adapter is not None)
        body = _json(response, "the chat completion")
        text = _content(body)
        return parse_answer(text, request.passages[: self.max_passages], citation_format=request.citation_format, min_score=self.min_score)

    def stream(self, request: GenerationRequest) -> Iterator[str | Answer]:
        """Text deltas from vLLM's server-sent events, then the parsed ``Answer``.

        Citation markers in the deltas are renumbered as ``parse_answer`` renumbers the final
        answer (in order of first citation, unknown passages dropped), holding back a marker
        split across two events, so ``[1]`` in the stream is ``citations[0]`` of the answer.
        """
        if weak(request, self.min_score):
            yield NOT_FOUND
            yield Answer(text=NOT_FOUND, citations=[], grounded=False)
            return
        if self._selects(request):
            yield from stream_chosen(request, self.select(request), max_passages=self.max_passages, stop_at_paragraph=self.stop_at_paragraph,
                                     min_score=self.min_score)
            return
        response = self._send("POST", "/v1/chat/completions", json=self.payload(request, stream=True), what=self._what(request),
                              adapter=request.adapter is not None, stream=True)
        parts: list[str] = []
        markers = CitationStream(request.passages[: self.max_passages], request.citation_format)
        try:
            for delta in _sse_deltas(response.iter_lines()):
                parts.append(delta)
                shown = markers.feed(delta)
                if shown:
                    yield shown
        except httpx.TimeoutException as exc:
            raise self._timeout(exc) from exc
        except httpx.TransportError as exc:
            raise GenerationUnavailable(f"the vLLM server at {self.base_url} broke the stream: {exc}") from exc
        finally:
            response.close()
        text = "".join(parts).strip()
        if not text:
            raise GenerationError(f"the vLLM server streamed an empty answer for {self._what(request)}")
        rest = markers.flush()
        if rest:
            yield rest
        yield parse_answer(text, request.passages[: self.max_passages], citation_format=request.citation_format, min_score=self.min_score)

    # --- the request -----------------------------------------------------------------------------

    def model_for(self, request: GenerationRequest) -> str:
        """The served model name: the expert's adapter, or the base model for an expert without one."""
        if request.adapter is not None:
            return request.adapter.name
        if not self.base_model_name:
            raise GenerationError(
                f"expert {request.expert!r} has no adapter and VLLM_BASE_MODEL_NAME is not set: "
                "set it to the base model's served name (the --model given to vLLM)"
            )
        return self.base_model_name

    def payload(self, request: GenerationRequest, *, stream: bool) -> dict[str, Any]:
        """The body of ``POST /v1/chat/completions`` (OpenAI's shape)."""
        messages = build_messages(
            request.question,
            self.shown(request),
            history=request.history,
            system_prompt=request.system_prompt,
            citation_format=request.citation_format,
        )
        return {
            "model": self.model_for(request),
            "messages": messages,
            "max_tokens": int(request.max_tokens or self.max_tokens),
            "temperature": float(request.temperature),
            "stream": stream,
        }

    def shown(self, request: GenerationRequest) -> list[Passage]:
        """The passages the model is shown, as the in-process backend shows them and the adapters learned from."""
        return shown_passages(request, max_passages=self.max_passages, passage_chars=self.passage_chars, lead_sentence=self.lead_sentence,
                              shortlist=self.kept_choices)

    # --- chosen answers ----------------------------------------------------------------------------

    def _selects(self, request: GenerationRequest) -> bool:
        return selects(self.decoding, request) and self.tokenizer() is not None

    def tokenizer(self) -> Any:
        """The base model's tokenizer (``BASE_MODEL`` on this host), or None where it cannot be read (logged once)."""
        if self._tokenizer is None and not self._no_tokenizer:
            from experts.ml.loading import resolve_base_model
            from experts.ml.lora_errors import LoraError

            base = settings.BASE_MODEL
            try:
                from transformers import AutoTokenizer

                self._tokenizer = AutoTokenizer.from_pretrained(resolve_base_model(base), local_files_only=True)
            except (LoraError, OSError, ValueError) as exc:
                self._no_tokenizer = True
                logger.warning("vllm.select_unavailable base_model=%s why=%s: answers are written freely (choosing them "
                               "needs the base model's tokenizer on this host)", base, exc)
        return self._tokenizer

    def select(self, request: GenerationRequest) -> Selected:
        """The option the served model rates best (``selection.plan_selection`` / ``decide``), scored by the server.

        One ``POST /v1/completions`` (``select_body``) holds the prompt followed by each option, as token
        ids; vLLM's ``prompt_logprobs`` give each option's tokens' log-probabilities.
        """
        plan, body = self.select_body(request)
        response = _json(self._send("POST", "/v1/completions", json=body, what=self._what(request)), "the completion")
        return decide(plan, _option_logprobs(response, len(plan.prompt), plan.continuations))

    def select_body(self, request: GenerationRequest) -> tuple[SelectionPlan, dict[str, Any]]:
        """The options to score (``selection.plan_selection``) and the completion request that scores them."""
        model = self.model_for(request)
        context = self._max_model_len(model)
        limit = context - int(request.max_tokens or self.max_tokens)
        if limit <= 0:
            raise GenerationError(f"max_tokens leaves no room for the prompt in the served model's context ({context} tokens)")
        example = Example(request.question, "", self.shown(request), request.system_prompt, request.citation_format,
                          whole=request.passages[: self.max_passages])
        plan = plan_selection(self.tokenizer(), example, limit, history=request.history, scorer=sentence_scorer(self.select_shortlist, self.scorer_spec),
                              scorer_question=request.search_question)
        prompts = [plan.prompt + c for c in plan.continuations]
        longest = max(len(p) for p in prompts)
        if longest > context:
            raise GenerationError(f"an answer option does not fit the served model's context ({longest} > {context} tokens)")
        return plan, {"model": model, "prompt": prompts, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}

    def _max_model_len(self, model: str) -> int:
        """The served model's context length, from its ``/v1/models`` card (2,048 when the card does not say)."""
        if model not in self._max_len:
            for card in self._models():
                if isinstance(card.get("max_model_len"), int):
                    self._max_len[card["id"]] = card["max_model_len"]
            self._max_len.setdefault(model, 2048)
        return self._max_len[model]

    def _what(self, request: GenerationRequest) -> str:
        return f"expert {request.expert!r} (model {self.model_for(request)!r})"

    # --- server administration ---------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``{"ok", "url", "models", "adapters", "error"}``; never raises (for /readyz and the console)."""
        try:
            self._send("GET", "/health", what="the health check", retry=False)
            cards = self._models()
        except GenerationError as exc:
            return {"ok": False, "url": self.base_url, "models": [], "adapters": [], "error": str(exc)}
        return {
            "ok": True,
            "url": self.base_url,
            "models": [c["id"] for c in cards],
            "adapters": [c["id"] for c in cards if c.get("parent")],
            "error": None,
        }

    def loaded_adapters(self) -> list[str]:
        """Names of the LoRA adapters the server serves now (``/v1/models`` cards with a parent)."""
        return [c["id"] for c in self._models() if c.get("parent")]

    def register(self, adapter: AdapterRef) -> bool:
        """Load ``adapter`` into the running server; True if loaded now, False if it already was.

        Raises:
            GenerationError: the server refused (runtime loading disabled, bad folder, base model
                mismatch) or is down; what was loaded before keeps serving.
        """
        body = {"lora_name": adapter.name, "lora_path": adapter.path}
        try:
            self._send("POST", "/v1/load_lora_adapter", json=body, what=f"adapter {adapter.name!r}")
        except GenerationError as exc:
            if "already been loaded" in str(exc):
                return False
            raise
        logger.info("vllm.adapter_registered name=%s path=%s", adapter.name, adapter.path)
        return True

    def unregister(self, name: str) -> bool:
        """Unload adapter ``name``; True if unloaded, False if the server did not have it."""
        try:
            self._send("POST", "/v1/unload_lora_adapter", json={"lora_name": name}, what=f"adapter {name!r}")
        except GenerationError as exc:
            if "cannot be found" in str(exc) or "not found" in str(exc).lower():
                return False
            raise
        logger.info("vllm.adapter_unregistered name=%s", name)
        return True

    def ensure_registered(self, adapter: AdapterRef) -> bool:
        """Register ``adapter`` unless ``/v1/models`` already lists it; True if it was loaded now."""
        if adapter.name in self.loaded_adapters():
            return False
        return self.register(adapter)

    def close(self) -> None:
        self._client.close()

    def _models(self) -> list[dict[str, Any]]:
        body = _json(self._send("GET", "/v1/models", what="the model list"), "the model list")
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or not all(isinstance(c, dict) and isinstance(c.get("id"), str) for c in data):
            raise GenerationError(f"the vLLM server's model list has no usable 'data' array: {_excerpt(json.dumps(body))}")
        return data

    # --- transport with retries --------------------------------------------------------------------

    def _send(self, method: str, path: str, *, what: str, json: Any = None, retry: bool = True, adapter: bool = False,
              stream: bool = False) -> httpx.Response:
        """The server's answer (``stream``: its body not read yet, for the caller to close); errors raised as their kind."""
        attempts = self.retries + 1 if retry else 1
        for attempt in range(attempts):
            try:
                response = self._client.send(self._client.build_request(method, path, json=json), stream=stream)
            except httpx.ConnectError as exc:
                if attempt + 1 >= attempts:
                    raise self._unavailable(exc, attempts) from exc
                self._backoff(attempt, "connection refused")
                continue
            except httpx.TimeoutException as exc:
                raise self._timeout(exc) from exc
            except httpx.TransportError as exc:
                raise GenerationUnavailable(f"the vLLM server at {self.base_url} broke the connection: {exc}") from exc
            if response.status_code in _RETRY_STATUSES and attempt + 1 < attempts:
                response.close()
                self._backoff(attempt, f"HTTP {response.status_code}")
                continue
            if response.status_code >= 400:
                response.read()
            _raise_for_status(response, what, adapter=adapter)
            return response
        raise AssertionError("unreachable")  # the loop returns or raises

    def _backoff(self, attempt: int, why: str) -> None:
        delay = self.backoff_s * (2**attempt)
        logger.warning("vllm.retry url=%s attempt=%d why=%s delay_s=%.2f", self.base_url, attempt + 1, why, delay)
        self._sleep(delay)

    def _unavailable(self, exc: Exception, attempts: int) -> GenerationUnavailable:
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        return GenerationUnavailable(f"the vLLM server at {self.base_url} is unreachable{tries}: {exc}")

    def _timeout(self, exc: Exception) -> GenerationTimeout:
        return GenerationTimeout(f"the vLLM server at {self.base_url} did not answer within {self.timeout_s:g} s ({type(exc).__name__})")


def register_for_serving(adapter: AdapterRef) -> bool:
    """Load ``adapter`` into the configured vLLM server before its version starts serving.

    Called when a version is activated with ``GENERATOR=vllm``: if vLLM is down or refuses the
    adapter this raises ``GenerationError`` and the caller keeps the previous version active, so
    no request is ever sent to an adapter vLLM does not have. True if it was loaded now.
    """
    generator = VllmGenerator()
    try:
        return generator.ensure_registered(adapter)
    finally:
        generator.close()


# --- parsing vLLM's answers ------------------------------------------------------------------------


def _excerpt(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _server_message(response: httpx.Response) -> str:
    """The error message in vLLM's body (OpenAI's ``{"error": {"message"}}`` or FastAPI's ``{"detail"}``)."""
    try:
        body = response.json()
    except ValueError:
        return _excerpt(response.text) or response.reason_phrase
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
        for key in ("message", "detail"):
            if body.get(key):
                return str(body[key])
    return _excerpt(json.dumps(body))


def _raise_for_status(response: httpx.Response, what: str, *, adapter: bool = False) -> None:
    """Raises what an error answer means; ``adapter``: the request named an adapter (a 404 is then an ``AdapterError``)."""
    status = response.status_code
    if status < 400:
        return
    message = _server_message(response)
    if status in (401, 403):
        raise GenerationError(f"the vLLM server refused the request for {what} (HTTP {status}): check VLLM_API_KEY ({message})")
    if status == 404 and response.request.url.path.endswith("_lora_adapter"):
        if "lora" not in message.lower():  # FastAPI's bare "Not Found": the route is not mounted
            raise GenerationError(
                "the vLLM server does not allow loading adapters at run time: start it with "
                f"VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (HTTP 404: {message})"
            )
        raise GenerationError(f"the vLLM server refused {what} (HTTP 404: {message})")
    if status == 404:
        raise (AdapterError if adapter else GenerationError)(
            f"the vLLM server does not serve {what} (HTTP 404: {message}); register the adapter "
            "(POST /api/v1/experts/<slug>/adapter/register) or restart vLLM with manage.py serve_experts"
        )
    if status >= 500:
        raise GenerationUnavailable(f"the vLLM server failed on {what} (HTTP {status}: {message})")
    raise GenerationError(f"the vLLM server rejected the request for {what} (HTTP {status}: {message})")


def _json(response: httpx.Response, what: str) -> Any:
    try:
        return response.json()
    except ValueError:
        raise GenerationError(f"the vLLM server answered {what} with something that is not JSON: {_excerpt(response.text)!r}") from None


def _content(body: Any) -> str:
    """The assistant's text in a chat completion, or a GenerationError saying what is missing."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices:
        raise GenerationError(f"the vLLM server's chat completion has no choices: {_excerpt(json.dumps(body))}")
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str):
        raise GenerationError(f"the vLLM server's chat completion has no message content: {_excerpt(json.dumps(body))}")
    if not content.strip():
        raise GenerationError("the vLLM server returned an empty answer")
    return content


def _option_logprobs(body: Any, start: int, continuations: list[list[int]]) -> list[tuple[float, int]]:
    """Each option's summed log-probability and length, read from a completion's ``prompt_logprobs``.

    Choice ``i`` holds prompt + option ``i``; its ``prompt_logprobs`` has one entry per prompt token
    (None for the first), mapping token ids (as strings in JSON) to ``{"logprob": ...}``.
    """
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or len(choices) != len(continuations):
        raise GenerationError(f"the vLLM server scored {len(choices) if isinstance(choices, list) else 'no'} of {len(continuations)} answer options")
    out: list[tuple[float, int] | None] = [None] * len(continuations)
    for position, choice in enumerate(choices):
        i = choice.get("index", position) if isinstance(choice, dict) else position
        entries = choice.get("prompt_logprobs") if isinstance(choice, dict) else None
        if not isinstance(i, int) or not 0 <= i < len(continuations) or not isinstance(entries, list) or len(entries) != start + len(continuations[i]):
            raise GenerationError("the vLLM server's completion has no usable prompt_logprobs (is it vLLM, and does it allow prompt_logprobs?): "
                                  f"{_excerpt(json.dumps(choice))}")
        total = 0.0
        for token, entry in zip(continuations[i], entries[start:], strict=True):
            value = entry.get(str(token), entry.get(token)) if isinstance(entry, dict) else None
            value = value.get("logprob") if isinstance(value, dict) else value
            if not isinstance(value, int | float):
                raise GenerationError(f"the vLLM server gave no log-probability for token {token} of answer option {i + 1}: {_excerpt(json.dumps(entry))}")
            total += float(value)
        out[i] = (total, len(continuations[i]))
    if any(o is None for o in out):
        raise GenerationError("the vLLM server scored one answer option twice and another not at all")
    return [o for o in out if o is not None]


def _sse_deltas(lines: Iterator[str]) -> Iterator[str]:
    """Text deltas from server-sent events (``data: {...}`` lines, ending with ``data: [DONE]``)."""
    done = False
    for line in lines:
        line = line.strip()
        if not line or line.startswith(":") or not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            done = True
            break
        try:
            event = json.loads(data)
        except ValueError:
            raise GenerationError(f"the vLLM server streamed an event that is not JSON: {_excerpt(data)!r}") from None
        if isinstance(event, dict) and "error" in event:
            raise GenerationError(f"the vLLM server failed mid-stream: {_excerpt(json.dumps(event['error']))}")
        choices = event.get("choices") if isinstance(event, dict) else None
        if not isinstance(choices, list):
            raise GenerationError(f"the vLLM server streamed an event without choices: {_excerpt(data)}")
        if not choices:
            continue  # a usage-only event
        delta = choices[0].get("delta") or {}
        text = delta.get("content") if isinstance(delta, dict) else None
        if text:
            yield text
    if not done:
        raise GenerationUnavailable("the vLLM server closed the stream before [DONE]")
