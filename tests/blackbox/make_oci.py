#!/usr/bin/env python3
"""Writes an OCI image layout as a tar (what `skopeo copy ... oci-archive:` writes), made here
from the host's /bin/dash, mkdir and chown and the libraries they load, for tests/blackbox/images.sh.

Usage: make_oci.py OUT.tar MARKER [hostile]
Layer 1 (plain tar): bin/sh, its libraries, etc/imported-marker (MARKER), etc/removed-by-whiteout,
a set-uid file and a device node. Layer 2 (gzip): the whiteout of etc/removed-by-whiteout.
With "hostile", layer 2 also holds an entry "../escaped" that must refuse the whole import.
"""
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile


def add_bytes(tar, name, data, mode=0o644, kind=tarfile.REGTYPE):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def libs_of(path):
    out = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        for word in line.split():
            if word.startswith("/") and os.path.exists(word):
                found.append(word)
    return found


def layer1(marker):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        # sh, and the mkdir and chown the gvisor backend's start runs (docs/IMAGES.md).
        libs = set()
        for prog, name in (("/bin/dash", "bin/sh"), ("/bin/mkdir", "bin/mkdir"),
                           ("/bin/chown", "bin/chown")):
            with open(prog, "rb") as f:
                add_bytes(tar, name, f.read(), 0o755)
            libs.update(libs_of(prog))
        for lib in sorted(libs):
            with open(os.path.realpath(lib), "rb") as f:
                add_bytes(tar, lib.lstrip("/"), f.read(), 0o755)
        add_bytes(tar, "etc/imported-marker", (marker + "\n").encode())
        add_bytes(tar, "etc/removed-by-whiteout", b"gone\n")
        add_bytes(tar, "usr/bin/setuid-tool", b"#!/bin/sh\n", 0o4755)
        info = tarfile.TarInfo("dev/evil-mem")
        info.type = tarfile.CHRTYPE
        info.devmajor, info.devminor = 1, 1
        info.mode = 0o666
        tar.addfile(info)
    return buf.getvalue()


def layer2(hostile):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        add_bytes(tar, "etc/.wh.removed-by-whiteout", b"")
        if hostile:
            add_bytes(tar, "../escaped", b"outside\n")
    return gzip.compress(buf.getvalue())


def main():
    out, marker = sys.argv[1], sys.argv[2]
    hostile = len(sys.argv) > 3 and sys.argv[3] == "hostile"
    blobs = {}

    def blob(data):
        d = hashlib.sha256(data).hexdigest()
        blobs[d] = data
        return "sha256:" + d, len(data)

    l1, s1 = blob(layer1(marker))
    l2, s2 = blob(layer2(hostile))
    cfg, scfg = blob(json.dumps({"architecture": "amd64", "os": "linux",
                                 "rootfs": {"type": "layers", "diff_ids": []}}).encode())
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg,
                   "size": scfg},
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": l1, "size": s1},
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": l2,
             "size": s2},
        ]}).encode()
    m, sm = blob(manifest)
    index = json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": m, "size": sm}]})
    with tarfile.open(out, mode="w") as tar:
        add_bytes(tar, "oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add_bytes(tar, "index.json", index.encode())
        for d, data in blobs.items():
            add_bytes(tar, "blobs/sha256/" + d, data)


main()
