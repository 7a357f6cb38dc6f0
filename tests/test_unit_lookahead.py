"""policy/lookahead.py: a scoring round computes the next E-step; the E-step call takes it
only for the very same estimator and model, and a guess that keeps missing is given up."""

from mixle_mpi.policy.lookahead import MISSES_ALLOWED, Lookahead


def test_the_e_step_call_for_the_scored_model_takes_what_was_computed_once():
    a = Lookahead(True)
    a.computed(b"est+m1", "results of m1")
    assert a.take(b"est+m1") == "results of m1"
    assert a.take(b"est+m1") is None  # taken: a second call computes it in a round of its own
    assert (a.hits, a.misses, a.on) == (1, 0, True)


def test_another_model_or_estimator_is_computed_in_a_round_of_its_own():
    a = Lookahead(True)
    a.computed(b"est+m1", "results of m1")
    assert a.take(b"est+m2") is None
    assert (a.hits, a.misses, a.on) == (0, 1, True)


def test_a_guess_that_keeps_missing_is_given_up():
    a = Lookahead(True)
    for i in range(MISSES_ALLOWED):
        a.computed(b"scored %d" % i, i)
        assert a.take(b"e-stepped %d" % i) is None
    assert not a.on
    assert not a.wanted(have_estimator=True, saving=False)


def test_an_e_step_call_with_nothing_computed_ahead_is_no_miss():
    a = Lookahead(True)
    assert a.take(b"est+m1") is None
    assert a.misses == 0 and a.on


def test_wanted_only_with_an_estimator_no_checkpoints_and_the_setting_on():
    assert Lookahead(True).wanted(True, False)
    assert not Lookahead(True).wanted(False, False)  # no E-step or initialization yet
    assert not Lookahead(True).wanted(
        True, True
    )  # checkpoints: iteration k is saved before E-step k+1
    assert not Lookahead(False).wanted(True, False)
