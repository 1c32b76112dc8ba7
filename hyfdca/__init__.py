"""HyFDCA: hybrid federated dual coordinate ascent, and the toolkit around it."""

__version__ = "0.1.0.dev0"
