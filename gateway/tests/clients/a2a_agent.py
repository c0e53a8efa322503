"""A third-party A2A agent built on the reference server of a2a-sdk 1.3.0 (its
AgentExecutor, DefaultRequestHandler, in-memory task store, and the REST (HTTP+JSON)
and agent card routes on Starlette/uvicorn), for the tests that use an agent which is
not this project's code as a remote delegate.

    a2a_agent.py

Listens on 127.0.0.1, a free port. The HTTP+JSON interface is at /a2a, the card at the
server's /.well-known/agent-card.json (A2A 1.0, streaming). Prints JSON lines on stdout:

    {"listening": "http://127.0.0.1:PORT/a2a"}    once it accepts (the base URL)
    {"working": TASK}                             a `wait` task started waiting
    {"answered": TASK, "message": {...}}          a waiting task got a follow-up
    {"cancelled": TASK}                           a cancel request reached the executor

What it does with a new task, by the prompt's text:

    contains `approve`   WORKING, then INPUT_REQUIRED ("May I proceed?"); the follow-up
                         `approve` (or a data part {"decisions": [...]} all approved)
                         completes it with `approved: done`, `deny` (or a decision
                         that is not approved) with `denied`; anything else asks again
    contains `wait`      WORKING, then waits up to 60 s and completes; a cancel ends it
                         CANCELED at once
    otherwise            WORKING, the answer in two artifact chunks, then COMPLETED:
                         `hello from a2a-sdk`
"""

import asyncio
import json
import logging
import socket
import sys

import uvicorn

from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette

from a2a.helpers import new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    TaskState,
)

PREFIX = '/a2a'
WAIT_SECONDS = 60.0
QUESTION = 'May I proceed?'


def emit(line: dict) -> None:
    """One JSON line on stdout, for the test that runs this server."""
    print(json.dumps(line), flush=True)


def decision_of(message: Message) -> bool | None:
    """Whether the follow-up approves (True), denies (False), or says neither."""
    for part in message.parts:
        if part.HasField('data'):
            data = MessageToDict(part.data)
            decisions = data.get('decisions') if isinstance(data, dict) else None
            if decisions:
                return all(d.get('approved') is True for d in decisions)
        if part.HasField('text'):
            word = part.text.strip().lower()
            if word in ('approve', 'approved', 'yes'):
                return True
            if word in ('deny', 'denied', 'no'):
                return False
    return None


class DemoExecutor(AgentExecutor):
    def __init__(self) -> None:
        # Set when a `wait` task is cancelled.
        self.stops: dict[str, asyncio.Event] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            task = new_task(
                context.task_id,
                context.context_id,
                TaskState.TASK_STATE_SUBMITTED,
                history=[context.message],
            )
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)

        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await self.answered(context, updater)
            return

        prompt = context.get_user_input()
        if 'approve' in prompt:
            await updater.start_work()
            await self.ask(updater)
        elif 'wait' in prompt:
            await self.wait(updater)
        else:
            await updater.start_work()
            # The answer streamed in two chunks of one artifact.
            await updater.add_artifact(
                [new_text_part('hello from ')], artifact_id='answer', name='answer'
            )
            await updater.add_artifact(
                [new_text_part('a2a-sdk')], artifact_id='answer', append=True, last_chunk=True
            )
            await updater.complete()

    async def ask(self, updater: TaskUpdater) -> None:
        await updater.requires_input(updater.new_agent_message([new_text_part(QUESTION)]))

    async def answered(self, context: RequestContext, updater: TaskUpdater) -> None:
        message = context.message
        emit({'answered': updater.task_id, 'message': MessageToDict(message)})
        approved = decision_of(message)
        if approved is None:
            await self.ask(updater)
            return
        await updater.start_work()
        text = 'approved: done' if approved else 'denied'
        await updater.add_artifact([new_text_part(text)], artifact_id='answer', name='answer')
        await updater.complete()

    async def wait(self, updater: TaskUpdater) -> None:
        stop = self.stops.setdefault(updater.task_id, asyncio.Event())
        await updater.start_work(updater.new_agent_message([new_text_part('waiting')]))
        emit({'working': updater.task_id})
        try:
            await asyncio.wait_for(stop.wait(), WAIT_SECONDS)
        except asyncio.TimeoutError:
            await updater.add_artifact([new_text_part('waited')], artifact_id='answer')
            await updater.complete()
        # Stopped: cancel() has written CANCELED.

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        emit({'cancelled': context.task_id})
        self.stops.setdefault(context.task_id, asyncio.Event()).set()
        task = context.current_task
        updater = TaskUpdater(event_queue, context.task_id, task.context_id if task else '')
        await updater.cancel(updater.new_agent_message([new_text_part('cancelled')]))


def card(base: str) -> AgentCard:
    return AgentCard(
        name='sdk-demo',
        description='A demo agent on the reference a2a-sdk server.',
        version='1.0.0',
        supported_interfaces=[
            AgentInterface(url=base, protocol_binding='HTTP+JSON', protocol_version='1.0')
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=['text/plain'],
        default_output_modes=['text/plain'],
        skills=[
            AgentSkill(
                id='demo',
                name='demo',
                description='Says hello, asks before it proceeds, or waits.',
                tags=['demo'],
            )
        ],
    )


def main() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(('127.0.0.1', 0))
    sock.listen(64)
    base = f'http://127.0.0.1:{sock.getsockname()[1]}{PREFIX}'

    agent_card = card(base)
    handler = DefaultRequestHandler(
        agent_executor=DemoExecutor(),
        task_store=InMemoryTaskStore(),
        agent_card=agent_card,
    )
    routes = create_agent_card_routes(agent_card) + create_rest_routes(
        handler, path_prefix=PREFIX
    )
    app = Starlette(routes=routes)
    server = uvicorn.Server(uvicorn.Config(app, log_level='warning'))
    emit({'listening': base})
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == '__main__':
    main()
