"""The memory-plan picture and ``kiln inspect --memory-plan``."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import onnx

from toolchain.cli import main
from toolchain.graph.memory import plan_lifetimes, render_svg
from toolchain.zoo import ZOO

SVG = "{http://www.w3.org/2000/svg}"


def test_svg_is_well_formed_with_one_rect_per_tensor_a_legend_and_the_numbers():
    plan = plan_lifetimes([("a<b&\"c'", 4000, 0, 2), ("b", 1000, 1, 3), ("c", 3000, 3, 4)])
    text = render_svg(plan, title="tiny & <odd>")
    root = ET.fromstring(text)
    rects = [r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert len(rects) == 3
    tips = [r.find(f"{SVG}title").text for r in rects]
    assert any(t.startswith("a<b&\"c'") for t in tips)  # escaped in the file, intact here
    words = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert f"arena {plan.arena_bytes:,} B" in words
    assert f"lower bound {plan.lower_bound:,} B" in words
    assert f"naive {plan.naive_bytes:,} B" in words
    for legend in ("tensor", "in place", "kernel scratch", "lower bound", "arena"):
        assert legend in words
    assert root.find(f"{SVG}title").text == "tiny & <odd>"


def test_svg_is_deterministic():
    plan = plan_lifetimes([("a", 10, 0, 1), ("b", 20, 1, 2)])
    assert render_svg(plan) == render_svg(plan)


def test_kiln_inspect_memory_plan_writes_the_picture(tmp_path, capsys):
    model = tmp_path / "resnet8.onnx"
    onnx.save(ZOO["resnet8"].build(), model)
    svg = tmp_path / "plan.svg"
    assert main(["inspect", str(model), "--memory-plan", str(svg)]) == 0
    captured = capsys.readouterr()
    assert "totals:" in captured.out
    assert "memory plan: arena 131,072 B, lower bound 131,072 B" in captured.err
    root = ET.parse(svg).getroot()
    assert root.tag == f"{SVG}svg"
    assert len([r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]) > 5


def test_kiln_inspect_memory_plan_creates_its_folder(tmp_path):
    model = tmp_path / "lenet5.onnx"
    onnx.save(ZOO["lenet5"].build(), model)
    target = tmp_path / "build" / "plans" / "plan.svg"
    assert main(["inspect", str(model), "--memory-plan", str(target)]) == 0
    assert target.is_file()


def test_kiln_inspect_memory_plan_to_an_unwritable_place_is_a_user_error(tmp_path, capsys):
    model = tmp_path / "lenet5.onnx"
    onnx.save(ZOO["lenet5"].build(), model)
    (tmp_path / "file").write_text("not a folder")
    target = tmp_path / "file" / "plan.svg"
    assert main(["inspect", str(model), "--memory-plan", str(target)]) == 2
    err = capsys.readouterr().err
    assert f"cannot write the memory plan picture to '{target}'" in err
    assert f"{tmp_path / 'file'} is a file, not a directory" in err  # not "File exists"
    # a folder as the picture: refused before the table is printed
    assert main(["inspect", str(model), "--memory-plan", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert f"--memory-plan {tmp_path}: is a directory" in captured.err
    assert captured.out == ""


def test_kiln_inspect_json_stays_clean_with_a_memory_plan(tmp_path, capsys):
    import json

    model = tmp_path / "mlp.onnx"
    onnx.save(ZOO["mlp"].build(), model)
    svg = tmp_path / "plan.svg"
    assert main(["inspect", str(model), "--input-shape", "input=4,1,28,28", "--json",
                 "--memory-plan", str(svg)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["schema"] == "kiln.inspect/1"
    assert "memory plan: arena 6,144 B" in captured.err  # the input Flatten is a view
    ET.parse(svg)
