"""The router network: a semantic-fingerprint layer over the query embedding and a gating MLP.

The fingerprint is a 1-D convolution over the embedding, max-pooled to a fixed length; the gating MLP
maps it to one logit per expert. Options: a conversation-context path (``context_dim > 0``: a small GRU
over the previous turns, zeros without history), a prototype memory (``prototypes_per_expert > 0``:
the cosine to each expert's nearest centroid added with ``prototype_weight``; the highest is the
in-scope score), a fitted ``temperature``, and ``head="linear"`` (one linear layer over the embedding,
which ``routing.ml.textrouter`` serves where its validation macro-F1 is the better one).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

HIDDEN_RANGE = (128, 512)
HEADS = ("mlp", "linear")


class RouterNet(nn.Module):
    """Embedding (B, D) [+ previous turns (B, T, D)] → expert logits (B, N)."""

    config_keys = [
        "input_dim", "n_experts", "channels", "kernel_size", "pooled_length", "fingerprint_dim", "hidden_dim", "dropout", "use_conv",
        "context_dim", "prototypes_per_expert", "prototype_weight", "temperature", "head",
    ]

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
        context_dim: int = 0,
        prototypes_per_expert: int = 0,
        prototype_weight: float = 0.0,
        temperature: float = 1.0,
        head: str = "mlp",
    ):
        super().__init__()
        self._prototype_cache: tuple[torch.Tensor, torch.Tensor] | None = None
        if n_experts < 1:
            raise ValueError(f"n_experts must be at least 1, got {n_experts}")
        if not HIDDEN_RANGE[0] <= hidden_dim <= HIDDEN_RANGE[1]:
            raise ValueError(f"hidden_dim must be within {HIDDEN_RANGE[0]}-{HIDDEN_RANGE[1]}, got {hidden_dim}")
        if context_dim < 0:
            raise ValueError(f"context_dim must be 0 (off) or positive, got {context_dim}")
        if head not in HEADS:
            raise ValueError(f"head must be one of {', '.join(HEADS)}, got {head!r}")
        if head == "linear" and (use_conv or context_dim):
            raise ValueError("a linear head reads the embedding alone: no convolution (use_conv=False), no context path (context_dim=0)")
        self.head = head
        self.input_dim, self.n_experts = input_dim, n_experts
        self.channels, self.kernel_size, self.pooled_length = channels, kernel_size, pooled_length
        self.fingerprint_dim, self.hidden_dim, self.dropout, self.use_conv = fingerprint_dim, hidden_dim, dropout, use_conv
        self.context_dim = context_dim
        self.prototypes_per_expert, self.prototype_weight, self.temperature = prototypes_per_expert, float(prototype_weight), float(temperature)
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        if head == "linear":
            self.linear = nn.Linear(input_dim, n_experts)
        elif use_conv:
            self.conv = nn.Conv1d(1, channels, kernel_size, padding=kernel_size // 2)
            self.pool = nn.AdaptiveMaxPool1d(pooled_length)
            self.fingerprint = nn.Linear(channels * pooled_length + input_dim, fingerprint_dim)
        else:
            self.fingerprint = nn.Linear(input_dim, fingerprint_dim)
        if context_dim:
            self.context_gru = nn.GRU(input_dim, context_dim, batch_first=True)
        if prototypes_per_expert:
            # Filled by ``set_prototypes`` after training; unused slots are masked out.
            self.register_buffer("prototypes", torch.zeros(n_experts, prototypes_per_expert, input_dim))
            self.register_buffer("prototype_mask", torch.zeros(n_experts, prototypes_per_expert, dtype=torch.bool))
        if head == "mlp":
            self.gate = nn.Sequential(
                nn.GELU(), nn.Dropout(dropout), nn.Linear(fingerprint_dim + context_dim, hidden_dim), nn.GELU(), nn.Dropout(dropout),
                nn.Linear(hidden_dim, n_experts),
            )

    def encode_context(self, context: torch.Tensor | None, lengths: torch.Tensor | None, batch: int) -> torch.Tensor:
        """The GRU's last state over each row's real turns; zeros for rows without history.

        Args:
            context: (B, T, D) previous turns, oldest first, zero-padded on the right; or None.
            lengths: (B,) number of real turns per row (0 allowed); None means all T are real.
            batch: B, used when ``context`` is None.
        """
        device = self.prototypes.device if self.prototypes_per_expert else next(self.parameters()).device
        summary = torch.zeros(batch, self.context_dim, device=device)
        if context is None or context.shape[1] == 0:
            return summary
        if context.shape[0] != batch or context.shape[2] != self.input_dim:
            raise ValueError(f"context must be ({batch}, T, {self.input_dim}), got {tuple(context.shape)}")
        if lengths is None:
            lengths = torch.full((batch,), context.shape[1], dtype=torch.long)
        lengths = lengths.to("cpu", torch.long).clamp(0, context.shape[1])
        has = lengths > 0
        if not bool(has.any()):
            return summary
        packed = nn.utils.rnn.pack_padded_sequence(context[has], lengths[has], batch_first=True, enforce_sorted=False)
        _, last = self.context_gru(packed)
        summary[has.to(device)] = last[-1]
        return summary

    def set_prototypes(self, prototypes: list[torch.Tensor]) -> None:
        """Store each expert's prototypes (a list of ``(k_i, D)`` tensors, ``k_i <= prototypes_per_expert``)."""
        if not self.prototypes_per_expert:
            raise ValueError("this router was built without a prototype memory (prototypes_per_expert=0)")
        if len(prototypes) != self.n_experts:
            raise ValueError(f"need prototypes for {self.n_experts} experts, got {len(prototypes)}")
        if any(len(p) == 0 for p in prototypes):
            raise ValueError(f"experts {[i for i, p in enumerate(prototypes) if len(p) == 0]} have no prototypes")
        # The memory shrinks to the largest expert's count: padding slots would cost every query a matmul row.
        slots = min(self.prototypes_per_expert, max(len(p) for p in prototypes))
        if slots != self.prototypes_per_expert:
            self.prototypes_per_expert = slots
            device = self.prototypes.device
            self.register_buffer("prototypes", torch.zeros(self.n_experts, slots, self.input_dim, device=device))
            self.register_buffer("prototype_mask", torch.zeros(self.n_experts, slots, dtype=torch.bool, device=device))
        self.prototypes.zero_()
        self.prototype_mask.zero_()
        for i, p in enumerate(prototypes):
            p = torch.as_tensor(p, dtype=torch.float32)[: self.prototypes_per_expert]
            self.prototypes[i, : p.shape[0]] = nn.functional.normalize(p, dim=-1)
            self.prototype_mask[i, : p.shape[0]] = True
        self._prototype_cache = None

    @property
    def has_prototypes(self) -> bool:
        return self._prototypes_flat() is not None

    def _prototypes_flat(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        # (N*K, D) prototypes and an (N, K) additive mask, cached: one matmul per query when serving.
        if not self.prototypes_per_expert:
            return None
        if self._prototype_cache is None:
            if not bool(self.prototype_mask.any()):
                return None
            flat = self.prototypes.reshape(-1, self.input_dim)
            bias = torch.zeros(self.prototype_mask.shape, device=flat.device).masked_fill(~self.prototype_mask, -4.0)
            self._prototype_cache = (flat, bias)
        return self._prototype_cache

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        self._prototype_cache = None
        super()._load_from_state_dict(*args, **kwargs)

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> RouterNet:
        self._prototype_cache = None  # .to(device) and friends replace the buffers
        return super()._apply(fn, *args, **kwargs)

    def prototype_similarity(self, embeddings: torch.Tensor) -> torch.Tensor:
        """(B, N): cosine similarity of each (unit-length) query to each expert's nearest prototype."""
        flat = self._prototypes_flat()
        if flat is None:
            raise ValueError("this router has no prototypes")
        sims = (embeddings @ flat[0].T).view(-1, self.n_experts, self.prototypes_per_expert)
        return (sims + flat[1]).amax(dim=-1)

    def mlp_logits(self, embeddings: torch.Tensor, context: torch.Tensor | None = None, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """The gating MLP's logits alone (no prototypes, no temperature): what training optimises (the linear head's, with one)."""
        if self.head == "linear":
            return self.linear(embeddings)
        if self.use_conv:
            local = self.pool(torch.relu(self._conv(embeddings))).flatten(1)
            # The raw embedding rides along (a residual path) so the conv only has to add to it.
            features = torch.cat([local, embeddings], dim=1)
        else:
            features = embeddings
        fingerprint = self.fingerprint(features)
        if self.context_dim:
            fingerprint = torch.cat([fingerprint, self.encode_context(context, lengths, embeddings.shape[0])], dim=1)
        return self.gate(fingerprint)

    def _conv(self, embeddings: torch.Tensor) -> torch.Tensor:
        # Conv1d with one input channel as an unfold + matmul: the same numbers (and the same
        # weights), several times faster on CPUs than the generic convolution for this shape.
        pad = self.kernel_size // 2
        patches = nn.functional.pad(embeddings, (pad, self.kernel_size - 1 - pad)).unfold(1, self.kernel_size, 1)
        out = patches @ self.conv.weight.view(self.channels, self.kernel_size).T + self.conv.bias
        return out.transpose(1, 2)

    def forward(self, embeddings: torch.Tensor, context: torch.Tensor | None = None, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Expert logits: the MLP's, plus ``prototype_weight`` x prototype similarity when there are prototypes.

        Args:
            embeddings: (B, D) unit-length query embeddings.
            context: optional (B, T, D) embeddings of previous turns, zero-padded (used when ``context_dim > 0``).
            lengths: optional (B,) count of real turns per row.
        """
        logits = self.mlp_logits(embeddings, context, lengths)
        if self.prototype_weight and self.has_prototypes:
            logits = logits + self.prototype_weight * self.prototype_similarity(embeddings)
        return logits

    def route_scores(self, embeddings: torch.Tensor, context: torch.Tensor | None = None, lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Calibrated expert probabilities (B, N) and an in-scope score (B,) in one pass.

        The in-scope score is the similarity to the nearest prototype when the router has
        prototypes, else the highest calibrated probability; low means "nothing like the training
        data": the router abstains below a threshold fitted on validation data.
        """
        logits = self.mlp_logits(embeddings, context, lengths)
        if self.has_prototypes:
            sims = self.prototype_similarity(embeddings)
            if self.prototype_weight:
                logits = logits + self.prototype_weight * sims
            probs = (logits / self.temperature).softmax(dim=-1)
            return probs, sims.amax(dim=-1)
        probs = (logits / self.temperature).softmax(dim=-1)
        return probs, probs.amax(dim=-1)

    def numpy_scorer(self) -> NumpyScorer | None:
        """The same ``route_scores`` for one query in plain numpy, or None where it has no such path.

        Per query, torch's fixed cost per operation outweighs the arithmetic of a network this
        small; the numpy copy of the weights answers ~3x faster. Only routers without the
        convolution and without a context path have one (the default kind).
        """
        if self.use_conv or self.context_dim:
            return None
        return NumpyScorer(self)

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


class NumpyScorer:
    """A frozen numpy copy of a (no-conv, no-context) ``RouterNet`` for one-query-at-a-time serving."""

    def __init__(self, model: RouterNet):
        linears = [model.linear] if model.head == "linear" else [model.fingerprint, model.gate[2], model.gate[5]]
        self.layers = [(layer.weight.detach().cpu().numpy().T.copy(), layer.bias.detach().cpu().numpy().copy()) for layer in linears]
        self.n_experts, self.temperature, self.weight = model.n_experts, model.temperature, model.prototype_weight
        flat = model._prototypes_flat()
        from scipy.special import erf

        self._erf = erf
        self.prototypes = None if flat is None else (flat[0].cpu().numpy().T.copy(), flat[1].cpu().numpy().copy())

    def log_scores(self, vector: np.ndarray) -> tuple[np.ndarray, float]:
        """Calibrated log-probabilities (N,) (what the blend with the character view reads) and the in-scope score for one embedding (D,).

        In-place arithmetic throughout: each array operation costs more than its arithmetic at these sizes.
        """
        if len(self.layers) == 1:  # a linear head
            w, b = self.layers[0]
            logits = (vector @ w).astype(np.float64)
            logits += b
        else:
            (w0, b0), (w1, b1), (w2, b2) = self.layers
            h = vector @ w0
            h += b0
            h = self._gelu(h)
            h = h @ w1
            h += b1
            h = self._gelu(h)
            logits = (h @ w2).astype(np.float64)
            logits += b2
        if self.prototypes is not None:
            protos, bias = self.prototypes
            sims = (vector @ protos).reshape(self.n_experts, -1)
            sims += bias
            best = sims.max(axis=1)
            logits += self.weight * best
            score = float(best.max())
        logits /= self.temperature
        logits -= logits.max()
        logits -= math.log(np.exp(logits).sum())
        return logits, (score if self.prototypes is not None else math.exp(float(logits.max())))

    def _gelu(self, z: np.ndarray) -> np.ndarray:
        """The exact (erf) GELU, in place: z * (1 + erf(z / sqrt 2)) / 2."""
        t = self._erf(z * 0.7071067811865476)
        t += 1.0
        t *= z
        t *= 0.5
        return t
