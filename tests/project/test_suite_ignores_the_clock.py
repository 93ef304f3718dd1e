"""The suite cannot fail on a slow machine: no test reads the clock or sets a time bound of its own,
none forces a thread count on its subprocesses, and none reads benchmark output.

A hang is caught by generous bounds that name what hung: ``HANG_S`` in tests/conftest.py for one
subprocess or wait (``run_command``, ``communicate``, ``wait_for``), pytest.ini's ``timeout`` for
a whole test. Speed is measured in ``make bench`` (benchmarks/), as ratios, and the claims that
rest on a measurement (the op table's slow ops) are checked there.

The scans read every Python file under tests/ except tests/data/ (the client scripts and the
data generators there are programs under test, not tests) and this file (its samples break
every rule). Each exception is listed below with its reason.
"""
import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# the one clock in the suite: wait_for's deadline (a hang bound, not a speed limit)
CLOCK_ALLOWED = {"tests/conftest.py": "wait_for's deadline, HANG_S"}
# (file, called function): a literal time bound that is the behaviour under test
TIMEOUT_ALLOWED = {
    ("tests/distributed/test_dist_sync_launch.py", "run_local"):
        "run_local's own timeout is what the test checks: a job that never ends is killed at 8 s",
}
# project tests that keep the docs' figures equal to the recorded benchmark results
BENCHMARK_OUTPUT_ALLOWED = {
    "tests/project/test_benchmark_results.py": "the docs quote the recorded results",
    "tests/project/test_onnx_zoo_table.py": "docs/onnx.md's table is the recorded one",
}

CLOCK = re.compile(r"\b(?:time\.(?:time|perf_counter|monotonic|process_time|thread_time)"
                   r"(?:_ns)?\s*\(|(?:perf_counter|monotonic|process_time)(?:_ns)?\s*\(|"
                   r"timeit\b|datetime\.(?:datetime\.)?(?:now|utcnow|today)\s*\()")


@functools.lru_cache(maxsize=None)
def _test_files():
    """(path relative to the checkout, source) of each file the scans read."""
    files = sorted(p for p in (ROOT / "tests").rglob("*.py")
                   if "data" not in p.relative_to(ROOT / "tests").parts[:1]
                   and p != Path(__file__).resolve())
    assert len(files) > 100, "the scan found too few test files: %d" % len(files)
    return [(p.relative_to(ROOT).as_posix(), p.read_text(encoding="utf-8")) for p in files]


def clock_reads(source):
    """Lines that read the clock, in code or in code held in strings (for subprocesses)."""
    return [line.strip() for line in source.splitlines()
            if CLOCK.search(line) and not line.lstrip().startswith("#")]


@functools.lru_cache(maxsize=None)
def _parse(source):
    return ast.parse(source)


def _numbers(tree):
    """Module-level names bound to a number."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, (int, float)):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def _number(node, numbers):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name) and node.id in numbers:
        return numbers[node.id]
    return None


def _callee(call):
    return call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")


def time_bounds(source):
    """(called function, seconds) for each time bound a test sets itself: a ``timeout=``
    keyword, a ``pytest.mark.timeout`` or a ``set_*_timeout`` call given a number (or a module
    constant holding one). ``HANG_S`` and pytest.ini's timeout are not numbers here."""
    tree = _parse(source)
    numbers = _numbers(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _callee(node)
        values = [k.value for k in node.keywords if k.arg == "timeout"]
        if name == "timeout" or (name.startswith("set_") and name.endswith("timeout")):
            values += node.args[:1]
        for value in values:
            seconds = _number(value, numbers)
            if seconds is not None:
                found.append((name, seconds))
    return found


def forced_threads(source):
    """The OMP_NUM_THREADS values a test writes as constants into an environment (a keyword
    argument, a dict literal's key, or an item assignment)."""
    found = []
    for node in ast.walk(_parse(source)):
        pairs = []
        if isinstance(node, ast.Call):
            pairs = [(k.arg, k.value) for k in node.keywords]
        elif isinstance(node, ast.Dict):
            pairs = [(k.value, v) for k, v in zip(node.keys, node.values)
                     if isinstance(k, ast.Constant)]
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
            key = node.targets[0].slice
            if isinstance(key, ast.Constant):
                pairs = [(key.value, node.value)]
        found += [value.value for key, value in pairs
                  if key == "OMP_NUM_THREADS" and isinstance(value, ast.Constant)]
    return found


def reads_benchmark_output(source):
    """Whether the file's strings name both the benchmarks folder and a JSON file."""
    strings = [node.value for node in ast.walk(_parse(source))
               if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    folder = any(s == "benchmarks" or s.startswith("benchmarks/") for s in strings)
    return folder and any(s.endswith(".json") for s in strings)


# ----------------------------------------------------------------------------- the scans can fail
def test_the_scans_find_what_they_look_for():
    assert clock_reads("start = time.perf_counter()\nx = 1\n# time.time()\n") == [
        "start = time.perf_counter()"]
    assert clock_reads('CODE = "import time; go = time.time() + 5"') != []
    assert clock_reads("time.sleep(1)\nwait_for(done, 'x')\n") == []
    assert time_bounds("LIMIT = 90\nsubprocess.run(c, timeout=LIMIT)\np.wait(timeout=5)\n"
                       "@pytest.mark.timeout(60, method='thread')\ndef t(): pass\n"
                       "d.set_page_load_timeout(30)\nrun(c, timeout=HANG_S)\n") == [
        ("run", 90), ("wait", 5), ("timeout", 60), ("set_page_load_timeout", 30)]
    assert sorted(forced_threads('env = dict(os.environ, OMP_NUM_THREADS="2")\n'
                                 'e = {"OMP_NUM_THREADS": "1"}\nenv["OMP_NUM_THREADS"] = "4"\n'
                                 'f = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}\n'
                                 )) == ["1", "2", "4"]
    assert reads_benchmark_output('open(os.path.join(ROOT, "benchmarks", "op_survey.json"))')
    assert reads_benchmark_output('p = "benchmarks/results-gpu-fidelity.json"')
    assert not reads_benchmark_output('sys.path.insert(0, os.path.join(ROOT, "benchmarks"))')


# ----------------------------------------------------------------------------- the suite
def test_no_test_reads_the_clock():
    found = {rel: clock_reads(source) for rel, source in _test_files()}
    found = {k: v for k, v in found.items() if v and k not in CLOCK_ALLOWED}
    assert not found, ("tests must not read the clock (no assertion on a duration; a hang is "
                       "caught by conftest's HANG_S bounds and pytest.ini's timeout): %s" % found)


def test_no_test_sets_a_time_bound_of_its_own():
    found = {}
    for rel, source in _test_files():
        bounds = [(name, seconds) for name, seconds in time_bounds(source)
                  if (rel, name) not in TIMEOUT_ALLOWED]
        if bounds:
            found[rel] = bounds
    assert not found, ("a literal timeout is a speed limit on a loaded machine: bound a "
                       "subprocess or a wait with conftest's HANG_S (run_command, communicate, "
                       "wait_for), a test with pytest.ini's timeout: %s" % found)


def test_no_test_forces_a_thread_count_on_its_subprocesses():
    found = {rel: forced_threads(source) for rel, source in _test_files()}
    found = {k: v for k, v in found.items() if v}
    assert not found, ("subprocesses inherit the caller's OMP_NUM_THREADS (tests/conftest.py "
                       "shares the cores among pytest-xdist's workers): %s" % found)


def test_no_unit_test_reads_benchmark_output():
    found = [rel for rel, source in _test_files()
             if reads_benchmark_output(source) and rel not in BENCHMARK_OUTPUT_ALLOWED]
    assert not found, ("benchmark output (benchmarks/*.json) is measured by `make bench`; a "
                       "test's evidence lives in tests/data/: %s" % found)


@pytest.mark.parametrize("path", sorted(set(CLOCK_ALLOWED) | set(BENCHMARK_OUTPUT_ALLOWED)
                                        | {f for f, _ in TIMEOUT_ALLOWED}))
def test_every_exception_names_an_existing_file(path):
    assert (ROOT / path).is_file(), path
