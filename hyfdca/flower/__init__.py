"""HyFDCA on Flower (``pip install 'hyfdca[flower]'``): a ServerApp that drives HyFDCA's
rounds through Flower's message API, one message type per protocol phase, and a ClientApp
that answers them with the same ``Client`` code as in process (docs/deployment.md).

- ``server_app``, ``client_app``: the Flower apps (``hyfdca.flower:server_app``,
  ``hyfdca.flower:client_app``);
- ``write_block`` / ``read_block``: a party's data file; ``write_keys``: the clients'
  key file and the server's public one;
- ``simulate``: a run on Flower's simulation engine (Ray), from a FederatedDataset;
- ``Loopback``, ``write_app``, ``self_signed_certificates``: a deployment on this machine
  (SuperLink and SuperNodes as subprocesses, TLS) and the app folder ``flwr run`` takes.
"""

from hyfdca.flower._client_app import app as client_app
from hyfdca.flower._files import (read_block, read_client_keys, read_server_keys, write_block,
                                  write_keys)
from hyfdca.flower._loopback import Loopback, self_signed_certificates, write_app
from hyfdca.flower._server_app import app as server_app
from hyfdca.flower._simulation import simulate
from hyfdca.flower._transport import ClientError, FlowerTransport

__all__ = ["ClientError", "FlowerTransport", "Loopback", "client_app", "read_block",
           "read_client_keys", "read_server_keys", "self_signed_certificates", "server_app",
           "simulate", "write_app", "write_block", "write_keys"]
