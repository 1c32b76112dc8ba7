"""Modules: named parameters, state dicts, ``Linear``, activations, ``Sequential`` and ``MLP``.

Every random draw comes from a ``numpy.random.Generator`` (passed in, or built from an int
seed) and happens on the CPU, so the same seed gives the same bits under either backend.
"""

import numpy as np

from baselines.autograd._backend import get_array_module
from baselines.autograd._tensor import Tensor


def as_generator(rng):
    """``rng`` itself if it is a Generator, else ``numpy.random.default_rng(rng)`` (int seed;
    ``None`` gives fresh OS entropy, i.e. a non-reproducible run)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, (int, np.integer)):
        return np.random.default_rng(rng)
    raise TypeError(f"rng must be a numpy.random.Generator, an int seed or None, not {rng!r}")


class Parameter(Tensor):
    """A leaf tensor that requires grad and that ``Module`` finds by attribute name."""

    def __init__(self, data, dtype=None):
        super().__init__(data, requires_grad=True, dtype=dtype)


class Module:
    """Base class: parameters are the ``Parameter`` attributes, found recursively through
    ``Module`` attributes and lists of modules, and named by dotted paths (``layers.0.weight``)."""

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def named_parameters(self, prefix=""):
        """Yield (dotted name, Parameter) pairs in attribute order."""
        for name, value in vars(self).items():
            items = enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)]
            for i, item in items:
                full = prefix + name + ("" if i is None else f".{i}")
                if isinstance(item, Parameter):
                    yield full, item
                elif isinstance(item, Module):
                    yield from item.named_parameters(full + ".")

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def zero_grad(self):
        for p in self.parameters():
            p.grad = None

    def state_dict(self):
        """{dotted name: copy of the parameter array}."""
        return {name: p.data.copy() for name, p in self.named_parameters()}

    def load_state_dict(self, state):
        """Copy arrays into the parameters; names and shapes must match exactly."""
        own = dict(self.named_parameters())
        missing, unexpected = own.keys() - state.keys(), state.keys() - own.keys()
        if missing or unexpected:
            raise KeyError(f"state dict mismatch: missing {sorted(missing)}, "
                           f"unexpected {sorted(unexpected)}")
        xp = get_array_module()
        for name, p in own.items():
            value = xp.array(state[name], dtype=p.dtype)
            if value.shape != p.shape:
                raise ValueError(f"{name}: parameter has shape {p.shape}, state has {value.shape}")
            p.data = value


class Linear(Module):
    """y = x W + b with W of shape (n_in, n_out), drawn uniform in [-bound, bound]:
    He, bound = sqrt(6 / n_in) (for ReLU-like activations), or Glorot,
    bound = sqrt(6 / (n_in + n_out)) (for tanh, sigmoid or no activation); b = 0."""

    def __init__(self, n_in, n_out, *, bias=True, init="he", rng=None):
        if init == "he":
            bound = np.sqrt(6.0 / n_in)
        elif init == "glorot":
            bound = np.sqrt(6.0 / (n_in + n_out))
        else:
            raise ValueError(f"init must be 'he' or 'glorot', got {init!r}")
        self.weight = Parameter(as_generator(rng).uniform(-bound, bound, size=(n_in, n_out)))
        self.bias = Parameter(np.zeros(n_out)) if bias else None

    def forward(self, x):
        y = x @ self.weight
        return y if self.bias is None else y + self.bias


class ReLU(Module):
    def forward(self, x):
        return x.relu()


class LeakyReLU(Module):
    def __init__(self, slope=0.01):
        self.slope = slope

    def forward(self, x):
        return x.leaky_relu(self.slope)


class Tanh(Module):
    def forward(self, x):
        return x.tanh()


class Sigmoid(Module):
    def forward(self, x):
        return x.sigmoid()


ACTIVATIONS = {"relu": ReLU, "leaky_relu": LeakyReLU, "tanh": Tanh, "sigmoid": Sigmoid}


class Sequential(Module):
    """Apply ``layers`` in order; parameters are named ``layers.<i>.<name>``."""

    def __init__(self, *layers):
        self.layers = list(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class MLP(Sequential):
    """Linear layers of ``sizes`` = [n_in, hidden..., n_out], ``activation`` between them and
    none after the last. Init is He for relu/leaky_relu, Glorot otherwise, unless ``init``
    says; all layers draw from one generator, in order."""

    def __init__(self, sizes, activation="relu", *, init=None, rng=None):
        if len(sizes) < 2:
            raise ValueError(f"an MLP needs at least [n_in, n_out], got sizes={sizes}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        init = init or ("he" if activation in ("relu", "leaky_relu") else "glorot")
        rng = as_generator(rng)
        layers = []
        for n_in, n_out in zip(sizes[:-1], sizes[1:]):
            layers += [Linear(n_in, n_out, init=init, rng=rng), ACTIVATIONS[activation]()]
        super().__init__(*layers[:-1])
