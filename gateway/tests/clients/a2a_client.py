"""Drives `awaken serve`'s A2A v1.0 routes with the reference client, a2a-sdk 1.3.0.

Every agent is a tenant whose card is at {base}/v1/a2a/{agent}/.well-known/agent-card.json.
The client is built from that card by the SDK's own ClientFactory, restricted to the
binding under test, and runs: card, blocking send, returnImmediately + polling,
streaming, GetTask with history, ListTasks, cancel (twice), SubscribeToTask, push
notification configs and delivery, input-required and its resume, and TaskNotFound.
Prints one JSON line; exits non-zero, naming the failing step, on any mismatch.

Usage: python a2a_client.py <base-url> <http-json|jsonrpc>
"""

import asyncio
import json
import sys
import threading
import time
import uuid

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from a2a.client import A2ACardResolver, A2AClientTimeoutError, ClientConfig, ClientFactory
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskPushNotificationConfig,
    TaskState,
)
from google.protobuf.json_format import MessageToDict, ParseDict

BINDINGS = {'http-json': 'HTTP+JSON', 'jsonrpc': 'JSONRPC'}
TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}
STEP_TIMEOUT = 30.0
# How the SDK client recognises an A2A error, per binding.
ERROR_HINT = {
    'HTTP+JSON': 'the SDK maps only a google.rpc.Status body {{"error": {{..., "details": '
    '[{{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "{reason}"}}]}}}}',
    'JSONRPC': 'the SDK maps only an error object with code {code} in an HTTP 200 response',
}


class Mismatch(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise Mismatch(message)


def state_name(state: int) -> str:
    return TaskState.Name(state)


def brief(message) -> str:
    text = json.dumps(MessageToDict(message))
    return text if len(text) <= 1500 else text[:1500] + '...'


def texts(parts) -> list[str]:
    return [p.text for p in parts if p.HasField('text')]


def answer_texts(task: Task) -> str:
    """The agent's answer as the task carries it: artifacts and status message."""
    out = [t for a in task.artifacts for t in texts(a.parts)]
    out += texts(task.status.message.parts)
    return '\n'.join(out)


def event_texts(event: StreamResponse) -> str:
    kind = event.WhichOneof('payload')
    if kind == 'task':
        return answer_texts(event.task)
    if kind == 'message':
        return '\n'.join(texts(event.message.parts))
    if kind == 'status_update':
        return '\n'.join(texts(event.status_update.status.message.parts))
    if kind == 'artifact_update':
        return '\n'.join(texts(event.artifact_update.artifact.parts))
    return ''


def generic_path(path: str) -> str:
    """tasks/abc:cancel -> tasks/{id}:cancel, for the summary."""
    words = {'message', 'tasks', 'pushNotificationConfigs', 'extendedAgentCard'}
    segments = []
    for segment in path.split('/'):
        name, colon, action = segment.partition(':')
        segments.append((name if name in words else '{id}') + colon + action)
    return '/'.join(segments)


def user_message(text: str, task_id: str = '', context_id: str = '') -> Message:
    return Message(
        role=Role.ROLE_USER,
        message_id=str(uuid.uuid4()),
        task_id=task_id,
        context_id=context_id,
        parts=[Part(text=text)],
    )


def send_request(message: Message, return_immediately: bool = False) -> SendMessageRequest:
    request = SendMessageRequest(message=message)
    request.configuration.return_immediately = return_immediately
    return request


class PushListener:
    """A webhook receiver on 127.0.0.1 that records every POST."""

    def __init__(self) -> None:
        self.received: list[dict] = []
        self.lock = threading.Lock()
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get('Content-Length') or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                with listener.lock:
                    listener.received.append(
                        {'path': self.path, 'headers': dict(self.headers.items()), 'body': body}
                    )
                self.send_response(200)
                self.send_header('Content-Length', '0')
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.url = f'http://127.0.0.1:{self.server.server_address[1]}/a2a-push'
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def snapshot(self) -> list[dict]:
        with self.lock:
            return list(self.received)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Run:
    def __init__(self, base: str, binding: str) -> None:
        self.base = base.rstrip('/')
        self.binding = binding
        self.protocol = BINDINGS[binding]
        self.steps: dict[str, dict] = {}
        self.requests: list[tuple[str, str, bytes]] = []
        self.interfaces: dict = {}
        self.facts: dict = {}
        self.seen: list[str] = []  # events of the stream in progress, for a timeout's report

    async def _record(self, request: httpx.Request) -> None:
        self.requests.append((request.method, str(request.url), request.content))

    async def card(self, agent: str) -> AgentCard:
        resolver = A2ACardResolver(self.http, base_url=f'{self.base}/v1/a2a/{agent}')
        return await resolver.get_agent_card()

    async def clients(self, agent: str):
        """A non-streaming and a streaming client for the agent, both on our binding."""
        card = await self.card(agent)
        self.interfaces[agent] = next(
            i for i in card.supported_interfaces if i.protocol_binding == self.protocol
        )
        blocking = self.factory_blocking.create(card)
        streaming = self.factory_streaming.create(card)
        return blocking, streaming

    async def send(self, client, request: SendMessageRequest) -> Task:
        events = [event async for event in client.send_message(request)]
        check(len(events) == 1, f'SendMessage gave {len(events)} results')
        check(
            events[0].HasField('task'),
            f'SendMessage answered with no task: {brief(events[0])}',
        )
        return events[0].task

    async def collect(self, stream) -> list[StreamResponse]:
        events = []
        async for event in stream:
            events.append(event)
            self.seen.append(event.WhichOneof('payload'))
        return events

    async def step(self, name: str, body) -> None:
        started = time.monotonic()
        self.seen = []

        def streamed() -> str:
            if not self.seen:
                return ''
            return f' (stream events so far: {self.seen}; is it closed after the terminal event?)'

        try:
            detail = await asyncio.wait_for(body(), STEP_TIMEOUT)
        except asyncio.TimeoutError:
            raise Mismatch(f'{name}: no result within {STEP_TIMEOUT:.0f}s{streamed()}') from None
        except Mismatch as error:
            raise Mismatch(f'{name}: {error}') from None
        except A2AClientTimeoutError as error:
            raise Mismatch(f'{name}: {type(error).__name__}: {error}{streamed()}') from error
        except Exception as error:  # noqa: BLE001 - reported with the step's name
            raise Mismatch(f'{name}: {type(error).__name__}: {error}') from error
        self.steps[name] = {'ms': round((time.monotonic() - started) * 1000), **(detail or {})}

    async def main(self) -> None:
        async with httpx.AsyncClient(
            timeout=httpx.Timeout(20.0), event_hooks={'request': [self._record]}
        ) as http:
            self.http = http
            self.factory_blocking = ClientFactory(
                ClientConfig(
                    streaming=False,
                    supported_protocol_bindings=[self.protocol],
                    httpx_client=http,
                )
            )
            self.factory_streaming = ClientFactory(
                ClientConfig(
                    streaming=True,
                    supported_protocol_bindings=[self.protocol],
                    httpx_client=http,
                )
            )
            await self.step('1-card', self.step_card)
            await self.step('clients', self.step_clients)
            await self.step('2-send-blocking', self.step_send_blocking)
            await self.step('3-send-return-immediately', self.step_return_immediately)
            await self.step('4-send-streaming', self.step_streaming)
            await self.step('5-get-task', self.step_get_task)
            await self.step('6-list-tasks', self.step_list_tasks)
            await self.step('7-cancel', self.step_cancel)
            await self.step('8-subscribe', self.step_subscribe)
            await self.step('9-push', self.step_push)
            await self.step('10-input-required', self.step_input_required)
            await self.step('11-task-not-found', self.step_not_found)
            await self.step('12-canceled-stays-canceled', self.step_cancel_stays)
            self.check_traffic()

    # 1
    async def step_card(self):
        card = await self.card('bench-text')
        check(card.name == 'bench-text', f'card name {card.name!r}')
        check(card.capabilities.streaming, 'capabilities.streaming is not true')
        check(card.capabilities.push_notifications, 'capabilities.pushNotifications is not true')
        interfaces = list(card.supported_interfaces)
        bindings = sorted(i.protocol_binding for i in interfaces)
        check(bindings == ['HTTP+JSON', 'JSONRPC'], f'supportedInterfaces bindings {bindings}')
        for interface in interfaces:
            check(interface.url.startswith('http'), f'interface url {interface.url!r}')
            check(
                interface.protocol_version in ('1.0', '1.0.0'),
                f'{interface.protocol_binding} protocolVersion {interface.protocol_version!r}',
            )
        mine = next(i for i in interfaces if i.protocol_binding == self.protocol)
        self.interface = mine
        self.facts['interface'] = {'url': mine.url, 'tenant': mine.tenant}
        return {'url': mine.url, 'tenant': mine.tenant}

    async def step_clients(self):
        self.bench, self.bench_stream = await self.clients('bench-text')
        self.slow, self.slow_stream = await self.clients('slow')
        self.demo, _ = await self.clients('demo')

    # 2
    async def step_send_blocking(self):
        task = await self.send(self.bench, send_request(user_message('hello')))
        check(task.id and task.context_id, f'task without id/contextId: {brief(task)}')
        check(
            task.status.state == TaskState.TASK_STATE_COMPLETED,
            f'state {state_name(task.status.state)}, want COMPLETED: {brief(task)}',
        )
        response = [a for a in task.artifacts if a.name == 'response']
        check(response, f'no artifact named "response": {brief(task)}')
        check(
            'ok' in '\n'.join(t for a in response for t in texts(a.parts)),
            f'"ok" not in the response artifact: {brief(task)}',
        )
        status_message = task.status.message
        check(
            status_message.role == Role.ROLE_AGENT
            and 'ok' in [t.strip() for t in texts(status_message.parts)],
            f'final status message is not ROLE_AGENT "ok": {brief(task)}',
        )
        self.hello_task = task
        return {'taskId': task.id, 'contextId': task.context_id}

    # 3
    async def step_return_immediately(self):
        started = time.monotonic()
        task = await self.send(self.bench, send_request(user_message('quick'), True))
        returned_ms = round((time.monotonic() - started) * 1000)
        check(task.id, f'task without id: {brief(task)}')
        check(returned_ms < 5000, f'returnImmediately took {returned_ms} ms')
        first_state = state_name(task.status.state)
        deadline = time.monotonic() + 5.0
        while task.status.state != TaskState.TASK_STATE_COMPLETED:
            check(
                task.status.state not in TERMINAL,
                f'ended {state_name(task.status.state)}, want COMPLETED: {brief(task)}',
            )
            check(time.monotonic() < deadline, f'not COMPLETED after 5 s: {brief(task)}')
            await asyncio.sleep(0.1)
            task = await self.bench.get_task(GetTaskRequest(id=task.id))
        return {'returnedMs': returned_ms, 'firstState': first_state}

    # 4
    async def step_streaming(self):
        request = send_request(user_message('stream please'))
        events = await self.collect(self.bench_stream.send_message(request))
        kinds = [event.WhichOneof('payload') for event in events]
        check(events, 'the stream carried no event')
        check(kinds[0] == 'task', f'first event is {kinds[0]}, want task ({kinds})')
        task_id = events[0].task.id
        last = events[-1]
        check(
            kinds[-1] == 'status_update'
            and last.status_update.status.state == TaskState.TASK_STATE_COMPLETED,
            f'last event is not a COMPLETED status update: {brief(last)}',
        )
        for event, kind in zip(events[1:], kinds[1:], strict=True):
            event_task = getattr(event, kind).task_id if kind != 'task' else event.task.id
            check(event_task == task_id, f'event for task {event_task}, stream is {task_id}')
        check(
            any('ok' in event_texts(event) for event in events),
            f'"ok" not seen in {len(events)} events',
        )
        return {'events': kinds}

    # 5
    async def step_get_task(self):
        task = await self.bench.get_task(GetTaskRequest(id=self.hello_task.id))
        check(task.id == self.hello_task.id, f'GetTask returned task {task.id}')
        check(
            task.status.state == TaskState.TASK_STATE_COMPLETED,
            f'state {state_name(task.status.state)}: {brief(task)}',
        )
        check(
            any(m.role == Role.ROLE_USER and 'hello' in texts(m.parts) for m in task.history),
            f'history lacks the user\'s "hello": {brief(task)}',
        )
        return {'history': len(task.history)}

    # 6
    async def step_list_tasks(self):
        context_id = self.hello_task.context_id
        page = await self.bench.list_tasks(ListTasksRequest(context_id=context_id))
        ids = [t.id for t in page.tasks]
        check(self.hello_task.id in ids, f'task {self.hello_task.id} not listed: {ids}')
        others = [t.id for t in page.tasks if t.context_id != context_id]
        check(not others, f'tasks of another context listed: {others}')
        return {'tasks': len(ids), 'nextPageToken': page.next_page_token}

    async def start_slow(self, text: str) -> Task:
        started = time.monotonic()
        task = await self.send(self.slow, send_request(user_message(text), True))
        took = time.monotonic() - started
        check(
            task.status.state not in TERMINAL,
            f'returnImmediately to slow gave a terminal task after {took:.2f}s: {brief(task)}',
        )
        return task

    # 7
    async def step_cancel(self):
        task = await self.start_slow('work slowly, then be canceled')
        canceled = await self.slow.cancel_task(CancelTaskRequest(id=task.id))
        check(canceled.id == task.id, f'CancelTask returned task {canceled.id}')
        check(
            canceled.status.state == TaskState.TASK_STATE_CANCELED,
            f'CancelTask gave {state_name(canceled.status.state)}: {brief(canceled)}',
        )
        try:
            again = await self.slow.cancel_task(CancelTaskRequest(id=task.id))
        except TaskNotCancelableError:
            pass
        except Exception as error:  # noqa: BLE001
            raise Mismatch(
                f'second CancelTask raised {type(error).__name__}, want TaskNotCancelableError '
                f'({ERROR_HINT[self.protocol].format(reason="TASK_NOT_CANCELABLE", code=-32002)}): '
                f'{error}'
            ) from None
        else:
            raise Mismatch(f'second CancelTask succeeded: {brief(again)}')
        self.canceled_id = task.id
        self.canceled_at = time.monotonic()
        return {'taskId': task.id}

    # 12: once the slow agent would have finished, the canceled task is still CANCELED.
    async def step_cancel_stays(self):
        wait = 2.0 - (time.monotonic() - self.canceled_at)
        if wait > 0:
            await asyncio.sleep(wait)
        task = await self.slow.get_task(GetTaskRequest(id=self.canceled_id))
        check(
            task.status.state == TaskState.TASK_STATE_CANCELED,
            f'canceled task is now {state_name(task.status.state)}: {brief(task)}',
        )

    # 8
    async def step_subscribe(self):
        task = await self.start_slow('work slowly while I watch')
        request = SubscribeToTaskRequest(id=task.id)
        events = await self.collect(self.slow_stream.subscribe(request))
        kinds = [event.WhichOneof('payload') for event in events]
        check(events, 'the subscription carried no event')
        check(kinds[0] == 'task', f'first event is {kinds[0]}, want task ({kinds})')
        last = events[-1]
        state = (
            last.status_update.status.state
            if kinds[-1] == 'status_update'
            else last.task.status.state
            if kinds[-1] == 'task'
            else None
        )
        check(
            state == TaskState.TASK_STATE_COMPLETED,
            f'subscription did not end COMPLETED: {brief(last)}',
        )
        check(
            any('slept' in event_texts(event) for event in events),
            f'"slept" not seen in {kinds}',
        )
        return {'events': kinds}

    # 9
    async def step_push(self):
        listener = PushListener()
        try:
            return await self._push(listener)
        finally:
            listener.close()

    async def _push(self, listener: PushListener):
        task = await self.start_slow('work slowly, then call me back')
        created = await self.slow.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task.id, url=listener.url, token='tok-1')
        )
        check(created.id, f'created config has no id: {brief(created)}')
        check(
            created.url == listener.url and created.token == 'tok-1',
            f'created config differs: {brief(created)}',
        )
        check(created.task_id in ('', task.id), f'created config taskId {created.task_id}')
        got = await self.slow.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id=created.id)
        )
        check(
            got.id == created.id and got.url == listener.url,
            f'GetTaskPushNotificationConfig gave {brief(got)}',
        )
        listed = await self.slow.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        check(
            [c.id for c in listed.configs] == [created.id],
            f'ListTaskPushNotificationConfigs gave {brief(listed)}',
        )

        deadline = time.monotonic() + 15.0
        delivered = None
        while delivered is None:
            for seen in listener.snapshot():
                event = StreamResponse()
                try:
                    ParseDict(seen['body'], event, ignore_unknown_fields=True)
                except Exception as error:  # noqa: BLE001
                    raise Mismatch(
                        f'push body is not a StreamResponse: {seen["body"]}: {error}'
                    ) from None
                kind = event.WhichOneof('payload')
                check(kind is not None, f'push body carries no event: {seen["body"]}')
                if kind == 'task':
                    task_id, state = event.task.id, event.task.status.state
                elif kind == 'status_update':
                    task_id, state = event.status_update.task_id, event.status_update.status.state
                else:
                    continue
                if task_id == task.id and state == TaskState.TASK_STATE_COMPLETED:
                    delivered = seen
                    break
            if delivered is None:
                check(
                    time.monotonic() < deadline,
                    f'no COMPLETED push for {task.id} within 15 s; got {listener.snapshot()}',
                )
                await asyncio.sleep(0.1)
        headers = {k.lower(): v for k, v in delivered['headers'].items()}
        check(
            headers.get('x-a2a-notification-token') == 'tok-1',
            f'push without X-A2A-Notification-Token: tok-1: {delivered["headers"]}',
        )

        await self.slow.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id=created.id)
        )
        after = await self.slow.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        check(not after.configs, f'config still listed after delete: {brief(after)}')
        bodies = listener.snapshot()
        return {
            'configId': created.id,
            'notifications': len(bodies),
            'kinds': [next(iter(b['body'] or {'?': 0})) for b in bodies],
        }

    # 10
    async def step_input_required(self):
        task = await self.send(self.demo, send_request(user_message('please delete notes.txt')))
        check(
            task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED,
            f'state {state_name(task.status.state)}, want INPUT_REQUIRED: {brief(task)}',
        )
        status_message = task.status.message
        check(status_message.role == Role.ROLE_AGENT, f'status message role: {brief(task)}')
        check(
            any(t.strip() for t in texts(status_message.parts)),
            f'status message has no explanation text: {brief(task)}',
        )
        pending = []
        for part in status_message.parts:
            if part.HasField('data'):
                data = MessageToDict(part.data)
                if isinstance(data, dict) and isinstance(data.get('pending'), list):
                    pending += data['pending']
        check(pending, f'status message has no data part with "pending": {brief(task)}')
        call = pending[0]
        check(
            call.get('toolName') == 'delete_file'
            and (call.get('arguments') or {}).get('path') == 'notes.txt'
            and call.get('toolCallId'),
            f'pending call is {call}',
        )

        follow_up = user_message('approve', task_id=task.id, context_id=task.context_id)
        done = await self.send(self.demo, send_request(follow_up))
        check(done.id == task.id, f'follow-up answered task {done.id}, want {task.id}')
        check(
            done.status.state == TaskState.TASK_STATE_COMPLETED,
            f'after approve: {state_name(done.status.state)}: {brief(done)}',
        )
        check(
            'delete_file answered' in answer_texts(done),
            f'"delete_file answered" not in the task: {brief(done)}',
        )
        return {'taskId': task.id, 'toolCallId': call['toolCallId']}

    # 11
    async def step_not_found(self):
        missing = str(uuid.uuid4())
        try:
            task = await self.bench.get_task(GetTaskRequest(id=missing))
        except TaskNotFoundError:
            return {}
        except Exception as error:  # noqa: BLE001
            raise Mismatch(
                f'GetTask raised {type(error).__name__}, want TaskNotFoundError '
                f'({ERROR_HINT[self.protocol].format(reason="TASK_NOT_FOUND", code=-32001)}): '
                f'{error}'
            ) from None
        raise Mismatch(f'GetTask of an unknown id answered {brief(task)}')

    def check_traffic(self) -> None:
        """Every A2A call went out on the binding under test, to its agent's interface."""
        calls = [r for r in self.requests if not r[1].endswith('/.well-known/agent-card.json')]
        used = set()
        for method, url, content in calls:
            path = url.split('?')[0]
            if self.protocol == 'JSONRPC':
                urls = {i.url.rstrip('/') for i in self.interfaces.values()}
                check(
                    method == 'POST' and path.rstrip('/') in urls,
                    f'{method} {url} is off the JSON-RPC interfaces {sorted(urls)}',
                )
                body = json.loads(content)
                check(body.get('jsonrpc') == '2.0', f'not a JSON-RPC 2.0 request: {body}')
                used.add(body.get('method'))
            else:
                prefixes = {
                    i.url.rstrip('/') + (f'/{i.tenant}' if i.tenant else '') + '/'
                    for i in self.interfaces.values()
                }
                prefix = next((p for p in prefixes if path.startswith(p)), None)
                check(
                    prefix is not None,
                    f'{method} {url} is off the HTTP+JSON interfaces {sorted(prefixes)}',
                )
                used.add(f'{method} /{generic_path(path[len(prefix) :])}')
        self.facts['calls'] = len(calls)
        self.facts['operations'] = sorted(used)


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[2] not in BINDINGS:
        print(f'usage: {sys.argv[0]} <base-url> <{"|".join(BINDINGS)}>', file=sys.stderr)
        return 2
    run = Run(sys.argv[1], sys.argv[2])
    try:
        asyncio.run(run.main())
    except Exception as error:  # noqa: BLE001 - Mismatch, or a failure between steps
        print(f'a2a_client ({run.binding}): FAIL {error}', file=sys.stderr)
        summary = {'ok': False, 'binding': run.binding, 'error': str(error), 'steps': run.steps}
        print(json.dumps(summary))
        return 1
    print(json.dumps({'ok': True, 'binding': run.binding, **run.facts, 'steps': run.steps}))
    return 0


if __name__ == '__main__':
    sys.exit(main())
