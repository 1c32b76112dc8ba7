"""Partitions named by a short text, as the command line and the estimators take them."""

import re

from feddata.partition._builders import dealt_features, hybrid_grid, mnist_quadrants

_GRID = re.compile(r"^(\d+)x(\d+)$")
SPEC_HELP = ("'PxQ' (P sample groups x Q feature groups), 'horizontal:K', 'vertical:K', "
             "'dealt:PxQ' (the paper's News20/Covtype scheme), 'quadrants:K' (the paper's "
             "MNIST scheme, bias feature 10 appended)")


def spec_key(spec):
    """``spec`` without spaces and with its numbers as plain integers: two texts that
    :func:`partition_from_spec` reads as the same partition ('2x2', ' 2x2', '02x2') have
    the same key."""
    return re.sub(r"\d+", lambda digits: str(int(digits[0])), "".join(str(spec).split()))


def _grid(text, spec):
    match = _GRID.match(text.strip())
    if not match:
        raise ValueError(f"unknown partition {spec!r}; use {SPEC_HELP}")
    return int(match[1]), int(match[2])


def partition_from_spec(X, y, spec, *, seed=0, image_shape=None, cap=False):
    """FederatedDataset from pooled (X, y) by ``spec`` (see SPEC_HELP).

    With ``cap``, grid sizes are capped at the number of samples and features (the
    estimators do this so that tiny inputs still train).
    """
    kind, _, arg = str(spec).partition(":")
    if not arg:
        kind, arg = "grid", kind
    if kind in ("quadrants", "horizontal", "vertical") and not arg.strip().isdigit():
        raise ValueError(f"partition {spec!r}: the number of clients after '{kind}:' must be a "
                         f"whole number; use {SPEC_HELP}")
    if kind == "quadrants":
        return mnist_quadrants(X, y, int(arg), image_shape=image_shape or (28, 28), seed=seed)
    if kind in ("horizontal", "vertical"):
        p, q = (int(arg), 1) if kind == "horizontal" else (1, int(arg))
    elif kind in ("grid", "dealt"):
        p, q = _grid(arg, spec)
    else:
        raise ValueError(f"unknown partition {spec!r}; use {SPEC_HELP}")
    if cap:
        p, q = min(p, X.shape[0]), min(q, X.shape[1])
    if kind == "dealt":
        return dealt_features(X, y, p, q, seed=seed)
    return hybrid_grid(X, y, p, q)
