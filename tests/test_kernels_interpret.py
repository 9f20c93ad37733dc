"""CI check of the Triton kernels on the CPU: every case of ``tests/test_kernels_interpret_cases.py``
(float32, tiny shapes; forward and every gradient against the float64 reference, the gate,
grouped-query heads, ``cu_seqlens``, bad inputs...) is one pytest item here, run in a worker process
that has ``TRITON_INTERPRET=1``; ``pytest -n 2`` spreads the items over two pytest-xdist workers.

The variable has to be set before a process first imports triton (which decides then whether
``tl.max``/``tl.sum`` etc. are interpreted), and setting it in this process would also turn the GPU
tests of the same session into interpreted ones: hence the worker process. Starting a Python with torch
and triton costs seconds, so each pytest process here (each xdist worker) starts ONE worker on its first
case and keeps it for the session: a pytest session over the cases file whose run loop reads the names
of the cases to run from a pipe and answers with each one's outcome (``_WORKER`` below).

The items are made from the cases module itself: each test function's name and ``parametrize`` marks
are copied (read off its source, ``_case_list``), so pytest gives the items here the same ids as there.
"""
from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

if importlib.util.find_spec("triton") is None:  # (found, not imported: the workers import it)
    pytest.skip("triton is not installed", allow_module_level=True)

CASES = Path(__file__).with_name("test_kernels_interpret_cases.py")
ROOT = Path(__file__).resolve().parent.parent
CASE_TIMEOUT_S = 900        # one case, including the worker's start for the first one
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")

# The worker: a pytest session over the cases file; after collection it writes the names of its items,
# then runs the items named on its input, one per line, answering each with a JSON line. Its protocol
# goes through copies of the original stdin / stdout made before pytest starts, so that pytest's output
# capture (and the tests' own printing, sent to stderr) cannot mix with it.
_WORKER = r'''
import json, os, sys, time
import pytest
requests = os.fdopen(os.dup(0), "r")
answers = os.fdopen(os.dup(1), "w", buffering=1)
devnull = os.open(os.devnull, os.O_RDONLY)
os.dup2(devnull, 0)
os.dup2(2, 1)

class Serve:
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            answers.write(json.dumps({"error": "collection failed"}) + "\n")
            return True
        items = {item.name: item for item in session.items}
        answers.write(json.dumps({"ready": sorted(items)}) + "\n")
        for line in requests:
            name = line.strip()
            if not name:
                break
            item = items.get(name)
            if item is None:
                answers.write(json.dumps({"name": name, "outcome": "missing"}) + "\n")
                continue
            self.reports = []
            t0 = time.time()
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=None)
            failed = [r for r in self.reports if r.failed]
            skipped = [r for r in self.reports if r.skipped]
            outcome = "failed" if failed else ("skipped" if skipped else "passed")
            text = "\n\n".join(r.longreprtext for r in failed or skipped)
            out = "".join(f"{r.when}: {r.capstdout}{r.capstderr}" for r in self.reports if r.capstdout or r.capstderr)
            answers.write(json.dumps({"name": name, "outcome": outcome, "longrepr": text, "output": out[-4000:],
                                      "seconds": round(time.time() - t0, 2)}) + "\n")
        return True

    def pytest_runtest_logreport(self, report):
        self.reports.append(report)

sys.exit(pytest.main([sys.argv[1], "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist"],
                     plugins=[Serve()]))
'''


class _Worker:
    """One interpreted worker process (started on first use, ended with this process's session)."""

    def __init__(self):
        env = dict(os.environ, TRITON_INTERPRET="1", PYTHONDONTWRITEBYTECODE="1")
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.pop("PYTEST_XDIST_WORKER", None)
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER, str(CASES)], cwd=ROOT, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, bufsize=1)
        self.names = None

    def _read(self, timeout):
        deadline = time.time() + timeout
        while True:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.time()))
            if not ready:
                raise TimeoutError(f"no answer from the interpreted worker within {timeout} s")
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the interpreted worker ended (exit status {self.proc.wait()})")
            if line.startswith("{"):
                return json.loads(line)

    def stderr_tail(self, n=6000):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-n:]

    def run(self, name, timeout=CASE_TIMEOUT_S):
        t0 = time.time()
        if self.names is None:
            first = self._read(timeout)
            if "ready" not in first:
                raise RuntimeError(f"the interpreted worker did not collect the cases: {first}")
            self.names = set(first["ready"])
        if name not in self.names:
            raise RuntimeError(f"the interpreted worker has no case {name!r} (collected {len(self.names)})")
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()
        return self._read(max(1.0, timeout - (time.time() - t0)))

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="session")
def interpreted_worker():
    worker = _Worker()
    yield worker
    worker.close()


def _run_case(request, interpreted_worker, **_):
    name = request.node.name
    try:
        answer = interpreted_worker.run(name)
    except Exception as e:
        pytest.fail(f"{name}: {e}\n--- worker stderr ---\n{interpreted_worker.stderr_tail()}", pytrace=False)
    if answer.get("output"):
        print(answer["output"])
    if answer["outcome"] == "skipped":  # the cases must run: a skip there means the interpreter is off
        pytest.fail(f"{name} was skipped in the interpreted worker:\n{answer['longrepr']}", pytrace=False)
    if answer["outcome"] != "passed":
        pytest.fail(f"{name} {answer['outcome']} under TRITON_INTERPRET=1:\n{answer.get('longrepr', '')}",
                    pytrace=False)


def _case_list():
    """``(name, parametrize marks, docstring)`` of every test function of the cases file, in file order.

    Read from its source: each decorator is evaluated with ``pytest`` and the builtins only, so that this
    process imports neither torch nor the kernels for it (two seconds of CPU per pytest-xdist worker); if
    a decorator needs more, the module is imported (under ``CASE_LIST_MODULE``, without the interpreter)
    and its functions' marks are read instead."""
    tree = ast.parse(CASES.read_text())
    try:
        out = []
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                marks = []
                for dec in reversed(node.decorator_list):  # applied bottom-up, as the module does
                    made = eval(compile(ast.Expression(dec), str(CASES), "eval"), {"pytest": pytest})
                    if not isinstance(made, pytest.MarkDecorator):
                        raise TypeError(f"{node.name}: a decorator that is not a mark")
                    marks.append(made.mark)
                out.append((node.name, marks, ast.get_docstring(node)))
        return out
    except Exception:
        spec = importlib.util.spec_from_file_location("kernels_interpret_case_list", CASES)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        assert mod.CASE_LIST_MODULE == spec.name
        return [(n, list(getattr(f, "pytestmark", [])), f.__doc__) for n, f in vars(mod).items()
                if n.startswith("test_") and inspect.isfunction(f)]


def _item_for(name, marks, doc):
    """A test here with a case's name and parametrize marks (so the same ids), which runs that case in the
    interpreted worker."""
    marks = [m for m in marks if m.name == "parametrize"]
    params = []
    for m in marks:
        names = m.args[0]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        params += [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in names]
    params += [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in ("request", "interpreted_worker")]

    def case(**kwargs):
        _run_case(**kwargs)
    case.__name__ = case.__qualname__ = name
    case.__doc__ = doc
    case.__signature__ = inspect.Signature(params)
    case.pytestmark = list(marks)
    if INTERPRETED:  # the cases module runs in this process instead
        case = pytest.mark.skip(reason="TRITON_INTERPRET is set: tests/test_kernels_interpret_cases.py runs here")(case)
    return case


# the longest cases first (about 5 to 30 s each on two cores, against 0.1 to 3 s for most others), so
# that pytest-xdist's load scheduling ends with short ones on both workers; the others in file order
SLOW_FIRST = ("test_bounds_checked", "test_gradients_with_row_and_column_splits",
              "test_gradients_with_two_blocks_of_queries_per_program",
              "test_gradients_with_two_blocks_of_keys_per_program",
              "test_forward_with_earlier_segments_in_a_second_kernel", "test_strong_gates_forward_and_gradients",
              "test_head_dim_32_padded_to_64", "test_forward_and_gradients")
_cases = _case_list()
_cases.sort(key=lambda c: SLOW_FIRST.index(c[0]) if c[0] in SLOW_FIRST else len(SLOW_FIRST))
for _name, _marks, _doc in _cases:
    globals()[_name] = _item_for(_name, _marks, _doc)
del _cases, _name, _marks, _doc
