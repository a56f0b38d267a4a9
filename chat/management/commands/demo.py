from __future__ import annotations

import json
import textwrap
from typing import Any

import httpx
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from httpx_sse import connect_sse

from chat.services import api_key_create
from chat.stack import Stack, free_port

QUESTION = (
    "Since about 10:00 UTC on 3 November customers cannot pay — checkout says the payment timed out. "
    "What is the root cause?"
)


def _wrap(text: str, indent: str = "    ") -> str:
    return textwrap.fill(text, width=100, initial_indent=indent, subsequent_indent=indent)


def render(content: dict[str, Any]) -> str:
    kind, payload = content["content_type"], content["payload"]
    lines = [f"== {kind.replace('_', ' ')} =="]
    if kind == "diagnosis_report":
        lines += ["Conclusion:", _wrap(payload["conclusion"]), "Root cause:", _wrap(payload["root_cause"]), "Findings:"]
        for i, finding in enumerate(payload["findings"], 1):
            lines.append(_wrap(f"{i}. {finding['statement']}"))
            for evidence in finding["evidence"]:
                where = ", ".join(f"{k}={v}" for k, v in evidence.items() if k not in ("tool", "quote"))
                lines.append(
                    _wrap(f"[{evidence['tool']}{' ' + where if where else ''}] “{evidence['quote']}”", "        ")
                )
        for title, key in (("Recommendations:", "recommendations"), ("Limitations:", "limitations")):
            if payload.get(key):
                lines.append(title)
                lines += [_wrap(f"- {item}") for item in payload[key]]
    elif kind == "safe_fallback":
        lines += [_wrap(payload["message"]), _wrap(f"reason: {payload['reason']}")]
    elif kind == "knowledge_answer":
        lines += [_wrap(payload["answer"])] + [_wrap(f"- {s['title']} › {s['section']}") for s in payload["sources"]]
    else:
        lines.append(_wrap(payload.get("text", json.dumps(payload, ensure_ascii=False))))
    return "\n".join(lines)


class Command(BaseCommand):
    help = "Start the service on local defaults, ask a diagnosis question through the API, stream its events and print the report, then stop."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("question", nargs="?", default=QUESTION)
        parser.add_argument(
            "--latency", type=float, default=0.15, help="seconds added to each evidence call, so progress is visible"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write("loading the demo incidents (documents, runbooks, logs, business tables)…")
        call_command("seed_demo", quiet=True, stdout=self.stdout)
        env = {"EVIDENCE_SOURCE": "database", "EVIDENCE_LATENCY_S": str(options["latency"])}
        stack = Stack(port=free_port(), env=env, log_dir=settings.VAR_DIR / "logs")
        self.stdout.write("starting Redis (if needed), the ASGI server and a Celery worker…")
        with stack:
            _, key, _secret = api_key_create(username="demo")
            headers = {"Authorization": f"Bearer {key}"}
            with httpx.Client(base_url=stack.base_url, headers=headers, timeout=httpx.Timeout(10, read=150)) as client:
                self.stdout.write(f"\nPOST /api/chat  {options['question']}")
                created = client.post("/api/chat", json={"question": options["question"]})
                created.raise_for_status()
                run = created.json()
                self.stdout.write(f"→ {created.status_code} run {run['run_id']} ({run['status']})\n")
                content: dict[str, Any] | None = None
                with connect_sse(client, "GET", run["links"]["events"]) as events:
                    for event in events.iter_sse():
                        data = json.loads(event.data)
                        if event.event == "status":
                            detail = " ".join(f"{k}={v}" for k, v in (data.get("detail") or {}).items())
                            self.stdout.write(f"  [{event.id:>2}] status   {data['stage']} {detail}".rstrip())
                        elif event.event == "content":
                            content = data
                            self.stdout.write(f"  [{event.id:>2}] content  {data['content_type']}")
                        elif event.event == "failure":
                            self.stdout.write(f"  [{event.id:>2}] failure  {data['code']}: {data['message']}")
                        else:
                            self.stdout.write(
                                f"  [{event.id:>2}] {event.event:<8} {json.dumps(data, ensure_ascii=False)}"
                            )
                        if event.event == "done":
                            break
                if content is not None:
                    self.stdout.write("\n" + render(content))
                final = client.get(run["links"]["self"]).json()
                usage = final["usage"]
                self.stdout.write(
                    f"\noutcome={final['outcome']}  {usage['model_calls']} model calls, {usage['tool_calls']} tool calls, "
                    f"{usage['input_tokens'] + usage['output_tokens']} tokens, {final['duration_ms']:.0f} ms"
                )
                self.stdout.write(f"trace: {stack.base_url}{run['links']['trace']}\nstopping…")
