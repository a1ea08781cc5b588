"""The worker's input thread: a ``GenerateRequest`` into an engine admission.

Belongs here: the prompt builder (:mod:`~worker.prompting.builder`), chat
template rendering in the sandbox (:mod:`~worker.prompting.chat_render`), a
model's tool and reasoning formats (:mod:`~worker.prompting.model_formats`).

Imports: :mod:`worker.parsers`, :mod:`worker.sampling` (defaults, grammar
compilation), :mod:`worker.vision` (image inputs), :mod:`worker.messages` and
:mod:`shared`. Never imports MLX, directly or through a module it imports
at load: it runs on the input thread, which never touches MLX.
"""
