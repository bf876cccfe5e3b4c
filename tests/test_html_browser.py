"""The HTML report of a real CPU run in real headless Chromium (Debian's `chromium`), driven over the
DevTools protocol: it renders (screenshot), shows the summary and at least one plot, and the page makes
no network request besides its own file:// load (every Network.requestWillBeSent is recorded)."""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from helpers import small_check, write_suite

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
ws_client = pytest.importorskip("websockets.sync.client", reason="websockets (the 'test' extra) speaks CDP")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--hide-scrollbars", "--window-size=1200,900"]


class Browser:
    """One headless Chromium and one page, over a CDP websocket; every event is kept in `events`."""

    def __init__(self, profile: Path) -> None:
        assert CHROMIUM is not None
        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                                      "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.is_file() and len(port_file.read_text().splitlines()) >= 2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.poll() is not None else ""
                self.close()
                pytest.fail(f"chromium did not open its DevTools port: {err[-2000:]}")
            time.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        self._stack = contextlib.ExitStack()
        self.ws = self._stack.enter_context(
            ws_client.connect(f"ws://127.0.0.1:{port}{path}", max_size=None, open_timeout=30))
        self.events: list[dict[str, Any]] = []
        self._id = 0
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def call(self, method: str, session: str | None = None, timeout: float = 30, **params: Any) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def page(self, method: str, **params: Any) -> dict[str, Any]:
        return self.call(method, self.session, **params)

    def wait_for(self, method: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events:
                if event.get("method") == method and event.get("sessionId") == self.session:
                    return event
            reply = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            self.events.append(reply)

    def page_events(self, method: str) -> list[dict[str, Any]]:
        return [e["params"] for e in self.events if e.get("method") == method and e.get("sessionId") == self.session]

    def js(self, expression: str) -> Any:
        out = self.page("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in out, out
        return out["result"].get("value")

    def load(self, url: str) -> None:
        for domain in ("Network.enable", "Page.enable", "Log.enable", "Runtime.enable"):
            self.page(domain)
        self.page("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")
        time.sleep(0.5)  # let anything a late script or style might fetch show up
        self.js("1")  # and drain the events that arrived meanwhile

    def requests(self) -> list[str]:
        return [e["request"]["url"] for e in self.page_events("Network.requestWillBeSent")]

    def screenshot(self, path: Path) -> bytes:
        data = base64.b64decode(self.page("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"])
        path.write_bytes(data)
        return data

    def close(self) -> None:
        if getattr(self, "_stack", None) is not None:
            self._stack.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    b = Browser(tmp_path / "chromium-profile")
    try:
        yield b
    finally:
        b.close()


def test_the_recorder_sees_a_request_when_a_page_makes_one(browser: Browser, tmp_path: Path) -> None:
    """Control: the same recording reports an external fetch, so an empty record below means something."""
    page = tmp_path / "leaky.html"
    page.write_text('<!DOCTYPE html><html><body><img src="http://127.0.0.1:9/pixel.png"></body></html>')
    browser.load(page.as_uri())
    assert browser.requests() == [page.as_uri(), "http://127.0.0.1:9/pixel.png"]


def test_report_of_a_cpu_run_renders_offline_with_summary_and_plots(project: pytest.Pytester, browser: Browser,
                                                                    tmp_path: Path) -> None:
    write_suite(project, "checks:\n" + small_check("ok") + small_check("too-fast"))
    res = project.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out")
    assert res.ret == 1  # too-fast fails on purpose: the summary must show both outcomes
    report = (project.path / "out" / "latest" / "report.html").resolve()
    browser.load(report.as_uri())

    assert browser.requests() == [report.as_uri()], "the report fetched something besides itself"
    failed = [e for e in browser.page_events("Network.loadingFailed")]
    assert failed == []
    problems = [e["entry"] for e in browser.page_events("Log.entryAdded") if e["entry"]["level"] in ("error", "warning")]
    assert problems == []  # e.g. a Content-Security-Policy violation would be logged here

    summary = browser.js("document.querySelector('p.summary').innerText")
    assert "1 passed" in summary and "1 failed" in summary and "0 error" in summary
    plots = browser.js("[...document.querySelectorAll('svg.plot')].map(s => { const r = s.getBoundingClientRect();"
                       " return [r.width, r.height, s.querySelectorAll('polyline').length]; })")
    assert len(plots) >= 1 and all(w > 100 and h > 100 and lines == 1 for w, h, lines in plots), plots
    assert browser.js("document.title").startswith("clustercheck cpu")

    png = browser.screenshot(tmp_path / "report.png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert width >= 800 and height >= 900, (width, height)  # the full page, not an empty viewport


def test_gpu_figures_render_heatmap_overlay_and_bars(browser: Browser, tmp_path: Path) -> None:
    """The figures of a hand-made 8-GPU record (no GPU needed) as Chromium draws them."""
    from gpu_record import GPUS, SLOW, write_gpu_record

    from helpers import render_all
    from clustercheck.report.figures import colour_for

    report = render_all(write_gpu_record(tmp_path / "run.jsonl"), tmp_path)["html"]
    browser.load(report.as_uri())
    assert browser.requests() == [report.as_uri()]
    assert [e["entry"] for e in browser.page_events("Log.entryAdded") if e["entry"]["level"] in ("error", "warning")] == []

    heat = browser.js("(() => { const s = document.querySelector('svg.heatmap'); const r = s.getBoundingClientRect();"
                      " return {w: r.width, h: r.height, cells: s.querySelectorAll('g.cell').length,"
                      " texts: [...s.querySelectorAll('g.cell text')].map(t => t.textContent),"
                      " sizes: [...s.querySelectorAll('g.cell rect')].map(c => c.getBBox().width)}; })()")
    assert heat["w"] > 300 and heat["h"] > 300 and heat["cells"] == GPUS * (GPUS - 1), heat
    assert "210" in heat["texts"] and min(heat["sizes"]) > 30  # drawn, with room for the GB/s label
    slow_fill = browser.js("[...document.querySelectorAll('svg.heatmap g.cell')].find(g => g.querySelector('title')"
                           f".textContent.startsWith('{SLOW[0]} -> {SLOW[1]}')).querySelector('rect').getAttribute('fill')")
    assert slow_fill == colour_for(0.0)
    overlay = browser.js("[...document.querySelectorAll('svg.overlay')].map(s => [s.getBoundingClientRect().width,"
                         " s.querySelectorAll('polyline').length])")
    assert overlay == [[640, 3]]
    two = browser.js("[...document.querySelectorAll('svg.plot')].map(s => s.querySelectorAll('polyline').length)")
    assert sorted(two) == [1, 2, 2]  # all_reduce in place; all_gather and reduce_scatter out and in
    bar_rects = browser.js("document.querySelectorAll('svg.bars g rect').length")
    assert bar_rects == 2 * GPUS

    png = browser.screenshot(tmp_path / "gpu-report.png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    box = browser.js("(() => { const r = document.querySelector('svg.heatmap').getBoundingClientRect();"
                     " return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]; })()")
    clip = {"x": box[0], "y": box[1], "width": box[2], "height": box[3], "scale": 1}
    data = base64.b64decode(browser.page("Page.captureScreenshot", format="png", clip=clip,
                                         captureBeyondViewport=True)["data"])
    (tmp_path / "heatmap.png").write_bytes(data)
    assert int.from_bytes(data[16:20], "big") >= 300


def _long_message_record(path: Path) -> Path:
    """A record whose items' messages are one long unbroken token each: a 120-character GID, an NCCL_IB_HCA
    list, a 100k-character log line."""
    import json

    gid = "fe80:0000:0000:0000:" + "0123:4567:89ab:cdef:" * 5
    hca = "NCCL_IB_HCA=" + ",".join(f"=mlx5_{i}:1" for i in range(40))
    lines: list[dict[str, Any]] = [
        {"type": "run", "schema": 1, "started": "2026-01-01T00:00:00+00:00", "argv": ["clustercheck", "run"],
         "platform": "cpu", "platform_detected": True, "facts": {"host": "vm", "gpu_count": 0},
         "thresholds": {"file": "thresholds/cpu.yaml", "sha256": "ab"},
         "suites": [{"file": "suites/s.yaml", "sha256": "cd"}], "launcher": "local", "backend": "gloo", "ranks": 2}]
    for i, (outcome, message) in enumerate([("error", f"no port with GID {gid}"), ("failed", hca),
                                            ("error", "x" * 100_000), ("skipped", "short")]):
        lines.append({"type": "result", "name": f"c{i}", "check": f"c{i}", "node": "vm", "measure": "all_reduce",
                      "scope": "node", "suite_file": "suites/s.yaml", "line": 3 + i, "outcome": outcome,
                      "duration": 0.1, "message": message})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_a_long_unbroken_message_keeps_every_verdict_on_screen(browser: Browser, tmp_path: Path) -> None:
    """One long token in a message (a GID, an HCA list, a 100k-character log) neither widens the Checks table
    past the window nor hides its verdicts; the table links to the whole message in the item's section."""
    from helpers import render_all

    report = render_all(_long_message_record(tmp_path / "run.jsonl"), tmp_path)["html"]
    browser.load(report.as_uri())
    edges = browser.js("[...document.querySelectorAll('#checks + table tr')].slice(1).map(tr => {"
                       " const td = tr.querySelectorAll('td')[tr.querySelectorAll('td').length - 2];"
                       " return [td.textContent, td.getBoundingClientRect().right]; })")
    width = browser.js("window.innerWidth")
    assert [t for t, _ in edges] == ["error", "failed", "error", "skipped"], edges
    assert all(right <= width for _, right in edges), (width, edges)
    assert browser.js("document.documentElement.scrollWidth") <= width
    links = browser.js("[...document.querySelectorAll('#checks + table a')].map(a => a.getAttribute('href'))")
    assert links == ["#check-2", "#check-3"]  # the messages cut there (the GID's line is whole)
    assert browser.js("document.querySelector('#check-3 ~ pre').textContent.length") == 100_000
