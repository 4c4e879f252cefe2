"""Linear forms (``toolchain.tir.linear``): the shortcuts give the forms the general
rules give."""

from __future__ import annotations

from toolchain.tir.ir import FloorDiv, FloorMod, IntImm, Mul, Var
from toolchain.tir.linear import Lin, recombine_divmod, term_key, to_lin


def _general(e, coeff: int = 1) -> Lin:
    """The form ``to_lin`` gives an atom: one term, made by ``add_term``."""
    lin = Lin(e.dtype)
    lin.add_term(e, coeff)
    return lin


def _same(a: Lin, b: Lin) -> bool:
    if (a.dtype, a.const, list(a.terms)) != (b.dtype, b.const, list(b.terms)):
        return False
    pairs = zip(a.terms.values(), b.terms.values(), strict=True)
    return all(x[0] is y[0] and x[1] == y[1] for x, y in pairs)


def test_a_vars_form_is_its_term() -> None:
    i = Var("i")
    assert _same(to_lin(i), _general(i))
    assert to_lin(Var("p", "float32")) is None


def test_times_a_constant_scales_the_operands_form() -> None:
    i, j = Var("i"), Var("j")
    assert _same(to_lin(i * 4), _general(i, 4))
    assert _same(to_lin((i + j * 2 + 3) * 5), to_lin(i * 5 + j * 10 + 15))
    assert to_lin(i * 0).terms == {} and to_lin(i * 0).const == 0
    atom = Mul(i, j)  # not linear: one atom
    assert _same(to_lin(atom), _general(atom))
    wide = Mul(i, IntImm(3, "int64"))  # the constant's form is still a constant
    assert to_lin(wide).terms[term_key(i)][1] == 3


def test_recombine_without_a_remainder_changes_nothing() -> None:
    i, j = Var("i"), Var("j")
    lin = to_lin(i * 4 + FloorDiv(j, 8) * 8 + 1)
    before = (lin.const, list(lin.terms))
    assert not recombine_divmod(lin)
    assert (lin.const, list(lin.terms)) == before
    whole = to_lin(FloorDiv(j, 8) * 8 + FloorMod(j, 8))
    assert recombine_divmod(whole) and list(whole.terms) == [term_key(j)]
