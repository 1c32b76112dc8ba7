"""The layers of docs/architecture.md, checked on the import graph of the installed
packages (grimp, the graph behind import-linter): every import, lazy ones included."""

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

PACKAGES = ("solvers", "crypto", "feddata", "baselines", "hyfdca")
# the packages each package may import; anything else is a layering error
MAY_IMPORT = {
    "solvers": set(),
    "crypto": set(),
    "feddata": {"solvers"},
    "baselines": {"feddata", "solvers"},
    "hyfdca": {"solvers", "crypto", "feddata", "baselines"},
}
# inside hyfdca: the core (settings, the round's maths, both engines, run_hyfdca) never
# imports the applications on top of it
HYFDCA_APPS = ("hyfdca._estimators", "hyfdca._plots", "hyfdca.cli", "hyfdca.profile",
               "hyfdca.attacks", "hyfdca.experiments")
MESSAGE_ENGINE = ("hyfdca._protocol", "hyfdca._client", "hyfdca._server",
                  "hyfdca._transport", "hyfdca._messages")
BATCHED_ENGINE = ("hyfdca._batched", "hyfdca._batched_kernels", "hyfdca._cupy_kernels")
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph(*PACKAGES)


def _top(module):
    return module.split(".")[0]


def _in(module, prefixes):
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _edges(graph):
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            yield importer, imported


def _cycles(nodes, successors):
    """Strongly connected components with more than one node, or a self-loop (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in successors(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in successors(v):
                found.append(sorted(component))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_between_modules(graph):
    assert _cycles(graph.modules, graph.find_modules_directly_imported_by) == []


def test_no_import_cycle_between_packages(graph):
    imports = {p: set() for p in PACKAGES}
    for importer, imported in _edges(graph):
        if _top(importer) != _top(imported):
            imports[_top(importer)].add(_top(imported))
    assert _cycles(PACKAGES, lambda p: imports[p]) == []


def test_packages_import_only_the_layers_below(graph):
    wrong = [(a, b) for a, b in _edges(graph)
             if _top(a) != _top(b) and _top(b) not in MAY_IMPORT[_top(a)]]
    assert wrong == []


def test_the_hyfdca_core_never_imports_the_applications(graph):
    wrong = [(a, b) for a, b in _edges(graph)
             if _top(a) == "hyfdca" and a != "hyfdca" and not _in(a, HYFDCA_APPS)
             and _in(b, HYFDCA_APPS)]
    assert wrong == []


def test_the_two_engines_do_not_import_each_other(graph):
    wrong = [(a, b) for a, b in _edges(graph)
             if (_in(a, MESSAGE_ENGINE) and _in(b, BATCHED_ENGINE))
             or (_in(a, BATCHED_ENGINE) and _in(b, MESSAGE_ENGINE))]
    assert wrong == []


def _private(module):
    return any(part.startswith("_") and not part.startswith("__")
               for part in module.split(".")[1:])


def test_no_package_imports_another_packages_private_module(graph):
    wrong = [(a, b) for a, b in _edges(graph) if _top(a) != _top(b) and _private(b)]
    assert wrong == []


def _imported_modules(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def test_benchmarks_use_only_the_public_api():
    scripts = sorted(BENCHMARKS.glob("*.py"))
    assert scripts, f"no benchmark scripts in {BENCHMARKS}"
    wrong = [(p.name, m) for p in scripts for m in _imported_modules(p)
             if _top(m) in PACKAGES and _private(m)]
    assert wrong == []


@pytest.mark.parametrize("package, must_not_load", [
    ("baselines", ("crypto", "phe", "gmpy2", "hyfdca")),
    ("feddata", ("crypto", "phe", "gmpy2", "hyfdca", "baselines")),
    ("solvers", ("crypto", "phe", "gmpy2", "hyfdca", "baselines", "feddata")),
])
def test_importing_a_lower_layer_loads_nothing_above_it(package, must_not_load):
    code = (f"import sys, {package}\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(must_not_load)!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


@pytest.mark.parametrize("module", [
    "hyfdca",
    pytest.param("hyfdca.flower._client_app", marks=pytest.mark.skipif(
        importlib.util.find_spec("flwr") is None, reason="flwr is not installed")),
])
def test_a_process_that_only_runs_rounds_loads_no_scikit_learn(module):
    """A Flower ClientApp process starts for every message: scikit-learn (about 1 s of
    its start-up) loads only where it is used, and the estimators on first access."""
    code = (f"import sys, {module}\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'sklearn'}))\n"
            "import hyfdca\n"
            "print(hyfdca.HyFDCAClassifier.__module__, 'sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert out[:2] == ["[]", "hyfdca._estimators True"]


def test_the_checks_see_a_cycle_when_one_appears(graph):
    """The cycle test can fail: add an import that closes a loop and it is found."""
    graph.add_import(importer="solvers._losses", imported="feddata.federated")
    modules = _cycles(graph.modules, graph.find_modules_directly_imported_by)
    graph.remove_import(importer="solvers._losses", imported="feddata.federated")
    assert any("solvers._losses" in c and "feddata.federated" in c for c in modules)
