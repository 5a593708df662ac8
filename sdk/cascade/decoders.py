"""Decoders of a cascade step's batch output: classify (top-k labels) and CTC (greedy text)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sdk.errors import ConfigError, ModelError
from sdk.spec.cascade import ClassifyDecoder, CtcDecoder


class Classify:
    def __init__(self, spec: ClassifyDecoder) -> None:
        self.spec = spec

    def __call__(self, output: np.ndarray) -> list[dict]:
        scores = output.reshape(len(output), -1).astype(np.float64)
        if scores.shape[1] != len(self.spec.labels):
            raise ModelError(f"cascade decoder classify: the model scores {scores.shape[1]} classes, labels names {len(self.spec.labels)}")
        if self.spec.activation == "softmax":
            scores = np.exp(scores - scores.max(axis=1, keepdims=True))
            scores /= scores.sum(axis=1, keepdims=True)
        elif self.spec.activation == "sigmoid":
            scores = 1.0 / (1.0 + np.exp(-scores))
        results = []
        for row in scores:
            best = np.argsort(-row, kind="stable")[: self.spec.top_k]
            results.append({"labels": [{"label": self.spec.labels[i], "score": round(float(row[i]), 4)} for i in best]})
        return results


class Ctc:
    """Greedy CTC: the best symbol per step, repeats collapsed, blanks (index 0) dropped; score = mean of the kept steps' probabilities."""

    def __init__(self, spec: CtcDecoder, folder: Path, where: str) -> None:
        path = folder / spec.characters
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where}.decoder.characters: {path} cannot be read: {exc}", hint="one symbol per line, UTF-8") from None
        self.symbols = ["", *lines, *([" "] if spec.space else [])]

    def __call__(self, output: np.ndarray) -> list[dict]:
        if output.ndim != 3 or output.shape[2] != len(self.symbols):
            raise ModelError(
                f"cascade decoder ctc: output {list(output.shape)}, expected [batch, steps, {len(self.symbols)}] "
                f"(blank, {len(self.symbols) - 1} characters)"
            )
        best, probs = output.argmax(axis=2), output.max(axis=2)
        results = []
        for steps, p in zip(best, probs, strict=True):
            keep = (steps != 0) & np.concatenate(([True], steps[1:] != steps[:-1]))
            text = "".join(self.symbols[i] for i in steps[keep])
            results.append({"text": text, "score": round(float(p[keep].mean()) if keep.any() else 0.0, 4)})
        return results


__all__ = ["Classify", "Ctc"]
