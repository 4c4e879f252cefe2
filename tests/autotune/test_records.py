"""Tuning records: the file format, crash safety, best-per-workload."""

from __future__ import annotations

import json
import os

import pytest

from toolchain.autotune.records import (
    Record,
    RecordWriter,
    best_records,
    load_records,
    parse_lines,
)
from toolchain.autotune.space import Trace
from toolchain.errors import InputError, KilnWarning


def rec(workload: str, tile: int, cost: float | None, error: str | None = None) -> Record:
    return Record(workload, "toy", "c-generic", Trace("toy", (("tile", tile),)),
                  None if cost is None else [cost * 1.1, cost], error)


def test_round_trip_and_best_per_workload(tmp_path):
    out = tmp_path / "r.jsonl"
    with RecordWriter(out) as w:
        for r in [rec("a", 1, 3.0), rec("a", 2, 1.0), rec("a", 4, None, "run: crashed"),
                  rec("b", 8, 2.0)]:
            w.append(r)
    back = load_records(out)
    assert [r.to_json() for r in back] == [r.to_json() for r in [
        rec("a", 1, 3.0), rec("a", 2, 1.0), rec("a", 4, None, "run: crashed"),
        rec("b", 8, 2.0)]]
    best = best_records(back)
    assert best["a"].trace.as_dict() == {"tile": 2} and best["b"].cost == 2.0
    assert not back[2].ok and back[2].cost == float("inf")


def test_a_line_cut_short_at_the_end_is_skipped_with_a_warning():
    good = json.dumps(rec("a", 1, 1.0).to_json())
    with pytest.warns(KilnWarning, match="r.jsonl:2: the last line is incomplete"):
        got = parse_lines(good + "\n" + good[:40], "r.jsonl")
    assert len(got) == 1


@pytest.mark.parametrize("line, words", [
    ("{not json", "r.jsonl:1: not a JSON record"),
    ('{"format": 99}', "r.jsonl:1: record format 99"),
    ('{"format": 1, "workload": 3}', "field 'workload' must be a string"),
])
def test_malformed_lines_name_the_file_and_line(line, words):
    with pytest.raises(InputError, match=words):
        parse_lines(line + "\n" + json.dumps(rec("a", 1, 1.0).to_json()) + "\n", "r.jsonl")


def test_conditions_round_trip_and_old_records_load_without_them():
    """A record says how it was measured (``conditions``, session 26); a line written
    before has none and loads as unknown (None), written back without the field."""
    cond = {"repeat": 3, "flush_mb": 8, "cold_mb": 0, "machine": "Imaginary 9", "cores": 1}
    new = Record("a", "toy", "c-generic", Trace("toy", (("tile", 1),)), [1.0], conditions=cond)
    old = json.dumps(rec("a", 1, 1.0).to_json())
    assert "conditions" not in old
    back = parse_lines(json.dumps(new.to_json()) + "\n" + old + "\n", "r.jsonl")
    assert back[0].conditions == cond and back[1].conditions is None
    assert json.dumps(back[1].to_json()) == old
    bad = dict(new.to_json(), conditions=[3])
    with pytest.raises(InputError, match="r.jsonl:1: 'conditions' must be an object"):
        parse_lines(json.dumps(bad) + "\n", "r.jsonl")


def test_failed_run_leaves_the_records_file_untouched(tmp_path):
    out = tmp_path / "r.jsonl"
    out.write_text(json.dumps(rec("a", 1, 5.0).to_json()) + "\n")
    before = out.read_text()
    with pytest.raises(RuntimeError), RecordWriter(out, resume=True) as w:
        w.append(rec("a", 2, 1.0))
        raise RuntimeError("the tuner died")
    assert out.read_text() == before  # OUT never half-written
    partial = tmp_path / "r.jsonl.partial"
    assert [r.trace.as_dict()["tile"] for r in load_records(partial)] == [1, 2]
    # the next run resumes from the partial file and commits both
    w2 = RecordWriter(out, resume=True)
    assert len(w2.existing) == 2
    with w2:
        w2.append(rec("a", 4, 0.5))
    assert [r.trace.as_dict()["tile"] for r in load_records(out)] == [1, 2, 4]
    assert not partial.exists()


def test_a_run_that_fails_before_any_trial_writes_nothing(tmp_path):
    out = tmp_path / "r.jsonl"
    with pytest.raises(RuntimeError), RecordWriter(out):
        raise RuntimeError("bad model")
    assert list(tmp_path.iterdir()) == []


def test_a_folder_it_cannot_write_in_is_refused_before_anything_is_measured():
    """(sysfs: not even root creates files there.) It was an internal error when the
    finished run wrote its first record."""
    from pathlib import Path

    if not Path("/sys/kernel").is_dir():
        pytest.skip("no sysfs here")
    with pytest.raises(InputError, match=r"records file /sys/r.jsonl: cannot write in "
                                         r"folder /sys \("):
        RecordWriter("/sys/r.jsonl", resume=True)


def test_missing_folder_is_refused(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        RecordWriter(tmp_path / "nope" / "r.jsonl")


def test_a_second_writer_of_the_same_file_is_refused_until_the_first_ends(tmp_path):
    """Two ``kiln tune -o OUT`` at once: before the lock the second read the first's
    partial file, truncated it under it, and its rename failed (an internal error)."""
    out = tmp_path / "r.jsonl"
    first = RecordWriter(out, resume=True)
    first.append(rec("a", 1, 2.0))
    with pytest.raises(InputError, match=f"records file {out} is being written by another "
                                         rf"run \(process {os.getpid()} holds"):
        RecordWriter(out, resume=True)
    assert [r.trace.as_dict() for r in load_records(tmp_path / "r.jsonl.partial")] == [
        {"tile": 1}]  # the refused writer touched nothing
    RecordWriter(tmp_path / "other.jsonl").release()  # another file is not locked
    first.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]  # no lock file left
    with RecordWriter(out, resume=True) as again:  # the next run resumes
        assert len(again.existing) == 1
        again.append(rec("a", 2, 1.0))
    assert len(load_records(out)) == 2 and not (tmp_path / "r.jsonl.lock").exists()


def test_a_writer_whose_records_file_is_bad_lets_go_of_its_lock(tmp_path):
    out = tmp_path / "r.jsonl"
    out.write_text("{not json\n")
    for _ in range(2):  # refused for the file both times, not for a lock left behind
        with pytest.raises(InputError, match="r.jsonl:1: not a JSON record"):
            RecordWriter(out, resume=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]
