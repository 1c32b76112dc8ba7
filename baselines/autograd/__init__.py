"""A small reverse-mode autograd over NumPy (or CuPy) arrays, for the deep baselines.

``Tensor`` records each operation with a closure for its local chain rule (micrograd's design,
at array level); ``functional`` holds losses and composite operations, ``nn`` the modules and
``optim`` the optimisers. Arrays are float64 by default; ``set_backend("cupy")`` switches the
array module for tensors created afterwards.

Non-finite values: ``backward()`` raises ``FloatingPointError`` when the tensor it starts from
(the loss) holds NaN or inf, so a diverged run stops at the step where it diverged instead of
writing NaN into every parameter. The forward pass itself computes what NumPy computes.

Covariances for ``bures_wasserstein`` come as factors (S = A^T A), which covers empirical
covariances (A = centred samples / sqrt(n - 1)) and given ones (A = L^T, Cholesky S = L L^T);
``bures_wasserstein_diag`` is the closed form for diagonal Gaussians given standard deviations.
"""

from baselines.autograd._backend import get_array_module, get_backend, set_backend
from baselines.autograd._tensor import Tensor, no_grad
from baselines.autograd.functional import (
    bures_wasserstein,
    bures_wasserstein_diag,
    concat,
    cosine_similarity,
    cross_entropy,
    dropout,
    kl_div,
    log_softmax,
    logsumexp,
    mse,
    nuclear_norm,
    softmax,
)
from baselines.autograd.nn import (
    MLP,
    LeakyReLU,
    Linear,
    Module,
    Parameter,
    ReLU,
    Sequential,
    Sigmoid,
    Tanh,
    as_generator,
)
from baselines.autograd.optim import SGD, Adam

__all__ = [
    "MLP",
    "SGD",
    "Adam",
    "LeakyReLU",
    "Linear",
    "Module",
    "Parameter",
    "ReLU",
    "Sequential",
    "Sigmoid",
    "Tanh",
    "Tensor",
    "as_generator",
    "bures_wasserstein",
    "bures_wasserstein_diag",
    "concat",
    "cosine_similarity",
    "cross_entropy",
    "dropout",
    "get_array_module",
    "get_backend",
    "kl_div",
    "log_softmax",
    "logsumexp",
    "mse",
    "no_grad",
    "nuclear_norm",
    "set_backend",
    "softmax",
]
