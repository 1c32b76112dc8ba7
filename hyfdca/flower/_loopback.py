"""A Flower deployment on this machine: a SuperLink and one SuperNode per party as
subprocesses on 127.0.0.1, with self-signed TLS certificates, and ``flwr run`` of the
HyFDCA app. For tests, benchmarks and a first try before two organisations deploy for real
(docs/deployment.md)."""

import datetime
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

APP_TOML = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "hyfdca-job"
version = "1.0.0"
description = "A HyFDCA job (hyfdca.flower)"
license = "MIT"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "hyfdca"

[tool.flwr.app.components]
serverapp = "hyfdca.flower:server_app"
clientapp = "hyfdca.flower:client_app"

[tool.flwr.app.config]
{config}
"""


def self_signed_certificates(folder):
    """A CA and a certificate for 127.0.0.1 / localhost signed by it: (ca, cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hyfdca loopback CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = folder / "ca.crt", folder / "server.crt", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _toml_value(value):
    return json.dumps(value)  # strings, numbers and booleans read back as TOML


def write_app(folder, config):
    """The Flower app folder of a HyFDCA job: pyproject.toml with the run configuration
    of the ServerApp (``hyfdca.flower._server_app``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lines = "\n".join(f"{k} = {_toml_value(v)}" for k, v in config.items())
    (folder / "pyproject.toml").write_text(APP_TOML.format(config=lines))
    return folder


class Loopback:
    """SuperLink and SuperNodes on 127.0.0.1 (TLS), as a context manager that stops
    every process it started, also when the block fails. ``node_configs[k]``: the node
    configuration of SuperNode k (``client-id``, ``data-file``, ``keys-file``)."""

    def __init__(self, folder, node_configs, tls=True):
        self.folder = Path(folder)
        self.node_configs = node_configs
        self.tls = tls
        self.processes = []
        self.nodes = {}  # party k -> its SuperNode process
        self.port = free_port()
        self.bin = Path(sys.executable).parent
        # Flower starts its own helpers (flower-superexec, flwr-serverapp, flwr-clientapp)
        # by name: this environment's scripts first
        self.env = dict(os.environ, FLWR_HOME=str(self.folder / "flwr-home"),
                        PATH=f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}")

    def _start(self, name, args):
        log = open(self.folder / f"{name}.log", "wb")
        process = subprocess.Popen([str(self.bin / args[0]), *args[1:]], stdout=log,
                                   stderr=subprocess.STDOUT, env=self.env,
                                   start_new_session=True)
        log.close()
        self.processes.append(process)
        return process

    def __enter__(self):
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.tls:
            ca, cert, key = self_signed_certificates(self.folder / "tls")
            link_tls = ["--ssl-ca-certfile", str(ca), "--ssl-certfile", str(cert),
                        "--ssl-keyfile", str(key)]
            node_tls = ["--root-certificates", str(ca)]
            connection = f'root-certificates = "{ca}"'
        else:
            link_tls, node_tls, connection = ["--insecure"], ["--insecure"], "insecure = true"
        home = self.folder / "flwr-home"
        home.mkdir(exist_ok=True)
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\n'
            f'address = "127.0.0.1:{self.port}"\n{connection}\n')
        try:
            self._start("superlink", ["flower-superlink", *link_tls, "--port", str(self.port),
                                      "--disable-runtime-dependency-installation"])
            self._wait_for_port(self.port)
            self._node_tls = node_tls
            for k in range(len(self.node_configs)):
                self.start_node(k)
        except BaseException:
            self.close()
            raise
        return self

    def start_node(self, k):
        """Start SuperNode k (again, after :meth:`kill_node`: a new node, no state)."""
        node_config = " ".join(f"{key}={_toml_value(v)}"
                               for key, v in self.node_configs[k].items())
        starts = sum(1 for p in self.folder.glob(f"supernode-{k}*.log"))
        name = f"supernode-{k}" + (f"-{starts + 1}" if starts else "")
        process = self._start(name, [
            "flower-supernode", *self._node_tls, "--superlink", f"127.0.0.1:{self.port}",
            "--port", str(free_port()), "--node-config", node_config])
        self.nodes[k] = process
        return process

    def kill_node(self, k):
        """SIGKILL SuperNode k and what it started (a party's machine failing)."""
        process = self.nodes[k]
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()

    def _wait_for_port(self, port, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            if any(p.poll() is not None for p in self.processes):
                raise RuntimeError(f"the SuperLink exited; see {self.folder}/superlink.log")
            time.sleep(0.1)
        raise TimeoutError(f"the SuperLink did not listen on port {port} in {timeout} s")

    def run(self, app, timeout=600):
        """``flwr run APP loopback --stream``; its output."""
        return self.finish_run(self.start_run(app), timeout)

    def start_run(self, app):
        """Start ``flwr run APP loopback --stream`` (its output goes to flwr-run.log,
        :meth:`wait_for_output` watches it); returns the process."""
        self.run_log = self.folder / "flwr-run.log"
        return self._start("flwr-run", ["flwr", "run", str(app), "loopback", "--stream"])

    def wait_for_output(self, text, timeout=600):
        """Block until ``text`` appears in the output of the run started last."""
        deadline = time.monotonic() + timeout
        while text not in self.run_log.read_text(errors="replace"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{text!r} not in {self.run_log} after {timeout} s")
            time.sleep(0.2)

    def finish_run(self, process, timeout=600):
        """Wait for the run; its output; RuntimeError if it failed."""
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"flwr run did not finish in {timeout} s; see "
                               f"{self.run_log}") from None
        output = self.run_log.read_text(errors="replace")
        if code != 0:
            raise RuntimeError(f"flwr run failed ({code}): {output}")
        return output

    def close(self):
        """Stop every process this loopback started and every process they started (all
        carry its FLWR_HOME in their environment, whatever session they detached to)."""
        for process in self.processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        for pid in self.leftover():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10  # SIGKILL is delivered asynchronously
        while self.leftover() and time.monotonic() < deadline:
            time.sleep(0.1)

    def leftover(self):
        """Pids of live processes whose environment holds this loopback's FLWR_HOME."""
        marker = f"FLWR_HOME={self.env['FLWR_HOME']}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = (entry / "environ").read_bytes()
                state = (entry / "stat").read_text().split(") ", 1)[1].split()[0]
            except OSError:
                continue
            if marker in environ.split(b"\0") and state != "Z":
                found.append(int(entry.name))
        return found

    def __exit__(self, *exc):
        self.close()
        return False
