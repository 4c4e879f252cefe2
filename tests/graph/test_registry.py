"""The op registry's attribute handling."""

from __future__ import annotations

import pytest

from toolchain.errors import ModelError
from toolchain.graph.ops import get_op


def test_normalized_attributes_normalize_again():
    split = get_op("Split")
    once = split.normalize_attrs({"axis": 1})
    assert once["num_outputs"] is None
    assert split.normalize_attrs(once) == once


def test_unknown_op_is_named():
    with pytest.raises(ModelError, match="op 'Frobnicate' is not supported"):
        get_op("Frobnicate")
