"""Bad arguments to run_hyfdca and the estimators: named errors, nothing silently changed
(docs/reliability.md, the table of bad inputs)."""

import numpy as np
import pytest
import scipy.sparse as sp

from feddata import partition as P
from hyfdca import HyFDCAClassifier, HyFDCASettings, run_hyfdca
from hyfdca._run import _accuracy


@pytest.fixture(scope="module")
def small(cancer):
    X, y = cancer
    return X[:120], y[:120]


def hinge():
    return HyFDCASettings.from_variant("auto", loss="hinge", lam=0.05)


@pytest.mark.parametrize("labels, shown", [(lambda y: (y + 1) / 2, "labels found: 0, 1"),
                                           (lambda y: 3 * y, "labels found: -3, 3")])
@pytest.mark.parametrize("engine", ["protocol", "batched"])
def test_labels_outside_plus_minus_one_are_refused(small, labels, shown, engine):
    X, y = small
    fed = P.hybrid_grid(X, labels(y), 2, 2)
    with pytest.raises(ValueError, match=f"loss 'hinge' needs labels -1 and \\+1.*{shown}.*"
                                         f"y = 2 y - 1"):
        run_hyfdca(fed, hinge(), max_rounds=2, engine=engine)


@pytest.mark.parametrize("arguments, message", [
    (dict(eval_every=0), "eval_every must be a whole number >= 1, got 0"),
    (dict(eval_every=2.5), "eval_every must be a whole number >= 1, got 2.5"),
    (dict(max_rounds=-1), "max_rounds must be a whole number >= 0, got -1"),
    (dict(max_rounds=True), "max_rounds must be a whole number >= 0, got True"),
    (dict(tol=-1.0), "tol must be None or a finite number >= 0, got -1.0"),
    (dict(rel_tol=float("nan")), "rel_tol must be None or a finite number >= 0, got nan"),
    (dict(checkpoint_every=0, checkpoint="x"), "checkpoint_every must be None or a whole"),
    (dict(checkpoint_every=5), "checkpoint_every and resume need a checkpoint folder"),
    (dict(frac_bits=20.5), "frac_bits must be a whole number >= 1, got 20.5"),
    (dict(seed=1.7), "seed must be a whole number >= 0, got 1.7"),
    (dict(seed=-1), "seed must be a whole number >= 0, got -1"),
    (dict(validation=(np.zeros((3, 5)), np.ones(3))),
     "the validation set has 5 features, the training data"),
    (dict(validation=(np.zeros((3, 30)), np.array([0.0, 1.0, 1.0]))),
     "run_hyfdca: the validation set: loss 'hinge' needs labels -1 and +1"),
    (dict(validation=(np.zeros((3, 30)), np.ones(4))),
     "the validation labels has 4 entries but X has 3 samples"),
])
def test_run_arguments_are_checked_before_any_work(small, arguments, message):
    fed = P.hybrid_grid(*small, 2, 2)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("+", r"\+")):
        run_hyfdca(fed, hinge(), **arguments)


def test_max_rounds_zero_certifies_the_start_and_returns(small):
    run, history = run_hyfdca(P.hybrid_grid(*small, 2, 2), hinge(), max_rounds=0)
    assert run.round == 0 and list(history.evaluations) == [0]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_score_of_zero_predicts_the_negative_class_as_scikit_learn_does(small):
    X, y = small
    X = sp.vstack([sp.csr_matrix(X), sp.csr_matrix((3, X.shape[1]))]).tocsr()  # empty rows
    y = np.concatenate([y, [1.0, 1.0, 1.0]])
    model = HyFDCAClassifier(lam=0.05, fit_intercept=False, max_rounds=20).fit(X, y)
    assert np.all(model.decision_function(X[-3:]) == 0)
    np.testing.assert_array_equal(model.predict(X[-3:]), [-1.0, -1.0, -1.0])
    w = np.ones(X.shape[1])
    assert _accuracy(w, (sp.csr_matrix((2, X.shape[1])), np.array([-1.0, -1.0]))) == 1.0
