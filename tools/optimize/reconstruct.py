"""Channel selection by its effect on the next layer, and the least-squares refit of that layer.

For a consumer convolution with augmented weights A = [W | b] ([O, D+1]) and input Hessian H (statistics.py), the
output over the calibration pixels is A @ P. Removing a group g of columns (one input channel: its kh*kw taps) and
refitting the rest by least squares raises the squared output error by trace(A_g (Hinv_gg)^-1 A_g^T), Hinv = H^-1:
the Optimal Brain Surgeon formula for a group, which is what ThiNet's greedy selection and He et al.'s LASSO selection
approximate. Backward elimination removes, one at a time, the channel whose removal costs least summed over every
consumer of the space (each consumer's error relative to its output energy), updating each consumer's weights and
Hinv as the refit would. The final weights for a chosen set of kept channels are solved directly:
A' = A H[:, S] H[S, S]^-1 (the refit that makes the output match the original's on the same inputs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DAMPING = 1e-6  # of the mean diagonal of H, added before inverting (a rank-deficient H is common: dead channels)


@dataclass
class Consumer:
    """One convolution reading the space: its augmented weights and input Hessian, where the space's channels sit."""

    node: str
    weights: np.ndarray  # [O, C*kh*kw + 1] float64, the bias last
    hessian: np.ndarray  # [D+1, D+1] float64
    offset: int  # the space's first channel among the consumer's input channels
    taps: int  # kh*kw

    def columns(self, channel: int) -> np.ndarray:
        start = (self.offset + channel) * self.taps
        return np.arange(start, start + self.taps)

    def energy(self) -> float:
        return quadratic(self.weights, self.hessian)


def augmented_weights(weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """[O, C, kh, kw] and [O] -> [O, C*kh*kw + 1] in float64."""
    flat = weight.reshape(weight.shape[0], -1).astype(np.float64)
    column = np.zeros((weight.shape[0], 1)) if bias is None else bias.astype(np.float64).reshape(-1, 1)
    return np.hstack([flat, column])


def quadratic(weights: np.ndarray, hessian: np.ndarray) -> float:
    """sum over outputs of w H w^T: the squared output summed over the calibration pixels."""
    return float(np.sum((weights @ hessian) * weights))


def damped_inverse(hessian: np.ndarray) -> np.ndarray:
    """(H + damping I)^-1 by Cholesky (H is a Gram matrix: symmetric, and positive definite once damped), half the
    work of a general inverse; a general inverse where rounding leaves it not quite positive definite."""
    from scipy.linalg import lapack

    damped = hessian + DAMPING * max(float(np.mean(np.diag(hessian))), 1e-12) * np.eye(len(hessian))
    factor, info = lapack.dpotrf(damped, lower=False)
    if info == 0:
        inverse, info = lapack.dpotri(factor, lower=False)
    if info != 0:
        return np.linalg.inv(damped)
    upper = np.triu(inverse)
    return upper + np.triu(upper, 1).T


class Elimination:
    """Backward elimination of a space's channels through the kept `counts` (descending), by least output error
    across its consumers, carried out only as far as it is asked about (`error_at`, `kept`): the allocation seldom
    goes down every count of every space. A step removes up to 1/16 of the channels left (at least one) without
    passing the next count, so each count is reached exactly; the error there is the exact joint OBS increase,
    summed. The order is the same however far it is asked at a time."""

    def __init__(self, size: int, consumers: list[Consumer], counts: list[int]) -> None:
        self.size = size
        self._consumers = consumers
        self._targets = sorted(set(counts), reverse=True)
        self._states: list | None = None  # each consumer's refit weights, Hinv and energy, made at the first step
        self._alive = list(range(size))
        self._order: list[int] = []
        self.errors: dict[int, float] = {}  # kept count -> relative output error summed over the consumers
        self._total = 0.0

    @property
    def order(self) -> tuple[int, ...]:
        """The channels in the order they left, as far as the elimination has gone."""
        return tuple(self._order)

    def kept(self, size: int, keep: int) -> np.ndarray:
        self._reach(keep)
        removed = set(self._order[: size - keep])
        return np.array([c for c in range(size) if c not in removed], dtype=np.int64)

    def error_at(self, size: int, keep: int) -> float:
        if keep >= size:
            return 0.0
        self._reach(keep)
        return float(self.errors[keep])

    def _reach(self, keep: int) -> None:
        while self._targets and len(self._alive) > keep:
            self._down_to(self._targets.pop(0))
        if not self._targets:
            self.release()

    def release(self) -> None:
        """Let go of the consumers' inverses (as large as their Hessians); a later step recomputes them exactly."""
        self._states = None

    def _down_to(self, target: int) -> None:
        if self._states is None:
            fresh = not self._order  # else released part-way: continue from the exact refit over the channels left
            self._states = [
                [c, *((c.weights.copy(), damped_inverse(c.hessian)) if fresh else _refreshed(c, self.size, self._alive)), max(c.energy(), 1e-30)]
                for c in self._consumers
            ]
        alive = self._alive
        while len(alive) > target:
            count = max(1, min(len(alive) - target, len(alive) // 16))
            scores = np.zeros(len(alive))
            for consumer, weights, inverse, energy in self._states:
                scores += _removal_costs(consumer, weights, inverse, alive) / energy
            chosen = set(np.argsort(scores, kind="stable")[:count].tolist())
            channels = [c for i, c in enumerate(alive) if i in chosen]
            alive = [c for i, c in enumerate(alive) if i not in chosen]
            self._order += channels
            for state in self._states:
                consumer, weights, inverse, energy = state
                added = _remove(np.concatenate([consumer.columns(c) for c in channels]), weights, inverse)
                if added < 0:  # the downdates drifted (an ill-conditioned H): recompute exactly
                    state[1], state[2] = _refreshed(consumer, self.size, alive)
                self._total += max(added, 0.0) / energy
        self._alive = alive
        self.errors[target] = self._total


def eliminate(size: int, consumers: list[Consumer], counts: list[int]) -> Elimination:
    """The space's elimination through the kept `counts`, done as far as it is asked about (Elimination)."""
    return Elimination(size, consumers, counts)


def _refreshed(consumer: Consumer, size: int, alive: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The exact refit and inverse over the columns still in use (this space's alive channels and every other)."""
    gone = [consumer.columns(c) for c in sorted(set(range(size)) - set(alive))]
    kept = np.setdiff1d(np.arange(consumer.weights.shape[1]), np.concatenate(gone) if gone else np.zeros(0, int))
    weights = np.zeros_like(consumer.weights)
    weights[:, kept] = refit(consumer.weights, consumer.hessian, kept)
    inverse = np.zeros_like(consumer.hessian)
    inverse[np.ix_(kept, kept)] = damped_inverse(consumer.hessian[np.ix_(kept, kept)])
    return weights, inverse


def _removal_costs(consumer: Consumer, weights: np.ndarray, inverse: np.ndarray, alive: list[int]) -> np.ndarray:
    if consumer.taps == 1:
        columns = consumer.offset + np.asarray(alive)
        diagonal = np.maximum(inverse[columns, columns], 1e-30)
        return np.sum(weights[:, columns] ** 2, axis=0) / diagonal
    groups = np.stack([consumer.columns(c) for c in alive])  # [n, t]
    blocks = inverse[groups[:, :, None], groups[:, None, :]]  # [n, t, t]
    taps = weights[:, groups]  # [O, n, t]
    solved = np.linalg.solve(blocks + 1e-30 * np.eye(consumer.taps), np.transpose(taps, (1, 2, 0)))  # [n, t, O]
    return np.einsum("ont,nto->n", taps, solved)


def _remove(columns: np.ndarray, weights: np.ndarray, inverse: np.ndarray) -> float:
    """OBS update: the optimal change of the other weights when these columns go, and Hinv without them; returns the
    squared output error it adds."""
    block = inverse[np.ix_(columns, columns)]
    lost = weights[:, columns]
    factor = np.linalg.solve(block + 1e-30 * np.eye(len(columns)), inverse[columns, :])  # [t, D]
    added = float(np.sum(lost.T * np.linalg.solve(block + 1e-30 * np.eye(len(columns)), lost.T)))
    weights -= lost @ factor
    inverse -= inverse[:, columns] @ factor
    weights[:, columns] = 0.0
    inverse[columns, :] = 0.0
    inverse[:, columns] = 0.0
    return added


def refit(weights: np.ndarray, hessian: np.ndarray, kept_columns: np.ndarray) -> np.ndarray:
    """Least squares: the kept columns' weights (the bias column among them) that best reproduce the original output,
    A' = A H[:, S] H[S, S]^-1. Returns [O, len(S)]."""
    kept = np.asarray(kept_columns)
    block = hessian[np.ix_(kept, kept)]
    damping = DAMPING * max(float(np.mean(np.diag(block))), 1e-12)
    right = weights @ hessian[:, kept]  # [O, |S|]
    return np.linalg.solve(block + damping * np.eye(len(kept)), right.T).T


def relative_error(weights: np.ndarray, hessian: np.ndarray, refitted: np.ndarray, kept_columns: np.ndarray) -> float:
    """||A P - A' P_S||^2 / ||A P||^2 over the calibration pixels."""
    full = np.zeros_like(weights)
    full[:, kept_columns] = refitted
    difference = weights - full
    return quadratic(difference, hessian) / max(quadratic(weights, hessian), 1e-30)


def magnitude_kept(producers: list[np.ndarray], size: int, keep: int) -> np.ndarray:
    """The baseline: the `keep` channels whose producing filters have the largest L1 norms (each producer's norms
    scaled to mean 1 and summed), in channel order."""
    score = np.zeros(size)
    for weight in producers:
        norms = np.abs(weight.reshape(weight.shape[0], -1)).sum(axis=1).astype(np.float64)
        score += norms / max(float(norms.mean()), 1e-30)
    ranked = np.argsort(-score, kind="stable")
    return np.sort(ranked[:keep]).astype(np.int64)
