"""The router network: a semantic-fingerprint layer over the query embedding and a gating MLP.

The fingerprint treats the pooled sentence embedding as a 1-channel signal and runs a 1-D
convolution over it, max-pooled to a fixed length: a cheap, learnable set of local feature
detectors. The gating MLP maps the fingerprint to one logit per expert.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn


class RouterNet(nn.Module):
    """Embedding (B, D) → expert logits (B, N)."""

    config_keys = ["input_dim", "n_experts", "channels", "kernel_size", "pooled_length", "fingerprint_dim", "hidden_dim", "dropout", "use_conv"]

    def __init__(
        self,
        input_dim: int = 384,
        n_experts: int = 4,
        channels: int = 8,
        kernel_size: int = 9,
        pooled_length: int = 16,
        fingerprint_dim: int = 128,
        hidden_dim: int = 256,
        dropout: float = 0.1,
        use_conv: bool = True,
    ):
        super().__init__()
        self.input_dim, self.n_experts = input_dim, n_experts
        self.channels, self.kernel_size, self.pooled_length = channels, kernel_size, pooled_length
        self.fingerprint_dim, self.hidden_dim, self.dropout, self.use_conv = fingerprint_dim, hidden_dim, dropout, use_conv
        if use_conv:
            self.conv = nn.Conv1d(1, channels, kernel_size, padding=kernel_size // 2)
            self.pool = nn.AdaptiveMaxPool1d(pooled_length)
            self.fingerprint = nn.Linear(channels * pooled_length + input_dim, fingerprint_dim)
        else:
            self.fingerprint = nn.Linear(input_dim, fingerprint_dim)
        self.gate = nn.Sequential(
            nn.GELU(), nn.Dropout(dropout), nn.Linear(fingerprint_dim, hidden_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden_dim, n_experts)
        )

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        if self.use_conv:
            local = self.pool(torch.relu(self.conv(embeddings.unsqueeze(1)))).flatten(1)
            # The raw embedding rides along (a residual path) so the conv only has to add to it.
            features = torch.cat([local, embeddings], dim=1)
        else:
            features = embeddings
        return self.gate(self.fingerprint(features))

    def get_config_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.config_keys}

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps(self.get_config_dict(), indent=2))
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(path / "model.safetensors"))

    @classmethod
    def load(cls, path: str | Path) -> RouterNet:
        path = Path(path)
        model = cls(**json.loads((path / "config.json").read_text()))
        model.load_state_dict(load_file(str(path / "model.safetensors")))
        model.eval()
        return model
