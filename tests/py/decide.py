"""Publishes one decision with JetStream as a restricted NATS user would: over
TLS with a client certificate, logged in with a user and password, using nats-py
(a NATS client that is not Awaken's code). Then tries what such a user must not
be able to do: publish a thread call and read run events.

usage: decide.py URL CA CERT KEY USER PASSWORD_FILE SUBJECT BODY_FILE
Prints JSON: {"stream": ..., "seq": ..., "refused": [server errors, in order]}.
"""

import asyncio
import json
import ssl
import sys

import nats

# How long the server gets to refuse a forbidden operation.
REFUSAL_WITHIN = 10


async def main() -> None:
    url, ca, cert, key, user, password_file, subject, body_file = sys.argv[1:9]
    with open(password_file) as f:
        password = f.read().strip()
    with open(body_file, "rb") as f:
        body = f.read()
    tls = ssl.create_default_context(cafile=ca)
    tls.load_cert_chain(cert, key)

    refused = []
    refusal = asyncio.Event()

    async def on_error(error: Exception) -> None:
        refused.append(str(error))
        refusal.set()

    nc = await nats.connect(
        url, tls=tls, user=user, password=password, error_cb=on_error,
        allow_reconnect=False,
    )
    ack = await nc.jetstream().publish(
        subject, body, headers={"Content-Type": "application/json"}
    )

    for attempt in (
        lambda: nc.publish("awaken.shard.0.call", b"{}"),
        lambda: nc.subscribe("awaken.events.>"),
    ):
        refusal.clear()
        await attempt()
        await nc.flush()
        await asyncio.wait_for(refusal.wait(), REFUSAL_WITHIN)

    print(json.dumps({"stream": ack.stream, "seq": ack.seq, "refused": refused}))
    await nc.close()


asyncio.run(main())
