"""Edge-list text files."""
import pytest

from morphgen.data import DataError, load_dataset, load_graph


def _file(tmp_path, text, name="g.txt"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_comments_blank_lines_and_separators(tmp_path):
    path = _file(tmp_path, "# a comment\n\n0 1\n1\t2   # trailing comment\n  \n3,0\n")
    g = load_graph(path)
    assert g.num_nodes == 4
    assert g.src.tolist() == [0, 1, 3] and g.dst.tolist() == [1, 2, 0]


def test_a_header_line_of_column_names_is_skipped(tmp_path):
    g = load_graph(_file(tmp_path, "# exported\nsrc,dst\n0,1\n2,0\n", name="g.csv"))
    assert g.src.tolist() == [0, 2] and g.dst.tolist() == [1, 0]
    # only a first line, and only names: a later one, or one id and a name, stays an error
    with pytest.raises(DataError, match=r"g.txt:2: node ids must be integers, got 'src dst'"):
        load_graph(_file(tmp_path, "0 1\nsrc dst\n"))
    with pytest.raises(DataError, match=r"g.txt:1: node ids must be integers, got '0 dst'"):
        load_graph(_file(tmp_path, "0 dst\n1 2\n"))


def test_a_byte_order_mark_is_not_part_of_the_first_id(tmp_path):
    g = load_graph(_file(tmp_path, "\ufeff0 1\n1 2\n"))
    assert g.src.tolist() == [0, 1] and g.dst.tolist() == [1, 2]


def test_num_nodes_option_and_symmetrise(tmp_path):
    path = _file(tmp_path, "0 1\n1 0\n1 2\n")
    g = load_graph(path, num_nodes=10, symmetrise=True)
    assert g.num_nodes == 10
    assert sorted(zip(g.src.tolist(), g.dst.tolist())) == [(0, 1), (1, 0), (1, 2), (2, 1)]
    with pytest.raises(DataError, match=r"node id 2 .* outside \[0, 2\) given num_nodes=2"):
        load_graph(path, num_nodes=2)


@pytest.mark.parametrize("text,pattern", [
    ("0 1\n1 2 3\n", r"g.txt:2: expected 'src dst', got '1 2 3'"),
    ("0 1\n# ok\n\nx 2\n", r"g.txt:4: node ids must be integers, got 'x 2'"),
    ("0 1\n5\n", r"g.txt:2: expected 'src dst'"),
    ("0 -1\n", r"g.txt:1: node ids must be non-negative"),
])
def test_bad_lines_give_the_line_number(tmp_path, text, pattern):
    with pytest.raises(DataError, match=pattern):
        load_graph(_file(tmp_path, text))


def test_empty_and_binary_files(tmp_path):
    g = load_graph(_file(tmp_path, "# nothing\n"))
    assert g.num_nodes == 0 and g.num_edges == 0
    path = tmp_path / "bin.txt"
    path.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(DataError, match=r"bin.txt: not a text edge list"):
        load_graph(path)


def test_training_needs_labels(tmp_path):
    path = _file(tmp_path, "0 1\n1 2\n")
    with pytest.raises(DataError, match=r"g.txt: an edge list has no labels; labels are required for training"):
        load_dataset(path)
    with pytest.raises(DataError, match=r"g.txt:1: expected 'src dst'"):
        load_dataset(_file(tmp_path, "0 1 2\n"))
