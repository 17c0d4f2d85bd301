"""make matrix's pieces that need no vLLM: first bad / first good, and the findings it reads."""

from kvproof.replay import bisect


def test_first_bad_and_first_good_release():
    seed = [("0.27.0", "FAIL"), ("0.27.1", "FAIL"), ("0.28.0", "OK"), ("0.32.0", "WARN")]
    assert bisect.first_bad_good(seed) == ("0.27.0", "0.28.0")
    assert bisect.first_bad_good([("0.27.0", "OK"), ("0.28.0", "FAIL"), ("0.31.0", "FAIL"),
                                  ("0.32.0", "NOT_EXPRESSIBLE")]) == ("0.28.0", None)  # gone, not fixed
    assert bisect.first_bad_good([("0.27.0", "FAIL"), ("0.33.0", "FAIL")]) == ("0.27.0", None)
    assert bisect.first_bad_good([("0.27.0", "OK"), ("0.28.0", "ERROR")]) == (None, None)
    # ERROR and unreplayed cells say nothing about the fix
    assert bisect.first_bad_good([("0.27.0", "FAIL"), ("0.28.0", "ERROR"), ("0.29.0", "OK")]) == ("0.27.0", "0.29.0")


def test_known_findings_come_from_the_ledger_with_the_all_mode_variant():
    found = bisect.known_findings()
    assert found, "the ledger holds function/manager findings (the seed bug at least): none read"
    for name, lay, tier in found:
        assert tier in ("function", "manager")
    # the seed class (an align-mode Mamba finding) comes with its mamba_cache_mode=all variant
    bases = {name for name, _, _ in found if not name.endswith("mamba_cache_mode=all")}
    variants = [(name, lay) for name, lay, _ in found if name.endswith("mamba_cache_mode=all")]
    assert variants, f"no mamba_cache_mode=all variant among {sorted(bases)}"
    for name, lay in variants:
        assert lay.cache.mamba_cache_mode == "all"
        assert name.removesuffix(" with mamba_cache_mode=all") in bases, name
