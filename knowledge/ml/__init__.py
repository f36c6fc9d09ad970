"""Pure retrieval code (no Django): chunking, sparse term weights, rank fusion."""
