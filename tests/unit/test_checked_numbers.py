"""Tuning variables from the environment: finite and in range, or refused by name."""

from __future__ import annotations

import pytest

from tpot_locust.common.checked_numbers import env_count, env_number


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "-1", "1e400", "x", "20001"])
def test_a_bad_number_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv("TPOT_TEST_NUMBER", text)
    with pytest.raises(ValueError, match="TPOT_TEST_NUMBER=.*must be a number from 0 to 20000"):
        env_number("TPOT_TEST_NUMBER", 1.0, 0, 20_000)


def test_unset_gives_the_default_and_a_count_must_be_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TPOT_TEST_NUMBER", raising=False)
    assert env_number("TPOT_TEST_NUMBER", 2.5, 0, 10) == 2.5  # noqa: PLR2004
    monkeypatch.setenv("TPOT_TEST_NUMBER", "3.5")
    with pytest.raises(ValueError, match="whole number"):
        env_count("TPOT_TEST_NUMBER", 1, 0, 10)
    monkeypatch.setenv("TPOT_TEST_NUMBER", " 7 ")
    assert env_count("TPOT_TEST_NUMBER", 1, 0, 10) == 7  # noqa: PLR2004
