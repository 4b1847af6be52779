"""httpGet probes (and httpGet hooks) as the kubelet's pkg/probe/http does them.

The client: one HTTP/1.1 GET per connection (the kubelet's transport disables keep-alive) over a
non-blocking socket (the request sent at once, the reply read on the probes' 100 ms grid, see
poller.py; httpGet hooks share the client, so their reply too), or over an asyncio TLS stream for scheme HTTPS
(certificates not verified: InsecureSkipVerify). The response is parsed by httptools (llhttp,
the parser of Node.js, in C); the request is one line and a few headers, written here, with
every header value checked for CR, LF and NUL so a manifest cannot inject a header. Why not
aiohttp's client: a probe needs none of what it adds (pooling, cookies, decompression, tracing)
and it costs more CPU per probe (bench/http_client_cost.py prints both side by side; the figures:
bench/README.md, "The probes' HTTP client").

- Headers: the action's httpHeaders; User-Agent `kube-probe/<version>` and `Accept: */*` unless
  given (an empty Accept removes it); a Host header sets the request's host; Connection: close.
- Redirects are followed by hand, up to 10, only while they stay on the same host name (the
  kubelet's followNonLocalRedirects=false); a redirect elsewhere ends the chain.
- 200-399 is a success, but a final 3xx is the kubelet's warning `Probe terminated redirects,
  Response body: ...` (counted as a success); anything else fails with `HTTP probe failed with
  statuscode: N`; connection errors and timeouts fail with Go-like messages (`Get "url": dial tcp
  host:port: connect: connection refused`). At most 10 KiB of the body is read; the whole chain
  is bounded by timeoutSeconds.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Callable, Sequence

import httptools
from yarl import URL

from nodeagent import __version__
from nodeagent.agent.probes.poller import until
from nodeagent.agent.probes.results import MAX_OUTPUT, ProbeOutcome, failure, success, warning
from nodeagent.agent.probes.target import join_host_port
from nodeagent.agent.probes.tcp_probe import connect

MAX_REDIRECTS = 10
REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "kube-probe/" + ".".join(__version__.split(".")[:2])


class TooManyRedirects(Exception):
    pass


class ProtocolError(Exception):
    """The server's answer was not HTTP (or a header value would have broken the request)."""


def _check(value: str) -> str:
    if "\r" in value or "\n" in value or "\0" in value:
        raise ProtocolError(f"invalid header value {value!r}")
    return value


def encode_request(target: str, authority: str, headers: dict[str, str]) -> bytes:
    """GET <target> HTTP/1.1 with Host, the given headers and Connection: close."""
    lines = [f"GET {_check(target)} HTTP/1.1", f"Host: {_check(authority)}"]
    lines += [f"{_check(k)}: {_check(v)}" for k, v in headers.items()]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")


class _Response:
    """httptools callbacks: keeps the Location header and the first 10 KiB of the body."""

    def __init__(self) -> None:
        self.location: str | None = None
        self.body = bytearray()
        self.headers_complete = False
        self.complete = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"location":
            self.location = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.headers_complete = True

    def on_body(self, body: bytes) -> None:
        room = MAX_OUTPUT - len(self.body)
        if room > 0:
            self.body += body[:room]

    def on_message_complete(self) -> None:
        self.complete = True


def probe_url(scheme: str, host: str, port: int, path: str) -> URL:
    """The URL the kubelet builds: the path is parsed as a URL reference (query kept), "/" added."""
    if not path.startswith("/"):
        path = "/" + path
    return URL(f"{scheme.lower()}://{join_host_port(host, port)}{path}")


def request_headers(
    http_headers: Sequence[tuple[str, str]], user_agent: str = USER_AGENT
) -> tuple[dict[str, str], str | None]:
    """(headers, host override) as NewRequestForHTTPGetAction sets them."""
    headers: dict[str, str] = {}
    for name, value in http_headers:
        key = "-".join(part.capitalize() for part in name.split("-"))  # canonical MIME header key
        headers[key] = value if key not in headers else headers[key] + ", " + value
    host = headers.pop("Host", None)
    headers.setdefault("User-Agent", user_agent)
    if "Accept" not in headers:
        headers["Accept"] = "*/*"
    elif headers["Accept"] == "":
        del headers["Accept"]
    return headers, host


class _Plain:
    """A connected non-blocking socket: the request sent at once (a few hundred bytes fit the
    socket's buffer), the reply read on the probes' grid (poller.py): no registration on the loop."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    async def exchange(self, request: bytes, feed: Callable[[bytes], bool]) -> None:
        try:
            sent = self.sock.send(request)
        except BlockingIOError:
            sent = 0
        if sent < len(request):
            await asyncio.get_running_loop().sock_sendall(self.sock, request[sent:])
        await until(self._receive(feed))

    def _receive(self, feed: Callable[[bytes], bool]) -> Callable[[], bool]:
        sock = self.sock

        def check() -> bool:
            while True:
                try:
                    data = sock.recv(65536)
                except BlockingIOError:
                    return False
                if feed(data):
                    return True

        return check

    def close(self) -> None:
        self.sock.close()


class _Tls:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def exchange(self, request: bytes, feed: Callable[[bytes], bool]) -> None:
        self.writer.write(request)
        await self.writer.drain()
        while not feed(await self.reader.read(65536)):
            pass

    def close(self) -> None:
        self.writer.close()


class HttpProber:
    """The HTTP client of probes and hooks; holds the TLS context (made on first HTTPS use)."""

    def __init__(self) -> None:
        self._tls: ssl.SSLContext | None = None

    async def close(self) -> None:
        """Nothing is pooled; kept so owners can treat every client alike."""

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            self._tls = ctx
        return self._tls

    async def _open(self, url: URL) -> _Plain | _Tls:
        """The probes' one dial (tcp_probe.connect), then TLS over that socket for scheme HTTPS."""
        host, port = url.host or "", url.port or (443 if url.scheme == "https" else 80)
        sock = await connect(host, port)
        if url.scheme != "https":
            return _Plain(sock)
        try:
            reader, writer = await asyncio.open_connection(sock=sock, ssl=self._tls_context(),
                                                           server_hostname=host or None)
        except BaseException:
            sock.close()
            raise
        return _Tls(reader, writer)

    async def _once(self, url: URL, headers: dict[str, str], host: str | None) -> tuple[int, str | None, bytes]:
        """One request: (status, Location, first 10 KiB of body)."""
        authority = host or (url.raw_host or "") + ("" if url.is_default_port() else f":{url.port}")
        request = encode_request(url.raw_path_qs, authority, headers)
        conn = await self._open(url)
        response = _Response()
        parser = httptools.HttpResponseParser(response)

        def feed(data: bytes) -> bool:
            """What arrived: True when the reply is read (complete, closed, or 10 KiB of body)."""
            if not data:  # closed: a body without a length ends here
                if not response.headers_complete:
                    raise ProtocolError("server closed the connection before a response")
                return True
            parser.feed_data(data)
            return response.complete or len(response.body) >= MAX_OUTPUT

        try:
            await conn.exchange(request, feed)
            return parser.get_status_code(), response.location, bytes(response.body[:MAX_OUTPUT])
        except httptools.HttpParserError as e:
            raise ProtocolError(f"malformed HTTP response: {e}") from None
        finally:
            conn.close()

    async def get(
        self, url: URL, headers: dict[str, str], host: str | None, timeout_seconds: float
    ) -> tuple[int, bytes]:
        """GET with the kubelet's redirect rule: (final status, first 10 KiB of body)."""
        current = url
        async with asyncio.timeout(timeout_seconds):
            for _ in range(MAX_REDIRECTS + 1):
                status, location, body = await self._once(current, headers, host if current is url else None)
                if status not in REDIRECT_CODES or not location:
                    return status, body
                target = current.join(URL(location))
                if target.host != url.host:  # not followed: the kubelet returns this response
                    return status, body
                current = target
        raise TooManyRedirects(f"stopped after {MAX_REDIRECTS} redirects")

    async def probe(self, url: URL, headers: dict[str, str], host: str | None, timeout_seconds: float) -> ProbeOutcome:
        try:
            status, body = await self.get(url, headers, host, timeout_seconds)
        except TimeoutError:
            return failure(f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)')
        except ConnectionRefusedError:
            return failure(f'Get "{url}": dial tcp {join_host_port(url.host or "", url.port or 0)}: connect: '
                           "connection refused")
        except OSError as e:
            return failure(f'Get "{url}": {(os.strerror(e.errno) if e.errno else str(e)).lower()}')
        except (ProtocolError, TooManyRedirects) as e:
            return failure(f'Get "{url}": {e}')
        text = body.decode("utf-8", "replace")
        if 200 <= status < 400:
            if status >= 300:
                return warning(f"Probe terminated redirects, Response body: {text}")
            return success(text)
        return failure(f"HTTP probe failed with statuscode: {status}")
