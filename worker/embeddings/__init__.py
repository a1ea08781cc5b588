"""Embedding models (``kind = "embedding"``).

Belongs here: loading an embedding model and turning token ids into vectors
(:mod:`~worker.embeddings.model`), the BERT encoder
(:mod:`~worker.embeddings.bert`), the loading steps every encoder directory
shares, for embeddings and rerank (:mod:`~worker.embeddings.encoder_files`),
and the embedding worker's scheduler thread
(:mod:`~worker.embeddings.scheduler`).

Imports: :mod:`worker.loading`, :mod:`worker.batch_loop`, :mod:`worker.messages`, :mod:`shared`, MLX.
Runs on the embedding scheduler thread.
"""
