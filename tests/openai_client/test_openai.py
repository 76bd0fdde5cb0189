"""The swarm as an OpenAI model, driven by the official `openai` Python package as a user would: models, a chat completion, a streamed follow-up joining the same conversation, and OpenAI's errors.

Starts nothing: it talks to a running `swarm-local serve --auth tokens` at SWARM_OPENAI_BASE_URL
(e.g. http://127.0.0.1:8080/v1) with the customer token SWARM_OPENAI_TOKEN. Run with the venv's
python (infra/aws/venv.sh installs `openai`); exits non-zero on the first failed check.
"""

import json
import os
import sys
import urllib.request

import openai

BASE_URL = os.environ["SWARM_OPENAI_BASE_URL"]
TOKEN = os.environ["SWARM_OPENAI_TOKEN"]
# The swarm answers a turn by its deadline; the client waits a little longer.
TIMEOUT_S = float(os.environ.get("SWARM_OPENAI_TIMEOUT_S", "120"))

client = openai.OpenAI(base_url=BASE_URL, api_key=TOKEN, timeout=TIMEOUT_S, max_retries=0)


def check(condition, what):
    if not condition:
        raise AssertionError(what)
    print(f"ok  {what}")


def conversation(conversation_id):
    """GET /conversations/{id} (the swarm's own API beside /v1) as the same customer."""
    root = BASE_URL.rstrip("/").removesuffix("/v1")
    request = urllib.request.Request(
        f"{root}/conversations/{conversation_id}", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def main():
    models = [m.id for m in client.models.list()]
    check(models == ["lambda-swarm"], f"GET /v1/models lists the one model: {models}")

    # Not streamed: the reply of a new conversation, its id in a header and in `swarm`.
    raw = client.chat.completions.with_raw_response.create(
        model="lambda-swarm",
        messages=[
            {"role": "system", "content": "You are a shop assistant."},
            {"role": "user", "content": "Where is my parcel for order A1031?"},
        ],
    )
    completion = raw.parse()
    conversation_id = raw.headers["x-swarm-conversation-id"]
    swarm = completion.model_extra["swarm"]
    check(swarm["conversation_id"] == conversation_id and swarm["turn"] == 0, f"a new conversation: {swarm}")
    choice = completion.choices[0]
    check(choice.finish_reason == "stop" and choice.message.role == "assistant", "finish_reason stop")
    view = conversation(conversation_id)
    check(choice.message.content == view["reply"], "the content is the conversation's reply")
    usage = view["usage"] or {}
    check(
        completion.usage.prompt_tokens == (usage.get("prompt_tokens") or 0)
        and completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens,
        f"usage is the conversation's recorded usage: {completion.usage}",
    )

    # Streamed follow-up: the same conversation's next turn, progress first then the reply.
    stream = client.chat.completions.create(
        model="lambda-swarm",
        messages=[{"role": "user", "content": [{"type": "text", "text": "And is coupon SAVE20 still valid?"}]}],
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"X-Swarm-Conversation-Id": conversation_id},
    )
    reasoning, content, finish, usage_seen, first = [], [], None, None, None
    for chunk in stream:
        first = first or chunk.model_extra.get("swarm")
        if chunk.usage is not None:
            usage_seen = chunk.usage
        for c in chunk.choices:
            extra = c.delta.model_extra or {}
            if extra.get("reasoning_content"):
                check(not content, "progress comes before the reply")
                reasoning.append(extra["reasoning_content"])
            if c.delta.content:
                content.append(c.delta.content)
            finish = c.finish_reason or finish
    check(first == {"conversation_id": conversation_id, "turn": 1}, f"the follow-up joins the conversation: {first}")
    check("".join(reasoning).startswith("Planned "), "progress in delta.reasoning_content")
    check(finish == "stop", f"the stream finishes with stop: {finish}")
    check(usage_seen is not None, "stream_options.include_usage gives a usage chunk")
    view = conversation(conversation_id)
    check(view["turn"] == 1 and len(view["turns"]) == 2, f"the conversation has two turns: {len(view['turns'])}")
    check("".join(content) == view["reply"], "the streamed content is the turn's reply")

    # OpenAI's errors.
    user = [{"role": "user", "content": "hi"}]
    refusals = [
        (dict(model="gpt-4o", messages=user), "model", "model_not_found"),
        (dict(model="lambda-swarm", messages=user, tools=[{"type": "function", "function": {"name": "f"}}]), "tools", "tools_not_supported"),
        (dict(model="lambda-swarm", messages=user, n=2), "n", "n_not_supported"),
        (dict(model="lambda-swarm", messages=[{"role": "system", "content": "x"}]), "messages", "no_user_message"),
    ]
    for kwargs, param, code in refusals:
        try:
            client.chat.completions.create(**kwargs)
        except openai.BadRequestError as e:
            check(e.status_code == 400 and e.param == param and e.code == code and e.type == "invalid_request_error",
                  f"400 {code} ({param})")
        else:
            raise AssertionError(f"{code}: no error")
    try:
        openai.OpenAI(base_url=BASE_URL, api_key="not-a-token", max_retries=0).models.list()
    except openai.AuthenticationError as e:
        check(e.status_code == 401 and e.type == "authentication_error", "401 authentication_error")
    else:
        raise AssertionError("an unknown token was accepted")
    print("all openai client checks passed")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
