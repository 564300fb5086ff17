"""The one retry delay schedule: capped exponential backoff with injected jitter.

Used by the client library between attempts of a call (options.py) and by the servers
between reconnections to a peer. A Backoff is a frozen value; the caller keeps the attempt
count (1-based: the number of attempts that failed so far) and asks for the delay::

    base(n)  = min(max, initial * multiplier ** (n - 1))
    delay(n) = base(n) * (1 - jitter) + uniform(0, base(n) * jitter)

so every delay lies in ``[base(n) * (1 - jitter), base(n)]``: never above `max`, and with
``jitter < 1`` never below a fixed share of the base, so a client backs off for real. The
jitter (default 0.5, "equal jitter") keeps many callers from retrying in lockstep; its
randomness comes from the random.Random the caller passes, never from the global one, so a
seeded test sees the same delays every run. ``jitter=0`` needs no Random at all (a plain
doubling schedule, deterministic by construction).

No sleeping here: the value only computes delays; the caller sleeps (trio.sleep, under
whatever cancel scope bounds it), so this module does no I/O and imports no trio.
"""

from __future__ import annotations

import math
import random

import attrs


def _positive_finite(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{attribute.name} must be a positive finite number, got {value!r}")


def _at_least_one(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (value >= 1 and math.isfinite(value)):
        raise ValueError(f"{attribute.name} must be a finite number >= 1, got {value!r}")


def _fraction(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not 0 <= value <= 1:
        raise ValueError(f"{attribute.name} must be in [0, 1], got {value!r}")


@attrs.frozen
class Backoff:
    """Delays between attempts (seconds): see the module docstring."""

    initial: float = attrs.field(default=0.05, validator=_positive_finite)
    max: float = attrs.field(default=1.0, validator=_positive_finite)
    multiplier: float = attrs.field(default=2.0, validator=_at_least_one)
    jitter: float = attrs.field(default=0.5, validator=_fraction)

    def __attrs_post_init__(self) -> None:
        if self.max < self.initial:
            raise ValueError(f"max ({self.max!r}) must be >= initial ({self.initial!r})")

    def base(self, attempt: int) -> float:
        """The delay before jitter after failed attempt `attempt` (1-based)."""
        if attempt < 1:
            raise ValueError(f"attempt numbers start at 1, got {attempt}")
        # Past 2**64 the cap has long applied; the bound keeps the power finite.
        exponent = min(attempt - 1, 64)
        return min(self.max, self.initial * self.multiplier ** exponent)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The jittered delay after failed attempt `attempt`: in [base * (1 - jitter), base].

        `rng` is required when ``jitter > 0`` (the randomness is always injected)."""
        base = self.base(attempt)
        if self.jitter == 0:
            return base
        if rng is None:
            raise ValueError("a Backoff with jitter needs an injected random.Random")
        fixed = base * (1 - self.jitter)
        delay = fixed + rng.uniform(0, base - fixed)
        assert 0 <= delay <= base, (delay, base)
        return delay


__all__ = ["Backoff"]
