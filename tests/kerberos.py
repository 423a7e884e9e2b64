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

import contextlib
import os
import shutil
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

REALM = "SHAREBROKER.TEST"
HOST = "localhost"
JAVA_SOURCE = Path(__file__).resolve().parent / "kerberos_java" / "KerberosClient.java"
MASTER_PASSWORD = "kdc-master-secret"
# the principals ``realm`` creates: the broker's, another service's, users, a service as a client
PRINCIPALS = ("kafka/localhost", "other/localhost", "alice", "bob", "etl/localhost")
# alice and etl/localhost get other short names (analyst, etl); bob keeps DEFAULT's
RULES = "RULE:[1:$1@$0](alice@SHAREBROKER.TEST)s/.*/analyst/,RULE:[2:$1@$0](etl@.*)s/@.*//L,DEFAULT"
# alice's session re-authenticating as bob: Kafka writes the principals type.name, this broker type:name
# (SaslAuthenticator.authenticate; a known difference)
REAUTH_REFUSED = r"Cannot change principals during re-authentication from User[.:]analyst: User[.:]bob"


def available() -> str | None:
    """None when the KDC tools, kcat and python-gssapi are installed, else what is missing."""
    missing = [t for t in ("krb5kdc", "kdb5_util", "kadmin.local", "kinit") if shutil.which(t) is None]
    if missing:
        return "Kerberos tools missing (Debian krb5-kdc, krb5-admin-server, krb5-user): " + ", ".join(missing)
    if shutil.which("kcat") is None:
        return "kcat (Debian package kcat; tools/test.sh installs it)"
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
        """Environment of a process that uses this realm (the broker, kinit, kcat); an acceptor's replay
        cache (MIT's default: /var/tmp) in the realm's directory too."""
        return {"KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.dir / "kdc.conf"),
                "KRB5RCACHEDIR": str(self.dir),
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


@contextlib.contextmanager
def realm(directory: Path):
    """A started ``Kdc`` with a keytab per ``PRINCIPALS`` (``kdc.keytabs``); while it runs, this process's
    ``KRB5_CONFIG`` is its krb5.conf (python-gssapi in ``gss_login``)."""
    kdc = Kdc(directory).start()
    before = os.environ.get("KRB5_CONFIG")
    try:
        kdc.keytabs = {p: kdc.add(p) for p in PRINCIPALS}
        os.environ["KRB5_CONFIG"] = str(kdc.krb5_conf)
        yield kdc
    finally:
        if before is None:
            os.environ.pop("KRB5_CONFIG", None)
        else:
            os.environ["KRB5_CONFIG"] = before
        kdc.stop()


@pytest.fixture(scope="module")
def kdc(tmp_path_factory):
    """A test module's realm (``realm``)."""
    with realm(tmp_path_factory.mktemp("kdc")) as k:
        yield k


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


def kcat(kdc: Kdc, bootstrap: str, principal: str, *args: str, service: str = "kafka", stdin: str | None = None):
    """kcat (librdkafka + Cyrus SASL) logged in as ``principal`` (a key of ``kdc.keytabs``), its own ticket
    cache; the finished process."""
    conf = librdkafka_settings(kdc, principal, kdc.keytabs[principal], service)
    cmd = ["kcat", "-b", bootstrap, *[a for k, v in conf.items() for a in ("-X", f"{k}={v}")], *args]
    env = {**os.environ, **kdc.env, "KRB5CCNAME": f"FILE:{kdc.dir / ('cc-kcat-' + principal.replace('/', '_'))}"}
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60, env=env)


def kcat_roundtrip(kdc: Kdc, bootstrap: str, principal: str, topic: str, n: int = 5) -> list[str]:
    """``n`` lines produced by kcat as ``principal``, then read back by it."""
    lines = [f"{principal}-{i}" for i in range(n)]
    p = kcat(kdc, bootstrap, principal, "-P", "-t", topic, stdin="\n".join(lines) + "\n")
    assert p.returncode == 0, p.stderr
    c = kcat(kdc, bootstrap, principal, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-c", str(n))
    assert c.returncode == 0, c.stderr
    return c.stdout.splitlines()


def java_classpath() -> str:
    """The Kafka 4.4 client's classpath with ``KerberosClient`` compiled (tests/kafka_ref resolves the jars)."""
    from tests.kafka_ref import launcher

    cp = launcher.classpath()
    return f"{launcher.compiled([JAVA_SOURCE], cp, 'kerberos-client')}:{cp}"


def java(kdc: Kdc, cp: str, bootstrap: str, principal: str, topic: str, service: str = "kafka", n: int = 5) -> str:
    """The Java client's result line (kerberos_java/KerberosClient.java): ``OK n`` or ``ERROR Class: message``."""
    jaas = java_jaas(kdc, principal, kdc.keytabs[principal])
    cmd = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           f"-Djava.security.krb5.conf={kdc.krb5_conf}", "-Dlog4j2.rootLogger.level=OFF",
           "-cp", cp, "KerberosClient", bootstrap, topic, str(n), jaas, service]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return (r.stdout.strip().splitlines() or [r.stderr[-2000:]])[-1]


def gss_login(w, kdc: Kdc, principal: str, handshake_version: int = 1, service: str = "kafka",
              authzid: str | None = None, seen: dict | None = None):
    """A GSSAPI login with python-gssapi over a ``tests.wire.WireClient``: Kafka's exchange after a
    SaslHandshake v1 (SaslAuthenticate) or v0 (raw tokens), asking for the authorization id ``authzid``
    (default: the principal's own name); ``seen`` gets the server's security-layer offer (hex).  None
    when it succeeded; else
    (error code, message) of the failing SaslAuthenticate (v1), or "closed" (v0: the broker closes).
    This process must see the realm's krb5.conf (``KRB5_CONFIG``)."""
    import gssapi

    from protocol.messages.sasl_authenticate import SaslAuthenticateRequest
    from protocol.messages.sasl_handshake import SaslHandshakeRequest

    store = {"client_keytab": str(kdc.keytabs[principal]),
             "ccache": f"MEMORY:{kdc.port}-{principal.replace('/', '_')}"}  # a cache per realm
    creds = gssapi.Credentials(name=gssapi.Name(kdc.full(principal), gssapi.NameType.kerberos_principal),
                               usage="initiate", store=store)
    ctx = gssapi.SecurityContext(name=gssapi.Name(f"{service}@{HOST}", gssapi.NameType.hostbased_service),
                                 creds=creds, usage="initiate", flags=[gssapi.RequirementFlag.mutual_authentication])
    assert w.request(SaslHandshakeRequest(mechanism="GSSAPI"), handshake_version).error_code == 0

    def exchange(token: bytes, answered: bool = True):
        if handshake_version == 0:
            w.send_raw(struct.pack(">i", len(token)) + token)
            try:
                return None, w.recv_frame() if answered else b""
            except ConnectionError:
                return "closed", b""
        r = w.request(SaslAuthenticateRequest(auth_bytes=token), 2)
        return ((r.error_code, r.error_message) if r.error_code else None), bytes(r.auth_bytes)

    failed, answer = exchange(ctx.step())
    while failed is None and not ctx.complete:  # the last step consumes the mutual-authentication token
        failed, answer = exchange(ctx.step(answer) or b"")
    if failed is not None:
        return failed
    offer = ctx.unwrap(answer).message
    assert offer[0] == 1 and len(offer) == 4, offer  # "no security layer" only, and a maximum buffer size
    if seen is not None:
        seen["offer"] = offer.hex()
    # the last token has an empty answer (v1), or none at all (v0: the next frame is a request's answer)
    choice = b"\x01\x00\x00\x00" + (kdc.full(principal) if authzid is None else authzid).encode()
    failed, last = exchange(ctx.wrap(choice, False).message,
                            answered=handshake_version == 1)
    assert failed is not None or last == b""
    return failed
