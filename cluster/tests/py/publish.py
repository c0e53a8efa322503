"""Publishes one message with JetStream using nats-py: a NATS client that is not
Awaken's code, as an operator's script would.

usage: publish.py URL SUBJECT CONTENT_TYPE BODY_FILE [MSG_ID]
Prints the stream's acknowledgement as JSON: {"stream": ..., "seq": ..., "duplicate": ...}.
"""

import asyncio
import json
import sys

import nats


async def main() -> None:
    url, subject, content_type, body_file = sys.argv[1:5]
    msg_id = sys.argv[5] if len(sys.argv) > 5 else None
    with open(body_file, "rb") as f:
        body = f.read()
    nc = await nats.connect(url)
    js = nc.jetstream()
    headers = {"Content-Type": content_type}
    if msg_id:
        headers["Nats-Msg-Id"] = msg_id
    ack = await js.publish(subject, body, headers=headers)
    print(json.dumps({"stream": ack.stream, "seq": ack.seq, "duplicate": bool(ack.duplicate)}))
    await nc.close()


asyncio.run(main())
