"""The sentence encoder run by ONNX Runtime: exported locally from the shipped weights, float32 or int8.

``EMBEDDING_BACKEND=onnx`` and ``onnx-int8``. The first use exports the model (with pooling and
normalisation) by ``torch.onnx.export`` and quantises a copy to int8, written once, atomically, under
``<cache>/<model>-<weights checksum>/`` with a ``meta.json`` of their agreement with torch. The float32
export must reproduce torch's vectors (``SAME_SPACE_COSINE``) or is refused; int8's vectors move, so
``onnx-int8`` is an embedding space of its own (``encoders.space.embedding_space``). Nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

# The bar for "the same embedding space" (issue 21): every sample text's vector within this cosine of torch's.
SAME_SPACE_COSINE = 0.99
FILES = {"onnx": "model.onnx", "onnx-int8": "model-int8.onnx"}
INPUTS = ("input_ids", "attention_mask", "token_type_ids")

# The agreement sample: questions and document sentences of the kinds the platform embeds, short and long.
SAMPLE_TEXTS = (
    "how do i renew my driver license",
    "I lost my card, how do I get a replacement?",
    "my GI bill payment is late, who do I call?",
    "What is the penalty for filing my taxes late?",
    "can I carry over unused vacation days to next year",
    "reset my password",
    "why was my claim denied",
    "Where can I find the form to change my address?",
    "how long does a refund take to arrive on my account",
    "Is there a fee for international wire transfers?",
    "what's the weather tomorrow in paris",
    "play some jazz",
    "set an alarm for 7 am",
    "book a table for two at an italian restaurant tonight",
    "Translate 'thank you' into Spanish.",
    "hw do i renw my drivr licnse",
    "Bonjour, comment puis-je changer mon mot de passe ?",
    "¿Cómo solicito un reembolso?",
    "ok",
    "???",
    "You can renew your driver license online with MyDMV if your license has not been expired for more than two years.",
    "Veterans may transfer unused Post-9/11 GI Bill benefits to a spouse or dependent child while still on active duty.",
    "If your application is denied, you have 60 days from the date of the decision letter to request a reconsideration.",
    "Employees accrue paid time off at a rate of 1.5 days per month of service, up to a maximum balance of 30 days.",
    "The annual percentage rate applies to purchases, balance transfers and cash advances unless a promotional rate is stated.",
    "Social Security retirement benefits can start as early as age 62, but the monthly amount is permanently reduced.",
    "To report a lost or stolen card, call the number on the back of your statement or freeze the card in the app.",
    "Section 4.2. Termination. Either party may terminate this agreement with thirty (30) days' written notice.",
    " ".join(["The vehicle inspection must be completed at a licensed station before the registration expires."] * 6),
    " ".join(["Please include your claim number, your full name and the date of service on every page you send."] * 8),
)

# A batch job's passes (``parallel``): texts sorted by their length in word pieces, at most this many a pass once
# padded (a longer text alone), and at most ``sub_batch`` texts. Chosen on doc2dial's chunks, sentences and
# questions (docs/EVALUATIONS.md#bench-ingest).
PASS_TOKENS = 256

_lock = threading.Lock()


def export_dir(model_path: str, cache_dir: str | Path, label: str = "") -> Path:
    """``<cache>/<label or folder name>-<checksum of the weights and config>``: new weights get a new export."""
    folder = Path(model_path)
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file() and (path.suffix in {".safetensors", ".bin", ".json"} or path.name == "vocab.txt"):
            digest.update(str(path.relative_to(folder)).encode())
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    return Path(cache_dir) / f"{Path(label).name or folder.name}-{digest.hexdigest()[:12]}"


def ensure_exported(model_path: str, cache_dir: str | Path, label: str = "") -> Path:
    """The folder holding both ONNX files and ``meta.json`` for the model at ``model_path``, exported if missing.

    Idempotent and atomic: the files are made in a temporary folder beside the final one and moved
    into place in one rename, so a crash leaves nothing half-written. Processes export one at a time
    (a lock file beside the folder): one that asks while another exports waits and finds its folder
    (``run_platform`` exports in a process of its own while the database migrates and the workers
    start). Without the lock, if the rename finds another export's folder there, ours is dropped.
    """
    final = export_dir(model_path, cache_dir, label)
    if (final / "meta.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with _lock, _exporting(final):
        if (final / "meta.json").is_file():
            return final
        work = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
        try:
            meta = _export(model_path, work)
            (work / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
            work.chmod(0o755)  # mkdtemp's folder is private
            try:
                os.rename(work, final)
            except OSError:  # another process got there first: its export is as good as ours
                if not (final / "meta.json").is_file():
                    raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
    logger.info("encoder.onnx.exported", extra={"folder": str(final)})
    return final


@contextlib.contextmanager
def _exporting(final: Path) -> Iterator[None]:
    """Hold the lock file of ``final``'s export (``flock``, released if the process dies); where there is no flock, nothing."""
    try:
        import fcntl
    except ImportError:  # not POSIX: two processes may both export, and the rename keeps one
        yield
        return
    lock = final.parent / f".{final.name}.lock"
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
            if (final / "meta.json").is_file():  # done: no one locks again (they find the folder first), so the file can go
                lock.unlink(missing_ok=True)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pooling(model: Any) -> str:
    """The sentence-transformers model's pooling, if the export can reproduce it ("mean" or "cls")."""
    modes = [m.get_config_dict().get("pooling_mode") for m in model if type(m).__name__ == "Pooling"]
    if len(modes) != 1 or modes[0] not in {"mean", "cls"}:
        raise ValueError(f"the ONNX backends reproduce mean or CLS pooling; this model pools with {modes or 'nothing'}: use EMBEDDING_BACKEND=torch")
    return modes[0]


def _export(model_path: str, work: Path) -> dict[str, Any]:
    import onnxruntime
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from sentence_transformers import SentenceTransformer

    started = time.monotonic()
    model = SentenceTransformer(model_path, device="cpu", local_files_only=True)
    pooling = _pooling(model)
    transformer = model[0].auto_model.eval()
    max_length = int(model.max_seq_length or 512)

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            hidden = self.transformer(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state
            if pooling == "cls":
                pooled = hidden[:, 0]
            else:
                mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1)

    features = model.tokenizer(list(SAMPLE_TEXTS[:2]), padding=True, return_tensors="pt")
    names = [name for name in INPUTS if name in features]  # models without token types take two inputs
    axes = {name: {0: "batch", 1: "tokens"} for name in names} | {"embedding": {0: "batch"}}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(Pooled(), tuple(features[name] for name in names), str(work / FILES["onnx"]), input_names=names, output_names=["embedding"],
                          dynamic_axes=axes, opset_version=17, dynamo=False)
    # Weights per output channel (per tensor, with the reduced range, moved MiniLM's vectors far more: minimum cosine 0.55); activations per pass.
    quantize_dynamic(str(work / FILES["onnx"]), str(work / FILES["onnx-int8"]), weight_type=QuantType.QInt8, per_channel=True,
                     op_types_to_quantize=["MatMul"])
    reference = model.encode(list(SAMPLE_TEXTS), batch_size=8, normalize_embeddings=True, convert_to_numpy=True)
    agreement = {}
    for backend, name in FILES.items():
        vectors = OnnxEncoder(work / name, model_path, max_length, name=str(model_path), backend=backend).encode(list(SAMPLE_TEXTS))
        cosines = (np.asarray(vectors) * reference).sum(axis=1)
        agreement[backend] = {"min_cosine": round(float(cosines.min()), 6), "mean_cosine": round(float(cosines.mean()), 6)}
    if agreement["onnx"]["min_cosine"] < SAME_SPACE_COSINE:
        raise ValueError(f"the ONNX export of {model_path} does not reproduce torch's vectors (minimum cosine "
                         f"{agreement['onnx']['min_cosine']:.4f} < {SAME_SPACE_COSINE}): use EMBEDDING_BACKEND=torch")
    return {
        "source": str(model_path), "pooling": pooling, "max_length": max_length, "files": FILES,
        "agreement_with_torch": agreement, "sample_texts": len(SAMPLE_TEXTS), "same_space_cosine": SAME_SPACE_COSINE,
        "torch": torch.__version__, "onnxruntime": onnxruntime.__version__, "export_s": round(time.monotonic() - started, 1),
    }


class OnnxEncoder:
    """Turns texts into L2-normalised float32 vectors with an exported model in ONNX Runtime (same API as the torch encoder).

    Texts are sorted by length and encoded in passes of ``sub_batch``, each padded to its longest
    text, as sentence-transformers does; tokenisation is the model's own fast tokenizer, truncated
    at the model's ``max_seq_length``.

    ``threads`` CPUs run each pass together (ONNX Runtime's threads within an operation), or, with
    ``parallel``, a call's passes side by side, ``threads`` at a time, each on one thread, longest
    first, the passes formed by a budget of word pieces (``PASS_TOKENS``): what a batch job's many
    passes want, since threads within one pass spin while they wait for each other
    (docs/EVALUATIONS.md#bench-ingest).
    """

    def __init__(self, onnx_file: Path, model_path: str, max_length: int, *, name: str, backend: str = "onnx",
                 agreement: dict[str, float] | None = None, threads: int = 1, sub_batch: int = 8, parallel: bool = False):
        import onnxruntime
        from transformers import AutoTokenizer

        self._runners = max(1, int(threads)) if parallel else 1
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1 if self._runners > 1 else max(1, int(threads)) if threads > 0 else 0
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = onnxruntime.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
        self._max_length = max_length
        self.name, self.backend, self.agreement = name, backend, agreement or {}
        self.dimension = int(self._session.get_outputs()[0].shape[-1])
        self.sub_batch = max(1, int(sub_batch))
        self._lock = threading.Lock()
        # The session runs one pass per calling thread at once (``InferenceSession.run`` is thread-safe and frees the GIL).
        self._pool = ThreadPoolExecutor(self._runners, thread_name_prefix="onnx-pass") if self._runners > 1 else None
        self.pass_tokens = PASS_TOKENS if parallel else 0
        self._pad_id = int(self._tokenizer.pad_token_id or 0)

    @classmethod
    def exported(cls, name: str, model_path: str, backend: str, cache_dir: str | Path, threads: int = 1, sub_batch: int = 8,
                 parallel: bool = False) -> OnnxEncoder:
        """The encoder for ``backend`` ("onnx" or "onnx-int8") from the model's export, made first if missing."""
        folder = ensure_exported(model_path, cache_dir, label=name)
        meta = json.loads((folder / "meta.json").read_text())
        return cls(folder / meta["files"][backend], model_path, int(meta["max_length"]), name=name, backend=backend,
                   agreement=meta["agreement_with_torch"][backend], threads=threads, sub_batch=sub_batch, parallel=parallel)

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        size = max(1, min(int(batch_size), self.sub_batch))

        def run(rows: np.ndarray, feed: dict[str, np.ndarray]) -> None:
            out[rows] = self._session.run(None, feed)[0]

        with self._lock:
            # Tokenised here, in order: the fast tokenizer is not to be called from several threads at once.
            passes = self._budget_passes(texts, size) if self.pass_tokens else self._passes(texts, size)
            if self._pool is not None and len(passes) > 1:
                # The longest passes first, so that no long one is left to run alone at the end.
                passes.sort(key=lambda rows_feed: -rows_feed[1]["input_ids"].size)
                list(self._pool.map(run, *zip(*passes, strict=True)))
            else:
                for rows, feed in passes:
                    run(rows, feed)
        return out

    def _passes(self, texts: list[str], size: int) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """Passes of ``size`` texts, by length in characters."""
        order = np.argsort([len(t) for t in texts], kind="stable")
        passes = [order[start:start + size] for start in range(0, len(texts), size)]
        return [(rows, self._feed([texts[i] for i in rows])) for rows in passes]

    def _feed(self, texts: list[str]) -> dict[str, np.ndarray]:
        tokens = self._tokenizer(texts, padding=True, truncation=True, max_length=self._max_length, return_tensors="np")
        return {name: np.asarray(tokens[name] if name in tokens else np.zeros_like(tokens["input_ids"]), dtype=np.int64)
                for name in INPUTS if name in self._inputs}

    def _budget_passes(self, texts: list[str], size: int) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """Passes of texts of similar length in word pieces, each at most ``size`` texts and, padded, ``pass_tokens``
        word pieces (a longer text alone), padded as the tokenizer pads one text: pad ids right, mask and types 0."""
        ids = self._tokenizer(texts, truncation=True, max_length=self._max_length)["input_ids"]
        lengths = np.array([len(x) for x in ids])
        passes: list[list[int]] = [[]]
        for i in np.argsort(lengths, kind="stable").tolist():  # shortest first: a pass's newest text is its longest
            if passes[-1] and (len(passes[-1]) >= size or (len(passes[-1]) + 1) * lengths[i] > self.pass_tokens):
                passes.append([])
            passes[-1].append(i)
        out = []
        for rows in passes:
            width = int(lengths[rows].max())
            feed = {"input_ids": np.full((len(rows), width), self._pad_id, dtype=np.int64), "attention_mask": np.zeros((len(rows), width), dtype=np.int64),
                    "token_type_ids": np.zeros((len(rows), width), dtype=np.int64)}
            for r, i in enumerate(rows):
                feed["input_ids"][r, : lengths[i]] = ids[i]
                feed["attention_mask"][r, : lengths[i]] = 1
            out.append((np.array(rows), {name: feed[name] for name in INPUTS if name in self._inputs}))
        return out
