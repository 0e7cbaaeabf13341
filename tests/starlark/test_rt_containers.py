"""The list and dict methods and the sequence builtins, against the Go implementation.

Each program below prints many results, and checks many errors through ``catch`` (the
message an error carries, as Go's ``err.Error()`` gives it); a few end with an error,
to check the whole traceback.  Frozen values come from a loaded module, whose globals
are frozen once it has run.  The expected outcomes were recorded from starlark-go in
``test_rt_containers.json``; run this file to record them again::

    .venv/bin/python tests/starlark/test_rt_containers.py

The oracle has no ``catch``: it runs a Starlark ``catch`` that replays, one run per
failing call, the message the previous runs recorded (as ``go_testdata`` does).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from starlark.harness import (
    RUNTIME_ERROR,
    SUCCESS,
    Outcome,
    compile_kforge,
    kforge_missing_reason,
    run_kforge,
)

EXPECTED = Path(__file__).with_suffix(".json")
FILENAME = "containers.star"
TICK_BUDGET = 100_000_000
MEMORY_QUOTA = 4 << 20

#: Loaded by the programs for frozen values (a loaded module's globals are frozen).
MODULES = {
    "frozen.star": """\
fl = [3, 1, 2]
fe = []
fd = {"a": 1, "b": 2}
fde = {}
""",
}

PROGRAMS: dict[str, str] = {}

PROGRAMS["list_methods"] = """\
load("frozen.star", "fl", "fe")
a = [1, 2, 3]
print(a.append(4), a, a.pop(), a.pop(0), a.pop(-1), a.pop(-1), a)
a = [1, 2, 3]
print(a.pop(-3), a.pop(1), a, a.pop(), a)
a = [1, 2, 3]
a.insert(0, "x")
a.insert(-1, "y")
a.insert(100, "z")
a.insert(-100, "w")
a.insert(2, "m")
print(a)
b = []
b.insert(-1, 5)
b.insert(0, 6)
b.insert(1, 7)
print(b)
c = [1, 2, 3, 2, 1]
print(c.remove(2), c, c.remove(1), c, c.remove(1), c)
d = [1, 2]
d.extend([3])
d.extend((4, 5))
d.extend({6: 7, 8: 9})
d.extend(range(10, 12))
d.extend(d)
d.extend([])
print(d, len(d))
e = [1, [2], (3,)]
e.remove([2])
e.remove((3,))
print(e, e.clear(), e, e.clear(), e)
grow = []
for i in range(100):
    grow.append(i * i)
print(len(grow), grow[0], grow[99], grow[-1], grow[50])
while len(grow) > 3:
    grow.pop(len(grow) // 2)
print(grow)
print(catch(lambda: [].pop()))
print(catch(lambda: [1, 2].pop(5)))
print(catch(lambda: [1, 2].pop(-3)))
print(catch(lambda: [1, 2].pop("a")))
print(catch(lambda: [1, 2].pop(None)))
print(catch(lambda: [1].insert("a", 1)))
print(catch(lambda: [1].insert(None, 1)))
print(catch(lambda: [1, 2, 3].remove(4)))
print(catch(lambda: [1].extend(2)))
print(catch(lambda: [1].extend("ab")))
print(catch(lambda: [1].extend(None)))
print(catch(lambda: fl.append(1)))
print(catch(lambda: fl.extend([])))
print(catch(lambda: fl.extend(1)))
print(catch(lambda: fl.insert(0, 1)))
print(catch(lambda: fl.insert("a", 1)))
print(catch(lambda: fl.remove(1)))
print(catch(lambda: fl.remove(9)))
print(catch(lambda: fl.pop()))
print(catch(lambda: fl.pop(7)))
print(catch(lambda: fl.clear()))
print(catch(lambda: fe.clear()))
print(fl, fe, len(fl))

def mutate_while_iterating(how):
    x = [1, 2]
    for _ in x:
        if how == "append":
            x.append(3)
        elif how == "extend":
            x.extend([])
        elif how == "insert":
            x.insert(0, 1)
        elif how == "remove":
            x.remove(7)
        elif how == "pop":
            x.pop()
        elif how == "pop far":
            x.pop(5)
        elif how == "clear":
            x.clear()
        elif how == "set":
            x[0] = 5
        elif how == "set far":
            x[9] = 5
    return x

for how in ["append", "extend", "insert", "remove", "pop", "pop far", "clear", "set", "set far"]:
    print(how, catch(lambda: mutate_while_iterating(how)))

def after_loops():
    x = [1, 2, 3]
    for v in x:
        pass
    for v in x:
        if v == 2:
            break
    x.append(4)
    for v in x:
        for w in x:
            pass
    x.clear()
    return x

print(after_loops())
"""

PROGRAMS["list_index"] = """\
c = [1, 2, 3, 2, 1, "a", (1,), [2]]
print(c.index(2), c.index(2, 2), c.index(1, -4), c.index(2, -5, -3), c.index(3, None, None))
print(c.index("a"), c.index((1,)), c.index([2]), c.index(1, 1), c.index(1, -100, 100))
print(catch(lambda: c.index(3, 0, 2)))
print(catch(lambda: c.index(9)))
print(catch(lambda: c.index(1, "a")))
print(catch(lambda: c.index(1, 0, "b")))
print(catch(lambda: c.index(1, 5, 1)))
print(catch(lambda: c.index(1, 1 << 40)))
print(catch(lambda: [].index(1)))
"""

PROGRAMS["dict_methods"] = """\
load("frozen.star", "fd", "fde")
d = {"a": 1, "b": 2}
print(d.get("a"), d.get("z"), d.get("z", 5), d.get("a", 5), d.get(1, None))
print(d.items(), d.keys(), d.values(), type(d.items()), type(d.keys()))
print({}.items(), {}.keys(), {}.values(), {}.get(1))
s = {"a": 1}
print(s.setdefault("a", 5), s.setdefault("b"), s.setdefault("c", 3), s)
p = {1: 2, 3: 4, 5: 6}
print(p.popitem(), p.popitem(), p, p.popitem(), p)
q = {1: 2, 3: 4, 5: 6, 7: 8}
print(q.pop(3), q, q.pop(9, "no"), q.pop(1, "yes"), q)
q[3] = 9
print(q, q.popitem(), q)
print({1: 2}.pop(3, None), {}.pop(1, 5), {}.pop([1], 5))
u = {}
u.update([(1, 2), [3, 4]], a=5, b=6)
u.update({7: 8, 1: 9})
u.update(((10, 11),))
u.update()
u.update(c=1)
u.update(range(0))
u.update({})
print(u)
v = {}
v.update([("x", 1)], x=2)
v.update(x=3, y=4)
print(v)
print(dict([(1, 2)], a=1), dict({1: 2}), dict(), dict(a=1, b=2), dict([]), dict({}, z=0))
big = {}
for i in range(200):
    big[i] = i * i
for i in range(0, 200, 2):
    big.pop(i)
print(len(big), big[1], big[199], big.get(100), big.popitem(), big.popitem(), len(big))
for i in range(300):
    big[str(i)] = i
total = 0
for k in big:
    total += big[k]
print(len(big), total, big["299"], big.setdefault("299", 0), big.setdefault("new", -1))
while len(big) > 5:
    big.popitem()
print(big)
big.clear()
big[1] = 1
print(big, len(big))
empty = {1: 1}
empty.pop(1)
print(catch(lambda: empty.pop([1], 5)))
print(catch(lambda: {}.pop(1)))
print(catch(lambda: {1: 2}.pop([])))
print(catch(lambda: {}.popitem()))
print(catch(lambda: empty.popitem()))
print(catch(lambda: {}.get([])))
print(catch(lambda: {}.setdefault([1])))
print(catch(lambda: {}.setdefault({}, 3)))
print(catch(lambda: {}.update(1)))
print(catch(lambda: {}.update([1])))
print(catch(lambda: {}.update(["ab"])))
print(catch(lambda: {}.update([[1]])))
print(catch(lambda: {}.update([(1, 2, 3)])))
print(catch(lambda: {}.update([([1], 2)])))
print(catch(lambda: {}.update([(1, 2)], [(3, 4)])))
print(catch(lambda: dict([1])))
print(catch(lambda: dict([(1, 2, 3)])))
print(catch(lambda: dict(1)))
print(catch(lambda: dict([([], 1)])))
print(catch(lambda: fd.clear()))
print(catch(lambda: fde.clear()))
print(catch(lambda: fd.pop("a")))
print(catch(lambda: fd.pop("zz", 1)))
print(catch(lambda: fde.pop("zz", 1)))
print(catch(lambda: fd.popitem()))
print(catch(lambda: fde.popitem()))
print(catch(lambda: fd.setdefault("c", 3)))
print(catch(lambda: fd.update({"c": 3})))
print(catch(lambda: fd.update(c=3)))
print(catch(lambda: fd.update(1)))
print(fd.setdefault("a", 7), fd.get("b"), fd.items(), fd.update(), fd.update({}), fde.get(1))

def mutate_while_iterating(how):
    x = {1: 2}
    for _ in x:
        if how == "setdefault new":
            x.setdefault(3, 5)
        elif how == "setdefault old":
            x.setdefault(1, 5)
        elif how == "pop":
            x.pop(1)
        elif how == "pop missing":
            x.pop(3, 4)
        elif how == "popitem":
            x.popitem()
        elif how == "clear":
            x.clear()
        elif how == "update":
            x.update(a=1)
        elif how == "update nothing":
            x.update({})
        elif how == "set":
            x[1] = 3
        elif how == "get":
            x.get(1)
    return x

for how in ["setdefault new", "setdefault old", "pop", "pop missing", "popitem", "clear",
            "update", "update nothing", "set", "get"]:
    print(how, catch(lambda: mutate_while_iterating(how)))

def after_loops():
    x = {1: 2, 3: 4}
    for k in x:
        pass
    for k in x:
        break
    x[5] = 6
    x.pop(1)
    for k in x:
        pass
    x.clear()
    return x

print(after_loops())
"""

PROGRAMS["sorting"] = """\
def gen(n, seed, mod):
    out = []
    x = seed
    for i in range(n):
        x = (x * 1103515245 + 12345) % 2147483648
        out.append(x % mod - mod // 2)
    return out

for n in [0, 1, 2, 15, 16, 17, 20, 21, 33, 100, 257]:
    xs = gen(n, n + 1, 1000)
    a = sorted(xs)
    b = sorted(xs, reverse=True)
    c = sorted(xs, key=lambda v: v % 10)
    d = sorted(xs, key=lambda v: v % 10, reverse=True)
    e = sorted([str(v) for v in xs])
    f = sorted([(v % 7, str(v)) for v in xs])
    g = sorted([[v % 3, v % 5] for v in xs], reverse=True)
    h = sorted([(v % 2 == 0, v) for v in xs])
    print(n, a[:5], a[-3:], b[:4], c[:8], d[:8], e[:3], f[:3], g[:3], h[:3])
    print(c == sorted(xs, key=lambda v: [v % 10]), b == sorted(xs, key=lambda v: -v))

pairs = [(v, i) for i, v in enumerate(gen(300, 5, 50))]
ascending = sorted(pairs, key=lambda p: p[0])
descending = sorted(pairs, key=lambda p: p[0], reverse=True)
stable = True
for s in [ascending, descending]:
    for i in range(1, len(s)):
        if s[i - 1][0] == s[i][0] and s[i - 1][1] > s[i][1]:
            stable = False
print(stable, ascending[:4], descending[:4])
print(sorted(["b", "a", "ab", "", "z", "aa"]), sorted([True, False, True]), sorted([b"b", b"a"]))
print(sorted({"b": 1, "a": 2}.items()), sorted({3: 1, 1: 2}), sorted(range(10, 0, -3)))
print(sorted((3, 1, 2)), sorted([[2], [1, 1], [], [1]]), sorted([(1,), (), (0, 5)]))
print(sorted([None]), sorted([{}]), sorted([], key=len), sorted([3, 1], reverse=False))
mixed = [v if v % 3 else str(v) for v in gen(60, 9, 50)]
print(catch(lambda: sorted(mixed)))
print(catch(lambda: sorted(mixed, reverse=True)))
tuples = [(v % 4, v if v % 7 else "s") for v in gen(80, 11, 50)]
print(catch(lambda: sorted(tuples)))
print(catch(lambda: sorted(tuples, reverse=True)))
print(catch(lambda: sorted([1, "a", None])))
print(catch(lambda: sorted([None, 1, "a"], reverse=True)))
print(catch(lambda: sorted([None, None])))
print(catch(lambda: sorted([{}, {}])))
print(catch(lambda: sorted([(1, 2), [1, "a"]])))
print(catch(lambda: sorted([b"b", "a"])))
print(catch(lambda: sorted([1, 2, 3], key=lambda x: "a" if x == 2 else x)))
print(catch(lambda: sorted([3, 1, 2], key=len)))
print(catch(lambda: sorted([3, 1], key=None)))
print(catch(lambda: sorted([3, 1], key=1)))
print(catch(lambda: sorted([3, 1], reverse=1)))
print(catch(lambda: sorted([3, 1], reverse=None)))
print(catch(lambda: sorted(1)))
print(catch(lambda: sorted("abc")))
deep = [[[[[[[[[[1]]]]]]]]]]
print(catch(lambda: sorted([deep, deep])))
print(catch(lambda: sorted([1, 2], key=lambda x: [[[[[[[[[[x]]]]]]]]]])))
held = [3, 1, 2]

def appending_key(v):
    held.append(v)
    return v

def assigning_key(v):
    held[0] = 5
    return v

print(catch(lambda: sorted(held, key=appending_key)))
print(catch(lambda: sorted(held, key=assigning_key)))
print(sorted(held, key=lambda v: -v), held)
"""

PROGRAMS["builtins"] = """\
print(min(1, 2, 3), max("a", "b"), min([4, 2, 8]), max((1, 5, 2)), min({3: 1, 2: 2}), max(range(4)))
print(min([3, 1, 1, 2], key=lambda x: 0), max([3, 1, 1, 2], key=lambda x: 0))
print(min([3, 1, 2], key=lambda x: -x), max([3, 1, 2], key=lambda x: -x), max(1, 2, 3, key=lambda x: -x))
print(min([1], [0]), max([1, 2], [1, 3]), min((1, 2), (1,)), max(["ccc", "a", "bb"], key=len))
print(min("ccc", "a", "bb", key=len), max([True, False]), min([b"b", b"a"]), max([5]))
print(catch(lambda: max()))
print(catch(lambda: min(key=len)))
print(catch(lambda: max(1)))
print(catch(lambda: max([])))
print(catch(lambda: min(())))
print(catch(lambda: max([], key=None)))
print(catch(lambda: max(1, 2, key=None)))
print(catch(lambda: min([1, 2], key=3)))
print(catch(lambda: max([1, 2, "a"])))
print(catch(lambda: max(1, "a")))
print(catch(lambda: min([1, "a"])))
print(catch(lambda: min([(1, 2), (1, "a")])))
print(catch(lambda: max([(1, 2), (1, "a")])))
print(catch(lambda: max([None, None])))
print(catch(lambda: max([1, 3, 2], key=len)))
print(enumerate([5, 6], 10), enumerate((), -1), enumerate({1: 2, 3: 4}), enumerate(range(3), -2))
print(enumerate([]), enumerate(["a"], 0), enumerate((7,), 1 << 40))
print(catch(lambda: enumerate(1)))
print(catch(lambda: enumerate("ab")))
print(catch(lambda: enumerate([1], "a")))
print(catch(lambda: enumerate([1], None)))
print(zip(), zip([1, 2, 3], (7, 8, 9)), zip({1: 2}), zip([1]), zip([], [1]), zip(range(3), range(10, 20)))
print(zip([1, 2], [3], [4, 5, 6]), zip({1: 2, 3: 4}, [5, 6, 7]))
print(catch(lambda: zip([1], 2)))
print(catch(lambda: zip(1, [1])))
print(catch(lambda: zip([], None)))
print(reversed([1, 2, 3]), reversed((1,)), reversed({1: 2, 3: 4}), reversed(range(5)), reversed([]))
print(reversed(range(10, 0, -3)), reversed(()))
print(catch(lambda: reversed("abc")))
print(catch(lambda: reversed(None)))
print(any([]), any([0, ""]), any([0, 1]), all([]), all([1, 0]), all((1, "a")), any({0: 1}), all({0: 1}))
print(any([None, False, 0, "", (), [], {}]), all([1, "a", (1,), [0], {0: 0}, True]), any(range(3)), all(range(3)))
print(catch(lambda: any(1)))
print(catch(lambda: all("ab")))
print(catch(lambda: any(None)))
print(list({1: 2, 3: 4}), list((1, 2)), list(range(3)), list([]), list())
print(tuple([1, 2]), tuple({5: 6}), tuple(), tuple(range(2)))
print(catch(lambda: list(1)))
print(catch(lambda: tuple(None)))
"""

PROGRAMS["values"] = """\
a = [[[[[[[[[1]]]]]]]]]
b = [[[[[[[[[1]]]]]]]]]
print(a == b, a != b, a < [[[[[[[[[2]]]]]]]]])
deep_a = [a]
deep_b = [b]
print(catch(lambda: deep_a == deep_b))
print(catch(lambda: deep_a < deep_b))
print(catch(lambda: deep_a in [deep_b]))
print(catch(lambda: [deep_a, 1].remove(1)))
print(catch(lambda: [deep_a].remove(deep_b)))
cycle = [1]
cycle.append(cycle)
print(catch(lambda: [cycle] == [cycle]))
print(catch(lambda: cycle in [cycle]))
t = ((((((((((1,),),),),),),),),),)
u = ((((((((((1,),),),),),),),),),)
keyed = {t: "deep"}
print(catch(lambda: keyed[u]))
print(catch(lambda: keyed.get(u)))
print(catch(lambda: u in keyed))
print({(1, (2, "x")): 1}[(1, (2, "x"))], (1, (2, "x")) in {(1, (2, "x")): 1})
print({1: [1, 2]} == {1: [1, 2]}, {1: 2} == {1: 3}, {1: 2} == {2: 1}, {} == {})
print([1] in {}, [1] in {1: 2}, {} in {1: 2}, (1, [2]) in {1: 2}, 1 in {1: 2})
print(catch(lambda: {[1]: 2}))
print(catch(lambda: {(1, [2]): 2}))
print(catch(lambda: {{}: 2}))
print(catch(lambda: {range(3): 1}))
print(catch(lambda: {1: 2}[[1]]))
print(catch(lambda: {1: 2}[(1, {})]))
print(catch(lambda: {1: 1, 2: 2, 1: 3}))
print(catch(lambda: {"a": 1, "a": 2}))
print(catch(lambda: {1: 2}[3]))
print(catch(lambda: {"k": 2}["z"]))
print(catch(lambda: None < None))
print(catch(lambda: {} < {}))
print(catch(lambda: [1] < [(1,)]))
print(catch(lambda: (1, "a") < (1, 2)))
print(catch(lambda: [1][1 << 40]))
print(catch(lambda: [1][-2]))
print(catch(lambda: [][0]))
print(catch(lambda: (1, 2)[2]))
print(catch(lambda: [1]["a"]))
print(catch(lambda: "a" in range(3)))
print(catch(lambda: True in range(3)))
print(catch(lambda: [1] * (1 << 40)))
print([] * (1 << 40), (1,) * -1, [1, 2] * 2, 2 * (3,), range(10)[1:7:2], range(10)[::-3], range(10)[8:2:-2])
x = [1, 2, 3]
for v in x:
    pass
x[0] = 9
print(x, x == [9, 2, 3], (1, 2) < (1, 3), [1, 2] <= [1, 2], [2] > [1, 9], () < (0,), [] == [])
"""

# Programs that end with an error: the whole traceback is compared.
PROGRAMS["error_pop"] = """\
a = [1, 2]
a.pop()
a.pop()
a.pop()
"""

PROGRAMS["error_frozen"] = """\
load("frozen.star", "fd")
def f():
    fd["x"] = 1
f()
"""

PROGRAMS["error_key_function"] = """\
def key(x):
    return x["k"]

print(sorted([{"k": 1}, {}], key=key))
"""

PROGRAMS["error_min_key_function"] = """\
def key(x):
    fail("no key for", x)

print(min([3, 1], key=key))
"""

PROGRAMS["error_sorted_mixed"] = """\
print(sorted([1, 2, 3, "a"] * 10))
"""

#: Programs that need a string method of the same name as a list method (``index``):
#: they run once the build has it.
NEEDS_STRING_METHODS = {"list_index"}
#: Programs also run on the fast tier (the two tiers must agree exactly).
BOTH_TIERS = {"list_methods", "dict_methods", "sorting", "error_key_function"}


def compile_program(name: str) -> Any:
    try:
        return compile_kforge(
            PROGRAMS[name],
            FILENAME,
            loader=MODULES.__getitem__,
            testing=True,
            memory_quota=MEMORY_QUOTA,
        )
    except KeyError as error:  # a runtime function this build does not have yet
        if name in NEEDS_STRING_METHODS and "string_" in str(error):
            pytest.skip(f"this build has no {error}")
        raise


@pytest.mark.skipif(kforge_missing_reason() is not None, reason=str(kforge_missing_reason()))
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_runs_as_in_go(name: str) -> None:
    expected = Outcome.from_json(json.loads(EXPECTED.read_text(encoding="utf-8"))[name])
    program = compile_program(name)
    tiers = ("reference", "fast") if name in BOTH_TIERS else ("reference",)
    runs = [
        run_kforge(program, tier, tick_budget=TICK_BUDGET, memory_quota=MEMORY_QUOTA, testing=True)
        for tier in tiers
    ]
    assert all(run == runs[0] for run in runs), "the tiers disagree"
    outcome = runs[0].outcome
    assert (outcome.kind, outcome.stdout) == (expected.kind, expected.stdout)
    if expected.kind == RUNTIME_ERROR:
        assert outcome.traceback == expected.traceback
    assert outcome.stderr == ""


def test_every_program_has_its_expectation() -> None:
    recorded = json.loads(EXPECTED.read_text(encoding="utf-8"))
    assert set(recorded) == set(PROGRAMS), "run this file to record the expectations again"
    kinds = {Outcome.from_json(recorded[name]).kind for name in PROGRAMS}
    assert kinds == {SUCCESS, RUNTIME_ERROR}


# -- recording with the oracle -----------------------------------------------------------

_CATCH = """\
def catch(f):
    n = _catch_begin()
    known = _catch_known(n)
    if known:
        _catch_end()
        return known[0]
    f()
    _catch_end()
    return None
"""


def oracle_outcome(source: str, max_replays: int = 400) -> Outcome:
    """The oracle's outcome, with ``catch`` replayed (see the module's docstring)."""
    from starlark.go_testdata import _CatchState
    from starlark.harness import _exec_with_loads, oracle_module

    starlark_go = oracle_module()
    known: dict[int, list[str | None]] = {}
    for _ in range(max_replays):
        state = _CatchState(known)
        printed: list[str] = []
        interpreter = starlark_go.Starlark(print=printed.append)
        interpreter.set(**state.builtins())
        interpreter.exec(_CATCH, filename="catch.star")
        try:
            _exec_with_loads(interpreter, source, FILENAME, MODULES, set())
        except starlark_go.EvalError as error:
            if state.active:
                known[state.active[-1]] = [error.args[0]]
                continue
            stdout = "".join(line + "\n" for line in printed)
            return Outcome(RUNTIME_ERROR, stdout, error.args[0], error.backtrace)
        return Outcome(SUCCESS, "".join(line + "\n" for line in printed))
    raise RuntimeError("too many failing catch() calls")


def record() -> None:
    results = {name: oracle_outcome(source).to_json() for name, source in sorted(PROGRAMS.items())}
    EXPECTED.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"recorded {len(results)} programs in {EXPECTED}")


if __name__ == "__main__":
    record()
