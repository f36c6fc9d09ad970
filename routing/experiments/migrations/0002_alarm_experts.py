"""Alarms record the experts they concern (``Alarm.experts``), and who sees one is read from it.

Existing alarms are filled in from what they were raised about: a load alarm's and an uncovered
cluster's subject is an expert's slug; an SRM alarm's is its experiment's number, which names the
experiment's expert, or for a router experiment the experts of both arms' router versions. Drift and
router-candidate alarms name no expert. An alarm whose experiment is gone names none (staff only).
"""

from django.db import migrations, models


def _experiment_experts(apps, subject):
    Experiment = apps.get_model("experiments", "Experiment")
    RouterVersion = apps.get_model("routing", "RouterVersion")
    if not subject.isdigit():
        return []
    experiment = Experiment.objects.filter(pk=int(subject)).select_related("expert").first()
    if experiment is None:
        return []
    if experiment.kind == "expert":
        return [experiment.expert.slug] if experiment.expert_id else []
    slugs = set()
    for experts in RouterVersion.objects.filter(version__in=[experiment.control_version, experiment.treatment_version]).values_list("experts", flat=True):
        slugs.update(s for s in (experts if isinstance(experts, list) else []) if isinstance(s, str))
    return sorted(slugs)


def fill_experts(apps, schema_editor):
    Alarm = apps.get_model("experiments", "Alarm")
    for alarm in Alarm.objects.all().iterator():
        if alarm.kind in ("load", "new_expert"):
            experts = [alarm.subject] if alarm.subject else []
        elif alarm.kind == "srm":
            experts = _experiment_experts(apps, alarm.subject)
        else:  # drift, router: about the router as a whole
            experts = []
        if experts:
            Alarm.objects.filter(pk=alarm.pk).update(experts=experts)


class Migration(migrations.Migration):

    dependencies = [
        ("experiments", "0001_initial"),
        ("routing", "0006_team_access"),
    ]

    operations = [
        migrations.AddField(
            model_name="alarm",
            name="experts",
            field=models.JSONField(
                blank=True, default=list,
                help_text="The slugs of the experts it concerns, recorded when it is raised: who sees it (selectors.visible_alarms). "
                          "Empty: it names no expert.",
            ),
        ),
        migrations.RunPython(fill_experts, migrations.RunPython.noop),
    ]
