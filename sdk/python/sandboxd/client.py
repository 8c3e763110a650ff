"""Client, Sandbox, Process and their parts: API v1 of sandboxd as Python objects."""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterable, Mapping, Sequence

from ._transport import Transport, default_socket, quote
from .errors import NotFound
from .streams import Attachment, EventStream, Forwarder, OutputStream, Tunnel

__all__ = ["Client", "Sandbox", "Process", "RunResult", "DirEntry", "Files", "Processes",
           "Secrets", "AGENTS"]

#: The agents a create's `agent` field names.
AGENTS = ("claude", "codex", "gemini", "opencode")

Argv = Sequence[str] | str


def _argv(argv: Argv) -> list[str]:
    """A list is the program and its arguments; a string runs through `sh -c`."""
    if isinstance(argv, str):
        return ["sh", "-c", argv]
    out = [str(a) for a in argv]
    if not out:
        raise ValueError("argv needs at least the program")
    return out


def _bytes(data: bytes | str | None) -> bytes | None:
    if data is None:
        return None
    return data.encode() if isinstance(data, str) else bytes(data)


def _drop_none(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


@dataclass(frozen=True)
class RunResult:
    """What POST …/run answered: the command ran to its end."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    truncated: bool = False
    timed_out: bool = False
    oom: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def text(self) -> str:
        """stdout as text (UTF-8, undecodable bytes replaced)."""
        return self.stdout.decode("utf-8", "replace")


@dataclass(frozen=True)
class DirEntry:
    """An entry of GET …/dirs: type is "file", "dir", "link" or "other"."""

    name: str
    type: str
    size: int


class Client:
    """A connection to sandboxd.

    endpoint: "unix:///PATH", "http://HOST:PORT" or "https://HOST:PORT"; else
    $SANDBOX_ENDPOINT; else the local socket sandbox-cli uses (/run/sandboxd/sandboxd.sock as
    root, $XDG_RUNTIME_DIR/sandboxd.sock otherwise). token: the operator token or an API key
    (sbk_...), else $SANDBOX_TOKEN (none is needed on the unix socket). ca: a CA file for an
    https endpoint, else $SANDBOX_CA (else the system's CAs). timeout: seconds a plain request
    may take (None: as long as it takes; a create waits for the boot)."""

    def __init__(self, endpoint: str | None = None, token: str | None = None,
                 ca: str | None = None, *, timeout: float | None = None,
                 client_cert: str | None = None, client_key: str | None = None) -> None:
        endpoint = endpoint or os.environ.get("SANDBOX_ENDPOINT") or \
            f"unix://{default_socket()}"
        token = token or os.environ.get("SANDBOX_TOKEN") or None
        ca = ca or os.environ.get("SANDBOX_CA") or None
        self._t = Transport(endpoint, token, ca, timeout=timeout, client_cert=client_cert,
                            client_key=client_key)
        self.secrets = Secrets(self._t)

    @property
    def endpoint(self) -> str:
        return str(self._t.endpoint)

    @property
    def transport(self) -> Transport:
        return self._t

    def close(self) -> None:
        """Closes the kept-alive connections (the client stays usable)."""
        self._t.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.endpoint!r})"

    # -- discovery --------------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        return self._t.json("GET", "/v1/health")

    def capabilities(self) -> dict[str, Any]:
        return self._t.json("GET", "/v1/capabilities")

    def whoami(self) -> dict[str, Any]:
        return self._t.json("GET", "/v1/whoami")

    def node(self) -> dict[str, Any]:
        return self._t.json("GET", "/v1/node")

    # -- sandboxes --------------------------------------------------------------------------------

    def create_sandbox(self, *, name: str | None = None, image: str | None = None,
                       cpus: int | None = None, memory_mb: int | None = None,
                       disk_mb: int | None = None, env: Mapping[str, str] | None = None,
                       network: Mapping[str, Any] | None = None,
                       labels: Mapping[str, str] | None = None,
                       idle_timeout_secs: int | None = None, idle_action: str | None = None,
                       lifetime_secs: int | None = None, bound_to_client: bool | None = None,
                       volumes: Sequence[Any] | None = None, wait: bool | None = None,
                       agent: Mapping[str, Any] | None = None,
                       **extra: Any) -> "Sandbox":
        """POST /v1/sandboxes. Every field is optional (None leaves it to the server).
        agent: {"name": "claude"|"codex"|"gemini"|"opencode", "task"?, "repo"?, "args"?}.
        A boot that failed still returns the sandbox, in state "failed" (check .state).
        Use it as a context manager to delete it at the end of the block."""
        body = _drop_none({
            "name": name, "image": image, "cpus": cpus, "memory_mb": memory_mb,
            "disk_mb": disk_mb, "env": dict(env) if env is not None else None,
            "network": dict(network) if network is not None else None,
            "labels": dict(labels) if labels is not None else None,
            "idle_timeout_secs": idle_timeout_secs, "idle_action": idle_action,
            "lifetime_secs": lifetime_secs, "bound_to_client": bound_to_client,
            "volumes": list(volumes) if volumes is not None else None, "wait": wait,
            "agent": dict(agent) if agent is not None else None, **extra})
        return Sandbox(self, self._t.json("POST", "/v1/sandboxes", body))

    def create_agent(self, name: str, task: str | None = None, *, repo: str | None = None,
                     args: Sequence[str] | None = None, **create: Any) -> "Sandbox":
        """A sandbox running a coding agent (claude, codex, gemini, opencode): create with
        `agent`. Its credential comes from create's env (e.g. env={"ANTHROPIC_API_KEY": ...})
        or the caller's saved secret (client.secrets.set). The agent's process is
        sandbox.agent_process()."""
        agent = _drop_none({"name": name, "task": task, "repo": repo,
                            "args": list(args) if args is not None else None})
        return self.create_sandbox(agent=agent, **create)

    def list_sandboxes(self, *, state: str | Iterable[str] | None = None,
                       labels: Mapping[str, str] | None = None) -> list["Sandbox"]:
        """GET /v1/sandboxes: newest first; state (one or several) and labels filter."""
        query: list[tuple[str, str]] = []
        if isinstance(state, str):
            query.append(("state", state))
        elif state is not None:
            query += [("state", s) for s in state]
        for k, v in (labels or {}).items():
            query.append(("label", f"{k}={v}"))
        doc = self._t.json("GET", "/v1/sandboxes", query=query)
        return [Sandbox(self, d) for d in doc.get("sandboxes", [])]

    def get_sandbox(self, ref: str) -> "Sandbox":
        """GET /v1/sandboxes/{ref}, by id or name."""
        return Sandbox(self, self._t.json("GET", f"/v1/sandboxes/{quote(ref)}"))

    def delete_sandbox(self, ref: str) -> None:
        """DELETE /v1/sandboxes/{ref}: ends it and discards its disk (idempotent by id)."""
        self._t.request("DELETE", f"/v1/sandboxes/{quote(ref)}")

    # -- events -----------------------------------------------------------------------------------

    def events(self, *, sandbox: str | None = None, since: int | None = None,
               reconnect: bool = False, timeout: float | None = None) -> EventStream:
        """The live events stream (SSE) as an iterator of Event: every sandbox the caller
        sees, or one (sandbox=REF). since=N replays the stored events after seq N first.
        timeout: seconds a read may wait (keep-alives come every 15 s)."""
        return EventStream(self._t, sandbox=sandbox, since=since, reconnect=reconnect,
                           timeout=timeout)


class Secrets:
    """Per-user secrets (GET/PUT/DELETE /v1/secrets): write-only values, e.g. an agent's API
    key. Values are never returned."""

    def __init__(self, t: Transport) -> None:
        self._t = t

    def list(self) -> list[dict[str, Any]]:
        """[{"name", "updated_at"}, ...]"""
        return self._t.json("GET", "/v1/secrets").get("secrets", [])

    def set(self, name: str, value: str) -> dict[str, Any]:
        return self._t.json("PUT", f"/v1/secrets/{quote(name)}", {"value": value})

    def delete(self, name: str) -> None:
        self._t.request("DELETE", f"/v1/secrets/{quote(name)}")

    def __contains__(self, name: object) -> bool:
        return any(s.get("name") == name for s in self.list())


class Sandbox:
    """One sandbox: its fields as of the last answer (refresh() reads them again), and what
    can be done with it. `with` deletes it at the end of the block."""

    def __init__(self, client: Client, data: dict[str, Any]) -> None:
        self.client = client
        self.data = data
        self.processes = Processes(self)
        self.files = Files(self)

    # fields
    @property
    def id(self) -> str:
        return self.data["id"]

    @property
    def name(self) -> str | None:
        return self.data.get("name")

    @property
    def state(self) -> str:
        return self.data["state"]

    @property
    def image(self) -> str:
        return self.data.get("image", "")

    @property
    def reason(self) -> str | None:
        return self.data.get("reason")

    @property
    def labels(self) -> dict[str, str]:
        return self.data.get("labels", {})

    @property
    def network(self) -> dict[str, Any]:
        return self.data.get("network", {})

    @property
    def env_names(self) -> list[str]:
        return self.data.get("env_names", [])

    @property
    def owner(self) -> str | None:
        return self.data.get("owner")

    @property
    def agent(self) -> dict[str, Any] | None:
        """The agent it runs ({"name","task","repo","state","pid","exit_code","message"}),
        or None."""
        return self.data.get("agent")

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, name={self.name!r}, state={self.state!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sandbox) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def _path(self) -> str:
        return f"/v1/sandboxes/{quote(self.id)}"

    def _set(self, data: dict[str, Any]) -> "Sandbox":
        self.data = data
        return self

    # lifecycle
    def refresh(self) -> "Sandbox":
        return self._set(self.client._t.json("GET", self._path))

    def stop(self) -> "Sandbox":
        """Stops it, keeping its disk; returns once it is stopped."""
        return self._set(self.client._t.json("POST", self._path + "/stop"))

    def start(self) -> "Sandbox":
        """Boots a stopped (or failed) sandbox's disk again; returns once it runs."""
        return self._set(self.client._t.json("POST", self._path + "/start"))

    def suspend(self) -> "Sandbox":
        """Suspends it: memory and disk are kept, no VM runs; returns once it is suspended.
        Needs the server's capability "suspend" (else Unsupported)."""
        return self._set(self.client._t.json("POST", self._path + "/suspend"))

    def resume(self) -> "Sandbox":
        """Resumes a suspended sandbox; returns once it runs, its processes carrying on. A
        request that needs the guest (run, exec, files) resumes it too."""
        return self._set(self.client._t.json("POST", self._path + "/resume"))

    def update(self, **fields: Any) -> "Sandbox":
        """PATCH: name, labels, network, idle_timeout_secs, idle_action, bound_to_client."""
        return self._set(self.client._t.json("PATCH", self._path, fields))

    def delete(self) -> None:
        """Ends it and discards its disk."""
        self.client._t.request("DELETE", self._path)
        self.data = {**self.data, "state": "terminated"}

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.delete()
        except NotFound:
            pass

    # what happened
    def audit(self) -> dict[str, Any]:
        """GET …/events: {"events": [...], "truncated", "last_seq"}."""
        return self.client._t.json("GET", self._path + "/events")

    def events(self, *, since: int | None = None, reconnect: bool = False,
               timeout: float | None = None) -> EventStream:
        """The live events stream of this sandbox alone."""
        return self.client.events(sandbox=self.id, since=since, reconnect=reconnect,
                                  timeout=timeout)

    def metrics(self) -> list[dict[str, Any]]:
        return self.client._t.json("GET", self._path + "/metrics").get("samples", [])

    # processes
    def run(self, argv: Argv, *, env: Mapping[str, str] | None = None,
            cwd: str | None = None, stdin: bytes | str | None = None,
            timeout_secs: int | None = None) -> RunResult:
        """Runs a command and waits for its end (POST …/run). argv: a list, or a string run
        by `sh -c`. A failure to start raises (InvalidRequest: command not found...); a
        command that ran returns its RunResult, whatever its exit code."""
        body = _drop_none({"argv": _argv(argv), "env": dict(env) if env else None, "cwd": cwd,
                           "timeout_secs": timeout_secs})
        if stdin is not None:
            body["stdin"] = base64.b64encode(_bytes(stdin) or b"").decode()
        doc = self.client._t.json("POST", self._path + "/run", body)
        return RunResult(exit_code=doc["exit_code"], stdout=base64.b64decode(doc["stdout"]),
                         stderr=base64.b64decode(doc["stderr"]),
                         truncated=bool(doc.get("truncated")),
                         timed_out=bool(doc.get("timed_out")), oom=bool(doc.get("oom")))

    def agent_process(self) -> "Process":
        """The agent's process (a kept TTY process: attach() to it)."""
        agent = self.refresh().agent
        if not agent or agent.get("pid") is None:
            raise NotFound(f"sandbox '{self.id}' runs no agent process", status=404)
        return self.processes.get(agent["pid"])

    # ports
    def tunnel(self, port: int, *, timeout: float | None = None) -> Tunnel:
        """A TCP connection to 127.0.0.1:port inside the sandbox (sbx-tunnel/1), used like a
        socket. Nothing listening there: Conflict."""
        sock, rest = self.client._t.upgrade(self._path + "/tunnel", "sbx-tunnel/1",
                                            query=[("port", str(int(port)))], timeout=timeout)
        sock.settimeout(None)
        return Tunnel(sock, rest, int(port))

    def forward(self, guest_port: int, local_port: int = 0,
                host: str = "127.0.0.1") -> Forwarder:
        """Listens on host:local_port (0: any free port, see .port) and tunnels each
        connection to guest_port. A context manager."""
        return Forwarder(lambda: self.tunnel(guest_port), local_port, host)

    def preview(self, port: int) -> str:
        """A preview URL for a web server on port inside the sandbox (POST …/previews),
        to open in a browser."""
        return self.client._t.json("POST", self._path + "/previews", {"port": int(port)})["url"]


class Processes:
    """sandbox.processes: start, list, get."""

    def __init__(self, sb: Sandbox) -> None:
        self._sb = sb

    def start(self, argv: Argv, *, env: Mapping[str, str] | None = None, cwd: str | None = None,
              stdin: bytes | str | None = None, timeout_secs: int | None = None,
              tty: bool | None = None, rows: int | None = None, cols: int | None = None,
              keep: bool | None = None) -> "Process":
        """POST …/processes: starts it and returns at once; its stdin stays open (write()
        to it, close_stdin()), its output is output() or attach()."""
        body = _drop_none({"argv": _argv(argv), "env": dict(env) if env else None, "cwd": cwd,
                           "timeout_secs": timeout_secs, "tty": tty, "rows": rows,
                           "cols": cols, "keep": keep})
        if stdin is not None:
            body["stdin"] = base64.b64encode(_bytes(stdin) or b"").decode()
        return Process(self._sb, self._sb.client._t.json("POST", self._sb._path + "/processes",
                                                         body))

    def list(self) -> list["Process"]:
        doc = self._sb.client._t.json("GET", self._sb._path + "/processes")
        return [Process(self._sb, d) for d in doc.get("processes", [])]

    def get(self, pid: int) -> "Process":
        return Process(self._sb, self._sb.client._t.json(
            "GET", f"{self._sb._path}/processes/{int(pid)}"))


class Process:
    """A process in a sandbox, as of the last answer (refresh() reads it again)."""

    def __init__(self, sandbox: Sandbox, data: dict[str, Any]) -> None:
        self.sandbox = sandbox
        self.data = data

    @property
    def pid(self) -> int:
        return self.data["pid"]

    @property
    def state(self) -> str:
        return self.data["state"]

    @property
    def exit_code(self) -> int | None:
        return self.data.get("exit_code")

    @property
    def argv(self) -> list[str]:
        return self.data.get("argv", [])

    @property
    def tty(self) -> bool:
        return bool(self.data.get("tty"))

    def __repr__(self) -> str:
        return f"Process(pid={self.pid}, state={self.state!r}, exit_code={self.exit_code!r})"

    @property
    def _path(self) -> str:
        return f"{self.sandbox._path}/processes/{self.pid}"

    def refresh(self) -> "Process":
        self.data = self.sandbox.client._t.json("GET", self._path)
        return self

    def output(self, *, timeout: float | None = None) -> OutputStream:
        """Its output from the oldest byte kept, following live until it ends: iterate for
        OutputChunk items; then .exit_code."""
        return OutputStream(self.sandbox.client._t.stream("GET", self._path + "/output",
                                                          timeout=timeout))

    def wait(self) -> int | None:
        """Follows its output to the end and returns its exit code."""
        with self.output() as out:
            for _ in out:
                pass
        self.refresh()
        return out.exit_code

    def write(self, data: bytes | str | BinaryIO, *, close: bool = False) -> None:
        """Sends bytes to its stdin (close=True closes it after them). A file object is
        streamed."""
        body: bytes | BinaryIO = data.encode() if isinstance(data, str) else \
            data if hasattr(data, "read") else bytes(data)  # type: ignore[arg-type]
        self.sandbox.client._t.request("POST", self._path + "/stdin",
                                       query=[("close", "1")] if close else None, body=body,
                                       content_type="application/octet-stream")

    def close_stdin(self) -> None:
        self.sandbox.client._t.request("POST", self._path + "/stdin", query=[("close", "1")],
                                       content_type="application/octet-stream")

    def signal(self, name: str = "TERM") -> None:
        """INT, TERM, KILL, HUP, QUIT, USR1, USR2 or WINCH, to its process group."""
        self.sandbox.client._t.request("POST", self._path + "/signal",
                                       json_body={"signal": name})

    def kill(self) -> None:
        self.signal("KILL")

    def attach(self, *, timeout: float | None = None) -> Attachment:
        """An interactive session over sbx-stream/1: a context manager with send(),
        close_stdin(), signal(), resize() and recv() / iteration over frames."""
        sock, rest = self.sandbox.client._t.upgrade(self._path + "/attach", "sbx-stream/1",
                                                    timeout=timeout)
        sock.settimeout(None)
        return Attachment(sock, rest)


class Files:
    """sandbox.files: read, write, list, remove, by absolute guest path."""

    def __init__(self, sb: Sandbox) -> None:
        self._sb = sb

    def _q(self, path: str) -> list[tuple[str, str]]:
        return [("path", path)]

    def read(self, path: str) -> bytes:
        """The file's bytes (at most 64 MiB)."""
        _, _, body = self._sb.client._t.request("GET", self._sb._path + "/files",
                                                query=self._q(path))
        return body

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def write(self, path: str, data: bytes | str | BinaryIO) -> None:
        """Creates or replaces the file whole (missing directories are made). A str is
        written as UTF-8; a file object is streamed."""
        body: bytes | BinaryIO = data.encode() if isinstance(data, str) else \
            data if hasattr(data, "read") else bytes(data)  # type: ignore[arg-type]
        self._sb.client._t.request("PUT", self._sb._path + "/files", query=self._q(path),
                                   body=body, content_type="application/octet-stream")

    def list(self, path: str) -> list[DirEntry]:
        doc = self._sb.client._t.json("GET", self._sb._path + "/dirs", query=self._q(path))
        return [DirEntry(e["name"], e["type"], e["size"]) for e in doc.get("entries", [])]

    def remove(self, path: str) -> None:
        """Removes a file, a link or an empty directory."""
        self._sb.client._t.request("DELETE", self._sb._path + "/files", query=self._q(path))

    def exists(self, path: str) -> bool:
        try:
            parent, _, name = path.rstrip("/").rpartition("/")
            return any(e.name == name for e in self.list(parent or "/"))
        except NotFound:
            return False
