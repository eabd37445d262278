"""Headless Chromium driven over the DevTools protocol, for the report's
browser test and benchmark.

Starts Debian's `chromium` with a private profile in a temporary
directory, attaches to one page and records what the page does: console
messages, uncaught exceptions, log entries (CSP violations among them)
and every network request. Needs Debian's python3-websocket.

    with Chromium.start() as browser:
        page = browser.load("file:///tmp/report.html", ready="window.ok")
        value = browser.evaluate("document.title")
        browser.screenshot("shot.png")

Chromium.start() raises Unavailable when Chromium or the websocket module
is missing or the browser cannot start (callers skip with its message).
The browser is always killed (its whole process group) on close.
"""

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time


class Unavailable(Exception):
    """Chromium cannot be used here; the message says why."""


class ProtocolError(Exception):
    pass


def find_chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    def __init__(self, proc, profile, ws, stderr_path):
        self._proc = proc
        self._profile = profile
        self._ws = ws
        self._stderr_path = stderr_path
        self._next_id = 0
        self._session = None
        self._events = []
        self.page_url = None

    # ---- lifetime -------------------------------------------------------
    @classmethod
    def start(cls, width=1400, height=1000, timeout=30.0):
        try:
            import websocket  # Debian: python3-websocket
        except ImportError:
            raise Unavailable("python3-websocket is not installed "
                              "(scripts/bootstrap.sh installs it)")
        binary = find_chromium()
        if binary is None:
            raise Unavailable("chromium is not installed "
                              "(scripts/bootstrap.sh installs it)")
        profile = tempfile.mkdtemp(prefix="reshard-chromium-")
        stderr_path = os.path.join(profile, "stderr.log")
        args = [binary, "--headless=new", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--hide-scrollbars",
                "--remote-debugging-port=0",
                "--user-data-dir=" + profile,
                "--window-size=%d,%d" % (width, height), "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # the sandbox refuses root
        with open(stderr_path, "wb") as err:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=err,
                                    start_new_session=True)
        port_file = os.path.join(profile, "DevToolsActivePort")
        deadline = time.monotonic() + timeout
        lines = []
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            if os.path.exists(port_file):
                with open(port_file) as f:
                    lines = f.read().split()
                if len(lines) >= 2:
                    break
            time.sleep(0.05)
        if len(lines) < 2:
            tail = _tail(stderr_path)
            _kill(proc)
            shutil.rmtree(profile, ignore_errors=True)
            raise Unavailable("chromium did not start: " + tail)
        url = "ws://127.0.0.1:%s%s" % (lines[0], lines[1])
        try:
            ws = websocket.create_connection(url, timeout=timeout,
                                             suppress_origin=True)
        except Exception as exc:  # noqa: BLE001 - any failure means unusable
            _kill(proc)
            shutil.rmtree(profile, ignore_errors=True)
            raise Unavailable("cannot connect to chromium: %s" % exc)
        browser = cls(proc, profile, ws, stderr_path)
        try:
            browser._attach(width, height)
        except Exception:
            browser.close()
            raise
        return browser

    def close(self):
        try:
            self._ws.close()
        except Exception:  # noqa: BLE001
            pass
        _kill(self._proc)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- protocol -------------------------------------------------------
    def send(self, method, params=None, session=True, timeout=60.0):
        self._next_id += 1
        message = {"id": self._next_id, "method": method,
                   "params": params or {}}
        if session and self._session:
            message["sessionId"] = self._session
        self._ws.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise ProtocolError("%s: %s" % (method, reply["error"]))
                return reply.get("result", {})

    def _receive(self, deadline):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ProtocolError("timed out waiting for chromium")
        self._ws.settimeout(remaining)
        message = json.loads(self._ws.recv())
        if "method" in message:
            self._events.append(message)
        return message

    def wait_event(self, method, timeout=30.0):
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for event in self._events[seen:]:
                if event["method"] == method:
                    return event
            seen = len(self._events)
            self._receive(deadline)

    def _attach(self, width, height):
        target = self.send("Target.createTarget", {"url": "about:blank"},
                           session=False)
        attached = self.send("Target.attachToTarget",
                             {"targetId": target["targetId"], "flatten": True},
                             session=False)
        self._session = attached["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(domain + ".enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1,
                   "mobile": False})

    # ---- pages ----------------------------------------------------------
    def load(self, url, ready, timeout=60.0):
        """Navigates to `url` and waits until the expression `ready` is
        true. Returns the seconds from navigation to ready."""
        self._events = []
        self.page_url = url
        t0 = time.monotonic()
        self.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired", timeout)
        deadline = t0 + timeout
        while not self.evaluate("Boolean(%s)" % ready):
            if time.monotonic() > deadline:
                raise ProtocolError("page never became ready: " + ready)
            time.sleep(0.02)
        return time.monotonic() - t0

    def evaluate(self, expression):
        result = self.send("Runtime.evaluate",
                           {"expression": expression, "returnByValue": True,
                            "awaitPromise": True})
        if "exceptionDetails" in result:
            raise ProtocolError("evaluate failed: %s" %
                                json.dumps(result["exceptionDetails"])[:2000])
        return result["result"].get("value")

    def screenshot(self, path, full_page=True, max_height=16000):
        params = {"format": "png"}
        if full_page:
            metrics = self.send("Page.getLayoutMetrics")
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            params["captureBeyondViewport"] = True
            params["clip"] = {"x": 0, "y": 0, "width": size["width"],
                              "height": min(size["height"], max_height),
                              "scale": 1}
        shot = self.send("Page.captureScreenshot", params)
        data = base64.b64decode(shot["data"])
        with open(path, "wb") as f:
            f.write(data)
        return len(data)

    # ---- what the page did ----------------------------------------------
    def problems(self):
        """Console messages, exceptions and error log entries since load."""
        out = []
        for e in self._events:
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", "")))
                                for a in p.get("args", []))
                out.append("console.%s: %s" % (p.get("type"), text))
            elif e["method"] == "Runtime.exceptionThrown":
                out.append("exception: %s" % json.dumps(
                    p.get("exceptionDetails", {}))[:1000])
            elif (e["method"] == "Log.entryAdded" and
                  p.get("entry", {}).get("level") in ("error", "warning")):
                entry = p["entry"]
                out.append("log %s (%s): %s" % (entry["level"],
                                                entry.get("source"),
                                                entry.get("text")))
        return out

    def requests(self):
        """URLs the page requested besides the page itself."""
        urls = [e["params"]["request"]["url"] for e in self._events
                if e["method"] == "Network.requestWillBeSent"]
        return [u for u in urls if u != self.page_url]


def _tail(path, limit=800):
    try:
        with open(path, "rb") as f:
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return "(no output)"
    lines = [line for line in data.splitlines()
             if "dbus" not in line and line.strip()]
    return "\n".join(lines)[-limit:] or "(no output)"


def _kill(proc):
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
