"""The test tree's own rule: test modules are imported by basename (no packages, rootdir imports), so two
test files with the same name in different directories break collection of the whole suite."""
from collections import Counter
from pathlib import Path


def test_every_test_module_name_is_unique():
    root = Path(__file__).resolve().parents[1]
    names = Counter(p.name for p in root.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
