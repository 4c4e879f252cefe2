"""``gemm_epilogue=fused``: the 1x1 convolution's GEMM adding the bias as each register
tile is stored, straight into the NCHW output (no product buffer, no pass over it) —
offered where no tile is padded, refused elsewhere, replayed from its trace, and run
through compiled bundles within 1e-5 of onnxruntime."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.autotune.conv_models import bundle_at_point, conv_model, nchw_variant
from toolchain.autotune.space import InvalidPoint
from toolchain.autotune.tasks import conv_task
from toolchain.target import load_target, runs_here


def test_offered_where_tiles_divide_and_refused_where_they_pad():
    s = conv_task((1, 64, 56, 56), 64, 1, 1, "x86_64-avx512").space  # C3: 3,136 pixels
    knob = s.knob("gemm_epilogue")
    assert knob.choices == ("pass", "fused") and knob.default == "pass"
    p = s.canonical({**s.default(), "b_pack": "in_place", "gemm_epilogue": "fused"})
    assert s.point_of(type(s.trace(p)).from_json(s.trace(p).to_json())) == p
    with pytest.raises(InvalidPoint, match="gemm_epilogue=fused needs mr to divide"):
        s.check({**p, "nr": 48})  # 3,136 pixels are no whole number of 48-pixel tiles
    with pytest.raises(InvalidPoint, match="gemm_epilogue=fused needs mr to divide"):
        s.check({**p, "mr": 7, "mc_tiles": 1})  # 64 channels in tiles of 7 rows pad
    assert s.canonical({**p, "algorithm": "direct"})["gemm_epilogue"] == "pass"
    c5 = conv_task((1, 64, 56, 56), 128, 1, 2, "x86_64-avx512").space  # 784 pixels
    assert c5.is_valid({**c5.default(), "nr": 16, "gemm_epilogue": "fused"})
    assert not c5.is_valid({**c5.default(), "nr": 32, "gemm_epilogue": "fused"})
    c11 = conv_task((1, 256, 14, 14), 512, 1, 2, "x86_64-avx512").space  # 49 pixels
    assert "gemm_epilogue" not in [k.name for k in c11.knobs]


@pytest.mark.parametrize("stride,bias,b_pack,mr,nr", [(1, True, "in_place", 8, 32),
                                                      (2, True, "rows", 8, 16),
                                                      (2, False, "panels", 4, 64)])
def test_fused_write_back_runs_in_bundles_within_1e5(tmp_path: Path, stride: int, bias: bool,
                                                     b_pack: str, mr: int, nr: int):
    base = "x86_64-avx512"
    if not runs_here(load_target(base)):
        pytest.skip(f"{base} code does not run on this machine")
    src, err = bundle_at_point(conv_model(stride, 1, bias), str(nchw_variant(base, tmp_path)),
                               tmp_path, {"b_pack": b_pack, "nr": nr, "mr": mr,
                                          "mc_tiles": 1, "gemm_epilogue": "fused"}, seed=4)
    assert "C_prod_local" in src and "C_prod[" not in src and "C_prod +" not in src
    assert err <= 1e-5
