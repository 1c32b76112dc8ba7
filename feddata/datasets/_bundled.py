"""scikit-learn's bundled data sets: the embedded defaults (no download)."""

from feddata.datasets._base import make_dataset


def load_breast_cancer(*, standardize=True, normalize=False):
    """Wisconsin breast cancer (569 x 30, dense): classes 'benign' (-1), 'malignant' (+1).

    Features are z-scored by default: their raw scales differ by four orders of magnitude.
    """
    # imported on use, not with the module (docs/architecture.md)
    import sklearn.datasets as skd
    from sklearn.preprocessing import StandardScaler

    raw = skd.load_breast_cancer()
    X = StandardScaler().fit_transform(raw.data) if standardize else raw.data
    return make_dataset(X, raw.target_names[raw.target], name="breast_cancer",
                        source="scikit-learn (bundled)", normalize=normalize)


def load_digits(*, normalize=False):
    """Handwritten digits (1,797 x 64, dense, 10 classes), pixels scaled to [0, 1]."""
    # imported on use, not with the module (docs/architecture.md)
    import sklearn.datasets as skd

    raw = skd.load_digits()
    return make_dataset(raw.data / 16.0, raw.target, name="digits",
                        source="scikit-learn (bundled)", normalize=normalize,
                        image_shape=(8, 8))
