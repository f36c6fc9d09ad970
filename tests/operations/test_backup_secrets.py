"""The secret key's value is in a backup only when asked for; the manifest always says where it is kept."""

from __future__ import annotations

import json

from operations.backup import backup
from tests.operations.conftest import use_data_folder


def _everything(folder) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def test_a_backup_holds_no_secret_key_unless_asked(tmp_path, settings, transactional_db):
    use_data_folder(settings, tmp_path / "var")
    settings.SECRET_KEY = "k" * 20 + "-the-secret-value-" + "z" * 20
    manifest = backup(tmp_path / "plain")
    assert settings.SECRET_KEY.encode() not in _everything(tmp_path / "plain")
    assert not (tmp_path / "plain" / "secret_key").exists()
    assert manifest["secret_key"]["included"] is False

    manifest = backup(tmp_path / "with", include_secrets=True)
    assert (tmp_path / "with" / "secret_key").read_text() == settings.SECRET_KEY
    assert manifest["secret_key"]["included"] is True
    assert "secret_key" in {f["path"] for f in json.loads((tmp_path / "with" / "manifest.json").read_text())["files"]}
