"""The demo builder separates doc2dial's run-together elements, keeps real camel-case names, and rebuilds the committed demo."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT.parent / "shared" / "datasets" / "doc2dial"


def builder():
    if "build_demo" not in sys.modules:
        spec = importlib.util.spec_from_file_location("build_demo", ROOT / "tools" / "build_demo.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["build_demo"] = module
        spec.loader.exec_module(module)
    return sys.modules["build_demo"]


@pytest.mark.parametrize(("raw", "clean"), [
    ("Transfer Post-9/11 GI Bill benefitsTransfer your unused benefits.", "Transfer Post-9/11 GI Bill benefits Transfer your unused benefits."),
    ("Claims Intake CenterPO Box 4444Janesville , WI", "Claims Intake Center PO Box 4444 Janesville, WI"),
    ("Department of Motor Vehicles207 Genesee Street, Suite 6Utica, NY", "Department of Motor Vehicles 207 Genesee Street, Suite 6 Utica, NY"),
    ("we must suspend your driver license!We suspend 300,000", "we must suspend your driver license! We suspend 300,000"),
    ("Military OneSourceThis site helps", "Military OneSource This site helps"),
    ("Dental insurance through DentalMetLife", "Dental insurance through Dental MetLife"),
    ("If you re preparing, you can t apply yet: it s the school s rule, and I m told we ll see.",
     "If you're preparing, you can't apply yet: it's the school's rule, and I'm told we'll see."),
    ("You don t need it if you ve got one; Parkinson s disease qualifies.", "You don't need it if you've got one; Parkinson's disease qualifies."),
    ('Select the " Replace, Renew, or Change my License " option, then " TnnnnnC ".', 'Select the "Replace, Renew, or Change my License" option, then "TnnnnnC".'),
    ("If you are not ready to retire , call 1 - 800 - 772 - 1213 ; Note : ages 5 - 10 .", "If you are not ready to retire, call 1-800-772-1213; Note: ages 5-10 ."),
])
def test_run_together_elements_are_separated(raw, clean):
    assert builder().clean_text(raw) == clean


@pytest.mark.parametrize("text", [
    "Sign in to eBenefits or My HealtheVet with your DoD ID, or watch us on YouTube.",
    "Email BorrowerDefense@ed.gov or go to StudentAid.gov/app/launchConsolidation.action today.",
    "Plates with the configuration \"TnnnnnC\" are taxis.",
    'Choose "Hello" and "World", or "a b c" (quoted as written).',
    "Renew within 5 s of the prompt, choose item(s) a or b, and pay the U S fee.",
])
def test_names_written_in_camel_case_and_addresses_are_left_alone(text):
    assert builder().clean_text(text) == text


def test_the_dmv_template_lines_are_removed():
    raw = "Topic:\nID Card\nshow mydmv button in megamenu:\n\nDisable this transaction?:\n\nyes or no survey:"

    assert builder().clean_text(raw) == "Topic:\nID Card\n\n"


@pytest.mark.skipif(not (SOURCE / "docs.jsonl").exists(), reason="the shared doc2dial files are not here")
def test_the_committed_demo_is_what_the_builder_makes(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["build_demo.py", "--source", str(SOURCE), "--out", str(tmp_path)])
    builder().main()

    for path in [*sorted((ROOT / "demo" / "documents").glob("*.jsonl")), ROOT / "demo" / "queries.jsonl"]:
        built = tmp_path / path.relative_to(ROOT / "demo")
        assert built.read_text() == path.read_text(), f"{path.name} differs from a rebuild: run tools/build_demo.py"
    rows = [json.loads(line) for line in open(ROOT / "demo" / "documents" / "va.jsonl")]
    assert not any("benefitsTransfer" in row["text"] for row in rows)
    assert all(row["metadata"]["source"].startswith("doc2dial: the Veterans Affairs page") for row in rows)
