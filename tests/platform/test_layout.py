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


def test_each_layer_has_its_home():
    assert (ROOT / "serving" / "chat.py").exists()
    assert (ROOT / "serving" / "route.py").exists()
    assert (ROOT / "console" / "overview.py").exists()
    assert (ROOT / "console" / "nav.py").exists()
    assert (ROOT / "evaluation" / "management" / "commands" / "evaluate.py").exists()
    for command in ("run_platform", "ensure_admin", "load_demo"):
        assert (ROOT / "platform" / "switchboard" / "management" / "commands" / f"{command}.py").exists()


def _checker():
    import importlib.util
    import sys

    if "check_layout" not in sys.modules:
        spec = importlib.util.spec_from_file_location("check_layout", ROOT / "tools" / "check_layout.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["check_layout"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules["check_layout"]


def test_the_cycle_check_finds_a_circle_and_passes_a_chain():
    check = _checker()
    circle = {"a.x": {"a.y"}, "a.y": {"b.z"}, "b.z": {"a.x"}, "c.w": {"a.x"}}
    assert check.strongly_connected(circle) == [{"a.x", "a.y", "b.z"}]
    assert check.strongly_connected({"a.x": {"a.y"}, "a.y": {"b.z"}, "b.z": set()}) == []
    assert [str(v) for v in check.check_cycles(circle)] == ["import cycle: a.x <-> a.y <-> b.z"]


def test_only_an_apps_services_and_tasks_may_import_each_other():
    check = _checker()
    assert check.check_cycles({"labeling.services": {"labeling.tasks"}, "labeling.tasks": {"labeling.services"}}) == []
    assert check.check_cycles({"labeling.services": {"knowledge.tasks"}, "knowledge.tasks": {"labeling.services"}}) != []
    assert check.check_cycles({"labeling.views": {"labeling.tasks"}, "labeling.tasks": {"labeling.views"}}) != []


def test_a_folder_over_a_quarter_of_the_code_and_a_long_module_are_reported(tmp_path):
    check = _checker()
    assert [v.rule for v in check.check_shares({"a": 30, "b": 24, "c": 23, "d": 23})] == ["folder too large"]
    assert check.check_shares({"a": 25, "b": 25, "c": 25, "d": 25}) == []
    module = tmp_path / "long.py"
    module.write_text('"""A module."""\n' + "x = 1\n" * 11)
    assert check.check_long_modules([module], max_lines=12) == []
    assert [v.rule for v in check.check_long_modules([module], max_lines=10)] == ["long module"]
    module.write_text('"""A module.\n\nLong because it is a test.\n"""\n' + "x = 1\n" * 11)
    assert [v.rule for v in check.check_long_modules([module], max_lines=10)] == ["long module"]  # no reason makes it short
