"""docs/reliability.md's table of bad inputs: every row names a test that exists."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_row_of_the_bad_input_table_names_an_existing_test():
    text = (ROOT / "docs" / "reliability.md").read_text()
    table = text.split("## 3. Bad input and its errors")[1].split("\n## ")[0]
    named = re.findall(r"`(tests/[\w/]+\.py)::(test_\w+)`", table)
    rows = [line for line in table.splitlines() if line.startswith("| ")
            and not line.startswith("| bad input")]
    assert len(named) == len(rows) >= 20
    for path, name in named:
        tree = ast.parse((ROOT / path).read_text())
        functions = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        assert name in functions, f"{path}::{name} named in docs/reliability.md is missing"
