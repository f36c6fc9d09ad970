"""The layout rule: ``platform/`` is a folder on the path, never a package shadowing the stdlib."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_platform_folder_is_not_a_package():
    assert (ROOT / "platform").is_dir()
    assert not (ROOT / "platform" / "__init__.py").exists()


def test_stdlib_platform_module_still_works():
    import platform

    assert platform.system() in {"Linux", "Darwin", "Windows"}
    assert Path(platform.__file__).parent != ROOT / "platform"


def test_project_packages_import_from_the_platform_folder():
    import sbcommon
    import switchboard

    assert Path(switchboard.__file__).parent == ROOT / "platform" / "switchboard"
    assert Path(sbcommon.__file__).parent == ROOT / "platform" / "sbcommon"


def test_every_app_has_the_same_anatomy():
    for app in ("experts", "knowledge", "labeling", "routing"):
        for part in ("models.py", "services.py", "selectors.py", "ml/__init__.py"):
            assert (ROOT / app / part).exists(), f"{app}/{part} is missing"
