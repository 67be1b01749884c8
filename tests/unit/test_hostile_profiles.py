"""Simulator profiles and tokenizer files a scenario names, read with bounds (issue 25)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tpot_locust.common.tokens import TokenizerError, load_tokenizer
from tpot_locust.sim.profiles import ProfileError, load_profile, parse_assignment

BOMB = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
    f"{b}: &{b} [{', '.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_an_alias_bomb_profile_is_refused_at_once(tmp_path: Path) -> None:
    profile = tmp_path / "bomb.yaml"
    profile.write_text("extends: cpu-slow\n" + BOMB)
    began = time.monotonic()
    with pytest.raises(ProfileError, match="aliases expanded"):
        load_profile(str(profile))
    with pytest.raises(ProfileError, match="aliases expanded"):
        parse_assignment("stall_ms=" + BOMB.replace("\n", ", ").join("{}"))
    assert time.monotonic() - began < 2  # noqa: PLR2004


def test_a_huge_or_deep_profile_is_refused(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as file:
        os.truncate(file.fileno(), 1 << 30)  # sparse: 1 GiB of zeros, never read
    with pytest.raises(ProfileError, match="the limit is 65536 bytes"):
        load_profile(str(huge))
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ProfileError):
        load_profile(str(deep))


def test_a_tokenizer_file_past_its_cap_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "tok"
    folder.mkdir()
    with open(folder / "tokenizer.json", "wb") as file:
        os.truncate(file.fileno(), 300 << 20)
    with pytest.raises(TokenizerError, match="over 256 MiB"):
        load_tokenizer(folder)
