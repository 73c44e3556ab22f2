"""A small headless-Chromium driver for the browser tests, with no Python dependency.

Chromium is driven over the Chrome DevTools Protocol (CDP) through
``--remote-debugging-pipe``: the browser reads commands from its file descriptor 3 and
writes responses and events to its file descriptor 4, each message one JSON object
terminated by a NUL byte. No port is opened, so nothing else on the machine can talk
to the browser and there is no port to pick or to wait for.

Typical use::

    with Browser.launch("chromium", profile_root=tmp_path) as browser:
        page = browser.new_page()
        page.goto("file:///.../validation.html")
        page.wait_for("document.querySelectorAll('img').length > 0")
        heights = page.evaluate("[...document.querySelectorAll('section')].map(s => s.offsetHeight)")
        page.screenshot(tmp_path / "page.png", full_page=True)
        assert not page.console_errors

Design notes:

* **One process group, stopped by PID.** The browser starts in its own session
  (``start_new_session``), so its renderer, GPU and utility processes share its process
  group; :meth:`Browser.close` asks the browser to quit (``Browser.close``), then sends
  SIGTERM and finally SIGKILL to that group, and reaps the main process. Nothing is ever
  stopped by name.
* **Fresh profile.** Every launch gets a new, empty ``--user-data-dir`` (removed on close),
  so no cookies, cache or service workers leak between tests or from a person's profile.
* **Quiet.** ``--disable-background-networking`` and friends keep Chromium from phoning
  home (component updates, safe-browsing lists, translate), so any network request a test
  sees comes from the page under test.
* **Synchronous, no threads.** :meth:`Browser.send` writes one command and reads messages
  until its response arrives; events read on the way are kept in :attr:`Page.events`
  (console errors and network requests are also extracted as they arrive). Waiting for an
  event or for a JavaScript condition is polling with a deadline.
* **Flat sessions.** Pages are created with ``Target.createTarget`` and attached with
  ``Target.attachToTarget(flatten=True)``; commands for a page carry its ``sessionId``.

Why the fds are placed by a tiny Python trampoline: the browser needs the pipes at
exactly fds 3 and 4. ``subprocess`` keeps ``pass_fds`` at their own numbers; moving them
with ``preexec_fn`` is unsafe when the test process has threads (MLflow, SQLAlchemy), and
Debian's ``/bin/sh`` (dash) cannot redirect fds above 9. So the child is
``python -I -S -c <dup2 the pipes to 3 and 4, then execvp the browser>``: it *execs*, so
the PID that :class:`subprocess.Popen` reports is the browser's own. The parent first
moves its pipe ends to fds >= 10 so the two ``dup2`` calls cannot clobber each other.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: Flags every launch uses. ``--headless`` is Chromium's current ("new") headless mode.
DEFAULT_FLAGS = (
    "--headless",
    "--no-sandbox",  # containers and CI run as root, where the sandbox cannot start
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-sync",
    "--disable-features=Translate,MediaRouter,OptimizationHints",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--mute-audio",
    "--hide-scrollbars",
    "--disable-dev-shm-usage",  # small /dev/shm in containers
    "--remote-debugging-pipe",
)


class BrowserError(RuntimeError):
    """The browser died, answered a command with an error, or a wait timed out."""


class Browser:
    """A running headless Chromium and its DevTools pipe. Use :meth:`launch`."""

    def __init__(
        self,
        proc: subprocess.Popen,
        to_browser: int,
        from_browser: int,
        profile: Path,
        stderr_path: Path,
        timeout: float,
    ):
        self.proc = proc
        self.pid = proc.pid
        self.timeout = timeout
        self._out = to_browser
        self._in = from_browser
        self._profile = profile
        self._stderr_path = stderr_path
        self._buffer = b""
        self._next_id = 0
        self._responses: dict[int, dict] = {}
        self._pages: dict[str, Page] = {}
        self.version: dict[str, Any] = {}
        #: PIDs of the browser's process group still alive after :meth:`close` (should be empty).
        self.leftover: list[int] = []

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def launch(
        cls,
        executable: str = "chromium",
        *,
        window: tuple[int, int] = (1280, 900),
        profile_root: str | os.PathLike | None = None,
        extra_flags: Iterable[str] = (),
        timeout: float = 30.0,
    ) -> Browser:
        """Start ``executable`` headless with a fresh profile and return the connected browser.

        ``profile_root`` is where the temporary profile folder is made (default: the
        system temp dir). ``timeout`` is the default for every command and wait.
        """
        profile = Path(tempfile.mkdtemp(prefix="chromium-profile-", dir=profile_root))
        stderr_path = profile / "chromium-stderr.log"  # read on errors; removed with the profile
        # Pipe 1: we write commands, the browser reads them on its fd 3.
        # Pipe 2: the browser writes on its fd 4, we read. Browser ends moved to fds >= 10.
        cmd_read, cmd_write = os.pipe()
        evt_read, evt_write = os.pipe()
        cmd_read, evt_write = _above_9(cmd_read), _above_9(evt_write)
        args = [
            executable,
            *DEFAULT_FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={window[0]},{window[1]}",
            *extra_flags,
            "about:blank",
        ]
        trampoline = (
            f"import os, sys; os.dup2({cmd_read}, 3); os.dup2({evt_write}, 4); "
            f"os.close({cmd_read}); os.close({evt_write}); os.execvp(sys.argv[1], sys.argv[1:])"
        )
        try:
            with open(stderr_path, "wb") as stderr:
                proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", trampoline, *args],
                    pass_fds=(cmd_read, evt_write),
                    stdin=subprocess.DEVNULL,
                    stdout=stderr,
                    stderr=stderr,
                    start_new_session=True,
                )
        except BaseException:
            for fd in (cmd_read, cmd_write, evt_read, evt_write):
                os.close(fd)
            shutil.rmtree(profile, ignore_errors=True)
            raise
        os.close(cmd_read)  # the browser's ends, now held by the browser only
        os.close(evt_write)
        browser = cls(proc, cmd_write, evt_read, profile, stderr_path, timeout)
        try:
            browser.version = browser.send("Browser.getVersion")
        except BaseException:
            browser.close()
            raise
        return browser

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self, grace: float = 5.0) -> None:
        """Quit the browser and make sure none of its processes is left.

        ``Browser.close`` over the pipe first (a clean shutdown), then SIGTERM, then
        SIGKILL to the browser's process group, each after ``grace`` seconds.
        """
        if self.proc.poll() is None:
            try:
                self._write({"id": self._new_id(), "method": "Browser.close"})
            except OSError:
                pass
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        # Whatever is left of the group led by the browser: renderers, GPU, utilities.
        self.leftover = stop_process_group(self.proc, grace)
        for fd in (self._out, self._in):
            try:
                os.close(fd)
            except OSError:
                pass
        self._out = self._in = -1
        shutil.rmtree(self._profile, ignore_errors=True)

    def stderr_tail(self, chars: int = 3000) -> str:
        """The end of the browser's own stderr (crash reasons, sandbox errors)."""
        try:
            return self._stderr_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    # ------------------------------------------------------------------ protocol
    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _write(self, message: dict) -> None:
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._out, data) :]

    def _read_one(self, deadline: float) -> dict | None:
        """Next message from the browser, or None when ``deadline`` passes."""
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self._in], [], [], min(remaining, 0.5))
            if not ready:
                if self.proc.poll() is not None:
                    raise BrowserError(f"browser exited with {self.proc.returncode}:\n{self.stderr_tail()}")
                continue
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise BrowserError(f"browser closed the DevTools pipe:\n{self.stderr_tail()}")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(raw)

    def _dispatch(self, message: dict) -> None:
        if "id" in message:
            self._responses[message["id"]] = message
            return
        page = self._pages.get(message.get("sessionId", ""))
        if page is not None:
            page._on_event(message)

    def pump(self, deadline: float) -> bool:
        """Read and dispatch one message; False if none arrived before ``deadline``."""
        message = self._read_one(deadline)
        if message is None:
            return False
        self._dispatch(message)
        return True

    def send(
        self, method: str, params: dict | None = None, session_id: str | None = None, timeout: float | None = None
    ) -> dict:
        """Send one command and return its ``result``; raise :class:`BrowserError` on an error."""
        msg_id = self._new_id()
        message: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session_id:
            message["sessionId"] = session_id
        self._write(message)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while msg_id not in self._responses:
            if not self.pump(deadline):
                raise BrowserError(f"no answer to {method} within {timeout or self.timeout} s")
        response = self._responses.pop(msg_id)
        if "error" in response:
            raise BrowserError(f"{method} failed: {response['error']}")
        return response.get("result", {})

    # ------------------------------------------------------------------ pages
    def new_page(self, width: int | None = None, height: int | None = None) -> Page:
        """Open a new tab (about:blank), attach to it and enable Page, Runtime, Network, Log."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, target, session)
        self._pages[session] = page
        for domain in ("Page", "Runtime", "Network", "Log"):
            page.send(f"{domain}.enable")
        if width and height:
            page.send(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            )
        return page


class Page:
    """One attached tab. Events are collected as the browser sends them."""

    def __init__(self, browser: Browser, target_id: str, session_id: str):
        self.browser = browser
        self.target_id = target_id
        self.session_id = session_id
        self.events: list[dict] = []
        #: console.error/assert calls, uncaught exceptions and the browser's error log entries
        #: (failed loads, blocked content), as one-line strings.
        self.console_errors: list[str] = []
        #: Every URL the page requested (document, scripts, images, XHR, data: URLs included).
        self.requests: list[str] = []
        #: (url, error text) of requests that failed (no response: refused, blocked, aborted).
        self.failed_requests: list[tuple[str, str]] = []
        #: (status, url) of responses with an HTTP status >= 400.
        self.http_errors: list[tuple[int, str]] = []
        #: Uncaught JavaScript exceptions (also in :attr:`console_errors`).
        self.exceptions: list[str] = []
        self._request_urls: dict[str, str] = {}

    def send(self, method: str, params: dict | None = None, timeout: float | None = None) -> dict:
        return self.browser.send(method, params, session_id=self.session_id, timeout=timeout)

    def _on_event(self, message: dict) -> None:
        self.events.append(message)
        method, params = message["method"], message.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            text = " ".join(
                str(a["value"] if a.get("value") is not None else a.get("description", ""))
                for a in params.get("args", [])
            )
            self.console_errors.append(f"console.{params['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text", "")
            line = f"uncaught: {text.splitlines()[0] if text else details}"
            self.exceptions.append(line)
            self.console_errors.append(line)
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.console_errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".strip())
        elif method == "Network.requestWillBeSent":
            url = params.get("request", {}).get("url", "")
            self.requests.append(url)
            self._request_urls[params.get("requestId", "")] = url
        elif method == "Network.responseReceived":
            status = params.get("response", {}).get("status", 0)
            if status >= 400:
                self.http_errors.append((status, params["response"].get("url", "")))
        elif method == "Network.loadingFailed":
            url = self._request_urls.get(params.get("requestId", ""), "?")
            self.failed_requests.append((url, params.get("errorText", "")))

    def wait_event(self, method: str, since: int = 0, timeout: float | None = None) -> dict:
        """The first event ``method`` at index ``since`` or later of :attr:`events`, waiting for it."""
        deadline = time.monotonic() + (self.browser.timeout if timeout is None else timeout)
        index = since
        while True:
            for i in range(index, len(self.events)):
                if self.events[i]["method"] == method:
                    return self.events[i]
            index = len(self.events)
            if not self.browser.pump(deadline):
                raise BrowserError(f"no {method} event within {timeout or self.browser.timeout} s")

    def goto(self, url: str, timeout: float | None = None) -> None:
        """Navigate and wait for the load event (all images and scripts of the document loaded).

        A same-document navigation (only the ``#fragment`` changes, as between the routes
        of a single-page app) loads nothing and fires no load event: Chromium then answers
        without a ``loaderId``, and this returns at once; wait for the app's content with
        :meth:`wait_for`.
        """
        mark = len(self.events)
        result = self.send("Page.navigate", {"url": url}, timeout=timeout)
        if result.get("errorText"):
            raise BrowserError(f"navigation to {url} failed: {result['errorText']}")
        if result.get("loaderId"):
            self.wait_event("Page.loadEventFired", since=mark, timeout=timeout)

    def evaluate(self, expression: str, timeout: float | None = None) -> Any:
        """Value of a JavaScript expression (promises awaited), returned by value (JSON)."""
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True, "userGesture": True},
            timeout=timeout,
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"JavaScript error in {expression[:80]!r}: {text}")
        return result.get("result", {}).get("value")

    def wait_for(
        self, condition: str, timeout: float | None = None, interval: float = 0.25, message: str | None = None
    ) -> Any:
        """Poll the JavaScript ``condition`` until it is truthy; return its value.

        Events keep being collected while waiting. On timeout, raise with ``message`` (or
        the condition) and the page's visible text, which is usually what explains it.
        """
        timeout = self.browser.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(condition)
            if value:
                return value
            if time.monotonic() >= deadline:
                text = self.evaluate("document.body ? document.body.innerText.slice(0, 1500) : ''")
                raise BrowserError(
                    f"timed out after {timeout} s waiting for {message or condition}; page text:\n{text}"
                )
            # Keep reading events (console errors, requests) while we wait.
            self.browser.pump(min(deadline, time.monotonic() + interval))

    def text(self) -> str:
        """The page's rendered text (``document.body.innerText``)."""
        return self.evaluate("document.body ? document.body.innerText : ''")

    def screenshot(self, path: str | os.PathLike, full_page: bool = False) -> Path:
        """Save a PNG of the viewport, or of the whole document with ``full_page``."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            metrics = self.send("Page.getLayoutMetrics")
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            params["captureBeyondViewport"] = True
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self.send("Page.captureScreenshot", params, timeout=60)["data"]
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path


def _above_9(fd: int) -> int:
    """``fd`` moved to the lowest free number >= 10 (close-on-exec), so it cannot collide with 3 or 4."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


def group_members(pgid: int) -> list[int]:
    """PIDs of the live (non-zombie) processes in process group ``pgid``, read from /proc.

    Zombies are left out: a process whose parent died is reaped by whoever adopts it,
    which in a container may never happen, and a zombie holds no resources.
    """
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        state, process_group = fields[0], int(fields[2])
        if process_group == pgid and state not in ("Z", "X"):
            pids.append(int(stat.parent.name))
    return pids


def stop_process_group(proc: subprocess.Popen, grace: float = 10.0) -> list[int]:
    """SIGTERM the process group led by ``proc``, SIGKILL what is left after ``grace`` s.

    ``proc`` must have been started with ``start_new_session=True`` (so its PID is its
    group id). Returns the PIDs still alive at the end (empty when all is well).
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and group_members(proc.pid):
            time.sleep(0.1)
        if not group_members(proc.pid):
            break
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    return group_members(proc.pid)
