"""gRPC probes: the standard grpc.health.v1.Health/Check over a minimal HTTP/2 client (h2).

Why not grpcio: after one call it holds several times the resident memory of this client
(bench/grpc_client_rss.py), on a 50 MiB budget; one unary call over plaintext HTTP/2 is small
enough to write out. The request bytes are built by h2 (once per target, then cached: a fresh
connection always encodes them alike); the response is read with h2's own frame and HPACK
libraries (hyperframe, hpack) rather than a full h2 state machine per probe, which costs more CPU
per call. The figures: bench/README.md, "The probes' gRPC client".
Why hand-encode protobuf: the two messages have one field each
(HealthCheckRequest.service = 1, string; HealthCheckResponse.status = 1, enum), so the encoding
is a tag byte, a varint and the bytes; the protobuf runtime would cost more than it saves.

The call, as the kubelet's pkg/probe/grpc: plaintext (credentials are not supported), user agent
kube-probe/<version>, the whole call within timeoutSeconds. SERVING is a success; any other
status fails with `service unhealthy (responded with "NOT_SERVING")`; UNIMPLEMENTED fails with
the "does not implement the grpc health protocol" message; other gRPC errors read
`error: health rpc probe failed: rpc error: code = NotFound desc = ...`.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import struct

import h2.config
import h2.connection
import hpack
import hyperframe.exceptions
import hyperframe.frame

from nodeagent.agent.probes.http_probe import USER_AGENT
from nodeagent.agent.probes.results import ProbeOutcome, failure, success
from nodeagent.agent.probes.target import join_host_port
from nodeagent.agent.probes.tcp_probe import connect
from nodeagent.core.duration import format_go_duration
from nodeagent.core.names import quote
from nodeagent.daemonkit import protowire

CHECK_PATH = "/grpc.health.v1.Health/Check"
SERVING_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}
GRPC_CODES = (
    "OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound", "AlreadyExists",
    "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
    "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated",
)
UNIMPLEMENTED = 12
_H2_CONFIG = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        name = GRPC_CODES[code] if 0 <= code < len(GRPC_CODES) else f"Code({code})"
        super().__init__(f"rpc error: code = {name} desc = {message}")
        self.code = code
        self.message = message


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_request(service: str) -> bytes:
    """A length-prefixed gRPC message holding HealthCheckRequest{service}."""
    raw = service.encode()
    body = b"\x0a" + _varint(len(raw)) + raw if raw else b""
    return struct.pack(">BI", 0, len(body)) + body


def decode_status(message: bytes) -> int:
    """HealthCheckResponse.status from a length-prefixed gRPC message (unknown fields skipped);
    ValueError (protowire.ProtobufError) for a malformed one."""
    if len(message) < 5:
        raise ValueError("short gRPC message")
    compressed, length = struct.unpack(">BI", message[:5])
    if compressed:
        raise ValueError("compressed gRPC message")
    status = 0
    for number, value in protowire.fields(message[5 : 5 + length]):
        if number == 1 and isinstance(value, int):
            status = value
    return status


@functools.lru_cache(maxsize=256)
def request_bytes(authority: str, service: str, timeout_ms: int) -> bytes:
    """Everything the client sends on a fresh connection: preface, SETTINGS, HEADERS, DATA.

    Built with h2 once per (authority, service, timeout): a fresh connection's HPACK state is
    always empty, so the bytes are the same every time and are cached.
    """
    conn = h2.connection.H2Connection(config=_H2_CONFIG)
    conn.initiate_connection()
    stream = conn.get_next_available_stream_id()
    conn.send_headers(stream, [
        (":method", "POST"), (":scheme", "http"), (":path", CHECK_PATH), (":authority", authority),
        ("content-type", "application/grpc"), ("te", "trailers"), ("user-agent", USER_AGENT),
        ("grpc-timeout", f"{timeout_ms}m"),
    ])
    conn.send_data(stream, encode_request(service), end_stream=True)
    return conn.data_to_send()


_SETTINGS_ACK = hyperframe.frame.SettingsFrame(0, flags=["ACK"]).serialize()


async def health_check(sock: socket.socket, authority: str, service: str, timeout_seconds: float) -> int:
    """One Health/Check call on a connected socket: the serving status, or RpcError / OSError.

    The response is read frame by frame (hyperframe) and its header blocks decoded with hpack;
    frames of other streams and control frames other than SETTINGS, RST_STREAM and GOAWAY are
    skipped (nothing else on a one-call connection needs an answer).
    """
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(sock, request_bytes(authority, service, max(1, int(timeout_seconds * 1000))))
    decoder = hpack.Decoder()
    buf = bytearray()
    headers: dict[str, str] = {}
    body = bytearray()
    block = bytearray()  # a header block split over CONTINUATION frames
    block_ends_stream = False  # END_STREAM rides on the HEADERS frame that opened the block
    while True:
        while len(buf) >= 9:
            frame, length = hyperframe.frame.Frame.parse_frame_header(memoryview(buf)[:9])
            if len(buf) < 9 + length:
                break
            frame.parse_body(memoryview(bytes(buf[9 : 9 + length])))
            del buf[: 9 + length]
            if isinstance(frame, hyperframe.frame.SettingsFrame):
                if "ACK" not in frame.flags:
                    await loop.sock_sendall(sock, _SETTINGS_ACK)
            elif isinstance(frame, hyperframe.frame.GoAwayFrame):
                if frame.error_code:
                    raise ConnectionResetError(f"connection terminated (error code {frame.error_code})")
            elif frame.stream_id != 1:
                continue
            elif isinstance(frame, hyperframe.frame.RstStreamFrame):
                raise RpcError(13, f"stream reset (error code {frame.error_code})")
            elif isinstance(frame, hyperframe.frame.HeadersFrame | hyperframe.frame.ContinuationFrame):
                if isinstance(frame, hyperframe.frame.HeadersFrame):
                    block_ends_stream = "END_STREAM" in frame.flags
                block += frame.data
                if "END_HEADERS" in frame.flags:
                    headers.update({_text(k): _text(v) for k, v in decoder.decode(bytes(block))})
                    block.clear()
                    if block_ends_stream:
                        return _result(headers, bytes(body))
            elif isinstance(frame, hyperframe.frame.DataFrame):
                body += frame.data
                if "END_STREAM" in frame.flags:
                    return _result(headers, bytes(body))
        data = await loop.sock_recv(sock, 65536)
        if not data:
            raise ConnectionResetError("connection closed before the response ended")
        buf += data


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _result(headers: dict[str, str], body: bytes) -> int:
    if headers.get(":status") != "200":
        raise RpcError(14 if headers.get(":status") in ("502", "503", "504") else 2,
                       f"unexpected HTTP status code received from server: {headers.get(':status')}")
    code = int(headers.get("grpc-status", "2"))
    if code != 0:
        raise RpcError(code, headers.get("grpc-message", ""))
    return decode_status(body)


async def grpc_probe(host: str, port: int, service: str | None, timeout_seconds: float) -> ProbeOutcome:
    addr = join_host_port(host, port)
    within = format_go_duration(timeout_seconds)
    deadline = asyncio.get_running_loop().time() + timeout_seconds
    try:
        async with asyncio.timeout_at(deadline):
            sock = await connect(host, port)
    except TimeoutError:
        return failure(f"timeout: failed to connect service {quote(addr)} within {within}: context deadline exceeded")
    except OSError as e:
        reason = os.strerror(e.errno) if e.errno else str(e)
        return failure(f"error: failed to connect service at {quote(addr)}: {reason}")
    try:
        async with asyncio.timeout_at(deadline):
            status = await health_check(sock, addr, service or "", timeout_seconds)
    except TimeoutError:
        return failure(f"timeout: health rpc did not complete within {within}")
    except RpcError as e:
        if e.code == UNIMPLEMENTED:
            return failure("error: this server does not implement the grpc health protocol "
                           f"(grpc.health.v1.Health): {e.message}")
        return failure(f"error: health rpc probe failed: {e}")
    except (OSError, ValueError, hyperframe.exceptions.HyperframeError, hpack.HPACKError) as e:
        return failure(f"error: health rpc probe failed: {e}")
    finally:
        sock.close()
    if status != 1:
        return failure(f"service unhealthy (responded with {quote(SERVING_STATUS.get(status, str(status)))})")
    return success("service healthy")
