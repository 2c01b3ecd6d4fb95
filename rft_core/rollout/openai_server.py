"""An OpenAI-compatible endpoint on a run's rollout engine, so agent code written against an
OpenAI client (a plain ``openai`` loop, a tool-calling agent, AgentScope's ReAct agent) acts in a
workflow, and every call it makes is recorded with the tokens the engine saw and sampled.

``OpenAIEndpoint(engine)`` serves, with FastAPI on uvicorn in a thread of the explorer process:

- ``POST /v1/chat/completions``: ``messages`` (text content; ``tools`` / ``tool_calls`` /
  ``tool`` messages rendered as ``rft_core.rollout.openai_format`` says), ``temperature`` (1.0),
  ``top_p``, ``top_k`` (vLLM's extension), ``max_tokens`` / ``max_completion_tokens``, ``n``,
  ``seed``, ``logprobs`` (the sampled tokens' log-probs; ``top_logprobs`` entries are empty),
  ``stop`` (the reply is cut after the token that completes a stop string). Streaming is refused
  (400). Beside OpenAI's fields the answer carries vLLM's ``prompt_token_ids`` and per choice
  ``token_ids``, and ``model_version``; any ``model`` name is accepted.
- ``GET /v1/models``: the one served model.

Security: bound to 127.0.0.1 on a port the OS picks, never another interface; a random key per
endpoint (``api_key``, 256 bits) is checked on every request (``Authorization: Bearer``), any
other answer is a 401. The endpoint lives as long as the run's engine: ``endpoint_for(engine)``
starts it the first time a workflow asks, ``stop_endpoint(engine)`` (the explorer's
``close_engine``) stops it, and interpreter exit stops any left.

Recording (Trinity-RFT's ``enable_history`` / ``extract_experience_from_history``): each choice
of each call becomes a :class:`Turn` (prompt ids, response ids, the engine's log-probs of them,
the model version, finish reason, text) filed under the *session* the call came through:
``base_url(session)`` is ``.../sessions/<session>/v1`` (plain ``/v1`` files under
``"default"``), so concurrent episodes keep apart with nothing but a base URL, which every
OpenAI-compatible agent framework takes. ``take_turns(session)`` hands them over in call order.

Batching: calls that arrive together (concurrent episodes) are sampled in one
``engine.generate_ids`` call per sampling setting: a batcher thread takes every call queued
while the engine was busy, after waiting ``batch_wait_s`` for stragglers. The engine is used by
this thread only while a workflow's agents run; the explorer loads new weights between steps.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import queue
import secrets
import socket
import threading
import time
import uuid
from dataclasses import astuple, dataclass, field
from typing import Any

import openai
import uvicorn

from rft_core.rollout.base import Generation, SamplingParams
from rft_core.rollout.openai_app import build_app
from rft_core.rollout.openai_format import (
    RequestError,
    cut_at_stop,
    parse_tool_calls,
    template_messages,
)

log = logging.getLogger("rft_core.rollout.openai_server")

HOST = "127.0.0.1"
DEFAULT_SESSION = "default"


@dataclass
class Turn:
    """One sampled choice of one chat-completions call."""

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    model_version: int
    finish_reason: str  # stop | length | tool_calls
    text: str  # the reply as sampled (tool-call blocks included)
    messages: list[dict[str, Any]] = field(default_factory=list)  # the request's messages


@dataclass
class _Job:
    prompt_ids: list[int]
    params: SamplingParams
    future: concurrent.futures.Future


class OpenAIEndpoint:
    """See the module doc. ``start()`` returns once the server accepts connections."""

    def __init__(
        self,
        engine: Any,
        model_name: str = "policy",
        *,
        default_max_tokens: int = 256,
        batch_wait_s: float = 0.05,
    ) -> None:
        self.engine = engine
        self.model_name = model_name
        self.default_max_tokens = default_max_tokens
        self.batch_wait_s = batch_wait_s
        self.api_key = secrets.token_urlsafe(32)
        self.port: int | None = None
        self._turns: dict[str, list[Turn]] = {}
        self._lock = threading.Lock()
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._server: Any = None
        self._threads: list[threading.Thread] = []
        self._http: Any = None  # the clients' shared connection pool

    # -- lifetime ----------------------------------------------------------------------------

    def start(self, timeout_s: float = 30.0) -> OpenAIEndpoint:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((HOST, 0))
        self.port = sock.getsockname()[1]

        config = uvicorn.Config(
            build_app(self), log_level="warning", lifespan="off", access_log=False
        )
        self._server = uvicorn.Server(config)
        serve = threading.Thread(
            target=lambda: asyncio.run(self._server.serve(sockets=[sock])),
            name="openai-endpoint",
            daemon=True,
        )
        batcher = threading.Thread(target=self._batch_loop, name="openai-batcher", daemon=True)
        self._threads = [serve, batcher]
        for thread in self._threads:
            thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not serve.is_alive():
                self.stop()
                raise RuntimeError(f"the OpenAI endpoint did not start on {HOST}:{self.port}")
            time.sleep(0.01)
        log.info("OpenAI endpoint for model %r at %s", self.model_name, self.base_url())
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout=10)
        self._threads = []
        if self._http is not None:
            self._http.close()
            self._http = None

    @property
    def running(self) -> bool:
        return bool(self._threads) and all(t.is_alive() for t in self._threads)

    def base_url(self, session: str | None = None) -> str:
        root = f"http://{HOST}:{self.port}"
        return f"{root}/sessions/{session}/v1" if session else f"{root}/v1"

    def client(self, session: str | None = None, **kwargs: Any) -> Any:
        """An ``openai.OpenAI`` client on this endpoint (its calls filed under ``session``).
        The clients share one HTTP connection pool, closed with the endpoint (a client of its
        own costs an SSL context, ~0.1 s): do not ``close()`` them; pass ``http_client`` for
        one of your own."""
        if "http_client" not in kwargs:
            with self._lock:
                if self._http is None:
                    self._http = openai.DefaultHttpxClient()
            kwargs["http_client"] = self._http
        kwargs.setdefault("max_retries", 0)
        # a turn waits for the whole batch of its step's episodes: more than openai's 600 s
        # default on a CPU
        kwargs.setdefault("timeout", 3600.0)
        return openai.OpenAI(base_url=self.base_url(session), api_key=self.api_key, **kwargs)

    # -- recorded turns ----------------------------------------------------------------------

    def take_turns(self, session: str = DEFAULT_SESSION, clear: bool = True) -> list[Turn]:
        """The turns recorded under ``session``, in call order (and forget them: ``clear``)."""
        with self._lock:
            turns = self._turns.pop(session, []) if clear else list(self._turns.get(session, []))
        return turns

    def _record(self, session: str, turns: list[Turn]) -> None:
        with self._lock:
            self._turns.setdefault(session, []).extend(turns)

    # -- the engine side ---------------------------------------------------------------------

    def _batch_loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            time.sleep(self.batch_wait_s)  # calls of concurrent episodes arrive together
            jobs = [job]
            stop = False
            while True:
                try:
                    more = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                jobs.append(more)
            self._sample(jobs)
            if stop:
                return

    def _sample(self, jobs: list[_Job]) -> None:
        by_params: dict[tuple, list[_Job]] = {}
        for job in jobs:
            by_params.setdefault(astuple(job.params), []).append(job)
        for group in by_params.values():
            try:
                outputs = self.engine.generate_ids([j.prompt_ids for j in group], group[0].params)
            except Exception as err:  # noqa: BLE001 - handed to each waiting request
                for job in group:
                    job.future.set_exception(err)
                continue
            for job, gens in zip(group, outputs, strict=True):
                job.future.set_result(gens)

    # -- the HTTP side (the routes: rft_core.rollout.openai_app) ------------------------------

    def _request(self, body: dict[str, Any]) -> tuple[list[int], SamplingParams, list[str], bool]:
        """Prompt ids, sampling, stop strings and whether to parse tool calls, from a request."""
        if body.get("stream"):
            raise RequestError("stream: true is not served; ask without streaming")
        tools = body.get("tools") or None
        if tools is not None and not isinstance(tools, list):
            raise RequestError("'tools' must be a list")
        tokenizer = self.engine.tokenizer
        messages, template_tools = template_messages(body.get("messages"), tools, tokenizer)
        kwargs = dict(getattr(self.engine, "chat_template_kwargs", None) or {})
        if template_tools:
            kwargs["tools"] = template_tools
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **kwargs
        )
        prompt_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        stops = body.get("stop") or []
        stops = [stops] if isinstance(stops, str) else list(stops)
        try:
            max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
            params = SamplingParams(
                n=int(body.get("n") or 1),
                temperature=float(1.0 if body.get("temperature") is None else body["temperature"]),
                top_p=float(1.0 if body.get("top_p") is None else body["top_p"]),
                top_k=int(-1 if body.get("top_k") is None else body["top_k"]),
                max_tokens=int(max_tokens or self.default_max_tokens),
                seed=None if body.get("seed") is None else int(body["seed"]),
            )
        except (TypeError, ValueError) as err:
            raise RequestError(f"bad sampling parameter: {err}") from None
        if params.n < 1 or params.max_tokens < 1 or params.temperature < 0:
            raise RequestError("n and max_tokens must be >= 1 and temperature >= 0")
        parse_tools = bool(tools) and body.get("tool_choice") != "none"
        return prompt_ids, params, stops, parse_tools

    async def complete(self, body: dict[str, Any], session: str) -> dict[str, Any]:
        """Serve one chat-completions request body (raises RequestError on a bad one)."""
        prompt_ids, params, stops, parse_tools = self._request(body)
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put(_Job(prompt_ids, params, future))
        gens = await asyncio.wrap_future(future)
        return self._answer(body, session, prompt_ids, gens, stops, parse_tools)

    def _answer(
        self,
        body: dict[str, Any],
        session: str,
        prompt_ids: list[int],
        gens: list[Generation],
        stops: list[str],
        parse_tools: bool,
    ) -> dict[str, Any]:
        tokenizer = self.engine.tokenizer
        fallback_version = int(getattr(self.engine, "model_version", 0))
        choices, turns = [], []
        for index, gen in enumerate(gens):
            response, logprobs, text, reason = (
                list(gen.response_ids),
                list(gen.logprobs),
                gen.text,
                gen.finish_reason,
            )
            cut = cut_at_stop(tokenizer, response, stops)
            if cut is not None:
                keep, text = cut
                response, logprobs, reason = response[:keep], logprobs[:keep], "stop"
            content, calls = parse_tool_calls(text) if parse_tools else (text, [])
            if calls:
                reason = "tool_calls"
            version = int(gen.extra.get("model_version", fallback_version))
            turns.append(
                Turn(prompt_ids, response, logprobs, version, reason, text, body["messages"])
            )
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = calls
            choice: dict[str, Any] = {
                "index": index,
                "message": message,
                "finish_reason": reason,
                "logprobs": None,
                "token_ids": response,
            }
            if body.get("logprobs"):
                tokens = tokenizer.convert_ids_to_tokens(response)
                choice["logprobs"] = {
                    "content": [
                        {
                            "token": token,
                            "logprob": lp,
                            "bytes": list(token.encode("utf-8")),
                            "top_logprobs": [],
                        }
                        for token, lp in zip(tokens, logprobs, strict=True)
                    ]
                }
            choices.append(choice)
        self._record(session, turns)
        completion = sum(len(t.response_ids) for t in turns)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": completion,
                "total_tokens": len(prompt_ids) + completion,
            },
            "prompt_token_ids": prompt_ids,
            "model_version": turns[0].model_version if turns else fallback_version,
        }


# -- one endpoint per engine, for the run's lifetime -----------------------------------------

_ENDPOINTS: dict[int, tuple[Any, OpenAIEndpoint]] = {}
_ENDPOINTS_LOCK = threading.Lock()


def endpoint_for(engine: Any, model_name: str | None = None) -> OpenAIEndpoint:
    """The running endpoint on ``engine``, started on first use (see the module doc)."""
    with _ENDPOINTS_LOCK:
        held = _ENDPOINTS.get(id(engine))
        if held is not None and held[0] is engine and held[1].running:
            return held[1]
        name = model_name or getattr(engine, "served_model_name", None) or "policy"
        endpoint = OpenAIEndpoint(engine, str(name)).start()
        _ENDPOINTS[id(engine)] = (engine, endpoint)
        return endpoint


def stop_endpoint(engine: Any) -> None:
    """Stop the endpoint on ``engine``, if one runs (the end of the run)."""
    with _ENDPOINTS_LOCK:
        held = _ENDPOINTS.pop(id(engine), None)
    if held is not None:
        held[1].stop()


@atexit.register
def _stop_all() -> None:
    with _ENDPOINTS_LOCK:
        held = list(_ENDPOINTS.values())
        _ENDPOINTS.clear()
    for _, endpoint in held:
        endpoint.stop()
