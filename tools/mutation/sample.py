"""The seeded sample of mutants, and the exact interval of its score."""

from __future__ import annotations

import math
import random


def sample_of(population: list[str], size: int, seed: int) -> dict:
    return {
        "seed": seed,
        "size": min(size, len(population)),
        "population": len(population),
        "names": draw(population, size, seed),
    }


def draw(population: list[str], size: int, seed: int) -> list[str]:
    """`size` of the sorted names, drawn without replacement, by the seed."""
    return sorted(random.Random(seed).sample(population, min(size, len(population))))


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> list[float] | None:
    """The exact (Clopper-Pearson) interval for a proportion of k in n."""
    if not n:
        return None
    alpha = 1 - confidence

    def at_least(p):  # P(X >= k), X ~ Binomial(n, p)
        return sum(binomial(n, i, p) for i in range(k, n + 1))

    def at_most(p):  # P(X <= k)
        return sum(binomial(n, i, p) for i in range(k + 1))

    low = 0.0 if k == 0 else bisect(lambda p: at_least(p) - alpha / 2)
    high = 1.0 if k == n else bisect(lambda p: alpha / 2 - at_most(p))
    return [round(low, 4), round(high, 4)]


def binomial(n: int, i: int, p: float) -> float:
    if p in (0.0, 1.0):
        return float(i == (n if p else 0))
    log = math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
    return math.exp(log + i * math.log(p) + (n - i) * math.log1p(-p))


def bisect(increasing, low=0.0, high=1.0) -> float:
    """The root of an increasing function on [0, 1]."""
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if increasing(middle) < 0 else (low, middle)
    return (low + high) / 2
