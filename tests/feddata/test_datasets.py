"""Data set loaders: formats, label mapping, seeded generators, errors naming the problem."""

import gzip

import numpy as np
import pytest
import scipy.sparse as sp

from feddata import datasets as D


def _check_csr(X):
    assert sp.isspmatrix_csr(X) or isinstance(X, sp.csr_array)
    assert X.dtype == np.float64 and X.indices.dtype == np.int32 and X.indptr.dtype == np.int32


def test_bundled_defaults():
    cancer = D.load_breast_cancer()
    assert cancer.X.shape == (569, 30) and set(np.unique(cancer.y)) == {-1.0, 1.0}
    assert cancer.label_map == {"benign": -1.0, "malignant": 1.0}
    assert (cancer.y == 1).sum() == 212  # malignant cases in the Wisconsin data
    np.testing.assert_allclose(cancer.X.mean(axis=0), 0, atol=1e-12)
    digits = D.load_digits()
    assert digits.X.shape == (1797, 64) and digits.X.max() == 1.0
    np.testing.assert_array_equal(digits.classes, np.arange(10))


def test_row_normalisation():
    ds = D.load_digits(normalize=True)
    np.testing.assert_allclose(np.linalg.norm(ds.X, axis=1), 1.0)
    X = sp.csr_matrix(np.array([[3.0, 4.0], [0.0, 0.0]]))
    np.testing.assert_allclose(D.normalize_rows(X).toarray(), [[0.6, 0.8], [0, 0]])


def test_libsvm_round_trip_and_label_mapping(tmp_path):
    path = tmp_path / "toy.svm"
    path.write_text("2 1:0.5 3:1.5\n1 2:-1\n2 3:2\n")
    ds = D.load_libsvm(path, n_features=4)
    _check_csr(ds.X)
    np.testing.assert_array_equal(ds.X.toarray(),
                                  [[0.5, 0, 1.5, 0], [0, -1, 0, 0], [0, 0, 2, 0]])
    np.testing.assert_array_equal(ds.y, [1, -1, 1])
    assert ds.label_map == {1.0: -1.0, 2.0: 1.0}


@pytest.mark.parametrize("content, message", [
    ("1 1:0.5\n1 2:x\n", "line 2: token '2:x' is not index:value"),
    ("1 1:0.5\n+1 3:1\nabc 1:1\n", "line 3: label 'abc' is not a number"),
    ("1 1:0.5\n1 9:1\n", "line 2: feature index 9 exceeds n_features=4"),
    ("1 1:nan\n", "line 1: feature 1 has non-finite value nan"),
    ("1 1:0.5\n1 0:1 2:1\n", "line 2: feature indices must be 1-based, ascending and "
                              "unique ('0:1')"),
    ("1 1:0.5 1:2\n", "line 1: feature indices must be 1-based, ascending and unique "
                      "('1:2')"),
])
def test_malformed_libsvm_names_file_and_line(tmp_path, content, message):
    path = tmp_path / "bad.svm"
    path.write_text(content)
    with pytest.raises(ValueError) as err:
        D.load_libsvm(path, n_features=4)
    assert str(path) in str(err.value) and message in str(err.value)


@pytest.mark.parametrize("index", [2**31, 10**12])
def test_a_feature_index_beyond_int32_names_file_and_line(tmp_path, index):
    path = tmp_path / "wide.svm"
    path.write_text(f"1 1:1 3:2\n-1 2:1 {index}:1\n")
    with pytest.raises(ValueError, match=f"{path}, line 2: feature index {index} is beyond "
                                         f"2147483647"):
        D.load_libsvm(path)


@pytest.mark.parametrize("opener", ["gzip", "bz2"])
def test_a_compressed_libsvm_file_is_read_whatever_its_name(tmp_path, opener):
    import bz2
    path = tmp_path / "rows"      # no .gz or .bz2: recognised by its magic bytes
    path.write_bytes((gzip if opener == "gzip" else bz2).compress(b"2 1:0.5 3:1.5\n1 2:-1\n"))
    np.testing.assert_array_equal(D.load_libsvm(path).X.toarray(), [[0.5, 0, 1.5], [0, -1, 0]])


@pytest.mark.parametrize("opener", ["gzip", "bz2"])
def test_a_truncated_compressed_libsvm_file_is_named(tmp_path, opener):
    import bz2
    path = tmp_path / f"rows.svm.{'gz' if opener == 'gzip' else 'bz2'}"
    data = b"".join(b"%d 1:1 2:0.5 7:1\n" % (1 if i % 2 else -1) for i in range(5000))
    packed = (gzip if opener == "gzip" else bz2).compress(data)
    path.write_bytes(packed[:len(packed) // 2])
    with pytest.raises(ValueError, match=f"cannot read LIBSVM file {path}: the compressed "
                                         f"data is truncated or corrupt"):
        D.load_libsvm(path)


def test_single_class_is_refused(tmp_path):
    path = tmp_path / "one.svm"
    path.write_text("1 1:0.5\n1 2:1\n")
    with pytest.raises(ValueError, match="needs at least 2 classes, found only"):
        D.load_libsvm(path)


def test_make_dataset_errors():
    with pytest.raises(ValueError, match="contains 1 NaN"):
        D.make_dataset(np.array([[1.0, np.nan], [0, 1]]), [0, 1], name="t", source="t")
    with pytest.raises(ValueError, match=r"y has shape \(3,\) but X has 2 rows"):
        D.make_dataset(np.eye(2), [0, 1, 0], name="t", source="t")
    # a misspelled task made regression targets into class labels
    with pytest.raises(ValueError, match="task must be one of .* got 'regresion'"):
        D.make_dataset(np.eye(3), [0.5, 2.0, 7.0], name="t", source="t", task="regresion")
    with pytest.raises(ValueError, match="t: no samples"):
        D.make_dataset(np.zeros((0, 2)), np.zeros(0), name="t", source="t", task="regression")


def test_a_text_file_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "sms.txt"
    path.write_bytes(b"ham\thello\nspam\t\xff\xfe win\n")
    with pytest.raises(ValueError, match="sms.txt is not UTF-8 text"):
        D.load_sms_spam(path)


def test_idx_files_the_loader_would_misread_are_refused(tmp_path):
    """Pixels of another type were divided by 255 all the same (float32 in [0, 1] came
    out 255 times too small), fractional labels were truncated, and train and test
    images of other shapes failed in NumPy's words."""
    def write(stem, array, code=0x08, dtype=np.uint8):
        header = bytes([0, 0, code, array.ndim]) + np.array(array.shape, ">u4").tobytes()
        (tmp_path / stem).write_bytes(header + np.asarray(array, dtype).tobytes())

    write("train-images-idx3-ubyte", np.full((2, 2, 2), 0.5), 0x0D, ">f4")
    write("train-labels-idx1-ubyte", np.array([0, 1]))
    with pytest.raises(ValueError, match="holds float32 pixels"):
        D.load_idx_images(tmp_path, subset="train")
    write("train-images-idx3-ubyte", np.ones((2, 2, 2)))
    write("train-labels-idx1-ubyte", np.array([0.0, 1.5]), 0x0D, ">f4")
    with pytest.raises(ValueError, match="labels that are not whole numbers"):
        D.load_idx_images(tmp_path, subset="train")
    write("train-labels-idx1-ubyte", np.array([0, 1]))
    write("t10k-images-idx3-ubyte", np.ones((1, 3, 3)))
    write("t10k-labels-idx1-ubyte", np.array([1]))
    with pytest.raises(ValueError, match=r"holds images of shape \(3, 3\), the training "
                                         r"images \(2, 2\)"):
        D.load_idx_images(tmp_path, subset="all")


def test_federated_problem_checks_its_own_arguments():
    from feddata.problems import federated_problem

    for size in (5, 1.0, 0.0):   # 5 was read as a count of samples
        with pytest.raises(ValueError, match="validation_size is the validation set's share"):
            federated_problem("breast_cancer", "2x2", validation_size=size)
    with pytest.raises(ValueError, match="positive_class must be a whole number"):
        federated_problem("digits", "2x2", positive_class=1.5)


def _write_idx(path, array, compress):
    header = bytes([0, 0, 0x08, array.ndim]) + np.array(array.shape, ">u4").tobytes()
    raw = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(raw) if compress else raw)


@pytest.mark.parametrize("compress", [False, True])
def test_idx_images(tmp_path, compress):
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 6), ("t10k", 3)):
        suffix = ".gz" if compress else ""
        _write_idx(tmp_path / f"{prefix}-images-idx3-ubyte{suffix}",
                   rng.integers(0, 256, (n, 4, 4)), compress)
        _write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte{suffix}", np.arange(n) % 3, compress)
    ds = D.load_idx_images(tmp_path, subset="all")
    _check_csr(ds.X)
    assert ds.X.shape == (9, 16) and ds.image_shape == (4, 4) and ds.X.max() <= 1.0
    np.testing.assert_array_equal(ds.y, [0, 1, 2, 0, 1, 2, 0, 1, 2])
    assert D.load_idx_images(tmp_path, subset="test").X.shape == (3, 16)


def test_a_truncated_gzip_idx_file_is_named(tmp_path):
    path = tmp_path / "x-images-idx3-ubyte.gz"
    _write_idx(path, np.arange(4000).reshape(40, 10, 10) % 256, True)
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(ValueError, match=f"cannot read {path}: the compressed data is "
                                         f"truncated or corrupt"):
        D.read_idx(path)


def test_truncated_idx_names_the_file(tmp_path):
    path = tmp_path / "x-images-idx3-ubyte"
    _write_idx(path, np.zeros((2, 3, 3)), False)
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(ValueError, match=f"{path}: IDX header promises shape"):
        D.read_idx(path)


def test_sms_parser_errors_name_the_line(tmp_path):
    path = tmp_path / "sms"
    path.write_text("Label\tSMS\nham\thello there\nspam win now\n")
    with pytest.raises(ValueError, match=f"{path}, line 3: expected 'ham' or 'spam'"):
        D.load_sms_spam(path)


def test_sms_from_a_small_file(tmp_path):
    path = tmp_path / "sms"
    path.write_text("Label\tSMS\nham\thello there friend\nspam\twin a free prize now\n"
                    "ham\tsee you there friend\nspam\tfree prize call now\n")
    ds = D.load_sms_spam(path, min_df=1)
    _check_csr(ds.X)
    np.testing.assert_array_equal(ds.y, [-1, 1, -1, 1])
    np.testing.assert_allclose(sp.linalg.norm(ds.X, axis=1), 1.0)


@pytest.mark.needs_shared_data
def test_shared_data_sets(shared_data):
    a9a = D.load_a9a(shared_data)
    _check_csr(a9a.X)
    assert a9a.X.shape == (48_842, 123) and a9a.X.nnz == 677_323
    sms = D.load_sms_spam(data_home=shared_data)
    assert sms.X.shape[0] == 5574 and (sms.y == 1).sum() == 747


def test_missing_file_lists_where_it_looked(tmp_path):
    with pytest.raises(FileNotFoundError, match="none of .*news20.binary.* found in"):
        D.load_libsvm_named("news20.binary", data_home=tmp_path)


@pytest.mark.parametrize("make, kwargs, shape", [
    (D.make_news20_like, dict(n_samples=400, n_features=50_000, density=2e-3), (400, 50_000)),
    (D.make_covtype_like, dict(n_samples=3000), (3000, 54)),
    (D.make_mnist_like, dict(n_samples=500), (500, 784)),
])
def test_synthetic_generators_are_seeded(make, kwargs, shape):
    a, b, c = make(seed=1, **kwargs), make(seed=1, **kwargs), make(seed=2, **kwargs)
    assert a.X.shape == shape
    dense = lambda X: X.toarray() if sp.issparse(X) else X
    assert np.array_equal(dense(a.X), dense(b.X)) and np.array_equal(a.y, b.y)
    assert not np.array_equal(dense(a.X), dense(c.X))


def test_news20_like_shape_statistics():
    ds = D.make_news20_like(n_samples=2000, n_features=200_000)
    _check_csr(ds.X)
    density = ds.X.nnz / (2000 * 200_000)
    assert 2e-4 < density < 4e-4                       # about 0.03% non-zero
    np.testing.assert_allclose(sp.linalg.norm(ds.X, axis=1), 1.0)
    assert abs(ds.y.mean()) < 0.1                      # balanced


def test_covtype_like_layout():
    ds = D.make_covtype_like(n_samples=2000)
    assert isinstance(ds.X, np.ndarray)
    np.testing.assert_array_equal(ds.X[:, 10:14].sum(axis=1), 1)   # one wilderness area
    np.testing.assert_array_equal(ds.X[:, 14:].sum(axis=1), 1)     # one soil type
    assert ds.X[:, :10].min() >= 0 and ds.X[:, :10].max() <= 1


def test_mnist_like_is_sparse_images():
    ds = D.make_mnist_like(n_samples=1000)
    assert ds.image_shape == (28, 28) and len(ds.classes) == 10
    assert 0.1 < ds.X.nnz / (1000 * 784) < 0.35 and ds.X.max() <= 1.0


def test_catalog_lists_every_loader_and_where_it_comes_from():
    assert {"a9a", "sms-spam", "fashion-mnist", "breast_cancer", "digits", "news20-like",
            "covtype-like", "mnist-like", "news20.binary", "covtype.binary",
            "mnist"} <= set(D.dataset_names())
    assert D.locate_dataset("breast_cancer") == "scikit-learn (bundled)"
    assert D.load_dataset("digits").X.shape == (1797, 64)
    with pytest.raises(ValueError, match="unknown data set 'nope'"):
        D.load_dataset("nope")
