"""Where the agent and its tokenizer are, checked in seconds before anything else is looked up.

Standard library only: ``adwm evaluate`` asks here before numpy, torch or the logs load, so an
endpoint that does not answer is named at once instead of after the import, the world model's
lookups and the OpenAI client's retries; a tokenizer or model that is neither on this machine
nor reachable on the hub is named at once instead of after the hub client's retries.
"""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.parse
import urllib.request

REACH_TIMEOUT = 3.0  # seconds: a server on the network answers a GET /models well within this
HUB = "https://huggingface.co"


def endpoint(base_url: str, mode: str | None) -> tuple[str, str]:
    """The base URL the OpenAI client takes (…/v1) and the request mode, from a base URL or a full
    route as lm-evaluation-harness users give it (…/v1/completions, …/v1/chat/completions)."""
    url = base_url.rstrip("/")
    for route, implied in (("/chat/completions", "chat"), ("/completions", "completions")):
        if url.endswith(route):
            if mode not in (None, implied):
                raise ValueError(f"--agent-base-url {base_url} is the {implied} route, but --agent-mode is {mode}: "
                                 f"give the base URL {url[:-len(route)]} or drop --agent-mode")
            return url[:-len(route)], implied
    return url, mode or "completions"


def check_endpoint(base_url: str, timeout: float = REACH_TIMEOUT) -> None:
    """Refuse, naming it, an endpoint that does not answer ``GET {base_url}/models`` within
    ``timeout`` seconds (refused, unknown host, silent). Any HTTP answer counts as an answer: a
    wrong key or a missing model is the policy's to name when it loads."""
    parsed = urllib.parse.urlparse(base_url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"--agent-base-url {base_url}: not an http(s) URL; give the server's base URL, e.g. "
                         "http://127.0.0.1:8000/v1")
    request = urllib.request.Request(base_url.rstrip("/") + "/models", headers={
        "Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY') or 'EMPTY'}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return
    except urllib.error.HTTPError:
        return  # it answered
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise ConnectionError(f"the agent's endpoint {base_url} does not answer ({reason}; GET /models, a "
                              f"{timeout:g} s limit): start the server (e.g. `vllm serve <model>`) or give the URL "
                              "it listens on with --agent-base-url") from None


def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the Hugging Face hub can be reached from here: not where ``HF_HUB_OFFLINE`` is set,
    else a TCP connection to its host within ``timeout`` seconds (no request, no retries)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    parsed = urllib.parse.urlparse(os.environ.get("HF_ENDPOINT") or HUB)
    try:
        with socket.create_connection((parsed.hostname, parsed.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def tokenizer_at_hand(name: str) -> bool:
    """The tokenizer is a local folder or in this machine's Hugging Face cache."""
    folder = os.path.expanduser(name)
    if os.path.isdir(folder):
        return True
    try:
        import huggingface_hub
    except ImportError:
        return False
    return any(isinstance(huggingface_hub.try_to_load_from_cache(name, f), str)
               for f in ("tokenizer_config.json", "tokenizer.json"))


def check_tokenizer(name: str, flag: str = "--agent-tokenizer") -> None:
    """Refuse at once a tokenizer that is neither at hand (``tokenizer_at_hand``) nor reachable
    on the hub, naming what to pass instead."""
    if tokenizer_at_hand(name) or hub_reachable():
        return
    raise FileNotFoundError(f"no tokenizer {name!r} on this machine (neither a folder nor in the Hugging Face cache) "
                            f"and the hub cannot be reached: pass {flag} FOLDER (a local copy of the model's "
                            "tokenizer files), or copy the Hugging Face cache that holds it here ($HF_HOME)")

