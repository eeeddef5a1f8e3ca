"""The multiplexer's own reply parsing and reading, on local socket pairs (no Redis)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from redis.exceptions import ConnectionError, InvalidResponse, NoScriptError, ResponseError

from lockguide._multiplex import _INCOMPLETE, _take, pack, parse_reply


@pytest.mark.parametrize(
    ("raw", "reply"),
    [
        (b"+OK\r\n", b"OK"),
        (b":1\r\n", 1),
        (b":0\r\n", 0),
        (b"$-1\r\n", None),  # RESP2 null: SET NX refused
        (b"_\r\n", None),  # RESP3 null
        (b"$3\r\nabc\r\n", b"abc"),
        (b"$0\r\n\r\n", b""),
        (b"#t\r\n", True),
    ],
)
def test_scalar_replies_are_parsed_to_the_end(raw: bytes, reply: object) -> None:
    assert parse_reply(raw, 0) == (reply, len(raw))


@pytest.mark.parametrize("raw", [b"", b"+OK", b":1\r", b"$3\r\nab", b"$3\r\nabc\r"])
def test_a_reply_cut_short_asks_for_more(raw: bytes) -> None:
    assert parse_reply(raw, 0) == (_INCOMPLETE, 0)


def test_errors_are_values_and_noscript_is_recognised() -> None:
    noscript, end = parse_reply(b"-NOSCRIPT No matching script.\r\n", 0)
    assert isinstance(noscript, NoScriptError)
    assert end == 31
    other, _ = parse_reply(b"-READONLY You can't write against a read only replica.\r\n", 0)
    assert type(other) is ResponseError
    assert "READONLY" in str(other)


def test_an_aggregate_reply_is_a_protocol_error() -> None:
    with pytest.raises(InvalidResponse):
        parse_reply(b"*1\r\n:1\r\n", 0)


def test_pack_writes_the_redis_protocol() -> None:
    assert pack(b"SET", b"k", b"v") == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, server = socket.socketpair()
    ours.setblocking(False)
    yield ours, server
    ours.close()
    server.close()


def test_a_reply_split_across_reads_is_put_together(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, server = pair
    partial: dict[int, bytes] = {}
    assert _take(ours, partial, 0, 1) is _INCOMPLETE  # nothing there yet
    server.sendall(b"$40\r\n" + b"a" * 20)
    assert _take(ours, partial, 0, 1) is _INCOMPLETE
    server.sendall(b"a" * 20 + b"\r\n")
    assert _take(ours, partial, 0, 1) == b"a" * 40
    assert partial == {}


def test_pipelined_replies_return_the_last(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, server = pair
    server.sendall(b"$40\r\n" + b"f" * 40 + b"\r\n:1\r\n")  # SCRIPT LOAD, then EVALSHA
    assert _take(ours, {}, 0, 2) == 1


def test_unexpected_extra_bytes_are_a_protocol_error(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, server = pair
    server.sendall(b":1\r\n:1\r\n")
    assert isinstance(_take(ours, {}, 0, 1), InvalidResponse)


def test_end_of_file_is_a_connection_error(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, server = pair
    server.close()
    assert isinstance(_take(ours, {}, 0, 1), ConnectionError)
