"""Knowledge bases: each expert's documents, chunked, embedded and indexed in its own collection."""
