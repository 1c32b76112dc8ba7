"""A check the message-engine tests share: the server's w accounts for each client."""

import numpy as np


def assert_w_accounts_for_each_client(run):
    """w = (kappa/mu) c + sum_k v_k (no offset without prox), and the server's v_k of every
    client is (X^k)^T alpha^(k) / (mu N) at the client's own settled copy of alpha and the
    rounds' mu: no contribution counted twice or lost."""
    server = run.server
    s = server.round_settings
    total = s.kappa / s.round_lam * server.prox_centre
    for k, client in enumerate(run.clients):
        alpha = client.settled_alpha(server.client_step[k])
        np.testing.assert_allclose(server.contribution[k],
                                   client.X.T @ alpha / s.round_lam_n, atol=1e-9)
        total[server.feature_ids[k]] += server.contribution[k]
    np.testing.assert_allclose(server.w, total, atol=1e-9)
