"""A tiny causal language model built from a config, for tests and laptops without model weights.

A Llama-architecture model with random weights and a byte-level BPE tokenizer trained locally on a
few texts, saved with ``save_pretrained`` so transformers and vLLM (``--model DIR``) both load it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

# A minimal chat template: one line per turn, then the assistant header when asked for a reply.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]


def _train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE tokenizer trained on ``texts`` (deterministic for the same input)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 512
    return fast


def build_tiny_lm(
    out_dir: str | Path,
    texts: Iterable[str],
    *,
    vocab_size: int = 2000,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
    max_positions: int = 512,
) -> Path:
    """Build and save a random-weight LlamaForCausalLM with a tokenizer trained on ``texts``.

    Args:
        out_dir: folder to write (created; existing files are overwritten).
        texts: training texts for the tokenizer (the demo documents, say).
        vocab_size: the BPE vocabulary's target size (smaller when the texts are short).
        hidden_size, layers, heads: the model's shape (~0.3M parameters by default).
        seed: the same seed and texts give the same weights and tokenizer.
        max_positions: the longest sequence it takes (prompt and answer).

    Returns:
        ``out_dir`` as a Path, loadable with ``from_pretrained``.
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    corpus = [t for t in texts if t and t.strip()]
    if not corpus:
        raise ValueError("build_tiny_lm needs at least one non-empty text to train its tokenizer")
    tokenizer = _train_tokenizer(corpus, vocab_size)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 4,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
