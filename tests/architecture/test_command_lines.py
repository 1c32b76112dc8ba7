"""Every command line of the toolkit and its benchmarks refuses abbreviated options:
argparse would otherwise take ``--qu`` for ``--quick`` (or for whichever option later
starts with those letters), and a run would go ahead with options nobody typed."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*ROOT.glob("benchmarks/*.py"),
                  *(path for package in ("solvers", "crypto", "feddata", "baselines", "hyfdca")
                    for path in (ROOT / package).rglob("*.py"))])


def _parsers(tree):
    """The calls that build a parser: ArgumentParser(...) and sub.add_parser(...)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("ArgumentParser", "add_parser"):
                yield node


def _refuses_abbreviations(call):
    return any(keyword.arg == "allow_abbrev" and isinstance(keyword.value, ast.Constant)
               and keyword.value.value is False for keyword in call.keywords)


def test_every_parser_refuses_abbreviated_options():
    found, allowing = 0, []
    for path in SOURCES:
        for call in _parsers(ast.parse(path.read_text(), filename=str(path))):
            found += 1
            if not _refuses_abbreviations(call):
                allowing.append(f"{path.relative_to(ROOT)}:{call.lineno}")
    assert found >= 15, f"found only {found} parsers: is the search still looking?"
    assert not allowing, "parsers that take abbreviated options: " + ", ".join(allowing)


def test_the_check_sees_a_parser_that_allows_abbreviations():
    tree = ast.parse("import argparse\nargparse.ArgumentParser(description='x')\n"
                     "sub.add_parser('run', allow_abbrev=False)\n")
    assert [_refuses_abbreviations(call) for call in _parsers(tree)] == [False, True]


def _doc_description_cut_short(call):
    """A description taken from the module docstring's first line alone (which stops
    mid-sentence where the sentence wraps), not its first paragraph."""
    return any(keyword.arg == "description" and "__doc__.splitlines()" in ast.unparse(keyword.value)
               for keyword in call.keywords)


def test_every_help_text_from_a_docstring_keeps_its_first_paragraph():
    cut = [f"{path.relative_to(ROOT)}:{call.lineno}" for path in SOURCES
           for call in _parsers(ast.parse(path.read_text(), filename=str(path)))
           if _doc_description_cut_short(call)]
    assert not cut, "help texts cut at the docstring's first line: " + ", ".join(cut)
    tree = ast.parse("argparse.ArgumentParser(description=__doc__.splitlines()[0])\n"
                     "argparse.ArgumentParser(description=__doc__.split('\\n\\n')[0])\n")
    assert [_doc_description_cut_short(call) for call in _parsers(tree)] == [True, False]


def test_a_benchmark_refuses_an_abbreviated_option():
    """``--he`` once stood for ``--help`` (as ``--bud`` for ``--budget``, which would run
    the matrix); now it is an error."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "hyfdca_variants.py"),
                           "--he"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout[:500]
    assert "unrecognized arguments: --he" in done.stderr
