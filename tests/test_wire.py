"""The wire contract and its codec: round trips and refusal of bad frames."""

import msgspec
import pytest

from shared.codec import DecodeError, gateway_codec, worker_codec
from shared.protocol import (
    AbortRequest,
    ChatMessage,
    GenerateRequest,
    Heartbeat,
    RequestOutput,
    SamplingParams,
    Shutdown,
    StepOutputs,
    WorkerStats,
)


def test_gateway_messages_round_trip():
    codec = worker_codec()
    req = GenerateRequest(
        request_id="r1",
        sampling=SamplingParams(max_tokens=5, temperature=0.5, stop=["\n"], logit_bias={7: -3.0}, seed=1),
        messages=[ChatMessage(role="user", content="hi")],
    )
    for msg in (req, AbortRequest(["r1", "r2"]), Shutdown()):
        assert codec.decode(codec.encode(msg)) == msg


def test_worker_messages_round_trip():
    codec = gateway_codec()
    step = StepOutputs(step=3, outputs=[RequestOutput(request_id="a", text="x", completion_tokens=1)])
    beat = Heartbeat(worker_id="w", stats=WorkerStats(running=2, steps=9))
    for msg in (step, beat):
        assert codec.decode(codec.encode(msg)) == msg


@pytest.mark.parametrize(
    "frame",
    [
        b"\xc1garbage",
        msgspec.msgpack.encode({"type": "exec", "code": "import os"}),
        msgspec.msgpack.encode({"type": "abort", "request_ids": "not-a-list"}),
        msgspec.msgpack.encode([1, 2, 3]),
        b"",
    ],
)
def test_worker_rejects_bad_frames(frame):
    with pytest.raises(DecodeError):
        worker_codec().decode(frame)


def test_each_side_only_accepts_its_direction():
    # a worker-bound message is not something the gateway accepts, and back
    with pytest.raises(DecodeError):
        gateway_codec().decode(worker_codec().encode(Shutdown()))
    with pytest.raises(DecodeError):
        worker_codec().decode(gateway_codec().encode(Heartbeat(worker_id="w", stats=WorkerStats())))


def test_no_pickle_anywhere():
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent
    for package in ("gateway", "worker", "shared"):
        for path in (root / package).rglob("*.py"):
            text = path.read_text()
            assert "import pickle" not in text and "pickle.loads" not in text, path
            assert "recv_pyobj" not in text and "send_pyobj" not in text, path


def test_hello_carries_the_protocol_version():
    from shared.protocol import PROTOCOL_VERSION, Hello

    codec = gateway_codec()
    hello = Hello(worker_id="w-1", pid=7, model="m", protocol=PROTOCOL_VERSION)
    assert codec.decode(worker_codec().encode(hello)) == hello
    # a worker from before versioning (no field) decodes as version 0: refused
    old = msgspec.msgpack.encode({"type": "hello", "worker_id": "w-1", "pid": 7, "model": "m"})
    assert codec.decode(old).protocol == 0 != PROTOCOL_VERSION


def test_socket_paths_are_unique_per_model_and_short():
    from gateway.workers.process import worker_key
    from shared.sockets import endpoint_path, endpoints_for, make_socket_dir, remove_socket_dir

    long_a, long_b = "org/" + "x" * 60 + "-a", "org/" + "x" * 60 + "-b"
    names = ["org/a", "org_a", "org:a", long_a, long_b, "m" * 200]
    keys = [worker_key(n) for n in names]
    assert len(set(keys)) == len(names)
    assert worker_key("org/a") == worker_key("org/a")  # stable across restarts
    directory = make_socket_dir()
    try:
        for key in keys:
            for endpoint in vars(endpoints_for(directory, key, 99999)).values():
                path = endpoint_path(endpoint)
                assert len(path.encode()) < 104 and "/" not in path.removeprefix(directory + "/")
    finally:
        remove_socket_dir(directory)


def test_embedding_messages_round_trip():
    from shared.protocol import EmbedRequest

    codec = worker_codec()
    request = EmbedRequest(request_id="e1", texts=["a", "b"], truncate=True, dimensions=8, timeout=2.0)
    decoded = codec.decode(gateway_codec().encode(request))
    assert decoded == request and decoded.n == 1
    ids = EmbedRequest(request_id="e2", token_ids=[[1, 2], [3]])
    assert codec.decode(codec.encode(ids)) == ids
    vectors = bytes(range(16))
    step = StepOutputs(
        step=1,
        outputs=[
            RequestOutput(request_id="e1", prompt_tokens=5, finish_reason="stop", embeddings=vectors, embedding_dim=2)
        ],
    )
    out = gateway_codec().decode(worker_codec().encode(step))
    assert out.outputs[0].embeddings == vectors and out.outputs[0].embedding_dim == 2


def test_transcription_messages_round_trip():
    """A transcription request carries the upload's bytes; its terminal
    output the whole transcript (segments with words)."""
    from shared.protocol import TranscribeRequest, Transcript, TranscriptSegment, TranscriptWord

    request = TranscribeRequest(request_id="t1", audio=b"RIFF\x00audio", task="translate", language="de", words=True)
    decoded = worker_codec().decode(gateway_codec().encode(request))
    assert decoded == request and decoded.n == 1
    segment = TranscriptSegment(
        id=0, seek=0, start=0.0, end=1.5, text=" Hi", tokens=[50364, 2421, 50439], temperature=0.0,
        avg_logprob=-0.2, compression_ratio=0.5, no_speech_prob=0.01, words=[TranscriptWord(word=" Hi", start=0.0, end=0.4)],
    )  # fmt: skip
    transcript = Transcript(text=" Hi", language="english", duration=1.5, segments=[segment])
    step = StepOutputs(step=1, outputs=[RequestOutput(request_id="t1", finish_reason="stop", transcript=transcript)])
    assert gateway_codec().decode(worker_codec().encode(step)).outputs[0].transcript == transcript


def test_open_choices_counts_each_choice_end_once_and_an_error_ends_all():
    """The one count of open choices: a choice's end closes one, an
    error/abort closes every one still open, other outputs none."""
    from shared.protocol import OpenChoices, RequestOutput

    def out(index: int, reason: str | None) -> RequestOutput:
        return RequestOutput(request_id="r", index=index, finish_reason=reason)  # type: ignore[arg-type]

    choices = OpenChoices(3)
    assert (choices.close(out(0, None)), choices.open, choices.done) == (0, 3, False)
    assert (choices.close(out(1, "length")), choices.open) == (1, 2)
    assert (choices.close(out(0, "error")), choices.open, choices.done) == (2, 0, True)
    assert choices.close(out(2, "stop")) == 0  # nothing follows the end
    single = OpenChoices(1)
    assert single.close(out(0, "tool_calls")) == 1 and single.done
    given_up = OpenChoices(2)
    assert given_up.close_all() == 2 and given_up.done and given_up.close_all() == 0


def test_one_socket_factory_links_a_gateway_and_a_worker():
    """Both sides open their ends with ``open_worker_link``: a message
    pushed by either side reaches the other, and ``remove_socket_files``
    deletes the files (and, for an orphaned worker, the empty directory)."""
    import os

    import zmq

    from shared.sockets import endpoints_for, make_socket_dir, open_worker_link, remove_socket_files

    directory = make_socket_dir()
    endpoints = endpoints_for(directory, "link-test", 1)
    ctx = zmq.Context()
    gateway_send, gateway_receive = open_worker_link(ctx, endpoints, "gateway")
    worker_send, worker_receive = open_worker_link(ctx, endpoints, "worker")
    try:
        gateway_send.send(b"request")
        worker_send.send(b"output")
        assert worker_receive.poll(5000) and worker_receive.recv() == b"request"
        assert gateway_receive.poll(5000) and gateway_receive.recv() == b"output"
    finally:
        for sock in (gateway_send, gateway_receive, worker_send, worker_receive):
            sock.close(0)
        ctx.term()
    assert os.path.exists(directory)
    remove_socket_files(endpoints)
    assert os.listdir(directory) == []
    remove_socket_files(endpoints, directory=True)
    assert not os.path.exists(directory)


def test_a_failed_bind_closes_the_sockets_and_raises(tmp_path):
    """A bind that fails leaves no socket open (``term`` would block) and
    no socket file behind."""
    import os

    import zmq

    from shared.sockets import Endpoints, open_worker_link

    ctx = zmq.Context()
    try:
        bad = Endpoints(requests=f"ipc://{tmp_path}/missing/dir/x.req", outputs=f"ipc://{tmp_path}/x.out")
        try:
            open_worker_link(ctx, bad, "gateway")
        except zmq.ZMQError:
            pass
        else:
            raise AssertionError("binding under a missing directory must fail")
        assert not os.path.exists(f"{tmp_path}/x.out")
    finally:
        ctx.term()


def test_images_travel_by_value_and_loaded_says_vision():
    """A chat turn's images cross as bytes with their digest and place; an
    older frame without them decodes as no images; ``Loaded`` says whether
    the model takes images."""
    import hashlib

    from shared.protocol import ImagePart, Loaded

    blob = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    part = ImagePart(data=blob, sha256=hashlib.sha256(blob).hexdigest(), offset=3)
    req = GenerateRequest(
        request_id="r1",
        sampling=SamplingParams(),
        messages=[ChatMessage(role="user", content="see this", images=[part])],
    )
    codec = worker_codec()
    decoded = codec.decode(codec.encode(req))
    assert decoded == req and decoded.messages[0].images[0].data == blob
    plain = GenerateRequest(
        request_id="r2", sampling=SamplingParams(), messages=[ChatMessage(role="user", content="x")]
    )
    assert codec.decode(codec.encode(plain)).messages[0].images is None
    loaded = Loaded(worker_id="w", context_length=8, load_seconds=0.1, model_path="/m", vision=True)
    assert gateway_codec().decode(gateway_codec().encode(loaded)).vision is True


def test_kv_budget_stats_cross_and_older_heartbeats_read_as_no_budget():
    """The KV budget's heartbeat fields cross the wire; a heartbeat from an
    older worker (without them) decodes with them 0, and an older gateway,
    which knows none of them, still decodes a newer heartbeat (the fields
    are appended with defaults, so the protocol version stays)."""
    codec = gateway_codec()
    kv = dict(kv_bytes=5 << 20, kv_budget_bytes=8 << 20, kv_waiting=2, kv_preemptions=3, kv_waited=4, kv_tokens=600)
    beat = Heartbeat(worker_id="w", stats=WorkerStats(running=1, **kv))
    decoded = codec.decode(codec.encode(beat))
    assert {name: getattr(decoded.stats, name) for name in kv} == kv

    older = msgspec.msgpack.encode({"type": "heartbeat", "worker_id": "w", "stats": {"running": 1, "steps": 2}})
    stats = codec.decode(older).stats
    assert stats.steps == 2 and all(getattr(stats, name) == 0 for name in kv)

    class OlderStats(msgspec.Struct, kw_only=True):
        running: int = 0
        warm_tokens: int = 0

    class OlderHeartbeat(msgspec.Struct, tag="heartbeat", kw_only=True):
        worker_id: str
        stats: OlderStats

    assert msgspec.msgpack.decode(codec.encode(beat), type=OlderHeartbeat).stats.running == 1
