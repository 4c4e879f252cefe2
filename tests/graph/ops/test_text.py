"""TfIdfVectorizer: reference against onnxruntime (every mode, weights, skips, unigrams to
trigrams, shared output columns, batched and single rows), errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.ops.util import check_vs_ort, infer
from toolchain.errors import ModelError

POOL = {"ngram_counts": (0, 3, 7), "pool_int64s": (2, 3, 5, 4, 5, 6, 7, 5, 2, 3, 3, 5, 4)}
TOKENS = np.array([[2, 3, 5, 4, 5, 6, 7, 5, 2, 3, 5, 4], [5, 5, 6, 2, 5, 3, 4, 5, 6, 7, 2, 2]])


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("lo, hi, skips", [(1, 1, 0), (1, 2, 2), (2, 3, 3), (3, 3, 1)])
def test_tfidf_vectorizer_matches_onnxruntime(mode, lo, hi, skips):
    attrs = dict(POOL, mode=mode, min_gram_length=lo, max_gram_length=hi,
                 max_skip_count=skips, ngram_indexes=(0, 1, 2, 3, 4, 5, 6))
    check_vs_ort("TfIdfVectorizer", [TOKENS], attrs, opset=9)
    attrs["weights"] = (0.5, 1.0, 2.0, 0.25, 3.0, 1.5, 0.75)
    check_vs_ort("TfIdfVectorizer", [TOKENS[1].astype(np.int32)], attrs, opset=9)


def test_tfidf_vectorizer_shared_columns_match_onnxruntime():
    attrs = dict(POOL, mode="TF", min_gram_length=1, max_gram_length=3, max_skip_count=1,
                 ngram_indexes=(1, 0, 1, 2, 2, 0, 4))
    check_vs_ort("TfIdfVectorizer", [TOKENS], attrs, opset=9)
    attrs.update(mode="TFIDF", weights=(0.5, 2.0, 1.5, 3.0, 1.0, 4.0, 0.25))
    check_vs_ort("TfIdfVectorizer", [TOKENS], attrs, opset=9)


def test_tfidf_vectorizer_errors():
    base = dict(POOL, mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=0,
                ngram_indexes=(0, 1, 2, 3, 4, 5, 6))
    with pytest.raises(ModelError, match=r"node 'n' \(TfIdfVectorizer\): pool_strings \(string "
                                         r"tokens\) are not supported"):
        infer("TfIdfVectorizer", [TOKENS], dict(base, pool_int64s=(), pool_strings=("a",)))
    with pytest.raises(ModelError, match=r"ngram_indexes has 3 entries, fewer than the pool's "
                                         r"n-grams"):
        infer("TfIdfVectorizer", [TOKENS], dict(base, ngram_indexes=(0, 1, 2)))
    with pytest.raises(ModelError, match=r"weights has 2 values; it must have one per entry "
                                         r"of ngram_indexes \(7\)"):
        infer("TfIdfVectorizer", [TOKENS], dict(base, weights=(1.0, 2.0)))
    with pytest.raises(ModelError, match=r"the pool's 3-grams \(ids 7..10\) are 4 ids, not a "
                                         r"whole number of 3-grams"):
        infer("TfIdfVectorizer", [TOKENS], dict(base, pool_int64s=POOL["pool_int64s"][:11]))
    with pytest.raises(ModelError, match=r"mode IDF with weights and several n-grams in one "
                                         r"output column is ambiguous"):
        infer("TfIdfVectorizer", [TOKENS], dict(base, mode="IDF", weights=(1.0,) * 7,
                                                ngram_indexes=(0, 0, 1, 2, 3, 4, 5)))
    with pytest.raises(ModelError, match=r"X \[2, 2, 6\] must be \[C\] or \[N, C\]"):
        infer("TfIdfVectorizer", [TOKENS.reshape(2, 2, 6)], base)
    with pytest.raises(ModelError, match=r"input 0 \(X\) .* has dtype float32"):
        infer("TfIdfVectorizer", [TOKENS.astype(np.float32)], base)
