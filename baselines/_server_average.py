"""Numba kernels: the server's weighted entrywise average of FedAvg and HyFEM-linear,

    w_j = sum_k c_k w_k[j] / sum_k c_k   over the present clients k holding feature j,

features no present client holds keeping their value. The same additions in the same
order as the NumPy form ``total[J_k] += c_k * w_k; weight[J_k] += c_k``, then
``w[covered] = total[covered] / weight[covered]`` (the same bits, tested), without its
temporaries: a round over news20-like's 1.35M features spent most of its time in them.
"""

from numba import njit


@njit(cache=True)
def add_weighted(total, weight, feature_ids, w_k, c_k):
    """total[J_k] += c_k w_k and weight[J_k] += c_k (J_k = ``feature_ids``: distinct and in
    range, as a FederatedDataset's are; w_k float64, as ``local_sgd`` returns: for these
    the NumPy form's bits; no bounds are checked)."""
    for p in range(feature_ids.shape[0]):
        j = feature_ids[p]
        total[j] += c_k * w_k[p]
        weight[j] += c_k


@njit(cache=True)
def divide_covered(w, total, weight):
    """w_j = total_j / weight_j wherever weight_j > 0 (in place)."""
    for j in range(w.shape[0]):
        if weight[j] > 0.0:
            w[j] = total[j] / weight[j]
