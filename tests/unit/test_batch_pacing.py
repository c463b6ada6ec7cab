"""A lane's batch size against the consumer's poll interval (consumers/runtime/pacing.py)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from consumers.runtime.pacing import BatchPacer, membership_lost


def test_a_removal_during_a_batch_whose_own_work_overran_half_the_interval_halves_the_batch() -> None:
    pacer = BatchPacer(most=500, interval_s=60)
    assert pacer.removed(work_s=45) is True
    assert pacer.size == 250
    assert pacer.removed(work_s=31) is True
    assert pacer.size == 125


def test_a_removal_while_the_batch_mostly_waited_for_the_target_keeps_the_size() -> None:
    pacer = BatchPacer(most=500, interval_s=60)
    assert pacer.removed(work_s=2) is False  # a smaller batch would have waited as long
    assert pacer.size == 500


def test_the_size_never_falls_below_one_record() -> None:
    pacer = BatchPacer(most=3, interval_s=10)
    for _ in range(5):
        pacer.removed(work_s=9)
    assert pacer.size == 1
    assert pacer.removed(work_s=9) is False


def test_quick_batches_let_a_halved_size_grow_back_to_the_configured_one_and_no_further() -> None:
    pacer = BatchPacer(most=500, interval_s=80)
    pacer.removed(work_s=70)
    pacer.removed(work_s=70)
    assert pacer.size == 125
    pacer.done(work_s=30)  # not quick: stays
    assert pacer.size == 125
    for _ in range(5):
        pacer.done(work_s=1)
    assert pacer.size == 500


def test_a_commit_refused_because_the_group_removed_the_member_is_told_apart_from_other_refusals() -> None:
    assert membership_lost(KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID)))
    assert membership_lost(KafkaException(KafkaError(KafkaError.FENCED_INSTANCE_ID)))
    assert not membership_lost(KafkaException(KafkaError(KafkaError.ILLEGAL_GENERATION)))  # a rebalance raced it
    assert not membership_lost(KafkaException(KafkaError(KafkaError.REBALANCE_IN_PROGRESS)))
    assert not membership_lost(KafkaException(KafkaError(KafkaError._TRANSPORT)))
    assert not membership_lost(KafkaException("no error object"))
