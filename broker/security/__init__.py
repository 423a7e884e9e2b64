"""Security: listeners and TLS, SASL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER), SCRAM credentials, delegation
tokens, ACLs.

Design note: ``broker/security/README.md``.  Start-up uses three functions:

- :func:`configure_listeners` (before the data directory is touched): Kafka's listener
  keys parsed, TLS contexts loaded, so a bad key store stops start-up with its name;
- :func:`build` (with the data directory): the SCRAM store, the delegation tokens and the authorizer
  (``authorizer.class.name``, ``super.users``, ``allow.everyone.if.no.acl.found``);
- :func:`attach_authenticators`: each listener's authenticator (SASL ones read the
  SCRAM store; ``sasl.py`` is imported only when a listener uses SASL or TLS);
  :func:`load_oauth_keys` then fetches the JWKS of OAUTHBEARER listeners.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from broker.log.config import ConfigError
from broker.pipeline import AllowAll, Authorizer
from broker.security.acls import AclStore, StandardAuthorizer, parse_super_users
from broker.security.listeners import Listener, parse_listeners, server_ssl_context
from broker.security.scram import ScramStore
from broker.security.tokens import DelegationTokens

log = logging.getLogger("sharebroker.security")

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@dataclass(eq=False)
class Security:
    scram: ScramStore
    tokens: DelegationTokens  # disabled (every token API answers DELEGATION_TOKEN_AUTH_DISABLED) without a key
    acls: AclStore | None  # None without an authorizer (ACL APIs answer SECURITY_DISABLED, as Kafka)
    authorizer: Authorizer


def configure_listeners(config) -> list[Listener]:
    listeners = parse_listeners(config)
    for lst in listeners:
        if lst.tls:
            lst.ssl_context = server_ssl_context(config, lst.name)
    return listeners


def check_authorizer(config) -> str:
    name = (config.get("authorizer.class.name") or "").strip()
    if name and name != STANDARD_AUTHORIZER:
        raise ConfigError(f"authorizer.class.name {name} is not supported (use {STANDARD_AUTHORIZER}, "
                          f"or leave it empty for no authorization)")
    return name


def build(config, meta_dir: str | None, background=None) -> Security:
    scram = ScramStore(meta_dir, background)
    added = scram.bootstrap(config.get("sharebroker.scram.users"))
    if added:
        log.info("SCRAM credentials created from sharebroker.scram.users: %s", ", ".join(added))
    tokens = DelegationTokens(config, meta_dir, background)
    if check_authorizer(config):
        acls = AclStore(meta_dir, background)
        authorizer: Authorizer = StandardAuthorizer(acls, parse_super_users(config.get("super.users")),
                                                    config.get_bool("allow.everyone.if.no.acl.found", False))
        log.info("StandardAuthorizer: %d ACLs, super users: %s", len(acls.bindings),
                 ", ".join(sorted(authorizer.super_users)) or "none")
    else:
        acls, authorizer = None, AllowAll()
    return Security(scram, tokens, acls, authorizer)


def attach_authenticators(config, listeners: list[Listener], scram: ScramStore,
                          tokens: DelegationTokens | None = None) -> None:
    for lst in listeners:
        if lst.sasl or lst.tls:  # plaintext listeners keep theirs: SASL's code loads only when a listener uses it
            from broker.security.sasl import build_authenticator

            lst.authenticator = build_authenticator(config, lst, scram, tokens)


async def load_oauth_keys(listeners: list[Listener]) -> None:
    """Each OAUTHBEARER listener's JWKS, fetched off the event loop before the listeners open
    (a failure stops start-up, as Kafka's ``RefreshingHttpsJwks.init``)."""
    for lst in listeners:
        keys = getattr(lst.authenticator, "jwks", None)
        if keys is not None:
            await asyncio.to_thread(keys.load)
