"""scikit-learn's bundled data sets: the embedded defaults (no download)."""

import numpy as np

from feddata.datasets._base import make_dataset


def load_breast_cancer(*, standardize=True, normalize=False):
    """Wisconsin breast cancer (569 x 30, dense): classes 'benign' (-1), 'malignant' (+1).

    Features are z-scored by default: their raw scales differ by four orders of magnitude.
    X's means and standard deviations are those of every sample; the Dataset's
    ``refit(rows)`` takes them from those samples only, as ``federated_problem`` does
    with its training part.
    """
    # imported on use, not with the module (docs/architecture.md)
    import sklearn.datasets as skd

    raw = skd.load_breast_cancer()
    z_scored_by = _ZScoredBy(raw.data)
    every_sample = np.arange(raw.data.shape[0])
    return make_dataset(z_scored_by(every_sample) if standardize else raw.data,
                        raw.target_names[raw.target], name="breast_cancer",
                        source="scikit-learn (bundled)", normalize=normalize,
                        refit=z_scored_by if standardize else None)


class _ZScoredBy:
    """rows -> every sample z-scored with the means and standard deviations of ``rows``."""

    def __init__(self, data):
        self.data = data

    def __call__(self, rows):
        # imported on use, not with the module (docs/architecture.md)
        from sklearn.preprocessing import StandardScaler

        return StandardScaler().fit(self.data[rows]).transform(self.data)


def load_digits(*, normalize=False):
    """Handwritten digits (1,797 x 64, dense, 10 classes), pixels scaled to [0, 1]."""
    # imported on use, not with the module (docs/architecture.md)
    import sklearn.datasets as skd

    raw = skd.load_digits()
    return make_dataset(raw.data / 16.0, raw.target, name="digits",
                        source="scikit-learn (bundled)", normalize=normalize,
                        image_shape=(8, 8))
