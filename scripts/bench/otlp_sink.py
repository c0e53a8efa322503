"""An OTLP/HTTP sink for the telemetry benchmarks (docs/benchmarks.md): reads
each export and answers 200 without decoding it, so what it costs the machine
is the HTTP exchange only.

It reads requests off the socket itself (headers up to the blank line, then
`content-length` bytes into one reused buffer) rather than through
`http.server`, whose header parsing cost ~0.2 ms of CPU per request: on the
two-core benchmark VM that CPU is taken from the node being measured.

    python3 scripts/bench/otlp_sink.py 14318
"""

import socket
import sys
import threading

ANSWER = (
    b"HTTP/1.1 200 OK\r\n"
    b"content-type: application/x-protobuf\r\n"
    b"content-length: 0\r\n\r\n"
)


def content_length(head):
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


def serve(connection):
    body = bytearray(1 << 20)
    view = memoryview(body)
    pending = b""
    with connection:
        while True:
            while b"\r\n\r\n" not in pending:
                chunk = connection.recv(65536)
                if not chunk:
                    return
                pending += chunk
            head, _, pending = pending.partition(b"\r\n\r\n")
            left = content_length(head) - len(pending)
            pending = b"" if left >= 0 else pending[len(pending) + left :]
            while left > 0:
                read = connection.recv_into(view, min(left, len(body)))
                if not read:
                    return
                left -= read
            connection.sendall(ANSWER)


def main():
    listener = socket.create_server(("127.0.0.1", int(sys.argv[1])))
    while True:
        connection, _ = listener.accept()
        threading.Thread(target=serve, args=(connection,), daemon=True).start()


if __name__ == "__main__":
    main()
