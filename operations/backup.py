"""``backup``: one consistent copy of the platform's data while it serves, with a manifest that says what it holds.

What a backup folder holds (``LAYOUT``): the database (SQLite's online backup, or ``pg_dump`` on
PostgreSQL), each vector collection's active Qdrant Edge version, the trained routers, the adapters,
uploads not yet imported, the prepared models that are small enough (the others by provenance: how to
make them again), and the secret key only when asked. ``manifest.json`` lists the app's version and
commit, the latest migration of each app, every file with its size and SHA-256, and when it was made.

Consistency: every collection's writer lock is held while the database is copied and the collections
are copied (writers wait, searches go on), so no document's vectors change between the two copies; a
document indexed just before it may be in the vectors and still pending in the database, which the
nightly refresh indexes again (indexing replaces a document's points, it never duplicates them). The
routers and adapters are copied after the database, so each version row has its folder (a version is
written to a temporary folder and renamed before its row is created).

Writes: everything goes to ``DIR/.partial/`` and is moved into ``DIR`` when complete; the manifest
is written last (a temporary file renamed), so a folder without one is a half-written backup.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder

from knowledge.stores.edge import EdgeQdrantStore

from .files import copy_tree, file_list, folder_bytes

FORMAT = 1
MANIFEST = "manifest.json"
PARTIAL = ".partial"
SQLITE_FILE = "database/switchboard.sqlite3"
PG_FILE = "database/switchboard.pgdump"
# A prepared model up to this size is copied; a larger one (the encoders' ONNX exports, 143 MB for MiniLM; the
# base LM's conversion, hundreds of MB) is recorded by provenance only: the command named in REMAKE makes it again.
MODEL_COPY_MAX_BYTES = 64 * 1024 * 1024
REMAKE = {
    "encoders": "manage.py prepare_encoder (run_platform --prepare runs it)",
    "reader": "manage.py train_reader",
    "tiny-lm": "manage.py build_tiny_lm",
}


class BackupRefused(Exception):
    """A backup or restore that cannot be done; the message says why in one line."""


def data_roots() -> dict[str, Path]:
    """The folders a backup copies, by their name in the backup."""
    var = Path(settings.VAR_DIR)
    return {"routers": Path(settings.ROUTER_DIR), "adapters": Path(settings.ADAPTER_DIR), "uploads": var / "uploads", "models": var / "models"}


def unfinished(path: Path) -> bool:
    # A router being written (.tmp-*), an adapter being trained (.work), an upload being stored (.NAME.part).
    return path.name.startswith((".tmp", ".work", PARTIAL)) or (path.name.startswith(".") and path.name.endswith(".part"))


def app_version() -> dict[str, Any]:
    """The installed package's version and, in a git checkout, its commit."""
    try:
        version = metadata.version("switchboard")
    except metadata.PackageNotFoundError:
        version = None
    commit = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        found = subprocess.run(["git", "-C", str(settings.BASE_DIR), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        commit = found.stdout.strip() or None if found.returncode == 0 else None
    return {"version": version, "commit": commit}


def latest_migrations(applied: set[tuple[str, str]]) -> dict[str, str]:
    """The latest applied migration of each app (migration names start with their number)."""
    return dict(sorted(applied))  # in order of app, then name: each app keeps its latest


def _sqlite_applied(path: Path) -> set[tuple[str, str]]:
    db = sqlite3.connect(path)
    try:
        return set(db.execute("SELECT app, name FROM django_migrations").fetchall())
    finally:
        db.close()


def pg_env() -> tuple[str, dict[str, str]]:
    """The database name and the libpq environment (host, port, user, password) of the default database."""
    db = connection.settings_dict
    env = {**os.environ}
    for key, var in (("HOST", "PGHOST"), ("PORT", "PGPORT"), ("USER", "PGUSER"), ("PASSWORD", "PGPASSWORD")):
        if db.get(key):
            env[var] = str(db[key])
    return str(db["NAME"]), env


def run_pg(command: list[str], env: dict[str, str]) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env)
    except FileNotFoundError as exc:
        raise BackupRefused(f"{command[0]} is not installed: PostgreSQL's client tools are needed to back up or restore a PostgreSQL database") from exc
    if done.returncode != 0:
        raise BackupRefused(f"{command[0]} failed: {(done.stderr.strip().splitlines() or ['exit status ' + str(done.returncode)])[-1][:300]}")


def _backup_database(work: Path) -> dict[str, Any]:
    (work / "database").mkdir(parents=True)
    if connection.vendor == "sqlite":
        target = sqlite3.connect(work / SQLITE_FILE)
        connection.ensure_connection()
        try:
            # One step (pages=-1): one read transaction, so the copy is the database at one moment; in WAL mode writers go on meanwhile.
            connection.connection.backup(target)
            target.execute("PRAGMA journal_mode=DELETE")  # one file: reading the copy makes no -wal or -shm beside it
        finally:
            target.close()
        return {"engine": "sqlite", "file": SQLITE_FILE, "migrations": latest_migrations(_sqlite_applied(work / SQLITE_FILE))}
    if connection.vendor == "postgresql":
        applied = set(MigrationRecorder(connection).applied_migrations())
        name, env = pg_env()
        run_pg(["pg_dump", "--format=custom", "--no-owner", "--no-privileges", f"--file={work / PG_FILE}", name], env)
        return {"engine": "postgresql", "file": PG_FILE, "migrations": latest_migrations(applied)}
    raise BackupRefused(f"backing up a {connection.vendor} database is not supported (SQLite and PostgreSQL are)")


def _models(work: Path, root: Path) -> list[dict[str, Any]]:
    """Copy each prepared model folder (a folder holding files) up to MODEL_COPY_MAX_BYTES; describe every one."""
    out = []
    if not root.is_dir():
        return out
    folders = sorted({p.parent for p in root.rglob("*") if p.is_file() and not any(unfinished(q) for q in p.relative_to(root).parents)})
    for folder in folders:
        if any(folder != f and f in folder.parents for f in folders):
            continue  # inside another model's folder: copied or described with it
        rel = folder.relative_to(root).as_posix()
        size = folder_bytes(folder)
        entry: dict[str, Any] = {"path": rel, "bytes": size, "copied": size <= MODEL_COPY_MAX_BYTES}
        if Path(settings.BASE_MODEL).resolve() == folder.resolve():
            entry["remake"] = "manage.py prepare_base_model (run_platform --prepare runs it)"
        else:
            entry["remake"] = REMAKE.get(rel.split("/")[0], "")
        for meta in ("meta.json", "config.json", "reader.json"):
            if (folder / meta).is_file() and (folder / meta).stat().st_size < 64 * 1024:
                entry.setdefault("provenance", {})[meta] = json.loads((folder / meta).read_text())
        if entry["copied"]:
            copy_tree(folder, work / "models" / rel, unfinished)
        out.append(entry)
    return out


def _secret(work: Path, include: bool) -> dict[str, Any]:
    from_env = bool(os.environ.get("SECRET_KEY"))
    info = {"source": "environment" if from_env else f"{settings.VAR_DIR}/secret_key", "included": include}
    if include:
        path = work / "secret_key"
        path.write_text(settings.SECRET_KEY)
        path.chmod(0o600)
    return info


def backup(dest: str | os.PathLike[str], *, include_secrets: bool = False, say: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Back up the database, the vector collections and the data folder's artefacts into the new or empty folder ``dest``.

    Args:
        dest: the backup's folder; created if missing, refused if it holds anything but an unfinished ``.partial``.
        include_secrets: also copy the secret key (by default the manifest says only where it is kept).
        say: called with a line for each step.

    Returns:
        The manifest written to ``dest/manifest.json``.

    Raises:
        BackupRefused: ``dest`` is not empty, the vectors are on a Qdrant server, or the database cannot be copied.
    """
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(p.name != PARTIAL for p in dest.iterdir())):
        raise BackupRefused(f"{dest} is not empty: back up into a new or empty folder")
    if settings.QDRANT_URL:
        raise BackupRefused("the vector collections are on a Qdrant server (QDRANT_URL): back them up with the server's snapshot API; "
                            "this command copies the embedded store only")
    started = time.monotonic()
    work = dest / PARTIAL
    shutil.rmtree(work, ignore_errors=True)  # what an interrupted backup into this folder left
    work.mkdir(parents=True)
    store = EdgeQdrantStore(settings.QDRANT_PATH)
    collections = {}
    with store.frozen() as versions:
        database = _backup_database(work)
        say(f"database ({database['engine']}): {len(database['migrations'])} apps' migrations")
        for name, folder in versions.items():
            copy_tree(folder, work / "qdrant" / name)
            collections[name] = {"version": folder.name}
    say(f"vector collections: {len(collections)}")
    roots = data_roots()
    for key in ("routers", "adapters", "uploads"):
        if roots[key].is_dir():
            copy_tree(roots[key], work / key, unfinished)
    models = _models(work, roots["models"])
    say(f"routers, adapters and uploads copied; models: {sum(m['copied'] for m in models)} copied, {sum(not m['copied'] for m in models)} by provenance")
    secret = _secret(work, include_secrets)
    files = file_list(work)
    for child in sorted(work.iterdir()):
        os.replace(child, dest / child.name)
    work.rmdir()
    manifest = {
        "format": FORMAT,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "app": app_version(),
        "database": {"engine": database["engine"], "file": database["file"]},
        "migrations": database["migrations"],
        "collections": collections,
        "roots": {"var_dir": str(settings.VAR_DIR), **{k: str(v) for k, v in roots.items()}},
        "models": models,
        "secret_key": secret,
        "files": files,
        "bytes": sum(f["bytes"] for f in files),
        "seconds": round(time.monotonic() - started, 2),
    }
    tmp = dest / f".{MANIFEST}.{uuid.uuid4().hex}"
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, dest / MANIFEST)
    say(f"backup complete: {len(files)} files, {manifest['bytes']:,} bytes in {manifest['seconds']} s")
    return manifest
