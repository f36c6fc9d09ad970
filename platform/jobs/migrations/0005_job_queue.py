from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("jobs", "0004_job_claimed_by")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="queue",
            field=models.CharField(
                blank=True, max_length=64,
                help_text="The queue its task was sent to (empty: the task's own routing); the sweeper and retries send it there again.",
            ),
        ),
    ]
