"""Fixtures of the experts tests: LoRA on one torch thread, and a base-model folder (the tiny LM is tests/support/tiny_lm.py's)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def one_torch_thread(request):
    """LoRA tests run torch on one thread: on a shared 2-core machine two threads are ~8x slower, not faster."""
    if "lora" not in request.node.nodeid:
        yield
        return
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def base(tmp_path, settings) -> Path:
    """A stand-in base model folder (a config only) that BASE_MODEL points at: enough for adapter checks, not for loading."""
    folder = tmp_path / "base"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    settings.BASE_MODEL = str(folder)
    return folder
