"""httpGet probes (and httpGet hooks) with aiohttp, as the kubelet's pkg/probe/http does.

- One shared ClientSession without keep-alive (the kubelet's transport disables it), TLS not
  verified for scheme HTTPS (InsecureSkipVerify), a total timeout of timeoutSeconds.
- Headers: the action's httpHeaders; User-Agent `kube-probe/<version>` and `Accept: */*` unless
  given (an empty Accept removes it); a Host header sets the request's host.
- Redirects are followed by hand, up to 10, only while they stay on the same host name (the
  kubelet's followNonLocalRedirects=false); a redirect elsewhere ends the chain.
- 200-399 is a success, but a final 3xx is the kubelet's warning `Probe terminated redirects,
  Response body: ...` (counted as a success); anything else fails with `HTTP probe failed with
  statuscode: N`; connection errors and timeouts fail with Go-like messages (`Get "url": dial tcp
  host:port: connect: connection refused`). At most 10 KiB of the body is read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import aiohttp
from yarl import URL

from nodeagent import __version__
from nodeagent.agent.probes.results import MAX_OUTPUT, ProbeOutcome, failure, success, warning
from nodeagent.agent.probes.target import join_host_port

MAX_REDIRECTS = 10
USER_AGENT = "kube-probe/" + ".".join(__version__.split(".")[:2])


def probe_url(scheme: str, host: str, port: int, path: str) -> URL:
    """The URL the kubelet builds (path as given, a leading "/" added when missing)."""
    if not path.startswith("/"):
        path = "/" + path
    return URL(f"{scheme.lower()}://{join_host_port(host, port)}{path}", encoded=False)


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


def _describe(url: URL, exc: BaseException) -> str:
    where = join_host_port(url.host or "", url.port or 0)
    if isinstance(exc, TimeoutError | asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)'
    if isinstance(exc, aiohttp.ClientConnectorError):
        cause = exc.os_error
        if isinstance(cause, ConnectionRefusedError):
            return f'Get "{url}": dial tcp {where}: connect: connection refused'
        return f'Get "{url}": dial tcp {where}: {cause.strerror or cause}'
    return f'Get "{url}": {exc}'


class HttpProber:
    """Owns the shared session; `close()` it at shutdown."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(force_close=True, limit=0, ssl=False, enable_cleanup_closed=False)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                                  skip_auto_headers=("Accept-Encoding",))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def get(
        self, url: URL, headers: dict[str, str], host: str | None, timeout_seconds: float
    ) -> tuple[int, bytes]:
        """One GET with the kubelet's redirect rule: (final status, first 10 KiB of body)."""
        session = self._get_session()
        hdrs = dict(headers)
        if host:
            hdrs["Host"] = host
        current = url
        async with asyncio.timeout(timeout_seconds):
            for _ in range(MAX_REDIRECTS + 1):
                async with session.get(current, headers=hdrs, allow_redirects=False) as resp:
                    body = await resp.content.read(MAX_OUTPUT)
                    location = resp.headers.get("Location")
                    if resp.status not in (301, 302, 303, 307, 308) or not location:
                        return resp.status, body
                    target = current.join(URL(location))
                    if target.host != url.host:  # not followed: the kubelet returns this response
                        return resp.status, body
                    current = target
            raise aiohttp.TooManyRedirects(resp.request_info, (), message=f"stopped after {MAX_REDIRECTS} redirects")

    async def probe(self, url: URL, headers: dict[str, str], host: str | None, timeout_seconds: float) -> ProbeOutcome:
        try:
            status, body = await self.get(url, headers, host, timeout_seconds)
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            return failure(_describe(url, e))
        text = body.decode("utf-8", "replace")
        if 200 <= status < 400:
            if status >= 300:
                return warning(f"Probe terminated redirects, Response body: {text}")
            return success(text)
        return failure(f"HTTP probe failed with statuscode: {status}")
