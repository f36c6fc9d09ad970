"""The in-process LLM backend: one base model, many LoRA adapters, switched per request.

``GENERATOR=transformers`` loads ``BASE_MODEL`` once per process (lazily, on the first request or
at warm-up) and the adapters of the experts it is asked to answer for, on demand, into one
``PeftModel``. At most ``ADAPTER_CACHE_SIZE`` adapters stay loaded: the least recently used one is
deleted when another is needed. The active adapter is state of the shared model, so switching it
and generating with it happen under one lock: requests to this backend are served one at a time
(this backend is for laptops and small installs; vLLM batches adapters on a GPU server).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

from experts.ml.extractive import Answer
from experts.ml.lora import Example, LoraError, check_adapter, fit_prompt, load_base, same_base
from experts.ml.prompting import parse_answer

from .base import AdapterRef, GenerationError, GenerationRequest, GenerationUnavailable

logger = logging.getLogger(__name__)


class AdapterMismatchError(GenerationError):
    kind = "adapter_mismatch"


class TransformersGenerator:
    """Answers with ``base_model`` plus the request's LoRA adapter (or the bare base model)."""

    name = "transformers"

    def __init__(self, base_model: str, *, cache_size: int = 8, max_tokens: int = 256, min_score: float = 0.25) -> None:
        self.base_model = base_model
        self.cache_size = max(1, cache_size)
        self.max_tokens = max_tokens
        self.min_score = min_score
        self._lock = threading.RLock()
        self._tokenizer: Any = None
        self._base: Any = None
        self._peft: Any = None  # the PeftModel wrapping _base once an adapter is loaded
        self._loaded: OrderedDict[str, AdapterRef] = OrderedDict()  # LRU: oldest first

    @classmethod
    def from_settings(cls) -> TransformersGenerator:
        from django.conf import settings

        return cls(
            settings.BASE_MODEL,
            cache_size=settings.ADAPTER_CACHE_SIZE,
            max_tokens=settings.GENERATOR_MAX_TOKENS,
            min_score=settings.EXTRACTIVE_MIN_SCORE,
        )

    # --- loading ------------------------------------------------------------------------------

    @property
    def loaded_adapters(self) -> list[str]:
        """Names of the loaded adapters, least recently used first."""
        return list(self._loaded)

    def _ensure_base(self) -> None:
        if self._base is not None:
            return
        try:
            self._tokenizer, self._base = load_base(self.base_model)
        except LoraError as exc:
            raise GenerationUnavailable(str(exc)) from None
        self._base.eval()

    def _ensure_adapter(self, adapter: AdapterRef) -> None:
        """Load ``adapter`` if needed (evicting the least recently used) and make it the most recent."""
        if adapter.name in self._loaded:
            self._loaded.move_to_end(adapter.name)
            return
        if adapter.base_model and not same_base(adapter.base_model, self.base_model):
            raise AdapterMismatchError(
                f"adapter {adapter.name} was trained on {adapter.base_model!r}, but this server runs {self.base_model!r}"
            )
        try:
            check_adapter(adapter.path, self.base_model)
        except LoraError as exc:
            raise AdapterMismatchError(str(exc)) from None
        while len(self._loaded) >= self.cache_size:
            evicted, _ = self._loaded.popitem(last=False)
            self._peft.delete_adapter(evicted)
            logger.info("adapter %s evicted (cache of %d)", evicted, self.cache_size)
        try:
            if self._peft is None:
                from peft import PeftModel

                self._peft = PeftModel.from_pretrained(self._base, adapter.path, adapter_name=adapter.name, is_trainable=False)
                self._peft.eval()
            else:
                self._peft.load_adapter(adapter.path, adapter_name=adapter.name, is_trainable=False)
        except (OSError, ValueError, RuntimeError) as exc:
            raise GenerationError(f"adapter {adapter.name} could not be loaded from {adapter.path}: {exc}") from None
        self._loaded[adapter.name] = adapter
        logger.info("adapter %s loaded from %s", adapter.name, adapter.path)

    def _model_for(self, adapter: AdapterRef | None):
        """The model to call and a context to call it in (caller holds the lock)."""
        self._ensure_base()
        if adapter is None:
            if self._peft is None:
                return self._base, nullcontext()
            return self._peft, self._peft.disable_adapter()
        self._ensure_adapter(adapter)
        self._peft.set_adapter(adapter.name)
        return self._peft, nullcontext()

    def warm_up(self, adapters: list[AdapterRef]) -> list[str]:
        """Load the base model and up to ``cache_size`` of ``adapters`` (hottest first); returns those loaded.

        A broken adapter is logged and skipped: warming up never stops the server from starting.
        """
        with self._lock:
            self._ensure_base()
            for adapter in adapters[: self.cache_size]:
                try:
                    self._ensure_adapter(adapter)
                except GenerationError:
                    logger.exception("warm-up: adapter %s not loaded", adapter.name)
            return self.loaded_adapters

    # --- generation ---------------------------------------------------------------------------

    def _inputs(self, request: GenerationRequest, max_new: int) -> dict[str, Any]:
        limit = getattr(self._base.config, "max_position_embeddings", 2048) - max_new
        if limit <= 0:
            raise GenerationError(f"max_tokens {max_new} leaves no room for the prompt in this model's context")
        example = Example(request.question, "", list(request.passages), request.system_prompt, request.citation_format)
        ids = torch_tensor([fit_prompt(self._tokenizer, example, limit, history=request.history)])
        return {"input_ids": ids.to(self._base.device), "attention_mask": ids.new_ones(ids.shape).to(self._base.device)}

    def _generate_kwargs(self, request: GenerationRequest) -> dict[str, Any]:
        max_new = request.max_tokens or self.max_tokens
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_new,
            "pad_token_id": self._tokenizer.pad_token_id,
            "eos_token_id": self._tokenizer.eos_token_id,
        }
        if request.temperature and request.temperature > 0:
            kwargs.update(do_sample=True, temperature=float(request.temperature))
        else:
            kwargs.update(do_sample=False)
        return kwargs

    def _answer(self, text: str, request: GenerationRequest) -> Answer:
        return parse_answer(text, request.passages, citation_format=request.citation_format, min_score=self.min_score)

    def generate(self, request: GenerationRequest) -> Answer:
        import torch

        with self._lock:
            model, context = self._model_for(request.adapter)
            kwargs = self._generate_kwargs(request)
            inputs = self._inputs(request, kwargs["max_new_tokens"])
            try:
                with context, torch.no_grad():
                    output = model.generate(**inputs, **kwargs)
            except (RuntimeError, ValueError) as exc:
                raise GenerationError(f"generation failed: {exc}") from None
        text = self._tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        return self._answer(text, request)

    def next_token_logits(self, request: GenerationRequest) -> Any:
        """The model's logits for the first answer token (a float tensor): shows which adapter answered.

        A barely trained model generates the same few words whatever the adapter; its logits differ.
        """
        import torch

        with self._lock:
            model, context = self._model_for(request.adapter)
            inputs = self._inputs(request, 1)
            with context, torch.no_grad():
                return model(**inputs).logits[0, -1].float().cpu()

    def stream(self, request: GenerationRequest) -> Iterator[str | Answer]:
        """Text deltas as the model produces them (``TextIteratorStreamer``), then the parsed answer.

        The deltas are the model's raw text (markers as it wrote them); the final ``Answer`` has the
        markers renumbered to its citations.
        """
        from transformers import TextIteratorStreamer

        errors: list[BaseException] = []
        ready = threading.Event()
        streamer_box: list[Any] = []

        def run() -> None:
            import torch

            with self._lock:
                try:
                    model, context = self._model_for(request.adapter)
                    kwargs = self._generate_kwargs(request)
                    inputs = self._inputs(request, kwargs["max_new_tokens"])
                    streamer = TextIteratorStreamer(self._tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=120)
                    streamer_box.append(streamer)
                except BaseException as exc:  # reported to the consumer below
                    errors.append(exc)
                    ready.set()
                    return
                ready.set()
                try:
                    with context, torch.no_grad():
                        model.generate(**inputs, **kwargs, streamer=streamer)
                except BaseException as exc:
                    errors.append(exc)
                    streamer.end()

        worker = threading.Thread(target=run, name="transformers-generate", daemon=True)
        worker.start()
        ready.wait()
        if errors:
            raise _as_generation_error(errors[0])
        pieces: list[str] = []
        for delta in streamer_box[0]:
            if delta:
                pieces.append(delta)
                yield delta
        worker.join()
        if errors:
            raise _as_generation_error(errors[0])
        yield self._answer("".join(pieces), request)


def torch_tensor(rows: list[list[int]]) -> Any:
    import torch

    return torch.tensor(rows, dtype=torch.long)


def _as_generation_error(exc: BaseException) -> GenerationError:
    return exc if isinstance(exc, GenerationError) else GenerationError(f"generation failed: {exc}")
