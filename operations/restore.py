"""``restore``: a backup (``operations.backup``) into an empty database and an empty data folder, or a refusal saying why.

Refused, before anything is written: a folder that is not a complete backup (no manifest, or a
``.partial`` left by an interrupted backup), a manifest of an unknown format, a schema newer than this
code (a migration the code does not have), a file whose size or checksum differs from the manifest, a
database of another engine than the backup's, a Qdrant server (``QDRANT_URL``), and a target that
already holds data: a database with tables, vector collections, routers, adapters or uploads.

The paths the database records (router and adapter folders, a base model under the data folder) are
moved from the backup's folders to this installation's. The secret key is written only when the
backup holds one and ``SECRET_KEY`` is not set in the environment; without it, users sign in again.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, connections
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader

from experts.services import relocate_adapter_folders
from knowledge.stores.edge import EdgeQdrantStore
from routing.services import relocate_router_folders

from .backup import FORMAT, MANIFEST, PARTIAL, BackupRefused, data_roots, pg_env, run_pg, unfinished
from .files import copy_sparse, copy_tree, verify


def read_manifest(source: Path) -> dict[str, Any]:
    """The manifest of the complete backup in ``source``.

    Raises:
        BackupRefused: not a folder, half-written (``.partial`` or no manifest), or a manifest this code cannot read.
    """
    if not source.is_dir():
        raise BackupRefused(f"{source} is not a folder")
    if (source / PARTIAL).exists() or not (source / MANIFEST).is_file():
        raise BackupRefused(f"{source} is a half-written backup (no {MANIFEST}{' and a ' + PARTIAL + ' folder' if (source / PARTIAL).exists() else ''}): "
                            "the backup that made it did not finish")
    try:
        manifest = json.loads((source / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise BackupRefused(f"{source / MANIFEST} is not readable JSON ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupRefused(f"{source / MANIFEST} has format {manifest.get('format') if isinstance(manifest, dict) else None!r}; this code reads format {FORMAT}")
    return manifest


def newer_migrations(latest: dict[str, str]) -> list[str]:
    """The backup's latest migrations (app -> name) that this code does not have: the backup's schema is newer."""
    loader = MigrationLoader(None, ignore_no_migrations=True, load=False)
    loader.load_disk()
    known = set(loader.disk_migrations)
    for migration in loader.disk_migrations.values():
        known.update(migration.replaces or [])
    return [f"{app}.{name}" for app, name in sorted(latest.items()) if (app, name) not in known]


def _target_data(roots: dict[str, Path]) -> list[str]:
    """What this installation already holds (empty: a restore may go ahead)."""
    found = []
    tables = connection.introspection.table_names()
    if tables:
        found.append(f"the database has {len(tables)} tables")
    qdrant = Path(settings.QDRANT_PATH)
    collections = [p.name for p in qdrant.iterdir() if p.is_dir() and ((p / "CURRENT").exists() or (p / "ACTIVE").exists())] if qdrant.is_dir() else []
    if collections:
        found.append(f"{qdrant} has {len(collections)} vector collections")
    for key in ("routers", "adapters", "uploads"):
        if roots[key].is_dir() and any(p.is_file() for p in roots[key].rglob("*")):
            found.append(f"{roots[key]} is not empty")
    return found


def check(source: str | os.PathLike[str]) -> dict[str, Any]:
    """Everything a restore checks before it writes; returns the manifest.

    Raises:
        BackupRefused: naming the first reason the backup cannot be restored here.
    """
    source = Path(source)
    manifest = read_manifest(source)
    newer = newer_migrations(manifest.get("migrations", {}))
    if newer:
        raise BackupRefused(f"the backup's schema is newer than this code ({', '.join(newer[:3])} unknown here): upgrade Switchboard, then restore")
    problem = verify(source, manifest.get("files", []))
    if problem:
        raise BackupRefused(f"the backup is damaged: {problem}")
    engine = manifest["database"]["engine"]
    if engine != connection.vendor:
        raise BackupRefused(f"the backup holds a {engine} database and DATABASE_URL names a {connection.vendor} one: restore into {engine} "
                            "(docs/OPERATIONS.md says how to move between them)")
    if settings.QDRANT_URL:
        raise BackupRefused("QDRANT_URL names a Qdrant server: restore into the embedded store (unset QDRANT_URL), then re-index into the server "
                            "(docs/OPERATIONS.md)")
    found = _target_data(data_roots())
    if found:
        raise BackupRefused(f"restore needs an empty database and data folder: {'; '.join(found)}")
    return manifest


def _restore_database(source: Path, manifest: dict[str, Any]) -> None:
    path = source / manifest["database"]["file"]
    if manifest["database"]["engine"] == "sqlite":
        connection.ensure_connection()
        backup = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)  # writes nothing beside the backup's file
        try:
            backup.backup(connection.connection)  # the whole database, replacing the empty one
        finally:
            backup.close()
        connection.close()  # the next query reconnects (journal mode and options set again)
        return
    name, env = pg_env()
    run_pg(["pg_restore", "--no-owner", "--no-privileges", "--exit-on-error", f"--dbname={name}", str(path)], env)


def restore(source: str | os.PathLike[str], *, say: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Restore the backup in ``source`` into this installation's empty database and data folder.

    Returns:
        The backup's manifest.

    Raises:
        BackupRefused: why it cannot be restored here (see ``check``); nothing has been written then.
    """
    source = Path(source)
    manifest = check(source)
    roots = data_roots()
    _restore_database(source, manifest)
    say(f"database restored ({manifest['database']['engine']}, made {manifest['created_at']})")
    store = EdgeQdrantStore(settings.QDRANT_PATH)
    for name in sorted(manifest.get("collections", {})):
        store.install(name, source / "qdrant" / name, copy=lambda src, dst: copy_tree(Path(src), Path(dst)))
    say(f"vector collections: {len(manifest.get('collections', {}))}")
    for key in ("routers", "adapters", "uploads", "models"):
        if (source / key).is_dir():
            copy_tree(source / key, roots[key], unfinished)
    old = manifest["roots"]
    moved = relocate_router_folders(old["routers"], str(roots["routers"])) + relocate_adapter_folders(
        old["adapters"], str(roots["adapters"]), old["var_dir"], str(settings.VAR_DIR))
    say(f"routers, adapters, uploads and models copied; {moved} stored paths moved to this data folder")
    remake = [m for m in manifest.get("models", []) if not m["copied"] and not (roots["models"] / m["path"]).exists()]
    for model in remake:
        say(f"model {model['path']} ({model['bytes']:,} bytes) was not copied: {model.get('remake') or 'make it again as it was made'}")
    if (source / "secret_key").is_file():
        if os.environ.get("SECRET_KEY"):
            say("the backup's secret key is not written: SECRET_KEY is set in the environment")
        else:
            key_file = Path(settings.VAR_DIR) / "secret_key"
            copy_sparse(source / "secret_key", key_file)
            key_file.chmod(0o600)
            say(f"secret key restored into {key_file} (restart the platform's processes to use it)")
    else:
        say("the backup holds no secret key: sessions signed with the old one are void (users sign in again)")
    pending = MigrationExecutor(connection).migration_plan(MigrationLoader(connection).graph.leaf_nodes())
    if pending:
        say(f"the backup's schema is older than this code: run `manage.py migrate` ({len(pending)} migrations to apply)")
    for alias in connections:
        connections[alias].close()
    return manifest
