"""The shared base LM and its LoRA adapters, from local files: found, checked against each other, loaded. Pure: no Django.

This finds the folder ``BASE_MODEL`` names (or a hub id already in the local cache: nothing is ever
downloaded), loads its tokenizer and model on this machine's device (4-bit where QLoRA is usable,
bfloat16 where native), and tells which base model an adapter was trained on, so no adapter is
served on another.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .lora_errors import AdapterMismatch, BaseModelNotFound, LoraError

# Our record in every adapter folder ``lora.save_adapter`` writes: the base model's spelling and the parameters.
ADAPTER_META = "switchboard.json"


def resolve_base_model(base_model: str) -> str:
    """The local folder of ``base_model`` (a path, or a hub id already in the local cache).

    Raises:
        BaseModelNotFound: nothing local; the platform never downloads weights.
    """
    if not base_model or not base_model.strip():
        raise BaseModelNotFound("BASE_MODEL is not set: give a local model folder or a hub id present in the local cache")
    path = Path(base_model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise BaseModelNotFound(f"BASE_MODEL {base_model!r} is a folder without config.json: not a transformers model")
        return str(path.resolve())
    if path.is_absolute() or base_model.startswith((".", "~")) or base_model.count("/") > 1:
        raise BaseModelNotFound(f"BASE_MODEL {base_model!r} does not exist")
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(base_model, local_files_only=True)
    except Exception:
        raise BaseModelNotFound(
            f"BASE_MODEL {base_model!r} is not a local folder and not in the local model cache; "
            "the platform never downloads weights: copy the model to a folder and point BASE_MODEL at it"
        ) from None


def same_base(a: str, b: str) -> bool:
    """Whether two BASE_MODEL spellings name the same model (paths compared resolved)."""
    def norm(x: str) -> str:
        p = Path(x).expanduser()
        return str(p.resolve()) if p.exists() else x.strip().rstrip("/")

    return norm(a) == norm(b)


def adapter_base_model(adapter_dir: str | Path) -> str:
    """The base model recorded in an adapter's ``adapter_config.json``."""
    config = Path(adapter_dir) / "adapter_config.json"
    if not config.is_file():
        raise LoraError(f"{adapter_dir} is not a peft adapter (no adapter_config.json)")
    meta = Path(adapter_dir) / ADAPTER_META
    if meta.is_file():  # our own record keeps the spelling the service used
        return json.loads(meta.read_text())["base_model"]
    return json.loads(config.read_text()).get("base_model_name_or_path") or ""


def check_adapter(adapter_dir: str | Path, base_model: str) -> None:
    """Raise ``AdapterMismatch`` unless the adapter was trained on ``base_model``."""
    trained_on = adapter_base_model(adapter_dir)
    if not same_base(trained_on, base_model):
        raise AdapterMismatch(
            f"the adapter in {adapter_dir} was trained on {trained_on!r}, not on the served base model {base_model!r}; "
            "retrain it on this base model"
        )


def device() -> str:
    """Where models run here: "cuda" when a GPU is visible, else "cpu"."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def qlora_available() -> bool:
    """Whether 4-bit loading (QLoRA) is usable here: a GPU and bitsandbytes."""
    import importlib.util

    import torch

    return torch.cuda.is_available() and importlib.util.find_spec("bitsandbytes") is not None


def bf16_native() -> bool:
    """Whether this machine multiplies bfloat16 natively (CUDA with bf16, a CPU with AMX or AVX512-BF16); elsewhere it is slower than float32."""
    import torch

    if torch.cuda.is_available():
        return bool(torch.cuda.is_bf16_supported())
    try:
        flags = Path("/proc/cpuinfo").read_text(errors="ignore")
    except OSError:
        return False
    return any(flag in flags for flag in (" amx_bf16", " avx512_bf16"))


def load_base(base_model: str, *, qlora: bool = False, dtype: Any = None) -> tuple[Any, Any]:
    """The tokenizer and model of ``base_model`` from local files only (4-bit when ``qlora`` is usable).

    ``dtype`` (a torch dtype) casts the weights; None keeps the checkpoint's (float32 here).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local = resolve_base_model(base_model)
    try:
        tokenizer = AutoTokenizer.from_pretrained(local, local_files_only=True)
        kwargs: dict[str, Any] = {"local_files_only": True}
        if qlora and qlora_available():
            import torch
            from transformers import BitsAndBytesConfig

            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16
            )
            kwargs["device_map"] = {"": 0}
        elif dtype is not None:
            kwargs["dtype"] = dtype
        model = AutoModelForCausalLM.from_pretrained(local, **kwargs)
    except (OSError, ValueError) as exc:
        raise BaseModelNotFound(f"BASE_MODEL {base_model!r} could not be loaded: {exc}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if "quantization_config" not in kwargs:
        model.to(device())
    return tokenizer, model
