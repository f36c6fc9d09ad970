"""Django admin for experts, their versions and training examples (the console is the main tool)."""

from django.contrib import admin

from .models import Expert, ExpertVersion, TrainingExample


@admin.register(Expert)
class ExpertAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "team", "status", "is_fallback")
    list_filter = ("status", "team")
    search_fields = ("slug", "name")


@admin.register(ExpertVersion)
class ExpertVersionAdmin(admin.ModelAdmin):
    list_display = ("expert", "version", "status", "base_model", "n_train", "n_eval", "created_at", "activated_at")
    list_filter = ("status", "expert")
    readonly_fields = ("metrics", "training_params", "data_fingerprint", "job")


@admin.register(TrainingExample)
class TrainingExampleAdmin(admin.ModelAdmin):
    list_display = ("expert", "question", "source", "split", "created_at")
    list_filter = ("expert", "source", "split")
    search_fields = ("question", "answer")
