"""Exponential backoff with full jitter (the AWS Architecture Blog's "Exponential
Backoff and Jitter"): the n-th retry waits uniform(0, min(cap, base * 2**n)).

Full jitter spreads thousands of agents that lost the daemon at the same
moment over the whole window, so they do not come back in one wave.

Not thread-safe: one Backoff per loop.
"""
import random
from typing import Optional


class Backoff:
    def __init__(self, base: float = 0.5, cap: float = 30.0,
                 rng: Optional[random.Random] = None):
        if base <= 0 or cap < base:
            raise ValueError("need 0 < base <= cap")
        self.base = base
        self.cap = cap
        self.failures = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        """Seconds to wait before the next try, after one more failure."""
        ceiling = min(self.cap, self.base * (2 ** min(self.failures, 30)))
        self.failures += 1
        return self._rng.uniform(0, ceiling)

    def reset(self) -> None:
        self.failures = 0


def jittered(period: float, rng: random.Random, spread: float = 0.1) -> float:
    """`period` give or take `spread` (a fraction), so that periodic work of
    many agents started together does not stay in step."""
    return period * (1 + rng.uniform(-spread, spread))
