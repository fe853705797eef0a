"""Step identity, DAG checks and planning: everything decided before a step runs (no processes)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from glasslab.config import UNVERSIONED
from glasslab.errors import UserError
from glasslab.lab import Executor, Step, make_plan
from glasslab.lab.status import write_step_record


@dataclasses.dataclass(frozen=True)
class TinyConfig:
    """A config with one versioned and one unversioned field."""

    lr: float = 1e-3
    num_workers: int = dataclasses.field(default=2, metadata=UNVERSIONED)


def noop(ctx) -> None:
    pass


def other_noop(ctx) -> None:
    pass


def diamond(lr: float = 1e-3, num_workers: int = 2) -> list[Step]:
    a = Step("a", noop, config={"seed": 1})
    b = Step("b", noop, config=TinyConfig(lr, num_workers), deps=(a,))
    c = Step("c", noop, config={"k": 3}, deps=("a",))
    d = Step("d", noop, config={}, deps=(b, c))
    return [a, b, c, d]


def folders(plan) -> dict[str, str]:
    return {node.name: node.key for node in plan.steps}


def test_hash_covers_versioned_fields_and_dependencies_only(tmp_path):
    base = folders(make_plan(diamond(), tmp_path))
    assert set(base) == {"a", "b", "c", "d"}
    assert all(key.startswith(f"{name}-") and len(key) == len(name) + 9 for name, key in base.items())
    assert folders(make_plan(diamond(), tmp_path)) == base, "the hash is stable"
    assert folders(make_plan(diamond(num_workers=8), tmp_path)) == base, "unversioned field changed nothing"
    moved = folders(make_plan(diamond(lr=3e-4), tmp_path))
    assert moved["a"] == base["a"] and moved["c"] == base["c"]
    assert moved["b"] != base["b"] and moved["d"] != base["d"], "b changed, so did its dependent d"


def test_plan_is_in_dependency_order_and_marks_cached(tmp_path):
    steps = diamond()
    plan = make_plan(list(reversed(steps)), tmp_path)
    order = [n.name for n in plan.steps]
    assert order.index("a") < order.index("b") < order.index("d") and order.index("c") < order.index("d")
    node_a = next(n for n in plan.steps if n.name == "a")
    node_a.folder.mkdir(parents=True)
    write_step_record(node_a.folder, {"status": "succeeded"})
    node_b = next(n for n in plan.steps if n.name == "b")
    node_b.folder.mkdir(parents=True)
    write_step_record(node_b.folder, {"status": "failed", "error": "ValueError: boom"})
    again = {n.name: n for n in make_plan(steps, tmp_path).steps}
    assert (again["a"].action, again["b"].action, again["d"].action) == ("cached", "run", "run")
    assert "failed before (ValueError: boom)" == again["b"].reason
    forced = {n.name: n for n in make_plan(steps, tmp_path, force=["a"]).steps}
    assert all(n.action == "run" for n in forced.values()), "forcing a reruns everything downstream"
    assert forced["a"].reason == "forced" and forced["b"].reason.startswith("dependency forced")


def test_dry_run_prints_plan_and_touches_nothing(tmp_path, capsys):
    lab = tmp_path / "lab"
    report = Executor(lab).run(diamond(), dry_run=True)
    assert report.outcomes == {} and not lab.exists()
    out = capsys.readouterr().out
    for node in report.plan.steps:
        assert node.key in out
    assert "4 to run, 0 cached" in out


def test_cycle_fails_naming_its_steps(tmp_path):
    steps = [Step("x", noop, {}, deps=("z",)), Step("y", noop, {}, deps=("x",)),
             Step("z", noop, {}, deps=("y",))]
    with pytest.raises(UserError, match=r"dependency cycle: x -> z -> y -> x"):
        make_plan(steps, tmp_path)


@pytest.mark.parametrize(
    "steps, message",
    [
        ([Step("b", noop, {}, deps=("nope",))], r"step 'b': unknown dependency 'nope'"),
        ([Step("a", lambda ctx: None, {})], r"step 'a': function <lambda> is not importable"),
        ([Step("a", "glasslab.no_such_module:fn", {})], r"glasslab.no_such_module:fn: not importable"),
        ([Step("a", "test_lab_plan:missing", {})], r"test_lab_plan:missing: not importable"),
        ([Step("a", "no-colon", {})], r"expected 'module:function'"),
        ([Step("a", noop, {}), Step("a", other_noop, {})], r"steps 'a' .* and 'a' .* would both write"),
        ([Step("a", noop, {"p": object()})], r"step 'a': config is not plain JSON-able data"),
    ],
)
def test_bad_dags_fail_before_anything_runs(tmp_path, steps, message):
    lab = tmp_path / "lab"
    with pytest.raises(UserError, match=message) as info:
        Executor(lab).run(steps)
    assert "\n" not in str(info.value)
    assert not lab.exists(), "nothing was written"


def test_nested_function_and_bad_names_are_refused(tmp_path):
    def nested(ctx):
        pass

    with pytest.raises(UserError, match="nested function"):
        make_plan([Step("a", nested, {})], tmp_path)
    with pytest.raises(UserError, match="step name 'a/b'"):
        Step("a/b", noop, {})
    with pytest.raises(UserError, match="--force zz: no step of that name"):
        make_plan(diamond(), tmp_path, force=["zz"])


def test_identical_definitions_count_once(tmp_path):
    shared = Step("tok", noop, {"v": 1})
    twin = Step("tok", noop, {"v": 1})
    plan = make_plan([Step("m1", noop, {}, deps=(shared,)), Step("m2", noop, {}, deps=(twin,))], tmp_path)
    assert sorted(n.name for n in plan.steps) == ["m1", "m2", "tok"]
    assert json.dumps(sorted(n.key for n in plan.steps))  # folders are plain strings


def test_a_2000_step_chain_given_by_its_last_step_plans_in_order(tmp_path):
    """Collecting and ordering walk the DAG with explicit stacks: depth is not bounded by recursion."""
    steps = [Step("link-0", noop, {})]
    for i in range(1, 2000):
        steps.append(Step(f"link-{i}", noop, {"i": i}, deps=(steps[-1],)))
    plan = make_plan([steps[-1]], tmp_path)
    assert [node.name for node in plan.steps] == [f"link-{i}" for i in range(2000)]
