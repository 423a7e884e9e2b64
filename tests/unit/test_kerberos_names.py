"""Kafka's principal-to-local rules (broker/security/kerberos.py): the cases of Kafka 4.4's
KerberosNameTest and KerberosRuleTest, and the settings a GSSAPI listener is refused with."""
from __future__ import annotations

import sys

import pytest

from broker.log.config import ConfigError
from broker.security import kerberos
from broker.security.kerberos import NoMatchingRule, ShortNamer, parse_name
from broker.security.sasl import parse_jaas


def test_parse_and_rules():
    namer = ShortNamer("REALM.COM", [r"RULE:[1:$1](App\..*)s/App\.(.*)/$1/g", r"RULE:[2:$1](App\..*)s/App\.(.*)/$1/g",
                                     "DEFAULT"])
    assert parse_name("App.service-name/example.com@REALM.COM") == ("App.service-name", "example.com", "REALM.COM")
    assert namer.short_name("App.service-name/example.com@REALM.COM") == "service-name"
    assert parse_name("App.service-name@REALM.COM") == ("App.service-name", None, "REALM.COM")
    assert namer.short_name("App.service-name@REALM.COM") == "service-name"
    assert namer.short_name("user/host@REALM.COM") == "user"
    assert parse_name("plain") == ("plain", None, None)
    assert namer.short_name("plain") == "plain"
    with pytest.raises(ValueError):
        parse_name("a/b/c@REALM")


@pytest.mark.parametrize("flag,convert", [("L", str.lower), ("U", str.upper)])
def test_case_conversion(flag, convert):
    namer = ShortNamer("REALM.COM", [f"RULE:[1:$1]/{flag}", f"RULE:[2:$1](Test.*)s/ABC///{flag}",
                                     f"RULE:[2:$1](ABC.*)s/ABC/XYZ/g/{flag}",
                                     rf"RULE:[2:$1](App\..*)s/App\.(.*)/$1/g/{flag}", f"RULE:[2:$1]/{flag}",
                                     "DEFAULT"])
    assert namer.short_name("User@REALM.COM") == convert("user")
    assert namer.short_name("TestABC/host@FOO.COM") == convert("test")
    assert namer.short_name("ABC_User_ABC/host@FOO.COM") == convert("xyz_user_xyz")
    assert namer.short_name("App.SERVICE-name/example.com@REALM.COM") == convert("service-name")
    assert namer.short_name("User/root@REALM.COM") == convert("user")


@pytest.mark.parametrize("rule", ["default", "DEFAUL", "DEFAULT/L", "DEFAULT/g", "rule:[1:$1]", "rule:[1:$1]/L/U",
                                  "rule:[1:$1]/U/L", "rule:[1:$1]/LU", "RULE:[1:$1/L", "RULE:[1:$1]/l",
                                  "RULE:[2:$1](ABC.*)s/ABC/XYZ/L/g"])
def test_invalid_rules(rule):
    with pytest.raises(ConfigError):
        ShortNamer("REALM.COM", [rule])


def test_default_only_maps_the_default_realm():
    namer = ShortNamer("REALM.COM", ["DEFAULT"])
    assert namer.short_name("alice@REALM.COM") == "alice"
    assert namer.short_name("kafka/host@REALM.COM") == "kafka"
    with pytest.raises(NoMatchingRule):
        namer.short_name("alice@OTHER.COM")


def test_parameters():
    def fmt(text, params):
        return ShortNamer("R", [f"RULE:[{len(params) - 1}:{text}]"]).short_name(
            "@".join(reversed(params)) if len(params) == 2 else f"{params[1]}/{params[2]}@{params[0]}")

    assert fmt("hello", ["R", "u"]) == "hello"
    assert fmt("$1 $0", ["R", "u"]) == "u R"
    with pytest.raises(NoMatchingRule):
        fmt("$2", ["R", "u"])  # out of range
    with pytest.raises(NoMatchingRule):
        fmt("hello $a", ["R", "u"])  # malformed
    with pytest.raises(NoMatchingRule, match="Non-simple name u@R"):
        fmt("$1@$0", ["R", "u"])


def test_java_replacement_groups():
    namer = ShortNamer("R", [r"RULE:[2:$1-$2](.*)s/(\w+)-(\w+)/$2_$1\$/"])
    assert namer.short_name("svc/host@R") == "host_svc$"


def test_rules_split_as_a_kafka_list():
    assert kerberos.split_rules("RULE:[1:$1]/L, DEFAULT") == ["RULE:[1:$1]/L", "DEFAULT"]


JAAS = ('com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/nonexistent" '
        'principal="kafka/localhost@R";')


def _config(**settings):
    return {"listener.name.sasl_plaintext.gssapi.sasl.jaas.config": JAAS, **settings}


def test_service_name_required_and_consistent():
    pytest.importorskip("gssapi")
    with pytest.raises(ConfigError, match="No serviceName defined in either JAAS or Kafka config"):
        kerberos.acceptor(_config(), "SASL_PLAINTEXT", parse_jaas(JAAS))
    with pytest.raises(ConfigError, match="Conflicting serviceName values"):
        kerberos.acceptor(_config(**{"sasl.kerberos.service.name": "kafka"}), "SASL_PLAINTEXT",
                          parse_jaas(JAAS.replace(";", ' serviceName="x";')))
    with pytest.raises(ConfigError, match="has no key for kafka/localhost@R"):
        kerberos.acceptor(_config(**{"sasl.kerberos.service.name": "kafka"}), "SASL_PLAINTEXT", parse_jaas(JAAS))


def test_missing_extra_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "gssapi", None)  # import gssapi raises ImportError
    with pytest.raises(ConfigError, match=r"sharebroker\[kerberos\]"):
        kerberos.acceptor(_config(), "SASL_PLAINTEXT", None)
