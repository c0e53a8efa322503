"""Checks that the tasks `awaken serve`'s A2A routes answer with parse as a2a-sdk 1.3.0's types.

Six tasks are played over HTTP+JSON: an approved call ("approve"), a denied one
("deny"), an approved call whose tool fails, a task left in INPUT_REQUIRED, a waiting
task cancelled, and a delegated child's approval (tenant `orchestrator`). Every answer
— the task of each SendMessage and CancelTask, the items of SendStreamingMessage,
GetTask (whole and with historyLength), ListTasks on both bindings, JSON-RPC
GetTask — is parsed strictly
into the SDK's protobuf types (`json_format.Parse`, unknown fields refused) and
checked with the SDK's own `validate_proto_required_fields` (a ListTasks page
itself is exempt from it: the SDK's own server leaves `nextPageToken` empty on the
last page, which that check reports). Then each context goes on: the waiting task
is approved, the others get a new task whose question is denied.

Prints one JSON line; exits non-zero, naming what failed, on any mismatch.

Usage: python a2a_histories.py <base-url>
"""

import json
import sys
import uuid

import httpx

from a2a.types import (
    ListTasksResponse,
    Role,
    SendMessageResponse,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.proto_utils import validate_proto_required_fields
from google.protobuf.json_format import Parse, ParseError

HEADERS = {'A2A-Version': '1.0', 'Content-Type': 'application/a2a+json'}


class Mismatch(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise Mismatch(message)


def strict(text: str, message, what: str):
    """`text` parsed into `message` as the SDK's types define it, every REQUIRED field there."""
    try:
        Parse(text, message, ignore_unknown_fields=False)
    except ParseError as error:
        raise Mismatch(f'{what} does not parse as {type(message).__name__}: {error}\n{text}')
    try:
        if isinstance(message, ListTasksResponse):
            for task in message.tasks:
                validate_proto_required_fields(task)
        else:
            validate_proto_required_fields(message)
    except Exception as error:  # the SDK's InvalidParamsError names the fields
        raise Mismatch(f'{what} misses required fields: {error!r}\n{text}')
    return message


def state(task: Task) -> str:
    return TaskState.Name(task.status.state)


class Histories:
    def __init__(self, base: str) -> None:
        self.root = f'{base}/v1/a2a'
        self.http = httpx.Client(headers=HEADERS, timeout=30.0)

    def rest(self, method: str, path: str, body=None) -> str:
        response = self.http.request(method, self.root + path, json=body)
        check(response.status_code == 200, f'{method} {path}: {response.status_code} {response.text}')
        return response.text

    def rpc(self, method: str, params: dict) -> str:
        request = {'jsonrpc': '2.0', 'id': str(uuid.uuid4()), 'method': method, 'params': params}
        response = self.http.post(self.root, json=request)
        check(response.status_code == 200, f'{method}: {response.status_code} {response.text}')
        answer = response.json()
        check('result' in answer, f'{method}: {answer}')
        return json.dumps(answer['result'])

    @staticmethod
    def message(text: str, context_id: str = '', task_id: str = '') -> dict:
        message = {'messageId': str(uuid.uuid4()), 'role': 'ROLE_USER', 'parts': [{'text': text}]}
        if context_id:
            message['contextId'] = context_id
        if task_id:
            message['taskId'] = task_id
        return message

    def send(self, tenant: str, text: str, context_id: str = '', task_id: str = '') -> Task:
        message = self.message(text, context_id, task_id)
        body = self.rest('POST', f'/{tenant}/message:send', {'message': message})
        answer = strict(body, SendMessageResponse(), f'SendMessage "{text}"')
        check(answer.HasField('task'), f'SendMessage answered no task: {body}')
        return answer.task

    def stream(self, tenant: str, text: str, context_id: str) -> Task:
        """A SendStreamingMessage: every item parsed strictly; the task as it closed."""
        message = self.message(text, context_id)
        url = f'{self.root}/{tenant}/message:stream'
        items = []
        with self.http.stream('POST', url, json={'message': message}) as response:
            check(response.status_code == 200, f'stream: {response.status_code}')
            for line in response.iter_lines():
                if line.startswith('data:'):
                    items.append(strict(line[5:].strip(), StreamResponse(), f'stream "{text}"'))
        check(items and items[0].HasField('task'), f'stream "{text}" did not open with the task')
        task = items[0].task
        for item in items[1:]:
            if item.HasField('status_update'):
                task.status.CopyFrom(item.status_update.status)
        return task

    def cancel(self, tenant: str, task: Task) -> Task:
        text = self.rest('POST', f'/{tenant}/tasks/{task.id}:cancel')
        return strict(text, Task(), 'CancelTask')

    def read(self, tenant: str, task: Task, what: str) -> dict:
        """The task through every read, each parsed strictly; what they show."""
        got = strict(self.rest('GET', f'/{tenant}/tasks/{task.id}'), Task(), f'{what}: GetTask')
        last = strict(
            self.rest('GET', f'/{tenant}/tasks/{task.id}?historyLength=1'),
            Task(),
            f'{what}: GetTask historyLength=1',
        )
        check(len(last.history) <= 1, f'{what}: historyLength=1 gave {len(last.history)}')
        listed = strict(
            self.rest('GET', f'/{tenant}/tasks?contextId={task.context_id}&historyLength=10'),
            ListTasksResponse(),
            f'{what}: ListTasks',
        )
        check(task.id in [t.id for t in listed.tasks], f'{what}: ListTasks misses the task')
        strict(self.rpc('GetTask', {'tenant': tenant, 'id': task.id}), Task(), f'{what}: JSON-RPC GetTask')
        strict(
            self.rpc('ListTasks', {'tenant': tenant, 'contextId': task.context_id}),
            ListTasksResponse(),
            f'{what}: JSON-RPC ListTasks',
        )
        return {
            'state': state(got),
            'history': [
                {'role': Role.Name(m.role), 'texts': [p.text for p in m.parts if p.HasField('text')]}
                for m in got.history
            ],
            'artifacts': len(got.artifacts),
        }

    def play(self, name: str, tenant: str, act) -> dict:
        asked = self.send(tenant, 'tidy up')
        check(state(asked) == 'TASK_STATE_INPUT_REQUIRED', f'{name}: {state(asked)}')
        last = act(tenant, asked) or asked
        seen = self.read(tenant, asked, name)
        seen['answered'] = state(last)

        # The context goes on from the task.
        if name == 'waiting':
            next_task = self.send(tenant, 'approve', asked.context_id, asked.id)
        else:
            again = self.stream(tenant, 'once more', asked.context_id)
            check(state(again) == 'TASK_STATE_INPUT_REQUIRED', f'{name} continued: {state(again)}')
            next_task = self.send(tenant, 'deny', again.context_id, again.id)
        seen['resumed'] = self.read(tenant, next_task, f'{name} continued')
        return seen

    def main(self) -> dict:
        report = {}
        scenarios = [
            ('approved', 'demo', lambda t, task: self.send(t, 'approve', task.context_id, task.id)),
            ('denied', 'demo', lambda t, task: self.send(t, 'deny', task.context_id, task.id)),
            # notes.txt is gone by now: the approved call fails.
            ('failed', 'demo', lambda t, task: self.send(t, 'approve', task.context_id, task.id)),
            ('waiting', 'demo', lambda t, task: None),
            ('cancelled', 'demo', lambda t, task: self.cancel(t, task)),
            ('delegated', 'orchestrator', lambda t, task: self.send(t, 'approve', task.context_id, task.id)),
        ]
        for name, tenant, act in scenarios:
            report[name] = self.play(name, tenant, act)
        return report


def main() -> int:
    try:
        report = Histories(sys.argv[1]).main()
    except Mismatch as error:
        print(f'mismatch: {error}', file=sys.stderr)
        return 1
    print(json.dumps(report))
    return 0


if __name__ == '__main__':
    sys.exit(main())
