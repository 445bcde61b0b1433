"""The reference model on the examples of issue 16 and the documented rule."""

from __future__ import annotations

from tests.server.changelog.reference_model import Change, replay


def up(key, value, seq=None, change_type="+I"):
    return Change((key,), (key, value, seq), change_type, seq)


def delete(key, seq=None):
    return Change((key,), (key, None, seq), "-D", seq)


def test_issue_example_insert_then_delete_with_a_null_sequence_value_fails_naming_the_key():
    # (7, 9.5, 'paid', now(), '+I'), (7, NULL, NULL, NULL, '-D') with 'sequence-by'='ts'
    outcome = replay([[up(7, 9.5, seq="2026-01-01"), delete(7)]], sequence_by=True)
    assert outcome.failed_commit == 0 and outcome.violation.ambiguous == [(7,)]
    assert outcome.state == {}


def test_later_commit_wins_and_sequence_by_orders_one_commit():
    commits = [
        [up(1, 1.0, 1), up(2, 2.0, 1)],
        [up(1, 9.0, 5, "+U"), up(1, 1.5, 9, "-U"), up(1, 7.0, 4, "+U"), delete(2, 0)],
        [delete(1, 1), up(1, 3.0, 2, None)],
    ]
    outcome = replay(commits, sequence_by=True)
    assert outcome.violation is None
    assert outcome.state == {(1,): (1, 3.0, 2)}


def test_a_tie_only_matters_at_the_largest_sequence_value():
    assert replay([[up(1, 1.0, 1), up(1, 2.0, 1), up(1, 3.0, 2)]], True).state == {(1,): (1, 3.0, 2)}
    assert replay([[up(1, 1.0, 1), up(1, 2.0, 2), delete(1, 2)]], True).violation.ambiguous == [(1,)]


def test_without_sequence_by_two_different_changes_of_a_key_in_one_commit_fail():
    outcome = replay([[up(1, 1.0)], [up(1, 2.0), delete(1)], [up(1, 5.0)]], sequence_by=False)
    assert outcome.failed_commit == 1 and outcome.state == {(1,): (1, 1.0, None)}


def test_same_effect_is_no_conflict_and_minus_u_is_ignored():
    commits = [[up(1, 1.0), up(1, 1.0, change_type="+U"), up(2, 2.0)],
               [delete(2), delete(2), up(1, 0.5, change_type="-U"), up(1, 4.0, change_type="+U")]]
    outcome = replay(commits, sequence_by=False)
    assert outcome.violation is None and outcome.state == {(1,): (1, 4.0, None)}


def test_a_null_sequence_value_wins_only_alone():
    assert replay([[up(1, 1.0, None)]], True).state == {(1,): (1, 1.0, None)}
    assert replay([[up(1, 1.0, None), up(1, 2.0, 3)]], True).violation.ambiguous == [(1,)]


def test_unknown_change_types_and_null_keys_fail_the_commit_with_counts():
    commits = [[up(1, 1.0)],
               [up(2, 1.0, change_type="+X"), up(3, 1.0, change_type="+X"), up(4, 1.0, change_type="-d"),
                Change((None,), (None, 1.0, None), None), up(1, 9.0)]]
    outcome = replay(commits, sequence_by=False)
    assert outcome.failed_commit == 1 and outcome.state == {(1,): (1, 1.0, None)}
    assert outcome.violation.change_types == {"+X": 2, "-d": 1} and outcome.violation.null_keys == 1
