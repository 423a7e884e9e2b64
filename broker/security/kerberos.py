"""SASL/GSSAPI (Kerberos, RFC 4752) on a listener, and Kafka's principal-to-short-name rules.

The broker accepts as the principal of its listener's JAAS entry
(``com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="..."
principal="kafka/host@REALM";``), with the keys of that keytab only: a client holding a ticket
for another service (another principal of the realm) is refused, as the JDK's ``GssKrb5Server``
that Kafka uses refuses it.  ``sasl.kerberos.service.name`` must be set (in Kafka's config or as
the JAAS option ``serviceName``, the two agreeing), as Kafka's ``KerberosLogin`` requires.

The exchange (``GssKrb5Server``): the client's GSS tokens are accepted until the context is
established (the last answer is the mutual-authentication token, if any); the server then sends
its wrapped 4-byte security-layer offer (only "no security layer", Kafka's one QOP: ``auth``)
and the client answers with its wrapped choice and an optional authorization id, which changes
nothing: Kafka's ``SaslServerCallbackHandler`` authorizes it and keeps the authenticated name.

The session's principal is ``User:<short name>``: the client's Kerberos name through
``sasl.kerberos.principal.to.local.rules`` (Kafka's ``KerberosShortNamer`` / ``KerberosRule``;
``DEFAULT`` keeps the first component of a name of the default realm).

Accepting a context is CPU work on keys loaded at start-up (the keytab is read when the
listener's credentials are acquired), so it runs on the event loop; no network call is made.
The ``gssapi`` package (python-gssapi, the ``kerberos`` extra) is imported only by
``acceptor``, for a listener that enables GSSAPI.
"""
from __future__ import annotations

import re

from broker.log.config import ConfigError

MECHANISM = "GSSAPI"
EXTRA_MESSAGE = ("SASL mechanism GSSAPI needs python-gssapi: install the broker with its kerberos extra "
                 "(pip install 'sharebroker[kerberos]')")
NO_SECURITY_LAYER = 1  # RFC 4752 security-layer bit: authentication only (Kafka's QOP "auth")
MAX_BUFFER = 65536  # the JDK's default javax.security.sasl.maxbuffer, offered with the security layer


class NoMatchingRule(Exception):
    """KerberosShortNamer's NoMatchingRule: no rule gives a short name (or one gives a non-simple one)."""


# ------------------------------------------------------------------ names and rules
_NAME = re.compile(r"([^/@]*)(/([^/@]*))?@([^/@]*)")


def parse_name(principal: str) -> tuple[str, str | None, str | None]:
    """KerberosName.parse: (service or user, host, realm); a name without ``@`` is a bare short name."""
    m = _NAME.fullmatch(principal)
    if m is None:
        if "@" in principal:
            raise ValueError(f"Malformed Kerberos name: {principal}")
        return principal, None, None
    return m.group(1), m.group(3), m.group(4)


_RULE = re.compile(r"((DEFAULT)|((RULE:\[(\d*):([^\]]*)](\(([^)]*)\))?(s/([^/]*)/([^/]*)/(g)?)?/?(L|U)?)))")
_PARAMETER = re.compile(r"([^$]*)(\$(\d*))?")
_NON_SIMPLE = re.compile(r"[/@]")


def _java_replacement(template: str) -> str:
    """A java.util.regex replacement string (``$1``, ``\\$``) in Python's ``re.sub`` syntax."""
    out = []
    i = 0
    while i < len(template):
        c = template[i]
        if c == "\\" and i + 1 < len(template):
            out.append(template[i + 1].replace("\\", "\\\\"))
            i += 2
        elif c == "$":
            m = re.match(r"\$(\d+)|\$\{(\w+)\}", template[i:])
            if m is None:
                raise ValueError(f"Illegal group reference in {template}")
            out.append(f"\\g<{m.group(1) or m.group(2)}>")
            i += m.end()
        else:
            out.append("\\\\" if c == "\\" else c)
            i += 1
    return "".join(out)


class KerberosRule:
    """One ``DEFAULT`` or ``RULE:[n:format](match)s/from/to/g/L`` rule (Kafka's KerberosRule)."""

    def __init__(self, text: str, default_realm: str, m: re.Match):
        self.text = text
        self.default_realm = default_realm
        self.is_default = m.group(2) is not None
        if not self.is_default:
            self.components = int(m.group(5))
            self.format = m.group(6)
            self.match = re.compile(m.group(8)) if m.group(8) is not None else None
            self.from_pattern = re.compile(m.group(10)) if m.group(10) is not None else None
            self.to = _java_replacement(m.group(11)) if m.group(11) is not None else None
            self.repeat = m.group(12) == "g"
            self.lower, self.upper = m.group(13) == "L", m.group(13) == "U"
        else:
            self.lower = self.upper = False

    def __repr__(self) -> str:
        return self.text

    def _format(self, params: list[str]) -> str:
        out = []
        start = 0
        while start < len(self.format):
            m = _PARAMETER.match(self.format, start)
            out.append(m.group(1))
            if m.group(3) is not None:
                if m.group(3) == "":
                    raise NoMatchingRule(f"bad format in username mapping in {m.group(3)}")
                n = int(m.group(3))
                if n >= len(params):
                    raise NoMatchingRule(f"index {n} from {self.format} is outside of the valid range 0 to "
                                         f"{len(params) - 1}")
                out.append(params[n])
            if m.end() == start:
                break
            start = m.end()
        return "".join(out)

    def apply(self, params: list[str]) -> str | None:
        result = None
        if self.is_default:
            if params[0] == self.default_realm:
                result = params[1]
        elif len(params) - 1 == self.components:
            base = self._format(params)
            if self.match is None or self.match.fullmatch(base):
                if self.from_pattern is None:
                    result = base
                else:
                    result = self.from_pattern.sub(self.to, base, count=0 if self.repeat else 1)
        if result is not None and _NON_SIMPLE.search(result):
            raise NoMatchingRule(f"Non-simple name {result} after auth_to_local rule {self}")
        if result is not None and self.lower:
            result = result.lower()
        elif result is not None and self.upper:
            result = result.upper()
        return result


class ShortNamer:
    """``sasl.kerberos.principal.to.local.rules`` (Kafka's KerberosShortNamer): the first rule that applies."""

    def __init__(self, default_realm: str, rules: list[str]):
        self.rules = []
        for text in rules or ["DEFAULT"]:
            m = _RULE.match(text)
            if m is None:
                raise ConfigError(f"Invalid rule: {text}")
            if m.end() != len(text):
                raise ConfigError(f"Invalid rule: `{text}`, unmatched substring: `{text[m.end():]}`")
            self.rules.append(KerberosRule(text, default_realm, m))

    def short_name(self, principal: str) -> str:
        service, host, realm = parse_name(principal)
        if host is None:
            if realm is None:
                return service
            params = [realm, service]
        else:
            params = [realm, service, host]
        for rule in self.rules:
            result = rule.apply(params)
            if result is not None:
                return result
        raise NoMatchingRule(f"No rules apply to {principal}, rules {self.rules}")


def split_rules(value: str) -> list[str]:
    """The LIST value of the rules key, split as Kafka's ConfigDef splits a LIST (at every comma)."""
    return [r for r in re.split(r"\s*,\s*", value.strip()) if r]


def default_realm() -> str:
    """The default realm of the Kerberos configuration (``KRB5_CONFIG``), "" without one (as Kafka)."""
    import ctypes
    import ctypes.util

    try:  # MIT's library, which python-gssapi has loaded already
        lib = ctypes.CDLL("libkrb5.so.3")
    except OSError:
        name = ctypes.util.find_library("krb5")
        if name is None:
            return ""
        lib = ctypes.CDLL(name)
    ctx, realm = ctypes.c_void_p(), ctypes.c_char_p()
    if lib.krb5_init_context(ctypes.byref(ctx)):
        return ""
    try:
        if lib.krb5_get_default_realm(ctx, ctypes.byref(realm)):
            return ""
        value = realm.value.decode()
        lib.krb5_free_default_realm(ctx, realm)
        return value
    finally:
        lib.krb5_free_context(ctx)


# ------------------------------------------------------------------ the server side of one login
class GssapiServer:
    """One login (GssKrb5Server): ``evaluate(token)`` until ``complete``; ``principal`` is the short name's."""

    token = None  # a GSSAPI login is never a delegation token's

    def __init__(self, acceptor: "Acceptor"):
        import gssapi

        self._gssapi = gssapi
        self.acceptor = acceptor
        self.context = gssapi.SecurityContext(creds=acceptor.credentials, usage="accept")
        self.stage = 0  # 0: context being established, 1: offer to send, 2: client's choice awaited
        self.complete = False
        self.client_name: str | None = None
        self.principal: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        try:
            return self._evaluate(token)
        except self._gssapi.exceptions.GSSError as e:
            raise GssapiFailed(e.gen_message()) from None
        except NoMatchingRule as e:
            raise GssapiFailed(f"Failed to set name for '{self.client_name}' based on Kerberos authentication "
                               f"rules: {e}") from None

    def _evaluate(self, token: bytes) -> bytes:
        if self.stage == 0:
            out = self.context.step(token) or b""
            if not self.context.complete:
                return out
            self.client_name = str(self.context.initiator_name)
            self.stage = 1
            if out:
                return out
        if self.stage == 1:
            self.stage = 2
            offer = bytes([NO_SECURITY_LAYER]) + MAX_BUFFER.to_bytes(3, "big")
            return self.context.wrap(offer, False).message
        if self.stage == 2:
            reply = self.context.unwrap(token).message
            if len(reply) < 4:
                raise GssapiFailed("Final handshake message is shorter than 4 bytes")
            if not reply[0] & NO_SECURITY_LAYER:
                raise GssapiFailed(f"Client selected unsupported protection: {reply[0]}")
            # an authorization id (reply[4:]) is not checked: Kafka's SaslServerCallbackHandler authorizes
            # any and keeps the authenticated name
            self.principal = "User:" + self.acceptor.short_names.short_name(self.client_name)
            self.complete = True
            self.stage = 3
            return b""  # GssKrb5Server's null: empty in SaslAuthenticate, no frame in the v0 exchange (sasl.py)
        raise GssapiFailed("GSSAPI exchange already complete")


class GssapiFailed(Exception):
    """A refused GSSAPI token (Kafka's SaslException): the client gets Kafka's generic message."""


class Acceptor:
    """A listener's GSSAPI side: its acceptor credentials (from the keytab) and its short-name rules."""

    def __init__(self, principal: str, keytab: str | None, short_names: ShortNamer):
        import gssapi

        self.principal = principal
        self.short_names = short_names
        name = gssapi.Name(principal, gssapi.NameType.kerberos_principal)
        try:
            self.credentials = gssapi.Credentials(name=name, usage="accept",
                                                  store={"keytab": keytab} if keytab else None)
            self.credentials.inquire()  # reads the keytab now: a missing key fails start-up, not a login
        except gssapi.exceptions.GSSError as e:
            raise ConfigError(f"Could not login: the keytab {keytab or '(default)'} has no key for {principal}: "
                              f"{e.gen_message()}") from None

    def server(self) -> GssapiServer:
        return GssapiServer(self)


def acceptor(config, listener: str, jaas: list[tuple[str, str, dict[str, str]]] | None) -> Acceptor:
    """The GSSAPI side of a listener from Kafka's keys: its JAAS entries (``sasl.parse_jaas``), service
    name and rules."""
    from broker.security.listeners import listener_setting

    try:
        import gssapi  # noqa: F401
    except ImportError:
        raise ConfigError(EXTRA_MESSAGE) from None
    key = f"listener.name.{listener.lower()}.gssapi.sasl.jaas.config"
    if not jaas:
        raise ConfigError(f"Could not find a 'KafkaServer' or '{listener.lower()}.KafkaServer' entry for GSSAPI: "
                          f"set {key}")
    module, _flag, opts = jaas[0]
    if module != "com.sun.security.auth.module.Krb5LoginModule":
        raise ConfigError(f"{key}: {module} is not com.sun.security.auth.module.Krb5LoginModule")
    if opts.get("useKeyTab", "false").lower() != "true" or not opts.get("principal"):
        raise ConfigError(f"{key}: the broker logs in from a keytab: set useKeyTab=true, keyTab=\"...\" and "
                          f"principal=\"...\"")
    service = listener_setting(config, listener, "sasl.kerberos.service.name")
    jaas_service = opts.get("serviceName")
    if jaas_service and service and jaas_service != service:
        raise ConfigError(f"Conflicting serviceName values found in JAAS and Kafka configs value in JAAS file "
                          f"{jaas_service}, value in Kafka config {service}")
    if not (jaas_service or service):
        raise ConfigError("No serviceName defined in either JAAS or Kafka config")
    try:
        parse_name(opts["principal"])
    except ValueError:
        raise ConfigError(f"Principal has name with unexpected format {opts['principal']}") from None
    rules = split_rules(listener_setting(config, listener, "sasl.kerberos.principal.to.local.rules", "DEFAULT"))
    return Acceptor(opts["principal"], opts.get("keyTab"), ShortNamer(default_realm(), rules))
