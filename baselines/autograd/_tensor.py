"""The Tensor: an array, its gradient, and the closure that sends a gradient back to its parents.

micrograd's ``Value`` widened to arrays. Each operation returns a new node whose ``_backward(g)``
maps the gradient ``g`` of the node to one gradient per parent (``None`` for no gradient).
``backward`` walks the graph in reverse topological order (found iteratively, so long training
graphs do not hit the recursion limit), sums the gradients arriving at a node, and reduces the
axes that broadcasting added (``_unbroadcast``) in one place. Only leaves keep ``.grad``.
"""

import contextlib

import numpy as np

from baselines.autograd._backend import add_at, get_array_module, to_numpy

_GRAD = {"enabled": True}


@contextlib.contextmanager
def no_grad():
    """Within this block, operations record no graph (results have ``requires_grad=False``)."""
    previous = _GRAD["enabled"]
    _GRAD["enabled"] = False
    try:
        yield
    finally:
        _GRAD["enabled"] = previous


def _unbroadcast(grad, shape):
    """Sum ``grad`` over the axes that broadcasting added or stretched to go from ``shape``."""
    if grad.shape == shape:
        return grad
    grad = grad.sum(axis=tuple(range(grad.ndim - len(shape))))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=stretched, keepdims=True)


def _node(data, parents, backward, op):
    """A result tensor; it keeps its parents and closure only when a gradient can flow."""
    out = Tensor(data, dtype=data.dtype)
    if _GRAD["enabled"] and any(p.requires_grad for p in parents):
        out.requires_grad = True
        out._prev, out._backward, out._op = parents, backward, op
    return out


class Tensor:
    """An n-d array (float64 unless ``dtype`` says otherwise) with reverse-mode gradients."""

    __array_ufunc__ = None  # ndarray (op) Tensor defers to Tensor's reflected operator

    def __init__(self, data, requires_grad=False, dtype=None):
        if isinstance(data, Tensor):
            raise TypeError("Tensor(Tensor): use t.detach() or Tensor(t.data)")
        self.data = get_array_module().asarray(data, dtype=np.float64 if dtype is None else dtype)
        self.grad = None
        self.requires_grad = requires_grad
        self._prev, self._backward, self._op = (), None, ""

    def _wrap(self, other):
        return other if isinstance(other, Tensor) else Tensor(other, dtype=self.data.dtype)

    # --- properties -----------------------------------------------------------------------
    shape = property(lambda self: self.data.shape)
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: self.data.size)
    dtype = property(lambda self: self.data.dtype)
    T = property(lambda self: self.transpose())

    def __len__(self):
        return len(self.data)

    def __repr__(self):
        graph = f", op={self._op!r}" if self._op else ""
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"Tensor({self.data!r}{grad}{graph})"

    def item(self):
        return self.data.item()

    def numpy(self):
        """The data as a NumPy array (copied off the GPU under CuPy)."""
        return to_numpy(self.data)

    def detach(self):
        """The same data (shared, not copied) as a new leaf that does not require grad."""
        return Tensor(self.data, dtype=self.data.dtype)

    # --- elementwise arithmetic (broadcasting) ---------------------------------------------
    def __add__(self, other):
        other = self._wrap(other)
        return _node(self.data + other.data, (self, other), lambda g: (g, g), "+")

    def __mul__(self, other):
        other = self._wrap(other)
        a, b = self.data, other.data
        return _node(a * b, (self, other), lambda g: (g * b, g * a), "*")

    def __pow__(self, p):
        """x**p for a scalar p; d/dx = p x**(p-1)."""
        if isinstance(p, Tensor) or np.ndim(p) != 0:
            raise TypeError(f"Tensor ** {type(p).__name__}: only a scalar exponent is supported")
        x = self.data
        return _node(x**p, (self,), lambda g: (g * p * x ** (p - 1),), f"**{p}")

    def __neg__(self):
        return _node(-self.data, (self,), lambda g: (-g,), "neg")

    def __sub__(self, other):  # self - other
        return self + (-self._wrap(other))

    def __truediv__(self, other):  # self / other
        return self * self._wrap(other) ** -1

    def __radd__(self, other):  # other + self
        return self + other

    def __rsub__(self, other):  # other - self
        return self._wrap(other) - self

    def __rmul__(self, other):  # other * self
        return self * other

    def __rtruediv__(self, other):  # other / self
        return self._wrap(other) * self**-1

    # --- linear algebra ---------------------------------------------------------------------
    def __matmul__(self, other):
        """A @ B over the last two axes (leading axes broadcast); 1-d operands as in NumPy."""
        other = self._wrap(other)
        if self.ndim == 0 or other.ndim == 0:
            raise ValueError(f"matmul of shapes {self.shape} and {other.shape}: no scalars")
        if self.ndim == 1 or other.ndim == 1:  # as a row (left) or column (right), then drop it
            a = self.reshape(1, -1) if self.ndim == 1 else self
            out = a @ (other.reshape(-1, 1) if other.ndim == 1 else other)
            if self.ndim == other.ndim == 1:  # the inner product: a scalar, as in NumPy
                return out.reshape(())
            shape = out.shape[:-1] if other.ndim == 1 else out.shape
            return out.reshape(shape[:-2] + shape[-1:] if self.ndim == 1 else shape)
        if self.shape[-1] != other.shape[-2]:
            raise ValueError(
                f"matmul shape mismatch: {self.shape} @ {other.shape} "
                f"({self.shape[-1]} != {other.shape[-2]})"
            )
        a, b = self.data, other.data
        xp = get_array_module()

        def _backward(g):  # dA = G B^T, dB = A^T G
            return g @ xp.swapaxes(b, -1, -2), xp.swapaxes(a, -1, -2) @ g

        return _node(a @ b, (self, other), _backward, "@")

    def __rmatmul__(self, other):  # other @ self
        return self._wrap(other) @ self

    # --- reductions and shape ---------------------------------------------------------------
    def sum(self, axis=None, keepdims=False):
        """Sum over ``axis``; the gradient is copied back along the summed axes."""
        xp, shape = get_array_module(), self.shape

        def _backward(g):
            if axis is not None and not keepdims:
                g = xp.expand_dims(g, axis)
            return (xp.broadcast_to(g, shape),)

        return _node(self.data.sum(axis=axis, keepdims=keepdims), (self,), _backward, "sum")

    def mean(self, axis=None, keepdims=False):
        """Sum divided by the number of summed entries."""
        total = self.sum(axis=axis, keepdims=keepdims)
        return total * (total.size / self.size)

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        old = self.shape
        return _node(self.data.reshape(shape), (self,), lambda g: (g.reshape(old),), "reshape")

    def transpose(self, *axes):
        """Permute axes (reverse them when none are given); the gradient takes the inverse."""
        axes = tuple(axes[0]) if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        axes = tuple(int(a) % self.ndim for a in axes) or tuple(reversed(range(self.ndim)))
        inverse = tuple(int(i) for i in np.argsort(axes))
        return _node(
            self.data.transpose(axes), (self,), lambda g: (g.transpose(inverse),), "transpose"
        )

    def __getitem__(self, index):
        """Basic or integer-array indexing; repeated indices accumulate gradient (add.at)."""
        if isinstance(index, Tensor) or (
            isinstance(index, tuple) and any(isinstance(i, Tensor) for i in index)
        ):
            raise TypeError("index a Tensor with ints, slices or integer arrays, not a Tensor")
        xp = get_array_module()
        x = self.data

        def _backward(g):
            full = xp.zeros_like(x)
            add_at(full, index, g)
            return (full,)

        return _node(x[index], (self,), _backward, "getitem")

    # --- elementwise functions ----------------------------------------------------------------
    def exp(self):
        out = get_array_module().exp(self.data)
        return _node(out, (self,), lambda g: (g * out,), "exp")

    def log(self):
        x = self.data
        return _node(get_array_module().log(x), (self,), lambda g: (g / x,), "log")

    def sqrt(self):
        return self**0.5

    def tanh(self):
        t = get_array_module().tanh(self.data)
        return _node(t, (self,), lambda g: (g * (1.0 - t * t),), "tanh")

    def sigmoid(self):
        """s = 1/(1+e^-x), computed as (1 + tanh(x/2))/2 (no overflow); ds/dx = s(1-s)."""
        s = 0.5 * (1.0 + get_array_module().tanh(0.5 * self.data))
        return _node(s, (self,), lambda g: (g * s * (1.0 - s),), "sigmoid")

    def relu(self):
        x = self.data
        return _node(x * (x > 0), (self,), lambda g: (g * (x > 0),), "relu")

    def leaky_relu(self, slope=0.01):
        """x for x > 0, slope*x otherwise."""
        x = self.data
        factor = get_array_module().where(x > 0, 1.0, slope).astype(x.dtype)
        return _node(x * factor, (self,), lambda g: (g * factor,), "leaky_relu")

    # --- backward -----------------------------------------------------------------------------
    def _topological_order(self):
        """Nodes reachable from self, each after all of its parents (iterative DFS)."""
        order, seen, stack = [], set(), [(self, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
            elif id(node) not in seen:
                seen.add(id(node))
                stack.append((node, True))
                stack.extend((p, False) for p in node._prev if id(p) not in seen)
        return order

    def backward(self, grad=None):
        """Accumulate d(self)/d(leaf), contracted with ``grad``, into every leaf's ``.grad``.

        ``grad`` is the upstream gradient dL/d(self) for some outer L (same shape as self); it
        may be left out only when self is a scalar (then it is 1). A non-finite self raises
        ``FloatingPointError`` instead of spreading NaN or inf into every gradient.
        """
        xp = get_array_module()
        if not self.requires_grad:
            raise RuntimeError(
                "backward() on a tensor that does not require grad: no leaf with "
                "requires_grad=True feeds it, or it was computed under no_grad()"
            )
        if grad is None:
            if self.size != 1:
                raise ValueError(
                    f"backward() without grad= needs a scalar, but this tensor has shape "
                    f"{self.shape}; pass the upstream gradient dL/d(self) of that shape"
                )
            grad = xp.ones_like(self.data)
        else:
            grad = xp.asarray(grad.data if isinstance(grad, Tensor) else grad, self.data.dtype)
            if grad.shape != self.shape:
                raise ValueError(f"grad has shape {grad.shape}, tensor has shape {self.shape}")
        if not bool(xp.isfinite(self.data).all()):
            raise FloatingPointError(
                f"backward() from a non-finite value (NaN or inf in a tensor of shape "
                f"{self.shape}, e.g. a diverged loss)"
            )
        grads = {id(self): grad}
        for node in reversed(self._topological_order()):
            g = grads.pop(id(node), None)
            if g is None:
                continue
            if node._backward is None:  # a leaf
                node.grad = g.copy() if node.grad is None else node.grad + g
                continue
            for parent, parent_grad in zip(node._prev, node._backward(g)):
                if parent.requires_grad and parent_grad is not None:
                    parent_grad = _unbroadcast(parent_grad, parent.shape)
                    key = id(parent)
                    grads[key] = parent_grad if key not in grads else grads[key] + parent_grad
