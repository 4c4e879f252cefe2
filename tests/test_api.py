"""The Python API (toolchain.load / compile / run) given bad arguments: each is a Kiln
error (toolchain.errors) naming the argument and what was wrong, raised before any work;
no bare TypeError, ValueError, AttributeError or KeyError. No bundle is built here."""

from __future__ import annotations

import numpy as np
import pytest

import toolchain
from tests.frontend.helpers import relu_model, save
from toolchain.api import RunResult
from toolchain.errors import InputError, KilnError, ModelError, OptionError, TargetError


@pytest.fixture
def relu(tmp_path):
    return save(relu_model(), tmp_path / "relu.onnx")


def test_load_of_a_directory_says_directory(tmp_path):
    with pytest.raises(ModelError, match="is a directory, not an ONNX model file"):
        toolchain.load(tmp_path)


@pytest.mark.parametrize("shape_dict, says", [
    ({"x": "2,3"}, r"shape_dict\['x'\] = '2,3': expected a sequence of integers"),
    ({"x": 3}, r"shape_dict\['x'\] = 3: expected a sequence of integers"),
    ({"x": (2, 3.5)}, r"dimension 1 is 3.5, not an integer"),
    ([("x", (2, 3))], "expected a mapping of input names to shapes"),
])
def test_load_with_a_bad_shape_dict(relu, shape_dict, says):
    with pytest.raises(OptionError, match=says):
        toolchain.load(relu, shape_dict=shape_dict)


@pytest.mark.parametrize("shape_dict, says", [
    ({"nope": (2, 3)}, r"^shape_dict\['nope'\]: the model has no input 'nope'; its inputs are: x"),
    ({"x": (3, 3)}, r"^shape_dict\['x'\] = \(3, 3\): dimension 0 of input 'x' is fixed to 2"),
    ({"x": (2, 3, 1)}, r"^shape_dict\['x'\] = \(2, 3, 1\): the model declares input 'x' "
                       "with rank 2"),
])
def test_load_names_shape_dict_not_the_cli_option(relu, shape_dict, says):
    with pytest.raises(OptionError, match=says):  # (it said '--input-shape x=3,3')
        toolchain.load(relu, shape_dict=shape_dict)


def test_load_takes_numpy_integers_as_dimensions(relu):
    m = toolchain.load(relu, shape_dict={"x": np.array([2, 3])})
    assert m.input_shapes == {"x": (2, 3)}


def test_a_target_that_is_not_a_name(relu):
    with pytest.raises(TargetError, match="target 3: expected a target name"):
        toolchain.compile(relu, target=3)


@pytest.mark.parametrize("kw, says", [
    ({"ram_budget": "10k"}, r"ram_budget='10k': expected a positive number of bytes"),
    ({"ram_budget": -5}, r"ram_budget=-5: expected a positive number of bytes"),
    ({"patch": "conv1"}, r"patch='conv1': expected \(first node name"),
    ({"patch": ("conv1", 2, 4)}, "the tile grid 4 is not two positive integers"),
    ({"patch": ("conv1", "2", (2, 2))}, "layers '2' is not an integer"),
])
def test_compile_with_a_bad_option_fails_before_any_work(relu, tmp_path, kw, says):
    with pytest.raises(OptionError, match=says):
        toolchain.compile(relu, output=tmp_path / "b", **kw)
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("args, kw, error, says", [
    ((5,), {}, OptionError, "expected a Package or a bundle directory, got int"),
    (("B", np.zeros((2, 3), np.float32)), {}, InputError,
     "inputs must map input names to arrays"),
    (("B",), {"check": True, "tolerance": "1e-3"}, OptionError,
     "tolerance='1e-3': must be a positive number"),
    (("B",), {"check": True, "tolerance": -1.0}, OptionError,
     "tolerance=-1.0: must be a positive number"),
])
def test_run_with_bad_arguments(tmp_path, args, kw, error, says):
    args = tuple(str(tmp_path) if isinstance(a, str) and a == "B" else a for a in args)
    with pytest.raises(error, match=says):
        toolchain.run(*args, **kw)


def test_an_unknown_output_names_the_outputs():
    result = RunResult({"logits": np.zeros(3), "probs": np.zeros(3)})
    with pytest.raises(KilnError) as e:
        result["prob"]
    assert str(e.value) == "no output 'prob'; the outputs are: logits, probs"
    assert isinstance(e.value, KeyError)  # as a mapping's lookup would be


def test_the_api_docstring_examples_run():
    import doctest

    import toolchain.api

    result = doctest.testmod(toolchain.api, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted >= 2


def test_dir_of_the_package_lists_the_lazy_api():
    names = dir(toolchain)
    assert set(toolchain.__all__) <= set(names)  # (it listed none of them)
    for name in toolchain.__all__:
        assert getattr(toolchain, name) is not None
