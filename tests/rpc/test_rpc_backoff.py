"""The one retry delay schedule (revivify.impl.rpc.backoff): capped exponential, jitter
only from the injected Random, bounds that hold for every attempt."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from revivify.impl.rpc import Backoff


def test_bases_double_up_to_the_cap() -> None:
    backoff = Backoff(initial=0.05, max=1.0, multiplier=2.0, jitter=0)
    assert [backoff.delay(n) for n in range(1, 8)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert backoff.base(10**9) == 1.0  # no overflow for absurd attempt counts


def test_jitter_stays_within_its_share_of_the_base() -> None:
    backoff = Backoff(initial=0.1, max=0.4, jitter=0.5)
    rng = random.Random(7)
    for attempt in range(1, 300):
        base = backoff.base(attempt)
        assert base / 2 <= backoff.delay(attempt, rng) <= base


def test_jitter_comes_from_the_injected_random_only() -> None:
    backoff = Backoff()
    first = [backoff.delay(n, random.Random(3)) for n in range(1, 20)]
    random.seed(12345)  # the global Random is never used
    assert [backoff.delay(n, random.Random(3)) for n in range(1, 20)] == first


def test_jitter_needs_an_injected_random() -> None:
    with pytest.raises(ValueError, match=r"injected random\.Random"):
        Backoff(jitter=0.5).delay(1)


@pytest.mark.parametrize("kwargs, field", [
    ({"initial": 0}, "initial"),
    ({"initial": float("nan")}, "initial"),
    ({"max": float("inf")}, "max"),
    ({"multiplier": 0.5}, "multiplier"),
    ({"jitter": 1.5}, "jitter"),
    ({"jitter": -0.1}, "jitter"),
    ({"initial": 2.0, "max": 1.0}, "max"),
])
def test_refuses_nonsense(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Backoff(**kwargs)


def test_attempts_start_at_one() -> None:
    with pytest.raises(ValueError, match="start at 1"):
        Backoff().base(0)


@given(
    initial=st.floats(1e-4, 10), ratio=st.floats(1, 100), multiplier=st.floats(1, 10),
    jitter=st.floats(0, 1), attempt=st.integers(1, 10_000), seed=st.integers(0, 2**32),
)
def test_every_delay_is_within_bounds(initial: float, ratio: float, multiplier: float,
                                      jitter: float, attempt: int, seed: int) -> None:
    backoff = Backoff(initial=initial, max=initial * ratio, multiplier=multiplier,
                      jitter=jitter)
    base = backoff.base(attempt)
    assert initial <= base <= backoff.max
    delay = backoff.delay(attempt, random.Random(seed))
    assert base * (1 - jitter) - 1e-12 <= delay <= base
    if attempt > 1:
        assert backoff.base(attempt - 1) <= base  # never shrinks
