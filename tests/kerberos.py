"""A Kerberos realm for tests: MIT krb5kdc (Debian's krb5-kdc) in a temporary directory.

Everything lives under the given directory: the KDC's database and stash, its kdc.conf, a
krb5.conf that points clients and the broker at it (``KRB5_CONFIG``; Java reads the same file
through ``-Djava.security.krb5.conf``), and one keytab per principal.  The KDC listens on a
free port of 127.0.0.1 (TCP and UDP); no file outside the directory is read or written, so
other tests and the machine's /etc/krb5.conf are untouched.

Service principals are ``<service>/localhost@REALM``: clients name the broker by the host they
connect to, so the broker is reached as ``localhost``.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

REALM = "SHAREBROKER.TEST"
HOST = "localhost"
MASTER_PASSWORD = "kdc-master-secret"


def available() -> str | None:
    """None when the KDC tools and python-gssapi are installed, else what is missing."""
    missing = [t for t in ("krb5kdc", "kdb5_util", "kadmin.local", "kinit") if shutil.which(t) is None]
    if missing:
        return "Kerberos tools missing (Debian krb5-kdc, krb5-admin-server, krb5-user): " + ", ".join(missing)
    try:
        import gssapi  # noqa: F401
    except ImportError:
        return "python-gssapi missing (pip install '.[kerberos]')"
    return None


def _free_port() -> int:
    """A port free for both TCP and UDP on 127.0.0.1."""
    for _ in range(50):
        with socket.socket() as t, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            try:
                u.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port for the KDC")


class Kdc:
    """One realm: ``start()``, ``add(principal)`` for a keytab, ``env`` for processes that use it."""

    def __init__(self, directory: str | Path, realm: str = REALM):
        self.dir = Path(directory)
        self.realm = realm
        self.port = _free_port()
        self.krb5_conf = self.dir / "krb5.conf"
        self.proc: subprocess.Popen | None = None

    @property
    def env(self) -> dict[str, str]:
        """Environment of a process that uses this realm (the broker, kinit, kcat)."""
        return {"KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.dir / "kdc.conf"),
                "KRB5CCNAME": f"FILE:{self.dir / 'ccache-default'}", "KRB5_TRACE": str(self.dir / "trace.log")}

    def _run(self, *cmd: str) -> str:
        r = subprocess.run(cmd, env={**os.environ, **self.env}, capture_output=True, text=True, timeout=60)
        if r.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed: {r.stdout}{r.stderr}")
        return r.stdout

    def start(self) -> "Kdc":
        self.dir.mkdir(parents=True, exist_ok=True)
        self.krb5_conf.write_text(
            "[libdefaults]\n"
            f" default_realm = {self.realm}\n"
            " dns_lookup_realm = false\n dns_lookup_kdc = false\n rdns = false\n"
            " dns_canonicalize_hostname = false\n udp_preference_limit = 1\n"
            " ticket_lifetime = 24h\n forwardable = true\n"
            "[realms]\n"
            f" {self.realm} = {{\n  kdc = 127.0.0.1:{self.port}\n }}\n"
            "[domain_realm]\n"
            f" {HOST} = {self.realm}\n")
        (self.dir / "kdc.conf").write_text(
            "[kdcdefaults]\n"
            f" kdc_ports = {self.port}\n kdc_tcp_ports = {self.port}\n"
            "[realms]\n"
            f" {self.realm} = {{\n"
            f"  database_name = {self.dir / 'principal'}\n"
            f"  key_stash_file = {self.dir / 'stash'}\n"
            f"  acl_file = {self.dir / 'kadm5.acl'}\n"
            "  max_life = 24h\n"
            "  supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal\n"
            " }\n"
            "[logging]\n"
            f" kdc = FILE:{self.dir / 'kdc.log'}\n")
        (self.dir / "kadm5.acl").write_text("")
        self._run("kdb5_util", "-r", self.realm, "-P", MASTER_PASSWORD, "create", "-s")
        self.proc = subprocess.Popen(["krb5kdc", "-n", "-r", self.realm], env={**os.environ, **self.env},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("krb5kdc did not start: " + self.log())
                time.sleep(0.05)

    def add(self, principal: str) -> Path:
        """Create ``principal`` (``alice``, ``kafka/localhost``) with a random key: its keytab's path."""
        keytab = self.dir / (principal.replace("/", "_") + ".keytab")
        self._run("kadmin.local", "-r", self.realm, "-q", f"addprinc -randkey {principal}@{self.realm}")
        self._run("kadmin.local", "-r", self.realm, "-q", f"ktadd -k {keytab} {principal}@{self.realm}")
        return keytab

    def full(self, principal: str) -> str:
        return f"{principal}@{self.realm}"

    def log(self) -> str:
        p = self.dir / "kdc.log"
        return p.read_text()[-3000:] if p.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def broker_settings(kdc: Kdc, keytab: Path, listener: str = "SASL_PLAINTEXT", service: str = "kafka",
                    rules: str | None = None, **extra) -> dict[str, str]:
    """Kafka's keys for a GSSAPI listener (the same ones a Kafka 4.4 broker reads)."""
    settings = {
        "listeners": f"{listener}://{HOST}:0",
        "sasl.enabled.mechanisms": "GSSAPI",
        "sasl.kerberos.service.name": service,
        f"listener.name.{listener.lower()}.gssapi.sasl.jaas.config":
            'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true '
            f'keyTab="{keytab}" principal="{kdc.full(f"{service}/{HOST}")}";',
        **extra,
    }
    if rules is not None:
        settings["sasl.kerberos.principal.to.local.rules"] = rules
    return settings


def java_jaas(kdc: Kdc, principal: str, keytab: Path) -> str:
    """A Java client's ``sasl.jaas.config`` that logs ``principal`` in from its keytab."""
    return ('com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true '
            f'useTicketCache=false keyTab="{keytab}" principal="{kdc.full(principal)}";')


def librdkafka_settings(kdc: Kdc, principal: str, keytab: Path, service: str = "kafka") -> dict[str, str]:
    """librdkafka (Cyrus SASL) settings: it runs kinit with the keytab into its own ticket cache."""
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "GSSAPI",
            "sasl.kerberos.service.name": service, "sasl.kerberos.principal": kdc.full(principal),
            "sasl.kerberos.keytab": str(keytab)}
