"""A loopback TCP proxy between clients and one broker that can drop or hold the
broker's responses: a network failure after the broker appended, made on purpose."""

from __future__ import annotations

import queue
import socket
import struct
import threading
import time

import msgpack

from sparklog.protocol import ApiKey

from .wire import read_exactly


def close_sockets(socks) -> None:
    """Shut down both directions of each socket, then close it (errors of an already
    dead socket ignored): what a proxy does to the two ends of a connection it drops."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


class Proxy:
    """Forwards TCP between clients and a broker on 127.0.0.1 (``target``, set once the
    broker runs). ``drop_produce`` drops that many Produce responses (closing the client
    connection, as a network failure after the broker appended); ``hold`` keeps
    responses back until cleared; ``produce_requests``, ``produce_responses`` and
    ``metadata_requests`` count what went through (responses when read from the broker,
    held ones included).
    Metadata responses are rewritten to name the proxy as the broker, so every
    connection of a client goes through it."""

    def __init__(self):
        self.target = None
        self.hold = threading.Event()
        self.reset()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self._stop = False
        self._conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self, drop_produce: int = 0):
        """Zero the counters, drop the next ``drop_produce`` Produce responses, stop
        holding."""
        self.drop_produce = drop_produce
        self.dropped = 0
        self.produce_requests = 0
        self.produce_responses = 0
        self.metadata_requests = 0
        self.hold.clear()

    def _accept(self):
        while not self._stop:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._conns += [client, upstream]
            kinds: list = []
            threading.Thread(target=self._requests, args=(client, upstream, kinds),
                             daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client, kinds),
                             daemon=True).start()

    def _requests(self, src, dst, kinds):
        try:
            while True:
                head = read_exactly(src, 4)
                body = read_exactly(src, struct.unpack(">i", head)[0])
                api_key = struct.unpack_from(">h", body)[0]
                if api_key == ApiKey.PRODUCE:
                    self.produce_requests += 1
                elif api_key == ApiKey.METADATA:
                    self.metadata_requests += 1
                kinds.append(api_key)
                dst.sendall(head + body)
        except (ConnectionError, OSError):
            self._close(src, dst)

    def _responses(self, src, dst, kinds):
        """Read the broker's responses as they come (counting them) and hand them to a
        forwarding thread, which holds or drops them: a held response does not keep the
        broker's next ones from being read."""
        out: queue.Queue = queue.Queue()
        threading.Thread(target=self._forward, args=(out, src, dst), daemon=True).start()
        try:
            while True:
                head = read_exactly(src, 4)
                body = read_exactly(src, struct.unpack(">i", head)[0])
                api_key = kinds.pop(0)
                if api_key == ApiKey.PRODUCE:
                    self.produce_responses += 1
                out.put((api_key, head, body))
        except (ConnectionError, OSError, IndexError):
            out.put(None)  # forward what was read, then close

    def _forward(self, out, src, dst):
        try:
            while True:
                item = out.get()
                if item is None:  # the broker's side closed
                    self._close(src, dst)
                    return
                api_key, head, body = item
                while self.hold.is_set():
                    time.sleep(0.01)
                if api_key == ApiKey.METADATA:  # advertise the proxy, not the broker
                    correlation = body[:4]
                    meta = msgpack.unpackb(body[4:], raw=False)
                    host, port = self.address.rsplit(":", 1)
                    for b in meta["brokers"]:
                        b["host"], b["port"] = host, int(port)
                    body = correlation + msgpack.packb(meta, use_bin_type=True)
                    head = struct.pack(">i", len(body))
                if api_key == ApiKey.PRODUCE and self.dropped < self.drop_produce:
                    self.dropped += 1
                    self._close(src, dst)  # the broker appended; the client never hears
                    return
                dst.sendall(head + body)
        except (ConnectionError, OSError):
            self._close(src, dst)

    _close = staticmethod(lambda *socks: close_sockets(socks))

    def close(self):
        """Stop accepting and close every connection."""
        self._stop = True
        self.sock.close()
        self._close(*self._conns)
