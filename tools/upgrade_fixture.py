"""Upgrade fixtures: a data folder made by an earlier release, and the answers that release gave there (issue 57).

    python tools/upgrade_fixture.py make COMMIT      writes tests/fixtures/upgrade/<short commit>/{data.tar.gz,expected.json}
    python tools/upgrade_fixture.py build VAR_DIR OUT          (under the release being recorded) a tiny workspace in VAR_DIR
    python tools/upgrade_fixture.py ask VAR_DIR QUESTIONS OUT  (under any release) migrate VAR_DIR's database, ask, answers to OUT

``make`` (run from a checkout with its .venv) checks COMMIT out into a throw-away git worktree, runs ``build``
there under that release's code, packs the data folder (the SQLite database, the vector collections, the
routers; not the encoder's ONNX export, which any release makes again from the same weights), then runs
``ask`` on it under that release and writes its answers to expected.json. ``build`` and ``ask`` use only
what every release since the numpy store has (``switchboard.demo.load_demo``, ``serving.chat.answer``), so
this one file drives old and new code alike. tests/platform/test_upgrade_fixtures.py unpacks each fixture,
runs ``ask`` under today's code and compares. Each release that changes the data folder adds one with
``make`` (docs/OPERATIONS.md, Make targets and CI).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "upgrade"
ARCHIVE = "data.tar.gz"
EXPECTED = "expected.json"
# What the fixture keeps of a data folder: the rest is made again by any release (models/encoders: the
# encoder's export; static, broker) or is the installation's own (secret_key: a new one is generated).
KEPT = ("switchboard.sqlite3", "qdrant", "routers", "uploads", "media")

# The tiny workspace: two of the demo's agencies, five documents each (the sources of the questions below, and
# small ones), every QUERY_STRIDE-th of their labelled train and test questions and all their validation ones (the
# fixture stays under 2 MB, and the router's knowledge-aware ranking, fitted on validation, is kept: it reads the store).
AGENCIES = ("dmv", "ssa")
DOCUMENTS = {
    "dmv": ["Moving to NY#3_0", "Federal REAL ID#3_0", "DIAL-IN search accounts#3_0", "Insurance lapses#3_0",
            "Lost, stolen, or destroyed plates#3_0"],
    "ssa": ["Benefits Planner: Retirement | Delayed Retirement Credits | Social Security Administration#2_0", "Benefits Planner | Social Security Credits and Benefit Eligibility | SSA#1_0",
            "Appeal A Decision | Social Security Administration#2_0", "Explore The Benefits You May Be Due#1_0",
            "my Social Security | Create an Account | Social Security Administratio#2_0"],
}
QUERY_STRIDE = 2
# Asked by ``build`` before the data folder is packed: the fixture holds this conversation, and FOLLOW_UP continues it.
OPENER = "Does it cost anything extra to get a REAL ID instead of a regular license?"
FOLLOW_UP = "Can I just get my REAL ID online or by mail?"
# (question, model): each routed question goes to one agency, one names its expert, one belongs to neither.
QUESTIONS = [
    ("I just moved to New York. How long do I have before I need a New York driver license?", "auto"),
    ("We run background checks for a law firm. What does DMV charge per record lookup through DIAL-IN?", "auto"),
    ("How many work credits do I need to get Social Security retirement?", "auto"),
    ("Setting up my online Social Security account, how long is the security code they text me good for?", "auto:fast"),
    ("If my disability appeal goes to a hearing, how far will I have to travel for it?", "ssa"),
    ("What is the best recipe for chocolate chip cookies?", "auto"),
]
# The fixture's conversation must outlive the years between making it and testing on it.
CONVERSATION_TTL_HOURS = 24 * 365 * 100


def _django(var_dir: Path) -> None:
    """Set Django up on the data folder ``var_dir``: its own SQLite database and embedded store, eager Celery, extractive answers."""
    for name in ("DATABASE_URL", "QDRANT_URL", "CELERY_BROKER_URL", "REDIS_URL"):
        os.environ.pop(name, None)
    os.environ.update({"VAR_DIR": str(var_dir), "DJANGO_SETTINGS_MODULE": "switchboard.settings", "CELERY_TASK_ALWAYS_EAGER": "1",
                       "GENERATOR": "extractive", "ROUTER_FAST_TIER": "0"})
    import django

    django.setup()


def build(var_dir: Path) -> dict[str, Any]:
    """The tiny workspace, through the release's own pipeline; returns the opener's conversation id."""
    _django(var_dir)
    from django.conf import settings
    from django.core.management import call_command

    from serving import chat
    from switchboard.demo import load_demo

    call_command("migrate", verbosity=0)
    demo = Path(settings.DEMO_DIR)
    tiny = var_dir / "tiny-demo"
    (tiny / "documents").mkdir(parents=True)
    agencies = json.loads((demo / "agencies.json").read_text())
    (tiny / "agencies.json").write_text(json.dumps({slug: agencies[slug] for slug in AGENCIES}))
    with open(demo / "queries.jsonl") as source, open(tiny / "queries.jsonl", "w") as out:
        rows = [(line, json.loads(line)) for line in source]
        kept = [line for line, row in rows if row["label"] in AGENCIES and row["split"] != "val"][::QUERY_STRIDE]
        out.writelines(kept + [line for line, row in rows if row["label"] in AGENCIES and row["split"] == "val"])
    for slug in AGENCIES:
        rows = {row["id"]: row for row in map(json.loads, open(demo / "documents" / f"{slug}.jsonl"))}
        (tiny / "documents" / f"{slug}.jsonl").write_text("".join(json.dumps(rows[i]) + "\n" for i in DOCUMENTS[slug]))
    summary = load_demo(tiny, say=lambda line: print(line, file=sys.stderr), n_experts=len(AGENCIES))
    shutil.rmtree(tiny)
    settings.CONVERSATION_TTL_HOURS = CONVERSATION_TTL_HOURS
    opener = chat.answer(OPENER, "auto")
    return {"conversation_id": opener.conversation_id, "demo": summary, "opener": _result(opener), "var_dir": str(var_dir)}


def _result(r: Any) -> dict[str, Any]:
    """What a release must answer alike: the route, the expert, the citations, the answer (scores for the record)."""
    return {
        "route": [e["slug"] for e in r.decision.experts], "abstained": r.decision.abstained, "router_version": r.decision.router_version,
        "router_scores": {slug: round(float(p), 4) for slug, p in sorted(r.decision.raw_scores.items())},
        "expert": r.expert, "experts_answering": list(r.experts_answering), "clarify": [c["slug"] for c in r.clarify],
        "refusal": getattr(r, "refusal", None),  # None: the release had no such field
        "grounded": r.grounded, "mode": r.mode, "sticky": r.sticky, "answer": r.answer,
        "citations": [{k: c.get(k) for k in ("expert", "document_id", "chunk_id", "title", "text", "score")} for c in r.citations],
    }


def ask(var_dir: Path, expected: Path) -> list[dict[str, Any]]:
    """Migrate ``var_dir``'s database with the running release, then ask ``expected``'s questions in order."""
    _django(var_dir)
    from django.core.management import call_command

    from serving import chat

    call_command("migrate", verbosity=0)
    fixture = json.loads(expected.read_text())
    _relocate(fixture["var_dir"], var_dir)
    out = []
    for q in fixture["questions"]:
        r = chat.answer(q["question"], q["model"], conversation_id=q.get("conversation_id", ""))
        out.append({**q, **_result(r)})
    return out


def _relocate(made_in: str, var_dir: Path) -> None:
    """Point the router rows at this data folder: every release so far records a router's folder as an absolute
    path, and the fixture's was made at ``made_in`` (a restore into another folder does the same)."""
    from routing.models import RouterVersion

    old = made_in.rstrip("/") + "/"
    for version in RouterVersion.objects.filter(path__startswith=old):
        version.path = str(var_dir / version.path[len(old):])
        version.save(update_fields=["path"])


def _pack(var_dir: Path, archive: Path) -> None:
    """The kept parts of ``var_dir`` as a gzipped tar (the database checkpointed and vacuumed first), written atomically."""
    with sqlite3.connect(var_dir / "switchboard.sqlite3") as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("VACUUM")
    db.close()

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if info.name.endswith((".lock", "-wal", "-shm")):
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        return info

    tmp = archive.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for name in KEPT:
            if (var_dir / name).exists():
                tar.add(var_dir / name, arcname=name, filter=clean)
    os.replace(tmp, archive)


def _run(tree: Path, *args: str) -> Any:
    """This script's ``args`` (the last one: its output file) under the code of ``tree``; returns what it wrote."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "platform"), str(tree)])}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], cwd=tree, env=env, check=False)
    if done.returncode:
        raise SystemExit(f"{args[0]} under {tree} failed (exit {done.returncode}); its log is above")
    return json.loads(Path(args[-1]).read_text())


def make(commit: str, encoders: Path | None) -> Path:
    """Record the fixture of ``commit``: its data folder and its answers (see the module docstring)."""
    short = subprocess.run(["git", "rev-parse", "--short=7", commit], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()
    subject = subprocess.run(["git", "log", "-1", "--format=%H %cI", commit], cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    target = FIXTURES / short
    if target.exists():
        raise SystemExit(f"{target} exists: remove it to make it again")
    work = Path(tempfile.mkdtemp(prefix=f"upgrade-{short}-"))
    tree, var_dir = work / "tree", work / "var"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT, check=True)
    try:
        if encoders is not None and encoders.is_dir():  # the encoder's export, shared instead of made again
            (var_dir / "models").mkdir(parents=True)
            (var_dir / "models" / "encoders").symlink_to(encoders.resolve(), target_is_directory=True)
        built = _run(tree, "build", str(var_dir), str(work / "built.json"))
        staged = work / "fixture"
        staged.mkdir()
        _pack(var_dir, staged / ARCHIVE)
        questions = [{"question": q, "model": m} for q, m in QUESTIONS]
        questions.insert(1, {"question": FOLLOW_UP, "model": "auto", "conversation_id": built["conversation_id"]})
        (staged / EXPECTED).write_text(json.dumps({"var_dir": built["var_dir"], "questions": questions}))
        answers = _run(tree, "ask", str(var_dir), str(staged / EXPECTED), str(work / "answers.json"))
        record = {"commit": subject[0], "committed": subject[1], "made_by": "tools/upgrade_fixture.py make", "var_dir": built["var_dir"], "demo": built["demo"],
                  "opener": {"question": OPENER, **built["opener"]}, "questions": questions, "answers": answers}
        (staged / EXPECTED).write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        FIXTURES.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staged, target)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
        shutil.rmtree(work, ignore_errors=True)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("make", help="record COMMIT's fixture into tests/fixtures/upgrade/")
    p.add_argument("commit")
    p.add_argument("--encoders", type=Path, default=ROOT / "var" / "models" / "encoders",
                   help="an ONNX export of the encoder to share (default: this checkout's var/models/encoders; missing: the release makes its own)")
    p = sub.add_parser("build", help="make the tiny workspace in VAR_DIR (under the release being recorded)")
    p.add_argument("var_dir", type=Path)
    p.add_argument("out", type=Path, help="where its conversation id and summary are written (JSON)")
    p = sub.add_parser("ask", help="migrate VAR_DIR and write the answers to QUESTIONS' questions (a fixture's expected.json) to OUT")
    p.add_argument("var_dir", type=Path)
    p.add_argument("questions", type=Path)
    p.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.command == "make":
        print(make(args.commit, args.encoders))
        return
    found = build(args.var_dir.resolve()) if args.command == "build" else ask(args.var_dir.resolve(), args.questions.resolve())
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(found))
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
