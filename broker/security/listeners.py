"""Listeners with Kafka's syntax, TLS contexts and the mTLS principal.

``listeners=PLAINTEXT://:9092,SASL_SSL://0.0.0.0:9093,INTERNAL://127.0.0.1:9094`` with
``listener.security.protocol.map=INTERNAL:SASL_PLAINTEXT,...`` (Kafka's default map
names the four protocols after themselves); ``advertised.listeners`` gives each
listener the address clients are told (by name; a listener not named there advertises
its own address, ``127.0.0.1`` for a wildcard host).  Listeners named in
``controller.listener.names`` are not opened: there is no KRaft controller here.

TLS settings are read as Kafka reads them: ``listener.name.<listener>.ssl.*`` first,
then ``ssl.*``.  Key stores are PEM (``ssl.keystore.type=PEM``: ``ssl.keystore.location``
holds the private key and the certificate chain, ``ssl.key.password`` decrypts the key;
or ``ssl.keystore.key`` / ``ssl.keystore.certificate.chain`` inline), trust stores PEM
(``ssl.truststore.location`` or ``ssl.truststore.certificates``).  ``ssl.client.auth``
none / requested / required.  An SSL client's principal is its certificate's subject
as ``X500Principal.getName()`` writes it (RFC 2253, most specific RDN first), which is
what Kafka's ``DefaultKafkaPrincipalBuilder`` uses with ``ssl.principal.mapping.rules=DEFAULT``.
"""
from __future__ import annotations

import os
import re
import ssl
import tempfile
from dataclasses import dataclass, field

from broker.log.config import ConfigError
from broker.pipeline import ANONYMOUS, Authenticator, NoAuthentication

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
_ITEM = re.compile(r"^(?:([A-Za-z0-9_]+)://)?(\[[0-9A-Fa-f:.]*\]|[^:/\s\[\]]*):(-?\d+)$")


@dataclass(eq=False)
class Listener:
    """One listener: where it binds, what it advertises, how it secures connections."""

    name: str
    protocol: str
    host: str  # bind address ("" or 0.0.0.0: every interface)
    port: int
    advertised_host: str = ""
    advertised_port: int = 0
    advertised_fixed: bool = False  # advertised.listeners named it (its port is not learnt at bind)
    ssl_context: ssl.SSLContext | None = None
    authenticator: Authenticator = field(default_factory=NoAuthentication)

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def bound(self, port: int) -> None:
        """The socket is bound: a port-0 listener learns its port (and advertises it unless fixed)."""
        self.port = port
        if not self.advertised_fixed or self.advertised_port == 0:
            self.advertised_port = port


def parse_items(key: str, value: str) -> list[tuple[str, str, int]]:
    """``NAME://host:port`` items of ``listeners`` / ``advertised.listeners`` as (NAME, host, port)."""
    out = []
    if not value:
        return out
    for item in (v.strip() for v in value.split(",")):
        m = _ITEM.match(item)
        if m is None:
            raise ConfigError(f"Invalid value {value} for configuration {key}: Unable to parse {item} "
                              f"to a broker endpoint")
        port = int(m.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError(f"Invalid value {value} for configuration {key}: port {port} is outside 0-65535")
        out.append(((m.group(1) or "PLAINTEXT").upper(), m.group(2).strip("[]"), port))
    return out


def protocol_map(config) -> dict[str, str]:
    """``listener.security.protocol.map``: listener name -> security protocol."""
    value = config.get("listener.security.protocol.map") or DEFAULT_PROTOCOL_MAP
    out = {}
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        name, sep, proto = item.partition(":")
        proto = proto.strip().upper()
        if not sep or proto not in PROTOCOLS:
            raise ConfigError(f"Invalid value {value} for configuration listener.security.protocol.map: "
                              f"Map entry '{item}' is not a listener name and a security protocol "
                              f"({', '.join(PROTOCOLS)})")
        out[name.strip().upper()] = proto
    return out


def parse_listeners(config) -> list[Listener]:
    """The listeners to open, in ``listeners`` order, with their advertised endpoints (no TLS yet)."""
    items = parse_items("listeners", config.get("listeners"))
    if not items:
        raise ConfigError("listeners must name at least one listener")
    names = [n for n, _, _ in items]
    if len(set(names)) != len(names):
        raise ConfigError(f"Each listener must have a different name, listeners: {config.get('listeners')}")
    ports = [p for _, _, p in items if p != 0]
    if len(set(ports)) != len(ports):
        raise ConfigError(f"Each listener must have a different port, listeners: {config.get('listeners')}")
    pmap = protocol_map(config)
    controllers = {n.strip().upper() for n in (config.get("controller.listener.names") or "").split(",") if n.strip()}
    advertised = {n: (h, p) for n, h, p in parse_items("advertised.listeners", config.get("advertised.listeners"))}
    unknown = set(advertised) - set(names)
    if unknown:
        raise ConfigError("advertised.listeners listener names must be equal to or a subset of the ones defined "
                          f"in listeners: {', '.join(sorted(unknown))}")
    out = []
    for name, host, port in items:
        if name in controllers:
            continue
        proto = pmap.get(name)
        if proto is None:
            raise ConfigError(f"No security protocol defined for listener {name}")
        lst = Listener(name, proto, host or "0.0.0.0", port)
        if name in advertised:
            ahost, aport = advertised[name]
            if ahost in ("0.0.0.0", "::"):
                raise ConfigError(f"advertised.listeners cannot use the nonroutable meta-address {ahost}. "
                                  f"Use a routable IP address.")
            lst.advertised_host, lst.advertised_port, lst.advertised_fixed = ahost or "127.0.0.1", aport, True
        else:
            lst.advertised_host = host if host not in ("0.0.0.0", "", "::") else "127.0.0.1"
            lst.advertised_port = port
        out.append(lst)
    if not out:
        raise ConfigError("listeners names only controller listeners (controller.listener.names)")
    return out


def listener_setting(config, listener: str, key: str, default: str | None = None) -> str | None:
    """Kafka's listener override: ``listener.name.<listener>.<key>`` first, then ``<key>``."""
    v = config.get(f"listener.name.{listener.lower()}.{key}")
    if v is None:
        v = config.get(key)
    return default if v is None or v == "" else v


# ------------------------------------------------------------------ TLS
_TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def server_ssl_context(config, listener: str) -> ssl.SSLContext:
    """The TLS context of one listener from Kafka's ``ssl.*`` keys (PEM stores)."""
    def get(key, default=None):
        return listener_setting(config, listener, key, default)

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    enabled = [p.strip() for p in get("ssl.enabled.protocols", "TLSv1.2,TLSv1.3").split(",") if p.strip()]
    versions = [_TLS_VERSIONS[p] for p in enabled if p in _TLS_VERSIONS]
    if not versions:
        raise ConfigError(f"ssl.enabled.protocols {','.join(enabled)}: none of TLSv1.2, TLSv1.3")
    ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
    kind = get("ssl.keystore.type", "").upper()
    location = get("ssl.keystore.location")
    password = get("ssl.key.password") or get("ssl.keystore.password")
    if kind not in ("", "PEM"):
        raise ConfigError(f"ssl.keystore.type {kind} is not supported for listener {listener}: use PEM")
    if location:
        if not os.path.isfile(location):
            raise ConfigError(f"ssl.keystore.location {location} (listener {listener}) is not a file")
        _load_chain(ctx, location, password, listener)
    elif get("ssl.keystore.certificate.chain") and get("ssl.keystore.key"):
        with tempfile.TemporaryDirectory() as d:  # the stdlib loads key material from files only
            path = os.path.join(d, "keystore.pem")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(get("ssl.keystore.key").strip() + "\n" + get("ssl.keystore.certificate.chain").strip() + "\n")
            _load_chain(ctx, path, password, listener)
    else:
        raise ConfigError(f"listener {listener} (TLS) needs ssl.keystore.location (a PEM file with the "
                          f"private key and certificate chain)")
    kind = get("ssl.truststore.type", "").upper()
    if kind not in ("", "PEM"):
        raise ConfigError(f"ssl.truststore.type {kind} is not supported for listener {listener}: use PEM")
    trust = get("ssl.truststore.location")
    try:
        if trust:
            ctx.load_verify_locations(cafile=trust)
        elif get("ssl.truststore.certificates"):
            ctx.load_verify_locations(cadata=get("ssl.truststore.certificates"))
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"cannot load the trust store of listener {listener}: {e}") from None
    auth = get("ssl.client.auth", "none").lower()
    if auth not in ("none", "requested", "required"):
        raise ConfigError(f"Invalid value {auth} for configuration ssl.client.auth: "
                          f"String must be one of: required, requested, none")
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}[auth]
    if auth != "none" and not (trust or get("ssl.truststore.certificates")):
        raise ConfigError(f"ssl.client.auth={auth} on listener {listener} needs ssl.truststore.location")
    return ctx


def _load_chain(ctx: ssl.SSLContext, path: str, password: str | None, listener: str) -> None:
    try:
        ctx.load_cert_chain(path, password=password or None)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"cannot load the key store {path} of listener {listener}: {e}") from None


# ------------------------------------------------------------------ mTLS principal
# X500Principal.getName() (RFC 2253) writes these attribute types by keyword, others by OID.
_KEYWORDS = {"commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
             "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
             "domainComponent": "DC", "userId": "UID"}
# Other common types: OID and the DER string tag Java prints them with (as #hex).
_OIDS = {"emailAddress": ("1.2.840.113549.1.9.1", 0x16), "serialNumber": ("2.5.4.5", 0x13),
         "title": ("2.5.4.12", 0x0C), "surname": ("2.5.4.4", 0x0C), "givenName": ("2.5.4.42", 0x0C),
         "initials": ("2.5.4.43", 0x0C), "generationQualifier": ("2.5.4.44", 0x0C),
         "dnQualifier": ("2.5.4.46", 0x13), "pseudonym": ("2.5.4.65", 0x0C),
         "businessCategory": ("2.5.4.15", 0x0C), "postalCode": ("2.5.4.17", 0x0C)}


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (i == 0 and ch in "# ") or (i == len(value) - 1 and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _der_hex(tag: int, value: str) -> str:
    body = value.encode("utf-8")
    n = len(body)
    length = bytes([n]) if n < 128 else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes((n.bit_length() + 7) // 8, "big")
    return "#" + (bytes([tag]) + length + body).hex()


def rfc2253(subject) -> str:
    """A subject from ``SSLSocket.getpeercert()`` as ``X500Principal.getName()`` writes it."""
    rdns = []
    for rdn in reversed(subject):
        avas = []
        for name, value in rdn:
            if name in _KEYWORDS:
                avas.append(f"{_KEYWORDS[name]}={_escape(value)}")
            elif name in _OIDS:
                oid, tag = _OIDS[name]
                avas.append(f"{oid}={_der_hex(tag, value)}")
            else:
                avas.append(f"{name}={_escape(value)}")
        rdns.append("+".join(avas))
    return ",".join(rdns)


def ssl_principal(transport) -> str:
    """``User:<subject DN>`` of a verified client certificate, else ``User:ANONYMOUS``."""
    obj = transport.get_extra_info("ssl_object")
    cert = obj.getpeercert() if obj is not None else None
    if not cert or not cert.get("subject"):
        return ANONYMOUS
    return "User:" + rfc2253(cert["subject"])
