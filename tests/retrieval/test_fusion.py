import pytest

from retrieval.fusion import weighted_rrf


def test_weighted_rrf_on_a_hand_made_case():
    # vector: a b c ; text: c a d ; weights 0.7 / 0.3 ; k = 60
    fused = weighted_rrf(
        {"vector": ["a", "b", "c"], "text": ["c", "a", "d"]}, {"vector": 0.7, "text": 0.3}, k=60
    )
    scores = {f.key: f.score for f in fused}
    assert scores["a"] == pytest.approx(0.7 / 61 + 0.3 / 62)
    assert scores["b"] == pytest.approx(0.7 / 62)
    assert scores["c"] == pytest.approx(0.7 / 63 + 0.3 / 61)
    assert scores["d"] == pytest.approx(0.3 / 63)
    assert [f.key for f in fused] == ["a", "c", "b", "d"]
    assert fused[0].ranks == {"vector": 1, "text": 2}


def test_weights_decide_between_lists():
    text_heavy = weighted_rrf({"vector": ["a", "b"], "text": ["b", "a"]}, {"vector": 0.2, "text": 0.8}, k=1)
    assert text_heavy[0].key == "b"


def test_a_duplicate_counts_once_at_its_best_rank():
    fused = weighted_rrf({"vector": ["a", "a", "b"]}, {"vector": 1.0}, k=0)
    assert {f.key: f.score for f in fused} == {"a": 1.0, "b": pytest.approx(1 / 3)}


def test_empty_and_bad_k():
    assert weighted_rrf({}, {}) == []
    with pytest.raises(ValueError):
        weighted_rrf({"v": ["a"]}, {"v": 1}, k=-1)
