"""The daemon's glibc malloc settings: applied unless the user tunes malloc, refused by nothing."""

import ctypes

import pytest

from frazil import malloc


def test_the_users_own_malloc_tuning_wins() -> None:
    assert malloc.settings({}) == {malloc.M_TRIM_THRESHOLD: 128 << 20, malloc.M_MMAP_THRESHOLD: 32 << 20}
    for env in ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}, {"MALLOC_TRIM_THRESHOLD_": "0"},
                {"MALLOC_MMAP_THRESHOLD_": "65536"}):
        assert malloc.settings(env) == {}
        assert malloc.tune(env) is False


def test_glibc_takes_both_settings() -> None:
    if not hasattr(ctypes.CDLL(None), "mallopt"):
        pytest.fail("this suite runs on glibc (Debian); mallopt is missing")
    # True only when mallopt accepted both values
    assert malloc.tune({}) is True
