"""Homomorphic encryption backends for HyFDCA (Paillier through phe, packed Paillier,
additive masking). Empty until the crypto issue lands; depends only on phe and NumPy."""
