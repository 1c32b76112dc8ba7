"""A catalogued data set made into a federated training problem with a validation set."""

import numpy as np
import scipy.sparse as sp

from feddata.datasets import load_dataset
from feddata.partition import partition_from_spec


def federated_problem(name, partition, *, seed=0, positive_class=0, validation_size=0.25):
    """(FederatedDataset of the training part, validation (X, y), positive class or None).

    Multi-class data become class ``positive_class`` (an index into the data set's
    classes) against the rest. A stratified split keeps ``validation_size`` of the samples
    for validation; the rest is split by the partition spec (``partition_from_spec``).
    Features fitted on the data (TF-IDF, breast_cancer's z-scores: ``Dataset.refit``) are
    fitted on the training part only, so the validation set shapes none of them.
    The quadrant scheme appends a bias feature to the federated blocks: the validation
    matrix gets the same column."""
    # imported on use, not with the module (docs/architecture.md)
    from sklearn.model_selection import train_test_split

    if not (isinstance(validation_size, float) and 0 < validation_size < 1):
        raise ValueError(f"validation_size is the validation set's share of the samples, a "
                         f"number in (0, 1); got {validation_size!r}")
    if isinstance(positive_class, bool) or not isinstance(positive_class, (int, np.integer)):
        raise ValueError(f"positive_class must be a whole number (a class index), got "
                         f"{positive_class!r}")
    ds = load_dataset(name)
    y, positive = ds.y, None
    if ds.classes is not None and len(ds.classes) > 2:
        if not 0 <= positive_class < len(ds.classes):
            raise ValueError(f"positive_class must index one of the {len(ds.classes)} "
                             f"classes of {name!r} (0 to {len(ds.classes) - 1}), got "
                             f"{positive_class}")
        positive = ds.classes[positive_class]
        y = np.where(ds.y == positive, 1.0, -1.0)
    train, held_out = train_test_split(np.arange(ds.n_samples), test_size=validation_size,
                                       random_state=seed, stratify=y)
    X = ds.X if ds.refit is None else ds.refit(train)
    X_tr, X_val, y_tr, y_val = X[train], X[held_out], y[train], y[held_out]
    fed = partition_from_spec(X_tr, y_tr, partition, seed=seed, image_shape=ds.image_shape)
    if fed.n_features > X_val.shape[1]:  # the quadrant scheme's bias feature
        X_val = sp.hstack([sp.csr_matrix(X_val), np.full((X_val.shape[0], 1), 10.0)],
                          format="csr")
    return fed, (X_val, y_val), positive
