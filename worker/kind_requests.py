"""The input thread's handling of the requests of the kinds that do not
generate: embeddings, rerank, speech and transcription.

:class:`KindRequests` holds the model a worker of such a kind serves (kept
by the scheduler thread once loaded, :meth:`KindRequests.take_model`) and
turns each of its requests into a job for that kind's scheduler, or refuses
it with an error naming why. It runs on the worker's main thread
(:mod:`worker.main`), imports the kinds' packages only when a request of
theirs arrives, and no package imports it.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable

from shared.config import ModelConfig
from shared.protocol import EmbedRequest, RerankRequest, SpeechRequest, TranscribeRequest

if TYPE_CHECKING:
    from worker.model_setup import KindSetup

log = logging.getLogger("mlxd.worker")


class KindRequests:
    """The requests of a worker serving ``config``'s model, when its kind
    does not generate.

    ``refuse(request_id, kind, message, field=None)`` ends a request that never
    reaches the engine with an error; ``submit(job)`` queues a job for the
    scheduler (called on the input thread once the worker is ready). The
    model attributes stay None until :meth:`take_model`; a request of a
    kind whose model is not loaded is refused naming what the worker serves.
    """

    def __init__(
        self,
        config: ModelConfig,
        refuse: Callable[..., None],
        submit: Callable[[object], None],
    ) -> None:
        self.config = config
        self._refuse = refuse
        self._submit = submit
        self.embedding: Any = None  # the EmbeddingModel of an embedding worker
        self.reranker: Any = None  # the RerankModel of a rerank worker
        self.speech: Any = None  # the SpeechModel and Phonemizer of a speech worker
        self.transcriber: Any = None  # the WhisperModel of a transcription worker

    def take_model(self, setup: KindSetup) -> None:
        """Keep the model of a non-generating kind where the input thread
        reads it (a speech model with its phonemizer)."""
        if setup.kind == "embedding":
            self.embedding = setup.model
        elif setup.kind == "rerank":
            self.reranker = setup.model
        elif setup.kind == "speech":
            from worker.speech.text import Phonemizer

            self.speech = (setup.model, Phonemizer(setup.model.max_phonemes))
        elif setup.kind == "transcription":
            self.transcriber = setup.model

    def embed(self, request: EmbedRequest) -> None:
        """Input thread: tokenize an embedding request and queue it for the
        scheduler, or refuse it (wrong kind of model, bad ``dimensions``,
        bad or over-long inputs)."""
        from worker.embeddings.model import EmbeddingInputError
        from worker.embeddings.scheduler import EmbedJob

        model = self.embedding
        if model is None:
            self._refuse_wrong_kind(request.request_id, "embedding")
            return
        dims = request.dimensions
        if dims is not None and dims != model.dim:
            if dims > model.dim or not self.config.shorten_dimensions:
                allowed = f"1..{model.dim}" if self.config.shorten_dimensions else f"only {model.dim}"
                why = "" if self.config.shorten_dimensions else " (the model is not configured to shorten its vectors)"
                self._refuse(
                    request.request_id,
                    "invalid_request",
                    f"dimensions {dims} is not available for model '{self.config.name}': {allowed}{why}",
                    "dimensions",
                )
                return
        count = len(request.texts or request.token_ids or ())
        if count > self.config.max_inputs:
            self._refuse(
                request.request_id,
                "invalid_request",
                f"{count} inputs; model '{self.config.name}' takes at most {self.config.max_inputs} per request",
                "input",
            )
            return
        self._submit_prepared(
            request,
            "inputs",
            lambda: model.tokenizer.prepare(request),
            (EmbeddingInputError,),
            lambda inputs, deadline, now: EmbedJob(request.request_id, inputs, dims, deadline, now),
        )

    def transcribe(self, request: TranscribeRequest) -> None:
        """Input thread: decode a transcription's audio (numpy only) and queue
        it for the scheduler, or refuse it (wrong kind of model; an empty,
        unknown, corrupt or too long file, naming why)."""
        from worker.transcription.audio import AudioError, decode_audio
        from worker.transcription.scheduler import TranscribeJob

        if self.transcriber is None:
            self._refuse_wrong_kind(request.request_id, "transcription")
            return
        try:
            samples = decode_audio(request.audio, self.config.max_audio_seconds)
        except AudioError as exc:
            self._refuse(request.request_id, "invalid_request", str(exc), "file")
            return
        now = time.monotonic()
        job = TranscribeJob(
            request.request_id,
            samples,
            task=request.task,
            language=request.language,
            prompt=request.prompt,
            temperature=request.temperature,
            words=request.words,
            deadline=now + request.timeout if request.timeout else None,
            received=now,
        )
        self._submit(job)

    def own_kind(self) -> str:
        """What this worker serves: ``embedding``, ``rerank``, ``speech``,
        ``transcription`` or ``generate``."""
        if self.embedding is not None:
            return "embedding"
        if self.speech is not None:
            return "speech"
        if self.transcriber is not None:
            return "transcription"
        return "rerank" if self.reranker is not None else "generate"

    def rerank(self, request: RerankRequest) -> None:
        """Input thread: pair and tokenize a rerank request and queue it for
        the scheduler, or refuse it (wrong kind of model, too many
        documents, empty or over-long texts)."""
        from worker.rerank.model import RerankInputError
        from worker.rerank.scheduler import RerankJob

        model = self.reranker
        if model is None:
            self._refuse_wrong_kind(request.request_id, "rerank")
            return
        if len(request.documents) > self.config.max_inputs:
            self._refuse(
                request.request_id,
                "invalid_request",
                f"{len(request.documents)} documents; model '{self.config.name}' takes at most "
                f"{self.config.max_inputs} per request",
                "documents",
            )
            return
        self._submit_prepared(
            request,
            "documents",
            lambda: model.tokenizer.prepare(request),
            (RerankInputError,),
            lambda pairs, deadline, now: RerankJob(request.request_id, pairs, None, deadline, now),
        )

    def speak(self, request: SpeechRequest) -> None:
        """Input thread: check a speech request's voice, format and
        instructions, cut its text into phoneme chunks and queue it for the
        scheduler, or refuse it."""
        from worker.speech.encode import FORMATS, missing_encoder
        from worker.speech.model import SpeechInputError
        from worker.speech.scheduler import SpeechJob
        from worker.speech.text import SpeechTextError

        if self.speech is None:
            self._refuse_wrong_kind(request.request_id, "speech")
            return
        model, phonemizer = self.speech

        def chunks() -> list[str]:
            if request.instructions:
                raise SpeechInputError(
                    f"model '{self.config.name}' ({model.family}) cannot follow instructions: "
                    "it has no input for them (leave instructions out)",
                    "instructions",
                )
            if request.response_format not in FORMATS:
                raise SpeechInputError(f"response_format must be one of {', '.join(FORMATS)}", "response_format")
            missing = missing_encoder(request.response_format)
            if missing is not None:
                raise SpeechInputError(missing, "response_format")
            model.check_voice(request.voice)
            return phonemizer.chunks(request.input, request.voice)

        self._submit_prepared(
            request,
            "input",
            chunks,
            (SpeechInputError, SpeechTextError),
            lambda pieces, deadline, now: SpeechJob(
                request.request_id,
                pieces,
                request.voice,
                request.speed,
                request.response_format,
                request.stream,
                deadline,
                now,
            ),
        )

    def _refuse_wrong_kind(self, request_id: str, kind: str) -> None:
        """Input thread: refuse a request of ``kind`` (``embedding``,
        ``rerank``, ``speech``, ``transcription``) that this worker's model
        does not serve, naming what it serves."""
        from shared.model_kind import wrong_kind_message

        message = wrong_kind_message(self.config.name, self.own_kind(), kind)
        self._refuse(request_id, "invalid_request", message, "model")

    def _submit_prepared(
        self,
        request: EmbedRequest | RerankRequest | SpeechRequest,
        what: str,
        prepare: Callable[[], Any],
        known: tuple[type[Exception], ...],
        job: Callable[[Any, float | None, float], object],
    ) -> None:
        """Input thread: ``prepare()`` a request's inputs and queue
        ``job(inputs, deadline, received)`` for the scheduler (``deadline``
        from the request's ``timeout``, a ``time.monotonic()`` instant or
        None), or refuse it: an error of ``known`` with its ``message``,
        ``field`` and ``kind`` (``invalid_request`` when it has none); any
        other error as "the WHAT could not be prepared" (one request never
        takes the input thread down)."""
        try:
            inputs = prepare()
        except known as exc:
            kind = getattr(exc, "kind", "invalid_request")
            self._refuse(request.request_id, kind, exc.message, exc.field)  # type: ignore[attr-defined]
            return
        except Exception as exc:
            log.exception("could not prepare request %s", request.request_id)
            self._refuse(
                request.request_id, "invalid_request", f"the {what} could not be prepared: {type(exc).__name__}"
            )
            return
        now = time.monotonic()
        deadline = now + request.timeout if request.timeout else None
        self._submit(job(inputs, deadline, now))
