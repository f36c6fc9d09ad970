"""Console forms for an expert's knowledge base: upload documents, change chunking, search."""

from __future__ import annotations

import re
from typing import Any

from django import forms

from sbcommon.uploads import UploadRejected

from .ingest import check_upload, max_upload_bytes
from .points import CHUNK_SIZE_RANGE


def sentence(message: str) -> str:
    """A service's message ("the file is empty") as a sentence for the page ("The file is empty.")."""
    message = message.strip().rstrip(".")
    if re.match(r"^[\w.-]+: ", message):  # "notes.txt: the file is empty" keeps the file's name as it is
        return message + "."
    return message[:1].upper() + message[1:] + "."


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """Several files under one name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("widget", MultipleFileInput())
        super().__init__(*args, **kwargs)

    def clean(self, data: Any, initial: Any = None) -> list[Any]:
        single = super().clean
        if isinstance(data, list | tuple):
            return [single(d, initial) for d in data]
        return [single(data, initial)]


class UploadForm(forms.Form):
    """Documents to add to an expert's knowledge base."""

    files = MultipleFileField(allow_empty_file=True, label="Documents", error_messages={"required": "Choose one or more files to upload."})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["files"].widget.attrs.update(accept=".txt,.md,.markdown,.html,.htm,.pdf,.docx,.jsonl,text/plain,text/markdown,text/html,application/pdf")
        self.status = 400

    def clean_files(self) -> list[Any]:
        uploads = self.cleaned_data["files"]
        try:
            total = sum(u.size for u in uploads)
            if total > max_upload_bytes():
                raise UploadRejected(f"the files add up to {total:,} bytes; the limit is {max_upload_bytes():,} bytes", status=413)
            for upload in uploads:
                check_upload(upload)
        except UploadRejected as exc:
            self.status = exc.status
            raise forms.ValidationError(sentence(str(exc))) from exc
        return uploads


class ChunkingForm(forms.Form):
    """Chunk size and overlap of one expert; changing them rebuilds its collection."""

    chunk_size = forms.IntegerField(min_value=CHUNK_SIZE_RANGE[0], max_value=CHUNK_SIZE_RANGE[1], label="Chunk size",
                                    help_text="Target characters per chunk.")
    chunk_overlap = forms.IntegerField(min_value=0, label="Overlap", help_text="Characters shared by neighbouring chunks (under half the size).")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        size, overlap = data.get("chunk_size"), data.get("chunk_overlap")
        if size is not None and overlap is not None and overlap >= size // 2:
            self.add_error("chunk_overlap", f"The overlap must be less than half the chunk size ({size // 2}).")
        return data


class SearchForm(forms.Form):
    """A test query against one expert's collection."""

    q = forms.CharField(max_length=2000, label="Query", error_messages={"required": "Type something to search for."})
    limit = forms.IntegerField(min_value=1, max_value=20, initial=5, required=False)
