"""The in-process LLM backend: one base model, many LoRA adapters, switched per request.

``GENERATOR=transformers`` loads ``BASE_MODEL`` once per process and experts' adapters on demand into
one ``PeftModel`` (at most ``ADAPTER_CACHE_SIZE``, least recently used out). Switching and generating
hold the model's ``GenerationQueue``: one request at a time, at most ``GENERATION_QUEUE_MAX`` waiting
(``GenerationBusy`` past it). Past ``GENERATION_TIMEOUT_S`` the model stops: a whole answer raises
``GenerationTimeout``, a streamed one ends with ``finish_reason="time_budget"``. The prompt shows the
best passages cut to their most relevant characters (``prompting.focus``), and the state after the
system message is cached per adapter (``_prefix_cache``): the prompt's length is most of the wait.
"""

from __future__ import annotations

import copy
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from experts.ml.citations import paragraph_ends_answer, parse_answer
from experts.ml.extractive import NOT_FOUND, Answer, Passage
from experts.ml.loading import bf16_native, check_adapter, load_base, same_base
from experts.ml.lora_errors import LoraError
from experts.ml.lora_examples import Example, fit_prompt, render_prompt
from experts.ml.prompting import LEAD_SENTENCE, PASSAGE_CHARS, SHOWN_PASSAGES, STOP_AT_PARAGRAPH, STOPS, build_messages
from experts.ml.selection import DECODING, SHORTLIST, Selected, SentenceScorer

from .base import (
    AdapterError,
    AdapterMismatch,
    AdapterRef,
    GenerationError,
    GenerationRequest,
    GenerationTimeout,
    GenerationUnavailable,
)
from .queue import GenerationQueue
from .selecting import (
    check_decoding,
    chosen_answer,
    citation_stream,
    kept_choices,
    selects,
    sentence_scorer,
    shown_passages,
    stream_chosen,
    weak,
)

logger = logging.getLogger(__name__)

BROKEN_ADAPTER_RETRY_S = 300.0  # a broken adapter folder is looked at again after this long (it may have been fixed)
PREFIX_CACHE_SIZE = 16  # (adapter, system prompt) pairs whose prompt prefix state is kept (~6 MB each for a 135M model)
MIN_PREFIX_TOKENS = 16  # shorter shared prefixes are not worth a cache entry


@dataclass(frozen=True)
class GeneratorConfig:
    """What the in-process backend is told: the operator's settings and the tuned constants of ``experts.ml``.

    It has no defaults of its own: ``from_settings`` fills every field, and its keyword arguments replace
    single fields (tests and evaluations vary them).
    """

    base_model: str  # BASE_MODEL
    cache_size: int  # ADAPTER_CACHE_SIZE: adapters kept loaded
    max_tokens: int  # GENERATOR_MAX_TOKENS: the longest written answer
    min_score: float  # EXTRACTIVE_MIN_SCORE: below it "not found", without asking the model
    queue_max: int  # GENERATION_QUEUE_MAX: requests that may wait for the model
    timeout_s: float  # GENERATION_TIMEOUT_S: an answer's time budget, waiting included
    threads: int | None  # TORCH_THREADS
    dtype: str  # GENERATION_DTYPE
    scorer_spec: str  # EXTRACTIVE_SENTENCE_SCORER: whose shortlist select decoding judges
    max_passages: int  # prompting.SHOWN_PASSAGES
    passage_chars: int  # prompting.PASSAGE_CHARS
    stop_at_paragraph: bool  # prompting.STOP_AT_PARAGRAPH
    lead_sentence: bool  # prompting.LEAD_SENTENCE
    decoding: str  # selection.DECODING
    select_shortlist: int  # selection.SHORTLIST (0: the model judges every sentence alone)

    @classmethod
    def from_settings(cls, **overrides: Any) -> GeneratorConfig:
        from django.conf import settings

        values = {
            "base_model": settings.BASE_MODEL, "cache_size": settings.ADAPTER_CACHE_SIZE, "max_tokens": settings.GENERATOR_MAX_TOKENS,
            "min_score": settings.EXTRACTIVE_MIN_SCORE, "queue_max": settings.GENERATION_QUEUE_MAX, "timeout_s": settings.GENERATION_TIMEOUT_S,
            # torch's threads are per process; TORCH_THREADS is this process's (threads on busy cores spin waiting for each other).
            "threads": settings.TORCH_THREADS, "dtype": settings.GENERATION_DTYPE, "scorer_spec": settings.EXTRACTIVE_SENTENCE_SCORER,
            "max_passages": SHOWN_PASSAGES, "passage_chars": PASSAGE_CHARS, "stop_at_paragraph": STOP_AT_PARAGRAPH,
            "lead_sentence": LEAD_SENTENCE, "decoding": DECODING, "select_shortlist": SHORTLIST,
        }
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"unknown generator options {sorted(unknown)}")
        return cls(**{**values, **overrides})


class TransformersGenerator:
    """Answers with ``base_model`` plus the request's LoRA adapter (or the bare base model)."""

    name = "transformers"

    def __init__(self, config: GeneratorConfig) -> None:
        if config.dtype not in ("auto", "float32", "bfloat16"):
            raise ValueError(f"GENERATION_DTYPE must be auto, float32 or bfloat16, not {config.dtype!r}")
        if config.select_shortlist < 0:
            raise ValueError(f"the select shortlist must be 0 or more sentences, not {config.select_shortlist}")
        self.config = config
        self.base_model, self.dtype, self.threads = config.base_model, config.dtype, config.threads
        self.cache_size = max(1, config.cache_size)
        self.max_tokens, self.min_score, self.timeout_s = config.max_tokens, config.min_score, config.timeout_s
        self.max_passages, self.passage_chars = max(1, config.max_passages), config.passage_chars
        self.stop_at_paragraph, self.lead_sentence = config.stop_at_paragraph, config.lead_sentence
        self.decoding = check_decoding(config.decoding)
        self.select_shortlist, self.scorer_spec = config.select_shortlist, config.scorer_spec
        self.queue = GenerationQueue(config.queue_max)
        self._tokenizer: Any = None
        self._base: Any = None
        self._peft: Any = None  # the PeftModel wrapping _base once an adapter is loaded
        self._loaded: OrderedDict[str, AdapterRef] = OrderedDict()  # LRU: oldest first
        self._broken: dict[str, tuple[float, str]] = {}  # adapter name -> (when it failed, why)
        self._prefixes: OrderedDict[tuple[str, tuple[int, ...]], Any] = OrderedDict()  # (adapter, ids) -> model state, LRU

    @classmethod
    def from_settings(cls, **overrides: Any) -> TransformersGenerator:
        """The backend as configured (``GeneratorConfig.from_settings``), with ``overrides`` of single fields."""
        return cls(GeneratorConfig.from_settings(**overrides))

    def sentence_scorer(self) -> SentenceScorer | None:
        """The scorer whose shortlist a chosen answer is picked from (``selection.SentenceScorer``, the
        extractive answer's, on the process's sentence encoder); None: the model judges every sentence alone."""
        return sentence_scorer(self.select_shortlist, self.scorer_spec)

    # --- loading (the caller holds the queue) ---------------------------------------------------

    @property
    def loaded_adapters(self) -> list[str]:
        """Names of the loaded adapters, least recently used first."""
        return list(self._loaded)

    def _ensure_base(self) -> None:
        if self._base is not None:
            return
        try:
            self._tokenizer, self._base = load_base(self.base_model, dtype=self.torch_dtype())
        except LoraError as exc:
            raise GenerationUnavailable(str(exc)) from None
        self._base.eval()
        self._prefixes.clear()
        if self.threads and self.threads > 0:
            import torch

            torch.set_num_threads(self.threads)

    def torch_dtype(self) -> Any:
        """The weights' torch dtype: ``dtype``, with "auto" meaning bfloat16 where it is native (``loading.bf16_native``)."""
        import torch

        if self.dtype == "auto":
            return torch.bfloat16 if bf16_native() else torch.float32
        return getattr(torch, self.dtype)

    def _check_files(self, adapter: AdapterRef) -> None:
        """Refuse an adapter whose base model differs or whose folder is unreadable, before touching the model."""
        if adapter.base_model and not same_base(adapter.base_model, self.base_model):
            raise AdapterMismatch(
                f"adapter {adapter.name} was trained on {adapter.base_model!r}, but this server runs {self.base_model!r}"
            )
        folder = Path(adapter.path)
        try:
            check_adapter(folder, self.base_model)
        except LoraError as exc:
            raise (AdapterMismatch if "trained on" in str(exc) else AdapterError)(str(exc)) from None
        except (OSError, ValueError, KeyError) as exc:
            raise AdapterError(f"adapter {adapter.name}: {folder} is unreadable ({exc})") from None
        weights = folder / "adapter_model.safetensors"
        if weights.is_file():
            try:
                from safetensors import safe_open

                with safe_open(str(weights), framework="pt") as f:
                    if not list(f.keys()):
                        raise ValueError("no tensors")
            except Exception as exc:  # safetensors raises its own error types for a damaged file
                raise AdapterError(f"adapter {adapter.name}: {weights} is damaged ({exc})") from None
        elif not (folder / "adapter_model.bin").is_file():
            raise AdapterError(f"adapter {adapter.name}: {folder} holds no adapter weights")

    def _ensure_adapter(self, adapter: AdapterRef) -> None:
        """Load ``adapter`` if needed (evicting the least recently used) and make it the most recent.

        Raises ``AdapterError`` (``AdapterMismatch`` for another base model) and remembers the
        adapter as broken for ``BROKEN_ADAPTER_RETRY_S``, so the next requests fall back at once.
        """
        if adapter.name in self._loaded:
            self._loaded.move_to_end(adapter.name)
            return
        broken = self._broken.get(adapter.name)
        if broken is not None and time.monotonic() - broken[0] < BROKEN_ADAPTER_RETRY_S:
            raise (AdapterMismatch if "trained on" in broken[1] else AdapterError)(broken[1])
        try:
            self._check_files(adapter)
            self._load_adapter(adapter)
        except AdapterError as exc:
            self._broken[adapter.name] = (time.monotonic(), str(exc))
            raise
        self._broken.pop(adapter.name, None)
        self._loaded[adapter.name] = adapter
        logger.info("adapter %s loaded from %s", adapter.name, adapter.path)

    def _load_adapter(self, adapter: AdapterRef) -> None:
        while len(self._loaded) >= self.cache_size:
            evicted, _ = self._loaded.popitem(last=False)
            self._peft.delete_adapter(evicted)
            self._forget_prefixes(evicted)
            logger.info("adapter %s evicted (cache of %d)", evicted, self.cache_size)
        try:
            if self._peft is None:
                from peft import PeftModel

                self._peft = PeftModel.from_pretrained(self._base, adapter.path, adapter_name=adapter.name, is_trainable=False)
                self._peft.eval()
            else:
                self._peft.load_adapter(adapter.path, adapter_name=adapter.name, is_trainable=False)
        except Exception as exc:  # peft raises whatever its loaders raise (shapes, keys, files)
            if self._peft is None:
                # peft injects the adapter's layers into the base model before reading its weights:
                # start from a freshly loaded base rather than from a half-modified one.
                self._base = self._tokenizer = None
                self._loaded.clear()
            elif adapter.name in getattr(self._peft, "peft_config", {}):
                self._peft.delete_adapter(adapter.name)
            raise AdapterError(f"adapter {adapter.name} could not be loaded from {adapter.path}: {exc}") from None

    def _model_for(self, adapter: AdapterRef | None):
        """The model to call and a factory of the context to call it in (caller holds the queue).

        A factory, since peft's ``disable_adapter()`` is a single-use context and the bare model's context is
        entered once for the prompt prefix state and again for the answer.
        """
        self._ensure_base()
        if adapter is None:
            if self._peft is None:
                return self._base, nullcontext
            return self._peft, self._peft.disable_adapter
        self._ensure_adapter(adapter)
        self._peft.set_adapter(adapter.name)
        return self._peft, nullcontext

    def warm_up(self, adapters: list[AdapterRef]) -> list[str]:
        """Load the base model and up to ``cache_size`` of ``adapters`` (hottest first); returns those loaded.

        A broken adapter is logged and skipped: warming up never stops the server from starting. The
        sentence encoder that shortlists chosen answers is loaded too.
        """
        if self.decoding == "select" and (scorer := self.sentence_scorer()) is not None:
            scorer.embed(["warm-up"])
        with self.queue.hold():
            self._ensure_base()
            for adapter in adapters[: self.cache_size]:
                try:
                    self._ensure_adapter(adapter)
                except GenerationError:
                    logger.exception("warm-up: adapter %s not loaded", adapter.name)
            return self.loaded_adapters

    # --- generation ---------------------------------------------------------------------------

    def prompt_passages(self, request: GenerationRequest) -> list[Passage]:
        """The passages the model is shown: the best ``max_passages``, each cut to its ``passage_chars`` most relevant characters.

        With ``lead_sentence`` the sentence the extractive answer would quote is kept in its passage
        and named at the end of the reference material (``prompting.render_passages``); with select
        decoding so are the other sentences of the shortlist the model judges (``selecting.shown_passages``).
        """
        return shown_passages(request, max_passages=self.max_passages, passage_chars=self.passage_chars, lead_sentence=self.lead_sentence,
                              shortlist=kept_choices(self.decoding, self.select_shortlist))

    def _inputs(self, request: GenerationRequest, shown: list[Passage], max_new: int) -> dict[str, Any]:
        limit = getattr(self._base.config, "max_position_embeddings", 2048) - max_new
        if limit <= 0:
            raise GenerationError(f"max_tokens {max_new} leaves no room for the prompt in this model's context")
        example = Example(request.question, "", shown, request.system_prompt, request.citation_format)
        ids = torch_tensor([fit_prompt(self._tokenizer, example, limit, history=request.history)])
        return {"input_ids": ids.to(self._base.device), "attention_mask": ids.new_ones(ids.shape).to(self._base.device)}

    def _prefix_cache(self, model: Any, context: Any, request: GenerationRequest, ids: list[int]) -> Any:
        """A copy of the model's state after the prompt's system part (computed once per adapter and system prompt).

        The shared part is found on token ids (the system message rendered alone, compared with the
        whole prompt), so a template that renders it differently in context only shortens it.
        None when the shared part is too short to be worth it.
        """
        import torch
        from transformers import DynamicCache

        system = build_messages("", [], system_prompt=request.system_prompt, citation_format=request.citation_format)[:1]
        alone = self._tokenizer(render_prompt(self._tokenizer, system), add_special_tokens=False)["input_ids"]
        shared = 0
        for a, b in zip(alone, ids[:-1], strict=False):  # at least one token is left to compute
            if a != b:
                break
            shared += 1
        if shared < MIN_PREFIX_TOKENS:
            return None
        key = (request.adapter.name if request.adapter is not None else "", tuple(ids[:shared]))
        state = self._prefixes.get(key)
        if state is None:
            state = DynamicCache()
            with context(), torch.no_grad():
                model(input_ids=torch_tensor([ids[:shared]]).to(self._base.device), cache=state, use_cache=True)
            self._prefixes[key] = state
            while len(self._prefixes) > PREFIX_CACHE_SIZE:
                self._prefixes.popitem(last=False)
        self._prefixes.move_to_end(key)
        return copy.deepcopy(state)  # generate() extends the cache it is given

    def _forget_prefixes(self, adapter_name: str) -> None:
        for key in [k for k in self._prefixes if k[0] == adapter_name]:
            del self._prefixes[key]

    def _generate_kwargs(self, request: GenerationRequest, stop: Any) -> dict[str, Any]:
        from transformers import StoppingCriteriaList

        kwargs: dict[str, Any] = {
            "max_new_tokens": self._max_new(request),
            "pad_token_id": self._tokenizer.pad_token_id,
            "eos_token_id": self._tokenizer.eos_token_id,
            "stopping_criteria": StoppingCriteriaList([stop]),
            "do_sample": False,
        }
        if request.temperature and request.temperature > 0:
            kwargs.update(do_sample=True, temperature=float(request.temperature))
        return kwargs

    def _max_new(self, request: GenerationRequest) -> int:
        return int(request.max_tokens or self.max_tokens)

    def _prepare(self, request: GenerationRequest, shown: list[Passage], deadline: float, cancel: threading.Event):
        """The model, its context, inputs, stop criteria and generate() arguments (caller holds the queue).

        ``shown``: ``prompt_passages(request)``, made before the queue is taken (finding the lead
        sentence calls the sentence encoder, which need not hold up the model).
        """
        model, context = self._model_for(request.adapter)
        inputs = self._inputs(request, shown, self._max_new(request))
        stop = _stop_criteria(deadline, cancel, self._tokenizer, inputs["input_ids"].shape[1],
                              STOPS + (("\n\n",) if self.stop_at_paragraph else ()))
        kwargs = self._generate_kwargs(request, stop)
        prefix = self._prefix_cache(model, context, request, inputs["input_ids"][0].tolist())
        if prefix is not None:
            kwargs["cache"] = prefix
        return model, context, inputs, stop, kwargs

    def generate(self, request: GenerationRequest) -> Answer:
        import torch

        if weak(request, self.min_score):
            return Answer(text=NOT_FOUND, citations=[], grounded=False)
        budget, deadline, shown, chosen = self._start(request)
        if chosen is not None:
            return chosen_answer(request, chosen, max_passages=self.max_passages, stop_at_paragraph=self.stop_at_paragraph, min_score=self.min_score)
        with self.queue.hold(budget):
            model, context, inputs, stop, kwargs = self._prepare(request, shown, deadline, threading.Event())
            try:
                with context(), torch.no_grad():
                    output = model.generate(**inputs, **kwargs)
            except (RuntimeError, ValueError) as exc:
                raise GenerationError(f"generation failed: {exc}") from None
        if stop.timed_out:
            raise GenerationTimeout(f"the answer took longer than its budget of {budget:.0f} s")
        new = output[0, inputs["input_ids"].shape[1] :]
        answer = parse_answer(self._tokenizer.decode(new, skip_special_tokens=True), request.passages[: self.max_passages],
                              citation_format=request.citation_format, min_score=self.min_score, question=request.question, stops=STOPS,
                              stop_at_paragraph=self.stop_at_paragraph)
        answer.finish_reason = "length" if len(new) >= kwargs["max_new_tokens"] and not stop.stopped_by_text else "stop"
        return answer

    def _start(self, request: GenerationRequest) -> tuple[float, float, list[Passage], Selected | None]:
        """The request's time budget, its deadline, the passages its prompt shows, and, where its decoding
        selects among candidate answers, the chosen one (the queue held for it; None: decode freely)."""
        budget = float(request.timeout_s if request.timeout_s is not None else self.timeout_s)
        deadline = time.monotonic() + budget
        shown = self.prompt_passages(request)
        if not selects(self.decoding, request):
            return budget, deadline, shown, None
        with self.queue.hold(budget):
            return budget, deadline, shown, self._select(request, shown, deadline, budget)

    def _select(self, request: GenerationRequest, shown: list[Passage], deadline: float, budget: float) -> Selected:
        """The candidate answer the request's model rates best, marker included, and why (caller holds the queue)."""
        import torch

        from experts.ml.selection import decide, plan_selection, score_continuations

        model, context = self._model_for(request.adapter)
        limit = getattr(self._base.config, "max_position_embeddings", 2048) - self._max_new(request)
        example = Example(request.question, "", shown, request.system_prompt, request.citation_format, whole=request.passages[: self.max_passages])
        try:
            plan = plan_selection(self._tokenizer, example, limit, history=request.history, scorer=self.sentence_scorer(),
                                  scorer_question=request.search_question)
            # the state after the system message, as free decoding reuses it; computed before ``context`` is entered
            # (entered inside it, the bare model's disable_adapter() would re-enable the adapter on its way out)
            prefix = self._prefix_cache(model, context, request, plan.prompt)
            with context(), torch.no_grad():
                chosen = decide(plan, score_continuations(model, plan.prompt, plan.continuations, prefix=prefix))
        except (RuntimeError, ValueError) as exc:
            raise GenerationError(f"generation failed: {exc}") from None
        if time.monotonic() > deadline:
            raise GenerationTimeout(f"the answer took longer than its budget of {budget:.0f} s")
        return chosen

    def next_token_logits(self, request: GenerationRequest) -> Any:
        """The model's logits for the first answer token (a float tensor): shows which adapter answered.

        A barely trained model generates the same few words whatever the adapter; its logits differ.
        """
        import torch

        shown = self.prompt_passages(request)
        with self.queue.hold():
            model, context = self._model_for(request.adapter)
            inputs = self._inputs(request, shown, 1)
            with context(), torch.no_grad():
                return model(**inputs).logits[0, -1].float().cpu()

    def stream(self, request: GenerationRequest) -> Iterator[str | Answer]:
        """Text deltas as the model produces them (``TextIteratorStreamer``), then the parsed answer.

        The deltas have their markers renumbered already (``CitationStream``): ``[1]`` in the
        stream is the final answer's first citation. Waiting for the model happens on the first
        ``next()`` (``GenerationBusy`` or ``GenerationTimeout`` then, before anything is shown).
        Closing the stream early stops the model at its next token.
        """
        import torch
        from transformers import TextIteratorStreamer

        if weak(request, self.min_score):
            yield NOT_FOUND
            yield Answer(text=NOT_FOUND, citations=[], grounded=False)
            return
        budget, deadline, shown, chosen = self._start(request)
        if chosen is not None:
            yield from stream_chosen(request, chosen, max_passages=self.max_passages, stop_at_paragraph=self.stop_at_paragraph, min_score=self.min_score)
            return
        self.queue.acquire(budget)
        held_from = time.monotonic()
        cancel = threading.Event()
        try:
            model, context, inputs, stop, kwargs = self._prepare(request, shown, deadline, cancel)
        except BaseException:
            self.queue.release(time.monotonic() - held_from)
            raise
        streamer = TextIteratorStreamer(self._tokenizer, skip_prompt=True, skip_special_tokens=True,
                                        timeout=max(0.1, deadline - time.monotonic()) + 1.0)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                with context(), torch.no_grad():
                    model.generate(**inputs, **kwargs, streamer=streamer)
            except BaseException as exc:  # reported to the consumer below
                errors.append(exc)
                streamer.end()
            finally:
                self.queue.release(time.monotonic() - held_from)

        worker = threading.Thread(target=run, name="transformers-generate", daemon=True)
        worker.start()
        citations = citation_stream(request, self.max_passages, self.stop_at_paragraph)
        try:
            try:
                for delta in streamer:
                    shown = citations.feed(delta)
                    if shown:
                        yield shown
                    if citations.stopped:
                        break
            except queue.Empty:  # not even the first token within the budget (a long prompt on a busy CPU)
                stop.timed_out = True
            cancel.set()
            worker.join(timeout=5.0)
            if errors:
                raise errors[0] if isinstance(errors[0], GenerationError) else GenerationError(f"generation failed: {errors[0]}")
            if stop.timed_out and not citations.shown.strip():
                raise GenerationTimeout(f"no answer within its budget of {budget:.0f} s")
            tail, answer = citations.finish(request.question, min_score=self.min_score, streamed=True)
            if tail:
                yield tail
            if stop.timed_out and not citations.stopped:
                answer.finish_reason = "time_budget"
            elif stop.generated >= kwargs["max_new_tokens"] and not citations.stopped:
                answer.finish_reason = "length"
            yield answer
        finally:
            cancel.set()  # the consumer went away (or we are done): the model stops at its next token


def _stop_criteria(deadline: float, cancel: threading.Event, tokenizer: Any, prompt_len: int, stops: tuple[str, ...]) -> Any:
    """A ``StoppingCriteria`` ending generation at the deadline, on ``cancel``, or at a stop text after some words."""
    import torch
    from transformers import StoppingCriteria

    class _Stop(StoppingCriteria):
        def __init__(self) -> None:
            self.timed_out = False
            self.stopped_by_text = False
            self.generated = 0

        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            self.generated = int(input_ids.shape[1] - prompt_len)
            done = cancel.is_set()
            if not done and time.monotonic() >= deadline:
                self.timed_out = done = True
            if not done and stops:
                text = tokenizer.decode(input_ids[0, prompt_len:], skip_special_tokens=True)
                for s in stops:
                    at = text.find(s)
                    while at != -1 and s == "\n\n" and not paragraph_ends_answer(text[:at]):
                        at = text.find(s, at + 1)
                    if at != -1:
                        self.stopped_by_text = done = True
                        break
            return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)

    return _Stop()


def torch_tensor(rows: list[list[int]]) -> Any:
    import torch

    return torch.tensor(rows, dtype=torch.long)
