"""When a bulk batch lets the real-time lane in, and how it sizes the chunks it applies
between two turns (consumers/runtime/turns.py), on a clock the test moves."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from consumers.runtime.turns import CallCost, RealtimeTurns


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_realtime_lane_is_offered_a_turn_only_after_the_bulk_batch_worked_every_s() -> None:
    clock, taken = Clock(), []
    turns = RealtimeTurns(lambda: taken.append(clock.now) or True, every_s=0.002, clock=clock)
    turns.start()
    assert turns.offer() is False and taken == []  # no bulk work yet
    clock.now += 0.001
    assert turns.offer() is False
    clock.now += 0.0015
    assert turns.offer() is True and taken == [100.0025]
    assert turns.offer() is False  # counted again from the turn's end


def test_a_turn_that_found_nothing_says_so_and_the_next_look_waits_its_interval() -> None:
    clock = Clock()
    turns = RealtimeTurns(lambda: False, every_s=0.002, clock=clock)
    turns.start()
    clock.now += 0.003
    assert turns.offer() is False
    clock.now += 0.001
    assert turns.offer() is False  # looked 1 ms ago: nothing to ask


def test_the_time_spent_in_turns_is_kept_apart_from_the_bulk_batchs_own_work() -> None:
    clock = Clock()

    def take() -> bool:
        clock.now += 0.5  # the real-time batch's own work
        return True

    turns = RealtimeTurns(take, every_s=0.002, clock=clock)
    turns.start()
    clock.now += 0.01
    turns.offer()
    clock.now += 0.2  # past the third of the last turn's time the bulk batch owes
    turns.offer()
    assert turns.spent_s == pytest.approx(1.0)


def test_after_a_turn_the_bulk_batch_works_a_third_of_its_time_before_the_next_look() -> None:
    clock, taken = Clock(), []

    def take() -> bool:
        taken.append(clock.now)
        clock.now += 0.09  # a real-time batch's flush and commit on a slow machine
        return True

    turns = RealtimeTurns(take, every_s=0.0005, clock=clock)
    turns.start()
    clock.now += 0.001
    assert turns.offer() is True
    clock.now += 0.029
    assert turns.offer() is False  # 29 ms of bulk work after a 90 ms turn
    clock.now += 0.0011
    assert turns.offer() is True and len(taken) == 2


def test_under_a_stream_that_always_has_a_change_the_bulk_batch_keeps_a_quarter_of_the_time() -> None:
    clock = Clock()

    def take() -> bool:
        clock.now += 0.012
        return True

    turns = RealtimeTurns(take, clock=clock)
    turns.start()
    began, bulk = clock.now, 0.0
    while clock.now - began < 10:
        turns.offer()
        clock.now += 0.0005  # the bulk batch's work between two looks: a record, a chunk
        bulk += 0.0005
    assert bulk / (clock.now - began) == pytest.approx(0.25, abs=0.02)


def test_looks_that_find_nothing_come_every_s_whatever_the_share() -> None:
    clock, looks = Clock(), []
    turns = RealtimeTurns(lambda: looks.append(clock.now) or False, every_s=0.002, clock=clock, share=10.0)
    turns.start()
    for _ in range(3):
        clock.now += 0.0025
        turns.offer()
    assert looks == pytest.approx([100.0025, 100.005, 100.0075])  # an empty look costs no share


def test_a_turn_is_never_offered_inside_a_turn() -> None:
    clock, depth = Clock(), []

    def take() -> bool:
        depth.append(1)
        clock.now += 1
        assert turns.offer() is False  # the real-time batch's own work offers nothing
        return True

    turns = RealtimeTurns(take, every_s=0.002, clock=clock)
    clock.now += 1
    assert turns.offer() is True and depth == [1]


def test_an_adapters_costs_are_learnt_from_calls_of_two_sizes() -> None:
    turns = RealtimeTurns(lambda: False)
    assert [turns.chunk(100) for _ in range(4)] == [15, 25, 15, 25]
    assert turns.chunk(10) == 10  # never more than is left


def test_chunks_take_about_2_ms_of_work_swinging_around_it() -> None:
    turns = RealtimeTurns(lambda: False)
    for n in (100, 40, 60, 20):  # 50 us per change, no fixed cost: 40 changes per 2 ms
        turns.measured(n, n * 50e-6)
    assert [turns.chunk(1000) for _ in range(4)] == [30, 50, 30, 50]


def test_a_dear_fixed_cost_per_call_keeps_chunks_big_enough_to_pay_for_it() -> None:
    """A transaction commit of 2.4 ms per call: chunks of 2 ms would spend most of their time
    committing, so a chunk is at least twice the fixed cost's worth of changes."""
    turns = RealtimeTurns(lambda: False)
    for n in (100, 50, 20, 80):
        turns.measured(n, 0.0024 + n * 20e-6)
    assert turns.chunk(100) == 100  # 2 x 2.4 ms / 20 us = 240 changes at least
    assert [turns.chunk(1000) for _ in range(2)] == [300, 180]


def test_a_call_cost_is_fitted_as_fixed_plus_per_change() -> None:
    cost = CallCost()
    assert cost.fit() is None
    for n in (10, 100, 30, 70):
        cost.add(n, 0.001 + n * 0.0001)
    fixed, per = cost.fit() or (0, 0)
    assert fixed == pytest.approx(0.001) and per == pytest.approx(0.0001)


def test_calls_all_of_about_one_size_tell_nothing_apart() -> None:
    cost = CallCost()
    for n in (100, 100, 101, 99):
        cost.add(n, 0.005)
    assert cost.fit() is None


def test_bigger_calls_that_were_not_dearer_put_the_whole_cost_on_the_changes() -> None:
    cost = CallCost()
    cost.add(10, 0.004)
    cost.add(100, 0.002)
    assert cost.fit() == (0.0, pytest.approx(0.006 / 110, rel=0.02))  # the older call has faded a little
