"""Request bodies: streamed to a blocking file object read in a worker thread, or read whole under a limit."""

from __future__ import annotations

import asyncio
import io
import queue
from collections.abc import Callable
from typing import BinaryIO, TypeVar

from starlette.requests import ClientDisconnect, Request

from api_common.errors import ApiError

T = TypeVar("T")
QUEUE_CHUNKS = 64  # at most ~64 receive chunks buffered: the upload is never held in memory
_EOF = b""


class _QueueReader(io.RawIOBase):
    """Raw stream whose bytes arrive through a queue; an exception in the queue is raised."""

    def __init__(self) -> None:
        super().__init__()
        self.queue: queue.Queue[bytes | BaseException] = queue.Queue(QUEUE_CHUNKS)
        self._pending = memoryview(b"")
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            if self._eof:
                return 0
            item = self.queue.get()
            if isinstance(item, BaseException):
                self._eof = True
                raise item
            self._eof = item == _EOF
            self._pending = memoryview(item)
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


async def _put(reader: _QueueReader, item: bytes | BaseException, job: asyncio.Future[T]) -> None:
    """Enqueue without blocking the loop; give up once the worker has stopped reading."""
    while not job.done():
        try:
            reader.queue.put_nowait(item)
            return
        except queue.Full:
            # Backpressure: the worker is slower than the network; wait for it to catch up.
            await asyncio.sleep(0.002)


async def consume_in_thread(request: Request, work: Callable[[BinaryIO], T]) -> T:
    """Run work(body_file) in a thread while this coroutine feeds it the request body.

    If the worker stops early (a rejected header), the rest of the body is still drained so
    the client gets the response instead of a reset connection.
    """
    reader = _QueueReader()
    job: asyncio.Future[T] = asyncio.get_running_loop().run_in_executor(
        None,
        work,
        io.BufferedReader(reader, 1 << 16),  # type: ignore[arg-type]
    )
    end: bytes | BaseException = _EOF
    try:
        async for chunk in request.stream():
            if chunk and not job.done():
                await _put(reader, chunk, job)
    except ClientDisconnect as exc:
        end = exc  # the worker sees the disconnect as a read error and rolls back
    except BaseException as exc:  # e.g. the guard's 413 past the body limit: roll back, then answer it
        await _put(reader, OSError("request body refused"), job)
        try:
            await job
        except Exception:  # noqa: BLE001 - the worker's error is the consequence; the refusal is the answer
            pass
        raise exc
    await _put(reader, end, job)
    return await job


async def read_limited_body(request: Request, *, limit: int) -> bytes:
    """The whole body, refused with 413 past `limit` bytes (checked on the header and on the stream), 422 if empty."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise ApiError(413, "payload_too_large", f"body exceeds {limit} bytes")
    chunks, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise ApiError(413, "payload_too_large", f"body exceeds {limit} bytes")
        chunks.append(part)
    if size == 0:
        raise ApiError(422, "validation_failed", "empty body")
    return b"".join(chunks)
