"""Retry delays back off exponentially, stay under the cap and keep a jittered spread."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from clock_server.engine.backoff import RetryPolicy

policies = st.builds(
    RetryPolicy,
    base_ms=st.integers(1, 10_000),
    cap_ms=st.integers(10_000, 10_000_000),
    max_retries=st.integers(0, 30),
)


@given(policies, st.integers(1, 200), st.integers(0, 2**32))
def test_delay_is_between_half_and_all_of_the_capped_step(policy, tries, seed):
    step = min(policy.cap_ms, policy.base_ms * 2 ** (tries - 1))
    delay = policy.delay_ms(tries, random.Random(seed))
    assert step - step // 2 <= delay <= step <= policy.cap_ms


@given(policies, st.integers(1, 60))
def test_the_step_never_shrinks(policy, tries):
    low = random.Random(0)
    assert policy.delay_ms(tries + 1, _Max()) >= policy.delay_ms(tries, _Max())
    assert policy.delay_ms(tries, low) >= 1


def test_gives_up_after_the_last_retry():
    policy = RetryPolicy(max_retries=3)
    assert [policy.gives_up(n) for n in range(1, 6)] == [False, False, False, True, True]
    assert RetryPolicy(max_retries=0).gives_up(1)


class _Max(random.Random):
    def randint(self, a: int, b: int) -> int:
        return b
