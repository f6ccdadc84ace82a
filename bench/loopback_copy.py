"""A keep-alive loopback copy for bench/proxy_cpu.py: a one-token JSON answer, or (a body with
`"stream": true`) an event stream of 400 events. As little work per request as a server can do, so the
process measured beside it is the one whose CPU the figures are about. Usage: python loopback_copy.py PORT"""

from __future__ import annotations

import asyncio
import sys

ANSWER = (b'{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant",'
          b'"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}')
EVENT = b'data: {"choices": [{"index": 0, "delta": {"content": "tok"}}]}\n\n'
STREAM_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
EVENTS = 400


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = (await reader.readuntil(b"\r\n\r\n")).lower()
            body = b""
            if b"content-length:" in head:
                body = await reader.readexactly(int(head.split(b"content-length:")[1].split(b"\r\n")[0]))
            if b'"stream": true' in body:
                writer.write(STREAM_HEAD)
                for _ in range(EVENTS):
                    writer.write(chunk(EVENT))
                    await writer.drain()
                writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
                             % (len(ANSWER), ANSWER))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(serve, "127.0.0.1", port)
    print("ready", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
