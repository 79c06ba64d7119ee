"""A folder served over HTTP on localhost, with byte ranges (206), for the tests of a copy read at
an https:// or http:// URL; `failing` makes the next ranged GET of each file answer 503 once (a
transient error, as a busy server gives), to count the retries it costs."""

from __future__ import annotations

import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Ranged(SimpleHTTPRequestHandler):
    def __init__(self, *args, served, **kw):
        self.served = served
        super().__init__(*args, directory=str(served.folder), **kw)

    def log_message(self, *args) -> None:  # quiet: the tests' output is theirs
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        wanted = self.headers.get("Range")
        path = Path(self.translate_path(self.path))
        if not wanted or not path.is_file():
            return super().do_GET()
        if self.served.take_failure(path.name):
            self.send_error(503, "busy")
            return
        data = path.read_bytes()
        first, _, last = wanted.removeprefix("bytes=").partition("-")
        start, end = int(first), min(int(last) + 1 if last else len(data), len(data))
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        self.send_header("Content-Length", str(end - start))
        self.end_headers()
        self.wfile.write(data[start:end])


class Served:
    """`folder` at `url` until `stop()`."""

    def __init__(self, folder: Path):
        self.folder, self._failing, self._lock = Path(folder), set(), threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Ranged, served=self))
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def failing(self, *names: str) -> None:
        """The next ranged GET of each of these files answers 503."""
        with self._lock:
            self._failing |= set(names)

    def take_failure(self, name: str) -> bool:
        with self._lock:
            if name in self._failing:
                self._failing.discard(name)
                return True
            return False

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
