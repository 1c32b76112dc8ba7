"""Optimisers that update parameter arrays in place from their ``.grad`` (PyTorch semantics).

Weight decay lambda is an L2 term added to the gradient, g <- g + lambda p, in both SGD and
Adam (Adam's decay is not decoupled as in AdamW). Parameters whose ``.grad`` is None are skipped.
"""

from baselines.autograd._backend import get_array_module


class Optimizer:
    """Holds the parameter list and the learning rate; ``zero_grad`` clears their gradients."""

    def __init__(self, params, lr, weight_decay):
        self.params = list(params)
        if not self.params:
            raise ValueError("optimizer got an empty parameter list")
        if lr <= 0 or weight_decay < 0:
            raise ValueError(f"need lr > 0 and weight_decay >= 0, got {lr} and {weight_decay}")
        self.lr, self.weight_decay = lr, weight_decay

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def _gradients(self):
        """(index, parameter, gradient with weight decay) for every parameter with a gradient."""
        for i, p in enumerate(self.params):
            if p.grad is not None:
                yield i, p, p.grad + self.weight_decay * p.data if self.weight_decay else p.grad


class SGD(Optimizer):
    """v <- mu v + g (v = g on the first step), p <- p - lr v; plain p <- p - lr g if mu = 0."""

    def __init__(self, params, lr, *, momentum=0.0, weight_decay=0.0):
        super().__init__(params, lr, weight_decay)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        self.momentum = momentum
        self._velocity = [None] * len(self.params)

    def step(self):
        for i, p, g in self._gradients():
            if self.momentum:
                v = self._velocity[i]
                g = self._velocity[i] = g if v is None else self.momentum * v + g
            p.data -= self.lr * g


class Adam(Optimizer):
    """Adam with bias correction, at step t (counted per parameter, over the steps it had a
    gradient):

        m <- b1 m + (1 - b1) g,   v <- b2 v + (1 - b2) g^2,
        p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
    """

    def __init__(self, params, lr=1e-3, *, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, lr, weight_decay)
        if not all(0.0 <= b < 1.0 for b in betas) or eps <= 0:
            raise ValueError(f"need betas in [0, 1) and eps > 0, got {betas} and {eps}")
        self.betas, self.eps = betas, eps
        xp = get_array_module()
        self._m = [xp.zeros_like(p.data) for p in self.params]
        self._v = [xp.zeros_like(p.data) for p in self.params]
        self._t = [0] * len(self.params)

    def step(self):
        xp = get_array_module()
        b1, b2 = self.betas
        for i, p, g in self._gradients():
            self._t[i] += 1
            t = self._t[i]
            self._m[i] = b1 * self._m[i] + (1.0 - b1) * g
            self._v[i] = b2 * self._v[i] + (1.0 - b2) * g * g
            m_hat = self._m[i] / (1.0 - b1**t)
            v_hat = self._v[i] / (1.0 - b2**t)
            p.data -= self.lr * m_hat / (xp.sqrt(v_hat) + self.eps)
