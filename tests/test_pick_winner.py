"""The pick: the fastest verified candidate, unless it leads cuBLAS by no more than the noise."""

from autotune_cli.results import OK, VENDOR_MARGIN, WRONG_RESULT, Candidate, is_pick, pick_winner


def cand(uid, ms, status=OK, **params):
    return Candidate(uid=uid, params=params, status=status, ms=ms)


def test_a_lead_within_the_margin_is_a_tie_and_goes_to_the_vendor():
    aten = cand("aten::mm", 1.0)
    close = cand("triton::mm", 1.0 * (1 - VENDOR_MARGIN) + 1e-6, BLOCK_M=64)
    assert pick_winner([close, aten]) is aten


def test_a_clear_lead_wins():
    aten = cand("aten::mm", 1.0)
    fast = cand("triton::mm", 0.9, BLOCK_M=64)
    assert pick_winner([aten, fast]) is fast


def test_the_best_vendor_candidate_keeps_the_tie_and_wrong_ones_never_count():
    slow, fast_aten = cand("aten::mm", 1.2), cand("aten::mm", 1.0, note=1)
    wrong_fast = cand("triton::mm", 0.1, status=WRONG_RESULT, BLOCK_M=16)
    close = cand("triton::mm_splitk", 0.99, SPLIT_K=4)
    assert pick_winner([slow, fast_aten, wrong_fast, close]) is fast_aten
    assert pick_winner([wrong_fast]) is None


def test_our_alignment_template_is_not_the_vendor():
    """aten::mm_aligned runs our copy and keeps buffers: it gets no margin."""
    aligned = cand("aten::mm_aligned", 1.0, ZERO_PAD=1)
    padded = cand("triton::mm_padded", 0.995, BLOCK_M=64)
    assert pick_winner([aligned, padded]) is padded


def test_is_pick_matches_the_rule():
    assert is_pick("triton::mm", 1.0, 1.0)
    assert is_pick("aten::mm", 1.0, 0.99) and not is_pick("aten::mm", 1.0, 0.95)
    assert not is_pick("aten::mm_aligned", 1.0, 0.99)


def test_without_a_vendor_candidate_the_fastest_wins():
    a, b = cand("triton::mm", 1.0, BLOCK_M=64), cand("triton::mm", 0.995, BLOCK_M=128)
    assert pick_winner([a, b]) is b
