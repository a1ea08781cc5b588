"""Decoding a request's video bytes into sampled frames and laying out the
tokens a Qwen3-VL model reads for them.

Runs on the worker's input thread (never the scheduler thread, never the
gateway's event loop) and touches no MLX: frames are read with OpenCV
(through mlx-vlm's ``load_video``, so the sampling is the library's own)
and turned into patches by the processor's NumPy video processor.

OpenCV reads only from a path, so each video is written to a private
temporary file (in ``/dev/shm`` when the machine has it, so the bytes stay
in memory) that is deleted in a ``finally`` whether decoding succeeds or
not. Limits, checked in this order for each video:

1. count: at most ``max_videos`` videos in one request;
2. size: at most ``max_bytes`` bytes each;
3. container: the bytes must open as a video with frames (OpenCV's bundled
   FFmpeg decides; the client's media type is not trusted);
4. duration: at most ``max_seconds`` seconds, read from the header before
   any frame is decoded;
5. frames: sampled at ``fps`` frames a second, at most ``max_frames`` (the
   sampling rule of mlx-vlm's ``load_video``); a clip too short to give
   two frames is refused.

Every refusal is a :class:`~worker.vision.images.ImageError` naming the
video by its index among the request's media parts.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any

from worker.vision.images import ImageError

SHM = "/dev/shm"
"""Where temporary video files go when it exists (memory-backed)."""


@dataclass(frozen=True)
class VideoLimits:
    """Per-request bounds and frame sampling for videos (see the module
    docstring); the config's ``video_*`` keys of a model."""

    max_videos: int = 2
    max_bytes: int = 32 * 1024 * 1024
    max_seconds: float = 600.0
    max_frames: int = 32
    fps: float = 2.0

    def sampling_key(self) -> str:
        """The sampling parameters as text: part of a video's cache key,
        since they change the frames (and so the tokens) a video gives."""
        return f"fps={self.fps}:max_frames={self.max_frames}"


@dataclass(frozen=True)
class SampledVideo:
    """One video's frames (``(T, C, H, W)`` uint8) and the source frame
    index and source frame rate of each, as sampled."""

    frames: Any
    indices: list[int]
    source_fps: float


def temp_dir() -> str | None:
    """The directory for temporary video files (None: the system's)."""
    return SHM if os.path.isdir(SHM) and os.access(SHM, os.W_OK) else None


def sample_video(blob: bytes, index: int, limits: VideoLimits, sampling: Any) -> SampledVideo:
    """The frames of video ``index`` (its bytes ``blob``) sampled under
    ``limits`` with mlx-vlm's ``sampling`` (a ``VideoSampling``). The
    temporary file it needs is gone when this returns or raises.

    Raises:
        ImageError: the video breaks a limit of the module docstring
            (naming it by ``index``).
    """
    if len(blob) > limits.max_bytes:
        raise ImageError(f"video {index} is {len(blob)} bytes, over the limit of {limits.max_bytes}", index)
    fd, path = tempfile.mkstemp(prefix="mlxd-video-", suffix=".bin", dir=temp_dir())
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(blob)
        seconds = _probe_seconds(path, index)
        if seconds > limits.max_seconds:
            raise ImageError(f"video {index} lasts {seconds:.1f} s, over the limit of {limits.max_seconds:g} s", index)
        from mlx_vlm.utils import load_video

        try:
            frames, meta = load_video(path, sampling)
        except ValueError as exc:
            raise ImageError(f"video {index} has too few readable frames to sample ({exc})", index) from None
        return SampledVideo(frames, list(meta.frames_indices), float(meta.fps))
    finally:
        os.unlink(path)


def _probe_seconds(path: str, index: int) -> float:
    """The duration the header of the video at ``path`` states.

    Raises:
        ImageError: OpenCV cannot open it, or it states no frames or no
            frame rate.
    """
    import cv2

    capture = cv2.VideoCapture(path)
    try:
        if not capture.isOpened():
            raise ImageError(f"video {index} is not a video OpenCV can read (or it is damaged)", index)
        frames = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
        fps = float(capture.get(cv2.CAP_PROP_FPS) or 0.0)
    finally:
        capture.release()
    if frames < 1 or not fps > 0:
        raise ImageError(f"video {index} states no frames or no frame rate (damaged or not a video)", index)
    return frames / fps


def group_seconds(indices: list[int], source_fps: float, group: int) -> list[float]:
    """The time stamp of each temporal patch of ``group`` frames: the mean
    of the source times of its first and last frame (the last frame is
    repeated to fill the final group, as the video processor pads it)."""
    padded = list(indices) + indices[-1:] * (-len(indices) % group)
    times = [i / source_fps for i in padded]
    return [(times[g] + times[g + group - 1]) / 2 for g in range(0, len(times), group)]


class VideoLayout:
    """How a Qwen3-VL model reads one video: per temporal patch, the text
    ``<t.t seconds>``, then the vision start token, ``tokens_per_frame``
    video tokens, and the vision end token. ``tokenizer`` encodes the time
    stamps; ``start_id`` / ``end_id`` / ``video_token_id`` are the model's
    vision start, vision end and video tokens."""

    def __init__(self, tokenizer: Any, start_id: int, end_id: int, video_token_id: int) -> None:
        self._tokenizer = tokenizer
        self.start_id = start_id
        self.end_id = end_id
        self.video_token_id = video_token_id

    def ids(self, seconds: list[float], tokens_per_frame: int, keys: list[int] | None = None) -> list[int]:
        """The ids of a video whose temporal patches start at ``seconds``;
        with ``keys`` (one per video token, in order), those keys stand in
        place of the video tokens (the prefix cache's view)."""
        out: list[int] = []
        at = 0
        for t in seconds:
            out += self._tokenizer.encode(f"<{t:.1f} seconds>", add_special_tokens=False)
            out.append(self.start_id)
            if keys is None:
                out += [self.video_token_id] * tokens_per_frame
            else:
                out += keys[at : at + tokens_per_frame]
            at += tokens_per_frame
            out.append(self.end_id)
        return out
