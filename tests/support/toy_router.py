"""A toy routing problem for the router's pure-ML tests (not a test module): three topics of questions,
an encoder that knows words and nothing of spelling, and a text router trained on them."""

import hashlib

import numpy as np

from routing.ml.textrouter import train_text_router
from routing.ml.training import TrainConfig

TOPICS = {
    0: ["renew my driver license", "driving licence renewal online", "replace a lost driver license", "license plate registration fee",
        "vehicle registration renewal", "driver license road test appointment"],
    1: ["student loan repayment plan", "apply for student aid", "federal student loan forgiveness", "tuition grant application deadline",
        "college financial aid form", "student loan interest rate"],
    2: ["file a claim for unemployment", "unemployment benefits weekly claim", "lost my job what benefits", "unemployment insurance appeal",
        "job seeker weekly certification", "benefits after layoff"],
}
PREFIXES = ["how do i", "can you help me", "i need to", "what is the way to", "please explain how to", "tell me how to", "where can i", "help with"]


def questions(seed: int, per_topic: int):
    rng = np.random.default_rng(seed)
    texts, y = [], []
    for label, phrases in TOPICS.items():
        for _ in range(per_topic):
            texts.append(f"{PREFIXES[rng.integers(len(PREFIXES))]} {phrases[rng.integers(len(phrases))]}")
            y.append(label)
    return texts, np.array(y)


def word_embed(texts, dim=64):
    """A toy encoder that knows words exactly and nothing of spelling: a misspelt word is a new random direction."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in text.lower().split():
            seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big")
            out[i] += np.random.default_rng(seed).normal(size=dim)
        out[i] /= max(1e-9, float(np.linalg.norm(out[i])))
    return out


def trained(char_view=True, typo_rate=0.1):
    texts, y = questions(3, 60)
    val_texts, y_val = questions(4, 15)
    config = TrainConfig(epochs=40, seed=0, char_view=char_view, typo_rate=typo_rate)
    return train_text_router(texts, word_embed(texts), y, val_texts, word_embed(val_texts), y_val, 3, word_embed, config=config)
