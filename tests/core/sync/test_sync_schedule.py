"""The sync schedule: which steps sync, as TRINITY_COMPAT.md's timelines say."""

from rft_core.sync.schedule import (
    expected_model_versions,
    explorer_syncs_after,
    trainer_syncs_after,
    trainer_version_for_explorer_sync,
)


def test_offset_1_interval_2_matches_the_documented_timeline():
    # explorer |1|2|3|sync|4|5|sync|6| ; trainer |1|2|sync|3|4|sync|
    assert [s for s in range(1, 9) if explorer_syncs_after(s, 2, 1)] == [3, 5, 7]
    assert [s for s in range(1, 9) if trainer_syncs_after(s, 2)] == [2, 4, 6, 8]
    # the explorer's sync after step 3 loads the trainer's weights of step 2
    assert trainer_version_for_explorer_sync(3, 1) == 2


def test_synchronous_on_policy_interval_1_offset_0_syncs_every_step():
    assert [s for s in range(1, 5) if explorer_syncs_after(s, 1, 0)] == [1, 2, 3, 4]
    assert expected_model_versions(4, 1, 0) == [0, 1, 2, 3]


def test_expected_versions_offset_1_interval_2():
    assert expected_model_versions(7, 2, 1) == [0, 0, 0, 2, 2, 4, 4]


def test_interval_3_offset_0():
    assert [s for s in range(1, 10) if explorer_syncs_after(s, 3, 0)] == [3, 6, 9]
    assert expected_model_versions(7, 3, 0) == [0, 0, 0, 3, 3, 3, 6]


def test_step_zero_and_non_positive_interval_never_sync():
    assert not explorer_syncs_after(0, 1, 0)
    assert not trainer_syncs_after(0, 1)
    assert not explorer_syncs_after(4, 0, 0)
    assert not trainer_syncs_after(4, 0)
