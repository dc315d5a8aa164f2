"""A connection needs its :class:`ConnectionContext` and nothing of the Broker: served
here by a listener, a real socket and a request handler of the test's own, with the
limits of a BrokerConfig applied and graceful stop through the context."""

from __future__ import annotations

import asyncio
import concurrent.futures

from sparklog.coordination.local import LocalCoordinationStore
from sparklog.errors import RecordTooLargeError
from sparklog.protocol.apis import ApiKey
from sparklog.protocol.codec import SIZE, decode_response, encode_request
from sparklog.security.config import SecurityConfig
from sparklog.security.session import BrokerSecurity
from sparklog.server.acceptor import Acceptor
from sparklog.server.config import BrokerConfig
from sparklog.server.server import ConnectionContext, protocol_factory
from sparklog.storage import open_fileio


async def _answer(reader: asyncio.StreamReader) -> tuple[int, dict]:
    (size,) = SIZE.unpack(await reader.readexactly(SIZE.size))
    return decode_response(await reader.readexactly(size))


async def _serve_with_a_context(root: str) -> None:
    fileio = open_fileio(root)
    security = BrokerSecurity(SecurityConfig.from_props("PLAINTEXT://127.0.0.1:0"),
                              LocalCoordinationStore(root, fileio))
    loop = asyncio.get_running_loop()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    seen = []

    async def handle(header, payload, position, ctx):
        seen.append((header.api_key, ctx.client_id, ctx.client_host))
        return {"error_code": 0, "error_message": "", "echo": header.correlation_id}

    config = BrokerConfig.from_props({"queued.max.requests": "3",
                                      "socket.request.max.bytes": "1024",
                                      "connections.max.idle.ms": "60000"})
    context = ConnectionContext.of_config(
        config, handle=handle, security=security,
        run_io=lambda fn, *args: loop.run_in_executor(pool, fn, *args))
    assert (context.max_queued_requests, context.max_request_bytes, context.max_idle) == \
        (3, 1024, 60.0)
    holder: list[Acceptor] = []
    acceptor = Acceptor(loop, protocol_factory(context, lambda r: holder[0].on_closed(r.peer_ip)),
                        "127.0.0.1", 0, max_connections=4, max_connections_per_ip=4)
    holder.append(acceptor)
    acceptor.start()
    try:
        reader, writer = await asyncio.open_connection(*acceptor.address)
        writer.write(encode_request(ApiKey.METADATA, {}, 7, client_id="ctx-test"))
        assert await _answer(reader) == (7, {"error_code": 0, "error_message": "", "echo": 7})
        assert seen == [(ApiKey.METADATA, "ctx-test", "127.0.0.1")]
        # socket.request.max.bytes from the context: answered, the connection stays up
        writer.write(encode_request(ApiKey.METADATA, {"pad": b"x" * 2000}, 8))
        cid, body = await _answer(reader)
        assert cid == 8 and body["error_code"] == RecordTooLargeError.code, body
        assert "socket.request.max.bytes=1024" in body["error_message"]
        writer.write(encode_request(ApiKey.METADATA, {}, 9, client_id="ctx-test"))
        assert (await _answer(reader))[0] == 9
        assert len(context.connections) == 1 and not context.stopping
        conns = context.stop_reading()  # graceful stop: no new request is read
        assert context.stopping and len(conns) == 1
        await asyncio.wait([c.task for c in conns], timeout=10)
        assert not context.connections
        assert await reader.read() == b""  # the connection was closed
        writer.close()
    finally:
        acceptor.close()
        pool.shutdown(wait=True)


def test_a_connection_is_served_by_its_context_alone(tmp_path):
    asyncio.run(_serve_with_a_context(tmp_path.as_uri()))
