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


def test_the_op_table_is_what_is_registered():
    from toolchain.graph.ops import all_ops, builtin_ops

    names = [op.name for op in builtin_ops()]
    assert len(names) == len(set(names))
    assert set(names) == set(all_ops())
    assert {"Relu", "Conv", "QConv", "Fused", "LayoutConv"} <= set(names)


def test_register_refuses_a_second_op_of_a_name_and_unregister_an_unknown_one():
    from toolchain.graph.ops import register, unregister

    with pytest.raises(ValueError, match="op 'Relu' registered twice"):
        register(get_op("Relu"))
    with pytest.raises(ValueError, match="op 'Frobnicate' is not registered"):
        unregister("Frobnicate")
