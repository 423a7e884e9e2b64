"""Unit tests for the share-group "lag" assignor (coordinator/assignors/share_lag.py).

Expected values are worked out by hand from the rules in the module docstring
(largest remainder with at least one member per backlogged group, balanced
bins for light partitions, hysteresis, churn bound); property tests use fixed
random seeds.
"""

import random
from fractions import Fraction

import pytest

from coordinator.assignors import SHARE_ASSIGNORS, MemberSpec, ShareLagAssignor, TopicSpec, get_share_assignor
from coordinator.assignors.share_lag import _apportion

T1, T2 = bytes(15) + b"\x01", bytes(15) + b"\x02"
lag_assignor = ShareLagAssignor()


def members_of(n, topics=(T1,), current=None):
    current = current or {}
    return {f"m{i}": MemberSpec(frozenset(topics), assigned_partitions=current.get(f"m{i}", {})) for i in range(n)}


def run(lags, n, current=None, assignor=lag_assignor, topic=T1, assignable=None):
    """Assign ``n`` members over one topic whose partition p has backlog ``lags[p]``."""
    topics = {topic: TopicSpec("t", len(lags))}
    return assignor.assign(members_of(n, (topic,), current), topics, lag=lambda t, p: lags[p],
                           assignable=assignable)


def per_partition(result, topic=T1):
    """How many members hold each partition, by partition."""
    counts = {}
    for parts in result.values():
        for p in parts.get(topic, ()):
            counts[p] = counts.get(p, 0) + 1
    return [counts.get(p, 0) for p in range(max(counts) + 1)] if counts else []


def partitions(result, topic=T1):
    return {m: sorted(parts.get(topic, ())) for m, parts in result.items()}


def moved(before, after):
    return sorted(m for m in before if before[m] != after[m])


def assert_valid(result, lags, n):
    """Every member holds something, every partition (backlogged or not) is held."""
    assert len(result) == n
    assert all(parts for parts in result.values()) or n > len(lags) == 0
    held = {p for parts in result.values() for p in parts.get(T1, ())}
    assert held == set(range(len(lags)))


# ---------------------------------------------------------------- registry


def test_registry_and_default():
    assert set(SHARE_ASSIGNORS) == {"simple", "lag"}
    assert get_share_assignor("lag").name == "lag" and isinstance(get_share_assignor("lag"), ShareLagAssignor)
    with pytest.raises(KeyError):
        get_share_assignor("uniform")


# ---------------------------------------------------------------- proportionality


def test_issue_benchmark_backlog_puts_most_members_on_the_heavy_partition():
    # F = 100,000 / 8 = 12,500: p0 is heavy, p1..p3 (10,000 together) share one bin; quotas 7.2 / 0.8.
    result = run([90_000, 5_000, 3_000, 2_000], 8)
    assert per_partition(result) == [7, 1, 1, 1]
    light = [m for m, ps in partitions(result).items() if ps != [0]]
    assert len(light) == 1 and partitions(result)[light[0]] == [1, 2, 3]


def test_members_in_proportion_to_backlog_largest_remainder():
    # Quotas 10 * (50, 30, 20) / 100 = 5, 3, 2: exact.
    assert per_partition(run([50, 30, 20], 10)) == [5, 3, 2]
    # Quotas 7 * (50, 30, 20) / 100 = 3.5, 2.1, 1.4: floors 3, 2, 1, the one left to the largest remainder (.5).
    assert per_partition(run([50, 30, 20], 7)) == [4, 2, 1]
    # Quotas 6 * (45, 35, 20) / 100 = 2.7, 2.1, 1.2: floors 2, 2, 1, remainder to .7.
    assert per_partition(run([45, 35, 20], 6)) == [3, 2, 1]


def test_every_backlogged_partition_gets_a_member_even_with_a_tiny_quota():
    # p1's quota is 4 * 1 / 100,001 < 1: it still gets a member, in a bin of light partitions.
    result = run([100_000, 1, 0], 4)
    assert per_partition(result)[:2] == [3, 1]
    assert all(parts for parts in result.values())


def test_quota_below_one_is_fixed_and_the_rest_recomputed():
    assert _apportion([90, 5, 5], 5, [0, 0, 0]) == [3, 1, 1]
    # Recomputed: 4 seats left for 90 + 10... and with 2 seats per partition exactly: 6 * 1/3 each.
    assert _apportion([10, 10, 10], 6, [0, 0, 0]) == [2, 2, 2]
    assert sum(_apportion([7, 1, 1, 1], 9, [0] * 4)) == 9


# ---------------------------------------------------------------- ties


def test_ties_go_to_partition_order_then_to_current_holders():
    # Quotas 1.5 each: two members left over, to p0 and p1 (equal remainders, equal lags, partition order).
    assert per_partition(run([10, 10, 10, 10], 6)) == [2, 2, 1, 1]
    # With p2 and p3 held twice already, the extra members stay there (stickiness breaks the tie).
    current = {"m0": {T1: {2}}, "m1": {T1: {2}}, "m2": {T1: {3}}, "m3": {T1: {3}}, "m4": {T1: {0}},
               "m5": {T1: {1}}}
    assert per_partition(run([10, 10, 10, 10], 6, current)) == [1, 1, 2, 2]


def test_result_does_not_depend_on_input_order():
    rng = random.Random(7)
    for _ in range(100):
        n, lags = rng.randint(1, 9), [rng.choice([0, 0, 5, 50, 500, 5000]) for _ in range(rng.randint(1, 8))]
        topics = {T1: TopicSpec("t", len(lags)), T2: TopicSpec("u", 2)}
        members = members_of(n, (T1, T2))
        first = lag_assignor.assign(members, topics, lag=lambda t, p: lags[p] if t == T1 else 7)
        again = lag_assignor.assign(dict(reversed(members.items())), dict(reversed(topics.items())),
                                    lag=lambda t, p: lags[p] if t == T1 else 7)
        assert first == again and list(first) == sorted(members)


# ---------------------------------------------------------------- zero backlog


def test_no_backlog_spreads_members_evenly():
    assert per_partition(run([0, 0, 0, 0], 8)) == [2, 2, 2, 2]
    result = run([0, 0, 0, 0], 2)
    assert sorted(len(ps) for ps in partitions(result).values()) == [2, 2]
    assert per_partition(result) == [1, 1, 1, 1]
    # Without a lag function at all: the same as no backlog.
    topics = {T1: TopicSpec("t", 4)}
    assert per_partition(lag_assignor.assign(members_of(8), topics)) == [2, 2, 2, 2]


def test_drained_partitions_keep_one_holder_who_works_elsewhere():
    result = run([100, 0, 0, 0], 4)
    assert per_partition(result) == [4, 1, 1, 1]
    # Each drained partition is a second partition of a different member.
    assert sorted(len(ps) for ps in partitions(result).values()) == [1, 2, 2, 2]


def test_negative_lag_counts_as_zero():
    assert per_partition(run([-5, 100], 3)) == [1, 3]


# ---------------------------------------------------------------- members fewer / more than partitions


def test_fewer_members_than_partitions_balances_lag():
    # F = 50: all light, two bins by balanced backlog: 40 + 10 and 30 + 20.
    result = partitions(run([40, 30, 20, 10], 2))
    assert sorted(result.values()) == [[0, 3], [1, 2]]
    # Eight partitions of 10 over three members: 30 / 30 / 20, each partition once.
    result = run([10] * 8, 3)
    assert per_partition(result) == [1] * 8
    assert sorted(len(ps) for ps in partitions(result).values()) == [2, 3, 3]


def test_fewer_members_but_one_dominant_partition_gets_several():
    # 6 partitions, 4 members: the 90,000 partition is heavy (F = 22,501) and gets 3 members; the five
    # tiny ones are one bin with one member.
    result = run([90_000, 1, 1, 1, 1, 1], 4)
    assert per_partition(result) == [3, 1, 1, 1, 1, 1]


def test_more_members_than_partitions_every_member_works():
    result = run([1000, 1000], 5)
    assert per_partition(result) == [3, 2] and all(partitions(result).values())


def test_only_assignable_partitions_are_given():
    result = run([10, 1000, 10], 3, assignable=lambda t, p: p != 1)
    assert per_partition(result) == [2, 0, 1] or per_partition(result) == [1, 0, 2]


def test_property_valid_for_random_groups():
    rng = random.Random(11)
    for _ in range(300):
        n, lags = rng.randint(1, 12), [rng.choice([0, 1, 10, 100, 10_000, 90_000]) for _ in range(rng.randint(1, 10))]
        result = run(lags, n)
        assert_valid(result, lags, n)
        backlogged = [p for p, lag in enumerate(lags) if lag > 0]
        counts = per_partition(result)
        assert all(counts[p] >= 1 for p in backlogged)
        if backlogged and n >= len(backlogged):  # every member on backlog
            assert all(set(ps) & set(backlogged) for ps in partitions(result).values())


# ---------------------------------------------------------------- stickiness and hysteresis


def test_same_input_twice_changes_nothing():
    lags = [90_000, 5_000, 3_000, 2_000]
    first = run(lags, 8)
    assert run(lags, 8, first) == first


def test_small_backlog_moves_do_not_move_members():
    lags = [50_000, 30_000, 20_000]
    first = run(lags, 10)
    # 10 % drift: the target would be 6/2/2 (quota 5.9) but the current drain is within tolerance.
    assert run([59_000, 21_000, 20_000], 10, first) == first


def test_members_keep_their_partitions_when_a_member_joins():
    lags = [40_000, 40_000, 20_000]
    first = run(lags, 4)
    assert per_partition(first) == [2, 1, 1]  # quotas 1.6 / 1.6 / 0.8: p2 fixed at 1, tie to p0
    second = run(lags, 5, first)
    assert per_partition(second) == [2, 2, 1]  # quotas 2 / 2 / 1
    assert moved(partitions(first), {m: partitions(second)[m] for m in partitions(first)}) == []


def test_members_of_a_drained_partition_move_where_the_backlog_is():
    lags = [90_000, 5_000, 3_000, 2_000]
    first = run(lags, 10)  # F = 10,000: p0 gets 9 of quota 9, light bin {p1, p2, p3} one member
    assert per_partition(first) == [9, 1, 1, 1]
    # Only p1..p3 drained later: the light member stays their (one) holder and also joins p0.
    second = run([60_000, 0, 0, 0], 10, first)
    assert per_partition(second) == [10, 1, 1, 1]


def test_rebalances_when_the_backlog_moves_far():
    first = run([60_000, 20_000, 20_000], 5)
    assert per_partition(first) == [3, 1, 1]
    # p2 now holds nearly everything: members follow (up to the bound per assignment).
    second = run([1_000, 1_000, 98_000], 5, first)
    assert per_partition(second)[2] > per_partition(first)[2]


# ---------------------------------------------------------------- churn bound


def test_churn_is_bounded_per_assignment_and_converges():
    n = 12
    before = run([10_000] * 4, n)
    assert per_partition(before) == [3, 3, 3, 3]
    # F = 100,000 / 12: p0..p2 are light (one bin, quota 0.36 -> 1 member), the target gives p3 11.
    lags = [1_000, 1_000, 1_000, 97_000]
    bound = -(-n // 4)
    rounds = []
    while (after := run(lags, n, before)) != before:
        # Working members (all of them hold backlog here) move at most `bound` at a time.
        rounds.append(len(moved(partitions(before), partitions(after))))
        assert_valid(after, lags, n)
        before = after
        assert len(rounds) <= 6
    assert rounds == [3, 3]
    # It stops once the drain is within the tolerance: 97,000 / 9 <= 1.2 * 97,000 / 11 + 1,000.
    assert per_partition(before) == [1, 1, 1, 9]


def test_churn_bound_is_configurable_and_idle_members_move_freely():
    eager = ShareLagAssignor(move_fraction=Fraction(1))
    before = run([10_000] * 4, 12, assignor=eager)
    after = run([1_000, 1_000, 1_000, 97_000], 12, before, assignor=eager)
    assert per_partition(after) == [1, 1, 1, 11]
    # Members with no backlog (their partitions drained) are not counted: all go at once.
    before = run([10_000] * 4, 12)
    after = run([0, 0, 0, 50_000], 12, before)
    assert per_partition(after)[3] == 12


def test_tolerance_zero_always_takes_the_target():
    strict = ShareLagAssignor(tolerance=Fraction(0), min_gain=0)
    first = run([50_000, 30_000, 20_000], 10, assignor=strict)
    second = run([59_000, 21_000, 20_000], 10, first, assignor=strict)
    assert per_partition(second) == [6, 2, 2]
