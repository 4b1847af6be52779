"""inotify from libc via ctypes (inotify_init1 / inotify_add_watch): no dependency. The fd is
non-blocking, to be read from the asyncio loop (add_reader); `parse_inotify` splits a read into
events. Used by the eviction notifiers (memory.events) and the container log clock."""

from __future__ import annotations

import ctypes
import os
import struct

IN_MODIFY = 0x00000002
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)

_libc: ctypes.CDLL | None = None


def _c() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def inotify_init() -> int:
    """A non-blocking, close-on-exec inotify fd."""
    fd = int(_c().inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"inotify_init1: {os.strerror(e)}")
    return fd


def inotify_add_watch(fd: int, path: str, mask: int) -> int:
    wd = int(_c().inotify_add_watch(fd, os.fsencode(path), ctypes.c_uint32(mask)))
    if wd < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"inotify_add_watch {path}: {os.strerror(e)}", path)
    return wd


def parse_inotify(buf: bytes) -> list[tuple[int, int, str]]:
    """(wd, mask, name) of each event in a read() of an inotify fd (pure); name "" for none."""
    out: list[tuple[int, int, str]] = []
    off = 0
    while off + _EVENT.size <= len(buf):
        wd, mask, _cookie, length = _EVENT.unpack_from(buf, off)
        start = off + _EVENT.size
        name = buf[start : start + length].split(b"\0", 1)[0]
        out.append((wd, mask, os.fsdecode(name)))
        off = start + length
    return out


def inotify_rm_watch(fd: int, wd: int) -> None:
    """Drop a watch; one already gone (its file removed) is fine."""
    _c().inotify_rm_watch(fd, wd)
