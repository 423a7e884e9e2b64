"""Message classes that import their codec module on first use.

``from protocol.lazy_messages import JoinGroupResponse`` binds a :class:`LazyClass` that stands
for ``protocol.messages.join_group.JoinGroupResponse``: calling it, or reading any attribute
other than a nested class (``MAX_VERSION``, ``decode``), imports the module (once) and forwards
to the real class.  A nested class (a CamelCase name: ``JoinGroupResponse.JoinGroupResponseMember``)
read before that is a ``LazyClass`` too, so module-level aliases stay lazy.  The generated codecs
are about half of the code a process would otherwise import (30,000 lines, compiled at every start
when there is no bytecode, and ~4 MiB resident); a tool or test that never uses an API never loads its
module.  The broker itself loads them all before it accepts connections
(``broker.dispatch.load_request_path``): an import opens files, which fails at the open-file limit.

The module is named by the class (``CamelCase`` to ``snake_case``, ``Request``/``Response``
dropped), and a name whose module does not exist fails at the import, as a plain import would.
A ``LazyClass`` is a factory, not a type: ``isinstance`` and ``type(x) is`` need the real class
(``LazyClass.resolve()``).  Each call costs ~0.3 µs more than calling the class, so a handler module
does not keep them: the first time its API is served, ``broker.dispatch.Handler`` passes the module's
globals to :func:`resolve_names`, which puts the real classes in place of the stand-ins (module-level
aliases of nested classes included), and from then on the handler calls the classes themselves (the
broker does this for every handler at start-up).  The request header, which every request decodes, is
imported directly.
"""
from __future__ import annotations

import re
from importlib import import_module
from importlib.util import find_spec
from typing import Any, Callable, Iterator, Mapping

_SUFFIX = re.compile(r"(Request|Response)$")
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


class LazyClass:
    """Stands for the class at ``path`` (dotted, nested classes included) of ``module``."""

    __slots__ = ("_module", "_path", "_cls")

    def __init__(self, module: str, path: str):
        self._module = module
        self._path = path
        self._cls = None  # the real class, once resolved

    def resolve(self) -> type:
        cls = self._cls
        if cls is None:
            obj = import_module(self._module)
            for part in self._path.split("."):
                obj = getattr(obj, part)
            self._cls = cls = obj
        return cls

    def __call__(self, *args, **kwargs):
        return (self._cls or self.resolve())(*args, **kwargs)

    def __getattr__(self, name: str):
        if self._cls is None and name[:1].isupper() and not name.isupper():  # a nested class (CamelCase): stays lazy
            return LazyClass(self._module, f"{self._path}.{name}")
        return getattr(self._cls or self.resolve(), name)

    def __repr__(self) -> str:
        state = "loaded" if self._cls is not None else "not loaded"
        return f"<lazy {self._module}.{self._path} ({state})>"


class LazyMapping(Mapping):
    """A read-only mapping over ``keys`` whose value for a key is ``make(key)``, made on its first lookup
    and kept (the message and record registries: a class, its module imported then; the assignors)."""

    __slots__ = ("_keys", "_make", "_made")

    def __init__(self, keys, make: Callable[[Any], Any]):
        self._keys = keys  # a dict or set: what ``in`` and iteration see
        self._make = make
        self._made: dict = {}

    def __getitem__(self, key):
        try:
            return self._made[key]
        except KeyError:
            pass
        if key not in self._keys:
            raise KeyError(key)
        value = self._made[key] = self._make(key)
        return value

    def get(self, key, default=None):
        try:
            return self._made[key]
        except KeyError:
            return self[key] if key in self._keys else default

    def __contains__(self, key) -> bool:
        return key in self._keys

    def __iter__(self) -> Iterator:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"<lazy mapping of {len(self._keys)} keys, {len(self._made)} made>"


def resolve_names(namespace: dict) -> None:
    """Replace every :class:`LazyClass` among ``namespace``'s values (a module's globals) by its class."""
    for name, value in list(namespace.items()):
        if type(value) is LazyClass:
            namespace[name] = value.resolve()


def module_of(class_name: str) -> str:
    """``JoinGroupResponse`` -> ``protocol.messages.join_group``."""
    return "protocol.messages." + _CAMEL.sub("_", _SUFFIX.sub("", class_name)).lower()


def __getattr__(name: str) -> LazyClass:
    if not name[:1].isupper():
        raise AttributeError(name)
    module = module_of(name)
    if find_spec(module) is None:
        raise AttributeError(f"no message class {name} (no module {module})")
    proxy = globals()[name] = LazyClass(module, name)
    return proxy
