"""Every lemma the encoding relies on is checked (exhaustively and by Z3)."""

import pytest

pytest.importorskip("z3")

from kvproof.spec import lemmas


def test_divisibility_facts_proved_by_z3():
    assert lemmas.check_transitivity() == "proved"


def test_gcd_lcm_facts_exhaustive():
    assert lemmas.check_exhaustive() > 100000


def test_z3_form_of_facts_matches():
    assert lemmas.check_instance((4, 6, 9), (True, False, True))
    assert lemmas.check_instance((544, 544, 181), (True, True, True))
