"""TfIdfVectorizer compute vs the registry's reference: every mode, weights, skips, one
and several n-grams per output column, an empty length level."""

from __future__ import annotations

import numpy as np
import pytest

from tests.topi.util import check_node

POOL = {"ngram_counts": (0, 3, 7), "pool_int64s": (2, 3, 5, 4, 5, 6, 7, 5, 2, 3, 3, 5, 4)}
TOKENS = np.array([[2, 3, 5, 4, 5, 6, 7, 5, 2, 3, 5, 4], [5, 5, 6, 2, 5, 3, 4, 5, 6, 7, 2, 2]])


@pytest.mark.parametrize("mode, weights", [("TF", ()), ("IDF", ()), ("IDF", (1, 2, 3, 4, 5, 6, 7)),
                                           ("TFIDF", (0.5, 1, 2, 0.25, 3, 1.5, 0.75))])
@pytest.mark.parametrize("lo, hi, skips", [(1, 1, 0), (1, 2, 2), (2, 3, 3)])
def test_tfidf_vectorizer(mode, weights, lo, hi, skips):
    attrs = dict(POOL, mode=mode, min_gram_length=lo, max_gram_length=hi,
                 max_skip_count=skips, ngram_indexes=(0, 1, 2, 3, 4, 5, 6), weights=weights)
    check_node("TfIdfVectorizer", [TOKENS], attrs)
    check_node("TfIdfVectorizer", [TOKENS[0].astype(np.int32)], attrs)


def test_tfidf_vectorizer_shared_columns_and_empty_level():
    attrs = dict(POOL, mode="TF", min_gram_length=1, max_gram_length=3, max_skip_count=1,
                 ngram_indexes=(1, 0, 1, 2, 2, 0, 4))
    check_node("TfIdfVectorizer", [TOKENS], attrs)
    check_node("TfIdfVectorizer", [TOKENS], dict(attrs, mode="IDF"))
    check_node("TfIdfVectorizer", [TOKENS], dict(attrs, mode="TFIDF",
                                                 weights=(0.5, 2, 1.5, 3, 1, 4, 0.25)))
    attrs = {"ngram_counts": (0, 0), "pool_int64s": (5, 6, 7, 8, 6, 7), "mode": "TF",
             "min_gram_length": 2, "max_gram_length": 2, "max_skip_count": 0,
             "ngram_indexes": (0, 1, 2)}
    check_node("TfIdfVectorizer", [TOKENS], attrs)
