"""The adapters console: who sees and changes what, training data import/add, prompt versions, activation."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile

from experts.choices import VersionStatus
from experts.models import ExpertVersion, TrainingExample
from jobs.models import Job
from tests.factories import make_expert

pytestmark = pytest.mark.django_db
PAGE = "/experts/dmv/adapters/"


@pytest.fixture
def team(db):
    return Group.objects.create(name="dmv-team")


@pytest.fixture
def dmv(team):
    return make_expert("dmv", "DMV", team=team, public=False)


@pytest.fixture
def member(django_user_model, team):
    user = django_user_model.objects.create_user("member", password="pw")
    user.groups.add(team)
    return user


@pytest.fixture
def as_member(client, member):
    client.force_login(member)
    return client


def test_lora_pages_are_hidden_from_strangers_and_read_only_for_other_teams(client, django_user_model, dmv):
    assert client.get(PAGE).status_code == 302  # not signed in: to the login page
    stranger = django_user_model.objects.create_user("stranger", password="pw")
    client.force_login(stranger)
    assert client.get(PAGE).status_code == 404
    assert client.get(f"{PAGE}data/").status_code == 404
    dmv.team = None
    dmv.save()
    assert client.get(PAGE).status_code == 200  # no team: every signed-in user may look
    assert client.post(f"{PAGE}prompt/", {"system_prompt": "x", "citation_format": "[{index}]"}).status_code == 403
    assert not ExpertVersion.objects.exists()


def test_lora_bad_import_lists_each_line_and_stores_nothing(as_member, dmv):
    data = b'{"question": "Renew?", "answer": "Online."}\n{"question": "Plates?", "answer": ""}\nnope'
    response = as_member.post(f"{PAGE}data/import/", {"file": SimpleUploadedFile("x.jsonl", data)})
    body = response.content.decode()
    assert response.status_code == 400
    assert "line 2: &#x27;answer&#x27; must be a non-empty string" in body
    assert "line 3: not JSON" in body
    assert TrainingExample.objects.count() == 0


def test_lora_examples_are_imported_and_written_in_the_console(as_member, dmv):
    rows = [{"question": f"q{i}?", "answer": f"a{i}.", "split": "eval" if i == 0 else "train"} for i in range(3)]
    data = "\n".join(json.dumps(r) for r in rows).encode()
    response = as_member.post(f"{PAGE}data/import/", {"file": SimpleUploadedFile("x.jsonl", data)})
    assert response.status_code == 302
    as_member.post(f"{PAGE}data/add/", {"question": "How do I renew?", "answer": "Online [1].", "split": "train"})
    assert TrainingExample.objects.filter(expert=dmv).count() == 4
    assert as_member.post(f"{PAGE}data/add/", {"question": "Empty?", "answer": "   "}).status_code == 400
    page = as_member.get(f"{PAGE}data/?split=eval").content.decode()
    assert "q0?" in page
    assert "q1?" not in page


def test_lora_training_is_refused_with_a_reason_when_data_is_missing(as_member, dmv, settings, tmp_path):
    settings.BASE_MODEL = str(tmp_path / "missing")
    form = {"rank": 8, "alpha": 16, "dropout": 0.05, "target_modules": "q_proj, v_proj", "epochs": 1, "learning_rate": 0.0002,
            "batch_size": 4, "max_length": 256, "checkpoint_steps": 10, "max_steps": 0}
    response = as_member.post(f"{PAGE}train/", form)
    assert response.status_code == 400
    assert "does not exist" in response.content.decode()
    response = as_member.post(f"{PAGE}train/", {**form, "rank": 0})
    assert response.status_code == 400
    assert not Job.objects.filter(kind="train_adapter").exists()


def test_lora_prompt_edit_makes_a_version_and_older_ones_can_be_rolled_back_to(as_member, dmv):
    as_member.post(f"{PAGE}prompt/", {"system_prompt": "You are the DMV.", "citation_format": "[{index}]", "activate": "on"})
    as_member.post(f"{PAGE}prompt/", {"system_prompt": "Be brief.", "citation_format": "({index})", "activate": "on"})
    v1, v2 = ExpertVersion.objects.order_by("version")
    assert (v1.status, v2.status) == (VersionStatus.ARCHIVED, VersionStatus.ACTIVE)
    assert v2.citation_format == "({index})"
    page = as_member.get(f"{PAGE}?a=1&b=2").content.decode()
    assert "Roll back to" in page
    assert 'id="comparison"' in page
    assert "Be brief." in page
    response = as_member.post(f"{PAGE}versions/1/activate/")
    assert response.status_code == 302
    assert ExpertVersion.objects.get(status=VersionStatus.ACTIVE).version == 1
    bad = as_member.post(f"{PAGE}prompt/", {"system_prompt": "x", "citation_format": "no index"})
    assert bad.status_code == 400
    assert ExpertVersion.objects.count() == 2


def test_the_adapters_page_shows_each_version_s_held_out_answers_and_the_gate_s_verdict(as_member, dmv):
    ExpertVersion.objects.create(expert=dmv, version=1, status=VersionStatus.CANDIDATE, adapter_path="/x", n_train=40, n_eval=2,
                                 metrics={"held_out_f1": 0.41, "base_held_out_f1": 0.38, "held_out_n": 2, "beats_base": None,
                                          "gate": "not judged: 2 held-out questions, fewer than the 10 the gate needs; a person decides"})
    html = as_member.get(PAGE).content.decode()
    assert "F1 0.410 against the base model's 0.380 on 2 questions" in html
    assert "Not judged: 2 held-out questions, fewer than the 10" in html
