#!/usr/bin/env python3
"""Takes a store's bytes apart and compresses the parts other ways.

    python3 benches/store_parts.py STORE_DIR

For a store of logs of version 2 and packs of version 2 (format-spec.md 3,
2.12), prints what the logs' heads sections (heads and aux) and body
sections hold, decoded and as stored, and the pack groups' raw and stored
bytes; then what the same bytes take compressed as one zstd stream per kind
(what separate records and groups cannot find across conversations), and
compressed record by record with a zstd dictionary trained on them (the
dictionary's own compressed bytes counted), at level 19, the level of
imports. BENCHMARKS.md ("Store size") quotes it on the quick bench's
import store.

Needs the `zstandard` package from PyPI (`pip install zstandard`).
"""
import glob
import struct
import sys

import zstandard as zs

LEVEL = 19
DCTX = zs.ZstdDecompressor()


def zlen(data, level=LEVEL, dict_data=None):
    c = zs.ZstdCompressor(level=level, dict_data=dict_data)
    return len(c.compress(data))


def log_parts(path):
    """The decoded heads+aux and bodies of each record of a version 2 log,
    and the stored sizes of both sections."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89JPLOG\r\n" or struct.unpack_from("<H", data, 8)[0] != 2:
        raise SystemExit(f"{path}: not a log of version 2")
    off = 16
    while off < len(data):
        heads_len, body_len = struct.unpack_from("<II", data, off)
        heads = data[off + 20 : off + 20 + heads_len]
        body = data[off + 20 + heads_len : off + 20 + heads_len + body_len]
        count, aux, decoded, heads_codec, body_codec = struct.unpack_from("<IIIBB", heads, 0)
        head_bytes = heads[16:] if heads_codec == 0 else DCTX.decompress(heads[16:])
        assert len(head_bytes) == 32 * count + aux, path
        if body_codec == 0:
            body_bytes = body
        else:
            runs = struct.unpack_from("<I", body, 0)[0]
            at = 4 + 8 * runs
            parts = []
            for i in range(runs):
                _, stored = struct.unpack_from("<II", body, 4 + 8 * i)
                parts.append(DCTX.decompress(body[at : at + stored]))
                at += stored
            body_bytes = b"".join(parts)
        assert len(body_bytes) == decoded, path
        yield head_bytes, body_bytes, heads_len, body_len
        off += 20 + heads_len + body_len


def pack_groups(path):
    """The raw content and stored payload length of each group of a pack."""
    data = open(path, "rb").read()
    off = 16
    while off < len(data) - 32:
        assert data[off : off + 4] == b"jpsG", path
        codec = data[off + 4]
        raw_len, stored = struct.unpack_from("<II", data, off + 8)
        payload = data[off + 20 : off + 20 + stored]
        raw = DCTX.decompress(payload) if codec == 1 else payload
        assert len(raw) == raw_len, path
        yield raw, stored
        off += 20 + stored


def main():
    root = sys.argv[1]
    heads, bodies, heads_stored, bodies_stored = [], [], 0, 0
    for log in sorted(glob.glob(root + "/conversations/*/events.log")):
        for h, b, hs, bs in log_parts(log):
            heads.append(h)
            bodies.append(b)
            heads_stored += hs
            bodies_stored += bs
    groups, groups_stored = [], 0
    for pack in sorted(glob.glob(root + "/blobs/packs/*.pack")):
        for raw, stored in pack_groups(pack):
            groups.append(raw)
            groups_stored += stored
    indexes = sum(len(open(p, "rb").read()) for p in glob.glob(root + "/blobs/packs/*.idx"))
    print(f"records: {len(bodies)}; pack groups: {len(groups)}; pack indexes: {indexes} bytes")
    print(f"heads + aux: {sum(map(len, heads))} decoded, {heads_stored} stored")
    print(f"bodies:      {sum(map(len, bodies))} decoded, {bodies_stored} stored")
    print(f"groups:      {sum(map(len, groups))} raw, {groups_stored} stored")
    print(f"as one stream each at level {LEVEL}:")
    print(f"  heads + aux {zlen(b''.join(heads))}, bodies {zlen(b''.join(bodies))}, groups {zlen(b''.join(groups))}")
    print(f"record by record with a dictionary trained on heads, aux and bodies, level {LEVEL}:")
    for size in (16 << 10, 64 << 10, 256 << 10):
        trained = zs.train_dictionary(size, heads + bodies, level=LEVEL)
        dict_stored = zlen(trained.as_bytes())
        h = sum(zlen(x, dict_data=trained) for x in heads)
        b = sum(zlen(x, dict_data=trained) for x in bodies)
        print(f"  {size >> 10} KiB: heads + aux {h}, bodies {b}, dictionary {dict_stored}; "
              f"{h + b + dict_stored} in all against {heads_stored + bodies_stored} stored")


if __name__ == "__main__":
    main()
