"""Readable repr for generated message objects (debugging and test failures)."""


def repr_message(obj) -> str:
    parts = []
    for name in obj.__slots__:
        value = getattr(obj, name)
        if name == "_unknown_tagged_fields" and not value:
            continue
        if isinstance(value, memoryview):
            value = f"<{len(value)} bytes>"
        parts.append(f"{name}={value!r}")
    return f"{type(obj).__qualname__}({', '.join(parts)})"
