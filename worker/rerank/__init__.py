"""Rerankers: cross-encoders that score query-document pairs (``kind = "rerank"``).

Belongs here: loading a ``*ForSequenceClassification`` checkpoint (BERT or
the RoBERTa family) onto mlxd's own encoder (:mod:`worker.embeddings.bert`)
with its classification head (opened and its weights put in by the steps
every encoder directory shares, :mod:`worker.embeddings.encoder_files`),
pair tokenization within the model's limit (:mod:`~worker.rerank.model`),
and the rerank worker's scheduler thread,
which batches pairs as the embedding scheduler batches inputs
(:mod:`~worker.rerank.scheduler`).

Imports: :mod:`worker.embeddings`, :mod:`worker.loading`,
:mod:`worker.messages`, :mod:`shared`, MLX. Runs on the rerank
scheduler thread (the tokenizer on the input thread, without MLX).
"""
