"""A PEP 517 build backend for this package alone, on the standard library: a wheel of the
pure-Python package under src/ (py.typed included), an sdist, and an editable install.

It reads name, version, description and requires-python from pyproject.toml with a few
regular expressions (tomllib is 3.11+, and the package supports 3.9).
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "ephemeral"
TAG = "py3-none-any"


def _project() -> Dict[str, str]:
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("[project]", 1)[1].split("\n[", 1)[0]
    fields = {}
    for key in ("name", "version", "description", "requires-python"):
        m = re.search(r'^%s\s*=\s*"([^"]*)"' % re.escape(key), section, re.M)
        if not m:
            raise RuntimeError(f"pyproject.toml: [project] {key} is missing")
        fields[key] = m.group(1)
    return fields


def _metadata() -> bytes:
    p = _project()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
        f"Summary: {p['description']}",
        f"Requires-Python: {p['requires-python']}",
        "License: MIT",
        "Classifier: Programming Language :: Python :: 3",
        "Classifier: Typing :: Typed",
    ]
    readme = os.path.join(ROOT, "README.md")
    body = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    return ("\n".join(lines) + "\n\n" + body).encode("utf-8")


def _dist_info() -> str:
    p = _project()
    return f"{p['name']}-{p['version']}.dist-info"


def _package_files() -> List[Tuple[str, str]]:
    """(path in the wheel, path on disk) of every file of the package."""
    src = os.path.join(ROOT, "src", PACKAGE)
    out = []
    for name in sorted(os.listdir(src)):
        if name.endswith(".py") or name == "py.typed":
            out.append((f"{PACKAGE}/{name}", os.path.join(src, name)))
    return out


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def _write_wheel(directory: str, entries: List[Tuple[str, bytes]]) -> str:
    p = _project()
    filename = f"{p['name']}-{p['version']}-{TAG}.whl"
    info = _dist_info()
    entries = entries + [
        (f"{info}/METADATA", _metadata()),
        (f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: wheel_backend\nRoot-Is-Purelib: true\nTag: {TAG}\n".encode()),
    ]
    record = [_record_line(name, data) for name, data in entries] + [f"{info}/RECORD,,"]
    entries.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zi = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    return filename


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    entries = []
    for arcname, path in _package_files():
        with open(path, "rb") as f:
            entries.append((arcname, f.read()))
    return _write_wheel(wheel_directory, entries)


def build_editable(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                   metadata_directory: Optional[str] = None) -> str:
    pth = (os.path.join(ROOT, "src") + "\n").encode()
    return _write_wheel(wheel_directory, [(f"__editable__.{PACKAGE}.pth", pth)])


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    p = _project()
    base = f"{p['name']}-{p['version']}"
    filename = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tf:
        for rel in ["pyproject.toml", "README.md", "_build/wheel_backend.py"] + [
            os.path.relpath(path, ROOT) for _, path in _package_files()
        ]:
            path = os.path.join(ROOT, rel)
            if os.path.exists(path):
                tf.add(path, arcname=f"{base}/{rel}")
        pkg_info = _metadata()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg_info)
        tf.addfile(ti, io.BytesIO(pkg_info))
    return filename
