"""Embedding models: loading, the BERT encoder, the embedding scheduler thread."""
