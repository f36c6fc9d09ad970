"""Pure ML code for experts (no Django): clustering of query embeddings, extractive answering."""
