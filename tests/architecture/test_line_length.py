"""No line of the project's Python is longer than 100 characters (the longest today are
100), so that a diff or a docstring reads in one column without wrapping."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LENGTH = 100
FOLDERS = ("solvers", "crypto", "feddata", "baselines", "hyfdca", "benchmarks", "tests")


def _sources():
    for folder in FOLDERS:
        yield from sorted((ROOT / folder).rglob("*.py"))
    yield from sorted(ROOT.glob("*.py"))


def test_no_line_is_longer_than_the_limit():
    checked, long_lines = 0, []
    for path in _sources():
        checked += 1
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if len(line) > MAX_LENGTH:
                long_lines.append(f"{path.relative_to(ROOT)}:{number} ({len(line)})")
    assert checked >= 100, f"checked only {checked} files: is the search still looking?"
    assert not long_lines, f"lines over {MAX_LENGTH} characters: " + ", ".join(long_lines)
