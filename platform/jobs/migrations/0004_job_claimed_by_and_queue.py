from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("jobs", "0003_fill_task_name")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="claimed_by",
            field=models.CharField(
                blank=True, max_length=255,
                help_text="The process that runs it (or ran it last), as host:pid: a dead one's job is queued again at once.",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="queue",
            field=models.CharField(
                blank=True, max_length=64,
                help_text="The queue its task was sent to (empty: the task's own routing); the sweeper and retries send it there again.",
            ),
        ),
    ]
