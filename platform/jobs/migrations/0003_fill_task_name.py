"""Record the Celery task of jobs created before rows recorded it (``task_name`` was added in 0002).

Retrying a job sends ``job.task_name`` again; rows from before 0002 have it empty. The kinds and task
names below are historical data: the tasks that ran each kind of job when ``task_name`` was
introduced. Kinds not listed (none existed then) stay empty and cannot be retried.
"""

from django.db import migrations

TASKS_BY_KIND = {
    "import_queries": "labeling.tasks.import_queries",
    "embed_queries": "labeling.tasks.embed_queries",
    "cluster_queries": "labeling.tasks.cluster_queries",
    "discover": "labeling.tasks.discover",
    "ingest_documents": "knowledge.tasks.ingest_expert_documents",
    "index_documents": "knowledge.tasks.index_expert_documents",
    "rebuild_index": "knowledge.tasks.rebuild_expert_index",
    "delete_document": "knowledge.tasks.delete_expert_document",
    "drop_collection": "knowledge.tasks.drop_expert_collection",
    "train_router": "routing.tasks.train_router",
}


def fill_task_name(apps, schema_editor):
    Job = apps.get_model("jobs", "Job")
    for kind, task_name in TASKS_BY_KIND.items():
        Job.objects.filter(kind=kind, task_name="").update(task_name=task_name)


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0002_delivery_and_heartbeat"),
    ]

    operations = [
        # Reversing keeps the names: they are right either way, and 0002's reversal drops the column.
        migrations.RunPython(fill_task_name, migrations.RunPython.noop),
    ]
