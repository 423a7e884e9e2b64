"""Print a schema's fields as an indented tree: python tools/fields.py FetchRequest [...]"""
import json
import sys
from pathlib import Path

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


def walk(fields, ind=""):
    for f in fields:
        extra = [f"N={f['nullableVersions']}" if "nullableVersions" in f else "",
                 f"tag={f['tag']}" if "tag" in f else "", f"D={f['default']}" if "default" in f else ""]
        print(ind + f["name"], f["type"], f.get("versions"), " ".join(x for x in extra if x))
        if "fields" in f:
            walk(f["fields"], ind + "  ")


for name in sys.argv[1:]:
    d = json.loads((SCHEMAS / f"{name}.json").read_text())
    print("==", name, d.get("validVersions"), "flex", d.get("flexibleVersions"))
    walk(d["fields"])
    for c in d.get("commonStructs", []):
        print(" common", c["name"])
        walk(c["fields"], "   ")
