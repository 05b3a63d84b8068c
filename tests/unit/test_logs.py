"""Log hygiene: a broker still electing a group coordinator is not an ERROR at every start, but
one that stays unavailable is."""

from __future__ import annotations

import logging

import pytest

from frazil import logs


def test_group_coordinator_not_available_is_info_at_first_and_error_if_it_goes_on(
        capsys: pytest.CaptureFixture[str]) -> None:
    logs.setup("INFO")
    lookup = logging.getLogger("aiokafka.consumer.group_coordinator")
    try:
        for _ in range(22):
            lookup.error("Group Coordinator Request failed: %s", "[Error 15] GroupCoordinatorNotAvailableError")
        lookup.error("Group Coordinator Request failed: %s", "[Error 29] GroupAuthorizationFailedError")
        logging.getLogger().handlers[0].close()   # says what the Kafka-client fold still holds (logs.KafkaNoise)
        lines = capsys.readouterr().err.splitlines()
    finally:
        logging.getLogger().handlers[:] = []
    assert len(lines) == 23
    assert all(" INFO aiokafka.consumer.group_coordinator: the group coordinator is not available yet" in line
               for line in lines[:20]), lines[:3]
    assert " ERROR " in lines[20] and "GroupCoordinatorNotAvailableError" in lines[20]
    assert " ERROR " in lines[21] and "GroupAuthorizationFailed" in lines[21]
    # the 22nd, a repeat of the 21st, is folded into a summary with its count
    assert (" ERROR " in lines[22] and "repeated 1 time over" in lines[22]
            and "GroupCoordinatorNotAvailable" in lines[22])
