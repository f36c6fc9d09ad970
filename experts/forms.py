"""Console forms for an expert's adapters: training data, training parameters, prompt."""

from __future__ import annotations

from typing import Any

from django import forms

from .choices import ExampleSplit
from .ml.lora import LoraParams
from .ml.lora_errors import LoraError
from .ml.prompting import validate_citation_format

MAX_IMPORT_BYTES = 20 * 1024 * 1024


class ExampleForm(forms.Form):
    question = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), max_length=20000, strip=True)
    answer = forms.CharField(widget=forms.Textarea(attrs={"rows": 4}), max_length=20000, strip=True,
                             help_text="The answer the expert should give; cite passages as [1], [2]… when it has them.")
    split = forms.ChoiceField(choices=[("", "automatic (about 1 in 10 held out)"), *ExampleSplit.choices], required=False)


class ImportForm(forms.Form):
    file = forms.FileField(help_text='JSON Lines: one {"question": …, "answer": …, "split": "train"|"eval" (optional)} per line.')

    def clean_file(self) -> bytes:
        upload = self.cleaned_data["file"]
        if upload.size > MAX_IMPORT_BYTES:
            raise forms.ValidationError(f"the file is larger than {MAX_IMPORT_BYTES // (1024 * 1024)} MB")
        return upload.read()


class TrainForm(forms.Form):
    """LoRA hyper-parameters; starts from ``services.default_training_params`` (``LoraParams``' defaults)."""

    rank = forms.IntegerField(min_value=1, max_value=256, help_text="LoRA rank r: capacity of the adapter.")
    alpha = forms.IntegerField(min_value=1, max_value=1024, help_text="Scaling: the update is multiplied by alpha / r.")
    dropout = forms.FloatField(min_value=0.0, max_value=0.9)
    target_modules = forms.CharField(max_length=300, help_text="Comma-separated module names, e.g. q_proj, v_proj.")
    epochs = forms.FloatField(min_value=0.01, max_value=100)
    learning_rate = forms.FloatField(min_value=1e-7, max_value=0.5)
    batch_size = forms.IntegerField(min_value=1, max_value=512)
    max_length = forms.IntegerField(min_value=16, max_value=32768, help_text="Tokens per example; the least relevant passages are dropped first.")
    checkpoint_steps = forms.IntegerField(min_value=1, max_value=100000, help_text="A restarted job resumes from the last checkpoint.")
    max_steps = forms.IntegerField(min_value=0, max_value=1000000, required=False, help_text="0 or empty: the epochs decide.")
    qlora = forms.BooleanField(required=False, label="QLoRA (4-bit) where a GPU and bitsandbytes are present")
    top_layers = forms.IntegerField(min_value=0, max_value=1000, required=False,
                                    help_text="Adapt only the last N layers (0 or empty: every layer); fewer layers train faster.")
    bf16 = forms.BooleanField(required=False, label="bfloat16 base weights where the hardware has them (the adapter stays float32)")

    def clean_target_modules(self) -> list[str]:
        modules = [m.strip() for m in self.cleaned_data["target_modules"].split(",") if m.strip()]
        if not modules:
            raise forms.ValidationError("name at least one module")
        return modules

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not self.errors:
            data["max_steps"] = data.get("max_steps") or 0
            data["top_layers"] = data.get("top_layers") or 0
            try:
                LoraParams.from_dict(data)
            except LoraError as exc:
                raise forms.ValidationError(str(exc)) from None
        return data

    @classmethod
    def initial_from(cls, params: dict[str, Any]) -> dict[str, Any]:
        return {**params, "target_modules": ", ".join(params.get("target_modules", []))}


class PromptForm(forms.Form):
    system_prompt = forms.CharField(widget=forms.Textarea(attrs={"rows": 6}), required=False, max_length=8000,
                                    help_text="The expert's instructions; fixed rules on citations and untrusted passages are added after them.")
    citation_format = forms.CharField(max_length=64, initial="[{index}]", help_text="How a passage is cited; must contain {index}.")
    activate = forms.BooleanField(required=False, initial=True, label="Serve it right away")

    def clean_citation_format(self) -> str:
        try:
            return validate_citation_format(self.cleaned_data["citation_format"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
