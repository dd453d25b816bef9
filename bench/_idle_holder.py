"""Holds idle luxi and RAPI connections open for bench/idle_connections.py, in a
process of its own (as real idle clients are), so that their cost to the measuring
client's own event loop is not counted as the daemons'.

    python bench/_idle_holder.py SOCKET RAPI_URL CA_FILE COUNT

Opens COUNT connections to the luxi socket and COUNT to RAPI (TLS handshake done,
nothing sent), prints ``ready``, then answers each line on standard input with the
number of those connections a server has closed; exits at the end of its input.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import sys
from urllib.parse import urlsplit

from corral.utils.process import raise_open_file_limit


async def main(socket: str, url: str, ca: str, count: int) -> None:
    """Open the connections, then answer on standard input until it ends."""
    raise_open_file_limit(2 * count + 256)
    parts = urlsplit(url)
    context = ssl.create_default_context(cafile=ca)
    context.check_hostname = False
    streams = [await asyncio.open_unix_connection(socket) for _ in range(count)]
    for index in range(0, count, 50):  # handshakes in batches, as clients come
        streams += await asyncio.gather(*(
            asyncio.open_connection(parts.hostname, parts.port, ssl=context)
            for _ in range(min(50, count - index))))
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    while await loop.run_in_executor(None, sys.stdin.readline):
        print(sum(reader.at_eof() for reader, _ in streams), flush=True)
    for _, writer in streams:
        writer.close()
    for _, writer in streams:
        # Connections the peer reset while closing raise; they are closed all the same.
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
