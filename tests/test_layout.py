"""Every folder of tests is a package, so two backends' folders may hold files of the same name
(tests/openmp/test_aggregation.py beside a tests/cuda/test_aggregation.py) without a clash."""
from pathlib import Path


def test_every_test_folder_is_a_package():
    root = Path(__file__).parent
    folders = {p.parent for p in root.rglob("test_*.py")}
    assert [str(f.relative_to(root)) for f in sorted(folders) if not (f / "__init__.py").is_file()] == []
