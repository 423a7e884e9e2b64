"""Small helpers shared by the integration tests."""
from __future__ import annotations

import asyncio
import time
import uuid


def until(cond, timeout: float, what: str = "condition", interval: float = 0.01):
    """Return ``cond()``'s first truthy value; fail with ``what`` after ``timeout`` seconds."""
    for value in _checks(cond, timeout, what):
        if value:
            return value
        time.sleep(interval)


async def until_async(cond, timeout: float = 10.0, what: str = "condition", interval: float = 0.005):
    """``until`` for a test running on the event loop: waits without blocking the loop."""
    for value in _checks(cond, timeout, what):
        if value:
            return value
        await asyncio.sleep(interval)


def _checks(cond, timeout: float, what: str):
    """``cond()``'s values, one per resumption, until ``timeout`` seconds have passed (then AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        yield cond()
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ----------------------------------------------------------------------------- topics and groups
def create_topic(bootstrap: str, partitions: int = 1, prefix: str = "t", **configs) -> str:
    """A new topic (configs by Kafka name, ``_`` for ``.``); returns its name."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = unique(prefix)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the result is in
    conf = {k.replace("_", "."): str(v) for k, v in configs.items()}
    admin.create_topics([NewTopic(name, partitions, 1, config=conf)])[name].result(15)
    return name


def topic_id(bootstrap: str, name: str) -> bytes:
    """The topic's id, from Metadata v12 over our codec."""
    from protocol.messages.metadata import MetadataRequest
    from tests.wire import WireClient

    with WireClient(bootstrap) as w:
        md = w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                       allow_auto_topic_creation=False), 12)
    assert md.topics[0].error_code == 0, md.topics[0]
    return md.topics[0].topic_id


def stored_batches(bootstrap: str, topic: str, partition: int = 0) -> list:
    """The headers (``protocol.records.BatchInfo``) of the batches stored in a partition, as one Fetch
    v12 from offset 0 returns them: how a client really framed and compressed what it produced."""
    from protocol.messages.fetch import FetchRequest
    from protocol.records import read_header
    from tests.wire import WireClient

    with WireClient(bootstrap) as w:
        resp = w.request(FetchRequest(max_wait_ms=0, min_bytes=1, topics=[FetchRequest.FetchTopic(
            topic=topic, partitions=[FetchRequest.FetchPartition(partition=partition, fetch_offset=0,
                                                                 partition_max_bytes=1 << 20)])]), 12)
    blob = memoryview(resp.responses[0].partitions[0].records or b"")
    out, pos = [], 0
    while pos < len(blob):
        info = read_header(blob, pos)
        out.append(info)
        pos += info.size
    return out


def produce_refused(producer, topic: str, timeout: float = 15) -> str | None:
    """The error name a record to ``topic`` gets from a producer that may not write there: raised by
    ``produce()`` when the client's metadata already says so (a loaded machine answers it first), else from
    the delivery report; None if the record was written."""
    from confluent_kafka import KafkaException

    errors = []
    try:
        producer.produce(topic, b"denied", on_delivery=lambda err, msg: errors.append(err))
    except KafkaException as e:
        return e.args[0].name()
    producer.flush(timeout)
    assert errors, "no delivery report"
    return errors[0] and errors[0].name()


def set_group_configs(bootstrap: str, group: str, **configs) -> None:
    """IncrementalAlterConfigs SET on a GROUP resource (``_`` for ``.`` in names)."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry(k.replace("_", "."), str(v), incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([res])[res].result(15)


def describe_share_group(bootstrap: str, group: str):
    """The group as ShareGroupDescribe v1 shows it (over our codec)."""
    from protocol.messages.share_group_describe import ShareGroupDescribeRequest
    from tests.wire import WireClient

    with WireClient(bootstrap) as w:
        return w.request(ShareGroupDescribeRequest(group_ids=[group]), 1).groups[0]


def share_member_assigned(w, group: str, member: str, topic: str, tid: bytes, partitions=(0,),
                          timeout: float = 15.0) -> int:
    """Join share group ``group`` as ``member`` over WireClient ``w`` (ShareGroupHeartbeat v1) and
    heartbeat until its assignment holds ``partitions`` of topic id ``tid``; returns the member epoch."""
    from protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as HB

    state = {"epoch": 0}

    def assigned():
        r = w.request(HB(group_id=group, member_id=member, member_epoch=state["epoch"],
                         subscribed_topic_names=[topic] if state["epoch"] == 0 else None), 1)
        assert r.error_code == 0, r
        state["epoch"] = r.member_epoch
        return r.assignment is not None and any(
            t.topic_id == tid and set(partitions) <= set(t.partitions) for t in r.assignment.topic_partitions)

    until(assigned, timeout, "the share member's assignment")
    return state["epoch"]


# ---------------------------------------------------------------- security (TLS / SASL) helpers
def make_pki(directory, key_password: str | None = None) -> dict:
    """A test CA, a server key store (PEM: key + chain, SAN 127.0.0.1/localhost) and a client certificate.

    Returns paths: ``ca``, ``server`` (key store), ``client_cert``, ``client_key``, and
    ``client_dn``: the client subject as Kafka's principal builder writes it.
    """
    import datetime
    import ipaddress
    from pathlib import Path

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)

    def name(*attrs):
        return x509.Name([x509.NameAttribute(oid, value) for oid, value in attrs])

    def cert(subject, key, issuer, issuer_key, ca=False, san=None):
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
             .not_valid_after(now + datetime.timedelta(days=2))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if san:
            b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return b.sign(issuer_key, hashes.SHA256())

    def pem_key(key, password=None):
        enc = serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)

    pem = serialization.Encoding.PEM
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name((NameOID.COMMON_NAME, "sharebroker test CA"))
    ca = cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = cert(name((NameOID.COMMON_NAME, "localhost")), server_key, ca_name, ca_key,
                  san=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    client_key = ec.generate_private_key(ec.SECP256R1())
    client_subject = name((NameOID.COUNTRY_NAME, "US"), (NameOID.ORGANIZATION_NAME, "Example, Inc."),
                          (NameOID.ORGANIZATIONAL_UNIT_NAME, "qa"), (NameOID.COMMON_NAME, "client-1"))
    client = cert(client_subject, client_key, ca_name, ca_key)
    (d / "ca.pem").write_bytes(ca.public_bytes(pem))
    (d / "server.pem").write_bytes(pem_key(server_key, key_password) + server.public_bytes(pem) + ca.public_bytes(pem))
    (d / "client.pem").write_bytes(client.public_bytes(pem))
    (d / "client.key").write_bytes(pem_key(client_key))
    return {"ca": str(d / "ca.pem"), "server": str(d / "server.pem"), "client_cert": str(d / "client.pem"),
            "client_key": str(d / "client.key"), "client_dn": client_subject.rfc4514_string()}


PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret" '
              'user_dave="dave-secret";')
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required;'


def security_settings(pki: dict, **extra) -> dict:
    """Broker settings with PLAINTEXT, SSL (client certificates required), SASL_PLAINTEXT and SASL_SSL
    listeners, PLAIN users admin/alice/bob and SCRAM users (both mechanisms) with the same passwords."""
    users = ";".join(f"{m}=[name={u},password={u}-secret]" for u in ("admin", "alice", "bob")
                     for m in ("SCRAM-SHA-256", "SCRAM-SHA-512"))
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": pki["server"],
        "ssl.truststore.type": "PEM", "ssl.truststore.location": pki["ca"],
        "listener.name.ssl.ssl.client.auth": "required",
        "sharebroker.scram.users": users,
        **extra,
    }


def client_security(b, protocol: str, pki: dict, mechanism: str | None = None, user: str | None = None,
                    password: str | None = None) -> dict:
    """confluent-kafka (librdkafka) settings for one of the broker's listeners."""
    conf = {"bootstrap.servers": b.address(protocol), "security.protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        conf["ssl.ca.location"] = pki["ca"]
    if protocol == "SSL":
        conf["ssl.certificate.location"] = pki["client_cert"]
        conf["ssl.key.location"] = pki["client_key"]
    if mechanism:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user,
                     "sasl.password": password if password is not None else f"{user}-secret"})
    return conf


def tls_wire(bootstrap: str, pki: dict, client_cert: bool = False):
    """A ``tests.wire.WireClient`` over TLS (trusting the test CA; optionally with the client certificate)."""
    import ssl

    from tests.wire import WireClient

    w = WireClient(bootstrap)
    ctx = ssl.create_default_context(cafile=pki["ca"])
    if client_cert:
        ctx.load_cert_chain(pki["client_cert"], pki["client_key"])
    w.sock = ctx.wrap_socket(w.sock, server_hostname="127.0.0.1")
    return w


def wire_plain_login(w, user: str, password: str, handshake_version: int = 1, authenticate_version: int = 2):
    """SaslHandshake + SaslAuthenticate (PLAIN) on a ``WireClient``; returns the SaslAuthenticate response."""
    from protocol.messages.sasl_authenticate import SaslAuthenticateRequest
    from protocol.messages.sasl_handshake import SaslHandshakeRequest

    hs = w.request(SaslHandshakeRequest(mechanism="PLAIN"), handshake_version)
    assert hs.error_code == 0, hs
    token = b"\0" + user.encode() + b"\0" + password.encode()
    return w.request(SaslAuthenticateRequest(auth_bytes=token), authenticate_version)


def wire_scram_login(w, mechanism: str, user: str, password: str, token: bool = False,
                     authenticate_version: int = 2):
    """SaslHandshake + the SCRAM exchange (RFC 5802) on a ``WireClient``; ``token=True`` adds Kafka's
    ``tokenauth=true`` extension (a delegation token login: ``user`` is the token id, ``password``
    the base64 HMAC).  Returns the last SaslAuthenticate response (the first one when it failed)."""
    import base64
    import hashlib
    import hmac
    import secrets

    from protocol.messages.sasl_authenticate import SaslAuthenticateRequest
    from protocol.messages.sasl_handshake import SaslHandshakeRequest

    alg = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    hs = w.request(SaslHandshakeRequest(mechanism=mechanism), 1)
    assert hs.error_code == 0, hs
    bare = f"n={user},r={secrets.token_hex(12)}" + (",tokenauth=true" if token else "")
    first = w.request(SaslAuthenticateRequest(auth_bytes=b"n,," + bare.encode()), authenticate_version)
    if first.error_code:
        return first
    server_first = bytes(first.auth_bytes).decode()
    attrs = dict(kv.split("=", 1) for kv in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(alg, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", alg).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    signature = hmac.new(hashlib.new(alg, client_key).digest(), f"{bare},{server_first},{without_proof}".encode(),
                         alg).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    return w.request(SaslAuthenticateRequest(auth_bytes=f"{without_proof},p={proof}".encode()), authenticate_version)


def connection_closed(w, timeout: float = 10.0) -> bool:
    """True when the broker closes the socket (EOF) within ``timeout``; False if it answers anything."""
    import socket as _socket

    w.sock.settimeout(timeout)
    try:
        data = w.sock.recv(1)
    except (ConnectionResetError, BrokenPipeError):
        return True
    except _socket.timeout:
        return False
    return data == b""
