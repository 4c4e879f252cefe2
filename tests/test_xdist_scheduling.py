"""The suite's xdist scheduler (:mod:`tests.xdist_scheduling`) hands out the same tests to
the same workers as xdist's ``--dist loadgroup`` and keeps only the work in flight."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

from xdist.remote import Producer
from xdist.scheduler import LoadGroupScheduling

from tests.xdist_scheduling import GroupScheduling


class FakeWorker:
    """What a scheduler sees of a worker: the tests sent to it, in order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.queue: deque[int] = deque()
        self.sent: list[list[int]] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.append(list(indices))
        self.queue.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True

    def __repr__(self) -> str:
        return self.name


def config(workers: int = 2) -> SimpleNamespace:
    values = {"tx": [f"{workers}*popen"], "dist": "loadgroup"}
    return SimpleNamespace(getvalue=values.__getitem__,
                           option=SimpleNamespace(loadscopereorder=True))


def collection(n: int = 300) -> list[str]:
    """``n`` tests, every seventh in one of three groups, the rest on their own."""
    return [f"tests/test_m.py::test_{i}" + (f"@g{i % 3}" if i % 7 == 0 else "")
            for i in range(n)]


def run(sched_type: type, tests: list[str], crash_after: int | None = None
        ) -> tuple[list[FakeWorker], dict[str, list[str]], list[int]]:
    """Drive a scheduler as xdist's controller does: each worker runs the first test of
    its queue in turn; returns the workers, what each ran and, after each completion, the
    size of the scheduler's ``assigned_work``. With ``crash_after``, the first worker
    dies after that many completions (its current test the crashed one)."""
    sched = sched_type(config(), Producer("sched", enabled=False))
    workers = [FakeWorker("gw0"), FakeWorker("gw1")]
    for w in workers:
        sched.add_node(w)
    for w in workers:
        sched.add_node_collection(w, tests)
    sched.schedule()
    ran: dict[str, list[str]] = {w.name: [] for w in workers}
    sizes: list[int] = []
    done = 0
    # (``tests_finished`` turns true with one test left on each worker: a worker holds
    # its last test until it is shut down)
    for _ in range(2 * len(tests)):
        if sched.tests_finished and not any(w.queue for w in workers):
            break
        for w in list(workers):
            if not w.queue:
                continue
            if done == crash_after and w is workers[0]:
                crash_after = None
                crashed = tests[w.queue[0]]
                assert sched.remove_node(w) == crashed
                workers.remove(w)
                ran[w.name].append(f"crashed {crashed}")
                continue
            index = w.queue.popleft()
            ran[w.name].append(tests[index])
            sched.mark_test_complete(w, index)
            done += 1
            sizes.append(sum(len(units) for units in sched.assigned_work.values()))
    else:
        raise AssertionError(f"{sched_type.__name__} never finished: {ran}")
    return workers, ran, sizes


def test_the_same_tests_go_to_the_same_workers_as_under_xdists_own_scheduler() -> None:
    tests = collection()
    theirs, ran_theirs, _ = run(LoadGroupScheduling, tests)
    ours, ran_ours, _ = run(GroupScheduling, tests)
    assert ran_ours == ran_theirs
    assert [w.sent for w in ours] == [w.sent for w in theirs]
    everything = ran_ours["gw0"] + ran_ours["gw1"]
    assert sorted(everything) == sorted(tests)
    for group in ("@g0", "@g1", "@g2"):  # a group's tests all on one worker
        assert sum(any(t.endswith(group) for t in r) for r in ran_ours.values()) == 1


def test_only_the_units_in_flight_are_kept() -> None:
    _, _, theirs = run(LoadGroupScheduling, collection())
    _, _, ours = run(GroupScheduling, collection())
    assert max(theirs) > 200  # xdist's: every unit ever handed out
    assert max(ours) <= 2 + 2 * 4  # a group and a few single tests per worker


def test_a_crashed_workers_unfinished_tests_go_to_the_other() -> None:
    tests = collection(60)
    workers, ran, _ = run(GroupScheduling, tests, crash_after=10)
    assert [w.name for w in workers] == ["gw1"]
    crashed = [t for t in ran["gw0"] if t.startswith("crashed ")]
    assert len(crashed) == 1
    finished = [t for r in ran.values() for t in r if not t.startswith("crashed ")]
    # every test ran once, the crashed one again on the surviving worker
    assert sorted(set(finished)) == sorted(tests)
    assert len(finished) == len(tests)
