#!/usr/bin/env python3
"""Counts the public items of a crate and finds types its face names but does
not reach, from rustdoc's JSON output (nightly rustdoc; hidden items, such as
the engine's `internal` module, are left out by rustdoc itself).

    cargo +nightly rustdoc -p jpstore-engine --lib -- -Z unstable-options --output-format json
    python3 tests/tools/public_items.py target/doc/jpstore_engine.json [--list]

Counted: modules, types, traits, functions, constants, statics, type aliases
and the public inherent methods and associated constants of the types, each
reachable from the crate root by a public path (an item re-exported at two
paths counts once). Then every type a public field, variant or signature of
those items names is checked to be reachable too: a type of the crate that
is not is printed as a leak, and the exit status is 1.
"""
import json
import sys
from collections import Counter


def kind_of(item):
    return next(iter(item["inner"]))


def main():
    doc = json.load(open(sys.argv[1]))
    index, paths = doc["index"], doc["paths"]
    seen, counts, names = set(), Counter(), []

    def walk(item_id, path):
        item_id = str(item_id)
        if item_id in seen or item_id not in index:
            return
        item = index[item_id]
        kind = kind_of(item)
        inner = item["inner"][kind]
        if kind == "use":
            target = inner.get("id")
            if target is None:
                return
            if inner.get("is_glob"):
                module = index.get(str(target))
                if module and kind_of(module) == "module":
                    for child in module["inner"]["module"]["items"]:
                        walk(child, path)
                return
            walk(target, path)
            return
        seen.add(item_id)
        full = f"{path}::{item.get('name')}" if path else item.get("name")
        counts[kind] += 1
        names.append((kind, full))
        if kind == "module":
            for child in inner["items"]:
                walk(child, full)
        elif kind in ("struct", "enum", "union"):
            for impl_id in inner.get("impls", []):
                impl = index.get(str(impl_id))
                if not impl:
                    continue
                body = impl["inner"]["impl"]
                if body.get("trait") is not None or body.get("is_synthetic") or body.get("blanket_impl"):
                    continue
                for member in body["items"]:
                    m = index.get(str(member))
                    if m and m.get("visibility") == "public":
                        counts["method"] += 1
                        names.append(("method", f"{full}::{m.get('name')}"))

    walk(doc["root"], "")
    leaks = {}

    def scan(value, owner):
        if isinstance(value, dict):
            resolved = value.get("resolved_path")
            if isinstance(resolved, dict):
                rid = str(resolved.get("id"))
                p = paths.get(rid)
                if p and p.get("crate_id") == 0 and rid not in seen:
                    leaks.setdefault("::".join(p["path"]), set()).add(owner)
            for v in value.values():
                scan(v, owner)
        elif isinstance(value, list):
            for v in value:
                scan(v, owner)

    def public_members(inner):
        for impl_id in inner.get("impls", []):
            impl = index.get(str(impl_id))
            if not impl or impl["inner"]["impl"].get("trait") is not None:
                continue
            for member in impl["inner"]["impl"]["items"]:
                m = index.get(str(member))
                if m and m.get("visibility") == "public":
                    yield m

    for item_id in list(seen):
        item = index[item_id]
        kind = kind_of(item)
        inner = item["inner"][kind]
        name = item.get("name")
        fields = []
        if kind == "struct":
            shape = inner.get("kind", {})
            if isinstance(shape, dict) and "plain" in shape:
                fields = shape["plain"].get("fields", [])
            elif isinstance(shape, dict) and "tuple" in shape:
                fields = [f for f in shape["tuple"] if f]
        elif kind == "enum":
            for v in inner.get("variants", []):
                variant = index.get(str(v))
                if variant:
                    scan(variant["inner"], f"{name}::{variant.get('name')}")
                    shape = variant["inner"]["variant"]["kind"]
                    if isinstance(shape, dict):
                        fields += (shape.get("struct") or {}).get("fields", [])
                        fields += [f for f in (shape.get("tuple") or []) if f]
        elif kind in ("function", "type_alias"):
            scan(inner, name)
        for f in fields:
            field = index.get(str(f))
            if field and field.get("visibility") in ("public", "default"):
                scan(field["inner"], f"{name}.{field.get('name')}")
        if kind in ("struct", "enum"):
            for m in public_members(inner):
                scan(m["inner"], f"{name}::{m.get('name')}")

    print(f"{sum(counts.values())} public items: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    if "--list" in sys.argv:
        for kind, full in sorted(names, key=lambda n: n[1]):
            print(f"  {kind:<10} {full}")
    for path, owners in sorted(leaks.items()):
        print(f"leak: {path}, named by {', '.join(sorted(owners))}")
    sys.exit(1 if leaks else 0)


if __name__ == "__main__":
    main()
