"""OGB's ``split/<name>/split_dict.pt``: the split as ``torch.save`` of a dict of vertex-id tensors or numpy arrays,
which OGB's ``get_idx_split`` reads before the CSV files. The reader takes it first too, checks it as it checks the
CSV files, and loads it with ``torch.load(weights_only=True)``: a file that asks for anything else is refused, unrun,
in one line that names it."""

from __future__ import annotations

import gzip
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from test_formats import (
    N,
    assert_same,
    raises_naming,
    src,  # noqa: F401 (the 40-vertex graph of the format tests, as a fixture)
    write_ogb_csv,
    write_ogb_npz,
)

from mggcn.data.formats import read_ogb
from mggcn.data.graph import Graph
from mggcn.tools.cli import main

OGB_KEYS = {"train": "train", "val": "valid", "test": "test"}  # mggcn's split: OGB's key


def split_ids(g: Graph) -> dict[str, np.ndarray]:
    """OGB's dict of ``g``'s split: int64 vertex ids under 'train', 'valid', 'test'."""
    return {key: np.flatnonzero(g.masks[name]) for name, key in OGB_KEYS.items()}


def split_dir(root: Path) -> Path:
    (found,) = (root / "split").iterdir()
    return found


def as_split_dict(root: Path, obj, *, keep_csv: bool = False, **save) -> Path:
    """Write ``obj`` as the ``split_dict.pt`` of the OGB directory ``root`` (its CSV split files removed unless
    ``keep_csv``); returns the file."""
    where = split_dir(root)
    if not keep_csv:
        for name in ("train", "valid", "test"):
            (where / f"{name}.csv.gz").unlink()
    path = where / "split_dict.pt"
    torch.save(obj, path, **save)
    return path


def numpy1_names(path: Path) -> None:
    """Rewrite a legacy-format ``torch.save`` file of numpy arrays as numpy 1 pickles them (``numpy.core``, where
    numpy 2 writes ``numpy._core``): OGB's files were written so."""
    data = path.read_bytes().replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n")
    assert b"numpy.core.multiarray\n_reconstruct" in data
    path.write_bytes(data)


def _tensors(ids):
    return {k: torch.from_numpy(v) for k, v in ids.items()}


def _int32_tensors(ids):
    return {k: torch.from_numpy(v).int() for k, v in ids.items()}


def _arrays(ids):
    return ids


def _uint32_arrays(ids):
    return {k: v.astype(np.uint32) for k, v in ids.items()}


def _mixed(ids):  # as np.load or a tensor each may give them
    return {"train": torch.from_numpy(ids["train"]), "valid": ids["valid"].astype(np.int32), "test": ids["test"]}


@pytest.mark.parametrize("convert", [_tensors, _int32_tensors, _arrays, _uint32_arrays, _mixed])
@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_split_dict_gives_the_csv_split(tmp_path, src, convert, legacy):  # noqa: F811
    want = read_ogb(write_ogb_csv(tmp_path / "csv", src))
    root = write_ogb_csv(tmp_path / "pt", src)
    as_split_dict(root, convert(split_ids(src)), _use_new_zipfile_serialization=not legacy)
    g = read_ogb(root)
    assert_same(g, want)
    np.testing.assert_array_equal(g.edge_index, want.edge_index)
    assert g.meta == {**want.meta, "source": str(root)}


def test_split_dict_written_by_numpy_1(tmp_path, src):  # noqa: F811
    root = write_ogb_csv(tmp_path / "d", src)
    path = as_split_dict(root, split_ids(src), _use_new_zipfile_serialization=False)
    numpy1_names(path)
    assert_same(read_ogb(root), src)


def test_split_dict_beside_binary_raw_files(tmp_path, src):  # noqa: F811
    root = write_ogb_npz(tmp_path / "ogbn_papers100M", src)
    as_split_dict(root, _tensors(split_ids(src)))
    assert_same(read_ogb(root), src)


def test_split_dict_comes_before_the_csv_files(tmp_path, src):  # noqa: F811
    root = write_ogb_csv(tmp_path / "d", src)
    ids = split_ids(src)
    ids["train"], ids["test"] = ids["test"], ids["train"]  # another split than the CSV files'
    as_split_dict(root, ids, keep_csv=True)
    with gzip.open(split_dir(root) / "valid.csv.gz", "wt") as f:  # never opened: split_dict.pt decides
        f.write("not a vertex id\n")
    g = read_ogb(root)
    for name, key in OGB_KEYS.items():
        np.testing.assert_array_equal(np.flatnonzero(g.masks[name]), ids[key], err_msg=name)


def test_a_split_dict_pt_that_is_no_file_leaves_the_csv_files(tmp_path, src):  # noqa: F811
    root = write_ogb_csv(tmp_path / "d", src)
    (split_dir(root) / "split_dict.pt").mkdir()  # OGB looks for a file (os.path.isfile), so does the reader
    assert_same(read_ogb(root), src)


def test_split_dict_of_the_chosen_split_scheme(tmp_path, src):  # noqa: F811
    root = write_ogb_csv(tmp_path / "d", src, "a")
    write_ogb_csv(tmp_path / "d", src, "b")
    ids = split_ids(src)
    ids["valid"] = ids["valid"][:3]
    torch.save(ids, root / "split" / "b" / "split_dict.pt")
    assert_same(read_ogb(root, split="a"), src)
    assert read_ogb(root, split="b").masks["val"].sum() == 3


# ---------------------------------------------------------------------------------------------------- bad input


def _ids(**change):
    """The good split of the ``src`` graph with ``change`` made to its dict."""
    def make(g: Graph):
        ids = split_ids(g)
        ids.update({k: v(ids) if callable(v) else v for k, v in change.items()})
        return {k: v for k, v in ids.items() if v is not None}
    return make


@pytest.mark.parametrize("make, words", [
    (lambda g: [torch.arange(3)], ["holds a list", "not a dict"]),
    (lambda g: torch.arange(3), ["holds a Tensor", "not a dict"]),
    (_ids(valid=None), ["missing key(s) ['valid']", "'train'", "'test'"]),
    (lambda g: {"train": np.arange(3)}, ["missing key(s) ['valid', 'test']"]),
    (_ids(train=torch.tensor([0.0, 1.0])), ["vertex ids must be integers", "float32"]),
    (_ids(test=np.array([28.0, 29.0])), ["vertex ids must be integers", "float64"]),
    (_ids(train=torch.tensor([True, False])), ["vertex ids must be integers", "bool"]),
    (_ids(train=torch.zeros(3, dtype=torch.bfloat16)), ["'train'", "bfloat16", "numpy cannot hold"]),
    (_ids(train=lambda ids: ids["train"].reshape(4, 5)), ["'train'", "one-dimensional", "[4, 5]"]),
    (_ids(valid=lambda ids: torch.from_numpy(ids["valid"][:, None])), ["'valid'", "one-dimensional", "[8, 1]"]),
    (_ids(test=torch.tensor(30)), ["'test'", "one-dimensional", "shape []"]),
    (_ids(test=[28, 29]), ["'test' holds a list", "not a tensor or array"]),
    (_ids(test=lambda ids: np.append(ids["test"], 77)), ["'test'[8]", "77", "out of range [0, 40)"]),
    (_ids(valid=lambda ids: torch.tensor([20, -1])), ["'valid'[1]", "-1", "out of range"]),
    (_ids(valid=lambda ids: np.append(ids["valid"], 30)), ["'val' and 'test' splits overlap", "vertex 30"]),
    (_ids(train=lambda ids: np.append(ids["train"], 20)), ["'train' and 'val' splits overlap", "vertex 20"]),
    (_ids(train=np.zeros(0, dtype=np.int64)), ["training split is empty"]),
    (_ids(test=lambda ids: np.append(ids["test"], 37)), ["vertex 37", "'test' split", "no label", "node-label"]),
])
def test_bad_split_dict(tmp_path, src, make, words):  # noqa: F811
    root = write_ogb_csv(tmp_path / "d", src)
    path = as_split_dict(root, make(src))
    with raises_naming(path, *words):
        read_ogb(root)


def test_a_nested_tensor_is_one_line_without_torchs_warning(tmp_path, src, recwarn):  # noqa: F811
    """torch warns of a nested tensor's prototype API when numpy is asked for its values: the refusal alone shows."""
    root = write_ogb_csv(tmp_path / "d", src)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the same warning, while the test builds one
        nested = torch.nested.nested_tensor([torch.arange(3), torch.arange(2)])
    path = as_split_dict(root, _ids(train=nested)(src))
    recwarn.clear()
    with raises_naming(path, "'train'", "numpy cannot hold"):
        read_ogb(root)
    assert [str(w.message) for w in recwarn] == []


def test_an_empty_split_of_any_dtype_is_empty(tmp_path, src):  # noqa: F811
    root = write_ogb_csv(tmp_path / "d", src)
    ids = split_ids(src)
    as_split_dict(root, {**ids, "valid": torch.tensor([]), "test": np.zeros((0,), dtype=np.float64)})
    g = read_ogb(root)
    assert not g.masks["val"].any() and not g.masks["test"].any()
    np.testing.assert_array_equal(g.masks["train"], src.masks["train"])


class _Calls:
    """Pickles as the call ``func(*args)``: a plain unpickler would make it."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("damage, words", [
    (lambda p: p.write_bytes(b""), ["truncated or corrupt torch.save file"]),
    (_truncated, ["truncated or corrupt torch.save file"]),
    (lambda p: p.write_text("train,valid,test\n0,1,2\n"), ["truncated or corrupt torch.save file"]),
    # the dtype's class as this numpy names it: StrDType (numpy 2), dtype[str_] (numpy 1)
    (lambda p: torch.save({"train": np.array(["0", "1"]), "valid": 0, "test": 0}, p),
     ["refused", type(np.dtype(str)).__name__]),
    (lambda p: torch.save({"train": np.array([0, 1], dtype=object), "valid": 0, "test": 0}, p),
     ["refused", type(np.dtype(object)).__name__]),
    (lambda p: torch.save({"train": np.int64(3), "valid": 0, "test": 0}, p), ["refused", "scalar"]),
    # bytes() is allowed for the empty raw data of an empty array, never to allocate what a file asks
    (lambda p: torch.save({"train": _Calls(bytes, 1 << 40), "valid": 0, "test": 0}, p), ["refused", "bytes()"]),
])
def test_damaged_or_refused_split_dict(tmp_path, src, damage, words):  # noqa: F811
    root = write_ogb_csv(tmp_path / "d", src)
    path = as_split_dict(root, split_ids(src))
    damage(path)
    with raises_naming(path, *words):
        read_ogb(root)


def test_a_pickle_that_would_run_code_is_refused_unrun(tmp_path, src):  # noqa: F811
    root = write_ogb_csv(tmp_path / "d", src)
    ran = tmp_path / "ran"
    path = as_split_dict(root, {**split_ids(src), "train": _Calls(os.mkdir, str(ran))})
    with raises_naming(path, "refused", "mkdir", "weights_only=True"):
        read_ogb(root)
    assert not ran.exists()


def _numpy_refused_after(path: Path) -> None:
    """numpy arrays are allowed while the reader loads a split_dict.pt, not after."""
    with pytest.raises(Exception, match="(?i)weights"):
        torch.load(path, weights_only=True)


def test_numpy_arrays_are_allowed_only_while_the_split_loads(tmp_path, src):  # noqa: F811
    root = write_ogb_csv(tmp_path / "d", src)
    path = as_split_dict(root, split_ids(src))
    before = sorted(map(repr, torch.serialization.get_safe_globals()))
    assert_same(read_ogb(root), src)
    # as a set: torch may put back what it allowed in another order (set-based, so by this process's hash seed)
    assert sorted(map(repr, torch.serialization.get_safe_globals())) == before
    _numpy_refused_after(path)


def test_without_the_safe_globals_context_of_torch_2_5(tmp_path, src, monkeypatch):  # noqa: F811
    """torch 2.4 has add_safe_globals but not the safe_globals context: the reader allows numpy arrays for the
    load and puts back what the process had allowed (on torch 2.4 itself the context is absent already)."""
    monkeypatch.delattr(torch.serialization, "safe_globals", raising=False)
    root = write_ogb_csv(tmp_path / "d", src)
    path = as_split_dict(root, split_ids(src))

    class Mine:  # a class the process allowed itself: still allowed after the load
        pass

    before = torch.serialization.get_safe_globals()
    torch.serialization.add_safe_globals([Mine])
    try:
        assert_same(read_ogb(root), src)
        assert Mine in torch.serialization.get_safe_globals()
        assert not any(getattr(g, "__module__", "").startswith("numpy") for g in torch.serialization.get_safe_globals())
        _numpy_refused_after(path)
    finally:
        torch.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals(before)


# -------------------------------------------------------------------------------------------- the command line


def _error_line(capsys, argv: list) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning on stderr would be a second line
        code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = err.strip("\n").split("\n")
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_prepare_and_info_of_a_directory_with_split_dict(tmp_path, src, capsys):  # noqa: F811
    root = write_ogb_csv(tmp_path / "ogbn_x", src)
    as_split_dict(root, {k: torch.from_numpy(v[:-1]) for k, v in split_ids(src).items()}, keep_csv=True)
    out = tmp_path / "prepared"
    assert main(["prepare", str(root), str(out), "--format", "ogb", "--quiet"]) == 0, capsys.readouterr().err
    assert main(["info", str(out), "--verify"]) == 0, capsys.readouterr().err
    shown = capsys.readouterr().out
    assert "splits      train 19  val 7  test 7  (labelled 36)" in shown, shown  # split_dict.pt's, not the CSV's
    assert "verified:" in shown, shown

    shutil.rmtree(out)
    path = split_dir(root) / "split_dict.pt"
    path.write_bytes(path.read_bytes()[:100])
    line = _error_line(capsys, ["prepare", root, out, "--format", "ogb", "--quiet"])
    assert line.startswith("mggcn prepare: error: ") and str(path) in line and "truncated or corrupt" in line, line
    assert not out.exists()


def test_train_reads_the_split_dict(tmp_path, src, capsys):  # noqa: F811
    root = write_ogb_csv(tmp_path / "ogbn_x", src)
    as_split_dict(root, {**split_ids(src), "valid": np.array([20, 21, 40 + N])})
    line = _error_line(capsys, ["train", root, "--format", "ogb", "--epochs", "1", "--quiet"])
    assert "split_dict.pt" in line and "'valid'[2]" in line and "80" in line, line
